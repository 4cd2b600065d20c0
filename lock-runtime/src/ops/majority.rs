//! The operator's view in Redlock mode: every master's own state of a lock and the
//! majority's verdict ([`LockClient::inspect`]), and a force-release on every master
//! ([`LockClient::force_release`]). Each master is asked at once, within the node timeout.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use futures_util::future::join_all;

use crate::client::LockClient;
use crate::connection::Connection;
use crate::error::LockError;
use crate::ops::force_release::{ForcedRelease, force_release_on};
use crate::ops::inspect::{Holder, LockState, inspect_on};
use crate::scripts::KeyNames;
use crate::topology::redlock::{Redlock, no_quorum};

/// Reads the lock on every master: the majority's verdict, with each master's state.
pub(crate) async fn inspect(
    client: &LockClient,
    redlock: &Redlock,
    names: &KeyNames,
) -> Result<LockState, LockError> {
    let masters = ask_each(client, redlock, names, |connection| {
        inspect_on(names, connection)
    })
    .await?;
    Ok(verdict(names.lock(), masters, redlock.quorum))
}

/// Takes the lock away on every master: the holders removed anywhere, once each.
pub(crate) async fn force_release(
    client: &LockClient,
    redlock: &Redlock,
    names: &KeyNames,
) -> Result<ForcedRelease, LockError> {
    let released = ask_each(client, redlock, names, |connection| {
        force_release_on(client, names, connection)
    })
    .await?;
    let mut merged = ForcedRelease {
        key: names.lock().to_owned(),
        removed: Vec::new(),
        handover_restarted: false,
        woken: None,
        granted: false,
    };
    for release in released.into_iter().flatten() {
        for holder in release.removed {
            if !merged.removed.iter().any(|seen| seen.token == holder.token) {
                merged.removed.push(holder);
            }
        }
        merged.handover_restarted |= release.handover_restarted;
    }
    Ok(merged)
}

/// Asks every master about the lock `names` with `ask`, each within the node timeout: per
/// master, in the order of the client's URLs, its answer (`None` for a master that
/// failed), once a majority answered. A key that is no lock on some master is that
/// master's error; fewer answers than a majority is `NoQuorum`, naming what the others
/// said.
async fn ask_each<'a, T, F, Fut>(
    client: &'a LockClient,
    redlock: &Redlock,
    names: &KeyNames,
    ask: F,
) -> Result<Vec<Option<T>>, LockError>
where
    F: Fn(Connection) -> Fut,
    Fut: Future<Output = Result<T, LockError>> + 'a,
{
    let limit = redlock.node_timeout.max(Duration::from_millis(1));
    let replies = join_all(client.nodes().iter().map(|node| {
        let asked = ask(node.clone());
        async move {
            tokio::time::timeout(limit, asked)
                .await
                .unwrap_or_else(|_| {
                    Err(LockError::config(format!(
                        "no answer within the node timeout ({limit:?})"
                    )))
                })
        }
    }))
    .await;
    let mut failures = Vec::new();
    let mut answers = Vec::with_capacity(replies.len());
    for (url, reply) in redlock.urls.iter().zip(replies) {
        match reply {
            Ok(answer) => answers.push(Some(answer)),
            Err(err @ LockError::InvalidKey { .. }) => return Err(err),
            Err(err) => {
                failures.push(format!("{url}: {}", err.cause()));
                answers.push(None);
            }
        }
    }
    no_quorum(&failures, redlock, names.lock()).map_or(Ok(answers), Err)
}

/// The majority's view of the masters' states: the token at least `quorum` masters hold
/// (its ttl, how long that many still hold it), and the fence that many counters reached.
/// Redlock has no queue across masters: no waiters.
fn verdict(key: &str, masters: Vec<Option<LockState>>, quorum: usize) -> LockState {
    let answered: Vec<&LockState> = masters.iter().flatten().collect();
    let mut ttls: HashMap<&str, Vec<Duration>> = HashMap::new();
    for holder in answered.iter().filter_map(|state| state.holder()) {
        if let Some(ttl) = holder.ttl {
            ttls.entry(&holder.token).or_default().push(ttl);
        }
    }
    let holder = ttls
        .into_iter()
        .find_map(|(token, ttls)| Some((token, nth_largest(ttls, quorum)?)))
        .map(|(token, ttl)| Holder::exclusive(token.to_owned(), Some(ttl)));
    let fences = answered.iter().filter_map(|state| state.fence).collect();
    LockState {
        key: key.to_owned(),
        holders: holder.into_iter().collect(),
        permits: None,
        handover: None,
        fence: nth_largest(fences, quorum),
        waiters: Vec::new(),
        queued: 0,
        server_time: answered
            .first()
            .map_or_else(SystemTime::now, |state| state.server_time),
        masters,
    }
}

/// The `n`th largest of `values` (1: the largest), if there are that many.
fn nth_largest<T: Ord + Copy>(mut values: Vec<T>, n: usize) -> Option<T> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(n.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::nth_largest;

    #[test]
    fn the_nth_largest_value_is_what_a_majority_reached() {
        assert_eq!(nth_largest(vec![3, 9, 5], 2), Some(5));
        assert_eq!(nth_largest(vec![3], 2), None);
        assert_eq!(nth_largest(Vec::<u8>::new(), 0), None);
    }
}
