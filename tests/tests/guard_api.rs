//! What a holder can do with its lock: extend it, see how much is left, try once.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{LockError, LostCause};
use lock_tests::RedisServer;

/// `extend` moves the key's expiry (owner-checked) and the guard's own view of its lease;
/// `remaining` follows; once the token is gone, `extend` reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_moves_the_lease_and_reports_a_lost_one() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut guard = client
        .lock("job")
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    assert!(guard.remaining() <= Duration::from_secs(1));
    assert!(guard.remaining() > Duration::from_millis(500));
    guard.extend(Duration::from_secs(20)).await.unwrap();
    assert!(server.pttl("job") > 15_000, "pttl {}", server.pttl("job"));
    assert!(guard.remaining() > Duration::from_secs(15));
    // Past the first ttl the lease is still held (no watchdog: the extension carries it).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!guard.is_lost());
    assert_eq!(server.get("job").as_deref(), Some(guard.token()));
    let _: () = redis::cmd("DEL")
        .arg("job")
        .query(&mut server.conn())
        .unwrap();
    let err = guard.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(
            err,
            LockError::Lost {
                cause: LostCause::TokenGone,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        server.get("job"),
        None,
        "extend re-created another owner's key"
    );
    let bad = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(bad.to_string().contains("job"), "{bad}");
}

/// `try_acquire` tries once: `Busy` while another owner holds the key, the lock once free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_tries_once() {
    let server = RedisServer::start();
    let holder = server.lock_client();
    let other = server.lock_client();
    let held = holder.lock("once").acquire().await.unwrap();
    let busy = other.lock("once").try_acquire().await.unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    held.release().await.unwrap();
    let guard = other.lock("once").try_acquire().await.unwrap();
    assert_eq!(server.get("once").as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}

/// A renewal the watchdog sent with the old ttl, held back on the network until after
/// `extend` gave the lease a longer one (the two go over different connections, so the
/// server may run them in either order), does not shorten the key: the holder counts its
/// lease from the extension, and the key has at least that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_held_back_past_an_extension_does_not_shorten_the_key() {
    use lock_tests::proxy::{Direction, FaultProxy};

    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = lock_runtime::LockClient::new(lock_runtime::Config::single(proxy.url())).unwrap();
    let mut guard = client
        .lock("extend-race")
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    // The watchdog renews every third of the ttl: once its first renewal is through (its
    // connection open), the next is held back on the way.
    let acquired = std::time::Instant::now();
    let renewed = lock_tests::until(Duration::from_secs(3), Duration::from_millis(2), || {
        acquired.elapsed() > Duration::from_millis(350) && server.pttl("extend-race") > 800
    })
    .await;
    assert!(renewed.is_some(), "the watchdog did not renew the lease");
    proxy.set_delay(Direction::Up, Duration::from_millis(1_500));
    let held = lock_tests::until(Duration::from_secs(3), Duration::from_millis(2), || {
        proxy.held_back() > 0
    })
    .await;
    assert!(held.is_some(), "the watchdog sent no renewal");
    proxy.set_delay(Direction::Up, Duration::ZERO);
    guard.extend(Duration::from_secs(20)).await.unwrap();
    // The renewal's reply is held back too, so that no renewal follows it soon.
    proxy.set_delay(Direction::Down, Duration::from_millis(3_000));
    // Until well after the held-back renewal reached the server (1.5 s after it was sent).
    let mut shortest = i64::MAX;
    for _ in 0..250 {
        shortest = shortest.min(server.pttl("extend-race"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set_delay(Direction::Down, Duration::ZERO);
    assert!(
        shortest > 10_000,
        "the late renewal shortened the key to {shortest} ms while its holder counts on 20 s"
    );
    let passed = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        proxy.held_back() == 0
    })
    .await;
    assert!(passed.is_some(), "the renewal's reply was never passed on");
    assert!(guard.remaining() > Duration::from_secs(10));
    guard.release().await.unwrap();
}
