//! The operator's view against a real redis-server: `inspect` reports the holder, its ttl,
//! the fence and the waiting processes in queue order; `force_release` takes the lock away,
//! wakes the queue (the first waiter is granted the lock in the same call), and the old
//! holder learns `Lost` at its next renewal.
//!
//! A "process" here is a `LockClient` of its own: each waits in a key's Redis queue as one
//! entry, as a separate OS process does.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{HolderKind, LockError, LostCause, distributed_lock};
use lock_tests::{RedisServer, shared_server};

/// A generous bound for anything that happens within a renewal interval or two.
const BOUND: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_free_key_has_no_holder_no_fence_and_nobody_waiting() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let state = client.inspect("inspect:free").await.unwrap();
    assert_eq!(state.key, "inspect:free");
    assert!(state.holders.is_empty(), "{state:?}");
    assert!(!state.is_held());
    assert_eq!(state.handover, None);
    assert_eq!(state.fence, None);
    assert_eq!(state.queued, 0);
    assert!(state.waiters.is_empty());
    let text = state.to_string();
    assert!(text.contains("holder   none (free)"), "{text}");
    assert!(text.contains("fence    none"), "{text}");
    assert!(text.contains("waiting  0"), "{text}");
    assert_eq!(server.dbsize(), 0, "inspect wrote something");
}

#[tokio::test]
async fn a_held_key_shows_its_token_ttl_and_fence() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client
        .lock("inspect:held")
        .ttl(Duration::from_secs(10))
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    let state = client.inspect("inspect:held").await.unwrap();
    let holder = state.holder().unwrap();
    assert_eq!(holder.token, guard.token());
    assert_eq!(Some(holder.token.clone()), server.get("inspect:held"));
    assert_eq!(holder.kind, HolderKind::Exclusive);
    let ttl = holder.ttl.unwrap();
    assert!(
        ttl > Duration::ZERO && ttl <= Duration::from_secs(10),
        "{ttl:?}"
    );
    assert_eq!(state.fence, guard.fence());
    assert!(state.fence.is_some());
    assert_eq!(state.queued, 0);
    let text = state.to_string();
    assert!(
        text.contains(&format!("holder   {}  ttl ", guard.token())),
        "{text}"
    );
    assert!(
        text.contains(&format!("fence    {}", guard.fence().unwrap())),
        "{text}"
    );
    guard.release().await.unwrap();
    let state = client.inspect("inspect:held").await.unwrap();
    assert!(!state.is_held());
    // The counter outlives the lock: the next fence is greater.
    assert!(state.fence.is_some());
}

#[tokio::test]
async fn two_waiting_processes_are_listed_in_their_queue_order() {
    let server = RedisServer::start();
    let key = "inspect:queue";
    let holder = server.lock_client();
    let (first, second) = (server.lock_client(), server.lock_client());
    let guard = holder.lock(key).acquire().await.unwrap();
    let wait = Duration::from_secs(20);
    let first_task = {
        let lock = first.lock(key).wait(wait);
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued(key, 1).await;
    // The second waiter wants a fencing token: a release hands it the key over instead
    // of granting it outright.
    let second_task = {
        let lock = second.lock(key).wait(wait).fencing(true);
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued(key, 2).await;
    let state = holder.inspect(key).await.unwrap();
    assert_eq!(state.holder().unwrap().token, guard.token());
    assert_eq!(state.queued, 2, "{state:?}");
    let [a, b] = &state.waiters[..] else {
        panic!("two waiters expected: {state:?}")
    };
    assert_ne!(a.id, b.id);
    assert!(a.arrived <= b.arrived, "{state:?}");
    assert!(a.waited >= b.waited, "{state:?}");
    for waiter in [a, b] {
        assert!(waiter.place_until.is_some(), "{waiter:?}");
        assert!(waiter.place_left <= Duration::from_secs(1), "{waiter:?}");
    }
    assert_eq!(a.grant_ttl, Some(Duration::from_secs(30)), "{a:?}");
    assert_eq!(b.grant_ttl, None, "a fenced waiter is handed over: {b:?}");
    let text = state.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"waiting  2"), "{text}");
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with(&format!("  1  {}  waited ", a.id)))
    );
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with(&format!("  2  {}  waited ", b.id)))
    );

    // The order listed is the order served: the first waiter gets the lock next.
    guard.release().await.unwrap();
    let first_guard = tokio::time::timeout(BOUND, first_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first_guard.token(), a.id);
    let state = holder.inspect(key).await.unwrap();
    assert_eq!(state.holder().unwrap().token, a.id);
    assert_eq!(
        state.waiters.iter().map(|w| &w.id).collect::<Vec<_>>(),
        [&b.id]
    );
    first_guard.release().await.unwrap();
    let second_guard = tokio::time::timeout(BOUND, second_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second_guard.token(), b.id);
    second_guard.release().await.unwrap();
}

/// A holder that waited in the key's queue shows since when it holds the key, not since it
/// asked: granted outright (no fence) and handed over (fenced), and still after renewals.
#[tokio::test]
async fn a_holder_that_waited_shows_since_it_took_the_key() {
    let server = RedisServer::start();
    for fencing in [false, true] {
        let key = format!("inspect:since:{fencing}");
        let (first, waiter) = (server.lock_client(), server.lock_client());
        let held = first.lock(&key).acquire().await.unwrap();
        let asked = std::time::SystemTime::now();
        let task = {
            let lock = (waiter.lock(&key))
                .wait(BOUND)
                .ttl(Duration::from_millis(600))
                .fencing(fencing);
            tokio::spawn(async move { lock.acquire().await })
        };
        server.until_queued(&key, 1).await;
        // The wait lasts a while before the key is given back.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let released = std::time::SystemTime::now();
        held.release().await.unwrap();
        let guard = tokio::time::timeout(BOUND, task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        // Right after the take, and after two renewals (every 200 ms) kept the record.
        for look in [Duration::ZERO, Duration::from_millis(700)] {
            tokio::time::sleep(look).await;
            let state = first.inspect(&key).await.unwrap();
            let holder = state.holder().unwrap();
            assert_eq!(holder.token, guard.token());
            let process = holder.identity().process().cloned().unwrap();
            let slack = Duration::from_millis(50);
            assert!(
                process.since + slack >= released,
                "fencing {fencing}, {look:?} after the take: since {:?}, asked at {asked:?}, \
                 released at {released:?}",
                process.since
            );
            assert_eq!(holder.took, Some(process.since));
            assert!(guard.lost_cause().is_none());
        }
        guard.release().await.unwrap();
        // The release takes the record with it.
        let record = format!("~lock/hold{{{key}}}");
        assert_eq!(server.get(&record), None, "{record} left behind");
    }
}

/// A read-write lock's writer that waited shows since it took the key, as a lock's holder
/// does; a semaphore's permit that waited shows since it asked (a permit's take is not
/// recorded: the documented limit of `ProcessIdentity::since`).
#[tokio::test]
async fn a_writer_shows_since_it_took_the_key_and_a_permit_since_it_asked() {
    let server = RedisServer::start();
    let (first, waiter) = (server.lock_client(), server.lock_client());
    let slack = Duration::from_millis(50);
    let held = first.rw_lock("inspect:since:rw").write().await.unwrap();
    let lock = waiter.rw_lock("inspect:since:rw").wait(BOUND);
    let task = tokio::spawn(async move { lock.write().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = std::time::SystemTime::now();
    held.release().await.unwrap();
    let writer = tokio::time::timeout(BOUND, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let state = first.inspect("inspect:since:rw").await.unwrap();
    let since = state.holder().unwrap().identity().process().unwrap().since;
    assert!(
        since + slack >= released,
        "writer since {since:?}, released {released:?}"
    );
    writer.release().await.unwrap();

    let held = first
        .semaphore("inspect:since:permits", 1)
        .acquire()
        .await
        .unwrap();
    let asked = std::time::SystemTime::now();
    let semaphore = waiter.semaphore("inspect:since:permits", 1).wait(BOUND);
    let task = tokio::spawn(async move { semaphore.acquire().await });
    server.until_queued("inspect:since:permits", 1).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = std::time::SystemTime::now();
    held.release().await.unwrap();
    let permit = tokio::time::timeout(BOUND, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let state = first.inspect("inspect:since:permits").await.unwrap();
    let holder = state.holders.first().unwrap();
    assert_eq!(holder.took, None);
    let since = holder.identity().process().unwrap().since;
    assert!(
        since + slack >= asked && since < released,
        "permit since {since:?}, asked {asked:?}, released {released:?}"
    );
    permit.release().await.unwrap();
}

/// The holder of the attribute test below tells the test it runs, then works "forever".
static STARTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

#[distributed_lock(key = "inspect:force:<job>", ttl = "3s")]
async fn stuck_job(job: u32) -> Result<(), LockError> {
    STARTED.notify_one();
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_takes_the_lock_from_a_running_holder_and_grants_the_waiter() {
    let server = shared_server();
    let key = "inspect:force:1";
    lock_tests::shared_server();
    let started = STARTED.notified();
    let holder = tokio::spawn(stuck_job(1));
    tokio::time::timeout(BOUND, started).await.unwrap();
    let old_token = server.get(key).unwrap();

    // Another process waits for the job's lock.
    let other = server.lock_client();
    let waiter = {
        let lock = other.lock(key).wait(Duration::from_secs(30));
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued(key, 1).await;
    let operator = server.lock_client();
    let waiter_id = operator.inspect(key).await.unwrap().waiters[0].id.clone();

    let released = operator.force_release(key).await.unwrap();
    assert_eq!(released.key, key);
    assert_eq!(released.removed.len(), 1, "{released:?}");
    assert_eq!(released.removed[0].token, old_token);
    assert!(released.removed[0].ttl.is_some());
    assert_eq!(released.woken.as_deref(), Some(waiter_id.as_str()));
    assert!(released.granted, "{released:?}");
    // Granted in the same call: the key holds the waiter's token already, before the
    // waiter's process even heard of it (not found free at its next park).
    let state = operator.inspect(key).await.unwrap();
    assert_eq!(state.holder().unwrap().token, waiter_id, "{state}");
    assert_eq!(state.queued, 0);
    let text = released.to_string();
    assert_eq!(
        text.split(" (ttl ").next().unwrap(),
        format!("released {key}: removed holder {old_token}")
    );
    assert!(
        text.ends_with(&format!("; granted to waiter {waiter_id}")),
        "{text}"
    );

    let guard = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    assert_eq!(guard.token(), waiter_id);

    // The old holder's next renewal (every ttl/3 = 1 s) finds its token gone: the body
    // is stopped and the call says the lease was lost, and why.
    let outcome = tokio::time::timeout(BOUND, holder)
        .await
        .expect("the old holder was never told")
        .unwrap();
    match outcome {
        Err(LockError::Lost { key: lost, cause }) => {
            assert_eq!(lost, key);
            assert_eq!(cause, LostCause::TokenGone);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // The old holder's release did not touch the new holder's key.
    assert_eq!(server.get(key).as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn force_release_of_a_free_key_removes_nothing_and_hands_a_fenced_waiter_over() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let released = client.force_release("inspect:nobody").await.unwrap();
    assert!(!released.removed_any(), "{released:?}");
    assert_eq!(released.woken, None);
    assert_eq!(
        released.to_string(),
        "released inspect:nobody: nobody held it; no waiter"
    );

    let key = "inspect:fenced-waiter";
    let guard = client.lock(key).acquire().await.unwrap();
    let other = server.lock_client();
    let waiter = {
        let lock = other.lock(key).fencing(true).wait(Duration::from_secs(30));
        tokio::spawn(async move { lock.acquire().await })
    };
    server.until_queued(key, 1).await;
    let released = client.force_release(key).await.unwrap();
    assert_eq!(released.removed[0].token, guard.token());
    assert!(!released.granted);
    let waiter_id = released.woken.clone().unwrap();
    let started = Instant::now();
    let taken = tokio::time::timeout(BOUND, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(taken.token(), waiter_id);
    assert!(taken.fence().is_some());
    assert!(started.elapsed() < BOUND);
    // The forced-out guard finds another owner at its release: nothing of theirs deleted.
    let _ = guard.release().await;
    assert_eq!(server.get(key).as_deref(), Some(taken.token()));
    taken.release().await.unwrap();
}

#[tokio::test]
async fn odd_keys_are_inspected_and_released_like_any_other() {
    let server = RedisServer::start();
    let client = server.lock_client();
    for key in [
        "{app}:k",
        "{x}:queue",
        "with spaces in it",
        "ключ:🔒:ü",
        "lock/queue/x",
        "a{b",
        "*?[glob]",
    ] {
        let guard = client.lock(key).fencing(true).acquire().await.unwrap();
        let state = client.inspect(key).await.unwrap();
        assert_eq!(state.key, key);
        assert_eq!(state.holder().unwrap().token, guard.token(), "{key}");
        assert_eq!(state.fence, guard.fence(), "{key}");
        let released = client.force_release(key).await.unwrap();
        assert_eq!(released.removed[0].token, guard.token(), "{key}");
        assert_eq!(server.get(key), None, "{key}");
        assert!(!client.inspect(key).await.unwrap().is_held(), "{key}");
        drop(guard);
    }
    // A key that names another lock's auxiliary key is refused before any traffic.
    for key in ["~lock/queue{x}", "~lock/fence/{x}"] {
        let err = client.inspect(key).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
        let err = client.force_release(key).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { .. }), "{err:?}");
    }
    // A key of another type is no lock: named, and left alone.
    let mut conn = server.conn();
    let _: () = redis::cmd("HSET")
        .arg("inspect:a-hash")
        .arg("field")
        .arg("value")
        .query(&mut conn)
        .unwrap();
    for err in [
        client.inspect("inspect:a-hash").await.unwrap_err(),
        client.force_release("inspect:a-hash").await.unwrap_err(),
    ] {
        let text = err.to_string();
        assert!(
            text.contains("inspect:a-hash") && text.contains("Redis hash, not a lock"),
            "{text}"
        );
    }
    let kind: String = redis::cmd("TYPE")
        .arg("inspect:a-hash")
        .query(&mut conn)
        .unwrap();
    assert_eq!(kind, "hash");
}

/// Everything the `tracing` fmt subscriber writes, for the test to read.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The old holder's loss is no silent one: its watchdog WARNs naming the key and counts it
/// (`lock_lost_total{cause="token_gone"}`), once.
#[test]
fn a_forced_release_is_a_counted_and_warned_loss_for_the_old_holder() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let events = Captured::default();
    let writer = events.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let mut counted = 0;
    // The client's background work (the watchdog that finds the loss) runs on the client's
    // own thread: it reports to the global recorder, and to the subscriber that was the
    // default where the client was created.
    recorder.install().unwrap();
    tracing::subscriber::with_default(subscriber, || {
        {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let server = RedisServer::start();
                let client = lock_runtime::LockClient::new(
                    lock_runtime::Config::single(server.url()).metrics_key_label(|key| {
                        key.split(':').next().unwrap_or_default().to_owned()
                    }),
                )
                .unwrap();
                let guard = client
                    .lock("forced:1")
                    .ttl(Duration::from_millis(900))
                    .acquire()
                    .await
                    .unwrap();
                let operator = server.lock_client();
                let released = operator.force_release("forced:1").await.unwrap();
                assert_eq!(released.removed[0].token, guard.token());
                let cause = tokio::time::timeout(BOUND, guard.lost()).await.unwrap();
                assert_eq!(cause, LostCause::TokenGone);
                // A renewal interval more: still one loss.
                tokio::time::sleep(Duration::from_millis(600)).await;
                drop(guard);
            });
        }
        counted = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, _, _, _)| {
                let labels: Vec<(String, String)> = key
                    .key()
                    .labels()
                    .map(|label| (label.key().to_owned(), label.value().to_owned()))
                    .collect();
                key.key().name() == lock_runtime::telemetry::LOST
                    && labels.contains(&("cause".to_owned(), "token_gone".to_owned()))
                    && labels.contains(&("key".to_owned(), "forced".to_owned()))
            })
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(value) => value,
                _ => 0,
            })
            .sum();
    });
    assert_eq!(
        counted, 1,
        "the forced-out holder's loss was not counted once"
    );
    let text = String::from_utf8_lossy(&events.0.lock().unwrap()).into_owned();
    let warned: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("lock lost"))
        .collect();
    assert_eq!(warned.len(), 1, "{text}");
    assert!(warned[0].contains("forced:1"), "{text}");
}

/// In a cluster every key of a lock is in its slot, on whichever node owns it: one script
/// call reads (or releases) them all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_force_release_work_on_a_cluster() {
    let cluster = tokio::task::block_in_place(|| lock_tests::cluster::RedisCluster::start(3));
    let client =
        || lock_runtime::LockClient::new(lock_runtime::Config::cluster(cluster.urls())).unwrap();
    let (holder, other) = (client(), client());
    let keys = ["stock:7", "{shop}:1", "with spaces", "ключ"];
    let owners: std::collections::HashSet<usize> = keys
        .iter()
        .map(|key| cluster.owner(cluster.slot(key)))
        .collect();
    assert!(owners.len() > 1, "the keys should live on several nodes");
    for key in keys {
        let guard = holder.lock(key).fencing(true).acquire().await.unwrap();
        let waiter = {
            let lock = other.lock(key).wait(Duration::from_secs(30));
            tokio::spawn(async move { lock.acquire().await })
        };
        let deadline = Instant::now() + BOUND;
        let state = loop {
            let state = holder.inspect(key).await.unwrap();
            if state.queued == 1 {
                break state;
            }
            assert!(Instant::now() < deadline, "never queued: {state}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(state.holder().unwrap().token, guard.token(), "{key}");
        assert_eq!(state.fence, guard.fence(), "{key}");
        let released = holder.force_release(key).await.unwrap();
        assert_eq!(released.removed[0].token, guard.token(), "{key}");
        assert_eq!(released.woken.as_ref(), Some(&state.waiters[0].id), "{key}");
        let taken = tokio::time::timeout(BOUND, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(taken.token(), state.waiters[0].id, "{key}");
        assert_eq!(
            holder.inspect(key).await.unwrap().holder().unwrap().token,
            taken.token()
        );
        taken.release().await.unwrap();
        drop(guard);
    }
}

const URL_ENV: &str = "INSPECT_TEST_URL";
const KEY_ENV: &str = "INSPECT_TEST_KEY";

/// The worker side of the test below: waits for the key, says with which token it got it,
/// and releases it when told (a line on stdin).
#[test]
fn waiting_process_worker() {
    let Some(_role) = lock_tests::child::role() else {
        return;
    };
    let url = std::env::var(URL_ENV).unwrap();
    let key = std::env::var(KEY_ENV).unwrap();
    lock_tests::two_worker_runtime().block_on(async {
        let client = lock_runtime::LockClient::new(lock_runtime::Config::single(url)).unwrap();
        let guard = client
            .lock(key)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        println!("acquired {}", guard.token());
        let mut line = String::new();
        tokio::task::spawn_blocking(move || std::io::stdin().read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    });
}

/// Kills the worker processes when the test ends, whatever happened.
struct Workers(Vec<std::process::Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in &mut self.0 {
            let _ = worker.kill();
            let _ = worker.wait();
        }
    }
}

/// Two OS processes wait for a key: `inspect` lists both, in their order, and that is the
/// order in which they get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_waiting_os_processes_are_listed_and_served_in_that_order() {
    use std::io::Write;

    if lock_tests::child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let key = "inspect:processes";
    let holder = server.lock_client();
    let guard = holder.lock(key).acquire().await.unwrap();
    let env = [(URL_ENV, server.url()), (KEY_ENV, key.to_owned())];
    let mut workers = Workers(Vec::new());
    let mut streams = Vec::new();
    for count in 1..=2 {
        let mut worker =
            lock_tests::child::spawn_with_stdin("waiting_process_worker", "waiter", &env);
        streams.push(lock_tests::child::stream_lines(
            worker.stdout.take().unwrap(),
        ));
        workers.0.push(worker);
        server.until_queued(key, count).await;
    }
    let state = holder.inspect(key).await.unwrap();
    assert_eq!(state.queued, 2, "{state}");
    let ids: Vec<String> = state.waiters.iter().map(|w| w.id.clone()).collect();
    assert!(
        state.waiters[0].waited >= state.waiters[1].waited,
        "{state}"
    );

    guard.release().await.unwrap();
    for (index, lines) in streams.iter().enumerate() {
        let token = tokio::task::block_in_place(|| {
            lock_tests::child::expect_line(lines, "acquired ", BOUND)
        });
        assert_eq!(token, ids[index], "served out of the listed order: {state}");
        if index == 0 {
            let state = holder.inspect(key).await.unwrap();
            assert_eq!(state.holder().unwrap().token, ids[0]);
            assert_eq!(state.waiters.len(), 1);
            assert_eq!(state.waiters[0].id, ids[1]);
        }
        let mut stdin = workers.0[index].stdin.take().unwrap();
        writeln!(stdin, "release").unwrap();
    }
    for worker in &mut workers.0 {
        let status = tokio::task::block_in_place(|| worker.wait()).unwrap();
        assert!(status.success());
    }
}

/// A semaphore's key lists every permit holder and the permit count; a forced release
/// takes every permit (each holder learns it lost at its next renewal) and wakes a waiter.
#[tokio::test]
async fn a_semaphore_lists_every_permit_and_a_forced_release_takes_them_all() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let key = "inspect:sem";
    let semaphore = client.semaphore(key, 2).ttl(Duration::from_secs(3));
    let first = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let state = client.inspect(key).await.unwrap();
    assert_eq!(state.permits, Some(2), "{state:?}");
    let mut tokens: Vec<&str> = state.holders.iter().map(|h| h.token.as_str()).collect();
    tokens.sort_unstable();
    let mut expected = vec![first.token(), second.token()];
    expected.sort_unstable();
    assert_eq!(tokens, expected, "{state:?}");
    for holder in &state.holders {
        assert_eq!(holder.kind, HolderKind::Permit, "{holder:?}");
        let ttl = holder.ttl.unwrap();
        assert!(
            ttl > Duration::ZERO && ttl <= Duration::from_secs(3),
            "{ttl:?}"
        );
    }
    let text = state.to_string();
    assert!(text.contains("permits  2 of 2 held"), "{text}");
    assert!(
        text.contains(&format!("permit   {}", first.token())),
        "{text}"
    );

    let waiter = {
        let semaphore = client.semaphore(key, 2).wait(BOUND);
        tokio::spawn(async move { semaphore.acquire().await })
    };
    server.until_queued(key, 1).await;
    let released = client.force_release(key).await.unwrap();
    assert_eq!(released.removed.len(), 2, "{released:?}");
    assert!(
        released
            .removed
            .iter()
            .all(|holder| holder.kind == HolderKind::Permit)
    );
    assert!(
        released.to_string().contains("removed permit "),
        "{released}"
    );
    let third = tokio::time::timeout(BOUND, waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap()
        .unwrap();
    for old in [&first, &second] {
        tokio::time::timeout(BOUND, old.lost())
            .await
            .expect("a permit holder never learned it lost its permit");
    }
    let state = client.inspect(key).await.unwrap();
    assert_eq!(state.holders.len(), 1, "{state:?}");
    assert_eq!(state.holders[0].token, third.token());
}

/// A read-write lock's readers are listed, one holder each; a forced release takes their
/// shares away and lets a waiting writer in.
#[tokio::test]
async fn read_write_readers_are_listed_and_a_forced_release_lets_the_writer_in() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let key = "inspect:rw";
    let rw = client.rw_lock(key).ttl(Duration::from_secs(3));
    let a = rw.read().await.unwrap();
    let b = rw.read().await.unwrap();
    let state = client.inspect(key).await.unwrap();
    let readers: Vec<&str> = state
        .holders
        .iter()
        .filter(|holder| holder.kind == HolderKind::Reader)
        .map(|holder| holder.token.as_str())
        .collect();
    assert_eq!(readers.len(), 2, "{state:?}");
    assert!(readers.contains(&a.token()) && readers.contains(&b.token()));
    assert!(state.to_string().contains("reader   "), "{state}");

    let writer = {
        let rw = client.rw_lock(key).wait(BOUND);
        tokio::spawn(async move { rw.write().await })
    };
    // The writer holds the key while it waits for the readers to leave.
    let deadline = Instant::now() + BOUND;
    while client.inspect(key).await.unwrap().holders.len() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let released = client.force_release(key).await.unwrap();
    let kinds: Vec<HolderKind> = released.removed.iter().map(|holder| holder.kind).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|kind| **kind == HolderKind::Reader)
            .count(),
        2,
        "{released:?}"
    );
    for old in [&a, &b] {
        tokio::time::timeout(BOUND, old.lost())
            .await
            .expect("a reader never learned it lost its share");
    }
    let _writer = tokio::time::timeout(BOUND, writer)
        .await
        .expect("the writer never got the key")
        .unwrap()
        .unwrap();
}
