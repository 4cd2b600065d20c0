//! Checkers shared by the suites: they judge what happened, the suites make it happen.
//!
//! - [`HoldLog`]: hold intervals per key, and the pairs that overlap (two holders at once).
//! - [`FencedStore`]: storage that accepts a write only with a fencing token not below the
//!   highest it has seen, kept in a Redis hash so several processes can write to it; it
//!   counts stale writes (a token below the highest *granted*) accepted and rejected.
//! - [`OrphanCheck`]: after the holders are gone, no lock key remains and the server
//!   receives no renewal (no script call, no `PEXPIRE`) over a quiet window.
//! - [`LossClock`]: the time from a lease loss to the holder being told `Lost`.
//! - [`enter`] and [`leave`]: a count of the holders inside a critical section, kept in
//!   Redis so that holders of several processes (and foreign clients) count together.
//!
//! Times that cross processes are wall-clock microseconds ([`now_us`]): every process of a
//! suite runs on the same machine, so they share that clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::RedisServer;

/// Wall-clock microseconds since the Unix epoch (comparable across local processes).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// One holder's interval on one key, in [`now_us`] microseconds, `end` exclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub holder: String,
    pub start_us: u64,
    pub end_us: u64,
}

/// Hold intervals per key, from any number of holders (and processes: see
/// [`Hold::to_line`] / [`Hold::parse_line`]).
#[derive(Debug, Default)]
pub struct HoldLog {
    holds: Mutex<HashMap<String, Vec<Hold>>>,
}

impl Hold {
    /// `key holder start end`, for a child process to print.
    pub fn to_line(&self, key: &str) -> String {
        format!("{key} {} {} {}", self.holder, self.start_us, self.end_us)
    }

    /// The inverse of [`to_line`](Hold::to_line): `(key, hold)`.
    pub fn parse_line(line: &str) -> Option<(String, Hold)> {
        let mut parts = line.split_whitespace();
        let key = parts.next()?.to_owned();
        let holder = parts.next()?.to_owned();
        let start_us = parts.next()?.parse().ok()?;
        let end_us = parts.next()?.parse().ok()?;
        Some((
            key,
            Hold {
                holder,
                start_us,
                end_us,
            },
        ))
    }
}

impl HoldLog {
    pub fn new() -> Self {
        HoldLog::default()
    }

    /// Records that `holder` held `key` from `start_us` until `end_us`.
    pub fn record(&self, key: &str, holder: &str, start_us: u64, end_us: u64) {
        self.lock().entry(key.to_owned()).or_default().push(Hold {
            holder: holder.to_owned(),
            start_us,
            end_us: end_us.max(start_us),
        });
    }

    /// How many intervals were recorded in all.
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every pair of intervals on the same key that overlap, with the overlap in µs.
    pub fn overlaps(&self) -> Vec<(String, Hold, Hold, u64)> {
        let holds = self.lock();
        let mut found = Vec::new();
        for (key, intervals) in holds.iter() {
            let mut sorted = intervals.clone();
            sorted.sort_by_key(|hold| hold.start_us);
            for (index, first) in sorted.iter().enumerate() {
                for second in &sorted[index + 1..] {
                    if second.start_us >= first.end_us {
                        break;
                    }
                    let overlap = first.end_us.min(second.end_us) - second.start_us;
                    found.push((key.clone(), first.clone(), second.clone(), overlap));
                }
            }
        }
        found
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Hold>>> {
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What a [`FencedStore`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceStats {
    /// Writes taken.
    pub accepted: u64,
    /// Writes refused (token below the highest seen).
    pub rejected: u64,
    /// Writes with a token below the highest granted so far that were taken anyway.
    pub stale_accepted: u64,
    /// Writes with a token below the highest granted so far that were refused.
    pub stale_rejected: u64,
    /// The highest token written.
    pub last: u64,
    /// The highest token granted (as reported by holders through [`FencedStore::grant`]).
    pub granted: u64,
}

/// Storage that checks fencing tokens, as the protected resource would: a write is taken
/// only when its token is not below the highest token written so far (the same holder may
/// write repeatedly). It lives in a Redis hash, updated atomically by a script, so that
/// holders in several processes write to one store.
///
/// Holders report every token they are granted ([`grant`](Self::grant)); a write whose token
/// is below the highest granted one comes from a holder that has been superseded: stale.
pub struct FencedStore {
    client: redis::Client,
    key: String,
}

const FENCED_WRITE: &str = r"
local op = ARGV[1]
local fence = tonumber(ARGV[2])
local function get(field) return tonumber(redis.call('HGET', KEYS[1], field) or '0') end
if op == 'grant' then
  if fence > get('granted') then
    redis.call('HSET', KEYS[1], 'granted', string.format('%.0f', fence))
  end
  return 1
end
local stale = fence < get('granted')
if fence >= get('last') then
  redis.call('HSET', KEYS[1], 'last', string.format('%.0f', fence))
  redis.call('HINCRBY', KEYS[1], 'accepted', 1)
  if stale then redis.call('HINCRBY', KEYS[1], 'stale_accepted', 1) end
  return 1
end
redis.call('HINCRBY', KEYS[1], 'rejected', 1)
if stale then redis.call('HINCRBY', KEYS[1], 'stale_rejected', 1) end
return 0
";

impl FencedStore {
    /// A store kept under `key` on the Redis at `url` (use a server the fault does not hit).
    pub fn new(url: &str, key: &str) -> FencedStore {
        FencedStore {
            client: redis::Client::open(url).expect("store url"),
            key: key.to_owned(),
        }
    }

    async fn call(&self, op: &str, fence: u64) -> i64 {
        let mut connection = self
            .client
            .get_multiplexed_async_connection()
            .await
            .expect("fenced store connection");
        redis::cmd("EVAL")
            .arg(FENCED_WRITE)
            .arg(1)
            .arg(&self.key)
            .arg(op)
            .arg(fence)
            .query_async(&mut connection)
            .await
            .expect("fenced store script")
    }

    /// A holder was granted `fence`.
    pub async fn grant(&self, fence: u64) {
        self.call("grant", fence).await;
    }

    /// A holder writes with `fence`; whether the store took the write.
    pub async fn write(&self, fence: u64) -> bool {
        self.call("write", fence).await == 1
    }

    /// The counts so far.
    pub async fn stats(&self) -> FenceStats {
        let mut connection = self
            .client
            .get_multiplexed_async_connection()
            .await
            .expect("fenced store connection");
        let fields: HashMap<String, u64> = redis::cmd("HGETALL")
            .arg(&self.key)
            .query_async(&mut connection)
            .await
            .expect("fenced store stats");
        let field = |name: &str| fields.get(name).copied().unwrap_or(0);
        FenceStats {
            accepted: field("accepted"),
            rejected: field("rejected"),
            stale_accepted: field("stale_accepted"),
            stale_rejected: field("stale_rejected"),
            last: field("last"),
            granted: field("granted"),
        }
    }
}

/// What the server did for locks that should all be gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanReport {
    /// Keys matching the pattern that still exist.
    pub keys_left: Vec<String>,
    /// Script calls (`fcall`, `evalsha` and `eval`) the server received during the quiet window.
    pub scripts_in_window: u64,
    /// `PEXPIRE` calls (what a renewal runs) the server executed during the quiet window.
    pub pexpires_in_window: u64,
    /// How long the window was.
    pub window: Duration,
}

impl OrphanReport {
    /// No key left and nothing that could be a renewal received.
    pub fn is_clean(&self) -> bool {
        self.keys_left.is_empty() && self.scripts_in_window == 0 && self.pexpires_in_window == 0
    }
}

/// The no-orphan checker: after every holder of the keys matching `pattern` was dropped,
/// the keys are gone and the server receives no renewal. Renewals are scripts that run
/// `PEXPIRE`; counting script calls and `PEXPIRE`s from `INFO commandstats` over a quiet
/// window (no other client may send scripts to this server meanwhile) sees every one of
/// them without MONITOR.
pub struct OrphanCheck;

impl OrphanCheck {
    /// Watches `server` for `window`, then lists the keys matching `pattern` still there.
    pub async fn run(server: &RedisServer, pattern: &str, window: Duration) -> OrphanReport {
        let scripts = || server.script_calls() + server.calls("eval");
        let (scripts_before, pexpires_before) = (scripts(), server.calls("pexpire"));
        tokio::time::sleep(window).await;
        let scripts_in_window = scripts() - scripts_before;
        let pexpires_in_window = server.calls("pexpire") - pexpires_before;
        let keys_left: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut server.conn())
            .expect("KEYS");
        OrphanReport {
            keys_left,
            scripts_in_window,
            pexpires_in_window,
            window,
        }
    }
}

/// Time from a lease loss (the instant the lease stopped being ours: a DEL, an eviction,
/// the end of its validity) to the holder being told `Lost`.
#[derive(Debug, Clone, Copy)]
pub struct LossClock {
    lost_at: tokio::time::Instant,
}

impl LossClock {
    /// The lease was lost now.
    pub fn start() -> Self {
        LossClock {
            lost_at: tokio::time::Instant::now(),
        }
    }

    /// The lease was lost at `instant`.
    pub fn at(instant: tokio::time::Instant) -> Self {
        LossClock { lost_at: instant }
    }

    pub fn lost_at(&self) -> tokio::time::Instant {
        self.lost_at
    }

    /// Awaits `told` (a guard's `lost()`, a body's cancellation...) for at most `bound` past
    /// the loss; the time from the loss to it, or `None` when it did not come in time.
    pub async fn until<F: std::future::Future>(
        &self,
        told: F,
        bound: Duration,
    ) -> Option<Duration> {
        let deadline = self.lost_at + bound;
        match tokio::time::timeout_at(deadline, told).await {
            Ok(_) => Some(self.lost_at.elapsed()),
            Err(_) => None,
        }
    }

    /// The time from the loss to `instant` (zero when it came first).
    pub fn to(&self, instant: tokio::time::Instant) -> Duration {
        instant.saturating_duration_since(self.lost_at)
    }
}

/// Milliseconds with one decimal, for figures.
pub fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// Enters the critical-section count kept in Redis (key `inside`): how many holders are
/// inside with the caller. A count above `limit` (1 for a lock, the permits for a semaphore)
/// is a holder too many, also counted in `overlaps` (the key the foreign clients' scripts of
/// the suites count in too).
pub async fn enter(redis: &mut redis::aio::MultiplexedConnection, limit: i64) -> i64 {
    let inside: i64 = redis::cmd("INCR")
        .arg("inside")
        .query_async(redis)
        .await
        .expect("INCR inside");
    if inside > limit {
        let _: i64 = redis::cmd("INCR")
            .arg("overlaps")
            .query_async(redis)
            .await
            .expect("INCR overlaps");
    }
    inside
}

/// Leaves the count [`enter`] entered.
pub async fn leave(redis: &mut redis::aio::MultiplexedConnection) {
    let _: i64 = redis::cmd("DECR")
        .arg("inside")
        .query_async(redis)
        .await
        .expect("DECR inside");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_holds_are_found_and_adjacent_ones_are_not() {
        let log = HoldLog::new();
        log.record("k", "a", 0, 10);
        log.record("k", "b", 10, 20);
        log.record("j", "a", 0, 10);
        assert!(log.overlaps().is_empty());
        log.record("k", "c", 15, 30);
        let found = log.overlaps();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].3, 5);
        let (key, hold) = Hold::parse_line(&found[0].1.to_line("k")).unwrap();
        assert_eq!((key.as_str(), hold), ("k", found[0].1.clone()));
    }
}
