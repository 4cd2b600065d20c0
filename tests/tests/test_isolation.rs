//! `Config::for_tests` and `LockClient::for_tests`: each call gives a client keys of its own
//! (`test-<uuid>:` in front), so tests that run in parallel on one Redis never share a key.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, distributed_lock};
use lock_tests::{RedisServer, child};

#[distributed_lock(key = "gift:<user_id>", ttl = "30s", wait = "0s", client = locks)]
async fn claim(
    locks: &LockClient,
    user_id: u64,
    hold: tokio::sync::oneshot::Receiver<()>,
) -> Result<u64, LockError> {
    let _ = hold.await;
    Ok(user_id)
}

/// The lock keys in Redis (queues and other auxiliary keys left out).
fn lock_keys(conn: &mut redis::Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("test-*").query(conn).unwrap();
    keys.sort();
    keys
}

/// Two tests' clients on one server, each holding `gift:7` through the attribute at the
/// same time: neither is `Busy`, and Redis holds two keys, one per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_test_clients_on_one_server_never_share_a_key() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let first = LockClient::new(Config::for_tests(server.url())).unwrap();
    let second = LockClient::new(Config::for_tests(server.url())).unwrap();
    let (release_first, hold_first) = tokio::sync::oneshot::channel();
    let held = tokio::spawn({
        let first = first.clone();
        async move { claim(&first, 7, hold_first).await }
    });
    while !first.is_locked("gift:7").await.unwrap() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (release_second, hold_second) = tokio::sync::oneshot::channel();
    let claimed = tokio::spawn({
        let second = second.clone();
        async move { claim(&second, 7, hold_second).await }
    });
    while !second.is_locked("gift:7").await.unwrap() {
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!claimed.is_finished(), "{:?}", claimed.await);
    }
    let keys = lock_keys(&mut server.conn());
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_ne!(keys[0], keys[1]);
    assert!(keys.iter().all(|key| key.ends_with(":gift:7")), "{keys:?}");
    release_first.send(()).unwrap();
    release_second.send(()).unwrap();
    assert_eq!(held.await.unwrap().unwrap(), 7);
    assert_eq!(claimed.await.unwrap().unwrap(), 7);
    assert!(server.until_empty(Duration::from_secs(5)).await);
}

/// `LockClient::for_tests` reads `REDIS_URL` (in a child process, whose environment
/// carries it) and gives each client keys of its own.
#[test]
fn for_tests_clients_read_redis_url_and_keep_apart() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let worker = child::spawn("for_tests_worker", "worker", &[("REDIS_URL", server.url())]);
    let lines = child::collect(worker, "KEYS ");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let keys: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_ne!(keys[0], keys[1]);
    assert!(
        keys.iter()
            .all(|key| key.starts_with("test-") && key.ends_with(":gift:7")),
        "{keys:?}"
    );
}

/// The worker side of the test above: runs only in the child process it starts.
#[test]
fn for_tests_worker() {
    if child::role().is_none() {
        return;
    }
    let url = std::env::var("REDIS_URL").unwrap();
    lock_tests::two_worker_runtime().block_on(async {
        let first = LockClient::for_tests().unwrap();
        let second = LockClient::for_tests().unwrap();
        let a = first.lock("gift:7").try_acquire().await.unwrap();
        let b = second.lock("gift:7").try_acquire().await.unwrap();
        let mut conn = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        println!("KEYS {}", lock_keys(&mut conn).join(" "));
        a.release().await.unwrap();
        b.release().await.unwrap();
    });
}
