//! Failover of a cluster shard with a lagging replica: the double grant, counted, and
//! [`Config::wait_for_replicas`] preventing it (issue 25), as `failover_sentinel.rs` does
//! for Sentinel.
//!
//! A cluster of three masters on loopback; the master of the test's slot gets a replica. A
//! cluster replica replicates from the address its master announces, so the master announces
//! a fault proxy (`cluster-announce-port`), the link, which clients reach it through too; the
//! proxy holds back the bytes of the replication connection only
//! ([`FaultProxy::set_hold_replication`]). One failover:
//!
//! 1. the link holds back the replication stream;
//! 2. the first client (`Config::cluster`) acquires the key: the master has it, the replica
//!    does not;
//! 3. the master is killed (`kill -9`): the held bytes die with it;
//! 4. the replica takes the shard over (`CLUSTER FAILOVER TAKEOVER`, no vote);
//! 5. once another master names it for the slot, a second client (built then) tries once.
//!
//! Then the old master comes back empty, learns that it lost its slots and replicates from
//! the new master, which now announces a link of its own; the roles swap.
//!
//! ```sh
//! cargo test -p lock-tests --test failover_cluster -- --nocapture | grep FIGURE
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use lock_tests::failover::{
    Nodes, Plan, Tally, Timings, Trial, assert_the_option_prevents_double_grants, info, run,
    trial_client,
};
use lock_tests::proxy::FaultProxy;
use lock_tests::wait_for;

/// Failovers per mode at most, and the time a mode may start new ones in.
const MAX_FAILOVERS: usize = 20;
const BUDGET: Duration = Duration::from_secs(12);

/// The first holder's lease: its first renewal (ttl/3) comes after the takeover.
const TTL: Duration = Duration::from_secs(6);

/// How long the first client waits: with the option it tries again within this, and fails.
const FIRST_WAIT: Duration = Duration::from_millis(300);

/// The trial's figures and bounds.
const PLAN: Plan = Plan {
    label: "failover-cluster",
    failovers: "shard takeovers",
    took: "kill to another master naming the replica",
    key_prefix: TAG,
    max: MAX_FAILOVERS,
    budget: BUDGET,
};

/// The trial's lease and first wait.
const TIMINGS: Timings = Timings {
    ttl: TTL,
    first_wait: FIRST_WAIT,
};

/// The hash tag of every test key: one slot, one shard.
const TAG: &str = "{failover}";

fn config_set(server: &RedisServer, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(&mut server.conn())
        .unwrap();
}

/// The shard (its two nodes and their links) and the two other masters.
struct Shard {
    /// The other masters: the clients' seeds, and the judges of who serves the slot.
    others: RedisCluster,
    nodes: Nodes,
    /// `links[i]` leads to `nodes.servers[i]`; the master announces its own.
    links: [FaultProxy; 2],
    slot: u16,
}

impl Shard {
    fn start() -> Shard {
        let mut others = RedisCluster::start(3);
        let slot = others.slot(TAG);
        let owner = others.owner(slot);
        let master = others.nodes.remove(owner);
        let replica = RedisServer::start_with(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ]);
        let links = [
            FaultProxy::start(master.port()),
            FaultProxy::start(replica.port()),
        ];
        let shard = Shard {
            others,
            nodes: Nodes::of([master, replica]),
            links,
            slot,
        };
        shard.announce_link();
        let _: () = redis::cmd("CLUSTER")
            .arg("MEET")
            .arg("127.0.0.1")
            .arg(shard.others.nodes[0].port())
            .query(&mut shard.replica().conn())
            .unwrap();
        let master_id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut shard.primary().conn())
            .unwrap();
        wait_for(
            Duration::from_secs(20),
            "the replica meets the master",
            || {
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query::<String>(&mut shard.replica().conn())
                    .is_ok_and(|nodes| nodes.contains(&master_id))
            },
        );
        let _: () = redis::cmd("CLUSTER")
            .arg("REPLICATE")
            .arg(&master_id)
            .query(&mut shard.replica().conn())
            .unwrap();
        shard.until_replica_synced();
        shard
    }

    fn primary(&self) -> &RedisServer {
        self.nodes.primary()
    }

    fn replica(&self) -> &RedisServer {
        self.nodes.replica()
    }

    /// The primary announces its link (the address its replica and clients reach it on),
    /// and syncs a replica at once.
    fn announce_link(&self) {
        let primary = self.primary();
        config_set(primary, "repl-diskless-sync-delay", "0");
        config_set(
            primary,
            "cluster-announce-bus-port",
            &(primary.port() + 10_000).to_string(),
        );
        config_set(
            primary,
            "cluster-announce-port",
            &self.links[self.nodes.primary].port().to_string(),
        );
    }

    /// Waits (20 s at most) until the replica replicates through the primary's link and
    /// has its data: a write on the primary, then `WAIT 1` on the same connection.
    fn until_replica_synced(&self) {
        let through = format!("master_port:{}", self.links[self.nodes.primary].port());
        wait_for(Duration::from_secs(20), "the replica on the link", || {
            let replication = info(self.replica(), "replication");
            replication.contains(&through) && replication.contains("master_link_status:up")
        });
        // A write and `WAIT 1` on one connection (again while the cluster settles and
        // refuses writes for a moment).
        wait_for(Duration::from_secs(20), "the replica's sync", || {
            let mut primary = self.primary().conn();
            let written = redis::cmd("SET")
                .arg(format!("{TAG}~sync"))
                .arg(1)
                .query::<()>(&mut primary);
            written.is_ok()
                && redis::cmd("WAIT")
                    .arg(1)
                    .arg(1000)
                    .query::<i64>(&mut primary)
                    .is_ok_and(|acked| acked == 1)
        });
        // The replica knows which slots its primary serves (from the cluster bus, which may
        // lag the replication link): a takeover takes over those.
        let primary_id: String = redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.primary().conn())
            .unwrap();
        wait_for(
            Duration::from_secs(20),
            "the replica's view of the slots",
            || {
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query::<String>(&mut self.replica().conn())
                    .is_ok_and(|nodes| {
                        nodes.lines().any(|line| {
                            line.starts_with(&primary_id) && line.split(' ').count() > 8
                        })
                    })
            },
        );
    }

    /// The port another master names for the slot.
    fn named_port(&self) -> Option<i64> {
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.others.nodes[0].conn())
            .ok()?;
        slots.into_iter().find_map(|range| {
            let redis::Value::Array(range) = range else {
                return None;
            };
            match (range.first(), range.get(1), range.get(2)) {
                (
                    Some(redis::Value::Int(start)),
                    Some(redis::Value::Int(end)),
                    Some(redis::Value::Array(master)),
                ) if (*start..=*end).contains(&i64::from(self.slot)) => match master.get(1) {
                    Some(redis::Value::Int(port)) => Some(*port),
                    _ => None,
                },
                _ => None,
            }
        })
    }
}

impl Trial for Shard {
    fn client(&self, replicas: bool) -> LockClient {
        trial_client(Config::cluster(self.others.urls()), replicas)
    }

    fn hold_replication(&self) {
        self.links[self.nodes.primary].set_hold_replication(true);
    }

    fn check_granted(&self, key: &str, _tally: &Tally) {
        assert!(
            self.primary().get(key).is_some(),
            "the first client's grant is not on the shard's primary"
        );
    }

    /// Kills the primary with the replication stream held back, makes the replica take the
    /// shard over, and waits (20 s at most) until another master names it. Returns how long
    /// that took from the kill.
    fn fail_over(&mut self) -> Duration {
        self.nodes.kill_primary();
        let killed = Instant::now();
        self.links[self.nodes.primary].reset_all();
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("TAKEOVER")
            .query(&mut self.replica().conn())
            .unwrap();
        let promoted = i64::from(self.replica().port());
        let done = || {
            info(self.replica(), "replication").contains("role:master")
                && self.named_port() == Some(promoted)
        };
        for _ in 0..2_000 {
            if done() || killed.elapsed() > Duration::from_secs(20) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            done(),
            "the takeover did not happen within 20 s: the replica says {:?}; another master \
             names port {:?} for the slot (the replica's is {promoted})",
            info(self.replica(), "replication")
                .lines()
                .filter(|line| line.starts_with("role") || line.starts_with("master_"))
                .collect::<Vec<_>>(),
            self.named_port(),
        );
        // Only now: a hold let go while the proxy still had the dead primary's connection
        // could pass the held bytes on to the replica before that connection is reset.
        self.links[self.nodes.primary].set_hold_replication(false);
        self.nodes.swap();
        killed.elapsed()
    }

    /// Starts the old primary again, empty: it learns that it lost its slots and replicates
    /// from the new primary, which announces its own link.
    fn rejoin(&mut self, _tally: &mut Tally) {
        self.nodes.restart_replica();
        self.announce_link();
        self.until_replica_synced();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_shard_takeover_grants_twice_unless_grants_wait_for_replicas() {
    let without = run(Shard::start, false, &TIMINGS, &PLAN).await;
    let with = run(Shard::start, true, &TIMINGS, &PLAN).await;
    assert_the_option_prevents_double_grants(&without, &with);
}
