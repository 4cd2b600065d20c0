//! `#[distributed_lock]` against a real redis-server, through the global client: the
//! rendered key, release on every exit path (return, `?`, panic), reentrancy without a
//! round trip, lost-lease cancellation, fencing, and run-time key errors; and several keys
//! in one attribute.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_runtime::{
    LockError, LostCause, current_lock, current_locks, distributed_lock, is_locked,
};
use lock_tests::{block_on, shared_server};
use redis::Commands as _;

/// The tests count the server's commands, so they run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every command the server ran that a lock sends (scripts, and the plain fallbacks).
fn lock_commands() -> u64 {
    let server = shared_server();
    ["fcall", "evalsha", "eval", "set", "get", "pttl", "del"]
        .iter()
        .map(|command| server.calls(command))
        .sum()
}

#[distributed_lock(key = "attr:stock:<id>", ttl = "10s", wait = "0s")]
async fn held_key(id: u64) -> Result<(String, bool), LockError> {
    let current = current_lock().expect("inside a guarded body");
    let locked = is_locked(&format!("attr:stock:{id}")).await?;
    Ok((current.key().to_owned(), locked))
}

#[test]
fn the_key_is_the_rendered_template_and_is_released_afterwards() {
    let _serial = serial();
    let id = u64::from(std::process::id()) * 1000 + 7;
    let (key, locked) = block_on(held_key(id)).unwrap();
    assert_eq!(key, format!("attr:stock:{id}"));
    assert!(locked, "the key was not held while the body ran");
    assert_eq!(shared_server().get(&key), None, "not released");
}

#[derive(Debug)]
enum AppError {
    #[allow(dead_code)] // read through Debug only
    Lock(LockError),
    Parse,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

#[distributed_lock(key = "attr:early:<tag>", ttl = "10s")]
async fn early_exits(tag: &str, mode: u8) -> Result<u8, AppError> {
    if mode == 0 {
        return Ok(0);
    }
    let parsed: u8 = "x".parse().map_err(|_| AppError::Parse)?;
    Ok(parsed)
}

#[test]
fn return_and_question_mark_release_the_lock() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    assert_eq!(block_on(early_exits(&tag, 0)).unwrap(), 0);
    assert!(matches!(
        block_on(early_exits(&tag, 1)),
        Err(AppError::Parse)
    ));
    assert_eq!(shared_server().get(&format!("attr:early:{tag}")), None);
}

#[distributed_lock(key = "attr:panic:<tag>", ttl = "10s")]
async fn panics(tag: String) -> Result<(), LockError> {
    let _ = tag;
    panic!("the body's own panic");
}

#[test]
fn a_panicking_body_releases_and_the_panic_reaches_the_caller() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let key = format!("attr:panic:{tag}");
    let joined = block_on(async { tokio::spawn(panics(tag)).await });
    let panic = joined.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"the body's own panic"));
    // The release runs in the background after the unwind; wait for it by event count.
    block_on(async {
        for _ in 0..200 {
            if !is_locked(&key).await.unwrap() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{key} still held 2 s after the panic");
    });
}

#[distributed_lock(key = "attr:nested:<tag>", ttl = "10s", wait = "0s")]
async fn inner(tag: &str) -> Result<u64, LockError> {
    let _ = tag;
    Ok(1)
}

#[distributed_lock(key = "attr:nested:<tag>", ttl = "10s", wait = "0s")]
async fn outer(tag: &str) -> Result<(u64, u64), LockError> {
    let before = lock_commands();
    let nested = inner(tag).await?;
    let during = lock_commands() - before;
    // A spawned task is another owner: refused, since the key is held.
    let other = tag.to_owned();
    let spawned = tokio::spawn(async move { inner(&other).await })
        .await
        .unwrap();
    assert!(
        matches!(&spawned, Err(LockError::Busy { key }) if key.starts_with("attr:nested:")),
        "{spawned:?}"
    );
    Ok((nested, during))
}

#[test]
fn a_nested_call_in_the_same_task_is_reentrant_without_a_round_trip() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (nested, commands) = block_on(outer(&tag)).unwrap();
    assert_eq!(nested, 1);
    assert_eq!(commands, 0, "the nested call sent commands to Redis");
}

#[distributed_lock(key = "attr:lost:<tag>", ttl = "600ms")]
async fn cancelled_on_loss(tag: &str, reached_end: Arc<AtomicBool>) -> Result<(), LockError> {
    shared_server()
        .conn()
        .del::<_, ()>(format!("attr:lost:{tag}"))
        .unwrap();
    // Far longer than the watchdog needs to notice (ttl/3 plus a round trip).
    tokio::time::sleep(Duration::from_secs(5)).await;
    reached_end.store(true, Ordering::SeqCst);
    Ok(())
}

#[test]
fn a_lost_lease_cancels_the_body_with_lost() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let reached_end = Arc::new(AtomicBool::new(false));
    let result = block_on(cancelled_on_loss(&tag, reached_end.clone()));
    assert!(
        matches!(
            &result,
            Err(LockError::Lost {
                cause: LostCause::TokenGone,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(!reached_end.load(Ordering::SeqCst), "the body ran on");
}

#[distributed_lock(key = "attr:continue:<tag>", ttl = "600ms", on_lost = "continue")]
async fn continues_on_loss(tag: &str) -> Result<bool, LockError> {
    shared_server()
        .conn()
        .del::<_, ()>(format!("attr:continue:{tag}"))
        .unwrap();
    let current = current_lock().unwrap();
    let cause = tokio::time::timeout(Duration::from_secs(5), current.lost())
        .await
        .expect("the loss was not noticed");
    assert_eq!(cause, LostCause::TokenGone);
    Ok(current.is_lost())
}

#[test]
fn with_continue_the_body_finishes_and_sees_the_loss() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    assert!(block_on(continues_on_loss(&tag)).unwrap());
}

/// Another owner's token over ours while the body runs: what a failover leaves when it
/// promotes a replica without our key and another client then takes the key. The lease is
/// 30 s, so no renewal runs during the body (the first is due after 10 s): only the
/// release can find the loss.
fn take_over(key: &str) {
    shared_server()
        .conn()
        .set_options::<_, _, ()>(
            key,
            "other-owner",
            redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(30_000)),
        )
        .unwrap();
}

#[distributed_lock(key = "attr:failover:<tag>", ttl = "30s")]
async fn taken_over_while_running(tag: &str) -> Result<(), LockError> {
    take_over(&format!("attr:failover:{tag}"));
    Ok(())
}

#[distributed_lock(key = "attr:failover:<tag>", ttl = "30s", on_lost = "continue")]
async fn taken_over_while_running_on(tag: &str) -> Result<lock_runtime::CurrentLock, LockError> {
    take_over(&format!("attr:failover:{tag}"));
    Ok(current_lock().unwrap())
}

/// The losses counted under `lock_lost_total{cause}` by what `run` does inside.
fn lost_counted<T>(cause: &str, run: impl FnOnce() -> T) -> (T, u64) {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let result = metrics::with_local_recorder(&recorder, run);
    let counted = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            key.key().name() == lock_runtime::telemetry::LOST
                && key
                    .key()
                    .labels()
                    .any(|label| label.key() == "cause" && label.value() == cause)
        })
        .map(|(_, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(count) => count,
            _ => 0,
        })
        .sum();
    (result, counted)
}

/// A lock that another owner took during the body is not a success: the release finds
/// the other owner's token, the call returns `Lost` (cause `FoundAtRelease`), the loss is
/// counted once, and the other owner's key is left alone. With `on_lost = "continue"` the
/// body's result stands and the lock reads lost.
#[test]
fn a_lock_found_taken_over_at_release_is_lost() {
    let _serial = serial();
    let server = shared_server();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let key = format!("attr:failover:{tag}");
    let (result, counted) = lost_counted("found_at_release", || {
        block_on(taken_over_while_running(&tag))
    });
    assert!(
        matches!(
            &result,
            Err(LockError::Lost { key: lost, cause: LostCause::FoundAtRelease }) if *lost == key
        ),
        "{result:?}"
    );
    assert_eq!(counted, 1, "the loss found at release was not counted once");
    assert_eq!(server.get(&key).as_deref(), Some("other-owner"));
    assert!(
        server.pttl(&key) > 20_000,
        "the other owner's key was touched"
    );

    let tag = uuid::Uuid::new_v4().simple().to_string();
    let key = format!("attr:failover:{tag}");
    let (result, counted) = lost_counted("found_at_release", || {
        block_on(taken_over_while_running_on(&tag))
    });
    let current = result.unwrap();
    assert!(current.is_lost());
    assert_eq!(current.lost_cause(), Some(LostCause::FoundAtRelease));
    assert_eq!(counted, 1, "the loss found at release was not counted once");
    assert_eq!(server.get(&key).as_deref(), Some("other-owner"));
}

#[distributed_lock(key = "attr:fenced:<tag>", ttl = "5s", fencing = true)]
async fn fenced(tag: &str) -> Result<Option<u64>, LockError> {
    let _ = tag;
    Ok(current_lock().and_then(|lock| lock.fence()))
}

#[test]
fn fencing_gives_increasing_tokens() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let first = block_on(fenced(&tag)).unwrap().expect("a fence");
    let second = block_on(fenced(&tag)).unwrap().expect("a fence");
    assert!(second > first, "{second} <= {first}");
}

#[distributed_lock(key = "attr:pair:<a>:<b>", ttl = "5s")]
async fn pair_key(a: &str, b: &str) -> Result<String, LockError> {
    let _ = (a, b);
    Ok(current_lock().unwrap().key().to_owned())
}

#[test]
fn values_are_escaped_so_keys_never_collide_or_form_hash_tags() {
    let _serial = serial();
    let one = block_on(pair_key("1:2", "3")).unwrap();
    let two = block_on(pair_key("1", "2:3")).unwrap();
    assert_ne!(one, two);
    assert_eq!(one, "attr:pair:1%3A2:3");
    let tagged = block_on(pair_key("{user}", "x")).unwrap();
    assert!(!tagged.contains('{') && !tagged.contains('}'), "{tagged}");
}

#[test]
fn an_empty_value_is_an_invalid_key_before_any_redis_traffic() {
    let _serial = serial();
    shared_server();
    let before = lock_commands();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let result = block_on(async move {
        #[distributed_lock(key = "attr:user:<name>")]
        async fn named(name: &str, ran: Arc<AtomicBool>) -> Result<(), LockError> {
            let _ = name;
            ran.store(true, Ordering::SeqCst);
            Ok(())
        }
        named("", flag).await
    });
    match result {
        Err(LockError::InvalidKey { key, reason }) => {
            assert_eq!(key, "attr:user:<name>");
            assert!(reason.contains("<name>"), "{reason}");
        }
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(
        lock_commands(),
        before,
        "Redis saw traffic for an invalid key"
    );
}

#[distributed_lock(key = "attr:acct:<id>", wait = "0s")]
async fn one_account(id: u64) -> Result<bool, LockError> {
    Ok(current_lock().is_some())
}

#[distributed_lock(key = ["attr:acct:<from>", "attr:acct:<to>", "attr:acct:<to>:ledger"], wait = "2s")]
async fn both_accounts(from: u64, to: u64) -> Result<(Vec<String>, Vec<bool>), LockError> {
    // Another task (a spawned task is another owner) finds the keys held.
    let mut held = Vec::new();
    for key in [format!("attr:acct:{from}"), format!("attr:acct:{to}")] {
        held.push(
            tokio::spawn(async move { is_locked(&key).await })
                .await
                .unwrap()?,
        );
    }
    // This task holds them: a nested lock on one of them is reentrant (`wait = "0s"`
    // would be `Busy` otherwise).
    held.push(one_account(to).await?);
    let keys = current_locks()
        .iter()
        .map(|lock| lock.key().to_owned())
        .collect();
    Ok((keys, held))
}

#[test]
fn several_keys_are_rendered_held_together_and_released() {
    let _serial = serial();
    let server = shared_server();
    let (from, to) = (u64::from(std::process::id()) * 1000 + 9, 12);
    let (keys, held) = block_on(both_accounts(from, to)).unwrap();
    // The canonical order: sorted, whatever order the arguments name them in.
    let mut expected = vec![
        format!("attr:acct:{from}"),
        format!("attr:acct:{to}"),
        format!("attr:acct:{to}:ledger"),
    ];
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(held, [true, true, true]);
    for key in &expected {
        assert_eq!(server.get(key), None, "{key} was not released");
    }
    // A key that does not render: nothing is locked.
    #[distributed_lock(key = ["attr:acct:<from>", "attr:user:<name>"])]
    async fn with_name(from: u64, name: &str) -> Result<(), LockError> {
        let _ = (from, name);
        Ok(())
    }
    let err = block_on(with_name(from, "")).unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidKey { key, .. } if key == "attr:user:<name>"),
        "{err:?}"
    );
    assert_eq!(server.get(&format!("attr:acct:{from}")), None);
}

/// The longest PTTL the body saw over a few calls (each call takes and releases the key),
/// so that one call slowed by a loaded machine does not decide the test; and that no call
/// saw more than `at_most` ms.
fn best_pttl<F>(at_most: i64, mut call: F) -> i64
where
    F: FnMut() -> Result<i64, LockError>,
{
    let mut best = -2;
    for _ in 0..10 {
        let pttl = call().unwrap();
        assert!(pttl <= at_most, "a lease of {pttl} ms: over {at_most} ms");
        best = best.max(pttl);
    }
    best
}

#[distributed_lock(key = "attr:ttl:<tag>", ttl = "1.5s", watchdog = false)]
async fn lease_of_one_and_a_half_seconds(tag: &str) -> Result<i64, LockError> {
    Ok(shared_server().pttl(&format!("attr:ttl:{tag}")))
}

#[test]
fn a_fractional_ttl_gives_that_lease() {
    let _serial = serial();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    // 1.5 s exactly: not rounded down to 1 s, nor up to 2 s.
    let best = best_pttl(1500, || block_on(lease_of_one_and_a_half_seconds(&tag)));
    assert!(best > 1000, "the lease was {best} ms, not 1.5 s");
}

/// Lock settings read from configuration at run time.
struct LockSettings {
    ttl: Duration,
    wait: Duration,
}

#[distributed_lock(key = "attr:cfg:<tag>", ttl = settings.ttl, wait = settings.wait, watchdog = false)]
async fn configured(tag: &str, settings: &LockSettings) -> Result<i64, LockError> {
    Ok(shared_server().pttl(&format!("attr:cfg:{tag}")))
}

const LEASE: Duration = Duration::from_millis(2500);

#[distributed_lock(key = "attr:cfg:<tag>", ttl = LEASE, wait = Duration::from_millis(n))]
async fn from_a_constant(tag: &str, n: u64) -> Result<i64, LockError> {
    Ok(shared_server().pttl(&format!("attr:cfg:{tag}")))
}

#[test]
fn ttl_and_wait_take_duration_expressions() {
    let _serial = serial();
    let server = shared_server();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let settings = LockSettings {
        ttl: Duration::from_millis(2500),
        wait: Duration::from_secs(1),
    };
    let best = best_pttl(2500, || block_on(configured(&tag, &settings)));
    assert!(best > 1500, "the lease was {best} ms, not 2.5 s");
    let best = best_pttl(2500, || block_on(from_a_constant(&tag, 100)));
    assert!(best > 1500, "the lease was {best} ms, not 2.5 s");

    // The wait comes from the expression too: zero tries once, a bound times out.
    let key = format!("attr:cfg:{tag}");
    let _: () = server.conn().set_ex(&key, "someone-else", 30).unwrap();
    let once = LockSettings {
        wait: Duration::ZERO,
        ..settings
    };
    let err = block_on(configured(&tag, &once)).unwrap_err();
    assert!(matches!(err, LockError::Busy { .. }), "{err:?}");
    let err = block_on(from_a_constant(&tag, 50)).unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let _: () = server.conn().del(&key).unwrap();

    // An expression is checked when the call runs: a zero ttl is a configuration error,
    // before any Redis traffic.
    let zero = LockSettings {
        ttl: Duration::ZERO,
        wait: Duration::ZERO,
    };
    let before = lock_commands();
    let err = block_on(configured(&tag, &zero)).unwrap_err();
    assert!(
        matches!(&err, LockError::Config { reason } if reason.contains("ttl")),
        "{err:?}"
    );
    assert_eq!(lock_commands(), before, "a zero ttl reached Redis");
}

#[distributed_lock(key = ["attr:far:<a>", "attr:far:<b>"], wait = wait)]
async fn both_with_wait(a: u64, b: u64, wait: Duration) -> Result<(), LockError> {
    let _ = (a, b, wait);
    Ok(())
}

#[test]
fn a_wait_past_any_deadline_waits_without_panicking() {
    let _serial = serial();
    let a = u64::from(std::process::id()) * 1000 + 31;
    block_on(both_with_wait(a, a + 1, Duration::MAX)).unwrap();
}
