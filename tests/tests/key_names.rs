//! Distinct lock keys never share a queue, fence counter or release channel, whatever they
//! contain: hash tags (`x` and `{x}`), names that look like auxiliary names (`{a}:queue`,
//! `{b}:fence`), prefixes with braces (`{app}:` with `k` and `k:queue`). Each case holds a
//! key with a waiter queued behind it, takes and releases the neighbour key through a third
//! client, and checks that the waiter was not let in while the key was held.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, ReleaseOutcome};
use lock_tests::RedisServer;
use tokio::sync::oneshot;

fn client(server: &RedisServer, prefix: &str) -> LockClient {
    LockClient::new(Config::single(server.url()).key_prefix(prefix)).unwrap()
}

/// Channels the server has subscribers on (a client's notice channel, which lives as long
/// as the client, not counted).
fn channels(server: &RedisServer) -> Vec<String> {
    lock_tests::lock_channels(&mut server.conn())
}

/// Polls a server- or client-side state with no event to wait on, every 5 ms for at most
/// 5 s; panics naming `what` when it never holds.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never happened: {what}");
}

/// Holds `key` with a waiter queued on it, takes and releases `neighbour` (fenced when
/// asked), and checks that the holder keeps the key and the waiter gets it only after the
/// holder's release.
async fn neighbour_leaves_the_key_alone(prefix: &str, key: &str, neighbour: &str, fenced: bool) {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server, prefix),
        client(&server, prefix),
        client(&server, prefix),
    );
    let holder = a
        .lock(key)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let (acquired_tx, mut acquired) = oneshot::channel();
    let waiter = {
        let (b, key) = (b.clone(), key.to_owned());
        tokio::spawn(async move {
            let guard = b.lock(key).wait(Duration::from_secs(20)).acquire().await;
            let _ = acquired_tx.send(());
            guard
        })
    };
    until("the waiter is queued and subscribed", || {
        b.waiting() == (1, 1) && !channels(&server).is_empty()
    })
    .await;

    let guard = c
        .lock(neighbour)
        .fencing(fenced)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("`{neighbour}` is free, yet: {err}"));
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);

    // No event says "nothing happened": give a wrongly woken waiter ample time to run.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut acquired)
            .await
            .is_err(),
        "the release of `{neighbour}` let a waiter of `{key}` in while `{key}` was held"
    );
    let full_key = format!("{prefix}{key}");
    assert_eq!(
        server.get(&full_key).as_deref(),
        Some(holder.token()),
        "`{full_key}` no longer holds its holder's token"
    );
    assert!(!holder.is_lost());
    assert_eq!(
        server.get(&format!("{prefix}{neighbour}")),
        None,
        "`{neighbour}` was left holding a value"
    );

    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(server.get(&full_key).as_deref(), Some(guard.token()));
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_and_the_same_key_in_braces_are_two_locks() {
    neighbour_leaves_the_key_alone("", "x", "{x}", false).await;
    neighbour_leaves_the_key_alone("", "{x}", "x", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_named_like_a_queue_is_its_own_lock() {
    neighbour_leaves_the_key_alone("", "a", "{a}:queue", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_acquire_never_writes_over_a_lock_named_like_its_counter() {
    neighbour_leaves_the_key_alone("", "{b}:fence", "b", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_with_braces_keeps_keys_apart() {
    neighbour_leaves_the_key_alone("{app}:", "k", "k:queue", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_the_auxiliary_namespace_is_refused_before_any_traffic() {
    let server = RedisServer::start();
    let client = client(&server, "");
    let err = client
        .lock("~lock/queue{x}")
        .acquire()
        .await
        .expect_err("a reserved name");
    assert!(
        matches!(&err, LockError::InvalidKey { key, reason }
            if key == "~lock/queue{x}" && reason.contains("reserved")),
        "{err}"
    );
    assert_eq!(server.dbsize(), 0);
}

/// A release message grants the lock only to the waiter whose token and key it names: a
/// message on the key's channel that names another key is a wake-up, not a grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_naming_another_key_is_not_taken_as_a_grant() {
    let server = RedisServer::start();
    let (a, b) = (client(&server, ""), client(&server, ""));
    let holder = a
        .lock("g")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let (acquired_tx, mut acquired) = oneshot::channel();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let guard = b.lock("g").wait(Duration::from_secs(20)).acquire().await;
            let _ = acquired_tx.send(());
            guard
        })
    };
    until("the waiter is queued and subscribed", || {
        b.waiting() == (1, 1) && !channels(&server).is_empty()
    })
    .await;
    let mut conn = server.conn();
    let queued: Vec<String> = redis::cmd("ZRANGE")
        .arg("~lock/queue{g}")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(queued.len(), 1, "one waiter queued: {queued:?}");
    let forged = format!("={} {{g}}", queued[0]);
    let _: i64 = redis::cmd("PUBLISH")
        .arg("~lock/released{g}")
        .arg(&forged)
        .query(&mut conn)
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut acquired)
            .await
            .is_err(),
        "the waiter took `{forged}` as a grant of `g`"
    );
    assert_eq!(holder.release().await.unwrap(), ReleaseOutcome::Released);
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(server.get("g").as_deref(), Some(guard.token()));
    drop(guard);
}

/// The prefix counts in a key's length limit: a key that fits alone but not behind the
/// prefix is refused before any Redis traffic, naming the whole key; one that fits is
/// taken under the prefixed name.
#[tokio::test]
async fn the_prefix_counts_in_the_key_length_limit() {
    let server = RedisServer::start();
    let client = client(&server, "app:");
    let over = "k".repeat(lock_runtime::MAX_KEY_LEN - 3);
    let err = client.lock(over.as_str()).acquire().await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidKey { key, .. } if key.starts_with("app:kkk")),
        "{err:?}"
    );
    assert_eq!(server.dbsize(), 0, "a refused key touched Redis");
    let fits = "k".repeat(lock_runtime::MAX_KEY_LEN - 4);
    let guard = client.lock(fits.as_str()).acquire().await.unwrap();
    assert_eq!(
        server.get(&format!("app:{fits}")).as_deref(),
        Some(guard.token())
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}
