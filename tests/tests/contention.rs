//! Contention and safety against a real redis-server: wake-ups instead of polling, fair
//! hand-over, task-scoped reentrancy, lock-lost cancellation, fencing tokens.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LostCause, OnLost, current_lock};
use lock_tests::proxy::{Direction, FaultProxy};
use lock_tests::{RedisServer, child, until_waiting};
use tokio::sync::Mutex;

const CONTENDED_KEY: &str = "hot";
const PROCESSES: usize = 4;
const TASKS_PER_PROCESS: usize = 250;

/// The worker side of `thousand_tasks_across_four_processes`: runs only in child processes.
#[test]
fn contention_worker() {
    let Some(role) = child::role() else { return };
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    let runtime = lock_tests::two_worker_runtime();
    let worker = role.clone();
    runtime.block_on(async move {
        let role = worker;
        let client = LockClient::new(lock_runtime::Config::single(url)).unwrap();
        let redis = client_conn(&client).await;
        let mut tasks = Vec::new();
        for task in 0..TASKS_PER_PROCESS {
            let client = client.clone();
            let mut redis = redis.clone();
            let id = format!("{role}-{task}");
            tasks.push(tokio::spawn(async move {
                client
                    .lock(CONTENDED_KEY)
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(120))
                    .run(async {
                        // A cross-process overlap detector: more than one inside is a
                        // second holder.
                        lock_tests::checkers::enter(&mut redis, 1).await;
                        let _: i64 = redis::cmd("RPUSH")
                            .arg("ran")
                            .arg(&id)
                            .query_async(&mut redis)
                            .await
                            .unwrap();
                        lock_tests::checkers::leave(&mut redis).await;
                        Ok::<(), LockError>(())
                    })
                    .await
            }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(
            client.waiting(),
            (0, 0),
            "a waiter or subscription was left behind"
        );
    });
    println!("WORKER-DONE {role}");
}

async fn client_conn(_client: &LockClient) -> redis::aio::MultiplexedConnection {
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[test]
fn thousand_tasks_across_four_processes() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    server.reset_stats();
    let workers: Vec<_> = (0..PROCESSES)
        .map(|index| {
            child::spawn(
                "contention_worker",
                &format!("p{index}"),
                &[("LOCK_TESTS_URL", server.url())],
            )
        })
        .collect();
    for worker in workers {
        assert_eq!(child::collect(worker, "WORKER-DONE ").len(), 1);
    }
    let total = PROCESSES * TASKS_PER_PROCESS;
    let mut conn = server.conn();
    let overlaps: Option<u64> = redis::cmd("GET").arg("overlaps").query(&mut conn).unwrap();
    assert_eq!(overlaps, None, "two holders overlapped");
    let ran: Vec<String> = redis::cmd("LRANGE")
        .arg("ran")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    let distinct: std::collections::HashSet<_> = ran.iter().collect();
    assert_eq!(ran.len(), total, "a body ran twice or never");
    assert_eq!(distinct.len(), total);
    // Two levels: the tasks of a process pass the lock between them without Redis, and
    // only the process waits in Redis. Each Redis tenure costs a few script calls (tries,
    // the confirming try, the release that passes the lock to the next process), shared by
    // the acquisitions of that tenure; per-task Redis waiting costs two or three script
    // calls per acquisition (tries, release), and polling many more.
    let failed = server.failed_script_calls();
    let scripts = server.script_calls() - failed;
    let per_acquisition = scripts as f64 / total as f64;
    println!("scripts: {scripts} executed, {failed} failed: {per_acquisition:.2} per acquisition");
    assert!(
        per_acquisition <= 0.5,
        "{per_acquisition:.2} script calls per acquisition: tasks do not pass the lock locally"
    );
    // Nothing stays: queues vanish when empty. The queue's ttls hash may outlive its queue
    // by the foreign-window schedule's memory (prelude.lua's `forget`: `~gap-every` + 1 s,
    // at most 17 s), which a run contended for over a second writes; it ends by itself.
    let mut keys: Vec<String> = Vec::new();
    for _ in 0..200 {
        keys = redis::cmd("KEYS").arg("*hot*").query(&mut conn).unwrap();
        if keys.iter().all(|key| key == "~lock/ttls{hot}") {
            assert!(
                keys.is_empty() || lock_tests::ends_by_itself(&mut conn, "~lock/ttls{hot}"),
                "the ttls hash outlives its queue for longer than its memory"
            );
        }
        if keys.is_empty() || keys.iter().any(|key| key != "~lock/ttls{hot}") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let described: Vec<String> = keys
        .iter()
        .map(|key| {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).unwrap();
            let kind: String = redis::cmd("TYPE").arg(key).query(&mut conn).unwrap();
            let fields: Vec<String> = if kind == "hash" {
                redis::cmd("HGETALL").arg(key).query(&mut conn).unwrap()
            } else {
                Vec::new()
            };
            format!("{key} ({kind}, PTTL {pttl} ms, {fields:?})")
        })
        .collect();
    assert!(keys.is_empty(), "left behind: {described:?}");
}

/// Script calls of one waiter that ran, without NOSCRIPT answers (a script's first call
/// on a server) and without the watchdog's keep-alives of its queue place: each keep-alive
/// runs one `ZSCORE` per place, and with one waiter behind a holder that nobody else waits
/// for, nothing else runs `ZSCORE`.
fn tries(server: &RedisServer) -> u64 {
    server.script_calls() - server.failed_script_calls() - server.calls("zscore")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_are_served_first_come_first_served() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let holder = client.lock("fifo").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..8 {
        let task_client = client.clone();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            task_client
                .lock("fifo")
                .run(async {
                    order.lock().await.push(index);
                    Ok::<(), LockError>(())
                })
                .await
                .unwrap();
        }));
        // The next task arrives only after this one is queued.
        until_waiting(&client, index + 1).await;
    }
    holder.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().await, (0..8).collect::<Vec<_>>());
    assert_eq!(client.waiting(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releasing_task_does_not_jump_ahead_of_a_waiter() {
    let server = RedisServer::start();
    let greedy = server.lock_client();
    let patient = server.lock_client();
    let first = greedy.lock("handover").acquire().await.unwrap();
    let waiter = {
        let patient = patient.clone();
        tokio::spawn(async move { patient.lock("handover").acquire().await.unwrap() })
    };
    server.until_queued("handover", 1).await;
    // Release and ask again at once, as a hot loop would.
    first.release().await.unwrap();
    let again = greedy.lock("handover").wait(Duration::from_secs(10));
    let again = tokio::spawn(async move { again.acquire().await });
    let waiter_guard = waiter.await.unwrap();
    assert!(
        !again.is_finished(),
        "the releasing task took the lock back first"
    );
    waiter_guard.release().await.unwrap();
    again.await.unwrap().unwrap().release().await.unwrap();
}

/// A client that knows of no waiter tries a plain `SET NX` first. While a released key is
/// handed to a waiter in another process (whose wake-up is slowed down here), that try
/// must fail: the release left the key to the waiter, not free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_cannot_take_a_key_being_handed_to_a_waiter() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let newcomer = server.lock_client();
    let patient = LockClient::new(Config::single(proxy.url())).unwrap();
    let first = newcomer.lock("turn").acquire().await.unwrap();
    let waiter = {
        let patient = patient.clone();
        tokio::spawn(async move { patient.lock("turn").acquire().await })
    };
    server.until_queued("turn", 1).await;
    // The waiter hears of the release 300 ms late.
    proxy.set_delay(Direction::Down, Duration::from_millis(300));
    first.release().await.unwrap();
    let attempt = newcomer.lock("turn").wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(attempt, Err(LockError::Busy { .. })),
        "the newcomer took a key being handed to a waiter: {attempt:?}"
    );
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(server.get("turn").as_deref(), Some(guard.token()));
    proxy.set_delay(Direction::Down, Duration::ZERO);
    guard.release().await.unwrap();
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "keys left behind: {}",
        server.dbsize()
    );
}

/// A release grants the lock to the waiter at the head of the queue outright: the key
/// holds the waiter's token at once (for the grant's confirmation window), and the waiter
/// confirms with one try that takes the key for its whole ttl; it never queues again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_grants_the_head_waiter_who_confirms_with_one_try() {
    let server = RedisServer::start();
    let holder = server.lock_client();
    let waiter_client = server.lock_client();
    let held = holder.lock("grant").acquire().await.unwrap();
    // Load the scripts first, so the counts below hold no NOSCRIPT round.
    let timed_out = waiter_client
        .lock("grant")
        .wait(Duration::from_millis(20))
        .acquire()
        .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    holder
        .lock("warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    server.reset_stats();
    let waiter = {
        let client = waiter_client.clone();
        tokio::spawn(async move { client.lock("grant").acquire().await })
    };
    // The waiter's two tries: the one that queues it, and the one right after it subscribed.
    for _ in 0..1000 {
        if tries(&server) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(tries(&server), 2, "the waiter's tries");
    held.release().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(server.get("grant").as_deref(), Some(guard.token()));
    assert_eq!(
        tries(&server),
        5,
        "expected the waiter's 2 tries, the release (its short form, then the full one: the \
         holder took the key when nobody was queued), and the one try that confirms the grant"
    );
    // Confirmed: the key is the waiter's for its whole ttl (30 s), not the grant's window.
    assert!(
        server.pttl("grant") > 29_000,
        "pttl {}",
        server.pttl("grant")
    );
    guard.release().await.unwrap();
    assert!(
        server.until_empty(Duration::from_secs(3)).await,
        "keys left behind: {}",
        server.dbsize()
    );
}

/// The waiter a release granted the key to gives up (its task is aborted) before it hears
/// of the grant: its clean-up passes the key on to the next waiter and wakes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_during_its_hand_over_passes_the_key_on() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = server.lock_client();
    let first_in_line = LockClient::new(Config::single(proxy.url())).unwrap();
    let second_in_line = server.lock_client();
    let held = holder.lock("relay").acquire().await.unwrap();
    // A waiter that times out leaves the queue: that loads the leave script into the
    // server's cache, so the slowed-down waiter's leave below needs no reply to run.
    let timed_out = second_in_line
        .lock("relay")
        .wait(Duration::from_millis(50))
        .acquire()
        .await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    let first = {
        let client = first_in_line.clone();
        tokio::spawn(async move { client.lock("relay").acquire().await })
    };
    server.until_queued("relay", 1).await;
    let second = {
        let client = second_in_line.clone();
        tokio::spawn(async move {
            client
                .lock("relay")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    server.until_queued("relay", 2).await;
    // The first in line never hears of the release; it gives up instead.
    proxy.set_delay(Direction::Down, Duration::from_secs(5));
    let holder_token = held.token().to_owned();
    held.release().await.unwrap();
    // Granted to the first in line (the key holds its token), which never hears of it.
    let granted = server.get("relay").expect("the release left the key free");
    assert_ne!(granted, holder_token);
    assert_ne!(
        granted, "~handover",
        "no direct grant to a waiter without a fence"
    );
    first.abort();
    // Woken by the pass-on message; without it the second waiter would sleep out its
    // 2 s park (the holder's lease is far from its end) before trying again.
    let guard = tokio::time::timeout(Duration::from_millis(1500), second)
        .await
        .expect("the second waiter was not woken: the key was not passed on")
        .unwrap()
        .unwrap();
    assert_eq!(server.get("relay").as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
}

/// A hand-over whose waiters all went away (their queue expired) is free for anyone who
/// may wait, has no holder for `is_locked`, and refuses a try-once (it expires shortly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_left_without_waiters_is_taken_by_the_next_comer() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let _: () = redis::cmd("SET")
        .arg("orphan")
        .arg("~handover")
        .arg("PX")
        .arg(60_000)
        .query(&mut server.conn())
        .unwrap();
    assert!(!client.is_locked("orphan").await.unwrap());
    let attempt = client.lock("orphan").wait(Duration::ZERO).acquire().await;
    assert!(
        matches!(attempt, Err(LockError::Busy { .. })),
        "{attempt:?}"
    );
    let guard = client
        .lock("orphan")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    assert_eq!(server.get("orphan").as_deref(), Some(guard.token()));
    assert!(client.is_locked("orphan").await.unwrap());
    guard.release().await.unwrap();
    assert_eq!(server.dbsize(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_holder_crashed_acquires_at_expiry() {
    let server = RedisServer::start();
    let client = server.lock_client();
    // A holder that crashed: its key stays until its expiry and nobody publishes a release.
    let _: () = redis::cmd("SET")
        .arg("crashed")
        .arg("dead-holder")
        .arg("PX")
        .arg(800)
        .query(&mut server.conn())
        .unwrap();
    server.reset_stats();
    let guard = client
        .lock("crashed")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert_eq!(server.get("crashed").as_deref(), Some(guard.token()));
    // Parked until the holder's PTTL, not polling: a handful of attempts.
    let attempts = tries(&server);
    assert!(
        attempts <= 4,
        "{attempts} attempts while the dead holder's lease ran out"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_a_key_without_expiry_parks_instead_of_polling() {
    let server = RedisServer::start();
    let client = server.lock_client();
    // A foreign lock with no expiry (redis-py's `Lock(timeout=None)` leaves one): PTTL -1.
    let _: () = redis::cmd("SET")
        .arg("forever")
        .arg("foreign-holder")
        .query(&mut server.conn())
        .unwrap();
    server.reset_stats();
    let outcome = client
        .lock("forever")
        .wait(Duration::from_millis(1500))
        .acquire()
        .await;
    assert!(
        matches!(outcome, Err(LockError::Timeout { ref key, .. }) if key == "forever"),
        "{outcome:?}"
    );
    // Parked between tries (a release would wake it), not asking every few ms: a handful
    // of scripts (the tries around subscribing, one per safety-net park, the last try at
    // the deadline, leaving the queue). Polling made about 500.
    let attempts = tries(&server);
    assert!(
        attempts <= 8,
        "{attempts} script calls in 1.5 s behind a key without expiry: the waiter polls"
    );
    assert_eq!(server.get("forever").as_deref(), Some("foreign-holder"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_key_is_deleted_is_cancelled_with_lost() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let finished = Arc::new(AtomicBool::new(false));
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let body_finished = finished.clone();
    let run = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("deleted-under")
                .ttl(Duration::from_millis(600))
                .run(async move {
                    inside_tx.send(()).unwrap();
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    body_finished.store(true, Ordering::SeqCst);
                    Ok::<(), LockError>(())
                })
                .await
        }
    });
    inside_rx.await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg("deleted-under")
        .query(&mut server.conn())
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the loss was not noticed within ttl/3 plus a round trip")
        .unwrap();
    match result {
        Err(LockError::Lost { key, cause }) => {
            assert_eq!(key, "deleted-under");
            assert_eq!(cause, LostCause::TokenGone);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        !finished.load(Ordering::SeqCst),
        "the body ran on after the loss"
    );
    assert_eq!(client.held_leases(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_on_lost_continue_the_body_finishes_and_sees_the_loss() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let run = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock("continue")
                .ttl(Duration::from_millis(600))
                .on_lost(OnLost::Continue)
                .run(async move {
                    let lock = current_lock().expect("inside a guarded body");
                    assert_eq!(lock.key(), "continue");
                    assert!(!lock.is_lost());
                    inside_tx.send(()).unwrap();
                    let cause = lock.lost().await;
                    Ok::<_, LockError>((cause, current_lock().unwrap().is_lost()))
                })
                .await
        }
    });
    inside_rx.await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg("continue")
        .query(&mut server.conn())
        .unwrap();
    let (cause, seen) = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the loss was not noticed")
        .unwrap()
        .unwrap();
    assert_eq!(cause, LostCause::TokenGone);
    assert!(seen);
    assert!(
        current_lock().is_none(),
        "current_lock leaked out of the body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_loss_never_deletes_the_new_holders_key() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let stale = client
        .lock("taken-over")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("taken-over")
        .query(&mut server.conn())
        .unwrap();
    let fresh = client.lock("taken-over").acquire().await.unwrap();
    assert_eq!(stale.lost().await, LostCause::TokenGone);
    drop(stale);
    let fresh_token = fresh.token().to_owned();
    // Bounded wait for the dropped guard's background release to have run.
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.get("taken-over"), Some(fresh_token));
    fresh.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_is_scoped_to_the_task() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let outer = client.clone();
    outer
        .lock("reentrant")
        .run(async {
            let before = server.script_calls();
            // Nested, same task, wait = 0: granted without a round trip.
            let nested = client
                .lock("reentrant")
                .wait(Duration::ZERO)
                .run(async { Ok::<_, LockError>(current_lock().unwrap().key().to_owned()) })
                .await
                .unwrap();
            assert_eq!(nested, "reentrant");
            let guard = client
                .lock("reentrant")
                .wait(Duration::ZERO)
                .acquire()
                .await
                .unwrap();
            assert!(guard.is_reentrant());
            guard.release().await.unwrap();
            assert_eq!(server.script_calls(), before, "a nested call went to Redis");
            // Still held by the outer body after the nested release.
            assert!(client.is_locked("reentrant").await.unwrap());
            // A spawned task is another owner.
            let spawned = {
                let client = client.clone();
                tokio::spawn(async move {
                    client
                        .lock("reentrant")
                        .wait(Duration::ZERO)
                        .acquire()
                        .await
                })
            };
            let refused = spawned.await.unwrap().unwrap_err();
            assert!(matches!(refused, LockError::Busy { .. }), "{refused:?}");
            Ok::<(), LockError>(())
        })
        .await
        .unwrap();
    assert!(!client.is_locked("reentrant").await.unwrap());
}

/// A store that accepts a write only with a fence above the last one it accepted.
#[derive(Default)]
struct FencedStore {
    last_fence: u64,
    value: Option<&'static str>,
    rejected: u32,
}

impl FencedStore {
    fn write(&mut self, fence: u64, value: &'static str) -> bool {
        if fence <= self.last_fence {
            self.rejected += 1;
            return false;
        }
        self.last_fence = fence;
        self.value = Some(value);
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_increase_across_a_restart_and_reject_a_stale_writer() {
    let mut server = RedisServer::start();
    let client = server.lock_client();
    let lock = || {
        client
            .lock("fenced")
            .fencing(true)
            .ttl(Duration::from_millis(600))
    };

    let first = lock().acquire().await.unwrap();
    let first_fence = first.fence().unwrap();
    first.release().await.unwrap();
    let second = lock().acquire().await.unwrap();
    let second_fence = second.fence().unwrap();
    assert!(second_fence > first_fence);
    second.release().await.unwrap();
    assert!(server.get("~lock/fence{fenced}").is_some());
    assert!(
        server.pttl("~lock/fence{fenced}") > 0,
        "the fence counter never expires"
    );

    // Redis restarts without persistence: the counter is gone, fences still increase.
    server.restart();
    let mut third = None;
    for _ in 0..50 {
        match lock().acquire().await {
            Ok(guard) => {
                third = Some(guard);
                break;
            }
            Err(LockError::Backend { .. }) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(other) => panic!("{other:?}"),
        }
    }
    let third = third.expect("the client did not reconnect after the restart");
    assert!(
        third.fence().unwrap() > second_fence,
        "a fence went backwards after a restart"
    );

    // The stale holder: its lease is taken away, a new holder writes, then the stale one.
    let mut store = FencedStore::default();
    let stale_fence = third.fence().unwrap();
    let _: () = redis::cmd("DEL")
        .arg("fenced")
        .query(&mut server.conn())
        .unwrap();
    let fresh = lock().acquire().await.unwrap();
    assert!(store.write(fresh.fence().unwrap(), "fresh"));
    assert!(
        !store.write(stale_fence, "stale"),
        "the stale holder's write was accepted"
    );
    assert_eq!(store.value, Some("fresh"));
    assert_eq!(store.rejected, 1);
    fresh.release().await.unwrap();
    drop(third);
}
