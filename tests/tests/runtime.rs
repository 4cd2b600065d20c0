//! The single-instance runtime against a real redis-server: exclusion, owner-checked
//! release, the watchdog, drop and abort, waiting, validity, and an unreachable Redis.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LostCause, ReleaseOutcome};
use lock_tests::{RedisServer, free_port};

/// Counts holders inside a critical section and remembers the most seen at once.
#[derive(Default)]
struct OverlapDetector {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    entries: AtomicUsize,
}

impl OverlapDetector {
    async fn critical_section(&self) {
        let now_inside = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_inside.fetch_max(now_inside, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
        // Yield to the scheduler so an overlapping holder would get to run in between.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn contend(client: Option<LockClient>, tasks: usize) -> Arc<OverlapDetector> {
    let detector = Arc::new(OverlapDetector::default());
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let detector = detector.clone();
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            match client {
                Some(client) => {
                    let guard = client
                        .lock("exclusion")
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .unwrap();
                    detector.critical_section().await;
                    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
                }
                None => detector.critical_section().await,
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    detector
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_tasks_never_overlap() {
    let server = RedisServer::start();
    let detector = contend(Some(server.lock_client()), 200).await;
    assert_eq!(detector.entries.load(Ordering::SeqCst), 200);
    assert_eq!(
        detector.max_inside.load(Ordering::SeqCst),
        1,
        "two holders overlapped"
    );
    // Lock and queue keys go at once; the process's liveness key within one liveness lease.
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "a lock key was left behind"
    );
}

/// The detector above must be able to fail: without the lock it sees overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_detector_catches_overlap_without_the_lock() {
    let detector = contend(None, 200).await;
    assert!(detector.max_inside.load(Ordering::SeqCst) > 1);
}

#[tokio::test]
async fn the_key_holds_a_fresh_token_of_ours_with_a_px_expiry() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let ttl = Duration::from_secs(10);
    let first = client.lock("layout").ttl(ttl).acquire().await.unwrap();
    assert_eq!(server.get("layout").as_deref(), Some(first.token()));
    let pttl = server.pttl("layout");
    assert!(pttl > 0 && pttl <= 10_000, "pttl {pttl}");
    // `lr-` and the process that holds it: the scripts tell our holders from foreign
    // ones by the prefix; anyone who reads the key reads who holds it.
    assert!(first.token().starts_with("lr-"), "{}", first.token());
    let holder = lock_runtime::Identity::of_token(first.token());
    let process = holder.process().expect("a token that names its process");
    assert_eq!(process.pid, std::process::id());
    assert_eq!(process.ttl, ttl);
    assert!(process.function.starts_with("runtime.rs:"), "{process:?}");
    let first_token = first.token().to_owned();
    first.release().await.unwrap();
    let second = client.lock("layout").acquire().await.unwrap();
    assert_ne!(second.token(), first_token, "a token was reused");
    assert!(client.is_locked("layout").await.unwrap());
    second.release().await.unwrap();
    assert!(!client.is_locked("layout").await.unwrap());
}

#[tokio::test]
async fn a_foreign_token_cannot_release() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client.lock("foreign").acquire().await.unwrap();
    // Another owner's token takes the key (as after an expiry and a new acquisition).
    let _: () = redis::cmd("SET")
        .arg("foreign")
        .arg("someone-else")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotOwner);
    assert_eq!(server.get("foreign").as_deref(), Some("someone-else"));
}

#[tokio::test]
async fn releasing_an_expired_lock_keeps_the_next_holders_key() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let stale = client
        .lock("expiring")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    assert_eq!(stale.lost().await, LostCause::Expired);
    let next = client
        .lock("expiring")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert_eq!(stale.release().await.unwrap(), ReleaseOutcome::NotOwner);
    assert_eq!(server.get("expiring").as_deref(), Some(next.token()));
    assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);

    let alone = client
        .lock("expiring")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    alone.lost().await;
    wait_until_gone(&server, "expiring").await;
    assert_eq!(
        alone.release().await.unwrap(),
        ReleaseOutcome::AlreadyExpired
    );
}

async fn wait_until_gone(server: &RedisServer, key: &str) {
    for _ in 0..500 {
        if server.get(key).is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("key {key} is still there after 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_short_lease_through_a_long_hold() {
    let server = RedisServer::start();
    let holder = server.lock_client();
    let other = server.lock_client();
    let guard = holder
        .lock("long-job")
        .ttl(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let mut refusals = 0;
    while started.elapsed() < Duration::from_millis(3500) {
        let attempt = other.lock("long-job").wait(Duration::ZERO).acquire().await;
        assert!(
            matches!(attempt, Err(LockError::Busy { .. })),
            "{attempt:?}"
        );
        refusals += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(refusals >= 10);
    assert!(!guard.is_lost());
    // The refusals are plain `SET NX`s; the scripts are the renewals, one per ttl/3
    // (about 10 in 3.5 s).
    let renewals = server.script_calls();
    assert!(renewals >= 5, "only {renewals} renewals reached the server");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    let after = other
        .lock("long-job")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    after.release().await.unwrap();
    assert_eq!(holder.held_leases(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_watchdog_the_lock_is_free_after_its_ttl() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client
        .lock("no-watchdog")
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    let waiter = client
        .lock("no-watchdog")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert!(
        guard.held_for() >= Duration::from_millis(900),
        "acquired before the ttl ran out"
    );
    assert_eq!(guard.lost_cause(), Some(LostCause::Expired));
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotOwner);
    waiter.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_frees_the_key_well_before_its_ttl() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client
        .lock("dropped")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    assert_eq!(client.held_leases(), 1);
    drop(guard);
    assert_eq!(
        client.held_leases(),
        0,
        "the dropped lease is still renewed"
    );
    wait_until_gone(&server, "dropped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_task_that_holds_a_lock_frees_the_key() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let (acquired_tx, acquired_rx) = tokio::sync::oneshot::channel();
    let task_client = client.clone();
    let task = tokio::spawn(async move {
        let _guard = task_client
            .lock("aborted")
            .ttl(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        acquired_tx.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    acquired_rx.await.unwrap();
    assert!(server.get("aborted").is_some());
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    wait_until_gone(&server, "aborted").await;
    assert_eq!(client.held_leases(), 0);
}

#[tokio::test]
async fn wait_zero_on_a_held_key_is_busy() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client.lock("busy").acquire().await.unwrap();
    let err = client
        .lock("busy")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LockError::Busy { key } if key == "busy"),
        "{err:?}"
    );
    assert!(err.to_string().contains("`busy`"), "{err}");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn an_exhausted_wait_times_out_and_leaves_no_key_behind() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client.lock("slow").acquire().await.unwrap();
    let err = client
        .lock("slow")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    match &err {
        LockError::Timeout {
            key,
            waited,
            holder,
        } => {
            assert_eq!(key, "slow");
            assert!(*waited >= Duration::from_millis(300), "{waited:?}");
            // The waiter names who held the key: this process, at the builder's line.
            let holder = holder.as_deref().expect("the holder named");
            assert_eq!(holder.token, guard.token());
            let process = holder.identity.process().expect("a process of ours");
            assert_eq!(process.pid, std::process::id());
            assert!(process.function.starts_with("runtime.rs:"), "{process:?}");
            assert!(
                holder.held_for >= Some(Duration::from_millis(300)),
                "{holder:?}"
            );
            let message = err.to_string();
            assert!(message.contains("held for"), "{message}");
            assert!(
                message.contains(&format!("pid {}", process.pid)),
                "{message}"
            );
            assert!(message.contains("through the whole wait"), "{message}");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    // The waiter queued its process in Redis (the holder took the key alone): only the
    // process's liveness key may stay, for one liveness lease.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .unwrap();
    let left: Vec<_> = keys
        .iter()
        .filter(|key| !key.starts_with("~lock/alive/"))
        .collect();
    assert_eq!(left, ["slow"], "the waiter left a key behind");
    guard.release().await.unwrap();
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "keys left behind"
    );
}

#[tokio::test]
async fn unreachable_redis_is_a_backend_error_not_a_hang() {
    let port = free_port();
    let client = LockClient::new(
        Config::single(format!("redis://127.0.0.1:{port}"))
            .connect_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let attempt = tokio::time::timeout(Duration::from_secs(10), client.lock("nowhere").acquire())
        .await
        .expect("acquire hung on an unreachable Redis");
    let err = attempt.unwrap_err();
    assert!(
        matches!(&err, LockError::Backend { key, .. } if key == "nowhere"),
        "{err:?}"
    );
    assert!(err.to_string().contains("`nowhere`"), "{err}");
}

#[tokio::test]
async fn a_renewal_that_finds_the_token_gone_marks_the_lock_lost() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client
        .lock("deleted")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("deleted")
        .query(&mut server.conn())
        .unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the loss was not noticed");
    assert_eq!(cause, LostCause::TokenGone);
    assert_eq!(client.held_leases(), 0, "a lost lease is still renewed");
    assert_eq!(
        guard.release().await.unwrap(),
        ReleaseOutcome::AlreadyExpired
    );
}

/// A reply that arrives after the lease's validity point acquires nothing: the server is
/// paused longer than the ttl while the acquire is in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_acquire_reply_acquires_nothing() {
    let server = RedisServer::start();
    let client = server.lock_client();
    // Warm the connection and the script cache so the pause hits the acquire itself.
    client
        .lock("late")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(400)
        .arg("ALL")
        .query(&mut server.conn())
        .unwrap();
    let attempt = client
        .lock("late")
        .ttl(Duration::from_millis(200))
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(
        matches!(attempt, Err(LockError::Timeout { .. })),
        "a reply after the validity point gave {attempt:?}"
    );
    assert_eq!(client.held_leases(), 0);
    wait_until_gone(&server, "late").await;
}

#[tokio::test]
async fn scripts_are_reloaded_after_script_flush() {
    let server = RedisServer::start();
    let client = server.lock_client();
    client
        .lock("flush")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    let guard = client.lock("flush").acquire().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

#[tokio::test]
async fn invalid_keys_are_rejected_before_any_redis_traffic() {
    let server = RedisServer::start();
    let client = server.lock_client();
    server.reset_stats();
    let empty = client.lock("").acquire().await.unwrap_err();
    assert!(matches!(empty, LockError::InvalidKey { .. }), "{empty:?}");
    let long = client
        .lock("k".repeat(lock_runtime::MAX_KEY_LEN + 1))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(long, LockError::InvalidKey { .. }), "{long:?}");
    assert_eq!(server.script_calls() + server.calls("eval"), 0);
}

/// A client that sat idle while Redis restarted holds a dead connection; its next acquire
/// must reconnect and succeed, not report the dead connection as a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_acquires_at_once_after_a_redis_restart() {
    let mut server = RedisServer::start();
    let client = server.lock_client();
    client
        .lock("idle")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    server.kill9();
    server.restart();
    for wait in [Duration::from_secs(2), Duration::ZERO] {
        let guard = client
            .lock("idle")
            .wait(wait)
            .acquire()
            .await
            .unwrap_or_else(|err| panic!("wait {wait:?}: {err}"));
        assert_eq!(server.get("idle").as_deref(), Some(guard.token()));
        guard.release().await.unwrap();
        server.kill9();
        server.restart();
    }
}

/// Durations at the edge of `Duration` are user input too: "wait forever" works, an
/// absurd lease is a clear error before any traffic, and neither panics.
#[tokio::test]
async fn extreme_durations_are_handled_not_panicked_on() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let guard = client
        .lock("forever-wait")
        .wait(Duration::MAX)
        .fencing(true)
        .acquire()
        .await
        .unwrap();
    assert_eq!(server.get("forever-wait").as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
    server.reset_stats();
    for fencing in [false, true] {
        let err = client
            .lock("huge-ttl")
            .ttl(Duration::MAX)
            .fencing(fencing)
            .acquire()
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, LockError::Config { .. }) && text.contains("huge-ttl"),
            "{err:?}"
        );
    }
    assert_eq!(server.script_calls() + server.calls("set"), 0);
}

/// The shape of every request-timeout layer: `timeout(50.3 ms, run(/* 50 ms body */))`,
/// one after another on a current-thread runtime.
/// The deadline falls while the release is on its way, and dropping the release must not
/// leave the lock held for its ttl (30 s here).
#[tokio::test]
async fn a_release_cut_short_by_a_timeout_still_frees_the_key() {
    const KEYS: usize = 100;
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut cut = 0;
    for index in 0..KEYS {
        let lock = client.lock(format!("cut-{index}"));
        let run = lock.run(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok::<_, LockError>(())
        });
        if tokio::time::timeout(Duration::from_micros(50_300), run)
            .await
            .is_err()
        {
            cut += 1;
        }
    }
    // The background releases need the runtime: poll the server, at most 3 s (ttl 30 s).
    let mut held = server.dbsize();
    for _ in 0..300 {
        if held == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        held = server.dbsize();
    }
    assert_eq!(
        held, 0,
        "{held} of {KEYS} keys still held ({cut} runs were cut short)"
    );
    assert_eq!(client.held_leases(), 0);
}

/// A release future polled once (the script on its way) and then dropped still releases.
///
/// The server holds write commands back for a moment (`CLIENT PAUSE … WRITE`) while the
/// release is polled once, so the script is still on its way when the future is dropped.
/// (Without the pause, a loaded machine could preempt the test between sending and reading,
/// and the reply was there within the first poll: then nothing was cut.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_future_dropped_after_its_first_poll_still_releases() {
    use futures::FutureExt;
    const RUNS: usize = 20;
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut admin = server.conn();
    let mut cut = 0;
    for index in 0..RUNS {
        let key = format!("dropped-release-{index}");
        let guard = client.lock(&key).acquire().await.unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(150)
            .arg("WRITE")
            .query(&mut admin)
            .unwrap();
        // Boxed, so that dropping it drops the future itself (not a pin of it).
        let mut release = Box::pin(guard.release());
        if (&mut release).now_or_never().is_none() {
            cut += 1;
        }
        drop(release);
        wait_until_gone(&server, &key).await;
    }
    assert_eq!(cut, RUNS, "a release finished within its first poll");
    assert_eq!(client.held_leases(), 0);
}

/// A release that runs out of time reports one clear outcome, whatever transient error it
/// met last: it gave up, and the key expires by its ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_runs_out_of_time_says_it_gave_up_and_the_key_expires_by_its_ttl() {
    let mut server = RedisServer::start();
    let client = LockClient::new(
        Config::single(server.url())
            .connect_timeout(Duration::from_millis(100))
            .response_timeout(Duration::from_millis(200)),
    )
    .unwrap();
    let guard = client
        .lock("gives-up")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    server.kill9();
    let err = tokio::time::timeout(Duration::from_secs(10), guard.release())
        .await
        .expect("a release is bounded by its budget")
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LockError::ReleaseGaveUp { .. }), "{err:?}");
    let LockError::ReleaseGaveUp { source, .. } = &err else {
        unreachable!()
    };
    let last = std::error::Error::source(source.as_ref())
        .map_or_else(|| source.to_string(), ToString::to_string);
    assert!(
        text.contains(&last),
        "the message names the last error ({last}): {text}"
    );
    assert!(
        text.contains("gives-up") && text.contains("gave up") && text.contains("ttl"),
        "the release's error should say it gave up and the key expires by its ttl: {text}"
    );
}
