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
    // Every permit given back: the key is gone, and so is its queue.
    assert_eq!(server.dbsize(), 2, "left behind: not only inside/most");
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
