//! A job scheduled on every replica that runs once per tick (ShedLock's use case).
//!
//! Every replica runs the same schedule (a `tokio` interval) and, at each tick, calls
//! [`run_tick`] under
//! `#[distributed_lock(key = "job:<job>", ttl = "1s", wait = "0s", hold_at_least = "700ms")]`:
//! the first replica gets the lock and runs the job; the others are told `Busy` and skip
//! the tick. The job itself takes a few milliseconds, so without `hold_at_least` the key
//! would be gone long before a replica whose schedule fires a little late (its clock is
//! behind, it was busy) asks for it, and that replica would run the tick a second time.
//! `hold_at_least` keeps the key until 700 ms after it was taken, however soon the job
//! ended; `ttl` bounds how long it is kept should the replica crash mid-job. Keep
//! `hold_at_least` below the period: a key still held when the next tick fires makes every
//! replica skip that tick.
//!
//! Redis keys: the lock `job:<job>`, and per tick a counter `job-runs:<job>:<tick>` that
//! each run of the job increments (so a tick run twice shows as 2).

use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};

use crate::store::Store;

/// How often the job is scheduled.
pub const PERIOD: Duration = Duration::from_secs(1);

/// The Redis key counting the runs of `job` at `tick`.
pub fn runs_key(job: &str, tick: u64) -> String {
    format!("job-runs:{job}:{tick}")
}

/// Why a tick failed (a tick that another replica ran is not a failure).
#[derive(Debug)]
pub enum JobError {
    /// The lock failed for another reason than `Busy` (Redis down, lease lost).
    Lock(LockError),
    /// The job's own Redis command failed.
    Store(redis::RedisError),
}

impl From<LockError> for JobError {
    fn from(err: LockError) -> Self {
        JobError::Lock(err)
    }
}

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobError::Lock(err) => write!(f, "{err}"),
            JobError::Store(err) => write!(f, "job store: {err}"),
        }
    }
}

impl std::error::Error for JobError {}

/// What one replica did at one tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickOutcome {
    /// This replica ran the job; `runs` is how many runs the tick has had (1 unless a
    /// tick ran twice).
    Ran {
        /// The tick's run count after this run.
        runs: i64,
    },
    /// Another replica holds the job's lock: it ran (or runs) this tick.
    Skipped,
}

/// The job, once per tick across every replica: here it only counts its runs of `tick`.
// README:start
#[distributed_lock(key = "job:<job>", ttl = "1s", wait = "0s", hold_at_least = "700ms")]
pub async fn run_tick(store: &Store, job: &str, tick: u64) -> Result<i64, JobError> {
    // ... the job's work; it may end at once: the key stays 700 ms after it was taken ...
    store
        .incr(&runs_key(job, tick))
        .await
        .map_err(JobError::Store)
}

/// One replica's schedule: `ticks` ticks, one every [`PERIOD`] from `first`; at each,
/// the job runs here or is skipped because another replica has it.
pub async fn replica(
    store: &Store,
    job: &str,
    first: tokio::time::Instant,
    ticks: u64,
    mut report: impl FnMut(u64, TickOutcome),
) -> Result<(), JobError> {
    let mut schedule = tokio::time::interval_at(first, PERIOD);
    for tick in 0..ticks {
        schedule.tick().await;
        let outcome = match run_tick(store, job, tick).await {
            Ok(runs) => TickOutcome::Ran { runs },
            Err(JobError::Lock(LockError::Busy { .. })) => TickOutcome::Skipped,
            Err(err) => return Err(err),
        };
        report(tick, outcome);
    }
    Ok(())
}
// README:end
