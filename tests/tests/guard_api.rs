//! What a holder can do with its lock: extend it, see how much is left, try once.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{LockError, LostCause, ReleaseOutcome};
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
    assert_token_gone(&err);
    assert_eq!(
        server.get("job"),
        None,
        "extend re-created another owner's key"
    );
    let bad = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(bad.to_string().contains("job"), "{bad}");
}

/// `err` is the loss an extension reports once the token is gone.
fn assert_token_gone(err: &LockError) {
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

/// A renewal the watchdog sent with the old ttl that reaches the server after `extend`
/// gave the lease a longer one (over another connection of the pool, or an old connection
/// after a replaced one, the server may run them in either order) does not shorten the key:
/// the holder counts its lease from the extension, and the key has at least that. The late
/// renewal is the watchdog's own command, seen with MONITOR and sent again after `extend`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_arrives_after_an_extension_does_not_shorten_the_key() {
    use std::io::BufRead as _;

    let server = RedisServer::start();
    let mut monitor = std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "monitor"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(monitor.stdout.take().unwrap()).lines();
    let client = server.lock_client();
    let mut guard = client
        .lock("extend-race")
        .ttl(Duration::from_millis(900))
        .acquire()
        .await
        .unwrap();
    // The watchdog's first renewal, at a third of the ttl.
    let renewal: Vec<String> = tokio::task::spawn_blocking(move || {
        for _ in 0..10_000 {
            let line = lines.next().expect("MONITOR's output").unwrap();
            if line.contains("\"EVALSHA\"") && line.contains("\"extend-race\"") {
                return line;
            }
        }
        panic!("no renewal seen");
    })
    .await
    .unwrap()
    .split("\" \"")
    .map(|word| word.trim_matches(|c| c == '"').to_owned())
    .skip(1)
    .collect();
    let _ = monitor.kill();
    let _ = monitor.wait();
    guard.extend(Duration::from_secs(20)).await.unwrap();
    // The renewal seen may be the first one, which found the script not yet loaded: the
    // watchdog loads it and sends the renewal again. Replayed once the server has it.
    let sha = renewal.first().cloned().unwrap_or_default();
    let loaded = lock_tests::until(Duration::from_secs(10), Duration::from_millis(5), || {
        let exists: Vec<i64> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(&sha)
            .query(&mut server.conn())
            .unwrap();
        exists == [1]
    })
    .await;
    assert!(loaded.is_some(), "the renewal script {sha} never loaded");
    let mut late = redis::cmd("EVALSHA");
    for word in &renewal {
        late.arg(word);
    }
    // The watchdog renews in batches: one reply per lease of the call.
    let renewed: Vec<i64> = late.query(&mut server.conn()).unwrap();
    assert_eq!(renewed, [1], "the late renewal {renewal:?}");
    let pttl = server.pttl("extend-race");
    assert!(
        pttl > 10_000,
        "the late renewal {renewal:?} shortened the key to {pttl} ms while its holder counts on 20 s"
    );
    assert!(guard.remaining() > Duration::from_secs(10));
    guard.release().await.unwrap();
}

/// The time on `server`'s clock, in ms.
fn server_ms(server: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    secs * 1000 + micros / 1000
}

/// A semaphore's permit extends as a lock does: its lease (its score, the end of its lease
/// on the server's clock) moves to `ttl` from now and never shrinks; once the permit is
/// gone, `extend` reports the loss and takes no permit again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_extends_as_a_lock_does() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut permit = client
        .semaphore("exports", 2)
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    let left = |token: &str| -> Option<i64> {
        let ends: Option<f64> = redis::cmd("ZSCORE")
            .arg("exports")
            .arg(token)
            .query(&mut server.conn())
            .unwrap();
        ends.map(|ends| ends as i64 - server_ms(&server))
    };
    assert!(left(permit.token()).unwrap() <= 1000);
    permit.extend(Duration::from_secs(20)).await.unwrap();
    assert!(
        left(permit.token()).unwrap() > 15_000,
        "{:?}",
        left(permit.token())
    );
    assert!(
        server.pttl("exports") > 15_000,
        "the key outlives its permits"
    );
    // A shorter extension leaves the longer lease in place.
    permit.extend(Duration::from_secs(2)).await.unwrap();
    assert!(
        left(permit.token()).unwrap() > 15_000,
        "{:?}",
        left(permit.token())
    );
    let _: i64 = redis::cmd("ZREM")
        .arg("exports")
        .arg(permit.token())
        .query(&mut server.conn())
        .unwrap();
    let err = permit.extend(Duration::from_secs(5)).await.unwrap_err();
    assert_token_gone(&err);
    assert_eq!(left(permit.token()), None, "extend took the permit again");
    assert!(permit.is_lost());
    let bad = permit.extend(Duration::ZERO).await.unwrap_err();
    assert!(bad.to_string().contains("exports"), "{bad}");
}

/// A reader's share extends as a lock does: its share key lives `ttl` from now; once the
/// share is gone, `extend` reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_share_extends_as_a_lock_does() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut reader = client
        .rw_lock("doc")
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .read()
        .await
        .unwrap();
    let shares: Vec<String> = redis::cmd("KEYS")
        .arg(format!("~lock/share/*{}*", reader.token()))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(shares.len(), 1, "{shares:?}");
    let share = &shares[0];
    assert!(server.pttl(share) <= 1000);
    reader.extend(Duration::from_secs(20)).await.unwrap();
    assert!(server.pttl(share) > 15_000, "pttl {}", server.pttl(share));
    let busy = client.rw_lock("doc").try_write().await.unwrap_err();
    assert!(matches!(busy, LockError::Busy { .. }), "{busy:?}");
    let _: i64 = redis::cmd("DEL")
        .arg(share)
        .query(&mut server.conn())
        .unwrap();
    let err = reader.extend(Duration::from_secs(5)).await.unwrap_err();
    assert_token_gone(&err);
    assert_eq!(server.get(share), None, "extend re-created the share");
}

/// A guard outlives every handle on its client (a client made for one call, or dropped with
/// the component that made it): its lease is still renewed while it is held, and given
/// back when it is released or dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_that_outlives_its_client_is_renewed_and_given_back() {
    let server = RedisServer::start();
    let ttl = Duration::from_millis(600);
    let (kept, dropped) = {
        let client = server.lock_client();
        let kept = client.lock("outlives").ttl(ttl).acquire().await.unwrap();
        let dropped = client.lock("outlives-drop").ttl(ttl);
        (kept, dropped.acquire().await.unwrap())
    };
    // Past two ttls the keys are still ours: renewed (each renewal is a script call).
    let calls = server.script_calls();
    let renewed = lock_tests::until(Duration::from_secs(10), Duration::from_millis(20), || {
        server.script_calls() >= calls + 6
    });
    assert!(renewed.await.is_some(), "no renewals after the client went");
    let long = lock_tests::until(Duration::from_secs(10), Duration::from_millis(20), || {
        kept.held_for() > ttl * 2
    });
    assert!(long.await.is_some());
    assert!(!kept.is_lost(), "{:?}", kept.lost_cause());
    assert_eq!(server.get("outlives").as_deref(), Some(kept.token()));
    assert_eq!(
        server.get("outlives-drop").as_deref(),
        Some(dropped.token())
    );
    assert_eq!(kept.release().await.unwrap(), ReleaseOutcome::Released);
    assert_eq!(server.get("outlives"), None);
    drop(dropped);
    let gone = lock_tests::until(Duration::from_secs(5), Duration::from_millis(10), || {
        server.get("outlives-drop").is_none()
    });
    assert!(gone.await.is_some(), "the dropped guard's key stayed");
}
