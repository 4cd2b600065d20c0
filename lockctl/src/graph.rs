//! `lockctl graph KEY...`: the wait-for graph from the given keys: each key's holder, and
//! the key that holder's task waits for meanwhile (as the deadlock detection recorded it,
//! once that wait has gone on past its delay), followed key by key; a chain that comes back
//! to a key already shown is a deadlock. Under each key, its waiters that hold other keys
//! meanwhile, and what they hold.

use std::collections::HashSet;

use lock_runtime::{LockClient, LockError, LockState};
use serde_json::json;

use crate::output::{Exit, Output};

/// At most this many keys are shown (the given ones and those their holders wait for).
const MAX_KEYS: usize = 64;

/// Prints one line per key, `KEY  held by WHO  waits for NEXT` (or `waits for nothing`),
/// following each holder's wait, and `KEY  waited for by WHO  who holds OTHER` for each
/// waiter that holds other keys; then `cycle: A -> B -> A` for each chain that closes.
pub(crate) async fn graph(
    client: &LockClient,
    (keys, prefix): (&[String], &str),
    out: Output,
) -> Result<Exit, LockError> {
    let mut shown: HashSet<String> = HashSet::new();
    let mut cycles = Vec::new();
    for start in keys {
        let mut chain: Vec<String> = Vec::new();
        let mut key = Some(start.clone());
        while let Some(current) = key.take() {
            if chain.contains(&current) {
                chain.push(current);
                cycles.push(chain.join(" -> "));
                break;
            }
            if shown.len() >= MAX_KEYS || !shown.insert(current.clone()) {
                break;
            }
            let state = client.inspect(&current).await?;
            out.say(line(&current, &state), || edge(&current, &state));
            for waiter in state.waiters.iter().filter(|w| !w.holds.is_empty()) {
                let holds = waiter.holds.join(", ");
                out.say(
                    format!(
                        "{current}  waited for by {}  who holds {holds}",
                        waiter.identity()
                    ),
                    || json!({ "key": &current, "waiter": &waiter.id, "holds": &waiter.holds }),
                );
            }
            key = waits_for(&state, prefix);
            chain.push(current);
        }
    }
    for cycle in &cycles {
        out.say(format!("cycle: {cycle}"), || json!({ "cycle": cycle }));
    }
    Ok(Exit::Done)
}

/// The key the holder of `state` waits for, as the application names it (the records
/// name Redis keys, the client's `prefix` included).
fn waits_for(state: &LockState, prefix: &str) -> Option<String> {
    let waits = state.holder()?.waits_for.as_ref()?;
    Some(waits.strip_prefix(prefix).unwrap_or(waits).to_owned())
}

/// `KEY  held by WHO  waits for NEXT`.
fn line(key: &str, state: &LockState) -> String {
    let Some(holder) = state.holder() else {
        return format!("{key}  free");
    };
    let waits = match &holder.waits_for {
        Some(next) => format!("waits for {next}"),
        None => "waits for nothing".to_owned(),
    };
    format!("{key}  held by {}  {waits}", holder.identity())
}

/// The JSON of one edge.
fn edge(key: &str, state: &LockState) -> serde_json::Value {
    let holder = state.holder();
    json!({
        "key": key,
        "holder": holder.map(|h| h.token.clone()),
        "waits_for": holder.and_then(|h| h.waits_for.clone()),
    })
}
