//! The fault suite: what the lock survives, each row measured with the checkers of
//! `lock_tests::checkers` against real redis-server processes (and a loopback TCP fault
//! proxy), and each printing its figure on a line `FIGURE <row>: ...`.
//!
//! ```text
//! cargo test -p lock-tests --test faults -- --nocapture --test-threads=1 | grep FIGURE
//! ```
//!
//! The rows run one at a time even under parallel test threads (they measure latencies;
//! see [`row`]). `FAULTS_FULL=1` runs the slow variants: the `SCRIPT FLUSH` row for a full
//! minute instead of 15 s.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{Config, LockClient, LockError, LostCause, ReleaseOutcome};
use lock_tests::checkers::{FencedStore, HoldLog, LossClock, OrphanCheck, ms, now_us};
use lock_tests::proxy::{Direction, FaultProxy};
use lock_tests::{RedisServer, child, free_port, script_stat_on};
use tokio::time::Instant;

/// Whether the slow variants run (`FAULTS_FULL=1`).
fn full() -> bool {
    std::env::var("FAULTS_FULL").is_ok_and(|value| value == "1")
}

fn figure(row: &str, text: &str) {
    println!("FIGURE {row}: {text}");
}

/// Runs one row on a fresh two-worker runtime, one row at a time in this binary: the rows
/// measure latencies, and two of them at once on two cores would measure each other.
fn row<F: std::future::Future>(future: F) -> F::Output {
    lock_tests::one_at_a_time(future)
}

fn client_for(url: &str, connect: Duration, response: Duration) -> LockClient {
    LockClient::new(
        Config::single(url)
            .connect_timeout(connect)
            .response_timeout(response),
    )
    .unwrap()
}

/// Polls `condition` (a server-side state with no event to wait on) every 2 ms, for at
/// most `bound`; how long it took, or `None`.
async fn until(bound: Duration, condition: impl FnMut() -> bool) -> Option<Duration> {
    lock_tests::until(bound, Duration::from_millis(2), condition).await
}

fn del(server: &RedisServer, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
}

/// Script calls that executed (NOSCRIPT answers excluded).
fn scripts_run(server: &RedisServer) -> u64 {
    server.script_calls() - server.failed_script_calls() + server.calls("eval")
}

/// Loads the scripts (acquire, release) into the server's cache through `client`.
async fn warm(client: &LockClient, key: &str) {
    client
        .lock(key)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// Row: the holder process paused with SIGSTOP past its ttl.

const PAUSE_TTL: Duration = Duration::from_secs(1);

/// The paused holder: runs only in the child process started by the row below.
#[test]
fn paused_holder_worker() {
    let Some(role) = child::role() else { return };
    assert_eq!(role, "paused-holder");
    let url = std::env::var("LOCK_TESTS_URL").unwrap();
    let store_url = std::env::var("LOCK_TESTS_STORE").unwrap();
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async move {
        let client = LockClient::new(Config::single(url)).unwrap();
        let store = FencedStore::new(&store_url, "store");
        let guard = client
            .lock("paused")
            .ttl(PAUSE_TTL)
            .fencing(true)
            .wait(Duration::ZERO)
            .acquire()
            .await
            .unwrap();
        let start = now_us();
        let fence = guard.fence().unwrap();
        store.grant(fence).await;
        assert!(store.write(fence).await, "the first write was refused");
        let work = async {
            println!("HOLDING {fence}");
            // The parent stops this process here, for longer than the ttl. On waking, a
            // holder that does not check its lease writes at once: the classic pause.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let accepted = store.write(fence).await;
            println!("STALE-WRITE {}", u8::from(accepted));
        };
        let told = async {
            let cause = tokio::time::timeout(Duration::from_secs(10), guard.lost())
                .await
                .expect("never told Lost");
            let at = now_us();
            println!("LOST {cause:?} {at}");
            at
        };
        let ((), lost_at) = tokio::join!(work, told);
        println!("HOLD paused a {start} {lost_at}");
        let outcome = guard.release().await.unwrap();
        println!("RELEASE {outcome:?}");
    });
}

/// Lines of a child's stdout, as they come.
fn stream_lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    child::stream_lines(child.stdout.take().unwrap())
}

#[test]
fn sigstop_past_the_ttl_the_paused_holder_is_told_lost_and_its_writes_are_fenced() {
    if child::role().is_some() {
        return;
    }
    row(async {
        let lock_server = RedisServer::start();
        let store_server = RedisServer::start();
        let store = FencedStore::new(&store_server.url(), "store");
        // The other holder renews nothing (long ttl, no watchdog), so every script the lock
        // server runs after SIGCONT comes from the paused process.
        let other = lock_server.lock_client();
        warm(&other, "paused").await;
        let mut worker = child::spawn(
            "paused_holder_worker",
            "paused-holder",
            &[
                ("LOCK_TESTS_URL", lock_server.url()),
                ("LOCK_TESTS_STORE", store_server.url()),
            ],
        );
        let pid = worker.id();
        let lines = stream_lines(&mut worker);
        let paused_fence: u64 = child::expect_line(&lines, "HOLDING ", Duration::from_secs(20))
            .parse()
            .unwrap();
        child::pause(pid);
        let stopped = Instant::now();
        let guard = other
            .lock("paused")
            .ttl(Duration::from_secs(20))
            .watchdog(false)
            .fencing(true)
            .wait(Duration::from_secs(10))
            .acquire()
            .await;
        let taken_over_after = stopped.elapsed();
        let guard = match guard {
            Ok(guard) => guard,
            Err(err) => {
                child::signal(pid, "CONT");
                panic!("the other process could not take the lock over: {err:?}");
            }
        };
        let other_start = now_us();
        let other_fence = guard.fence().unwrap();
        store.grant(other_fence).await;
        assert!(store.write(other_fence).await);
        // Past the ttl for sure, whatever was left of the lease at SIGSTOP.
        tokio::time::sleep_until(stopped + PAUSE_TTL + Duration::from_millis(200)).await;
        let before = scripts_run(&lock_server);
        let paused_for = stopped.elapsed();
        let resumed_us = now_us();
        child::signal(pid, "CONT");
        let lost = child::expect_line(&lines, "LOST ", Duration::from_secs(10));
        let stale = child::expect_line(&lines, "STALE-WRITE ", Duration::from_secs(10));
        let hold = child::expect_line(&lines, "HOLD ", Duration::from_secs(10));
        let release = child::expect_line(&lines, "RELEASE ", Duration::from_secs(10));
        let status = worker.wait().unwrap();
        assert!(status.success(), "the paused holder failed: {status:?}");
        let scripts_after_resume = scripts_run(&lock_server) - before;

        let (cause, lost_us) = lost.split_once(' ').unwrap();
        let lost_us: u64 = lost_us.parse().unwrap();
        let told_after_resume = Duration::from_micros(lost_us.saturating_sub(resumed_us));
        let holds = HoldLog::new();
        let (key, paused_hold) = lock_tests::checkers::Hold::parse_line(&hold).unwrap();
        holds.record(
            &key,
            &paused_hold.holder,
            paused_hold.start_us,
            paused_hold.end_us,
        );
        holds.record("paused", "b", other_start, now_us());
        let overlaps = holds.overlaps();
        let stats = store.stats().await;

        assert!(paused_for > PAUSE_TTL, "paused only {paused_for:?}");
        assert!(other_fence > paused_fence, "fences went backwards");
        assert!(
            cause == "RenewalFailed" || cause == "TokenGone",
            "told {cause}"
        );
        assert!(
            told_after_resume < Duration::from_millis(500),
            "told Lost only {told_after_resume:?} after SIGCONT"
        );
        assert_eq!(release, "NotOwner", "the paused holder's release");
        assert_eq!(
            lock_server.get("paused").as_deref(),
            Some(guard.token()),
            "the paused holder touched the new holder's key"
        );
        assert_eq!(
            scripts_after_resume, 1,
            "the paused holder sent more than its one (refused) release: a renewal?"
        );
        assert_eq!(stale, "0", "the paused holder's stale write was accepted");
        assert_eq!(stats.stale_accepted, 0);
        assert_eq!(stats.stale_rejected, 1);
        // No lease lock prevents this overlap of beliefs; the checker must see it, and the
        // fenced store is what makes it harmless.
        assert_eq!(overlaps.len(), 1, "{overlaps:?}");
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        figure(
            "sigstop",
            &format!(
                "ttl {}, paused {}; taken over {} after SIGSTOP; told Lost ({cause}) {} after \
                 SIGCONT; scripts from the paused holder after SIGCONT: {scripts_after_resume} \
                 (its release: {release}); new holder's key intact; stale writes accepted {} / \
                 rejected {}; believed-held overlap seen by the checker: {} ms",
                ms(PAUSE_TTL),
                ms(paused_for),
                ms(taken_over_after),
                ms(told_after_resume),
                stats.stale_accepted,
                stats.stale_rejected,
                overlaps[0].3 / 1000
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: Redis kill -9 during a hold, restarted without persistence.

#[test]
fn redis_kill9_during_a_hold_and_an_empty_restart() {
    row(async {
        let mut server = RedisServer::start();
        let client = client_for(
            &server.url(),
            Duration::from_millis(300),
            Duration::from_millis(500),
        );
        let ttl = Duration::from_secs(1);
        let lock = || {
            client
                .lock("crash")
                .ttl(ttl)
                .fencing(true)
                .wait(Duration::ZERO)
        };
        let guard = lock().acquire().await.unwrap();
        let first_fence = guard.fence().unwrap();
        // Let a renewal land, then crash: the validity point is the last renewal's + ttl.
        let renewed = until(Duration::from_secs(3), || server.calls("pexpire") >= 1).await;
        assert!(renewed.is_some(), "no renewal before the crash");
        let left = Duration::from_millis(u64::try_from(server.pttl("crash")).unwrap());
        tokio::task::block_in_place(|| server.kill9());
        let clock = LossClock::start();
        let validity_point = clock.lost_at() + left;
        // Down for a while, then back empty (no persistence).
        tokio::time::sleep(Duration::from_millis(300)).await;
        tokio::task::block_in_place(|| server.restart());
        let restarted = Instant::now();
        let told = clock
            .until(guard.lost(), ttl + Duration::from_secs(2))
            .await
            .expect("never told Lost");
        let told_at = clock.lost_at() + told;
        let cause = guard.lost_cause().unwrap();
        let past_validity = told_at.saturating_duration_since(validity_point);
        assert!(
            past_validity < Duration::from_millis(50),
            "told Lost {past_validity:?} after the validity point"
        );
        // The client reconnects by itself: the next acquire works.
        let mut attempts = 0;
        let next = loop {
            attempts += 1;
            match lock().acquire().await {
                Ok(next) => break next,
                Err(LockError::Backend { .. }) if attempts < 100 => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(err) => panic!("no acquire after the restart: {err:?}"),
            }
        };
        let reacquired_after = restarted.elapsed();
        let next_fence = next.fence().unwrap();
        assert!(next_fence > first_fence, "a fence went backwards");
        assert_eq!(
            guard.release().await.unwrap(),
            ReleaseOutcome::NotOwner,
            "the lost guard's release"
        );
        assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
        figure(
            "kill9-restart-empty",
            &format!(
                "ttl {}; told Lost ({cause:?}) {} after kill -9 (validity point {} after it; \
                 {} before it); next acquire after the restart: attempt {attempts}, {} after \
                 the server was back; fence {} -> {} (increasing)",
                ms(ttl),
                ms(told),
                ms(left),
                ms(validity_point.saturating_duration_since(told_at)),
                ms(reacquired_after),
                first_fence,
                next_fence
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: Redis restarted with AOF (appendfsync always).

#[test]
fn redis_restart_with_aof_always_keeps_the_holder_renewing() {
    row(async {
        let mut server =
            RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let fast =
            |url: &str| client_for(url, Duration::from_millis(300), Duration::from_millis(500));
        let holder = fast(&server.url());
        let contender = fast(&server.url());
        let ttl = Duration::from_secs(2);
        let guard = holder.lock("aof").ttl(ttl).acquire().await.unwrap();
        warm(&contender, "aof-warm").await;
        let restarting = Instant::now();
        tokio::task::block_in_place(|| server.restart());
        let downtime = restarting.elapsed();
        assert_eq!(
            server.get("aof").as_deref(),
            Some(guard.token()),
            "the AOF lost the lock"
        );
        // For twice the ttl after the restart: nobody else gets the lock, and the lease is
        // still there at the end, so renewals landed on the restarted server.
        let (mut granted, mut busy, mut backend) = (0, 0, 0);
        let watching = Instant::now();
        while watching.elapsed() < ttl * 2 {
            match contender
                .lock("aof")
                .ttl(ttl)
                .wait(Duration::ZERO)
                .acquire()
                .await
            {
                Ok(stolen) => {
                    granted += 1;
                    drop(stolen);
                }
                Err(LockError::Busy { .. }) => busy += 1,
                Err(LockError::Backend { .. }) => backend += 1,
                Err(err) => panic!("{err:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let noscript = server.failed_script_calls();
        let renewals = server.calls("pexpire");
        assert_eq!(granted, 0, "a second holder was granted the lock");
        assert!(busy > 0);
        assert!(!guard.is_lost(), "lost: {:?}", guard.lost_cause());
        assert!(
            renewals >= 3,
            "only {renewals} renewals in 2 ttls after the restart"
        );
        assert!(noscript >= 1, "the restarted server never said NOSCRIPT");
        assert_eq!(server.get("aof").as_deref(), Some(guard.token()));
        assert_eq!(guard.release().await.unwrap(), ReleaseOutcome::Released);
        figure(
            "aof-restart",
            &format!(
                "ttl {}; restart took {}; in 2 ttls after it: {renewals} renewals landed, \
                 {noscript} NOSCRIPT answers (scripts reloaded), lease never lost; contender \
                 tries: {busy} busy, {backend} backend errors, {granted} granted (no double grant)",
                ms(ttl),
                ms(downtime)
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: a latency spike through the proxy larger than the ttl.

#[test]
fn latency_spike_during_acquire_never_starts_a_body_on_a_late_grant() {
    row(async {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = client_for(&proxy.url(), Duration::from_secs(1), Duration::from_secs(5));
        let ttl = Duration::from_millis(500);
        let spike = Duration::from_millis(1000);
        warm(&client, "spike").await;
        let bodies = Arc::new(AtomicUsize::new(0));
        let body = |bodies: Arc<AtomicUsize>| async move {
            bodies.fetch_add(1, Ordering::SeqCst);
            Ok::<(), LockError>(())
        };

        // Try once: the only grant comes back late, so nothing runs.
        server.reset_stats();
        proxy.set_delay(Direction::Down, spike);
        let once = client
            .lock("spike")
            .ttl(ttl)
            .wait(Duration::ZERO)
            .run(body(bodies.clone()))
            .await;
        proxy.set_delay(Direction::Down, Duration::ZERO);
        assert!(
            matches!(once, Err(LockError::Timeout { .. })),
            "a late grant gave {once:?}"
        );
        assert_eq!(
            bodies.load(Ordering::SeqCst),
            0,
            "a body ran on a late grant"
        );
        let late_grants_once = server.calls("set");
        assert_eq!(late_grants_once, 1);
        assert!(server.get("spike").is_none(), "the late grant was kept");

        // Waiting: the first grant's reply is late: it is given back, and a fresh grant
        // starts the body once.
        server.reset_stats();
        proxy.set_delay(Direction::Down, spike);
        let waiting = {
            let client = client.clone();
            let bodies = bodies.clone();
            tokio::spawn(async move {
                client
                    .lock("spike")
                    .ttl(ttl)
                    .wait(Duration::from_secs(5))
                    .run(body(bodies))
                    .await
            })
        };
        // The first grant lands; its late reply makes the client give it back (the key goes);
        // only then does the spike end, so the fresh grant's reply is on time.
        let landed = until(Duration::from_secs(5), || server.get("spike").is_some()).await;
        let given_back = until(spike * 3, || server.get("spike").is_none()).await;
        proxy.set_delay(Direction::Down, Duration::ZERO);
        assert!(landed.is_some(), "the first grant never reached Redis");
        assert!(given_back.is_some(), "the late grant was never given back");
        waiting.await.unwrap().unwrap();
        let grants = server.calls("set");
        assert_eq!(bodies.load(Ordering::SeqCst), 1);
        assert_eq!(grants, 2, "expected the late grant and a fresh one");
        let gone = until(ttl, || server.get("spike").is_none()).await;
        assert!(gone.is_some(), "a key was left behind");
        figure(
            "latency-acquire",
            &format!(
                "ttl {}, reply delay {}: try-once: {late_grants_once} late grant, 0 bodies, \
                 Timeout, key given back; waiting: {grants} grants (1 late, given back), 1 body \
                 on the fresh grant",
                ms(ttl),
                ms(spike)
            ),
        );
    });
}

/// Records when the value is dropped (a cancelled body drops its locals).
struct DropClock(Option<tokio::sync::oneshot::Sender<Instant>>);

impl Drop for DropClock {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            let _ = dropped.send(Instant::now());
        }
    }
}

#[test]
fn latency_spike_during_a_hold_is_lost_by_the_validity_point() {
    row(async {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = client_for(&proxy.url(), Duration::from_secs(1), Duration::from_secs(5));
        let ttl = Duration::from_secs(1);
        let spike = Duration::from_secs(3);
        let (dropped_tx, dropped) = tokio::sync::oneshot::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
        let task = {
            let client = client.clone();
            let finished = finished.clone();
            tokio::spawn(async move {
                let result = client
                    .lock("held-spike")
                    .ttl(ttl)
                    .run(async move {
                        let _clock = DropClock(Some(dropped_tx));
                        inside_tx.send(()).unwrap();
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        finished.store(true, Ordering::SeqCst);
                        Ok::<(), LockError>(())
                    })
                    .await;
                (result, Instant::now())
            })
        };
        inside_rx.await.unwrap();
        let renewed = until(Duration::from_secs(3), || server.calls("pexpire") >= 1).await;
        assert!(renewed.is_some(), "no renewal before the spike");
        proxy.set_delay(Direction::Down, spike);
        let spike_at = Instant::now();
        // What the server has, read around the proxy: the last renewal the holder saw
        // confirmed sets the validity point.
        let left = Duration::from_millis(u64::try_from(server.pttl("held-spike")).unwrap());
        let validity_point = spike_at + left.saturating_sub(ttl / 100 + Duration::from_millis(2));
        // The body is dropped when the loss is noticed; then the spike ends, so the run's
        // release gets through.
        let told_at = tokio::time::timeout(Duration::from_secs(10), dropped)
            .await
            .expect("the body was never cancelled")
            .unwrap();
        proxy.set_delay(Direction::Down, Duration::ZERO);
        let (result, returned_at) = tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .expect("the run never ended")
            .unwrap();
        // The body is dropped before its lock is given back, not after: the release's first
        // try meets the held-back replies for its whole bound (50 ms, a timer: never less),
        // and the run returns only then. A body kept until after the release (a run path
        // that dropped it at its end) was cancelled 50 ms after the validity point.
        let before_return = returned_at.saturating_duration_since(told_at);
        assert!(
            before_return >= Duration::from_millis(25),
            "the body was dropped {before_return:?} before the run returned: after the release"
        );
        let cause = match result {
            Err(LockError::Lost { cause, .. }) => cause,
            other => panic!("expected Lost, got {other:?}"),
        };
        assert!(!finished.load(Ordering::SeqCst), "the body ran on");
        let late = told_at.saturating_duration_since(validity_point);
        let early = validity_point.saturating_duration_since(told_at);
        // Told by the clock: before any reply could have come (the proxy holds every reply
        // back for the whole spike) and so before a response timeout could end a renewal.
        // How soon after the validity point is a figure, not a bound: a busy machine wakes
        // the body's task late (CI beside two busy loops saw 51 ms).
        assert!(
            told_at < spike_at + spike,
            "the body was cancelled {:?} after the spike began, {late:?} after the validity \
             point: not by the clock",
            told_at - spike_at
        );
        assert_eq!(cause, LostCause::RenewalFailed);
        assert_eq!(client.held_leases(), 0);
        figure(
            "latency-hold",
            &format!(
                "ttl {}, reply delay {}: body cancelled with Lost({cause:?}) {} after the spike \
                 began; vs the validity point: {} late, {} early",
                ms(ttl),
                ms(spike),
                ms(told_at - spike_at),
                ms(late),
                ms(early)
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: connection reset mid-acquire and mid-release.

#[test]
fn connection_reset_mid_acquire_and_mid_release_leaks_nothing() {
    row(async {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = client_for(&proxy.url(), Duration::from_secs(1), Duration::from_secs(5));
        let other = server.lock_client();
        let ttl = Duration::from_secs(2);
        warm(&client, "reset").await;

        // Mid-acquire: the grant executes, its reply is lost, the connection is reset.
        let ran = Arc::new(AtomicBool::new(false));
        proxy.set_blackhole(Direction::Down, true);
        let acquiring = {
            let client = client.clone();
            let ran = ran.clone();
            tokio::spawn(async move {
                client
                    .lock("reset")
                    .ttl(ttl)
                    .wait(Duration::from_secs(3))
                    .run(async move {
                        ran.store(true, Ordering::SeqCst);
                        Ok::<(), LockError>(())
                    })
                    .await
            })
        };
        let landed = until(Duration::from_secs(5), || server.get("reset").is_some()).await;
        proxy.reset_all();
        let reset_at = Instant::now();
        // The client reconnects at once, into the blackhole: that first reconnection fails
        // (by the connect timeout); the clean-up must try again.
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.set_blackhole(Direction::Down, false);
        assert!(landed.is_some(), "the grant never reached Redis");
        let acquired = acquiring.await.unwrap();
        let gone_after = until(ttl * 2, || server.get("reset").is_none())
            .await
            .map(|_| reset_at.elapsed())
            .expect("the key outlived twice its ttl");
        assert!(
            gone_after < ttl,
            "the lost grant leaked {gone_after:?} (ttl {ttl:?})"
        );
        assert_eq!(acquired.is_ok(), ran.load(Ordering::SeqCst));
        let acquire_outcome = match &acquired {
            Ok(()) => "body ran once".to_owned(),
            Err(LockError::Backend { .. }) => "Backend error, body not run".to_owned(),
            Err(err) => panic!("{err:?}"),
        };

        // Mid-release: the release executes, its reply is lost, another holder takes the
        // key, the connection is reset. The retried release must leave that key alone, and
        // it counts as the release it was: its own first try deleted the key (no loss is
        // reported for a hold that ended by its release).
        let guard = client.lock("reset").ttl(ttl).acquire().await.unwrap();
        proxy.set_blackhole(Direction::Down, true);
        let releasing = tokio::spawn(guard.release());
        let released = until(Duration::from_secs(5), || server.get("reset").is_none()).await;
        assert!(released.is_some(), "the release never reached Redis");
        let next = other
            .lock("reset")
            .ttl(ttl)
            .wait(Duration::ZERO)
            .acquire()
            .await
            .unwrap();
        server.reset_stats();
        proxy.reset_all();
        proxy.set_blackhole(Direction::Down, false);
        let outcome = tokio::time::timeout(Duration::from_secs(10), releasing)
            .await
            .expect("the release hung")
            .unwrap();
        let retries = server.script_calls();
        assert_eq!(
            server.get("reset").as_deref(),
            Some(next.token()),
            "a retried release deleted another holder's key"
        );
        assert!(!next.is_lost());
        let release_outcome = format!("{outcome:?}");
        assert!(
            matches!(
                outcome,
                Ok(ReleaseOutcome::Released)
                    | Err(LockError::ReleaseGaveUp { .. } | LockError::Backend { .. })
            ),
            "{release_outcome}"
        );
        assert_eq!(next.release().await.unwrap(), ReleaseOutcome::Released);
        figure(
            "connection-reset",
            &format!(
                "ttl {}; mid-acquire (the first reconnection fails: 1 s connect timeout): \
                 {acquire_outcome}, key gone {} after the reset; \
                 mid-release: retried {retries}x after the reset -> {release_outcome}, the next \
                 holder's key intact",
                ms(ttl),
                ms(gone_after)
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: SCRIPT FLUSH and FUNCTION FLUSH every ttl/5 during a busy period.

#[test]
fn script_flush_every_fifth_of_the_ttl_during_a_busy_period() {
    row(async {
        let busy_for = if full() {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(15)
        };
        let server = RedisServer::start();
        let client = server.lock_client();
        let ttl = Duration::from_secs(1);
        let holds = Arc::new(HoldLog::new());
        let failures = Arc::new(Mutex::new(Vec::<String>::new()));
        let (acquired, long_holds) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let deadline = Instant::now() + busy_for;
        let mut tasks = Vec::new();
        // Short holders: 8 tasks on 4 keys.
        for worker in 0..8 {
            let (client, holds, failures, acquired) = (
                client.clone(),
                holds.clone(),
                failures.clone(),
                acquired.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let key = format!("busy-{}", worker % 4);
                while Instant::now() < deadline {
                    let holder = format!("w{worker}");
                    let result = client
                        .lock(&key)
                        .ttl(ttl)
                        .wait(Duration::from_secs(5))
                        .run(async {
                            let start = now_us();
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            holds.record(&key, &holder, start, now_us());
                            Ok::<(), LockError>(())
                        })
                        .await;
                    match result {
                        Ok(()) => {
                            acquired.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(err) => failures.lock().unwrap().push(format!("{err}")),
                    }
                }
            }));
        }
        // Long holders: leases that must be renewed through the flushes.
        for worker in 0..2 {
            let (client, failures, long_holds) =
                (client.clone(), failures.clone(), long_holds.clone());
            tasks.push(tokio::spawn(async move {
                let key = format!("long-{worker}");
                while Instant::now() + ttl * 3 < deadline {
                    let guard = match client.lock(&key).ttl(ttl).acquire().await {
                        Ok(guard) => guard,
                        Err(err) => {
                            failures.lock().unwrap().push(format!("{err}"));
                            continue;
                        }
                    };
                    tokio::time::sleep(ttl * 3).await;
                    if guard.is_lost() {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("{key} lost: {:?}", guard.lost_cause()));
                    }
                    match guard.release().await {
                        Ok(ReleaseOutcome::Released) => {
                            long_holds.fetch_add(1, Ordering::Relaxed);
                        }
                        other => failures.lock().unwrap().push(format!("{key}: {other:?}")),
                    }
                }
            }));
        }
        let mut flushes = 0u64;
        let mut flusher = server
            .redis()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut tick = tokio::time::interval(ttl / 5);
        while Instant::now() < deadline {
            tick.tick().await;
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut flusher)
                .await
                .unwrap();
            let _: () = redis::cmd("FUNCTION")
                .arg("FLUSH")
                .query_async(&mut flusher)
                .await
                .unwrap();
            flushes += 1;
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("a worker hung")
                .unwrap();
        }
        let failures = failures.lock().unwrap().clone();
        let overlaps = holds.overlaps();
        let noscript = server.failed_script_calls();
        let acquired = acquired.load(Ordering::Relaxed);
        let long_holds = long_holds.load(Ordering::Relaxed);
        assert!(failures.is_empty(), "failures: {failures:?}");
        assert!(overlaps.is_empty(), "overlaps: {overlaps:?}");
        assert!(
            acquired > 100 && long_holds >= 4,
            "{acquired} / {long_holds}"
        );
        assert!(noscript > flushes / 2, "only {noscript} NOSCRIPT answers");
        assert_eq!(client.held_leases(), 0);
        figure(
            "script-flush",
            &format!(
                "{} s busy ({}), SCRIPT FLUSH every {} ({flushes} flushes): \
                 {acquired} short holds + {long_holds} holds of 3 ttl renewed through the \
                 flushes; {noscript} NOSCRIPT answers reloaded; failures {}; overlaps {}",
                busy_for.as_secs(),
                if full() {
                    "FAULTS_FULL=1"
                } else {
                    "60 s with FAULTS_FULL=1"
                },
                ms(ttl / 5),
                failures.len(),
                overlaps.len()
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: CLIENT PAUSE longer than the ttl.

#[test]
fn client_pause_longer_than_the_ttl_starts_no_body_on_an_expired_lease() {
    row(async {
        // hz 100: the server ends the pause within 10 ms of its time (at the default hz 10,
        // within 100 ms), which keeps every acquire's age clear of the validity boundary.
        let server = RedisServer::start_with(&["--hz", "100"]);
        let client = client_for(
            &server.url(),
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        let ttl = Duration::from_millis(500);
        let pause = Duration::from_millis(1500);
        warm(&client, "warm").await;
        let holder = client
            .lock("pause-holder")
            .ttl(ttl)
            .acquire()
            .await
            .unwrap();
        let renewed = until(Duration::from_secs(3), || server.calls("pexpire") >= 1).await;
        assert!(renewed.is_some(), "no renewal before the pause");
        // The holder's validity point, from the lease the server has (its last renewal).
        let read_at = Instant::now();
        let left = Duration::from_millis(u64::try_from(server.pttl("pause-holder")).unwrap());
        let validity_point = read_at + left.saturating_sub(ttl / 100 + Duration::from_millis(2));
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(u64::try_from(pause.as_millis()).unwrap())
            .arg("ALL")
            .query(&mut server.conn())
            .unwrap();
        let clock = LossClock::start();
        // One try-once acquire on its own key every 100 ms through the pause: the replies
        // all come when it ends; those sent more than a ttl before that are late.
        let send_tries = async {
            tokio::time::sleep_until(clock.lost_at() + Duration::from_millis(50)).await;
            let mut tries = Vec::new();
            for index in 0..15u32 {
                let client = client.clone();
                tries.push(tokio::spawn(async move {
                    let called = Instant::now();
                    let started = Arc::new(Mutex::new(None));
                    let result = client
                        .lock(format!("pause-{index}"))
                        .ttl(ttl)
                        .wait(Duration::ZERO)
                        .run({
                            let started = started.clone();
                            async move {
                                *started.lock().unwrap() = Some(Instant::now());
                                Ok::<(), LockError>(())
                            }
                        })
                        .await;
                    let started = *started.lock().unwrap();
                    (called, started, result)
                }));
                // Sent at 50, 150, ... 1450 ms: well clear of the validity boundary.
                tokio::time::sleep_until(
                    clock.lost_at() + Duration::from_millis(50 + 100 * u64::from(index + 1)),
                )
                .await;
            }
            tries
        };
        let (tries, told) = tokio::join!(
            send_tries,
            clock.until(holder.lost(), ttl + Duration::from_secs(1))
        );
        let told = told.expect("the holder was never told Lost");
        let (mut late, mut bodies, mut max_age) = (0, 0, Duration::ZERO);
        for attempt in tries {
            let (called, started, result) = attempt.await.unwrap();
            match (started, result) {
                (Some(started), Ok(())) => {
                    bodies += 1;
                    max_age = max_age.max(started - called);
                }
                (None, Err(LockError::Timeout { .. })) => late += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(
            max_age < ttl,
            "a body started {max_age:?} after its acquire was sent (ttl {ttl:?})"
        );
        assert!(late >= 5, "only {late} late grants: the pause did not bite");
        assert!(bodies >= 1, "no fresh grant started a body");
        let told_late = (clock.lost_at() + told).saturating_duration_since(validity_point);
        assert!(
            told_late < Duration::from_millis(50),
            "the holder was told Lost {told_late:?} after its validity point"
        );
        assert_eq!(holder.lost_cause(), Some(LostCause::RenewalFailed));
        let leftovers = until(ttl * 2, || {
            redis::cmd("KEYS")
                .arg("pause-*")
                .query::<Vec<String>>(&mut server.conn())
                .unwrap()
                .is_empty()
        })
        .await;
        assert!(leftovers.is_some(), "a late grant was left behind");
        drop(holder);
        figure(
            "client-pause",
            &format!(
                "ttl {}, CLIENT PAUSE {}: 15 try-once acquires sent during it: {late} late \
                 grants (no body), {bodies} bodies on fresh grants (oldest {} after sending, < \
                 ttl); the holder told Lost {} into the pause, {} after its validity point",
                ms(ttl),
                ms(pause),
                ms(max_age),
                ms(told),
                ms(told_late)
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: key deleted or evicted under the holder; the eviction-policy warning.

fn warned_about(port: u16) -> bool {
    !lock_tests::events::mentioning(&["maxmemory-policy", &format!(":{port}")]).is_empty()
}

#[test]
fn a_deleted_or_evicted_key_is_lost_and_an_evicting_server_is_warned_about() {
    row(async {
        lock_tests::events::capture(tracing::Level::WARN);
        let ttl = Duration::from_secs(1);

        // DEL under the holder.
        let plain = RedisServer::start();
        let client = plain.lock_client();
        let guard = client.lock("del").ttl(ttl).acquire().await.unwrap();
        del(&plain, "del");
        let clock = LossClock::start();
        let told_del = clock
            .until(guard.lost(), ttl * 2)
            .await
            .expect("DEL never noticed");
        assert_eq!(guard.lost_cause(), Some(LostCause::TokenGone));
        assert!(
            told_del <= ttl / 3 + Duration::from_millis(100),
            "DEL noticed only after {told_del:?}"
        );
        // No warning for a server that cannot evict (noeviction, the default).
        let checked = until(Duration::from_secs(5), || plain.calls("config|get") >= 1).await;
        assert!(
            checked.is_some(),
            "the client never read the eviction policy"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !warned_about(plain.port()),
            "warned about a noeviction server"
        );

        // Eviction: lock keys are the only keys with an expiry, so volatile-ttl takes them
        // first when memory runs out.
        let evicting =
            RedisServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl"]);
        let client = evicting.lock_client();
        let warned = until(Duration::from_secs(5), || warned_about(evicting.port())).await;
        assert!(warned.is_some(), "no warning about an evicting server");
        let guard = client.lock("evict").ttl(ttl).acquire().await.unwrap();
        let mut conn = evicting.conn();
        let value = "x".repeat(1024);
        let mut written = 0u32;
        let mut evicted = false;
        for batch in 0..200u32 {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for index in 0..50u32 {
                pipe.cmd("SET")
                    .arg(format!("data:{batch}:{index}"))
                    .arg(&value)
                    .ignore();
            }
            let _: () = pipe.query(&mut conn).unwrap();
            written += 50;
            let exists: bool = redis::cmd("EXISTS").arg("evict").query(&mut conn).unwrap();
            if !exists {
                evicted = true;
                break;
            }
        }
        let clock = LossClock::start();
        assert!(evicted, "the lock key survived {written} KB of writes");
        // Make room again (as an operator would) so renewals are not refused for OOM.
        let _: () = redis::cmd("FLUSHDB").query(&mut conn).unwrap();
        let told_evict = clock
            .until(guard.lost(), ttl * 2)
            .await
            .expect("eviction never noticed");
        let info: String = redis::cmd("INFO").arg("stats").query(&mut conn).unwrap();
        let evicted_keys: u64 = info
            .lines()
            .find_map(|line| line.strip_prefix("evicted_keys:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap();
        assert!(evicted_keys >= 1);
        assert_eq!(guard.lost_cause(), Some(LostCause::TokenGone));
        assert!(
            told_evict <= ttl / 3 + Duration::from_millis(100),
            "eviction noticed only after {told_evict:?}"
        );
        figure(
            "del-evict",
            &format!(
                "ttl {}: DEL -> Lost(TokenGone) after {}; eviction (maxmemory 4mb, volatile-ttl, \
                 after {written} KB written, {evicted_keys} keys evicted) -> Lost(TokenGone) \
                 after {}; startup warning: evicting server warned after {}, noeviction server \
                 not warned",
                ms(ttl),
                ms(told_del),
                ms(told_evict),
                ms(warned.unwrap())
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: a panicking body.

#[derive(Debug, PartialEq, Eq)]
struct Boom(u32);

#[test]
fn a_panicking_body_reaches_the_caller_unchanged_and_releases() {
    row(async {
        let server = RedisServer::start();
        let client = server.lock_client();
        let ttl = Duration::from_millis(1500);
        let mut figures = Vec::new();
        for (case, key) in [
            ("panic_any(Boom(7))", "panics-any"),
            ("panic!", "panics-str"),
        ] {
            let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
            let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
            let task = {
                let client = client.clone();
                tokio::spawn(async move {
                    client
                        .lock(key)
                        .ttl(ttl)
                        .run(async move {
                            inside_tx.send(()).unwrap();
                            go_rx.await.unwrap();
                            if key == "panics-any" {
                                std::panic::panic_any(Boom(7));
                            }
                            if std::hint::black_box(true) {
                                panic!("boom in {key}");
                            }
                            Ok::<(), LockError>(())
                        })
                        .await
                })
            };
            inside_rx.await.unwrap();
            assert!(server.get(key).is_some());
            server.reset_stats();
            // The watchdog is at work: a renewal lands before the panic.
            let renewed = until(ttl, || server.calls("pexpire") >= 1).await;
            assert!(renewed.is_some(), "no renewal while the body ran");
            go_tx.send(()).unwrap();
            let payload = task.await.unwrap_err().into_panic();
            // Timed from the caller receiving the panic (the panic hook may take long to
            // print a backtrace before the unwinding drops the guard).
            let panicked = Instant::now();
            if key == "panics-any" {
                assert_eq!(payload.downcast_ref::<Boom>(), Some(&Boom(7)));
            } else {
                assert_eq!(
                    payload.downcast_ref::<String>().map(String::as_str),
                    Some("boom in panics-str")
                );
            }
            let gone = until(ttl, || server.get(key).is_none())
                .await
                .map(|_| panicked.elapsed())
                .expect("the key outlived its ttl");
            assert!(gone < ttl / 3, "released only after {gone:?}");
            assert_eq!(client.held_leases(), 0);
            let orphans = OrphanCheck::run(&server, &format!("*{key}*"), ttl * 2).await;
            assert!(orphans.is_clean(), "{orphans:?}");
            figures.push(format!(
                "{case}: payload unchanged, key gone {} after the caller got the panic, scripts/PEXPIREs in \
                 the next {}: {}/{}",
                ms(gone),
                ms(orphans.window),
                orphans.scripts_in_window,
                orphans.pexpires_in_window
            ));
        }
        figure("panic", &format!("ttl {}; {}", ms(ttl), figures.join("; ")));
    });
}

// ---------------------------------------------------------------------------------------
// Row: 1,000 guarded futures dropped at random points.

const ACQUIRING: u8 = 0;
const HOLDING: u8 = 1;
const RELEASING: u8 = 2;
const DONE: u8 = 3;

/// A small xorshift generator: the suite needs reproducible randomness, not a crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

#[test]
fn a_thousand_guarded_futures_dropped_at_random_points_leave_nothing() {
    row(async {
        let seed = std::env::var("FAULTS_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| now_us() | 1);
        let mut rng = Rng(seed);
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        proxy.set_delay(Direction::Up, Duration::from_millis(3));
        proxy.set_delay(Direction::Down, Duration::from_millis(3));
        let client = client_for(&proxy.url(), Duration::from_secs(1), Duration::from_secs(5));
        let ttl = Duration::from_secs(1);
        warm(&client, "drop-0").await;
        server.reset_stats();
        let count = 1000;
        let started = Instant::now();
        let mut tasks = Vec::new();
        let mut schedule = Vec::new();
        for index in 0..count {
            let phase = Arc::new(AtomicU8::new(ACQUIRING));
            let lock = client
                .lock(format!("drop-{}", index % 20))
                .ttl(ttl)
                .wait(Duration::from_secs(3));
            let hold = Duration::from_millis(rng.below(20));
            let explicit = index % 2 == 1;
            let task_phase = phase.clone();
            let task = tokio::spawn(async move {
                if explicit {
                    let guard = lock.acquire().await.unwrap();
                    task_phase.store(HOLDING, Ordering::SeqCst);
                    tokio::time::sleep(hold).await;
                    task_phase.store(RELEASING, Ordering::SeqCst);
                    guard.release().await.unwrap();
                } else {
                    lock.run(async {
                        task_phase.store(HOLDING, Ordering::SeqCst);
                        tokio::time::sleep(hold).await;
                        task_phase.store(RELEASING, Ordering::SeqCst);
                        Ok::<(), LockError>(())
                    })
                    .await
                    .unwrap();
                }
                task_phase.store(DONE, Ordering::SeqCst);
            });
            schedule.push((Duration::from_millis(rng.below(600)), index));
            tasks.push((task, phase));
        }
        schedule.sort();
        let mut at_drop = [0usize; 4];
        for (after, index) in schedule {
            tokio::time::sleep_until(started + after).await;
            let (task, phase) = &tasks[index];
            at_drop[usize::from(phase.load(Ordering::SeqCst))] += 1;
            task.abort();
        }
        let last_drop = Instant::now();
        for (task, _) in tasks {
            match task.await {
                Ok(()) => {}
                Err(err) => assert!(err.is_cancelled(), "a task failed: {err:?}"),
            }
        }
        let leases_after_drop = client.held_leases();
        let waiting_after_drop = client.waiting();
        // 3 x ttl after the last drop: the first 2 idle, the last a quiet window in which
        // the server must receive no script at all.
        tokio::time::sleep_until(last_drop + ttl * 2).await;
        let orphans = OrphanCheck::run(&server, "*", ttl).await;
        assert_eq!(leases_after_drop, 0, "dropped leases are still renewed");
        assert_eq!(waiting_after_drop, (0, 0), "waiters left registered");
        assert!(orphans.is_clean(), "seed {seed}: {orphans:?}");
        let [acquiring, holding, releasing, done] = at_drop;
        assert!(
            acquiring > 0 && holding > 0 && releasing > 0,
            "seed {seed}: drops did not hit every phase: {at_drop:?}"
        );
        figure(
            "drop-1000",
            &format!(
                "1000 futures on 20 keys through a 3 ms proxy, ttl {}, dropped at random in \
                 0..600 ms (seed {seed}): {acquiring} while waiting/acquiring, {holding} \
                 holding, {releasing} releasing, {done} already done; held leases after the \
                 drops: 0; after 3 ttl: {} keys left, {} scripts and {} PEXPIREs in the last \
                 ttl",
                ms(ttl),
                orphans.keys_left.len(),
                orphans.scripts_in_window,
                orphans.pexpires_in_window
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: Redis unreachable or AUTH failing at start.

#[test]
fn unreachable_or_auth_failing_redis_at_start_is_a_typed_error_in_time() {
    row(async {
        let connect_timeout = Duration::from_millis(500);
        let refused = format!("redis://127.0.0.1:{}", free_port());
        // Accepts TCP connections (the kernel's backlog) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_url = format!("redis://127.0.0.1:{}", silent.local_addr().unwrap().port());
        // The harness checks readiness without a password: the password comes after.
        let protected = RedisServer::start();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("right-secret")
            .query(&mut protected.conn())
            .unwrap();
        let wrong_password = format!("redis://:wrong-secret@127.0.0.1:{}", protected.port());
        let no_password = protected.url();
        let mut figures = Vec::new();
        for (case, url) in [
            ("connection refused", refused),
            ("never answers", silent_url),
            ("wrong password", wrong_password),
            ("no password", no_password),
        ] {
            let client = client_for(&url, connect_timeout, Duration::from_millis(500));
            let ran = AtomicBool::new(false);
            let started = Instant::now();
            let result = tokio::time::timeout(
                Duration::from_secs(20),
                client.lock("start").run(async {
                    ran.store(true, Ordering::SeqCst);
                    Ok::<(), LockError>(())
                }),
            )
            .await
            .unwrap_or_else(|_| panic!("{case}: acquire hung"));
            let took = started.elapsed();
            assert!(!ran.load(Ordering::SeqCst), "{case}: the body ran");
            let kind = match &result {
                Err(LockError::Backend { key, source }) => {
                    assert_eq!(key, "start");
                    format!("{:?}", source.kind())
                }
                other => panic!("{case}: expected a Backend error, got {other:?}"),
            };
            assert!(
                took <= connect_timeout + Duration::from_millis(200),
                "{case}: the error took {took:?} (connect timeout {connect_timeout:?})"
            );
            figures.push(format!("{case}: Backend({kind}) after {}", ms(took)));
        }
        drop(silent);
        figure(
            "unreachable-auth",
            &format!(
                "connect timeout {}; {}; body never ran",
                ms(connect_timeout),
                figures.join("; ")
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: the subscription connection dies while the server refuses new connections.

fn subscribers(admin: &mut redis::Connection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(admin)
        .unwrap();
    reply.1
}

#[test]
fn a_waiter_resubscribes_after_its_subscription_connection_fails_to_reconnect() {
    row(async {
        let server = RedisServer::start();
        let mut admin = server.conn();
        let key = "resubscribe";
        let channel = "~lock/released{resubscribe}";
        let holder = server.lock_client();
        let client = client_for(
            &server.url(),
            Duration::from_millis(300),
            Duration::from_secs(1),
        );
        warm(&client, "warm-up").await;
        let held = holder
            .lock(key)
            .ttl(Duration::from_secs(10))
            .acquire()
            .await
            .unwrap();
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .lock(key)
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
            })
        };
        let subscribed = until(Duration::from_secs(5), || {
            subscribers(&mut admin, channel) == 1
        })
        .await;
        assert!(subscribed.is_some(), "the waiter never subscribed");

        // Kill the subscription connection while no new connection is accepted: its one
        // reconnection attempt fails, and nothing about the waiter changes on the server.
        let scripts_before = script_stat_on(&mut admin, "calls");
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(1)
            .query(&mut admin)
            .unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut admin)
            .unwrap();
        // The disconnection wakes the waiter, which asks again over its command connection.
        let retried = until(Duration::from_secs(5), || {
            script_stat_on(&mut admin, "calls") > scripts_before
        })
        .await;
        assert!(
            retried.is_some(),
            "the waiter did not try again after the disconnection"
        );
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(10_000)
            .query(&mut admin)
            .unwrap();

        // Without a new subscription the release below would go unheard: the waiter must
        // subscribe again by itself once connections are accepted again.
        let resubscribed = until(Duration::from_secs(6), || {
            subscribers(&mut admin, channel) == 1
        })
        .await;
        let resubscribed =
            resubscribed.expect("the waiter never subscribed again after the failed reconnection");
        assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter hung")
            .unwrap()
            .expect("the waiter did not get the lock");
        assert_eq!(server.get(key).as_deref(), Some(guard.token()));
        guard.release().await.unwrap();
        figure(
            "resubscribe",
            &format!(
                "subscribed again {} after new connections were accepted",
                ms(resubscribed)
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: a Redis restart while 50 tasks wait.

/// Fifty waiters with `wait = 20s` behind a held key; Redis is killed and back 200 ms
/// later. A client that has reached the server before treats the refused connections as
/// transient within each caller's wait: every waiter acquires, none fails.
#[test]
fn a_redis_restart_while_tasks_wait_fails_none_of_them() {
    row(async {
        let mut server = RedisServer::start();
        let holder = server.lock_client();
        let waiters = server.lock_client();
        let held = holder.lock("restart-wait").acquire().await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let lock = waiters.lock("restart-wait").wait(Duration::from_secs(20));
            tasks.push(tokio::spawn(async move {
                let guard = lock.acquire().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.release().await.map(|_| ())
            }));
        }
        until(Duration::from_secs(10), || waiters.waiting().0 == 50)
            .await
            .expect("50 tasks waiting");
        let killed = Instant::now();
        server.kill9();
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.restart();
        // On a starved machine the restart itself can take longer than the outage grace:
        // then the client rightly declares the server down (the outage rule, tested in
        // outage.rs) and its waiters fail; only a restart within the grace must be ridden
        // out.
        let back = killed.elapsed();
        let mut failures = Vec::new();
        for task in tasks {
            if let Err(err) = task.await.unwrap() {
                // With its causes: the outage rule's error says "has been unreachable for".
                failures.push(lock_tests::chain(&err));
            }
        }
        let all_done = killed.elapsed();
        std::mem::forget(held); // its key died with the restart
        if back >= lock_runtime::DEFAULT_OUTAGE_GRACE {
            let other: Vec<&String> = failures
                .iter()
                .filter(|failure| !failure.contains("has been unreachable for"))
                .collect();
            assert!(
                other.is_empty(),
                "the server was back {} after the kill; waiters failed for another reason \
                 than the outage rule: {:?}",
                ms(back),
                &other[..other.len().min(3)]
            );
            println!(
                "restart while 50 wait: the server was back only {} after the kill (load): \
                 {} of 50 waiters failed, as the outage rule says",
                ms(back),
                failures.len()
            );
            return;
        }
        assert!(
            failures.is_empty(),
            "{} of 50 waiters failed, the server back {} after the kill: {:?}",
            failures.len(),
            ms(back),
            &failures[..failures.len().min(3)]
        );
        figure(
            "restart while 50 wait",
            &format!(
                "Redis down 200 ms: 50 of 50 waiters acquired, the last {} after the kill",
                ms(all_done)
            ),
        );
    });
}

// ---------------------------------------------------------------------------------------
// Row: a blackholed connection (stops answering, not closed).

/// The path to Redis drops everything while a lock is held (ttl 3 s, response timeout
/// 2 s): the release gives up by the lease's validity point instead of retrying for many
/// response timeouts.
#[test]
fn a_blackholed_release_gives_up_by_the_lease_validity() {
    row(async {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = client_for(&proxy.url(), Duration::from_secs(1), Duration::from_secs(2));
        let guard = client
            .lock("blackhole")
            .ttl(Duration::from_secs(3))
            .acquire()
            .await
            .unwrap();
        proxy.set_blackhole(Direction::Up, true);
        proxy.set_blackhole(Direction::Down, true);
        let started = Instant::now();
        let released = guard.release().await;
        let release_took = started.elapsed();
        assert!(
            released.is_err(),
            "released through a blackhole: {released:?}"
        );
        assert!(
            release_took < Duration::from_secs(3),
            "the release kept trying past the lease's ttl: {}",
            ms(release_took)
        );
        figure(
            "blackholed release",
            &format!(
                "gave up after {} (ttl 3 s, response timeout 2 s)",
                ms(release_took)
            ),
        );
    });
}

/// While the path drops everything, a `wait = 1s` acquire returns within its wait plus one
/// response timeout (2 s); once the path is back, the client acquires again at once (its
/// dead connection is replaced) instead of timing out on it forever.
#[test]
fn a_client_recovers_when_a_blackholed_path_comes_back() {
    row(async {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(server.port());
        let client = client_for(&proxy.url(), Duration::from_secs(1), Duration::from_secs(2));
        warm(&client, "warm").await;
        proxy.set_blackhole(Direction::Up, true);
        proxy.set_blackhole(Direction::Down, true);
        let mut slowest = Duration::ZERO;
        for index in 0..3 {
            let started = Instant::now();
            let outcome = client
                .lock(format!("during-{index}"))
                .wait(Duration::from_secs(1))
                .acquire()
                .await;
            slowest = slowest.max(started.elapsed());
            assert!(outcome.is_err(), "acquired through a blackhole");
        }
        assert!(
            slowest <= Duration::from_millis(3_500),
            "a 1 s wait took {} (more than one 2 s response timeout over)",
            ms(slowest)
        );
        proxy.set_blackhole(Direction::Up, false);
        proxy.set_blackhole(Direction::Down, false);
        let back = Instant::now();
        // The blackhole outlasted the outage grace: the client declared Redis down, and
        // acquisitions fail at once until its probe (every 200 ms) hears it again.
        let mut refused_meanwhile = 0;
        for _ in 0..500 {
            match client.lock("after-probe").try_acquire().await {
                Ok(guard) => {
                    let _ = guard.release().await;
                    break;
                }
                Err(LockError::Backend { .. }) => {
                    refused_meanwhile += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(other) => panic!("after the path came back: {other:?}"),
            }
        }
        let noticed = back.elapsed();
        assert!(
            noticed < Duration::from_secs(2),
            "the client noticed the path back only after {noticed:?}"
        );
        let mut acquired = 0;
        for index in 0..16 {
            let lock = client
                .lock(format!("after-{index}"))
                .wait(Duration::from_secs(1));
            if let Ok(guard) = lock.acquire().await {
                acquired += 1;
                let _ = guard.release().await;
            }
        }
        let recovered = back.elapsed();
        assert_eq!(
            acquired, 16,
            "after the path came back: {acquired} of 16 acquired"
        );
        figure(
            "blackholed connection",
            &format!(
                "a 1 s wait returned after {} at most; the client saw the path back after {} \
                 ({refused_meanwhile} tries refused at once meanwhile); 16 of 16 acquired {} \
                 after the path came back",
                ms(slowest),
                ms(noticed),
                ms(recovered)
            ),
        );
    });
}
