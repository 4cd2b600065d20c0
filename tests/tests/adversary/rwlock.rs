//! The read-write lock in the adversary's schedule: some iterations read or write the keys
//! `rw` and `{rw}` (plain client) and `{app}:rw` (prefixed client) through
//! [`lock_runtime::RwLock`], with the same random options, API choice (guard or
//! `run_read`/`run_write`) and cuts as the mutex's iterations.
//!
//! A reader's tenure is recorded with a holder name ending in [`READER`]; the checker lets
//! two readers' tenures overlap ([`may_overlap`]), never a writer's with anyone's. A reader's
//! cut release is watched on its share key, as a mutex's on its lock key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use lock_runtime::{LockError, OnLost, ReleaseOutcome};
use tokio::time::Instant;

use super::{
    ACQUIRING, HANG, Job, Phase, Rng, TTLS_MS, Target, Tenure, WAITS_MS, Worker, cut, guarded_body,
    phase, watch_dropped_release,
};
use lock_tests::checkers::now_us;

/// What a reader's holder name ends with.
const READER: &str = "/read";

/// The read-write lock keys, with a weight each.
const TARGETS: [(Target, u64); 3] = [
    (Target::Plain("rw"), 3),
    (Target::Plain("{rw}"), 2),
    (Target::Prefixed("rw"), 2),
];

/// How often (percent) an iteration uses the read-write lock.
pub(super) const SHARE: u64 = 20;

/// Whether two tenures of one key may overlap: both readers' (of a read-write lock).
pub(super) fn may_overlap(first_holder: &str, second_holder: &str) -> bool {
    first_holder.ends_with(READER) && second_holder.ends_with(READER)
}

/// The share key of a reader `token` on the Redis key `key` (as lock-runtime names it).
fn share_key(key: &str, token: &str) -> String {
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0);
    if tagged {
        format!("~lock/share/{token}/{key}")
    } else {
        format!("~lock/share/{token}{{{key}}}")
    }
}

/// One iteration on a read-write lock: a read (70 %) or a write, by guard or by `run_*`.
pub(super) async fn iteration(worker: &Arc<Worker>, rng: &mut Rng, index: usize, iteration: u64) {
    let target = rng.weighted(&TARGETS);
    let key = target.redis_key();
    let read = rng.chance(70);
    let holder = format!(
        "{}-{index}-{iteration}{}",
        worker.name,
        if read { READER } else { "/write" }
    );
    let steps: Vec<Duration> = (0..1 + rng.below(3)).map(|_| rng.millis(0, 8)).collect();
    let ttl = Duration::from_millis(rng.pick(&TTLS_MS));
    let wait = Duration::from_millis(rng.pick(&WAITS_MS));
    let on_lost = if rng.chance(50) {
        OnLost::Cancel
    } else {
        OnLost::Continue
    };
    let client = match target {
        Target::Plain(_) => &worker.plain,
        Target::Prefixed(_) => &worker.prefixed,
    };
    let lock = client
        .rw_lock(target.key())
        .ttl(ttl)
        .wait(wait)
        .on_lost(on_lost)
        .fencing(!read && rng.chance(25));
    let started = Instant::now();
    if rng.chance(50) {
        let cut_acquire = cut(rng, 10, 50);
        let cut_body = cut(rng, 10, 20);
        let cut_release = cut(rng, 25, 3);
        // The guard's parts: its fence, token, loss and release, reader's or writer's.
        let acquired = if read {
            match phase(lock.read(), cut_acquire, wait + HANG).await {
                Phase::Done(Ok(guard)) => Phase::Done(Ok(Either::Read(guard))),
                Phase::Done(Err(err)) => Phase::Done(Err(err)),
                Phase::Cut => Phase::Cut,
                Phase::Hung => Phase::Hung,
            }
        } else {
            match phase(lock.write(), cut_acquire, wait + HANG).await {
                Phase::Done(Ok(guard)) => Phase::Done(Ok(Either::Write(guard))),
                Phase::Done(Err(err)) => Phase::Done(Err(err)),
                Phase::Cut => Phase::Cut,
                Phase::Hung => Phase::Hung,
            }
        };
        let guard = match acquired {
            Phase::Done(Ok(guard)) => guard,
            Phase::Done(Err(err)) => {
                worker.acquire_failed(&err, &key, started, wait);
                return;
            }
            Phase::Cut => {
                worker.bump("drop_acquire");
                return;
            }
            Phase::Hung => {
                worker.bump("hung");
                worker.line(format!("ADV-HUNG acquire {key} {}", now_us()));
                return;
            }
        };
        let mut tenure = Tenure::begin(worker, key.clone(), holder, guard.fence(), None, false);
        let mut detector = worker.detector.clone();
        match phase(
            guarded_body(&mut tenure, &steps, &mut detector),
            cut_body,
            HANG,
        )
        .await
        {
            Phase::Done(()) => {}
            Phase::Cut => worker.bump("drop_body"),
            Phase::Hung => worker.bump("hung"),
        }
        tenure.finish();
        tenure.lost |= guard.is_lost();
        let (watched, token) = match &guard {
            Either::Read(guard) => (share_key(&key, guard.token()), guard.token().to_owned()),
            Either::Write(guard) => (key.clone(), guard.token().to_owned()),
        };
        match phase(guard.release(), cut_release, HANG).await {
            Phase::Done(Ok(ReleaseOutcome::Released)) => {}
            Phase::Done(Ok(_)) => tenure.lost = true,
            Phase::Done(Err(err)) => {
                worker.bump("release_errors");
                worker.line(format!("ADV-RELEASE-ERROR {key} {} {err}", now_us()));
            }
            Phase::Cut => {
                worker.bump("drop_release");
                let check =
                    tokio::spawn(watch_dropped_release(worker.clone(), watched, token, ttl));
                worker.checks.lock().unwrap().push(check);
            }
            Phase::Hung => {
                worker.bump("hung");
                worker.line(format!("ADV-HUNG release {key} {}", now_us()));
            }
        }
        drop(tenure);
    } else {
        let phase_now = Arc::new(AtomicU8::new(ACQUIRING));
        let job = Job {
            worker: worker.clone(),
            key: key.clone(),
            holder,
            steps,
            phase: phase_now.clone(),
            cancels: matches!(on_lost, OnLost::Cancel),
        };
        let body_bound: Duration = job.steps.iter().sum();
        let cut_run = cut(rng, 15, 30);
        let bound = wait + body_bound + HANG;
        let outcome = if read {
            phase(lock.run_read(job.run()), cut_run, bound).await
        } else {
            phase(lock.run_write(job.run()), cut_run, bound).await
        };
        let at = phase_now.load(Ordering::SeqCst);
        worker.run_ended(outcome, at, (&key, started, wait));
    }
    tokio::time::sleep(rng.millis(0, 4)).await;
}

/// A reader's or a writer's guard.
enum Either {
    Read(lock_runtime::ReadGuard),
    Write(lock_runtime::LockGuard),
}

impl Either {
    fn fence(&self) -> Option<u64> {
        match self {
            Either::Read(_) => None,
            Either::Write(guard) => guard.fence(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Either::Read(guard) => guard.is_lost(),
            Either::Write(guard) => guard.is_lost(),
        }
    }

    async fn release(self) -> Result<ReleaseOutcome, LockError> {
        match self {
            Either::Read(guard) => guard.release().await,
            Either::Write(guard) => guard.release().await,
        }
    }
}

/// Whether a key left on the lock server after the run is a read-write lock's set of
/// readers all of whose readers' shares are gone: a reader whose release never got
/// through (cut, or given up during a fault) leaves its entry until the next reader or
/// writer of the key tidies it. Counted, not a finding.
pub(super) fn is_stale_readers(admin: &mut redis::Connection, key: &str) -> bool {
    let Some(rest) = key.strip_prefix("~lock/readers") else {
        return false;
    };
    let members: Vec<String> = redis::cmd("SMEMBERS")
        .arg(key)
        .query(admin)
        .unwrap_or_default();
    members.iter().all(|token| {
        let share = format!("~lock/share/{token}{rest}");
        !redis::cmd("EXISTS")
            .arg(&share)
            .query::<bool>(admin)
            .unwrap_or(true)
    })
}
