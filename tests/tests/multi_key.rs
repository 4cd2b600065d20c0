//! Several keys at once, all or none, in a canonical order.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{LockClient, LockError, MultiLock};
use lock_tests::RedisServer;

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
