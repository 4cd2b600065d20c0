//! Several keys at once, all or none, in a canonical order.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{
    LockClient, LockError, LostCause, MultiLock, OnLost, current_lock, current_locks,
};
use lock_tests::{RedisServer, child};

async fn balance(redis: &mut redis::aio::MultiplexedConnection, account: &str) -> i64 {
    redis::cmd("GET")
        .arg(account)
        .query_async::<Option<i64>>(redis)
        .await
        .unwrap()
        .unwrap_or(0)
}

/// Two clients (two processes to Redis) move money between two accounts, one naming them
/// `[a, b]`, the other `[b, a]`, each transfer a read-modify-write of both balances under the
/// two locks: nobody deadlocks, and the total never changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_in_both_orders_keep_the_total_and_never_deadlock() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let mut setup = server
        .redis()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("MSET")
        .arg("bal:a")
        .arg(1000)
        .arg("bal:b")
        .arg(1000)
        .query_async(&mut setup)
        .await
        .unwrap();
    let clients: Vec<LockClient> = (0..2).map(|_| server.lock_client()).collect();
    let mut tasks = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let (from, to) = if index == 0 { ("a", "b") } else { ("b", "a") };
        for _ in 0..6 {
            let client = client.clone();
            let mut redis = setup.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let both = MultiLock::new([format!("acct:{from}"), format!("acct:{to}")])
                        .client(&client)
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .unwrap();
                    let (source, target) = (format!("bal:{from}"), format!("bal:{to}"));
                    let have = balance(&mut redis, &source).await;
                    tokio::task::yield_now().await;
                    let other = balance(&mut redis, &target).await;
                    let _: () = redis::cmd("MSET")
                        .arg(&source)
                        .arg(have - 7)
                        .arg(&target)
                        .arg(other + 7)
                        .query_async(&mut redis)
                        .await
                        .unwrap();
                    both.release().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("a transfer deadlocked")
            .unwrap();
    }
    let total = balance(&mut setup, "bal:a").await + balance(&mut setup, "bal:b").await;
    assert_eq!(total, 2000, "money was created or lost");
    // 60 transfers each way: the balances are back where they started.
    assert_eq!(balance(&mut setup, "bal:a").await, 1000);
}

/// When one key cannot be had within the wait, the keys already taken are given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_acquisition_is_released_when_the_wait_runs_out() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let holder = server.lock_client();
    let other = server.lock_client();
    let held = holder.lock("acct:b").acquire().await.unwrap();
    let err = MultiLock::new(["acct:b", "acct:a"])
        .client(&other)
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Timeout { key, .. } if key == "acct:b"),
        "{err:?}"
    );
    assert_eq!(server.get("acct:a"), None, "the key taken first was kept");
    assert_eq!(server.get("acct:b").as_deref(), Some(held.token()));
    held.release().await.unwrap();
    let both = MultiLock::new(["acct:b", "acct:a", "acct:a"])
        .client(&other)
        .acquire()
        .await
        .unwrap();
    assert_eq!(both.guards().len(), 2, "a key named twice is taken once");
    both.release().await.unwrap();
    assert_eq!(server.dbsize(), 0);
}

/// `MultiLock::run`: every key is held while the body runs, each counts as held by the task
/// (a nested lock on one of them is reentrant), `current_lock()` is the last key in the
/// canonical order and `current_locks()` lists them all; afterwards every key is released,
/// also when the body fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_holds_every_key_for_the_body_and_releases_them_after() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let other = server.lock_client();
    let seen = MultiLock::new(["run:b", "run:a"])
        .client(&client)
        .run(async {
            let nested = client.lock("run:a").wait(Duration::ZERO).acquire().await?;
            assert!(nested.is_reentrant(), "the body's own key was taken again");
            nested.release().await?;
            let busy = other.lock("run:b").wait(Duration::ZERO).acquire().await;
            assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");
            let keys: Vec<String> = current_locks()
                .iter()
                .map(|lock| lock.key().to_owned())
                .collect();
            Ok::<_, LockError>((keys, current_lock().unwrap().key().to_owned()))
        })
        .await
        .unwrap();
    assert_eq!(seen.0, ["run:a", "run:b"]);
    assert_eq!(seen.1, "run:b");
    assert_eq!(server.dbsize(), 0, "a key was left held");

    let failed: Result<(), String> = MultiLock::new(["run:a", "run:b"])
        .client(&client)
        .run(async { Err::<(), _>(LockErrorOr("the body failed".to_owned())) })
        .await
        .map_err(|err: LockErrorOr| err.0);
    assert_eq!(failed.unwrap_err(), "the body failed");
    assert_eq!(server.dbsize(), 0, "a key was left held after an error");

    // A lock error: the body does not run.
    let held = other.lock("run:b").acquire().await.unwrap();
    let mut ran = false;
    let refused = MultiLock::new(["run:a", "run:b"])
        .client(&client)
        .wait(Duration::from_millis(200))
        .run(async {
            ran = true;
            Ok::<_, LockError>(())
        })
        .await;
    assert!(
        matches!(refused, Err(LockError::Timeout { ref key, .. }) if key == "run:b"),
        "{refused:?}"
    );
    assert!(!ran, "the body ran without the locks");
    held.release().await.unwrap();
    assert_eq!(server.dbsize(), 0);
}

/// A body error type with `From<LockError>`, for the failing body above.
#[derive(Debug)]
struct LockErrorOr(String);

impl From<LockError> for LockErrorOr {
    fn from(err: LockError) -> Self {
        LockErrorOr(err.to_string())
    }
}

/// With `on_lost = cancel` (the default), losing the lease of either key stops the body and
/// returns `Lost` for that key; the other key is released. With `continue`, the body
/// finishes and sees the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_the_body_when_any_key_is_lost() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let client = server.lock_client();
    let admin = server.redis();
    let delete = |key: &'static str| {
        let admin = admin.clone();
        async move {
            let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
            let _: () = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
    };
    let mut finished = false;
    let stopped = MultiLock::new(["lost:a", "lost:b"])
        .client(&client)
        .ttl(Duration::from_millis(900))
        .run(async {
            delete("lost:a").await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            finished = true;
            Ok::<_, LockError>(())
        })
        .await;
    assert!(
        matches!(&stopped, Err(LockError::Lost { key, cause: LostCause::TokenGone }) if key == "lost:a"),
        "{stopped:?}"
    );
    assert!(!finished, "the body ran on after the loss");
    assert_eq!(server.dbsize(), 0, "the key not lost was left held");

    let (finished, lost) = MultiLock::new(["lost:a", "lost:b"])
        .client(&client)
        .ttl(Duration::from_millis(900))
        .on_lost(OnLost::Continue)
        .run(async {
            delete("lost:b").await;
            let lost = current_locks()
                .into_iter()
                .find(|lock| lock.key() == "lost:b")
                .unwrap();
            let cause = tokio::time::timeout(Duration::from_secs(3), lost.lost())
                .await
                .unwrap();
            Ok::<_, LockError>((true, cause))
        })
        .await
        .unwrap();
    assert!(finished);
    assert_eq!(lost, LostCause::TokenGone);
    assert_eq!(server.dbsize(), 0);
}
