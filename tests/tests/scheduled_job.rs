//! The scheduled-job lock (`hold_at_least`, ShedLock's `lockAtLeastFor`) on a real Redis:
//! a job scheduled on three OS processes runs exactly once per tick (the job of
//! `examples/src/scheduled_job.rs`, whose replicas fire 0, 150 and 300 ms apart: without
//! `hold_at_least` the late ones run each tick again and the test fails), and the API's
//! behaviour: a fast release keeps the key for the rest of the hold (owner-checked, no
//! renewal), a drop too, a slow one deletes it, no task of the same process gets the lock
//! by a local pass meanwhile, and a hold over the ttl or on several keys is refused.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_examples::scheduled_job::{self, TickOutcome};
use lock_examples::servers::Mode;
use lock_examples::store::Store;
use lock_runtime::{LockError, MultiLock, ReleaseOutcome};
use lock_tests::{RedisServer, child, shared_server};
use tokio::time::Instant;

const URL_ENV: &str = "LOCK_TESTS_URL";
const JOB_ENV: &str = "SCHEDULED_JOB_TEST_JOB";
const REPLICAS: u64 = 3;
const TICKS: u64 = 5;
/// How late each replica's schedule runs behind the one before it (a clock a little
/// behind): far below the job's `hold_at_least` (700 ms), far above the job's run time.
const LATE_STEP: Duration = Duration::from_millis(150);
const LINE_BOUND: Duration = Duration::from_secs(30);

fn unix_millis() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// A replica: runs only in the child processes the test below starts. Says `ready`, reads
/// the first tick's time (Unix ms) from stdin, runs the example's schedule `index` ×
/// [`LATE_STEP`] late, and prints one `TICK` line per tick.
#[test]
fn replica_worker() {
    let Some(role) = child::role() else { return };
    let index: u32 = role.trim_start_matches('r').parse().unwrap();
    let url = std::env::var(URL_ENV).unwrap();
    let job = std::env::var(JOB_ENV).unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        lock_runtime::init(lock_runtime::Config::single(url.clone())).unwrap();
        let store = Store::connect_urls(Mode::Single, &[url]).await.unwrap();
        println!("ready");
        let start = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await
        .unwrap()
        .unwrap();
        let start_ms: u64 = start.trim().parse().unwrap();
        let first = Instant::now()
            + Duration::from_millis(start_ms.saturating_sub(unix_millis()))
            + LATE_STEP * index;
        scheduled_job::replica(&store, &job, first, TICKS, |tick, outcome| {
            let what = match outcome {
                TickOutcome::Ran { runs } => format!("ran {runs}"),
                TickOutcome::Skipped => "skipped".to_owned(),
            };
            println!("TICK {tick} {what}");
        })
        .await
        .unwrap();
        println!("done");
    });
}

/// The child processes, killed on drop if still there (a failing test leaves none).
struct Replicas(Vec<std::process::Child>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn a_job_scheduled_on_three_processes_runs_once_per_tick() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let job = format!("test-{}", uuid::Uuid::new_v4().simple());
    let mut replicas = Replicas(
        (0..REPLICAS)
            .map(|index| {
                child::spawn_with_stdin(
                    "replica_worker",
                    &format!("r{index}"),
                    &[(URL_ENV, server.url()), (JOB_ENV, job.clone())],
                )
            })
            .collect(),
    );
    let streams: Vec<_> = replicas
        .0
        .iter_mut()
        .map(|replica| child::stream_lines(replica.stdout.take().unwrap()))
        .collect();
    for lines in &streams {
        child::expect_line(lines, "ready", LINE_BOUND);
    }
    // Every replica is connected: the first tick a little ahead, the same for all.
    let start_ms = unix_millis() + 300;
    for replica in &mut replicas.0 {
        let mut stdin = replica.stdin.take().unwrap();
        writeln!(stdin, "{start_ms}").unwrap();
    }
    // tick -> what each replica did
    let mut seen: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for lines in &streams {
        for _ in 0..TICKS {
            let line = child::expect_line(lines, "TICK ", LINE_BOUND);
            let (tick, what) = line.split_once(' ').unwrap();
            seen.entry(tick.parse().unwrap())
                .or_default()
                .push(what.to_owned());
        }
        child::expect_line(lines, "done", LINE_BOUND);
    }
    for replica in &mut replicas.0 {
        assert!(replica.wait().unwrap().success(), "a replica failed");
    }
    let runs: Vec<(u64, Option<String>)> = (0..TICKS)
        .map(|tick| (tick, server.get(&scheduled_job::runs_key(&job, tick))))
        .collect();
    for tick in 0..TICKS {
        let mut what = seen.get(&tick).cloned().unwrap_or_default();
        what.sort();
        assert_eq!(
            what,
            ["ran 1", "skipped", "skipped"],
            "tick {tick}: the replicas did {what:?}; run counters per tick {runs:?}"
        );
        assert_eq!(
            runs[tick as usize].1.as_deref(),
            Some("1"),
            "tick {tick} ran other than once: run counters per tick {runs:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The API.

const HOLD: Duration = Duration::from_millis(800);

fn unique(name: &str) -> String {
    format!("{name}-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn a_fast_release_keeps_the_key_for_the_rest_of_the_hold() {
    let server = shared_server();
    let (holder, other) = (server.lock_client(), server.lock_client());
    let key = unique("hold-fast");
    let guard = holder
        .lock(&key)
        .ttl(Duration::from_secs(5))
        .wait(Duration::ZERO)
        .hold_at_least(HOLD)
        .acquire()
        .await
        .unwrap();
    let acquired = Instant::now();
    let token = guard.token().to_owned();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    // Still held, by the same token, with at most the rest of the hold to live (not the
    // 5 s ttl): set by the release, and not renewed since.
    assert_eq!(server.get(&key).as_deref(), Some(token.as_str()));
    let pttl = server.pttl(&key);
    assert!(
        pttl > 0 && pttl <= HOLD.as_millis() as i64,
        "PTTL {pttl} ms after a release {:?} into an {HOLD:?} hold",
        acquired.elapsed()
    );
    let refused = other.lock(&key).try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })) || acquired.elapsed() >= HOLD,
        "another client got the key during the hold: {refused:?}"
    );
    // Once the hold is over the key is free (woken by its expiry, within the wait).
    let next = other
        .lock(&key)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(
        acquired.elapsed() >= HOLD - Duration::from_millis(50),
        "the key was free {:?} after it was taken, before the {HOLD:?} hold ended",
        acquired.elapsed()
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_dropped_guard_keeps_the_key_for_the_hold_too() {
    let server = shared_server();
    let client = server.lock_client();
    let key = unique("hold-drop");
    let guard = client
        .lock(&key)
        .ttl(Duration::from_secs(5))
        .hold_at_least(HOLD)
        .acquire()
        .await
        .unwrap();
    let token = guard.token().to_owned();
    drop(guard);
    // The background keep: the key's expiry drops from the 5 s ttl to the rest of the hold.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pttl = server.pttl(&key);
        if pttl > 0 && pttl <= HOLD.as_millis() as i64 {
            break;
        }
        assert!(pttl != -2, "the dropped guard deleted the key");
        assert!(
            Instant::now() < deadline,
            "the key still has PTTL {pttl} ms"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.get(&key).as_deref(), Some(token.as_str()));
}

#[tokio::test]
async fn a_release_after_the_hold_deletes_the_key() {
    let server = shared_server();
    let client = server.lock_client();
    let key = unique("hold-slow");
    let guard = client
        .lock(&key)
        .ttl(Duration::from_secs(5))
        .hold_at_least(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        server.get(&key),
        None,
        "the key outlived a release after the hold"
    );
}

/// Another task of the same process never gets the lock by a local pass while the hold
/// runs: it waits in Redis like everyone else, with a token of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_the_same_process_waits_for_the_end_of_the_hold() {
    let server = shared_server();
    let client = server.lock_client();
    let key = unique("hold-local");
    let lock = client
        .lock(&key)
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(10))
        .hold_at_least(HOLD);
    let first = lock.acquire().await.unwrap();
    let acquired = Instant::now();
    let first_token = first.token().to_owned();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.acquire().await.unwrap();
            let got = (Instant::now(), guard.token().to_owned());
            guard.release().await.unwrap();
            got
        }
    });
    lock_tests::until_waiting(&client, 1).await;
    // A task trying once is refused at once, in the process and after the release.
    assert!(matches!(
        lock.try_acquire().await,
        Err(LockError::Busy { .. })
    ));
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    assert!(matches!(
        lock.try_acquire().await,
        Err(LockError::Busy { .. })
    ));
    let (got_at, token) = waiter.await.unwrap();
    assert!(
        got_at.duration_since(acquired) >= HOLD - Duration::from_millis(50),
        "the waiting task got the lock {:?} after the first took it, within the {HOLD:?} \
         hold",
        got_at.duration_since(acquired)
    );
    assert_ne!(
        token, first_token,
        "the lock was passed locally, not taken in Redis"
    );
}

#[tokio::test]
async fn a_hold_over_the_ttl_or_on_several_keys_is_refused() {
    let server = shared_server();
    let client = server.lock_client();
    let key = unique("hold-config");
    let over = client
        .lock(&key)
        .ttl(Duration::from_secs(1))
        .hold_at_least(Duration::from_secs(2))
        .acquire()
        .await;
    match over {
        Err(LockError::Config { reason }) => {
            assert!(
                reason.contains(&key) && reason.contains("hold_at_least"),
                "{reason}"
            )
        }
        other => panic!("a hold over the ttl: {other:?}"),
    }
    let multi = MultiLock::new([format!("{key}:a"), format!("{key}:b")])
        .client(&client)
        .with_options({
            let mut options = lock_runtime::LockOptions::default();
            options.hold_at_least = Duration::from_secs(1);
            options
        })
        .acquire()
        .await;
    assert!(
        matches!(multi, Err(LockError::Config { .. })),
        "hold_at_least on several keys: {multi:?}"
    );
    assert_eq!(server.get(&key), None);
}

/// How long the killed job holder's lock lives: the "at most" of a scheduled job.
const CRASH_TTL: Duration = Duration::from_secs(2);

/// A replica that takes the job's lock and says so, then runs its body until it is killed:
/// runs only in the child process the test below starts.
#[test]
fn job_holder_worker() {
    let Some(_) = child::role() else { return };
    let url = std::env::var(URL_ENV).unwrap();
    let key = std::env::var(JOB_ENV).unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        let client = lock_runtime::LockClient::new(lock_runtime::Config::single(url)).unwrap();
        let _guard = client
            .lock(&key)
            .ttl(CRASH_TTL)
            .wait(Duration::ZERO)
            .hold_at_least(Duration::from_millis(500))
            .acquire()
            .await
            .unwrap();
        println!("holding");
        // The job's long body: killed in here (bounded, should the kill not come).
        tokio::time::sleep(LINE_BOUND).await;
    });
}

/// A replica killed (-9) while it runs the job costs the other replicas at most the lock's
/// ttl (its "at most"): their ticks skip while the key lives, and the first tick after it
/// expires runs the job (the watchdog of the dead process renews nothing).
#[test]
fn a_killed_job_holder_costs_the_other_replicas_at_most_its_ttl() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let key = unique("job-crash");
    let mut holder = Replicas(vec![child::spawn(
        "job_holder_worker",
        "h",
        &[(URL_ENV, server.url()), (JOB_ENV, key.clone())],
    )]);
    let lines = child::stream_lines(holder.0[0].stdout.take().unwrap());
    child::expect_line(&lines, "holding", LINE_BOUND);
    holder.0[0].kill().unwrap();
    holder.0[0].wait().unwrap();
    let killed = std::time::Instant::now();
    let runtime = lock_tests::two_worker_runtime();
    let (skipped, ran_after) = runtime.block_on(async {
        let client = server.lock_client();
        let mut skipped = 0;
        // Ticks every 50 ms, bounded in count and time.
        for _ in 0..400 {
            let tick = client
                .lock(&key)
                .ttl(CRASH_TTL)
                .wait(Duration::ZERO)
                .try_acquire()
                .await;
            match tick {
                Ok(guard) => {
                    let ran_after = killed.elapsed();
                    guard.release().await.unwrap();
                    return (skipped, Some(ran_after));
                }
                Err(LockError::Busy { .. }) => skipped += 1,
                Err(other) => panic!("a tick failed: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (skipped, None)
    });
    let ran_after = ran_after.expect("no tick ran the job within 20 s of the kill");
    println!(
        "FIGURE scheduled job: a killed holder (ttl {CRASH_TTL:?}) kept the others out {ran_after:?}, {skipped} ticks skipped"
    );
    assert!(
        skipped > 0,
        "the dead holder's key was gone at once: nothing to ride out"
    );
    assert!(
        ran_after <= CRASH_TTL + Duration::from_secs(2),
        "the job ran again only {ran_after:?} after its holder died (ttl {CRASH_TTL:?})"
    );
}
