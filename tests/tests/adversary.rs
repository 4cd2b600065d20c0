//! The randomized adversarial test (issue 13): several processes, many tasks, colliding key
//! shapes, a foreign client (redis-py), futures dropped at random points, and a nemesis that
//! restarts, pauses, resets, blackholes and stalls the lock server; then the invariants.
//!
//! ```text
//! ADVERSARY_SECS=600 ADVERSARY_SEED=12345 \
//!     cargo test -p lock-tests --test adversary -- --nocapture
//! ```
//!
//! `adversary_redlock` runs the same against three Redlock masters (each behind its own
//! fault proxy; each fault hits one master, a minority), without the redis-py client (its
//! `Lock` takes one server, not a majority); the invariants are the same, fences, readers
//! and writers, and the semaphore's permits (slots there) included.
//!
//! The seed is printed first (random unless `ADVERSARY_SEED` is set); the summary line
//! `ADVERSARY-SUMMARY` last. The seed fixes every choice (keys, options, cut points, faults),
//! not the interleaving of processes, so a replay finds the same kind of trouble, not the
//! same history.
//!
//! How it works:
//! - The parent starts a lock server (AOF, `appendfsync always`: keys survive a restart, so
//!   mutual exclusion must hold across restarts), a separate detector server, and a fault
//!   proxy in front of the lock server. Every lock client connects through the proxy.
//! - [`WORKERS`] child processes (this test again, with a role) run [`TASKS`] tasks each.
//!   Each iteration picks a key shape ([`TARGETS`]), an API (acquire/release, `run`, the
//!   attribute), a ttl, a wait, `on_lost`, and may cut the acquire, the body or the release
//!   (a `timeout` of zero — one poll — or a few milliseconds).
//! - One task in four of each child sometimes takes two or three of the keys `n0`, `n1`,
//!   `n2` in a random order, each inside the guarded body of the one before, with an inner
//!   wait far longer than the deadlock detection's delay (100 ms here): real deadlock
//!   cycles form, within a process and across processes (`adversary/nested.rs`), on the
//!   single server and over the Redlock masters (`ADVERSARY_REDLOCK_NESTS=0` leaves them
//!   out there).
//! - A python3 process holds redis-py `Lock`s on the key `f`, which the children lock too.
//! - Each body records its tenure: the wall-clock interval from the return of acquire to the
//!   end of the body (recorded in a destructor, so a dropped body ends when it is dropped,
//!   before its release is sent), and whether the lease was lost. On the detector server it
//!   writes `SET reg:<key> <holder> GET` at entry and at each await point, so a holder sees
//!   who else wrote in between (the witness).
//! - The parent's nemesis faults the lock server at random times, each fault shorter than
//!   the smallest ttl.
//!
//! Invariants (each a failure):
//! - no two tenures on one Redis key overlap unless the earlier holder lost its lease
//!   (a dropped body cannot cause a false overlap: its tenure ends before its release),
//!   or both are readers of a read-write lock (the keys `rw`, `{rw}`, `{app}:rw`, see
//!   `adversary/rwlock.rs`): a writer overlaps no reader and no writer;
//! - a body the library cancels at a loss (`run` or the attribute, `on_lost = cancel`) takes
//!   no step (no detector write) once its lease reads lost: a holder starved past its
//!   validity point is cancelled before its next step;
//! - fencing tokens of successive tenures on a key increase;
//! - never more holders of the semaphore `s` (2 permits, taken in 15 % of the iterations,
//!   `adversary/semaphore.rs`) at once than it has permits, unless a
//!   holder's lease was lost;
//! - no false deadlock: every `LockError::Deadlock` names a cycle that the workers' records
//!   show standing at the error's time (each key held by a task of the named process that
//!   waited for the next key named, the last one held by the victim);
//! - no nested wait runs out its 20 s wait while its window held a fault-free second (a
//!   standing cycle must be found by then);
//! - no acquire fails with `Backend` while more than a second of its wait is left (a fault
//!   here is always shorter than the wait: a waiter must ride it out);
//! - no lock stays held by a token whose release future was dropped for 700 ms or more,
//!   outside any fault;
//! - no phase hangs (an uncut acquire past wait + 10 s, an uncut release past 10 s), every
//!   task finishes;
//! - after the last fault and the longest ttl: the lock server holds no key (fence counters
//!   excepted), no pub/sub channel and no shard channel is subscribed (but a client's notice
//!   channel, which it keeps for its life once it renewed a lease), and no client holds a
//!   lease or a waiter.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use lock_runtime::{
    Config, CurrentLock, LockClient, LockError, OnLost, ReleaseOutcome, current_lock,
    distributed_lock,
};
use lock_tests::checkers::now_us;
use lock_tests::proxy::{Direction, FaultProxy};
use lock_tests::{RedisServer, child};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// Nested locks in random orders, and the deadlock detection's checker.
#[path = "adversary/nested.rs"]
mod nested;
/// The read-write lock's part of the schedule and of the checker.
#[path = "adversary/rwlock.rs"]
mod rwlock;
#[path = "adversary/semaphore.rs"]
mod semaphore;

const TEST: &str = "adversary";
const WORKERS: usize = 3;
const TASKS: usize = 24;
const TTLS_MS: [u64; 3] = [2000, 3000, 4000];
const LONGEST_TTL: Duration = Duration::from_millis(4000);
const WAITS_MS: [u64; 4] = [0, 300, 2000, 3000];
/// An uncut phase that takes this much longer than it may is hung.
const HANG: Duration = Duration::from_secs(10);
/// How close to its deadline a waiter may give up with `Backend`.
const EARLY: Duration = Duration::from_secs(1);
/// How long a lock may stay held by the token of a dropped release, outside faults, before
/// it counts as left held.
const LEAK: Duration = Duration::from_millis(700);
/// How long after its end a fault still excuses a slow release (the clients reconnect).
const FAULT_SHADOW_US: u64 = 600_000;

/// How long a release keeps trying before it gives up and leaves the lease to its ttl
/// (lock-runtime's `RELEASE_BUDGET`; the lease's validity point can end it sooner).
const RELEASE_BUDGET: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const ITERATIONS_PER_TASK: u64 = 1_000_000;
/// How often a detector write is tried before the worker reports the detector failed.
const DETECTOR_ATTEMPTS: u32 = 20;

const ACQUIRING: u8 = 0;
const HOLDING: u8 = 1;
const RELEASING: u8 = 2;

/// A lock as a task names it: on the plain client, or on the client with the `{app}:`
/// prefix.
#[derive(Debug, Clone, Copy)]
enum Target {
    Plain(&'static str),
    Prefixed(&'static str),
}

const PREFIX: &str = "{app}:";

/// How long a Redlock master may take to answer, in the Redlock mode.
const REDLOCK_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// A lock client's configuration on `url`: one server, or in Redlock mode the masters'
/// comma-separated URLs.
fn lock_config(url: &str, redlock: bool) -> Config {
    if redlock {
        // Generous against a loaded machine, and still far below the smallest ttl.
        Config::redlock(url.split(',')).node_timeout(REDLOCK_NODE_TIMEOUT)
    } else {
        Config::single(url)
    }
    .deadlock_detection(nested::DELAY)
    .connect_timeout(CONNECT_TIMEOUT)
}

/// Key shapes whose auxiliary names may collide: `x` and `{x}`, `{x}:queue` and `{x}:fence`
/// (what `x`'s queue and fence counter are called), `{app}:k` and `{app}:k:queue`; `y` is a
/// bystander; `f` is shared with redis-py. With a weight each: `{x}:queue` and `{x}:fence`
/// make `x` fail outright while they are held, so they come less often than `x` and `{x}`.
const TARGETS: [(Target, u64); 8] = [
    (Target::Plain("x"), 6),
    (Target::Plain("{x}"), 6),
    (Target::Plain("{x}:queue"), 1),
    (Target::Plain("{x}:fence"), 1),
    (Target::Plain("y"), 2),
    (Target::Plain("f"), 3),
    (Target::Prefixed("k"), 3),
    (Target::Prefixed("k:queue"), 2),
];

impl Target {
    fn redis_key(self) -> String {
        match self {
            Target::Plain(key) => key.to_owned(),
            Target::Prefixed(key) => format!("{PREFIX}{key}"),
        }
    }

    fn key(self) -> &'static str {
        match self {
            Target::Plain(key) | Target::Prefixed(key) => key,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Randomness: reproducible, no crate.

struct Rng(u64);

fn splitmix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[usize::try_from(self.below(items.len() as u64)).unwrap()]
    }

    fn weighted<T: Copy>(&mut self, items: &[(T, u64)]) -> T {
        let mut left = self.below(items.iter().map(|(_, weight)| weight).sum());
        for (item, weight) in items {
            if left < *weight {
                return *item;
            }
            left -= weight;
        }
        items[0].0
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
}

// ---------------------------------------------------------------------------------------
// The worker process.

/// What one worker process shares between its tasks.
struct Worker {
    name: String,
    plain: LockClient,
    prefixed: LockClient,
    detector: MultiplexedConnection,
    /// The lock server without the proxy, for the leak checks (reads only).
    direct: redis::Client,
    stop: Instant,
    /// Lines for the parent (holds, findings), printed at the end.
    lines: Mutex<Vec<String>>,
    /// Whether its tasks take nested locks (see [`nests_in`]).
    nests: bool,
    counters: Mutex<BTreeMap<&'static str, u64>>,
    /// Tenures open now in this process, per Redis key (a lock passed between local tasks
    /// may keep its token: the leak check does not judge a key held locally).
    local: Mutex<HashMap<String, usize>>,
    checks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Worker {
    fn bump(&self, counter: &'static str) {
        *self.counters.lock().unwrap().entry(counter).or_default() += 1;
    }

    fn line(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }

    fn local(&self, key: &str, delta: isize) -> usize {
        let mut local = self.local.lock().unwrap();
        let count = local.entry(key.to_owned()).or_default();
        *count = count.saturating_add_signed(delta);
        *count
    }

    /// Counts how a guarded run ended, in phase `at` (its error judged as
    /// [`acquire_failed`](Self::acquire_failed) does while it was acquiring).
    fn run_ended(
        &self,
        outcome: Phase<Result<(), LockError>>,
        at: u8,
        (key, started, wait): (&str, Instant, Duration),
    ) {
        match outcome {
            Phase::Done(Ok(())) => {}
            Phase::Done(Err(LockError::Lost { .. })) => self.bump("lost"),
            Phase::Done(Err(err)) if at == ACQUIRING => {
                self.acquire_failed(&err, key, started, wait);
            }
            Phase::Done(Err(err)) => {
                self.bump("other_errors");
                self.line(format!("ADV-OTHER {key} {} {err}", now_us()));
            }
            Phase::Cut => self.bump(match at {
                ACQUIRING => "drop_acquire",
                HOLDING => "drop_body",
                _ => "drop_release",
            }),
            Phase::Hung => {
                self.bump("hung");
                self.line(format!("ADV-HUNG run {key} {} phase {at}", now_us()));
            }
        }
    }

    /// Judges an error from acquire (the body did not run).
    fn acquire_failed(&self, err: &LockError, key: &str, started: Instant, wait: Duration) {
        match err {
            LockError::Busy { .. } => self.bump("busy"),
            LockError::Timeout { .. } => self.bump("timeout"),
            // In Redlock mode a fault hits one master (a minority): no majority answering
            // is judged as a Backend error is.
            LockError::Backend { .. } | LockError::NoQuorum { .. } => {
                self.bump("backend");
                let after = started.elapsed();
                if after + EARLY < wait {
                    self.bump("early_backend");
                    self.line(format!(
                        "ADV-EARLY {key} {} {} {} {err}",
                        now_us(),
                        wait.as_millis(),
                        after.as_millis()
                    ));
                }
            }
            _ => {
                self.bump("other_errors");
                self.line(format!("ADV-OTHER {key} {} {err}", now_us()));
            }
        }
    }
}

/// One tenure: from the return of acquire to the end (or drop) of the body. Recorded when
/// dropped.
struct Tenure {
    worker: Arc<Worker>,
    key: String,
    holder: String,
    start_us: u64,
    end_us: Option<u64>,
    fence: Option<u64>,
    probe: Option<CurrentLock>,
    /// The library cancels this body when its lease is lost (`run` or the attribute with
    /// `on_lost = cancel`): it must take no step once the lease reads lost.
    cancels: bool,
    lost: bool,
    saw: Vec<String>,
}

impl Tenure {
    fn begin(
        worker: &Arc<Worker>,
        key: String,
        holder: String,
        fence: Option<u64>,
        probe: Option<CurrentLock>,
        cancels: bool,
    ) -> Tenure {
        let start_us = now_us();
        worker.bump("acquisitions");
        worker.local(&key, 1);
        Tenure {
            worker: worker.clone(),
            key,
            holder,
            start_us,
            end_us: None,
            fence,
            probe,
            cancels,
            lost: false,
            saw: Vec::new(),
        }
    }

    /// Writes this holder into the detector and notes who wrote since its last write.
    ///
    /// A body the library cancels at its loss that steps while its lease reads lost (by the
    /// clock: past its validity point) is a finding: the library let a starved holder run
    /// on. The detector waits as long as it takes (no response timeout: a starved worker
    /// reads its reply late) and is asked again on an error, so its own trouble never ends
    /// a body inside its hold.
    async fn check(&mut self, detector: &mut MultiplexedConnection, entry: bool) {
        if self.cancels && self.probe.as_ref().is_some_and(CurrentLock::is_lost) {
            self.worker.bump("step_after_loss");
            self.worker.line(format!(
                "ADV-STEP-AFTER-LOSS {} {} {}",
                self.key,
                self.holder,
                now_us()
            ));
        }
        let mut previous: Option<String> = None;
        for attempt in 1..=DETECTOR_ATTEMPTS {
            let written = redis::cmd("SET")
                .arg(format!("reg:{}", self.key))
                .arg(&self.holder)
                .arg("GET")
                .query_async(detector)
                .await;
            match written {
                Ok(answer) => {
                    previous = answer;
                    break;
                }
                Err(err) if attempt == DETECTOR_ATTEMPTS => {
                    self.worker.line(format!("ADV-DETECTOR {} {err}", self.key));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        if let Some(previous) = previous
            && !entry
            && previous != self.holder
        {
            self.saw.push(previous);
        }
    }

    fn finish(&mut self) {
        self.end_us.get_or_insert_with(now_us);
    }
}

impl Drop for Tenure {
    fn drop(&mut self) {
        let end_us = self.end_us.unwrap_or_else(now_us);
        let lost = self.lost || self.probe.as_ref().is_some_and(CurrentLock::is_lost);
        let fence = self.fence.map_or("-".to_owned(), |fence| fence.to_string());
        let saw = if self.saw.is_empty() {
            "-".to_owned()
        } else {
            self.saw.join(",")
        };
        self.worker.line(format!(
            "ADV-HOLD {} {} {} {end_us} {} {fence} {saw}",
            self.key,
            self.holder,
            self.start_us,
            u8::from(lost)
        ));
        self.worker.local(&self.key, -1);
    }
}

/// The guarded body: a few await points, each a detector check.
async fn guarded_body(
    tenure: &mut Tenure,
    steps: &[Duration],
    detector: &mut MultiplexedConnection,
) {
    tenure.check(detector, true).await;
    for step in steps {
        tokio::time::sleep(*step).await;
        tenure.check(detector, false).await;
    }
    tenure.finish();
}

/// A body for `run` and the attribute: its tenure lives inside it, so a drop ends it.
struct Job {
    worker: Arc<Worker>,
    key: String,
    holder: String,
    steps: Vec<Duration>,
    phase: Arc<AtomicU8>,
    /// The lock's `on_lost` is `cancel`.
    cancels: bool,
}

impl Job {
    async fn run(self) -> Result<(), LockError> {
        self.phase.store(HOLDING, Ordering::SeqCst);
        let probe = current_lock();
        let fence = probe.as_ref().and_then(CurrentLock::fence);
        let mut tenure = Tenure::begin(
            &self.worker,
            self.key,
            self.holder,
            fence,
            probe,
            self.cancels,
        );
        let mut detector = self.worker.detector.clone();
        guarded_body(&mut tenure, &self.steps, &mut detector).await;
        drop(tenure);
        self.phase.store(RELEASING, Ordering::SeqCst);
        Ok(())
    }
}

#[distributed_lock(key = "x", ttl = "3s", wait = "2s")]
async fn attribute_on_x(job: Job) -> Result<(), LockError> {
    job.run().await
}

#[distributed_lock(key = "{x}", ttl = "2s", wait = "3s", on_lost = "continue")]
async fn attribute_on_braced_x(job: Job) -> Result<(), LockError> {
    job.run().await
}

#[distributed_lock(key = "y", ttl = "4s", wait = "2s")]
async fn attribute_on_y(job: Job) -> Result<(), LockError> {
    job.run().await
}

/// How a phase ended.
enum Phase<T> {
    Done(T),
    Cut,
    Hung,
}

/// Runs a phase, cut after `cut` (zero: after one poll), or judged hung after `hang`.
async fn phase<F: Future>(future: F, cut: Option<Duration>, hang: Duration) -> Phase<F::Output> {
    match cut {
        Some(limit) => match tokio::time::timeout(limit, future).await {
            Ok(output) => Phase::Done(output),
            Err(_) => Phase::Cut,
        },
        None => match tokio::time::timeout(hang, future).await {
            Ok(output) => Phase::Done(output),
            Err(_) => Phase::Hung,
        },
    }
}

/// A cut for one phase, `percent` of the time: one poll, or a few milliseconds.
fn cut(rng: &mut Rng, percent: u64, longest_ms: u64) -> Option<Duration> {
    if !rng.chance(percent) {
        return None;
    }
    if rng.chance(40) {
        Some(Duration::ZERO)
    } else {
        Some(rng.millis(0, longest_ms))
    }
}

/// After a release was dropped: until when the key keeps the released token. Reported when
/// it kept it for [`LEAK`] or more; the parent judges it against the faults.
async fn watch_dropped_release(worker: Arc<Worker>, key: String, token: String, ttl: Duration) {
    let cut_us = now_us();
    let started = Instant::now();
    let mut last_seen_us = cut_us;
    let mut conn = None;
    for _ in 0..1000 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if started.elapsed() > ttl + Duration::from_millis(500) {
            break;
        }
        if conn.is_none() {
            conn = worker.direct.get_multiplexed_async_connection().await.ok();
        }
        let Some(connection) = conn.as_mut() else {
            continue;
        };
        let value: Option<String> = match tokio::time::timeout(
            Duration::from_secs(1),
            redis::cmd("GET").arg(&key).query_async(connection),
        )
        .await
        {
            Ok(Ok(value)) => value,
            // The server restarting: ask again on a new connection.
            _ => {
                conn = None;
                continue;
            }
        };
        if value.as_deref() != Some(token.as_str()) {
            break;
        }
        if worker.local(&key, 0) > 0 {
            // Passed to another task of this process with its token: no verdict.
            return;
        }
        last_seen_us = now_us();
    }
    if last_seen_us - cut_us >= LEAK.as_micros() as u64 {
        worker.bump("leak_candidates");
        worker.line(format!("ADV-LEAK {key} {cut_us} {last_seen_us}"));
    }
}

/// One task: bounded in iterations and time.
async fn task(worker: Arc<Worker>, index: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut iteration = 0;
    while Instant::now() < worker.stop && iteration < ITERATIONS_PER_TASK {
        iteration += 1;
        if rng.chance(semaphore::PERCENT) {
            let holder = format!("{}-{index}-{iteration}", worker.name);
            semaphore::iteration(&worker, &mut rng, holder).await;
            tokio::time::sleep(rng.millis(0, 4)).await;
            continue;
        }
        if worker.nests && nested::takes_part(index) && rng.chance(nested::PERCENT) {
            let holder = format!("{}-{index}-{iteration}", worker.name);
            nested::iteration(&worker, &mut rng, holder).await;
            tokio::time::sleep(rng.millis(0, 4)).await;
            continue;
        }
        if rng.chance(rwlock::SHARE) {
            rwlock::iteration(&worker, &mut rng, index, iteration).await;
            continue;
        }
        let target = rng.weighted(&TARGETS);
        let key = target.redis_key();
        let holder = format!("{}-{index}-{iteration}", worker.name);
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
        let fencing = matches!(target, Target::Plain("x")) && rng.chance(25);
        let lock = client
            .lock(target.key())
            .ttl(ttl)
            .wait(wait)
            .on_lost(on_lost)
            .fencing(fencing);
        let api = rng.below(10);
        if api < 5 {
            // acquire / body / release, each phase cut on its own.
            let cut_acquire = cut(&mut rng, 10, 50);
            let cut_body = cut(&mut rng, 10, 20);
            let cut_release = cut(&mut rng, 25, 3);
            let started = Instant::now();
            let guard = match phase(lock.acquire(), cut_acquire, wait + HANG).await {
                Phase::Done(Ok(guard)) => guard,
                Phase::Done(Err(err)) => {
                    worker.acquire_failed(&err, &key, started, wait);
                    continue;
                }
                Phase::Cut => {
                    worker.bump("drop_acquire");
                    continue;
                }
                Phase::Hung => {
                    worker.bump("hung");
                    worker.line(format!("ADV-HUNG acquire {key} {}", now_us()));
                    continue;
                }
            };
            let mut tenure =
                Tenure::begin(&worker, key.clone(), holder, guard.fence(), None, false);
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
            let token = guard.token().to_owned();
            match phase(guard.release(), cut_release, HANG).await {
                Phase::Done(Ok(ReleaseOutcome::Released)) => {}
                Phase::Done(Ok(_)) => tenure.lost = true,
                Phase::Done(Err(err)) => {
                    worker.bump("release_errors");
                    worker.line(format!("ADV-RELEASE-ERROR {key} {} {err}", now_us()));
                }
                Phase::Cut => {
                    worker.bump("drop_release");
                    let check = tokio::spawn(watch_dropped_release(
                        worker.clone(),
                        key.clone(),
                        token,
                        ttl,
                    ));
                    worker.checks.lock().unwrap().push(check);
                }
                Phase::Hung => {
                    worker.bump("hung");
                    worker.line(format!("ADV-HUNG release {key} {}", now_us()));
                }
            }
            drop(tenure);
        } else {
            // `run` or the attribute, cut from outside at a random point.
            let phase_now = Arc::new(AtomicU8::new(ACQUIRING));
            // The attribute on `{x}` continues after a loss; on `x` and `y` it cancels.
            let cancels = if api >= 8 && matches!(target, Target::Plain("x" | "y" | "{x}")) {
                !matches!(target, Target::Plain("{x}"))
            } else {
                matches!(on_lost, OnLost::Cancel)
            };
            let job = Job {
                worker: worker.clone(),
                key: key.clone(),
                holder,
                steps,
                phase: phase_now.clone(),
                cancels,
            };
            let body_bound: Duration = job.steps.iter().sum();
            let cut_run = cut(&mut rng, 15, 30);
            let started = Instant::now();
            let (outcome, wait) = match (api, target) {
                (8..=9, Target::Plain("x")) => (
                    phase(attribute_on_x(job), cut_run, Duration::from_secs(2) + HANG).await,
                    Duration::from_secs(2),
                ),
                (8..=9, Target::Plain("{x}")) => (
                    phase(
                        attribute_on_braced_x(job),
                        cut_run,
                        Duration::from_secs(3) + HANG,
                    )
                    .await,
                    Duration::from_secs(3),
                ),
                (8..=9, Target::Plain("y")) => (
                    phase(attribute_on_y(job), cut_run, Duration::from_secs(2) + HANG).await,
                    Duration::from_secs(2),
                ),
                _ => (
                    phase(lock.run(job.run()), cut_run, wait + body_bound + HANG).await,
                    wait,
                ),
            };
            let at = phase_now.load(Ordering::SeqCst);
            worker.run_ended(outcome, at, (&key, started, wait));
        }
        tokio::time::sleep(rng.millis(0, 4)).await;
    }
}

fn worker_process(role: &str) {
    let url = std::env::var("ADV_URL").unwrap();
    let direct = std::env::var("ADV_DIRECT").unwrap();
    let detector_url = std::env::var("ADV_DETECTOR").unwrap();
    let seed = env_u64("ADV_SEED").unwrap();
    let secs = env_u64("ADV_SECS").unwrap();
    let release_file = std::env::var("ADV_RELEASE").unwrap();
    let redlock = std::env::var("ADV_MODE").is_ok_and(|mode| mode == "redlock");
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        lock_runtime::init(lock_config(&url, redlock)).unwrap();
        let plain = LockClient::new(lock_config(&url, redlock)).unwrap();
        let prefixed = LockClient::new(lock_config(&url, redlock).key_prefix(PREFIX)).unwrap();
        let detector = redis::Client::open(detector_url)
            .unwrap()
            .get_multiplexed_async_connection_with_config(
                &redis::AsyncConnectionConfig::new().set_response_timeout(None),
            )
            .await
            .unwrap();
        let worker = Arc::new(Worker {
            name: role.to_owned(),
            plain: plain.clone(),
            prefixed: prefixed.clone(),
            detector,
            direct: redis::Client::open(direct).unwrap(),
            stop: Instant::now() + Duration::from_secs(secs),
            lines: Mutex::new(Vec::new()),
            nests: nests_in(redlock),
            counters: Mutex::new(BTreeMap::new()),
            local: Mutex::new(HashMap::new()),
            checks: Mutex::new(Vec::new()),
        });
        let tasks: Vec<_> = (0..TASKS)
            .map(|index| {
                tokio::spawn(task(
                    worker.clone(),
                    index,
                    splitmix(seed.wrapping_add(index as u64)),
                ))
            })
            .collect();
        // Every task finishes its iteration within wait + body + release bounds.
        let drain = worker.stop + Duration::from_secs(3) + HANG * 3;
        for task in tasks {
            let abort = task.abort_handle();
            match tokio::time::timeout_at(drain, task).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    worker.bump("unfinished");
                    worker.line(format!("ADV-UNFINISHED task failed: {err}"));
                }
                Err(_) => {
                    abort.abort();
                    worker.bump("unfinished");
                    worker.line("ADV-UNFINISHED task still running at the drain bound".into());
                }
            }
        }
        let checks: Vec<_> = std::mem::take(&mut *worker.checks.lock().unwrap());
        for check in checks {
            let _ = tokio::time::timeout(LONGEST_TTL * 2, check).await;
        }
        let mut out = std::io::stdout().lock();
        for line in worker.lines.lock().unwrap().iter() {
            writeln!(out, "{line}").unwrap();
        }
        let counters = worker.counters.lock().unwrap().clone();
        let stats: Vec<String> = counters
            .iter()
            .map(|(name, n)| format!("{name}={n}"))
            .collect();
        writeln!(out, "ADV-STATS {}", stats.join(" ")).unwrap();
        writeln!(out, "ADV-IDLE").unwrap();
        out.flush().unwrap();
        drop(out);
        // The clients stay alive (and subscribed, if they leak) until the parent has
        // looked at the server.
        let deadline = Instant::now() + Duration::from_secs(180);
        while !std::path::Path::new(&release_file).exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let global = lock_runtime::client().unwrap();
        let held = plain.held_leases() + prefixed.held_leases() + global.held_leases();
        let waiting = [plain.waiting(), prefixed.waiting(), global.waiting()];
        println!("ADV-CLIENTS held={held} waiting={waiting:?}");
    });
}

// ---------------------------------------------------------------------------------------
// The foreign client: redis-py's Lock on the key `f`, with the same tenure records.

const PYTHON_WORKER: &str = r#"
import random, sys, time
import redis
from redis.exceptions import LockNotOwnedError, RedisError

url, detector_url, seed, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
rng = random.Random(seed)
r = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1)
detector = redis.Redis.from_url(detector_url)
stop = time.time() + secs
now_us = lambda: int(time.time() * 1_000_000)
lines, n, acquisitions, errors, lost = [], 0, 0, 0, 0
while time.time() < stop and n < 1_000_000:
    n += 1
    holder = "py-%d" % n
    lock = r.lock("f", timeout=rng.choice([2, 3, 4]), blocking_timeout=rng.choice([0.3, 1, 2]))
    try:
        if not lock.acquire():
            continue
    except RedisError:
        errors += 1
        time.sleep(0.05)
        continue
    start = now_us()
    acquisitions += 1
    saw = []
    detector.set("reg:f", holder, get=True)
    for _ in range(rng.randint(1, 3)):
        time.sleep(rng.uniform(0, 0.008))
        previous = detector.set("reg:f", holder, get=True)
        if previous is not None and previous.decode() != holder:
            saw.append(previous.decode())
    end = now_us()
    was_lost = 0
    try:
        lock.release()
    except LockNotOwnedError:
        was_lost, lost = 1, lost + 1
    except RedisError:
        errors += 1
    lines.append("ADV-HOLD f %s %d %d %d - %s" % (holder, start, end, was_lost, ",".join(saw) or "-"))
    time.sleep(rng.uniform(0, 0.004))
for line in lines:
    print(line)
print("ADV-PY acquisitions=%d errors=%d lost=%d" % (acquisitions, errors, lost))
sys.stdout.flush()
"#;

// ---------------------------------------------------------------------------------------
// The nemesis.

#[derive(Debug, Clone, Copy)]
struct Fault {
    kind: &'static str,
    start_us: u64,
    end_us: u64,
}

/// Faults the lock server at random times until `until`; every fault is shorter than the
/// smallest ttl (a pause up to 500 ms, a blackhole up to 500 ms then a reset, a stall of
/// 100-600 ms on every chunk, a connection reset, a restart).
fn nemesis(
    servers: &mut [RedisServer],
    proxies: &[FaultProxy],
    rng: &mut Rng,
    until: std::time::Instant,
) -> Vec<Fault> {
    let mut faults = Vec::new();
    for _ in 0..100_000 {
        let gap = rng.millis(500, 3000);
        if std::time::Instant::now() + gap >= until {
            break;
        }
        std::thread::sleep(gap);
        // One server at a time: in Redlock mode a minority of the masters.
        let target = if servers.len() > 1 {
            rng.below(servers.len() as u64) as usize
        } else {
            0
        };
        let (server, proxy) = (&mut servers[target], &proxies[target]);
        let start_us = now_us();
        let kind = match rng.below(5) {
            0 => {
                server.restart();
                "restart"
            }
            1 => {
                let pause = rng.millis(50, 500);
                let _: () = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(pause.as_millis() as u64)
                    .arg("ALL")
                    .query(&mut server.conn())
                    .unwrap();
                std::thread::sleep(pause);
                "pause"
            }
            2 => {
                proxy.reset_all();
                "reset"
            }
            3 => {
                // The connections stop answering and are not closed, then heal with nothing
                // lost (as TCP does after a short partition): every chunk waits.
                let stall = rng.millis(100, 600);
                proxy.set_delay(Direction::Up, stall);
                proxy.set_delay(Direction::Down, stall);
                std::thread::sleep(stall);
                proxy.set_delay(Direction::Up, Duration::ZERO);
                proxy.set_delay(Direction::Down, Duration::ZERO);
                "stall"
            }
            _ => {
                let both = rng.chance(50);
                proxy.set_blackhole(Direction::Down, true);
                if both {
                    proxy.set_blackhole(Direction::Up, true);
                }
                std::thread::sleep(rng.millis(100, 500));
                // Reset before the traffic flows again: replies lost in the blackhole
                // would otherwise answer the wrong requests on a healed connection.
                proxy.reset_all();
                std::thread::sleep(Duration::from_millis(20));
                proxy.set_blackhole(Direction::Up, false);
                proxy.set_blackhole(Direction::Down, false);
                "blackhole"
            }
        };
        faults.push(Fault {
            kind,
            start_us,
            end_us: now_us(),
        });
    }
    faults
}

/// The kind of the fault in progress at `at_us` (or ended at most [`FAULT_SHADOW_US`]
/// before), or `none`.
fn fault_at(faults: &[Fault], at_us: u64) -> &'static str {
    faults
        .iter()
        .rev()
        .find(|fault| fault.start_us <= at_us && at_us <= fault.end_us + FAULT_SHADOW_US)
        .map_or("none", |fault| fault.kind)
}

/// Whether `[from_us, to_us]` holds a stretch of [`LEAK`] without a fault (a fault lasts
/// until [`FAULT_SHADOW_US`] after its end: the clients reconnect meanwhile).
fn quiet_stretch(faults: &[Fault], from_us: u64, to_us: u64) -> bool {
    quiet_for(faults, from_us, to_us, LEAK)
}

/// Whether `[from_us, to_us]` holds a stretch of `span` without a fault (nor its shadow).
fn quiet_for(faults: &[Fault], from_us: u64, to_us: u64, span: Duration) -> bool {
    let leak = span.as_micros() as u64;
    let mut quiet_from = from_us;
    let mut shadows: Vec<(u64, u64)> = faults
        .iter()
        .map(|fault| (fault.start_us, fault.end_us + FAULT_SHADOW_US))
        .filter(|&(start, end)| start <= to_us && end >= from_us)
        .collect();
    shadows.sort_unstable();
    for (start, end) in shadows {
        if start > quiet_from && start - quiet_from >= leak {
            return true;
        }
        quiet_from = quiet_from.max(end);
    }
    to_us > quiet_from && to_us - quiet_from >= leak
}

// ---------------------------------------------------------------------------------------
// The parent: servers, processes, nemesis, verdict.

/// The lines up to (not including) the one containing `until`, or to the end of the stream,
/// bounded by `deadline`; whether `until` was seen.
fn lines_until(
    lines: &mpsc::Receiver<String>,
    until: Option<&str>,
    deadline: std::time::Instant,
    into: &mut Vec<String>,
) -> bool {
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if until.is_some_and(|until| line.contains(until)) {
                    return true;
                }
                into.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return until.is_none(),
            Err(mpsc::RecvTimeoutError::Timeout) => return false,
        }
    }
}

/// Child processes, killed if the parent fails before they exit.
struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

#[derive(Debug, Clone)]
struct HoldRecord {
    holder: String,
    start_us: u64,
    end_us: u64,
    lost: bool,
    fence: Option<u64>,
    saw: Vec<String>,
}

fn parse_hold(line: &str) -> Option<(String, HoldRecord)> {
    let rest = &line[line.find("ADV-HOLD ")? + "ADV-HOLD ".len()..];
    let parts: Vec<&str> = rest.split_whitespace().collect();
    if parts.len() != 7 {
        return None;
    }
    Some((
        parts[0].to_owned(),
        HoldRecord {
            holder: parts[1].to_owned(),
            start_us: parts[2].parse().ok()?,
            end_us: parts[3].parse().ok()?,
            lost: parts[4] == "1",
            fence: parts[5].parse().ok(),
            saw: if parts[6] == "-" {
                Vec::new()
            } else {
                parts[6].split(',').map(str::to_owned).collect()
            },
        },
    ))
}

/// A worker's clients at the end (`held=0 waiting=[(TASKS, CHANNELS), ...]`): how many
/// there are (each may listen on its notice channel, which is not among its waits'
/// channels), or `None` when one still holds a lease, has a waiting task or a channel.
fn notice_listeners(client: &str) -> Option<usize> {
    let waiting = client
        .strip_prefix("held=0 waiting=[(")?
        .strip_suffix(")]")?;
    let mut listeners = 0;
    for pair in waiting.split("), (") {
        // A client's standing notice channel is not among its waits' channels.
        match pair.split_once(", ")? {
            ("0", "0") => listeners += 1,
            _ => return None,
        }
    }
    Some(listeners)
}

/// Adds `name=value` pairs after `prefix` on `line` into `totals`.
fn add_counters(line: &str, prefix: &str, totals: &mut BTreeMap<String, u64>) {
    let Some(at) = line.find(prefix) else { return };
    for pair in line[at + prefix.len()..].split_whitespace() {
        if let Some((name, value)) = pair.split_once('=')
            && let Ok(value) = value.parse::<u64>()
        {
            *totals.entry(name.to_owned()).or_default() += value;
        }
    }
}

/// Whether the workers take nested locks: on the single server, and over the Redlock
/// masters (each step of a walk there is what a majority of them says) unless
/// `ADVERSARY_REDLOCK_NESTS=0`.
fn nests_in(redlock: bool) -> bool {
    !redlock || std::env::var("ADVERSARY_REDLOCK_NESTS").map_or(true, |on| on != "0")
}

/// Runs the test: against one lock server, or (`redlock`) three Redlock masters.
fn parent(redlock: bool) {
    let python = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .unwrap_or_else(|err| panic!("python3 cannot run ({err}): install python3 and redis-py"));
    assert!(
        python.success(),
        "python3 cannot import redis: run `pip install 'redis>=5,<6'` (CI does it in \
         scripts/ensure-redis); the foreign-client half of this test needs it"
    );
    let seed = env_u64("ADVERSARY_SEED").unwrap_or_else(|| splitmix(now_us()));
    let secs = env_u64("ADVERSARY_SECS")
        .unwrap_or(if redlock { 30 } else { 45 })
        .max(5);
    let mode = if redlock { "redlock" } else { "single" };
    println!(
        "ADVERSARY mode={mode} seed={seed} secs={secs} (replay: ADVERSARY_SEED={seed} \
         ADVERSARY_SECS={secs} cargo test -p lock-tests --test adversary -- --exact {} \
         --nocapture)",
        if redlock {
            "adversary_redlock"
        } else {
            "adversary"
        }
    );
    let mut rng = Rng::new(seed);
    let detector = RedisServer::start();
    let mut servers: Vec<RedisServer> = (0..if redlock { 3 } else { 1 })
        .map(|_| RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]))
        .collect();
    let proxies: Vec<FaultProxy> = servers
        .iter()
        .map(|server| FaultProxy::start(server.port()))
        .collect();
    let lock_url = proxies
        .iter()
        .map(FaultProxy::url)
        .collect::<Vec<_>>()
        .join(",");
    let release_file =
        std::env::temp_dir().join(format!("adversary-{}", uuid::Uuid::new_v4().simple()));

    let mut processes = Processes(Vec::new());
    let mut streams = Vec::new();
    for index in 0..WORKERS {
        let env = [
            ("ADV_URL", lock_url.clone()),
            ("ADV_DIRECT", servers[0].url()),
            ("ADV_DETECTOR", detector.url()),
            ("ADV_SEED", splitmix(seed ^ (index as u64 + 1)).to_string()),
            ("ADV_SECS", secs.to_string()),
            ("ADV_RELEASE", release_file.to_str().unwrap().to_owned()),
            ("ADV_MODE", mode.to_owned()),
        ];
        let mut worker = child::spawn(TEST, &format!("w{index}"), &env);
        streams.push(child::stream_lines(worker.stdout.take().unwrap()));
        processes.0.push(worker);
    }
    // redis-py's Lock takes one server: no foreign client against Redlock masters.
    let python_lines = (!redlock).then(|| {
        let mut python = Command::new("python3")
            .arg("-c")
            .arg(PYTHON_WORKER)
            .arg(proxies[0].url())
            .arg(detector.url())
            .arg(splitmix(seed ^ 0xF0F0).to_string())
            .arg(secs.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn python3");
        let lines = child::stream_lines(python.stdout.take().unwrap());
        processes.0.push(python);
        lines
    });

    let started = std::time::Instant::now();
    let faults = nemesis(
        &mut servers,
        &proxies,
        &mut rng,
        started + Duration::from_secs(secs),
    );
    let last_fault = std::time::Instant::now();

    // Every process finishes its work (bounded), then the leftovers are judged after the
    // longest ttl and a queue place's grace.
    let drain = std::time::Instant::now() + Duration::from_secs(10) + HANG * 4;
    let mut lines = Vec::new();
    let mut idle = 0;
    for stream in &streams {
        if lines_until(stream, Some("ADV-IDLE"), drain, &mut lines) {
            idle += 1;
        }
    }
    let python_done = python_lines
        .as_ref()
        .is_none_or(|python| lines_until(python, None, drain, &mut lines));
    let settle = last_fault + LONGEST_TTL + Duration::from_secs(3);
    std::thread::sleep(settle.saturating_duration_since(std::time::Instant::now()));

    let (mut fence_counters, mut leftover_keys) = (Vec::new(), Vec::new());
    let mut stale_readers = 0;
    let (mut channels, mut shard_channels) = (Vec::<String>::new(), Vec::<String>::new());
    for server in &servers {
        let mut admin = server.conn();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
        let (fences, leftovers): (Vec<String>, Vec<String>) = keys.into_iter().partition(|key| {
            key.contains("fence")
                && redis::cmd("GET")
                    .arg(key)
                    .query::<Option<String>>(&mut admin)
                    .ok()
                    .flatten()
                    .is_some_and(|value| value.parse::<u64>().is_ok())
        });
        fence_counters.extend(fences);
        // A queue's ttls hash may outlive its queue by the foreign-window schedule's
        // memory: it ends by itself, and is no leftover.
        // So do a nested wait's deadlock records whose removal a fault cut: they live as
        // long as the wait could.
        let leftovers: Vec<String> = leftovers
            .into_iter()
            .filter(|key| {
                !lock_tests::ends_by_itself(&mut admin, key)
                    && !nested::records_end_by_themselves(&mut admin, key)
            })
            .collect();
        let (stale, leftovers): (Vec<String>, Vec<String>) = leftovers
            .into_iter()
            .partition(|key| rwlock::is_stale_readers(&mut admin, key));
        stale_readers += stale.len();
        // Named with their PTTL (-1: none), which tells a leak from a key about to end.
        leftover_keys.extend(leftovers.into_iter().map(|key| {
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap_or(-3);
            format!("{key} (pttl {pttl})")
        }));
        channels.extend(
            redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg("*")
                .query::<Vec<String>>(&mut admin)
                .unwrap(),
        );
        shard_channels.extend(
            redis::cmd("PUBSUB")
                .arg("SHARDCHANNELS")
                .query::<Vec<String>>(&mut admin)
                .unwrap(),
        );
    }

    std::fs::write(&release_file, b"done").unwrap();
    let exit_bound = std::time::Instant::now() + Duration::from_secs(30);
    for stream in &streams {
        lines_until(stream, None, exit_bound, &mut lines);
    }
    let mut exits = Vec::new();
    for process in &mut processes.0 {
        exits.push(process.wait().unwrap());
    }
    let _ = std::fs::remove_file(&release_file);

    // The verdict.
    let mut totals = BTreeMap::new();
    let mut holds: HashMap<String, Vec<HoldRecord>> = HashMap::new();
    let mut permit_holds: HashMap<String, Vec<semaphore::SemHold>> = HashMap::new();
    let mut nest_waits = Vec::new();
    let mut clients = Vec::new();
    let mut findings: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut early_by_fault: BTreeMap<&str, u64> = BTreeMap::new();
    for line in &lines {
        if let Some((key, hold)) = semaphore::parse_line(line) {
            permit_holds.entry(key).or_default().push(hold);
        } else if let Some(wait) = nested::parse_line(line) {
            nest_waits.push(wait);
        } else if let Some((key, hold)) = parse_hold(line) {
            holds.entry(key).or_default().push(hold);
        } else if line.contains("ADV-STATS ") {
            add_counters(line, "ADV-STATS ", &mut totals);
        } else if line.contains("ADV-PY ") {
            let mut python = BTreeMap::new();
            add_counters(line, "ADV-PY ", &mut python);
            for (name, value) in python {
                totals.insert(format!("python_{name}"), value);
            }
        } else if let Some(at) = line.find("ADV-CLIENTS ") {
            clients.push(line[at + "ADV-CLIENTS ".len()..].to_owned());
        } else if let Some(at) = line.find("ADV-LEAK ") {
            let parts: Vec<&str> = line[at..].split_whitespace().collect();
            let cut_us: u64 = parts[2].parse().unwrap();
            let last_seen_us: u64 = parts[3].parse().unwrap();
            // A release keeps trying for RELEASE_BUDGET at most (then the lease ends by its
            // ttl): it must have got through if that time held a quiet stretch.
            let tried_until_us = last_seen_us.min(cut_us + RELEASE_BUDGET.as_micros() as u64);
            if !quiet_stretch(&faults, cut_us, tried_until_us) {
                *totals.entry("leaks_near_faults".into()).or_default() += 1;
            } else {
                let near: Vec<String> = faults
                    .iter()
                    .filter(|fault| {
                        fault.end_us + 1_000_000 >= cut_us && fault.start_us <= last_seen_us
                    })
                    .map(|fault| {
                        format!(
                            "{} {:+} ms..{:+} ms",
                            fault.kind,
                            (fault.start_us as i64 - cut_us as i64) / 1000,
                            (fault.end_us as i64 - cut_us as i64) / 1000
                        )
                    })
                    .collect();
                findings
                    .entry("dropped release left the lock held")
                    .or_default()
                    .push(format!("{} (faults from the cut: {near:?})", &line[at..]));
            }
        } else if let Some(at) = line.find("ADV-EARLY ") {
            let invariant = if line.contains("WRONGTYPE") {
                "waiter failed with Backend before its wait: WRONGTYPE (key shapes collide)"
            } else if line.contains("refused") {
                "waiter failed with Backend before its wait: connection refused"
            } else if line.contains("reset")
                || line.contains("broken pipe")
                || line.contains("closed")
            {
                "waiter failed with Backend before its wait: connection reset or closed"
            } else {
                "waiter failed with Backend before its wait"
            };
            let failed_us: u64 = line[at..]
                .split_whitespace()
                .nth(2)
                .and_then(|us| us.parse().ok())
                .unwrap_or(0);
            *early_by_fault
                .entry(fault_at(&faults, failed_us))
                .or_default() += 1;
            findings
                .entry(invariant)
                .or_default()
                .push(line[at..].to_owned());
        } else if let Some(at) = line.find("ADV-HUNG ") {
            findings
                .entry("hung phase")
                .or_default()
                .push(line[at..].to_owned());
        } else if let Some(at) = line.find("ADV-UNFINISHED ") {
            findings
                .entry("unfinished task")
                .or_default()
                .push(line[at..].to_owned());
        } else if let Some(at) = line.find("ADV-STEP-AFTER-LOSS ") {
            findings
                .entry("a cancelled body stepped after its lease was lost")
                .or_default()
                .push(line[at..].to_owned());
        } else if let Some(at) = line.find("ADV-DETECTOR ") {
            findings
                .entry("the detector failed")
                .or_default()
                .push(line[at..].to_owned());
        } else if let Some(at) = line.find("ADV-OTHER ") {
            findings
                .entry("unexpected error")
                .or_default()
                .push(line[at..].to_owned());
        } else if let Some(at) = line.find("ADV-RELEASE-ERROR ") {
            // Counted in the stats; a release that fails leaves the lease to its ttl.
            let _ = at;
        }
    }

    let mut overlaps = 0;
    let mut witnessed = 0;
    let mut excused = 0;
    let mut fence_regressions = 0;
    let mut overlapping_keys: BTreeMap<String, u64> = BTreeMap::new();
    for (key, intervals) in &mut holds {
        intervals.sort_by_key(|hold| hold.start_us);
        for (index, first) in intervals.iter().enumerate() {
            for second in &intervals[index + 1..] {
                if second.start_us >= first.end_us {
                    break;
                }
                if rwlock::may_overlap(&first.holder, &second.holder) {
                    continue;
                }
                if first.lost {
                    excused += 1;
                    continue;
                }
                overlaps += 1;
                *overlapping_keys.entry(key.clone()).or_default() += 1;
                let seen = second.saw.contains(&first.holder) || first.saw.contains(&second.holder);
                witnessed += u64::from(seen);
                findings.entry("overlap").or_default().push(format!(
                    "{key}: {} [{}..{}] and {} [{}..{}] overlap {} us{}",
                    first.holder,
                    first.start_us,
                    first.end_us,
                    second.holder,
                    second.start_us,
                    second.end_us,
                    first.end_us.min(second.end_us) - second.start_us,
                    if seen { ", seen by the detector" } else { "" }
                ));
            }
        }
        let fenced: Vec<&HoldRecord> = intervals
            .iter()
            .filter(|hold| hold.fence.is_some())
            .collect();
        for pair in fenced.windows(2) {
            if pair[0].fence >= pair[1].fence {
                fence_regressions += 1;
                findings
                    .entry("fence not increasing")
                    .or_default()
                    .push(format!(
                        "{key}: {} fence {:?} then {} fence {:?}",
                        pair[0].holder, pair[0].fence, pair[1].holder, pair[1].fence
                    ));
            }
        }
    }
    let nests = nested::check(&nest_waits, &holds, &faults, &mut findings);
    let (most_permits, too_many) = semaphore::check(&mut permit_holds);
    if !too_many.is_empty() {
        findings
            .entry("more semaphore holders than permits")
            .or_default()
            .extend(too_many);
    }
    if !leftover_keys.is_empty() {
        findings
            .entry("keys left on the lock server")
            .or_default()
            .push(format!("{leftover_keys:?}"));
    }
    // A client that renewed a lease (held one past a third of its ttl) listens on its
    // notice channel for its life: at most one channel per client, and no other.
    let (notices, channels): (Vec<String>, Vec<String>) = channels
        .into_iter()
        .partition(|channel| channel.starts_with(lock_tests::NOTICE_CHANNEL));
    let mut listeners = 0;
    for client in &clients {
        match notice_listeners(client) {
            Some(count) => listeners += count,
            None => findings
                .entry("client state left")
                .or_default()
                .push(client.clone()),
        }
    }
    if !channels.is_empty() || !shard_channels.is_empty() || notices.len() > listeners {
        findings
            .entry("subscriptions left on the lock server")
            .or_default()
            .push(format!(
                "channels {channels:?}, shard channels {shard_channels:?}, notice channels \
                 {notices:?} for {listeners} clients"
            ));
    }
    if idle < WORKERS || !python_done || exits.iter().any(|exit| !exit.success()) {
        findings
            .entry("process did not finish")
            .or_default()
            .push(format!(
                "{idle} of {WORKERS} workers idle, python done: {python_done}, exits {exits:?}"
            ));
    }

    let per_key: BTreeMap<&str, usize> = holds
        .iter()
        .map(|(key, intervals)| (key.as_str(), intervals.len()))
        .collect();
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for fault in &faults {
        *kinds.entry(fault.kind).or_default() += 1;
    }
    let count = |name: &str| totals.get(name).copied().unwrap_or(0);
    let summary = format!(
        "ADVERSARY-SUMMARY mode={mode} seed={seed} secs={secs} acquisitions={} (python {}; per key {per_key:?}) \
         drops: acquire={} body={} release={}; lost={} busy={} timeout={} backend={} \
         release-errors={}; faults={kinds:?}; overlaps={overlaps} (witnessed {witnessed}, \
         keys {overlapping_keys:?}; excused after a lost lease {excused}); \
         fence-regressions={fence_regressions}; early-backend={} (by fault {early_by_fault:?}); leaked-releases={} \
         (near faults {}); hung={}; unfinished={}; leftovers: keys={leftover_keys:?} \
         fence-counters={} stale-reader-sets={stale_readers} channels={channels:?} notice-channels={} shard-channels={shard_channels:?}; clients={clients:?}; \
         semaphore: tenures {:?}, most at once {most_permits} of {}; {nests}",
        count("acquisitions") + count("python_acquisitions"),
        count("python_acquisitions"),
        count("drop_acquire"),
        count("drop_body"),
        count("drop_release"),
        count("lost") + count("python_lost"),
        count("busy"),
        count("timeout"),
        count("backend"),
        count("release_errors"),
        count("early_backend"),
        findings
            .get("dropped release left the lock held")
            .map_or(0, Vec::len),
        count("leaks_near_faults"),
        count("hung"),
        count("unfinished"),
        fence_counters.len(),
        notices.len(),
        semaphore::per_key(&permit_holds),
        semaphore::PERMITS,
    );
    println!("{summary}");
    let mut report = String::new();
    for (invariant, examples) in &findings {
        report.push_str(&format!(
            "\n  {invariant}: {} (first ones:)",
            examples.len()
        ));
        for example in examples.iter().take(5) {
            report.push_str(&format!("\n    {example}"));
        }
    }
    assert!(
        findings.is_empty(),
        "seed {seed}: invariants broken:{report}\n{summary}"
    );
    assert!(
        count("acquisitions") > 0 && (redlock || count("python_acquisitions") > 0),
        "seed {seed}: nothing was acquired: {summary}"
    );
    assert!(
        redlock || count("sem_acquisitions") > 0,
        "seed {seed}: no semaphore permit was taken: {summary}"
    );
    assert!(
        !nests_in(redlock) || nests.deadlocks() > 0,
        "seed {seed}: no nested wait gave way in a deadlock: {summary}"
    );
}

#[test]
fn adversary() {
    match child::role() {
        Some(role) => worker_process(&role),
        None => parent(false),
    }
}

/// The same against three Redlock masters; its workers are `adversary`'s role processes.
#[test]
fn adversary_redlock() {
    if child::role().is_none() {
        parent(true);
    }
}
