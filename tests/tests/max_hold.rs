//! Stuck or slow, on a real Redis: `max_hold` ends a hung holder (a body that awaits for
//! ever) with `LockError::Lost` and `LostCause::MaxHold`, releases its lock so a waiter
//! gets the key, and WARNs naming the key and token; a guard held by hand reads the same
//! loss; a holder's progress and renewals are visible to `inspect` from another client;
//! and the long-hold and long-wait thresholds each log one INFO event.
//!
//! The bounds are generous (a busy machine runs these): a hold ends within
//! `max_hold + ttl/3` plus seconds of slack, never sooner than `max_hold`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant, SystemTime};

use lock_runtime::{Config, LockClient, LockError, LostCause, ReleaseOutcome, distributed_lock};
use lock_tests::{RedisServer, events};

/// A client of its own on `server`, with `configure` applied to its settings.
fn client(server: &RedisServer, configure: impl FnOnce(Config) -> Config) -> LockClient {
    LockClient::new(configure(Config::single(server.url()))).unwrap()
}

/// Slack on every bound, for a busy machine.
const SLACK: Duration = Duration::from_secs(3);

/// A body that awaits for ever (a hung call) under a 1 s `max_hold` and a 3 s ttl is
/// stopped with `Lost`/`MaxHold` between 1 s and `max_hold + ttl/3` (plus slack); its lock
/// is released at once, so a waiter in another client gets the key well before the ttl
/// the hung holder's last renewal gave it; a WARN names the key and the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_body_is_ended_at_max_hold_and_a_waiter_then_gets_the_key() {
    events::capture_with_span_closes(tracing::Level::INFO);
    let server = RedisServer::start();
    let holder = client(&server, |config| config);
    let waiter = client(&server, |config| config);
    let (max_hold, ttl) = (Duration::from_secs(1), Duration::from_secs(3));
    let lock = holder.lock("hung").ttl(ttl).max_hold(max_hold);
    let started = Instant::now();
    let hung = tokio::spawn(async move {
        let result = lock
            .run(async {
                let token = lock_runtime::current_lock().map(|lock| lock.key().to_owned());
                std::future::pending::<()>().await;
                Ok::<_, LockError>(token)
            })
            .await;
        (result, started.elapsed())
    });
    // The waiter arrives while the body hangs, and waits long enough for either ending.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = waiter.lock("hung").wait(Duration::from_secs(20));
    let guard = tokio::time::timeout(Duration::from_secs(30), waiting.acquire())
        .await
        .expect("the waiter got an answer")
        .expect("the waiter got the key");
    let waited = started.elapsed();
    let (result, ended) = tokio::time::timeout(Duration::from_secs(30), hung)
        .await
        .expect("the hung body was ended")
        .unwrap();
    assert!(
        matches!(
            result,
            Err(LockError::Lost {
                cause: LostCause::MaxHold,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(ended >= max_hold, "ended before its max_hold: {ended:?}");
    assert!(ended <= max_hold + ttl / 3 + SLACK, "ended late: {ended:?}");
    // Released at once: the waiter did not wait for the hung holder's lease to run out.
    assert!(waited <= max_hold + ttl / 3 + SLACK, "waited {waited:?}");
    let warned = events::mentioning(&["WARN", "lock held past its max_hold", "key=\"hung\""]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("token=lr-") && warned[0].contains("max_hold_ms=1000"),
        "{warned:?}"
    );
    println!("FIGURE max_hold: body ended after {ended:?}, waiter got the key after {waited:?}");
    guard.release().await.unwrap();
}

/// A guard held by hand under the client's `default_max_hold` reads the loss as a guarded
/// body does (`is_lost`, `lost_cause`, `lost()`), cannot be extended past its bound, and
/// its release still finds its own token (the watchdog stopped renewing; it deleted
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_held_by_hand_reads_max_hold_as_its_loss() {
    let server = RedisServer::start();
    let locks = client(&server, |config| {
        config.default_max_hold(Duration::from_millis(500))
    });
    let mut guard = locks
        .lock("by-hand")
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(!guard.is_lost());
    let cause = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the hold was ended");
    assert_eq!(cause, LostCause::MaxHold);
    assert!(guard.held_for() >= Duration::from_millis(500));
    assert!(guard.is_lost());
    assert_eq!(guard.lost_cause(), Some(LostCause::MaxHold));
    let extended = guard.extend(Duration::from_secs(60)).await;
    assert!(
        matches!(
            extended,
            Err(LockError::Lost {
                cause: LostCause::MaxHold,
                ..
            })
        ),
        "{extended:?}"
    );
    assert!(server.pttl("by-hand") <= 10_000, "not extended");
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
    // An explicit bound wins over the client's default: this hold outlives 500 ms.
    let long = locks.lock("by-hand").max_hold(Duration::from_secs(60));
    let guard = long.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(!guard.is_lost(), "{:?}", guard.lost_cause());
    guard.release().await.unwrap();
}

#[distributed_lock(key = "attr:<tag>", ttl = "3s", max_hold = "600ms", client = locks)]
async fn hangs(locks: &LockClient, tag: &str) -> Result<(), LockError> {
    std::future::pending::<()>().await;
    Ok(())
}

/// The attribute's `max_hold` ends a hung body the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_ends_a_hung_body_at_its_max_hold() {
    let server = RedisServer::start();
    let locks = client(&server, |config| config);
    let ended = tokio::time::timeout(Duration::from_secs(15), hangs(&locks, "a"))
        .await
        .expect("the hung body was ended");
    assert!(
        matches!(
            ended,
            Err(LockError::Lost {
                cause: LostCause::MaxHold,
                ..
            })
        ),
        "{ended:?}"
    );
    assert_eq!(server.get("attr:a"), None, "released at once");
}

/// Waits (bounded) until `inspect` of `key` through `locks` shows a holder whose record
/// `done` accepts; returns that holder.
async fn inspect_until(
    locks: &LockClient,
    key: &str,
    done: impl Fn(&lock_runtime::Holder) -> bool,
) -> lock_runtime::Holder {
    for _ in 0..200 {
        let state = locks.inspect(key).await.unwrap();
        if let Some(holder) = state.holder().filter(|holder| done(holder)) {
            return holder.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("inspect never showed the holder of {key} as expected");
}

/// A holder's renewals and progress are visible to another client's `inspect`:
/// `last_renewal` moves on with each renewal, `last_progress` stays `None` (and no record is
/// written beside the key) until the holder reports progress; once it does, the next
/// renewal carries the time (between the report and the renewal). A guard's `progress` is
/// the same report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_and_progress_are_visible_to_inspect() {
    let server = RedisServer::start();
    let holder = client(&server, |config| config);
    let operator = client(&server, |config| config);
    let guard = holder
        .lock("visible")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let state = operator.inspect("visible").await.unwrap();
    let taken = state
        .holder()
        .unwrap()
        .last_renewal
        .expect("known from the lease");
    let later = taken + Duration::from_millis(100);
    let renewed = inspect_until(&operator, "visible", |h| {
        h.last_renewal.is_some_and(|at| at >= later)
    })
    .await;
    assert_eq!(renewed.token, guard.token());
    assert_eq!(renewed.last_progress, None, "no progress reported yet");
    assert_eq!(server.get("~lock/hold{visible}"), None, "nothing written");
    let before = SystemTime::now() - Duration::from_millis(50);
    guard.progress();
    let reported = inspect_until(&operator, "visible", |h| h.last_progress.is_some()).await;
    let progress = reported.last_progress.unwrap();
    assert!(progress >= before, "{progress:?} before the report");
    assert!(progress <= reported.last_renewal.unwrap(), "{reported:?}");
    let shown = operator.inspect("visible").await.unwrap().to_string();
    assert!(shown.contains("s ago  progress "), "{shown}");
    // The body's own report, through `current_lock()`.
    guard.release().await.unwrap();
    let lock = holder.lock("visible").ttl(Duration::from_millis(600));
    let shown = lock
        .run(async {
            let before = SystemTime::now() - Duration::from_millis(50);
            lock_runtime::current_lock().unwrap().progress();
            let shown = inspect_until(&operator, "visible", |h| {
                h.last_progress.is_some_and(|at| at >= before)
            })
            .await;
            Ok::<_, LockError>(shown)
        })
        .await
        .unwrap();
    assert!(shown.last_renewal.is_some());
}

/// With `log_long_holds` and `log_long_waits` at 300 ms: a hold of about 1.5 s logs one
/// `lock held long` (key, token, held_ms, and how long ago it reported progress), and a
/// waiter that waits for it logs one `lock wait long` (key, waited_ms, and the holder by
/// name and token, with how long it has held the key); a hold and a wait
/// shorter than the thresholds log nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_holds_and_long_waits_are_logged_once_at_info() {
    events::capture_with_span_closes(tracing::Level::INFO);
    let server = RedisServer::start();
    let configure = |config: Config| {
        config
            .log_long_holds(Duration::from_millis(300))
            .log_long_waits(Duration::from_millis(300))
    };
    let holder = client(&server, configure);
    let waiter = client(&server, configure);
    // Short ones first: nothing logged.
    let quick = holder.lock("quick").acquire().await.unwrap();
    quick.release().await.unwrap();
    let guard = holder.lock("long").acquire().await.unwrap();
    guard.progress();
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("long").wait(Duration::from_secs(20));
        lock.acquire().await.map(|guard| (guard, waiter))
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let token = guard.token().to_owned();
    guard.release().await.unwrap();
    let (taken, _waiter) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    taken.release().await.unwrap();
    let held = events::mentioning(&["INFO", "lock held long", "key=\"long\""]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(
        held[0].contains(&format!("token={token}")) && held[0].contains("progress_ago_ms="),
        "{held:?}"
    );
    let waited = events::mentioning(&["INFO", "lock wait long", "key=\"long\""]);
    assert_eq!(waited.len(), 1, "{waited:?}");
    assert!(waited[0].contains("waited_ms="), "{waited:?}");
    assert!(
        waited[0].contains(&format!("holder_token=\"{token}\""))
            && waited[0].contains(" pid ")
            && waited[0].contains("held_ms="),
        "{waited:?}"
    );
    // The event runs in the wait's span, which names the holder from then on.
    let (span, _) = waited[0].split_once("}: ").unwrap();
    assert!(
        span.contains("lock wait{key=\"long\" holder=")
            && span.contains(&format!("holder_token=\"{token}\"")),
        "{waited:?}"
    );
    assert!(events::mentioning(&["long: past", "key=\"quick\""]).is_empty());
}

/// A wait that runs out without passing `log_long_waits` names the holder on its `lock wait`
/// span too: the one look its `Timeout` takes is told to the span before the span closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_names_the_holder_on_its_span() {
    events::capture_with_span_closes(tracing::Level::INFO);
    let server = RedisServer::start();
    let holder = client(&server, |config| config);
    let waiter = client(&server, |config| config);
    let guard = holder.lock("stuck-span").acquire().await.unwrap();
    let lock = waiter.lock("stuck-span").wait(Duration::from_millis(600));
    let err = lock.acquire().await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let token = guard.token().to_owned();
    guard.release().await.unwrap();
    let closed = events::mentioning(&["lock wait{key=\"stuck-span\"", "close"]);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(
        closed[0].contains(&format!("holder_token=\"{token}\""))
            && closed[0].contains(" pid ")
            && closed[0].contains("held_ms="),
        "{closed:?}"
    );
}
