//! The semaphore (issue 26 item 2): at most N holders per key across processes, each permit
//! its own lease, so a crashed holder's permit comes back after its ttl and a crashed
//! waiter costs the others about a second.
//!
//! ```text
//! cargo test -p lock-tests --test semaphore -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, ReleaseOutcome};
use lock_tests::{RedisServer, child};
use tokio::time::Instant;

/// Enters the guarded section in Redis: `inside` counts the holders now, `most` the most
/// there ever were (raised atomically with the count, so no overlap goes unseen).
const ENTER: &str = "local now = redis.call('INCR', KEYS[1]) \
     if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end \
     return now";

async fn enter(redis: &mut redis::aio::MultiplexedConnection, tag: &str) -> i64 {
    redis::Script::new(ENTER)
        .key(format!("inside:{tag}"))
        .key(format!("most:{tag}"))
        .invoke_async(redis)
        .await
        .unwrap()
}

async fn leave(redis: &mut redis::aio::MultiplexedConnection, tag: &str) {
    let _: i64 = redis::cmd("DECR")
        .arg(format!("inside:{tag}"))
        .query_async(redis)
        .await
        .unwrap();
}

const PERMITS: u32 = 3;
const INVARIANT_KEY: &str = "export:tenant-1";

/// A process of the invariant test: `SEM_TASKS` tasks each take a permit of
/// [`INVARIANT_KEY`] `SEM_ROUNDS` times, and inside record how many hold one at once.
#[test]
fn permit_holder_process() {
    let Some(_) = child::role() else { return };
    let url = std::env::var("SEM_URL").unwrap();
    let tasks: usize = std::env::var("SEM_TASKS").unwrap().parse().unwrap();
    let rounds: usize = std::env::var("SEM_ROUNDS").unwrap().parse().unwrap();
    lock_tests::two_worker_runtime().block_on(async move {
        let client = LockClient::new(Config::single(url.as_str())).unwrap();
        let redis = redis::Client::open(url.as_str()).unwrap();
        let redis = redis.get_multiplexed_async_connection().await.unwrap();
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let semaphore = client
                .semaphore(INVARIANT_KEY, PERMITS)
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(60));
            let mut redis = redis.clone();
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    semaphore
                        .run(async {
                            enter(&mut redis, "inv").await;
                            tokio::time::sleep(Duration::from_millis(3)).await;
                            leave(&mut redis, "inv").await;
                            Ok::<_, LockError>(())
                        })
                        .await
                        .unwrap();
                }
            }));
        }
        for handle in handles {
            handle.await.unwrap();
        }
        println!("DONE {}", tasks * rounds);
    });
}

/// Never more than N permit holders, across 3 processes of 4 tasks each (12 contenders for
/// 3 permits), and the semaphore does admit N at once (it is not a mutex).
#[test]
fn never_more_than_n_holders_across_processes() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let env = [
        ("SEM_URL", server.url()),
        ("SEM_TASKS", "4".to_owned()),
        ("SEM_ROUNDS", "25".to_owned()),
    ];
    let children: Vec<_> = (0..3)
        .map(|i| child::spawn("permit_holder_process", &format!("p{i}"), &env))
        .collect();
    let done: usize = children
        .into_iter()
        .map(|child| {
            child::collect(child, "DONE ")[0]
                .trim()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(done, 3 * 4 * 25);
    let most: i64 = server.get("most:inv").unwrap().parse().unwrap();
    println!("FIGURE semaphore invariant: most holders at once {most} of {PERMITS} permits");
    assert!(
        most <= i64::from(PERMITS),
        "{most} holders at once with {PERMITS} permits"
    );
    assert_eq!(
        most,
        i64::from(PERMITS),
        "never {PERMITS} holders at once: the semaphore admitted fewer than it has"
    );
    assert_eq!(server.get("inside:inv").as_deref(), Some("0"));
    // Every permit given back: the key is gone, and so is its queue. Each process's
    // liveness key (kept while it waited) outlives it by up to a second.
    let settled = std::time::Instant::now() + Duration::from_secs(3);
    while server.dbsize() != 2 && std::time::Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(20));
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(keys.len(), 2, "left behind: not only inside/most: {keys:?}");
}

#[tokio::test]
async fn the_permits_are_a_sorted_set_of_leases_and_the_next_waiter_gets_a_freed_one() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let semaphore = client
        .semaphore("partner-api", 2)
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(10));
    let first = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let mut conn = server.conn();
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("partner-api")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut conn)
        .unwrap();
    assert_eq!(members.len(), 3, "{members:?}");
    assert_eq!(members[0], ("~permits=2".to_owned(), 0.0));
    assert!(members.iter().any(|(token, _)| token == first.token()));
    let busy = semaphore.try_acquire().await.unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy}");
    assert!(busy.to_string().contains("partner-api"), "{busy}");
    // A third waits, and gets the permit the moment one is given back.
    let waiting = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { semaphore.acquire().await }
    });
    server.until_queued("partner-api", 1).await;
    let released_at = Instant::now();
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let third = waiting.await.unwrap().unwrap();
    let waited = released_at.elapsed();
    println!("FIGURE semaphore hand-over after a release: {waited:?}");
    assert!(
        waited < Duration::from_millis(900),
        "woken by the release, not by its park cap: {waited:?}"
    );
    drop(second);
    third.release().await.unwrap();
    // The dropped guard gives its permit back in the background.
    let gone = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        server.dbsize() == 0
    })
    .await;
    assert!(gone.is_some(), "keys left: {}", server.dbsize());
}

#[tokio::test]
async fn holders_that_disagree_on_the_permit_count_get_an_error_naming_the_key() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let held = client.semaphore("exports", 3).acquire().await.unwrap();
    let err = client.semaphore("exports", 5).acquire().await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LockError::Config { .. }), "{text}");
    assert!(
        text.contains("`exports`") && text.contains('3') && text.contains('5'),
        "{text}"
    );
    held.release().await.unwrap();
    // Nobody holds it now: the next holder's count is recorded.
    client
        .semaphore("exports", 5)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A lock's key is not a semaphore's, and zero permits is refused before any traffic.
    let _lock = client.lock("a-lock").acquire().await.unwrap();
    let err = client.semaphore("a-lock", 2).acquire().await.unwrap_err();
    assert!(
        matches!(err, LockError::InvalidKey { .. }) && err.to_string().contains("a-lock"),
        "{err}"
    );
    let err = client.semaphore("exports", 0).acquire().await.unwrap_err();
    assert!(err.to_string().contains("0 permits"), "{err}");
}

#[tokio::test]
async fn the_watchdog_renews_each_permit_and_a_lost_permit_is_reported() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let semaphore = client
        .semaphore("renewed", 2)
        .ttl(Duration::from_millis(300));
    let guard = semaphore.acquire().await.unwrap();
    // Three ttls later the permit is still held: renewed, and the key too.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!guard.is_lost());
    let mut conn = server.conn();
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("renewed")
        .arg(guard.token())
        .query(&mut conn)
        .unwrap();
    assert!(score.is_some(), "the permit's lease ended while held");
    assert!(server.pttl("renewed") > 0);
    // An operator removes the permit: the next renewal finds it gone.
    let _: i64 = redis::cmd("ZREM")
        .arg("renewed")
        .arg(guard.token())
        .query(&mut conn)
        .unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the loss was never reported");
    assert_eq!(cause, lock_runtime::LostCause::TokenGone);
    assert_eq!(
        guard.release().await.unwrap(),
        ReleaseOutcome::AlreadyExpired
    );
}

/// The attribute form end to end: `permits = 2` lets two bodies in at once per tenant, and
/// only two; `current_lock()` inside names the semaphore's key.
#[lock_runtime::distributed_lock(
    key = "attr-export:<tenant>",
    permits = 2,
    ttl = "5s",
    wait = "20s"
)]
async fn export(
    tenant: &str,
    mut redis: redis::aio::MultiplexedConnection,
) -> Result<String, LockError> {
    let current = lock_runtime::current_lock().expect("inside a guarded body");
    enter(&mut redis, tenant).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    leave(&mut redis, tenant).await;
    Ok(current.key().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_admits_permits_bodies_at_once_per_key() {
    if child::role().is_some() {
        return;
    }
    let server = lock_tests::shared_server();
    async {
        let redis = server
            .redis()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let calls = (0..12).map(|i| {
            let tenant = if i % 2 == 0 { "acme" } else { "globex" };
            tokio::spawn(export(tenant, redis.clone()))
        });
        for call in futures::future::join_all(calls).await {
            assert!(call.unwrap().unwrap().starts_with("attr-export:"));
        }
    }
    .await;
    for tenant in ["acme", "globex"] {
        let most: i64 = server
            .get(&format!("most:{tenant}"))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(most, 2, "{tenant}: {most} bodies at once with permits = 2");
    }
}

const CRASH_KEY: &str = "crash-permits";

/// A process that takes `SEM_TAKE` permits of [`CRASH_KEY`] (`SEM_PERMITS` of them, ttl
/// `SEM_TTL_MS`, waiting up to a minute) in as many tasks, prints `HELD` once it holds them
/// all (or `WAITING` at once, when it only queues), and never gives them back: the test
/// kills it with SIGKILL.
#[test]
fn crashing_process() {
    let Some(_) = child::role() else { return };
    let url = std::env::var("SEM_URL").unwrap();
    let take: usize = std::env::var("SEM_TAKE").unwrap().parse().unwrap();
    let permits: u32 = std::env::var("SEM_PERMITS").unwrap().parse().unwrap();
    let ttl: u64 = std::env::var("SEM_TTL_MS").unwrap().parse().unwrap();
    // Optional: this long between one permit taken and the next asked for, unrenewed (so
    // that the permits end that far apart).
    let gap: Option<u64> = std::env::var("SEM_GAP_MS")
        .ok()
        .map(|gap| gap.parse().unwrap());
    lock_tests::two_worker_runtime().block_on(async move {
        let client = LockClient::new(Config::single(url.as_str())).unwrap();
        let (held_tx, mut held_rx) = tokio::sync::mpsc::channel(take);
        let mut held = 0;
        for _ in 0..take {
            let semaphore = client
                .semaphore(CRASH_KEY, permits)
                .ttl(Duration::from_millis(ttl))
                .watchdog(gap.is_none())
                .wait(Duration::from_secs(60));
            let held_tx = held_tx.clone();
            tokio::spawn(async move {
                let guard = semaphore.acquire().await.unwrap();
                held_tx.send(()).await.unwrap();
                std::future::pending::<()>().await;
                drop(guard);
            });
            if let Some(gap) = gap {
                held_rx.recv().await.unwrap();
                held += 1;
                tokio::time::sleep(Duration::from_millis(gap)).await;
            }
        }
        println!("WAITING");
        for _ in held..take {
            held_rx.recv().await.unwrap();
        }
        println!("HELD");
        std::future::pending::<()>().await;
    });
}

fn crashing(server: &RedisServer, take: usize, permits: u32, ttl_ms: u64) -> std::process::Child {
    child::spawn(
        "crashing_process",
        "crash",
        &crash_env(server, take, permits, ttl_ms),
    )
}

fn crash_env(
    server: &RedisServer,
    take: usize,
    permits: u32,
    ttl_ms: u64,
) -> Vec<(&'static str, String)> {
    vec![
        ("SEM_URL", server.url()),
        ("SEM_TAKE", take.to_string()),
        ("SEM_PERMITS", permits.to_string()),
        ("SEM_TTL_MS", ttl_ms.to_string()),
    ]
}

/// A holder killed with SIGKILL: its permits come back when their leases end (their ttl,
/// as nobody renews them), and a waiter of another process gets each then, woken by nobody
/// (the holder is dead), by its park's look at the leases. The two permits were taken
/// 500 ms apart and not renewed, so they end 500 ms apart: the second is waited for, not
/// tried at once (a holder's permits end when each one's last renewal says, which a busy
/// machine spreads apart too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_comes_back_after_its_ttl() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let ttl = Duration::from_millis(2000);
    let mut env = crash_env(&server, 2, 2, ttl.as_millis() as u64);
    env.push(("SEM_GAP_MS", "500".to_owned()));
    let mut holder = child::spawn("crashing_process", "crash", &env);
    let lines = child::stream_lines(holder.stdout.take().unwrap());
    child::expect_line(&lines, "HELD", Duration::from_secs(30));
    let client = server.lock_client();
    let semaphore = client
        .semaphore(CRASH_KEY, 2)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60));
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(LockError::Busy { .. })
    ));
    holder.kill().unwrap();
    holder.wait().unwrap();
    let killed = Instant::now();
    let guard = semaphore.acquire().await.unwrap();
    let waited = killed.elapsed();
    println!("FIGURE semaphore: a killed holder's permit came back after {waited:?} (ttl {ttl:?})");
    assert!(
        waited < ttl + Duration::from_secs(8),
        "the permit came back only after {waited:?}"
    );
    // The other dead permit comes back when its own lease ends.
    let second = semaphore.acquire().await.unwrap();
    let waited = killed.elapsed();
    assert!(
        waited < ttl + Duration::from_secs(8),
        "the second permit came back only after {waited:?}"
    );
    guard.release().await.unwrap();
    second.release().await.unwrap();
}

/// A waiter killed with SIGKILL while queued ahead of a live one: the live waiter gets the
/// freed permit within about a second (the dead one's place lapses with its queue lease),
/// not after any ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_costs_the_others_about_a_second() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let semaphore = client
        .semaphore(CRASH_KEY, 1)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(60));
    let held = semaphore.acquire().await.unwrap();
    // Three tasks of another process queue first ...
    let mut waiter = crashing(&server, 3, 1, 30_000);
    server.until_queued(CRASH_KEY, 3).await;
    // ... then one of ours, behind them.
    let ours = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { semaphore.acquire().await }
    });
    server.until_queued(CRASH_KEY, 4).await;
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = ours.await.unwrap().unwrap();
    let waited = released.elapsed();
    println!("FIGURE semaphore: a killed waiter ahead held the next one up {waited:?}");
    assert!(
        waited < Duration::from_secs(6),
        "a dead waiter held the live one up {waited:?} (its ttl is 30 s)"
    );
    guard.release().await.unwrap();
}

/// A semaphore waiter at the head of the queue that leaves while nobody holds a permit (the
/// key is absent) must leave the key absent. Found by the adversary (seed
/// 209596376162791821: `ADV-OTHER s … the key holds a lock or another value`): leave.lua
/// turned to the permits by the key's type, so on an absent key it took the mutex's path
/// and wrote a hand-over (a string) there for the next waiter, after which every
/// acquisition of the semaphore failed with `InvalidKey`.
#[tokio::test]
async fn a_waiter_leaving_while_nobody_holds_a_permit_leaves_the_key_absent() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let (queue, deadlines) = ("~lock/queue{left}", "~lock/deadlines{left}");
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = seconds * 1000 + micros / 1000;
    for (arrival, waiter) in [(1, "permit:first"), (2, "permit:second")] {
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg(queue)
            .arg(arrival)
            .arg(waiter)
            .ignore()
            .cmd("ZADD")
            .arg(deadlines)
            .arg(now_ms + 60_000)
            .arg(waiter)
            .ignore()
            .query(&mut conn)
            .unwrap();
    }
    // leave.lua as the runtime sends it (scripts.rs: the prelude, the permits, the body).
    let leave = redis::Script::new(concat!(
        include_str!("../../lock-runtime/src/lua/prelude.lua"),
        include_str!("../../lock-runtime/src/lua/semaphore_permits.lua"),
        include_str!("../../lock-runtime/src/lua/leave.lua")
    ));
    let _: i64 = leave
        .key("left")
        .key(queue)
        .key(deadlines)
        .key("~lock/ttls{left}")
        .arg("permit:first")
        .arg("~lock/released{left}")
        .arg("PUBLISH")
        .arg(500)
        .invoke(&mut conn)
        .unwrap();
    let kind: String = redis::cmd("TYPE").arg("left").query(&mut conn).unwrap();
    assert_eq!(
        kind,
        "none",
        "the leave wrote {:?} at the key",
        server.get("left")
    );
    // The semaphore still works: the remaining waiter's place is owed a permit, a newcomer
    // with room beside it takes one.
    let client = server.lock_client();
    let permit = client.semaphore("left", 2).try_acquire().await.unwrap();
    permit.release().await.unwrap();
}

/// The client's shutdown gives permits back and takes waiters out of the queue, through the
/// same pipeline as locks: the others get the permits at once, not after a ttl.
#[tokio::test]
async fn shutdown_gives_the_permits_back_and_leaves_the_queue() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let semaphore = client
        .semaphore("shut", 1)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30));
    let held = semaphore.acquire().await.unwrap();
    let waiting = tokio::spawn({
        let semaphore = semaphore.clone();
        async move { semaphore.acquire().await }
    });
    server.until_queued("shut", 1).await;
    let report = client.shutdown().await;
    assert_eq!(
        (report.released, report.left, report.failed),
        (1, 1, 0),
        "{report:?}"
    );
    assert_eq!(held.lost_cause(), Some(lock_runtime::LostCause::Shutdown));
    let err = waiting.await.unwrap().unwrap_err();
    assert!(matches!(err, LockError::Shutdown { .. }), "{err}");
    drop(held);
    // At once: no permit, no place; the process's liveness key (which kept its place)
    // lapses within its lease.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .unwrap();
    let left: Vec<&String> = keys
        .iter()
        .filter(|key| !key.starts_with("~lock/alive/"))
        .collect();
    assert!(
        left.is_empty(),
        "the permit or the place stayed in Redis: {left:?}"
    );
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "the liveness key stayed in Redis"
    );
    // Another process takes the permit at once.
    let other = server.lock_client();
    let permit = other.semaphore("shut", 1).try_acquire().await.unwrap();
    permit.release().await.unwrap();
}

/// A permit goes back in one script call: the lock's short release form (which knows no
/// permits) is for lock holders only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_goes_back_in_one_script_call() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let semaphore = client.semaphore("one-call", 2);
    // The scripts loaded first, so the count below holds no NOSCRIPT round.
    semaphore.acquire().await.unwrap().release().await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    server.reset_stats();
    assert_eq!(permit.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        server.script_calls(),
        1,
        "script calls to give one permit back"
    );
}
