//! `lockctl list PATTERN`: the locks whose keys match a glob pattern, by SCAN on every
//! server that holds keys, bounded in locks and in SCAN calls. Only our locks are listed:
//! not the queues' and fence counters' keys, not other keys (another type, a string
//! without expiry, a string whose value is no token of ours).

use lock_runtime::{Holder, LockClient, LockError, LockState};
use serde_json::json;

use crate::output::Output;
use crate::target::{Server, Target, backend};

/// At most this many SCAN calls for one `list`.
const MAX_SCAN_CALLS: usize = 10_000;
/// Keys asked for per SCAN call.
const SCAN_COUNT: usize = 1000;

/// Prints the locks whose keys match `pattern`, one line each, then a count: from the one
/// server, every master of a cluster in turn, or Sentinel's primary.
pub(crate) async fn list(
    client: &LockClient,
    target: &Target,
    (pattern, limit): (&str, u64),
    out: Output,
) -> Result<(), LockError> {
    let full_pattern = format!("{}{pattern}", glob_escape(&target.prefix));
    let mut listing = Listing {
        client,
        target,
        out,
        limit,
        calls: 0,
        locks: 0,
        skipped: 0,
    };
    let mut stopped = None;
    for server in target.servers().await? {
        stopped = listing.scan(server, &full_pattern).await?;
        if stopped.is_some() {
            break;
        }
    }
    let (locks, skipped) = (listing.locks, listing.skipped);
    let text = match &stopped {
        Some(why) => format!("{} ({why}; more may match)", locks_n(locks)),
        None => format!("{} ({skipped} other keys matched)", locks_n(locks)),
    };
    out.say(
        text,
        || json!({ "locks": locks, "other_keys": skipped, "stopped": stopped }),
    );
    Ok(())
}

/// A `list` in progress: what it printed and passed over so far, within its bounds.
struct Listing<'a> {
    client: &'a LockClient,
    target: &'a Target,
    out: Output,
    limit: u64,
    calls: usize,
    locks: u64,
    skipped: u64,
}

impl Listing<'_> {
    /// Scans `server` for `pattern`, printing each lock; `Some(why)` when a bound stopped
    /// the listing.
    async fn scan(&mut self, server: Server, pattern: &str) -> Result<Option<String>, LockError> {
        let mut connection = server.connect().await?;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            self.calls += 1;
            for key in keys {
                if self.show(key).await? && self.locks == self.limit {
                    return Ok(Some(format!("stopped at --limit {}", self.limit)));
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok(None);
            }
            if self.calls == MAX_SCAN_CALLS {
                return Ok(Some(format!("stopped after {} SCAN calls", self.calls)));
            }
        }
    }

    /// Prints `key` when it is one of our locks (true), else counts it as passed over.
    async fn show(&mut self, key: Vec<u8>) -> Result<bool, LockError> {
        let Some(key) = String::from_utf8(key)
            .ok()
            .and_then(|key| key.strip_prefix(&self.target.prefix).map(str::to_owned))
        else {
            self.skipped += 1;
            return Ok(false);
        };
        match self.client.inspect(&key).await {
            Ok(state) if is_our_lock(&state) => {
                self.locks += 1;
                self.out
                    .say(summary(&key, &state), || crate::json::state(&state));
                Ok(true)
            }
            // Another type, an auxiliary key, a string without expiry or with a value
            // that is no token of ours: not one of our locks.
            Ok(_) | Err(LockError::InvalidKey { .. }) => {
                self.skipped += 1;
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }
}

/// `1 lock`, `2 locks`.
fn locks_n(count: u64) -> String {
    format!("{count} lock{}", if count == 1 { "" } else { "s" })
}

/// Whether a key this client read is one of our locks: held with an expiry by tokens of
/// ours, or being handed over.
pub(crate) fn is_our_lock(state: &LockState) -> bool {
    state.handover.is_some()
        || (state.holders.iter().any(|holder| holder.ttl.is_some())
            && state.holders.iter().all(Holder::is_ours))
}

/// One line of `list`: `KEY  held by host-a pid 4711 shop `shop::buy` for 41.020s  ttl
/// 9.874s  fence F  waiting N  token TOKEN` (a holder whose token names no process: `held
/// by TOKEN`).
fn summary(key: &str, state: &LockState) -> String {
    let mut line = key.to_owned();
    match state.holder() {
        Some(holder) => {
            match holder.identity().process() {
                Some(process) => {
                    let held = process.age(state.server_time);
                    line.push_str(&format!(
                        "  held by {process} for {}.{:03}s",
                        held.as_secs(),
                        held.subsec_millis()
                    ));
                }
                None => line.push_str(&format!("  held by {}", holder.token)),
            }
            if let Some(ttl) = holder.ttl {
                line.push_str(&format!(
                    "  ttl {}.{:03}s",
                    ttl.as_secs(),
                    ttl.subsec_millis()
                ));
            }
            if state.holders.len() > 1 {
                line.push_str(&format!(" and {} more", state.holders.len() - 1));
            }
        }
        None => line.push_str("  hand-over"),
    }
    if let Some(fence) = state.fence {
        line.push_str(&format!("  fence {fence}"));
    }
    line.push_str(&format!("  waiting {}", state.queued));
    if let Some(holder) = state
        .holder()
        .filter(|holder| holder.identity().process().is_some())
    {
        line.push_str(&format!("  token {}", holder.token));
    }
    line
}

/// `text` as a glob that matches only itself (SCAN MATCH's `*`, `?`, `[`, `]`, `\`).
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}
