//! Locked functions unit-tested the way every Tokio application tests its handlers: plain
//! `#[tokio::test]` functions (each its own runtime, run in parallel or one at a time,
//! current-thread or multi-thread) calling `#[distributed_lock]` functions through the
//! global client, and runtimes built by hand after earlier ones were dropped. A runtime
//! that ends takes nothing from the others: the locks its tasks held are released, and the
//! locks of the runtimes still running stay held and renewed.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError, ReleaseOutcome, current_lock, distributed_lock};
use lock_tests::{RedisServer, command_stat_on, shared_server};

#[distributed_lock(key = "tokio-test:<id>", ttl = "5s", wait = "5s")]
async fn locked(id: u64) -> Result<String, LockError> {
    let current = current_lock().expect("inside a guarded body");
    tokio::task::yield_now().await;
    Ok(current.key().to_owned())
}

/// A key of this process's own, so that two runs of the suite on one server never meet.
fn id(n: u64) -> u64 {
    u64::from(std::process::id()) * 100 + n
}

async fn call_and_check(n: u64) {
    shared_server();
    let key = locked(id(n)).await.unwrap();
    assert_eq!(key, format!("tokio-test:{}", id(n)));
    assert_eq!(shared_server().get(&key), None, "released afterwards");
}

#[tokio::test]
async fn a_current_thread_test_calls_a_locked_function() {
    call_and_check(1).await;
}

#[tokio::test]
async fn a_second_current_thread_test_calls_it_too() {
    call_and_check(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_thread_test_calls_it_too() {
    call_and_check(3).await;
}

#[tokio::test]
async fn a_third_test_calls_it_on_the_same_key_as_another() {
    call_and_check(1).await;
}

/// One runtime after another, each dropped before the next is built: the global client
/// stays usable (before, the first runtime's end shut the client down for the process).
#[test]
fn runtimes_built_one_after_another_each_take_locks() {
    shared_server();
    for round in 0..3 {
        let runtime = if round % 2 == 0 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        } else {
            lock_tests::two_worker_runtime()
        };
        let key = runtime
            .block_on(locked(id(10)))
            .unwrap_or_else(|err| panic!("round {round}: {err:?}"));
        assert_eq!(key, format!("tokio-test:{}", id(10)));
        drop(runtime);
        // A try-once lock on the next runtime: its one request must not meet a connection
        // whose reader ended with the runtime before.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let once = runtime.block_on(async {
            let guard = lock_runtime::Lock::new(format!("tokio-test:once:{}", id(12)))
                .wait(Duration::ZERO)
                .acquire()
                .await?;
            guard.release().await
        });
        assert!(once.is_ok(), "round {round}: {once:?}");
        drop(runtime);
    }
}

/// A runtime whose task holds a lock ends: that lock is released at once (not after its
/// ttl), while a lock held on another runtime stays held, is renewed past its ttl, and is
/// released normally.
#[test]
fn a_runtime_that_ends_releases_its_locks_and_leaves_the_others_working() {
    let server = shared_server();
    let (doomed_key, kept_key) = (
        format!("tokio-test:doomed:{}", id(0)),
        format!("tokio-test:kept:{}", id(0)),
    );
    let keeper = lock_tests::two_worker_runtime();
    let kept = keeper
        .block_on(
            lock_runtime::Lock::new(kept_key.clone())
                .ttl(Duration::from_millis(600))
                .acquire(),
        )
        .unwrap();

    let doomed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let key = doomed_key.clone();
    doomed.spawn(async move {
        let guard = lock_runtime::Lock::new(key)
            .ttl(Duration::from_secs(30))
            .acquire()
            .await;
        held_tx.send(guard.is_ok()).unwrap();
        std::future::pending::<()>().await;
        drop(guard);
    });
    // A current-thread runtime runs its tasks only inside `block_on`: it runs until the
    // task has its answer (the key in Redis alone is not enough: the reply may still be
    // unread when the runtime stops running).
    let held = doomed.block_on(async {
        for _ in 0..1_000 {
            if let Ok(held) = held_rx.try_recv() {
                return Some(held);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    });
    assert_eq!(held, Some(true), "the doomed task's lock was taken");
    assert!(server.get(&doomed_key).is_some());
    drop(doomed);

    let freed = keeper.block_on(lock_tests::until(
        Duration::from_secs(5),
        Duration::from_millis(5),
        || server.get(&doomed_key).is_none(),
    ));
    assert!(
        freed.is_some(),
        "the ended runtime's lock was not released (it waits for its 30 s ttl)"
    );

    // Past three of its 600 ms ttls, the other runtime's lock is still held (renewed).
    keeper.block_on(async { tokio::time::sleep(Duration::from_millis(1_800)).await });
    assert!(
        !kept.is_lost(),
        "the lock of a runtime still running was lost"
    );
    assert!(
        server.get(&kept_key).is_some(),
        "the lock of a runtime still running is gone"
    );
    keeper.block_on(kept.release()).unwrap();
    assert_eq!(server.get(&kept_key), None);
    let again = keeper.block_on(locked(id(11)));
    assert!(
        again.is_ok(),
        "the global client took no lock after a runtime ended: {again:?}"
    );
}

/// Tests that run at once isolate their keys by giving each its own client with a key
/// prefix of its own (as `#[sqlx::test]` gives each test its own database): the same
/// lock key in two tests is two keys in Redis, while two clients with one prefix still
/// exclude each other.
#[tokio::test]
async fn a_key_prefix_per_test_keeps_parallel_tests_apart() {
    let server = shared_server();
    let test_client = |test: &str| {
        let prefix = format!("test-{}-{test}:", std::process::id());
        lock_runtime::LockClient::new(lock_runtime::Config::single(server.url()).key_prefix(prefix))
            .unwrap()
    };
    let (first, second) = (test_client("first"), test_client("second"));
    let held = first
        .lock("stock:1")
        .wait(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    let beside = second.lock("stock:1").wait(Duration::ZERO).acquire().await;
    assert!(
        beside.is_ok(),
        "the other test's lock on the same key: {beside:?}"
    );
    let pid = std::process::id();
    assert!(server.get(&format!("test-{pid}-first:stock:1")).is_some());
    assert!(server.get(&format!("test-{pid}-second:stock:1")).is_some());
    assert_eq!(
        server.get("stock:1"),
        None,
        "a key without its test's prefix"
    );

    let same_test = test_client("first");
    let refused = same_test
        .lock("stock:1")
        .wait(Duration::ZERO)
        .acquire()
        .await;
    assert!(
        matches!(refused, Err(LockError::Busy { .. })),
        "{refused:?}"
    );
    held.release().await.unwrap();
    beside.unwrap().release().await.unwrap();
}

/// The same tests pass one at a time (`--test-threads=1`): each `#[tokio::test]` runtime
/// ends before the next starts, which is how a global client bound to its first runtime
/// failed. Runs this test binary again in a child process.
#[test]
fn the_tests_pass_one_at_a_time_too() {
    if std::env::var_os("TOKIO_TESTS_CHILD").is_some() {
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--test-threads=1",
            "--skip",
            "the_tests_pass_one_at_a_time_too",
        ])
        .env("TOKIO_TESTS_CHILD", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "one at a time:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("test result: ok."), "{stdout}");
}

/// The guide's handler tests, run: the application's state carries its `LockClient`, the
/// handler names it (`client = state.locks`), and each test builds a state of its own with
/// a key prefix of its own.
mod handler_tests {
    use lock_runtime::{Config, LockClient, LockError, distributed_lock};

    struct AppState {
        locks: LockClient,
    }

    #[distributed_lock(key = "gift:<user_id>", wait = "0s", client = state.locks)]
    async fn claim(state: &AppState, user_id: u64) -> Result<u64, LockError> {
        Ok(user_id)
    }

    fn test_state() -> AppState {
        let url = lock_tests::shared_server().url();
        let prefix = format!("test-{}:", uuid::Uuid::new_v4());
        let locks = LockClient::new(Config::single(url).key_prefix(prefix)).expect("a lock client");
        AppState { locks }
    }

    #[tokio::test]
    async fn a_claim_is_granted() {
        assert_eq!(claim(&test_state(), 7).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_claim_while_the_gift_is_locked_is_busy() {
        let state = test_state();
        let held = state.locks.lock("gift:7").acquire().await.unwrap();
        // From another task: the task that holds a lock re-enters it.
        let claimed = tokio::spawn(async move { claim(&state, 7).await })
            .await
            .unwrap();
        assert!(
            matches!(claimed, Err(LockError::Busy { .. })),
            "{claimed:?}"
        );
        held.release().await.unwrap();
    }
}

/// A fresh current-thread runtime.
fn new_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A connection opened on a runtime that has ended is never used again: runtimes built one
/// after another, each taking a try-once lock and releasing it, each pay what one runtime
/// does (the acquire one `SET` and no script call, the release one script call, nothing
/// failed and tried again); and a release sent on a new runtime reports what the server
/// had, not a repeat of a send the dead connection swallowed.
#[test]
fn a_new_runtime_never_meets_an_old_runtimes_connection() {
    let server = RedisServer::start();
    let client = LockClient::new(Config::single(server.url())).unwrap();
    // The client's one-time eviction check (a `CONFIG GET` from its own thread) lands
    // when it lands: wait for it, so that no round counts it.
    let checked = Instant::now();
    while command_stat_on(&mut server.conn(), "config|get", "calls") == 0 {
        assert!(
            checked.elapsed() < Duration::from_secs(30),
            "the client never checked the eviction policy"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let key = "new-runtime:once";
    let mut cycles = Vec::new();
    for round in 0..4 {
        let runtime = new_runtime();
        let (acquire, cycle) = runtime.block_on(async {
            server.reset_stats();
            let guard = client.lock(key).wait(Duration::ZERO).acquire().await;
            let guard = guard.unwrap_or_else(|err| panic!("round {round}: {err:?}"));
            let acquire = (
                command_stat_on(&mut server.conn(), "set", "calls"),
                server.script_calls(),
                server.command_calls(),
            );
            let released = guard.release().await;
            assert_eq!(released.unwrap(), ReleaseOutcome::Released, "round {round}");
            (acquire, server.command_calls())
        });
        drop(runtime);
        if round > 0 {
            // (The first round loads the scripts.)
            assert_eq!(
                (acquire.0, acquire.1),
                (1, 0),
                "round {round}: {}",
                acquire.2
            );
            assert_eq!(server.failed_script_calls(), 0, "round {round}: {cycle}");
            cycles.push(cycle);
        }
    }
    assert!(
        cycles.windows(2).all(|pair| pair[0] == pair[1]),
        "the cycles of the later runtimes cost different commands: {cycles:#?}"
    );

    // A lock taken on one runtime, released on the next after another owner took the key.
    let runtime = new_runtime();
    let guard = runtime
        .block_on(client.lock(key).ttl(Duration::from_secs(30)).acquire())
        .unwrap();
    drop(runtime);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("foreign-owner")
        .arg("PX")
        .arg(30_000)
        .query(&mut server.conn())
        .unwrap();
    let released = new_runtime().block_on(guard.release());
    assert_eq!(released.unwrap(), ReleaseOutcome::NotOwner);
    assert_eq!(server.get(key).as_deref(), Some("foreign-owner"));
}
