//! Failover through Redis Sentinel with a lagging replica: the double grant, counted, and
//! [`Config::wait_for_replicas`] preventing it (issue 25). `failover.rs` promotes with
//! `REPLICAOF NO ONE` behind a moved proxy, 50 times each way; this file lets three real
//! sentinels decide and promote, as in production, over fewer failovers (each takes the
//! sentinels a second or more).
//!
//! A primary, a replica and three `redis-server --sentinel` processes on loopback. The
//! replica replicates through a fault proxy (`lock_tests::proxy`), the link, which can hold
//! back the primary-to-replica bytes. The clients find the primary through the sentinels
//! (`Config::sentinel`). One failover:
//!
//! 1. the link holds back the replication stream;
//! 2. the first client acquires the key (the primary has it, the replica does not);
//! 3. the primary is killed (`kill -9`) once the first client has its answer; the held bytes
//!    die with it;
//! 4. the sentinels find the primary down, agree, and promote the replica;
//! 5. once every sentinel names the promoted replica, a second client (built then, so it
//!    asks the sentinels) tries the key once.
//!
//! A double grant: the second client is granted the key while the first still believes it
//! holds it. Then the old primary comes back empty as the new primary's replica (through
//! the link), and the roles swap for the next failover. A sentinel points a replica that names
//! another address for its primary (here: the link's) back at the primary itself once the
//! failover timeout (5 s) has passed since it saw that address (`+fix-slave-config`), so
//! each failover first checks that the replica still replicates through the link, and puts
//! it back if not. (A longer failover timeout would keep the sentinels off the link, but a
//! failover attempt that fails, such as a split vote, is retried only after twice that
//! timeout: with 60 s the run stalled.)
//!
//! The sentinels call a server down after 3 s without a reply. A sentinel reconnects a link
//! it lost at most once a second, and every promotion or reconfiguration a sentinel sends
//! ends with `CLIENT KILL TYPE normal`, which cuts the other sentinels' links too: with
//! 1 s, a sentinel whose link was cut just after a failover sometimes called the new
//! primary down before it could ask again, and the sentinels failed over once more on their
//! own (the trial copes with that too, see `until_sentinels_know_the_replica`).
//!
//! The counts are printed on lines that start with `FIGURE failover-sentinel`:
//!
//! ```sh
//! cargo test -p lock-tests --test failover_sentinel -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use lock_tests::RedisServer;
use lock_tests::failover::{
    Nodes, Plan, Tally, Timings, Trial, assert_the_option_prevents_double_grants, info, run,
    trial_client,
};
use lock_tests::proxy::{Direction, FaultProxy};

/// The name the sentinels monitor the primary under.
const MASTER: &str = "mymaster";

/// Failovers per mode at most, and the time a mode may start new ones in: room for the 3
/// the verdict wants when each rejoin waits up to a sentinel's 10 s `INFO` period (a busy
/// run once fitted only 2 in 25 s, at about 13 s each).
const MAX_FAILOVERS: usize = 12;
const BUDGET: Duration = Duration::from_secs(45);

/// The first holder's lease. Its first renewal (ttl/3) comes after the sentinels' failover
/// (about 3.5-5 s from the kill), so it still believes it holds the key when the second
/// client is granted, and learns of the loss at that renewal.
const TTL: Duration = Duration::from_secs(18);

/// How long the first client waits: with the option it tries again within this, and fails.
const FIRST_WAIT: Duration = Duration::from_millis(300);

/// The trial's figures and bounds.
const PLAN: Plan = Plan {
    label: "failover-sentinel",
    failovers: "sentinel failovers",
    took: "kill to promotion",
    key_prefix: "failover",
    max: MAX_FAILOVERS,
    budget: BUDGET,
};

/// The trial's lease and first wait.
const TIMINGS: Timings = Timings {
    ttl: TTL,
    first_wait: FIRST_WAIT,
};

/// Two data nodes, the replica's link, and three sentinels.
struct Deployment {
    nodes: Nodes,
    link: FaultProxy,
    sentinels: Vec<RedisServer>,
    /// Failovers the sentinels made on their own during the last wait for them.
    unplanned: usize,
}

impl Deployment {
    fn start() -> Deployment {
        let nodes = Nodes::start();
        let link = FaultProxy::start(nodes.primary().port());
        let config = format!(
            "sentinel monitor {MASTER} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER} 3000\n\
             sentinel failover-timeout {MASTER} 5000\n\
             sentinel parallel-syncs {MASTER} 1",
            nodes.primary().port()
        );
        let mut deployment = Deployment {
            nodes,
            link,
            sentinels: Vec::new(),
            unplanned: 0,
        };
        deployment.attach_replica();
        deployment.sentinels = (0..3)
            .map(|_| RedisServer::start_with_config(Some(&config), &["--sentinel"]))
            .collect();
        deployment.until_sentinels_know_the_replica();
        deployment
    }

    fn primary(&self) -> &RedisServer {
        self.nodes.primary()
    }

    fn replica(&self) -> &RedisServer {
        self.nodes.replica()
    }

    /// Makes the replica replicate through the link and waits (5 s at most) until it has
    /// the primary's data.
    fn attach_replica(&self) {
        self.link.set_target(self.primary().port());
        self.nodes.attach_replica(self.link.port());
    }

    /// Waits (30 s at most) until every sentinel sees the replica as a failover would pick
    /// it: not down, its link connected, an `INFO` reply from it (a sentinel asks a replica
    /// every 10 s; one that only learned the address, from the old primary's entry, has
    /// none) and its replication up. A sentinel that still sees it down after 10 s is told
    /// to `SENTINEL RESET` (it then finds the replica and the other sentinels again): a
    /// sentinel once kept the restarted server down for 30 s, and the next failover found
    /// no replica to promote. On time-out it prints what each sentinel knows of the
    /// replicas and the end of its log.
    ///
    /// The sentinels may fail over on their own meanwhile: with a down-after period of 1 s,
    /// one of them whose link to the just-promoted primary was cut called it down before
    /// it reconnected, and they promoted the rejoined replica back (seen on a busy machine).
    /// Then the roles swap here, the other node is put behind the link, and the wait starts
    /// again: 3 times at most, a fourth move fails the test.
    fn until_sentinels_know_the_replica(&mut self) {
        let mut swaps = 0;
        while self.sentinels_moved_to_the_replica() {
            assert!(
                swaps < 3,
                "the sentinels failed over on their own {} times in a row",
                swaps + 1
            );
            swaps += 1;
            eprintln!(
                "the sentinels failed over to the replica {} on their own: the roles swap",
                self.replica().port()
            );
            self.print_sentinel_logs();
            print_log("the old primary", self.primary());
            self.unplanned += 1;
            self.nodes.swap();
            self.attach_replica();
        }
    }

    /// Waits as [`Deployment::until_sentinels_know_the_replica`] says; `true` when the
    /// wait ended because the sentinels promoted the replica (two of them name it, and it
    /// says `role:master`).
    fn sentinels_moved_to_the_replica(&self) -> bool {
        let replica_port = self.replica().port().to_string();
        let sees_up = |sentinel: &RedisServer| {
            let replica_up = Deployment::replicas_seen_by(sentinel)
                .iter()
                .any(|replica| {
                    let field = |name: &str| replica.get(name).map(String::as_str).unwrap_or("");
                    field("port") == replica_port
                        && !field("flags").contains("s_down")
                        && !field("flags").contains("disconnected")
                        && field("info-refresh")
                            .parse::<u64>()
                            .is_ok_and(|ms| ms < 15_000)
                        && field("master-link-status") == "ok"
                });
            replica_up && Deployment::other_sentinels_seen_by(sentinel) == 2
        };
        let started = Instant::now();
        let mut reset = false;
        for _ in 0..2_000 {
            let late: Vec<&RedisServer> = self.sentinels.iter().filter(|s| !sees_up(s)).collect();
            if late.is_empty() || started.elapsed() > Duration::from_secs(30) {
                break;
            }
            if self.promoted_by_the_sentinels(self.replica()) {
                return true;
            }
            if !reset && started.elapsed() > Duration::from_secs(10) {
                reset = true;
                for sentinel in late {
                    eprintln!(
                        "sentinel {} still sees the replica down ({:?}, {} other sentinels): reset",
                        sentinel.port(),
                        Deployment::replicas_seen_by(sentinel),
                        Deployment::other_sentinels_seen_by(sentinel)
                    );
                    let _: redis::RedisResult<i64> = redis::cmd("SENTINEL")
                        .arg("RESET")
                        .arg(MASTER)
                        .query(&mut sentinel.conn());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !self.sentinels.iter().all(sees_up) {
            for sentinel in &self.sentinels {
                let seen: Vec<String> = Deployment::replicas_seen_by(sentinel)
                    .iter()
                    .map(|replica| format!("{replica:?}"))
                    .collect();
                eprintln!("sentinel {} sees replicas {seen:?}", sentinel.port());
            }
            self.print_sentinel_logs();
            panic!(
                "the sentinels did not all see the replica {replica_port} up within 30 s \
                 (replication: {})",
                info(self.replica(), "replication").replace("\r\n", " ")
            );
        }
        false
    }

    /// Whether two sentinels (the quorum) name `node` as the primary and it says
    /// `role:master`.
    fn promoted_by_the_sentinels(&self, node: &RedisServer) -> bool {
        let naming = self
            .sentinels
            .iter()
            .filter(|sentinel| Deployment::named_by(sentinel) == Some(node.port()))
            .count();
        naming >= 2 && info(node, "replication").contains("role:master")
    }

    /// How many other sentinels `sentinel` knows (0 when it cannot say).
    fn other_sentinels_seen_by(sentinel: &RedisServer) -> usize {
        redis::cmd("SENTINEL")
            .arg("SENTINELS")
            .arg(MASTER)
            .query::<Vec<redis::Value>>(&mut sentinel.conn())
            .map_or(0, |sentinels| sentinels.len())
    }

    fn replicas_seen_by(sentinel: &RedisServer) -> Vec<std::collections::HashMap<String, String>> {
        redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query(&mut sentinel.conn())
            .unwrap_or_default()
    }

    /// The last 25 lines of each sentinel's log (in its working directory).
    fn print_sentinel_logs(&self) {
        for sentinel in &self.sentinels {
            print_log("sentinel", sentinel);
        }
    }

    fn named_by(sentinel: &RedisServer) -> Option<u16> {
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query::<(String, u16)>(&mut sentinel.conn())
            .ok()
            .map(|(_, port)| port)
    }

    /// Whether the replica replicates through the link (not through an address a sentinel
    /// gave it); when not, it is put back and `true` returned.
    fn relink(&self) -> bool {
        let through_link = format!("master_port:{}", self.link.port());
        if info(self.replica(), "replication").contains(&through_link) {
            return false;
        }
        self.attach_replica();
        true
    }
}

impl Trial for Deployment {
    /// Puts the replica back behind the link when a sentinel pointed it past it.
    fn prepare(&mut self, tally: &mut Tally) {
        if self.relink() {
            tally.relinked += 1;
        }
    }

    fn client(&self, replicas: bool) -> LockClient {
        let urls: Vec<String> = self.sentinels.iter().map(RedisServer::url).collect();
        trial_client(Config::sentinel(MASTER, urls), replicas)
    }

    fn hold_replication(&self) {
        self.link.set_hold(Direction::Down, true);
    }

    fn check_granted(&self, key: &str, tally: &Tally) {
        assert!(
            self.primary().get(key).is_some(),
            "failover {}: the first client's grant is not on the primary (port {}; the \
             sentinels name {:?}; the replica has it: {})",
            tally.failovers,
            self.primary().port(),
            self.sentinels
                .iter()
                .map(Deployment::named_by)
                .collect::<Vec<_>>(),
            self.replica().get(key).is_some()
        );
    }

    /// Kills the primary with the replication stream held back (the held bytes are lost
    /// with its connections) and waits (30 s at most) until every sentinel names the
    /// replica and it says `role:master`. Returns how long the sentinels took.
    fn fail_over(&mut self) -> Duration {
        self.nodes.kill_primary();
        let killed = Instant::now();
        self.link.reset_all();
        let promoted = self.replica().port();
        let done = || {
            self.sentinels
                .iter()
                .all(|sentinel| Deployment::named_by(sentinel) == Some(promoted))
                && info(self.replica(), "replication").contains("role:master")
        };
        for _ in 0..10_000 {
            if done() || killed.elapsed() > Duration::from_secs(30) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !done() {
            self.print_sentinel_logs();
            panic!("the sentinels did not promote the replica within 30 s of the kill");
        }
        let took = killed.elapsed();
        self.link.set_hold(Direction::Down, false);
        self.nodes.swap();
        took
    }

    /// Starts the old primary again, empty, as the new primary's replica through the link,
    /// and waits until the sentinels know it (the next failover promotes it); counts the
    /// failovers they made on their own meanwhile.
    fn rejoin(&mut self, tally: &mut Tally) {
        self.nodes.restart_replica();
        self.attach_replica();
        self.until_sentinels_know_the_replica();
        tally.unplanned += std::mem::take(&mut self.unplanned);
    }
}

/// The last 25 lines of `server`'s log (in its working directory), headed `what` and its
/// port.
fn print_log(what: &str, server: &RedisServer) {
    let log = std::fs::read_to_string(format!("/proc/{}/cwd/redis.log", server.pid()))
        .unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(25).collect();
    let latency: redis::RedisResult<redis::Value> = server
        .redis()
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut conn| redis::cmd("LATENCY").arg("LATEST").query(&mut conn));
    eprintln!(
        "{what} {} (LATENCY LATEST: {latency:?}):\n{}",
        server.port(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_grants_twice_unless_grants_wait_for_replicas() {
    let without = run(Deployment::start, false, &TIMINGS, &PLAN).await;
    let with = run(Deployment::start, true, &TIMINGS, &PLAN).await;
    assert_the_option_prevents_double_grants(&without, &with);
}
