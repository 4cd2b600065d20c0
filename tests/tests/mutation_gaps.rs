//! Tests for the gaps a mutation check found (issue 29): each fails on one plausible bug
//! that every other test let through, named in its doc comment and in `scripts/mutants`.
//!
//! ```text
//! cargo test -p lock-tests --test mutation_gaps
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LostCause, ReleaseOutcome};
use lock_tests::RedisServer;
use lock_tests::proxy::{Direction, FaultProxy};
use tokio::time::Instant;

/// The server's clock in microseconds.
fn server_us(conn: &mut redis::Connection) -> i64 {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    seconds * 1_000_000 + micros
}

/// Another owner's token put under a held key (an operator, a failover, a foreign client
/// after an expiry): the next renewal must find its token gone, tell the holder
/// `Lost(TokenGone)`, and leave the other owner's key and expiry alone.
///
/// Mutation caught: renew.lua checking only that the key exists (`EXISTS`), which extends
/// the other owner's key to our ttl and never tells our holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_another_owners_token_reports_the_loss_and_leaves_it_alone() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let ttl = Duration::from_millis(900);
    let guard = client.lock("taken-over").ttl(ttl).acquire().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("taken-over")
        .arg("other-owner")
        .arg("PX")
        .arg(600_000)
        .query(&mut server.conn())
        .unwrap();
    // Renewals come every ttl/3: the loss is seen within one of them (plus slack for a
    // loaded machine).
    let cause = tokio::time::timeout(ttl * 3, guard.lost())
        .await
        .expect("the holder was never told that another owner holds its key");
    assert_eq!(cause, LostCause::TokenGone);
    assert_eq!(server.get("taken-over").as_deref(), Some("other-owner"));
    let pttl = server.pttl("taken-over");
    assert!(
        pttl > 590_000,
        "the other owner's expiry was changed: {pttl} ms left of 600,000"
    );
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::NotOwner);
    assert_eq!(server.get("taken-over").as_deref(), Some("other-owner"));
}

/// Replies slowed down to 60 % of the ttl (the proxy delays server-to-client traffic): each
/// renewal reaches Redis at once, but its confirmation comes back late, so the lease the
/// holder may count on ends at the *send* time of the last confirmed renewal plus
/// `ttl − drift`. Here no renewal is confirmed in time after the first slow one, so the
/// holder is told lost within a renewal interval plus a lease of the stall's start.
///
/// Mutation caught: a renewal dated from its reply (watchdog.rs), which stretches each
/// late confirmation by the delay and keeps the holder believing forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_is_dated_from_its_send_not_its_late_reply() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client =
        LockClient::new(Config::single(proxy.url()).response_timeout(Duration::from_secs(10)))
            .unwrap();
    let ttl = Duration::from_millis(1000);
    let drift = ttl / 100 + Duration::from_millis(2);
    let guard = client
        .lock("late-replies")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let renewed = lock_tests::until(Duration::from_secs(3), Duration::from_millis(5), || {
        server.calls("pexpire") >= 1
    })
    .await;
    assert!(renewed.is_some(), "no renewal before the stall");
    proxy.set_delay(Direction::Down, ttl * 6 / 10);
    let stalled_at = Instant::now();
    // The last renewal confirmed is sent at most a renewal interval (ttl/3) after the
    // stall began; its lease ends ttl − drift after its send. Slack for a loaded machine.
    let bound = ttl / 3 + (ttl - drift) + Duration::from_millis(400);
    let cause = tokio::time::timeout(bound, guard.lost()).await;
    let told_after = stalled_at.elapsed();
    // Redis itself kept the lease all along (the requests were not delayed): the loss is
    // the holder's own clock running out, as it must.
    let held_in_redis = server.get("late-replies").is_some();
    proxy.set_delay(Direction::Down, Duration::ZERO);
    let cause = cause.unwrap_or_else(|_| {
        panic!(
            "replies {:?} late: the holder still believed in its lease {told_after:?} after \
             the stall began (bound {bound:?}: a renewal interval plus ttl − drift)",
            ttl * 6 / 10
        )
    });
    assert_eq!(cause, LostCause::RenewalFailed);
    assert!(held_in_redis, "the renewals never reached Redis");
    let _ = guard.release().await;
}

/// A fence counter far ahead of the server clock (after many fast grants, or a clock that
/// stepped back): the next fences still go up by one each, strictly.
///
/// Mutation caught: `max(last, server clock)` instead of `max(last + 1, server clock)` in
/// prelude.lua, which gives two holders the same fence once the counter is ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_stay_strictly_greater_when_the_counter_is_ahead_of_the_clock() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let mut conn = server.conn();
    let ahead = server_us(&mut conn) + 1_000_000_000_000; // about 11.6 days ahead
    let _: () = redis::cmd("SET")
        .arg("~lock/fence{fenced}")
        .arg(ahead)
        .query(&mut conn)
        .unwrap();
    let mut fences = Vec::new();
    for _ in 0..3 {
        let guard = client.lock("fenced").fencing(true).acquire().await.unwrap();
        fences.push(guard.fence().unwrap());
        guard.release().await.unwrap();
    }
    let ahead = u64::try_from(ahead).unwrap();
    assert_eq!(
        fences,
        [ahead + 1, ahead + 2, ahead + 3],
        "fences after a counter at {ahead}"
    );
}

/// A process whose tasks keep wanting a key passes it between them only for
/// `local_pass_time` while another process waits, however many passes `local_passes`
/// allows: the other process (here a second client, which is its own entry in the Redis
/// queue, with its own token and subscription) gets the lock soon.
///
/// Mutation caught: local passes bounded by count only (cohort.rs), which lets the busy
/// process keep the key for as long as its tasks keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_passes_end_after_the_pass_time_however_many_are_allowed() {
    let server = RedisServer::start();
    let pass_time = Duration::from_millis(50);
    let busy = LockClient::new(
        Config::single(server.url())
            .local_passes(1_000_000)
            .local_pass_time(pass_time),
    )
    .unwrap();
    let other = server.lock_client();
    let acquisitions = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let busy_for = Duration::from_secs(8);
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let (busy, acquisitions, stop) = (busy.clone(), acquisitions.clone(), stop.clone());
            tokio::spawn(async move {
                let until = Instant::now() + busy_for;
                for _ in 0..100_000 {
                    if stop.load(Ordering::SeqCst) || Instant::now() > until {
                        break;
                    }
                    let guard = busy
                        .lock("pass-time")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .unwrap();
                    acquisitions.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    let running = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        acquisitions.load(Ordering::SeqCst) > 20
    })
    .await;
    assert!(running.is_some(), "the busy process never got going");
    let started = Instant::now();
    let outsider = {
        let other = other.clone();
        tokio::spawn(async move {
            let guard = other
                .lock("pass-time")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            let waited = started.elapsed();
            guard.release().await.unwrap();
            waited
        })
    };
    server.until_queued("pass-time", 1).await;
    let waited = outsider.await.unwrap();
    let busy_left = !loops.iter().all(tokio::task::JoinHandle::is_finished);
    stop.store(true, Ordering::SeqCst);
    for task in loops {
        task.await.unwrap();
    }
    // The pass time plus a few round trips and a loaded machine's scheduling.
    let bound = pass_time + Duration::from_secs(2);
    assert!(
        waited < bound && busy_left,
        "the other process waited {waited:?} for a key passed around locally (pass time \
         {pass_time:?}, bound {bound:?}; the busy tasks were still running: {busy_left})"
    );
}

/// A waiter whose own retries come later than its queue lease (its replies are slowed
/// down, so it parks and asks again only every few seconds) keeps its place all the same:
/// a newcomer queues behind it. A lock's waiter is kept by its process's liveness key.
///
/// Mutation caught: the liveness key never refreshed by the watchdog
/// (watchdog/schedule.rs), which lets the place lapse between two retries and the
/// newcomer go first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_with_slow_retries_keeps_its_place_ahead_of_a_newcomer() {
    slow_waiter_keeps_its_place(false).await;
}

/// The same for a semaphore's waiter, whose place is kept by its process's liveness key
/// as a lock's waiter's is (the same mutation caught).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_with_slow_retries_keeps_its_place_ahead_of_a_newcomer() {
    slow_waiter_keeps_its_place(true).await;
}

async fn slow_waiter_keeps_its_place(semaphore: bool) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = server.lock_client();
    let newcomer = server.lock_client();
    let slow =
        LockClient::new(Config::single(proxy.url()).response_timeout(Duration::from_secs(15)))
            .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let queue_lease = Duration::from_millis(1000); // QUEUE_LEASE in scripts.rs
    let wait_in = |client: &LockClient, name: &'static str| {
        let (ttl, wait) = (Duration::from_secs(10), Duration::from_secs(40));
        let order = order.clone();
        let body = async move {
            order.lock().unwrap().push(name);
            Ok::<(), LockError>(())
        };
        let (lock, permits) = (
            client.lock("keep-place").ttl(ttl).wait(wait),
            client.semaphore("keep-place", 1).ttl(ttl).wait(wait),
        );
        tokio::spawn(async move {
            if semaphore {
                permits.run(body).await
            } else {
                lock.run(body).await
            }
        })
    };
    let (held, held_permit) = if semaphore {
        let permit = holder.semaphore("keep-place", 1).acquire().await.unwrap();
        (None, Some(permit))
    } else {
        (
            Some(holder.lock("keep-place").acquire().await.unwrap()),
            None,
        )
    };
    let slow_waiter = wait_in(&slow, "slow waiter");
    server.until_queued("keep-place", 1).await;
    // The keep-alive script is loaded by the first keep-alive (a third of a queue lease
    // after the place was made), before the slow-down: a load through the slowed link
    // would itself take round trips of 2.5 s. (A process that keeps no place alive never
    // loads it: the test goes on, and the newcomer overtakes.)
    let keepalive = redis::Script::new(concat!(
        include_str!("../../lock-runtime/src/lua/prelude.lua"),
        include_str!("../../lock-runtime/src/lua/keepalive.lua")
    ));
    let mut conn = server.conn();
    let loaded = lock_tests::until(Duration::from_secs(3), Duration::from_millis(5), || {
        let exists: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(keepalive.get_hash())
            .query(&mut conn)
            .unwrap();
        exists == [true]
    })
    .await;
    // Each retry's reply now comes 2.5 s late, so the next retry follows the last by more
    // than twice the queue lease.
    proxy.set_delay(Direction::Down, queue_lease * 5 / 2);
    // Watch for the slow waiter's place lapsing (its deadline passing) for longer than a
    // whole retry cycle; start the newcomer as soon as it does, or after that.
    let lapsed = lock_tests::until(Duration::from_secs(4), Duration::from_millis(5), || {
        let now_ms = server_us(&mut conn) / 1000;
        let late: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg("~lock/deadlines{keep-place}")
            .arg("-inf")
            .arg(now_ms)
            .query(&mut conn)
            .unwrap();
        !late.is_empty()
    })
    .await;
    let newcomer_waiter = wait_in(&newcomer, "newcomer");
    server.until_queued("keep-place", 2).await;
    // Back to full speed before the release: a grant is confirmed by the waiter's next try,
    // which a reply still held back would keep it from sending within the grant's window.
    proxy.set_delay(Direction::Down, Duration::ZERO);
    let drained = lock_tests::until(Duration::from_secs(10), Duration::from_millis(5), || {
        proxy.held_back() == 0
    })
    .await;
    assert!(
        drained.is_some(),
        "the proxy never passed the delayed replies on"
    );
    if let Some(held) = held {
        held.release().await.unwrap();
    }
    if let Some(permit) = held_permit {
        permit.release().await.unwrap();
    }
    for task in [slow_waiter, newcomer_waiter] {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("a waiter never got the lock")
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["slow waiter", "newcomer"],
        "the newcomer overtook a waiter whose place lapsed between its retries (lapsed \
         {lapsed:?} after the slow-down began; keep-alive script loaded: {})",
        loaded.is_some()
    );
    assert_eq!(lapsed, None, "the slow waiter's place lapsed");
}

/// A waiter that gives up (its wait ran out) while another owner holds the key leaves the
/// queue and nothing else: the holder's key and lease stay.
///
/// Mutation caught: leave.lua passing the lock on whatever the key holds (its owner check
/// dropped), which deletes or hands over the holder's key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_never_passes_on_another_holders_lock() {
    let server = RedisServer::start();
    let holder = server.lock_client();
    let waiter = server.lock_client();
    let guard = holder.lock("left").acquire().await.unwrap();
    let err = waiter
        .lock("left")
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert_eq!(server.queued("left"), 0, "the waiter did not leave");
    assert_eq!(
        server.get("left").as_deref(),
        Some(guard.token()),
        "the leaving waiter took the holder's key"
    );
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
}

/// An acquisition whose reply comes late (but within the lease) is valid from when its
/// command was sent: the lease left is at most `ttl − drift − delay`, and a lease without
/// watchdog is over by then.
///
/// Mutation caught: an acquisition dated from its reply (redis_queue.rs), which believes
/// in the lease for the reply's delay longer than Redis keeps the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_is_dated_from_its_send_not_its_late_reply() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client =
        LockClient::new(Config::single(proxy.url()).response_timeout(Duration::from_secs(10)))
            .unwrap();
    // The scripts are loaded and the connection is up before the slow-down.
    client
        .lock("late-grant")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let ttl = Duration::from_secs(2);
    let drift = ttl / 100 + Duration::from_millis(2);
    let delay = Duration::from_millis(500);
    proxy.set_delay(Direction::Down, delay);
    let sent = Instant::now();
    let guard = client
        .lock("late-grant")
        .ttl(ttl)
        .watchdog(false)
        .acquire()
        .await
        .unwrap();
    proxy.set_delay(Direction::Down, Duration::ZERO);
    let left = guard.remaining();
    // Whatever the machine's load, the reply came no sooner than `delay` after the send.
    assert!(
        left <= ttl - drift - delay,
        "{left:?} of the lease left after a reply {delay:?} late (at most {:?})",
        ttl - drift - delay
    );
    let cause = tokio::time::timeout(ttl, guard.lost()).await;
    let over_after = sent.elapsed();
    assert_eq!(cause, Ok(LostCause::Expired));
    assert!(
        over_after < ttl - drift + Duration::from_millis(300),
        "the lease ended {over_after:?} after its send (ttl {ttl:?})"
    );
}

/// While another process waits, a process passes the lock between its tasks at most
/// `local_passes` times, however long `local_pass_time` allows.
///
/// Mutation caught: local passes bounded by time only (cohort.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_passes_end_after_the_pass_count_however_long_is_allowed() {
    let server = RedisServer::start();
    let busy = LockClient::new(
        Config::single(server.url())
            .local_passes(3)
            .local_pass_time(Duration::from_secs(60)),
    )
    .unwrap();
    let other = server.lock_client();
    let acquisitions = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let (busy, acquisitions, stop) = (busy.clone(), acquisitions.clone(), stop.clone());
            tokio::spawn(async move {
                let until = Instant::now() + Duration::from_secs(10);
                for _ in 0..100_000 {
                    if stop.load(Ordering::SeqCst) || Instant::now() > until {
                        break;
                    }
                    let guard = busy
                        .lock("pass-count")
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .unwrap();
                    acquisitions.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    let running = lock_tests::until(Duration::from_secs(5), Duration::from_millis(5), || {
        acquisitions.load(Ordering::SeqCst) > 10
    })
    .await;
    assert!(running.is_some(), "the busy process never got going");
    let outsider = {
        let (other, acquisitions) = (other.clone(), acquisitions.clone());
        tokio::spawn(async move {
            let guard = other
                .lock("pass-count")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            let at = acquisitions.load(Ordering::SeqCst);
            guard.release().await.unwrap();
            at
        })
    };
    server.until_queued("pass-count", 1).await;
    let queued_at = acquisitions.load(Ordering::SeqCst);
    let acquired_at = outsider.await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for task in loops {
        task.await.unwrap();
    }
    // The holder when the outsider queued, then at most 3 passes (one more for a holder
    // that began between the outsider's queueing and the count above).
    // The outsider may be granted before the count above was read (a busy machine): then
    // no local acquisition came between.
    let passes = acquired_at.saturating_sub(queued_at);
    assert!(
        passes <= 5,
        "{passes} local acquisitions while another process waited (bound: 3 passes)"
    );
}

/// Reentrancy belongs to a task *and* a client: inside a body holding a key through one
/// client, the same key through another client (another owner, as another process would
/// be) is busy, not reentrant.
///
/// Mutation caught: the reentrancy lookup ignoring the client (context.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_in_the_same_task_is_another_owner() {
    let server = RedisServer::start();
    let first = server.lock_client();
    let second = server.lock_client();
    first
        .lock("owners")
        .run(async {
            let attempt = second.lock("owners").wait(Duration::ZERO).acquire().await;
            assert!(
                matches!(attempt, Err(LockError::Busy { .. })),
                "another client's lock counted as this task's: {attempt:?}"
            );
            Ok::<(), LockError>(())
        })
        .await
        .unwrap();
}

/// A key held by an outer body stays reentrant inside a nested body holding another key.
///
/// Mutation caught: the reentrancy lookup looking only at the innermost lock (context.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_around_another_is_still_reentrant() {
    let server = RedisServer::start();
    let client = server.lock_client();
    client
        .lock("around")
        .run(async {
            client
                .lock("inside")
                .run(async {
                    let again = client.lock("around").wait(Duration::ZERO).acquire().await;
                    let again = again.expect("the outer key was not reentrant in a nested body");
                    assert!(again.is_reentrant());
                    again.release().await?;
                    Ok::<(), LockError>(())
                })
                .await
        })
        .await
        .unwrap();
}

/// The drift margin end to end: a lease is counted on until `send + ttl − drift` (1 % of
/// the ttl plus 2 ms), never to the full ttl, however fast the reply. With a 100 s ttl the
/// margin (1.002 s) dwarfs any round trip, so the check is exact.
///
/// Mutation caught: no drift margin (lease.rs), which counts on the lease up to the
/// instant Redis may expire it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_counted_on_only_until_its_ttl_less_the_drift() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let ttl = Duration::from_secs(100);
    let drift = ttl / 100 + Duration::from_millis(2);
    for watchdog in [false, true] {
        let guard = client
            .lock("drift")
            .ttl(ttl)
            .watchdog(watchdog)
            .acquire()
            .await
            .unwrap();
        let left = guard.remaining();
        assert!(
            left <= ttl - drift && left > ttl - drift - Duration::from_secs(5),
            "{left:?} of a {ttl:?} lease left just after acquiring it (watchdog {watchdog}; \
             at most ttl − drift = {:?})",
            ttl - drift
        );
        guard.release().await.unwrap();
    }
}
