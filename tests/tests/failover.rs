//! Failover with asynchronous replication: the double grant, counted, and the option that
//! prevents it ([`Config::wait_for_replicas`]).
//!
//! A primary and a replica on loopback. The replica's link to the primary goes through a
//! fault proxy (`lock_tests::proxy`) that can hold back the primary-to-replica bytes; the
//! clients reach the primary through a second proxy, "the door", which a failover moves to
//! the promoted replica (as a virtual IP or a DNS name is moved). One forced failover:
//!
//! 1. the link holds back the replication stream;
//! 2. the first client acquires the key (the primary has it, the replica does not);
//! 3. the primary is killed (`kill -9`): the held bytes die with it. Half the time once the
//!    first client has its answer, half the time 20 ms after its write reached the primary
//!    (with the option, while it still waits for the replica);
//! 4. the replica is promoted (`REPLICAOF NO ONE`) and the door moved to it;
//! 5. the second client tries the key once, through the door.
//!
//! A double grant: the second client is granted the key while the first still believes it
//! holds it. Then the old primary comes back empty as the new primary's replica, and the
//! roles swap for the next failover. Promotion is by `REPLICAOF NO ONE` rather than by three
//! sentinels: a Sentinel failover takes about a second to decide and 15 s to demote the old
//! primary (RELIABILITY.md, "Sentinel failover"), so 50 of them would take minutes; the
//! sentinels change who promotes, not what the promoted replica holds.
//!
//! The counts are printed on lines that start with `FIGURE failover`:
//!
//! ```sh
//! cargo test -p lock-tests --test failover -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError, LockGuard, LostCause};
use lock_tests::RedisServer;
use lock_tests::failover::{Nodes, Tally, judge, summary, taken_after_rejoin, trial_client};
use lock_tests::proxy::{Direction, FaultProxy};

/// Forced failovers per run, each way (without the option, with it).
const FAILOVERS: usize = 50;

/// The lease of the first holder: it learns of the loss at its first renewal, a third of it.
const TTL: Duration = Duration::from_millis(600);

/// How long the first client waits: with the option it tries again within this, and fails.
const FIRST_WAIT: Duration = Duration::from_millis(300);

fn figure(text: &str) {
    println!("FIGURE failover: {text}");
}

/// A primary and its replica, the replica's link and the clients' door.
struct Pair {
    nodes: Nodes,
    /// The replica's link to the primary (it replicates from the proxy).
    link: FaultProxy,
    /// Where the clients connect: the primary, moved on failover.
    door: FaultProxy,
}

impl Pair {
    fn start() -> Pair {
        let nodes = Nodes::start();
        let link = FaultProxy::start(nodes.primary().port());
        let door = FaultProxy::start(nodes.primary().port());
        nodes.attach_replica(link.port());
        Pair { nodes, link, door }
    }

    fn primary(&self) -> &RedisServer {
        self.nodes.primary()
    }

    /// Kills the primary with the replication stream held back (the held bytes are lost
    /// with its connections), promotes the replica and moves the door and the link to it.
    /// Returns when the primary was gone.
    fn fail_over(&mut self) -> Instant {
        self.nodes.kill_primary();
        let gone = Instant::now();
        self.link.reset_all();
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.nodes.replica().conn())
            .unwrap();
        let promoted = self.nodes.replica().port();
        self.link.set_target(promoted);
        self.link.set_hold(Direction::Down, false);
        self.door.set_target(promoted);
        self.door.reset_all();
        self.nodes.swap();
        gone
    }

    /// Starts the old primary again, empty, as the new primary's replica.
    fn rejoin(&mut self) {
        self.nodes.restart_replica();
        self.nodes.attach_replica(self.link.port());
    }
}

fn client(door: &FaultProxy, replicas: bool) -> LockClient {
    trial_client(Config::single(door.url()), replicas)
}

async fn one_failover(
    pair: &mut Pair,
    (first, second): (&LockClient, &LockClient),
    in_flight: bool,
    tally: &mut Tally,
) {
    let key = format!("failover:{}", uuid::Uuid::new_v4().simple());
    pair.link.set_hold(Direction::Down, true);
    let acquiring = {
        let lock = first.lock(&key).ttl(TTL).wait(FIRST_WAIT);
        tokio::spawn(async move { lock.acquire().await })
    };
    // The first client's write reached the primary (not the replica: the link holds it).
    let mut watch = pair.primary().conn();
    let seen = lock_tests::until(Duration::from_secs(5), Duration::from_millis(1), || {
        redis::cmd("EXISTS")
            .arg(&key)
            .query::<i64>(&mut watch)
            .unwrap_or(0)
            == 1
    })
    .await;
    assert!(
        seen.is_some(),
        "the first client's write never reached the primary"
    );
    // Its reply: at once without the option; with it, not before the replica answers (and
    // not a grant, as the replica never does). Every other failover comes once the first
    // client has its answer, the others 20 ms after its write, while it may still wait.
    let mut acquiring = acquiring;
    let bound = if in_flight {
        Duration::from_millis(20)
    } else {
        FIRST_WAIT + Duration::from_secs(3)
    };
    let early = tokio::time::timeout(bound, &mut acquiring).await;
    assert!(
        in_flight || early.is_ok(),
        "the first client never answered"
    );
    let _gone = tokio::task::block_in_place(|| pair.fail_over());
    // The second client tries at once, while the first may still be trying.
    let second_result = second.lock(&key).ttl(TTL).try_acquire().await;
    let second_at = Instant::now();
    let first_result: Result<LockGuard, LockError> = match early {
        Ok(joined) => joined.unwrap(),
        Err(_) => acquiring.await.unwrap(),
    };
    judge(&first_result, &second_result, tally);
    if let Ok(guard) = &first_result {
        match tokio::time::timeout(TTL * 3, guard.lost()).await {
            Ok(cause) => tally.lost.push((cause, second_at.elapsed())),
            Err(_) => tally.never_told += 1,
        }
    }
    if let Ok(guard) = second_result {
        let _ = guard.release().await;
    }
    drop(first_result);
    tokio::task::block_in_place(|| pair.rejoin());
    taken_after_rejoin(second, &key, TTL, tally).await;
}

async fn run(replicas: bool) -> Tally {
    let mut pair = tokio::task::block_in_place(Pair::start);
    let first = client(&pair.door, replicas);
    let second = client(&pair.door, replicas);
    let mut tally = Tally::default();
    let started = Instant::now();
    for index in 0..FAILOVERS {
        one_failover(&mut pair, (&first, &second), index % 2 == 1, &mut tally).await;
    }
    let mode = if replicas {
        "with wait_for_replicas(1, 100 ms)"
    } else {
        "without the option"
    };
    let mut told: Vec<Duration> = tally.lost.iter().map(|(_, after)| *after).collect();
    told.sort();
    figure(&format!(
        "{mode}: {FAILOVERS} failovers in {:.1} s; first client granted {}; double grants {}",
        started.elapsed().as_secs_f64(),
        tally.first_granted,
        tally.double_grants,
    ));
    if !told.is_empty() {
        figure(&format!(
            "{mode}: the first holder was told {} (never told within 3 ttls: {}), after the \
             second's grant: min {:?}, median {:?}, max {:?} (ttl {TTL:?})",
            summary(
                tally
                    .lost
                    .iter()
                    .map(|(cause, _)| format!("{cause:?}"))
                    .collect()
            ),
            tally.never_told,
            told[0],
            told[told.len() / 2],
            told[told.len() - 1],
        ));
    }
    figure(&format!(
        "{mode}: the first client was refused: [{}]; the second: [{}]; the key taken again \
         after the old primary rejoined: {}",
        summary(tally.first_refused.clone()),
        summary(tally.second_refused.clone()),
        tally.after_rejoin,
    ));
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_grants_twice_unless_grants_wait_for_replicas() {
    let without = run(false).await;
    let with = run(true).await;
    assert!(
        without.double_grants > 0,
        "no double grant without the option: the test no longer produces the failure"
    );
    assert_eq!(
        with.double_grants, 0,
        "double grants with the option on: {with:?}"
    );
}

/// A primary and a replica behind a link proxy, for the option's own tests.
fn replicated() -> (Pair, LockClient) {
    let pair = Pair::start();
    let client = LockClient::new(
        Config::single(pair.primary().url())
            .response_timeout(Duration::from_secs(1))
            .wait_for_replicas(1, Duration::from_millis(50)),
    )
    .unwrap();
    (pair, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_the_option_fails_with_its_error_within_the_wait() {
    let server = RedisServer::start();
    let client = LockClient::new(
        Config::single(server.url())
            .response_timeout(Duration::from_secs(1))
            .wait_for_replicas(1, Duration::from_millis(50)),
    )
    .unwrap();
    for wait in [Duration::ZERO, Duration::from_millis(300)] {
        let started = Instant::now();
        let err = client
            .lock("no-replica")
            .wait(wait)
            .acquire()
            .await
            .map(|_| ())
            .unwrap_err();
        let took = started.elapsed();
        match &err {
            LockError::NotReplicated {
                key,
                confirmed: 0,
                needed: 1,
                ..
            } if key == "no-replica" => {}
            other => panic!("wait {wait:?}: expected NotReplicated (0 of 1), got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("0 of the 1 replicas"), "{message}");
        // Within the wait plus one response timeout: it does not hang.
        assert!(
            took < wait + Duration::from_secs(1),
            "wait {wait:?} took {took:?}"
        );
        // The undone grant is not left behind.
        assert_eq!(
            server.get("no-replica"),
            None,
            "the unreplicated grant was left"
        );
        println!("FIGURE failover: no replica, wait {wait:?}: {message} after {took:?}");
    }
    // Settings that cannot work are refused when the client is built.
    let refused = |config: Config| LockClient::new(config).map(|_| ()).unwrap_err();
    let err = refused(
        Config::single(server.url())
            .response_timeout(Duration::from_millis(100))
            .wait_for_replicas(1, Duration::from_millis(100)),
    );
    assert!(err.to_string().contains("response_timeout"), "{err}");
    let err =
        refused(Config::redlock([server.url()]).wait_for_replicas(1, Duration::from_millis(10)));
    assert!(err.to_string().contains("Redlock"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_the_replica_never_gets_lose_the_lease_by_its_validity() {
    let (pair, client) = tokio::task::block_in_place(replicated);
    let plain = LockClient::new(
        Config::single(pair.primary().url()).response_timeout(Duration::from_secs(1)),
    )
    .unwrap();
    let ttl = Duration::from_millis(600);
    let mut guard = client.lock("stalled").ttl(ttl).acquire().await.unwrap();
    let unguarded = plain
        .lock("stalled-plain")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    // Renewed through two ttls while the replica keeps up.
    tokio::time::sleep(ttl * 2).await;
    assert!(
        !guard.is_lost(),
        "lost while the replica kept up: {:?}",
        guard.lost_cause()
    );
    // The link stalls: the primary still takes every renewal, the replica gets none.
    pair.link.set_hold(Direction::Down, true);
    let stalled = Instant::now();
    let extended = guard.extend(ttl).await;
    assert!(
        matches!(extended, Err(LockError::NotReplicated { confirmed: 0, .. })),
        "an extension the replica never got: {extended:?}"
    );
    let cause = tokio::time::timeout(ttl * 3, guard.lost())
        .await
        .expect("the lease was not lost within 3 ttls of the stall");
    let after = stalled.elapsed();
    assert_eq!(cause, LostCause::RenewalFailed);
    // Without the option the same stall goes unnoticed: the primary renews it.
    assert!(!unguarded.is_lost(), "{:?}", unguarded.lost_cause());
    assert!(pair.primary().get("stalled-plain").is_some());
    println!(
        "FIGURE failover: replica link stalled: the lease (ttl {ttl:?}) was lost ({cause:?}) \
         {after:?} after the stall; the same lease without the option was still held"
    );
    pair.link.set_hold(Direction::Down, false);
    drop(guard);
    unguarded.release().await.unwrap();
}

/// Cycles per second of `client` on `key`: uncontended acquire and release, `cycles` times.
async fn cycles_per_second(client: &LockClient, key: &str, cycles: u32) -> f64 {
    let started = Instant::now();
    for _ in 0..cycles {
        let guard = client.lock(key).ttl(TTL).acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    f64::from(cycles) / started.elapsed().as_secs_f64()
}

/// What waiting for one replica costs an uncontended cycle on loopback (a replica that
/// replicates directly, no proxy). Printed, not asserted: speed is the bench's business.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figure_the_cost_of_waiting_for_a_replica() {
    let nodes = Nodes::start();
    nodes.attach_replica(nodes.primary().port());
    let primary = nodes.primary();
    let plain = LockClient::new(Config::single(primary.url())).unwrap();
    let waiting = LockClient::new(
        Config::single(primary.url()).wait_for_replicas(1, Duration::from_millis(100)),
    )
    .unwrap();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for round in 0..5 {
        // Interleaved, the order swapped each round.
        if round % 2 == 0 {
            without.push(cycles_per_second(&plain, "cost", 300).await);
            with.push(cycles_per_second(&waiting, "cost", 300).await);
        } else {
            with.push(cycles_per_second(&waiting, "cost", 300).await);
            without.push(cycles_per_second(&plain, "cost", 300).await);
        }
    }
    let median = |runs: &mut Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    let (without, with) = (median(&mut without), median(&mut with));
    println!(
        "FIGURE failover: uncontended acquire+release, one replica on loopback, median of 5 \
         x 300 cycles: {without:.0}/s without the option, {with:.0}/s with \
         wait_for_replicas(1, 100 ms): {:.2}x",
        with / without
    );
}

/// Starts of the first client's bodies while the second client holds the key a failover
/// lost (the primary killed with the grant unreplicated): `(bodies, the last one's delay
/// after the primary died)` per failover.
async fn passes_after_a_loss(
    mode: &str,
    config: impl Fn(&FaultProxy) -> Config,
    failovers: usize,
) -> Vec<(usize, Duration)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let mut pair = tokio::task::block_in_place(Pair::start);
    let first = LockClient::new(config(&pair.door)).unwrap();
    let second = client(&pair.door, false);
    let (mut found, mut unheld) = (Vec::new(), Vec::new());
    for _ in 0..failovers {
        let key = format!("passes:{}", uuid::Uuid::new_v4().simple());
        pair.link.set_hold(Direction::Down, true);
        let starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        // 16 tasks of one process pass the lock among themselves (1 ms bodies).
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (lock, starts, stop) = (
                    first.lock(&key).ttl(TTL).wait(Duration::from_secs(5)),
                    starts.clone(),
                    stop.clone(),
                );
                tokio::spawn(async move {
                    for _ in 0..100_000 {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(guard) = lock.acquire().await else {
                            continue;
                        };
                        starts.lock().unwrap().push(Instant::now());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        let _ = guard.release().await;
                    }
                })
            })
            .collect();
        let busy = lock_tests::until(Duration::from_secs(5), Duration::from_millis(1), || {
            starts.lock().unwrap().len() >= 20
        })
        .await;
        assert!(busy.is_some(), "the first client's tasks never got going");
        let lost_at = tokio::task::block_in_place(|| pair.fail_over());
        let held = second
            .lock(&key)
            .ttl(TTL)
            .wait(Duration::from_secs(2))
            .acquire()
            .await;
        let held = held.expect("the second client could not take the lost key");
        // Sent before this: bodies that start from here on run beside the second holder.
        let granted_at = Instant::now();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released_at = Instant::now();
        held.release().await.unwrap();
        stop.store(true, Ordering::SeqCst);
        for task in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let after: Vec<Duration> = starts
            .lock()
            .unwrap()
            .iter()
            .filter(|start| **start > granted_at && **start < released_at)
            .map(|start| start.duration_since(lost_at))
            .collect();
        let before_the_grant = starts
            .lock()
            .unwrap()
            .iter()
            .filter(|start| **start > lost_at && **start <= granted_at)
            .count();
        found.push((after.len(), after.iter().max().copied().unwrap_or_default()));
        unheld.push(before_the_grant);
        tokio::task::block_in_place(|| pair.rejoin());
    }
    println!(
        "FIGURE failover: {mode}: bodies of the first client that started between the \
         primary's death and the second client's grant (no holder in Redis, or a fresh grant on the new \
         primary): {unheld:?}"
    );
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_passes_after_a_failover_lost_the_key_are_bounded_by_the_pass_time() {
    const FAILOVERS: usize = 10;
    let plain =
        |door: &FaultProxy| Config::single(door.url()).response_timeout(Duration::from_secs(1));
    let passing = passes_after_a_loss("default options", plain, FAILOVERS).await;
    let not_passing = passes_after_a_loss(
        "local_passes(0)",
        |door| plain(door).local_passes(0),
        FAILOVERS,
    )
    .await;
    let describe = |found: &[(usize, Duration)]| {
        let bodies: Vec<usize> = found.iter().map(|(bodies, _)| *bodies).collect();
        let latest = found
            .iter()
            .map(|(_, latest)| *latest)
            .max()
            .unwrap_or_default();
        format!("bodies per failover {bodies:?}, the latest {latest:?} after the loss")
    };
    println!(
        "FIGURE failover: 16 tasks passing the lock, {FAILOVERS} failovers that lost it: \
         default options: {}; local_passes(0): {}",
        describe(&passing),
        describe(&not_passing)
    );
    // Without passes, no body of the first client starts while the second holds the key.
    assert!(
        not_passing.iter().all(|(bodies, _)| *bodies == 0),
        "{not_passing:?}"
    );
    // With them, only within one pass bound of the last time Redis confirmed the tenure
    // (DEFAULT_LOCAL_PASS_TIME, 25 ms, taken generously on a loaded machine).
    for (_, latest) in &passing {
        assert!(
            *latest < lock_runtime::DEFAULT_LOCAL_PASS_TIME + Duration::from_millis(500),
            "{passing:?}"
        );
    }
}

/// The option on the other paths: a fenced acquisition (the acquire script, not the quick
/// `SET NX`) with a replica that keeps up, and a cluster whose masters have no replica (the
/// `WAIT` rides in the key's pipeline to its node, and its answer is checked there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_option_covers_fenced_grants_and_cluster_nodes() {
    let (pair, client) = tokio::task::block_in_place(replicated);
    let guard = client.lock("fenced").fencing(true).acquire().await.unwrap();
    assert!(guard.fence().is_some());
    guard.release().await.unwrap();
    pair.link.set_hold(Direction::Down, true);
    let err = client
        .lock("fenced")
        .fencing(true)
        .try_acquire()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(err, LockError::NotReplicated { confirmed: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        pair.primary().get("fenced"),
        None,
        "the unconfirmed grant was left"
    );
    pair.link.set_hold(Direction::Down, false);

    let cluster = tokio::task::block_in_place(|| lock_tests::cluster::RedisCluster::start(3));
    let client = LockClient::new(
        Config::cluster(cluster.urls())
            .response_timeout(Duration::from_secs(1))
            .wait_for_replicas(1, Duration::from_millis(50)),
    )
    .unwrap();
    for key in ["a", "b", "c", "{shop}:1"] {
        let err = client
            .lock(key)
            .try_acquire()
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(
                err,
                LockError::NotReplicated {
                    confirmed: 0,
                    needed: 1,
                    ..
                }
            ),
            "{key}: {err:?}"
        );
    }
}

/// A permit and a reader's share wait for replicas as a lock's grant does: granted while
/// the replica keeps up; with its link stalled, refused with `NotReplicated` within the
/// wait, and given back on the primary (nothing a promoted replica would lack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_read_shares_the_replica_never_gets_are_undone() {
    let (pair, client) = tokio::task::block_in_place(replicated);
    // While the replica keeps up (a busy machine may miss one 50 ms WAIT: tried again).
    let keeping_up = Duration::from_secs(5);
    let permit = client
        .semaphore("quota", 2)
        .wait(keeping_up)
        .acquire()
        .await;
    permit.unwrap().release().await.unwrap();
    let share = client.rw_lock("doc").wait(keeping_up).read().await;
    share.unwrap().release().await.unwrap();
    pair.link.set_hold(Direction::Down, true);
    let wait = Duration::from_millis(300);
    let refused = |result: Result<(), LockError>, what: &str| match result {
        Err(LockError::NotReplicated { confirmed: 0, .. }) => {}
        other => panic!("{what} the replica never got: {other:?}"),
    };
    let permit = client.semaphore("quota", 2).wait(wait).acquire().await;
    refused(permit.map(drop), "a permit");
    let share = client.rw_lock("doc").wait(wait).read().await;
    refused(share.map(drop), "a read share");
    let mut primary = pair.primary().conn();
    let holders: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("quota")
        .arg(1)
        .arg("+inf")
        .query(&mut primary)
        .unwrap();
    assert!(
        holders.is_empty(),
        "an unconfirmed permit was left: {holders:?}"
    );
    let shares: Vec<String> = redis::cmd("KEYS")
        .arg("~lock/share/*")
        .query(&mut primary)
        .unwrap();
    assert!(
        shares.is_empty(),
        "an unconfirmed share was left: {shares:?}"
    );
}
