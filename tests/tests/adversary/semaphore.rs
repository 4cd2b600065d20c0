//! The semaphore's part of the adversary: some iterations take a permit of [`KEY`]
//! (acquire/release with cuts, `run`, or the attribute) instead of a lock, under the same
//! faults; each permit's tenure is recorded as an `ADV-SEM` line, and the parent checks
//! that no more than [`PERMITS`] tenures whose lease was not lost were ever open at once.
//! In Redlock mode too, where each permit is a slot: a Redlock lock of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::{LockError, OnLost, ReleaseOutcome, current_lock, distributed_lock};
use lock_tests::checkers::now_us;
use tokio::time::Instant;

use super::{HANG, Phase, Rng, TTLS_MS, WAITS_MS, Worker, cut, phase};

/// The semaphore's key (its own: a lock on it would meet a sorted set).
pub(super) const KEY: &str = "s";
/// Its permits: every holder uses the same count.
pub(super) const PERMITS: u32 = 2;
/// How often an iteration takes a permit instead of a lock.
pub(super) const PERCENT: u64 = 15;

/// One permit's tenure: from the return of acquire to the end (or drop) of the body;
/// recorded as `ADV-SEM <key> <holder> <start_us> <end_us> <lost>` when dropped.
struct Tenure {
    worker: Arc<Worker>,
    holder: String,
    start_us: u64,
    end_us: Option<u64>,
    lost: bool,
}

impl Tenure {
    fn begin(worker: &Arc<Worker>, holder: String) -> Tenure {
        worker.bump("sem_acquisitions");
        Tenure {
            worker: worker.clone(),
            holder,
            start_us: now_us(),
            end_us: None,
            lost: false,
        }
    }
}

impl Drop for Tenure {
    fn drop(&mut self) {
        // Inside `run` or the attribute, the permit is the task's current lock.
        let lost = self.lost || current_lock().is_some_and(|current| current.is_lost());
        let end_us = self.end_us.unwrap_or_else(now_us);
        self.worker.line(format!(
            "ADV-SEM {KEY} {} {} {end_us} {}",
            self.holder,
            self.start_us,
            u8::from(lost)
        ));
    }
}

/// The body of `run` and the attribute: its tenure lives inside it, so a drop ends it.
async fn body(worker: Arc<Worker>, holder: String, steps: Vec<Duration>) -> Result<(), LockError> {
    let tenure = Tenure::begin(&worker, holder);
    for step in steps {
        tokio::time::sleep(step).await;
    }
    drop(tenure);
    Ok(())
}

#[distributed_lock(key = "s", permits = 2, ttl = "3s", wait = "2s")]
async fn attribute_on_s(
    worker: Arc<Worker>,
    holder: String,
    steps: Vec<Duration>,
) -> Result<(), LockError> {
    body(worker, holder, steps).await
}

/// One semaphore iteration of a task: acquire / body / release with each phase cut on its
/// own, or `run` or the attribute cut from outside.
pub(super) async fn iteration(worker: &Arc<Worker>, rng: &mut Rng, holder: String) {
    let steps: Vec<Duration> = (0..1 + rng.below(3)).map(|_| rng.millis(0, 8)).collect();
    let ttl = Duration::from_millis(rng.pick(&TTLS_MS));
    let wait = Duration::from_millis(rng.pick(&WAITS_MS));
    let on_lost = if rng.chance(50) {
        OnLost::Cancel
    } else {
        OnLost::Continue
    };
    let semaphore = worker
        .plain
        .semaphore(KEY, PERMITS)
        .ttl(ttl)
        .wait(wait)
        .on_lost(on_lost);
    let started = Instant::now();
    let api = rng.below(10);
    if api < 6 {
        let guard = match phase(semaphore.acquire(), cut(rng, 10, 50), wait + HANG).await {
            Phase::Done(Ok(guard)) => guard,
            Phase::Done(Err(err)) => {
                worker.acquire_failed(&err, KEY, started, wait);
                return;
            }
            Phase::Cut => return worker.bump("sem_drop_acquire"),
            Phase::Hung => {
                worker.bump("hung");
                return worker.line(format!("ADV-HUNG sem-acquire {KEY} {}", now_us()));
            }
        };
        let mut tenure = Tenure::begin(worker, holder);
        let steps_done = async {
            for step in &steps {
                tokio::time::sleep(*step).await;
            }
        };
        if let Phase::Cut = phase(steps_done, cut(rng, 10, 20), HANG).await {
            worker.bump("sem_drop_body");
        }
        tenure.end_us = Some(now_us());
        tenure.lost = guard.is_lost();
        match phase(guard.release(), cut(rng, 25, 3), HANG).await {
            Phase::Done(Ok(ReleaseOutcome::Released)) => {}
            // Its lease had ended by the release: lost during the tenure.
            Phase::Done(Ok(_)) => tenure.lost = true,
            Phase::Done(Err(_)) => worker.bump("release_errors"),
            Phase::Cut => worker.bump("sem_drop_release"),
            Phase::Hung => {
                worker.bump("hung");
                worker.line(format!("ADV-HUNG sem-release {KEY} {}", now_us()));
            }
        }
        drop(tenure);
        return;
    }
    let (outcome, wait) = if api >= 8 {
        let attribute = attribute_on_s(worker.clone(), holder, steps);
        let outcome = phase(attribute, cut(rng, 15, 30), Duration::from_secs(2) + HANG).await;
        (outcome, Duration::from_secs(2))
    } else {
        let run = semaphore.run(body(worker.clone(), holder, steps));
        (phase(run, cut(rng, 15, 30), wait + HANG * 2).await, wait)
    };
    match outcome {
        Phase::Done(Ok(())) => {}
        Phase::Done(Err(LockError::Lost { .. })) => worker.bump("lost"),
        Phase::Done(Err(err)) => worker.acquire_failed(&err, KEY, started, wait),
        Phase::Cut => worker.bump("sem_drop_run"),
        Phase::Hung => {
            worker.bump("hung");
            worker.line(format!("ADV-HUNG sem-run {KEY} {}", now_us()));
        }
    }
}

/// A permit's tenure as the parent reads it back.
#[derive(Debug, Clone)]
pub(super) struct SemHold {
    holder: String,
    start_us: u64,
    end_us: u64,
    lost: bool,
}

/// An `ADV-SEM` line: its key and tenure.
pub(super) fn parse_line(line: &str) -> Option<(String, SemHold)> {
    let rest = &line[line.find("ADV-SEM ")? + "ADV-SEM ".len()..];
    let parts: Vec<&str> = rest.split_whitespace().collect();
    if parts.len() != 5 {
        return None;
    }
    Some((
        parts[0].to_owned(),
        SemHold {
            holder: parts[1].to_owned(),
            start_us: parts[2].parse().ok()?,
            end_us: parts[3].parse().ok()?,
            lost: parts[4] == "1",
        },
    ))
}

/// The invariant: at the start of every tenure, the tenures open then whose lease was not
/// lost, itself included, are at most [`PERMITS`]. Returns the most seen at once and the
/// findings.
pub(super) fn check(holds: &mut HashMap<String, Vec<SemHold>>) -> (usize, Vec<String>) {
    let mut most = 0;
    let mut findings = Vec::new();
    for (key, tenures) in holds.iter_mut() {
        tenures.sort_by_key(|hold| hold.start_us);
        for (index, hold) in tenures.iter().enumerate() {
            let open: Vec<&SemHold> = tenures[..index]
                .iter()
                .filter(|earlier| earlier.end_us > hold.start_us && !earlier.lost)
                .collect();
            let at_once = open.len() + 1;
            most = most.max(at_once);
            if at_once > PERMITS as usize {
                let holders: Vec<String> = open
                    .iter()
                    .map(|earlier| {
                        format!(
                            "{} [{}..{}]",
                            earlier.holder, earlier.start_us, earlier.end_us
                        )
                    })
                    .collect();
                findings.push(format!(
                    "{key}: {} holders at once with {PERMITS} permits: {} from {} while {holders:?}",
                    at_once, hold.holder, hold.start_us
                ));
            }
        }
    }
    (most, findings)
}

/// Counts the semaphore tenures per key, for the summary.
pub(super) fn per_key(holds: &HashMap<String, Vec<SemHold>>) -> BTreeMap<&str, usize> {
    holds
        .iter()
        .map(|(key, tenures)| (key.as_str(), tenures.len()))
        .collect()
}
