//! Shutdown: the locks a process still holds when it shuts down are released, not left to
//! their ttl. Each case runs a child process whose `#[tokio::main]` function returns while
//! it holds locks through the attribute (the runtime then drops its tasks, the background
//! releases among them); the parent watches the keys. Each case prints its figure:
//!
//! ```text
//! cargo test -p lock-tests --test shutdown -- --nocapture --test-threads=1 | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, Lock, LockError, LostCause, distributed_lock};
use lock_tests::{RedisServer, child};

/// The lease of every lock here: far longer than any bound the tests allow.
const TTL: Duration = Duration::from_secs(30);

/// How long after `main` returned every key must be gone (the release at shutdown is
/// bounded by about a second; the rest is a margin for a loaded machine).
const BOUND: Duration = Duration::from_secs(5);

/// A body that holds its lock until the process shuts down.
#[distributed_lock(key = "shutdown:<name>", ttl = "30s")]
async fn hold_forever(name: String, held: tokio::sync::mpsc::Sender<()>) -> Result<(), LockError> {
    held.send(()).await.unwrap();
    std::future::pending::<()>().await;
    Ok(())
}

/// The child's `main`: takes the locks its role names, prints `RETURNING`, and returns,
/// as a service's `main` returns at the end of its work.
#[tokio::main]
async fn child_main(role: &str) {
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    if role == "shutdown-injected" {
        return shut_down_with_an_injected_client(url).await;
    }
    lock_runtime::init(Config::single(url.clone())).unwrap();
    let (held, mut holding) = tokio::sync::mpsc::channel(1000);
    let spawned = match role {
        "spawned" => 1,
        "many" => MANY,
        _ => 0,
    };
    for index in 0..spawned {
        tokio::spawn(hold_forever(format!("{role}-{index}"), held.clone()));
    }
    for _ in 0..spawned {
        holding.recv().await.unwrap();
    }
    if role == "exit-two-clients" {
        exit_holding_with_two_clients(url).await;
    }
    if role == "dropped" {
        let guard = Lock::new("shutdown:dropped-0")
            .ttl(TTL)
            .acquire()
            .await
            .unwrap();
        drop(guard);
    }
    println!("RETURNING");
}

/// Holds one lock through the global client and one through an injected client, then
/// leaves with `std::process::exit` (no destructor runs, no runtime ends): only the exit
/// hook can give the two back.
async fn exit_holding_with_two_clients(url: String) {
    let global = Lock::new("shutdown:exit-global")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let injected = lock_runtime::LockClient::new(Config::single(url)).unwrap();
    let own = injected
        .lock("shutdown:exit-injected")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    println!("RETURNING");
    let _held = (global, own, injected);
    std::process::exit(0)
}

/// A service that injects its client (as through axum's `State`) and never uses the
/// global one: holds a lock through it, calls the process-wide `lock_runtime::shutdown()`,
/// prints the report and what acquiring says afterwards, then stays alive (the parent
/// looks at Redis before the exit hook could give anything back).
async fn shut_down_with_an_injected_client(url: String) {
    let injected = lock_runtime::LockClient::new(Config::single(url)).unwrap();
    let _guard = injected
        .lock("shutdown:injected")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let report = lock_runtime::shutdown().await;
    println!(
        "REPORT released={} failed={}",
        report.released, report.failed
    );
    let after = injected.lock("shutdown:injected-after").acquire().await;
    println!("AFTER {}", matches!(after, Err(LockError::Shutdown { .. })));
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// How many locks the `many` child holds.
const MANY: usize = 100;

/// Runs only in the children started by the tests below.
#[test]
fn shutdown_worker() {
    let Some(role) = child::role() else { return };
    child_main(&role);
    println!("EXITED");
}

/// Starts a child in `role`, waits for its `main` to return, and returns how long after
/// that every one of `keys` was gone (panics, naming the keys left and their PTTL, when
/// some outlive the bound).
fn released_after_main_returns(role: &str, keys: &[String]) -> Duration {
    let server = RedisServer::start();
    let mut worker = child::spawn("shutdown_worker", role, &[("LOCK_TESTS_URL", server.url())]);
    let lines = child::stream_lines(worker.stdout.take().unwrap());
    child::expect_line(&lines, "RETURNING", Duration::from_secs(30));
    let returned = Instant::now();
    let mut conn = server.conn();
    let held = |conn: &mut redis::Connection| -> Vec<(String, i64)> {
        keys.iter()
            .map(|key| {
                let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
                (key.clone(), pttl)
            })
            .filter(|(_, pttl)| *pttl != -2)
            .collect()
    };
    let mut left = held(&mut conn);
    while !left.is_empty() && returned.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(2));
        left = held(&mut conn);
    }
    let took = returned.elapsed();
    let status = worker.wait().unwrap();
    assert!(
        left.is_empty(),
        "{role}: {} of {} keys still held {took:?} after main returned (first: {:?})",
        left.len(),
        keys.len(),
        left.first()
    );
    assert!(status.success(), "{role}: the child failed: {status:?}");
    let queues: Vec<String> = redis::cmd("KEYS")
        .arg("~lock/queue*")
        .query(&mut conn)
        .unwrap();
    assert!(queues.is_empty(), "{role}: queues left: {queues:?}");
    took
}

fn figure(case: &str, took: Duration) {
    println!(
        "FIGURE shutdown {case}: every key gone {:.1} ms after main returned",
        took.as_secs_f64() * 1000.0
    );
}

/// A spawned task holds a lock inside an attribute body (ttl 30 s) when `main` returns.
#[test]
fn a_lock_held_by_a_spawned_task_is_released_when_main_returns() {
    if child::role().is_some() {
        return;
    }
    let took = released_after_main_returns("spawned", &["shutdown:spawned-0".to_owned()]);
    figure("1 lock held by a spawned task", took);
}

/// A guard dropped just before `main` returns: its background release never got to run.
#[test]
fn a_guard_dropped_just_before_main_returns_is_released() {
    if child::role().is_some() {
        return;
    }
    let took = released_after_main_returns("dropped", &["shutdown:dropped-0".to_owned()]);
    figure("1 guard dropped just before return", took);
}

/// A hundred locks held by a hundred tasks when `main` returns: released together, within
/// the bound.
#[test]
fn a_hundred_locks_held_when_main_returns_are_all_released() {
    if child::role().is_some() {
        return;
    }
    let keys: Vec<String> = (0..MANY)
        .map(|index| format!("shutdown:many-{index}"))
        .collect();
    let took = released_after_main_returns("many", &keys);
    figure(&format!("{MANY} locks held by spawned tasks"), took);
}

/// A process with two clients (the global one and an injected one), each holding a lock,
/// leaves with `std::process::exit`: every live client gives back what it holds, so both
/// keys are gone well before their ttl.
#[test]
fn every_live_client_gives_back_at_exit() {
    if child::role().is_some() {
        return;
    }
    let keys = ["shutdown:exit-global", "shutdown:exit-injected"].map(str::to_owned);
    let took = released_after_main_returns("exit-two-clients", &keys);
    figure("2 locks of 2 clients at process::exit", took);
}

/// `lock_runtime::shutdown()` in a process whose only client is injected: it gives back
/// what that client holds (the key is gone while the process still runs), counts it in its
/// report, and the client takes no new locks.
#[test]
fn the_process_wide_shutdown_gives_back_what_an_injected_client_holds() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let mut worker = child::spawn(
        "shutdown_worker",
        "shutdown-injected",
        &[("LOCK_TESTS_URL", server.url())],
    );
    let lines = child::stream_lines(worker.stdout.take().unwrap());
    let report = child::expect_line(&lines, "REPORT ", Duration::from_secs(30));
    let after = child::expect_line(&lines, "AFTER ", Duration::from_secs(30));
    let held = server.get("shutdown:injected");
    worker.kill().unwrap();
    worker.wait().unwrap();
    assert_eq!(held, None, "the injected client's lock is still in Redis");
    assert_eq!(report, "released=1 failed=0");
    assert_eq!(after, "true", "the injected client still takes locks");
}

/// The explicit shutdown: renewals stop, every held lock is released, every queue place
/// this process holds is left, the holders are told their lease is gone, and acquiring
/// afterwards fails with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_shutdown_releases_everything_and_refuses_new_locks() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let other = server.lock_client();
    let mut guards = Vec::new();
    for index in 0..20 {
        guards.push(
            client
                .lock(format!("explicit-{index}"))
                .ttl(TTL)
                .acquire()
                .await
                .unwrap(),
        );
    }
    // Another process holds a key this one waits for: the wait is a place in its queue.
    let foreign = other
        .lock("explicit-waited")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("explicit-waited")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    server.until_queued("explicit-waited", 1).await;

    let started = Instant::now();
    let report = client.shutdown().await;
    let took = started.elapsed();
    assert_eq!(report.released, 20, "{report:?}");
    assert_eq!(client.held_leases(), 0);
    for index in 0..20 {
        assert_eq!(server.get(&format!("explicit-{index}")), None);
    }
    assert_eq!(
        server.queued("explicit-waited"),
        0,
        "the queue place was left"
    );
    let waited = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not stopped by the shutdown")
        .unwrap();
    assert!(
        matches!(waited, Err(LockError::Shutdown { .. })),
        "{waited:?}"
    );
    for guard in &guards {
        assert_eq!(guard.lost_cause(), Some(LostCause::Shutdown));
    }
    let refused = client.lock("explicit-after").acquire().await.unwrap_err();
    assert!(matches!(refused, LockError::Shutdown { .. }), "{refused:?}");
    assert!(refused.to_string().contains("explicit-after"), "{refused}");
    assert_eq!(server.get("explicit-after"), None);
    drop(guards);
    foreign.release().await.unwrap();
    println!(
        "FIGURE shutdown explicit: 20 locks released and 1 queue left in {:.1} ms",
        took.as_secs_f64() * 1000.0
    );
}

/// Redlock: a task waiting for a lock when the client shuts down fails with `Shutdown` at
/// its next round and takes nothing, even when the key comes free right after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_acquisition_waiting_at_shutdown_takes_nothing() {
    if child::role().is_some() {
        return;
    }
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let client = lock_runtime::LockClient::new(Config::redlock(urls.clone())).unwrap();
    let other = lock_runtime::LockClient::new(Config::redlock(urls)).unwrap();
    let held = other
        .lock("redlock-shutdown")
        .ttl(TTL)
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let lock = client
            .lock("redlock-shutdown")
            .ttl(TTL)
            .wait(Duration::from_secs(20));
        tokio::spawn(async move {
            let started = Instant::now();
            (lock.acquire().await, started.elapsed())
        })
    };
    lock_tests::until_waiting(&client, 1).await;

    let report = client.shutdown().await;
    assert_eq!(report.failed, 0, "{report:?}");
    let shut = Instant::now();
    // The key comes free: a waiter that did not check the shutdown would take it now.
    held.release().await.unwrap();
    let (waited, _) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not stopped by the shutdown")
        .unwrap();
    let stopped = shut.elapsed();
    match &waited {
        Err(LockError::Shutdown { key }) => assert_eq!(key, "redlock-shutdown"),
        Err(err) => panic!("expected Shutdown, got {err:?}"),
        Ok(guard) => panic!(
            "the waiter took `{}` after the client shut down",
            guard.key()
        ),
    }
    drop(waited);
    for master in &masters {
        assert_eq!(
            master.get("redlock-shutdown"),
            None,
            "a master keeps the key"
        );
    }
    assert_eq!(client.held_leases(), 0);
    println!(
        "FIGURE shutdown redlock: a waiting acquisition failed with Shutdown {:.1} ms after \
         the shutdown returned",
        stopped.as_secs_f64() * 1000.0
    );
}

/// A scheduled-job lock (`hold_at_least`) whose body has finished keeps its key at
/// shutdown: the key stays until the hold_at_least point, so that another replica still
/// skips that run, instead of being deleted with the locks still held.
/// (A current-thread runtime: the drop's background give-back cannot run before the
/// shutdown collects it, which is the interleaving of a process that exits right after
/// its job.)
#[tokio::test]
async fn a_finished_hold_at_least_lock_keeps_its_key_at_shutdown() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let hold = Duration::from_secs(20);
    let guard = client
        .lock("scheduled-shutdown")
        .ttl(TTL)
        .hold_at_least(hold)
        .acquire()
        .await
        .unwrap();
    let acquired = Instant::now();
    // The job's body is done: the guard goes, its give-back is in flight.
    drop(guard);
    let report = client.shutdown().await;
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.released, 0, "the key was deleted: {report:?}");
    let pttl = server.pttl("scheduled-shutdown");
    let left = hold.saturating_sub(acquired.elapsed());
    assert!(
        pttl > 0 && Duration::from_millis(pttl as u64) <= left + Duration::from_millis(50),
        "PTTL {pttl} ms, expected what is left of the hold ({left:?})"
    );
    assert!(
        Duration::from_millis(pttl as u64) + Duration::from_secs(5) > left,
        "PTTL {pttl} ms, expected about {left:?}"
    );
    // Another replica skips this run.
    let other = server.lock_client();
    let busy = other
        .lock("scheduled-shutdown")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    println!("FIGURE shutdown hold_at_least: key kept, PTTL {pttl} ms of {hold:?}");
}

/// Guarded bodies cancelled by the shutdown (`on_lost = "cancel"`): their locks count as
/// released by the shutdown, whoever's release reached Redis. The bodies' guards leave the
/// release to the shutdown, so the report says what the shutdown caused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_counts_the_locks_of_bodies_the_shutdown_cancelled() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let (inside, mut entered) = tokio::sync::mpsc::channel(4);
    let bodies: Vec<_> = (0..2)
        .map(|index| {
            let (client, inside) = (client.clone(), inside.clone());
            tokio::spawn(async move {
                client
                    .lock(format!("cancelled-{index}"))
                    .ttl(TTL)
                    .run(async move {
                        inside.send(()).await.unwrap();
                        std::future::pending::<Result<(), LockError>>().await
                    })
                    .await
            })
        })
        .collect();
    for _ in 0..2 {
        entered.recv().await.unwrap();
    }
    let report = client.shutdown().await;
    for body in bodies {
        let ended = tokio::time::timeout(BOUND, body).await.unwrap().unwrap();
        assert!(ended.is_err(), "the body was not cancelled: {ended:?}");
    }
    assert_eq!((report.released, report.not_held), (2, 0), "{report:?}");
    for index in 0..2 {
        assert_eq!(server.get(&format!("cancelled-{index}")), None);
    }
}

/// A waiter whose try is in flight when the client shuts down (Redis queued it, the reply
/// is not read yet) is left too: the shutdown waits until the reply was read and the place
/// registered, then leaves it, for a lock's waiter and a semaphore's alike. The replies are
/// held back by a proxy until the client is closed. Without the wait, the shutdown
/// collected nothing, reported no place left, and the places stayed in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_whose_reply_is_in_flight_at_shutdown_is_left() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let proxy = lock_tests::proxy::FaultProxy::start(server.port());
    let client = lock_runtime::LockClient::new(Config::single(proxy.url())).unwrap();
    let other = server.lock_client();
    let held = other.lock("in-flight").ttl(TTL).acquire().await.unwrap();
    let permit = other.semaphore("in-flight-sem", 1).ttl(TTL);
    let permit = permit.acquire().await.unwrap();
    // Warm the connection and load the scripts the waiters use, then hold back every
    // reply.
    let warm = client
        .lock("in-flight-warm")
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    warm.release().await.unwrap();
    let warm = client.semaphore("in-flight-warm-sem", 1);
    warm.acquire().await.unwrap().release().await.unwrap();
    proxy.set_hold(lock_tests::proxy::Direction::Down, true);
    let lock_waiter = {
        // Fenced: the first try is the script that queues (an unfenced one starts with a
        // plain `SET NX`, which queues nothing).
        let lock = client
            .lock("in-flight")
            .fencing(true)
            .wait(Duration::from_secs(20));
        tokio::spawn(async move { lock.acquire().await.map(drop) })
    };
    let semaphore_waiter = {
        let semaphore = client
            .semaphore("in-flight-sem", 1)
            .wait(Duration::from_secs(20));
        tokio::spawn(async move { semaphore.acquire().await.map(drop) })
    };
    server.until_queued("in-flight", 1).await;
    server.until_queued("in-flight-sem", 1).await;
    let shutdown = tokio::spawn({
        let client = client.clone();
        async move { client.shutdown().await }
    });
    // Closed: a try-once on the waited key is refused as shut down (before that, as busy:
    // the waiting task has the process's turn, and nothing is sent).
    for attempt in 0.. {
        match client.lock("in-flight").try_acquire().await {
            Err(LockError::Shutdown { .. }) => break,
            Err(LockError::Busy { .. }) if attempt < 5_000 => tokio::task::yield_now().await,
            other => panic!("the client did not close: {other:?}"),
        }
    }
    proxy.set_hold(lock_tests::proxy::Direction::Down, false);
    let report = tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("the shutdown did not end")
        .unwrap();
    assert_eq!((report.left, report.failed), (2, 0), "{report:?}");
    assert_eq!(server.queued("in-flight"), 0, "the lock's place stayed");
    assert_eq!(
        server.queued("in-flight-sem"),
        0,
        "the semaphore's place stayed"
    );
    for waiter in [lock_waiter, semaphore_waiter] {
        let waited = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a waiter was not stopped by the shutdown")
            .unwrap();
        assert!(
            matches!(waited, Err(LockError::Shutdown { .. })),
            "{waited:?}"
        );
    }
    held.release().await.unwrap();
    permit.release().await.unwrap();
}

/// A lock taken by a task alone on its key (one plain `SET NX PX`, no local queue) whose
/// reply is in flight when the client shuts down is given back: the shutdown waits until
/// the reply was read and the lease registered, then releases it. The reply is held back
/// by a proxy until the client is closed. Without the wait, the shutdown found no lease,
/// and the key stayed in Redis for its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_alone_whose_reply_is_in_flight_at_shutdown_is_released() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let proxy = lock_tests::proxy::FaultProxy::start(server.port());
    let client = lock_runtime::LockClient::new(Config::single(proxy.url())).unwrap();
    let warm = client.lock("alone-in-flight-warm").acquire().await.unwrap();
    warm.release().await.unwrap();
    proxy.set_hold(lock_tests::proxy::Direction::Down, true);
    let taker = {
        let lock = client
            .lock("alone-in-flight")
            .ttl(TTL)
            .wait(Duration::from_secs(20));
        tokio::spawn(async move { lock.acquire().await })
    };
    // The SET reached the server; its reply is held back.
    for attempt in 0.. {
        if server.get("alone-in-flight").is_some() {
            break;
        }
        assert!(attempt < 2_500, "the SET never reached the server");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The shutdown closes the client when first polled, then waits for the try.
    let mut shutdown = Box::pin(client.shutdown());
    let polled = tokio::time::timeout(Duration::from_millis(1), &mut shutdown).await;
    assert!(
        polled.is_err(),
        "the shutdown did not wait for the try in flight"
    );
    let closed = client
        .lock("alone-in-flight")
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(
        matches!(closed, Err(LockError::Shutdown { .. })),
        "{closed:?}"
    );
    proxy.set_hold(lock_tests::proxy::Direction::Down, false);
    let report = tokio::time::timeout(Duration::from_secs(10), shutdown)
        .await
        .expect("the shutdown did not end");
    assert_eq!((report.released, report.failed), (1, 0), "{report:?}");
    assert_eq!(server.get("alone-in-flight"), None, "the lock stayed held");
    let taken = tokio::time::timeout(Duration::from_secs(5), taker)
        .await
        .expect("the acquire did not end")
        .unwrap();
    // Taken just before the close: its lease was given back by the shutdown.
    if let Ok(guard) = taken {
        assert_eq!(guard.lost_cause(), Some(LostCause::Shutdown));
    }
}
