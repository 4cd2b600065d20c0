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
