//! A real local Redis Cluster: masters started with `cluster-enabled yes` and joined with
//! `redis-cli --cluster create`, resharded with `redis-cli --cluster reshard`.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// A cluster of masters without replicas on loopback.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// The `redis-server` arguments of every node.
    args: Vec<String>,
}

impl RedisCluster {
    /// Starts `masters` nodes (at least 3), creates the cluster, and waits until every node
    /// reports `cluster_state:ok`.
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with(masters, &[])
    }

    /// The same, with extra `redis-server` arguments for every node (e.g.
    /// `["--cluster-require-full-coverage", "no"]`, so that the other masters keep serving
    /// their slots while one is down).
    pub fn start_with(masters: usize, extra: &[&str]) -> RedisCluster {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ];
        args.extend_from_slice(extra);
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|_| RedisServer::start_with(&args))
            .collect();
        let args = args.into_iter().map(str::to_owned).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes, args };
        cluster.wait_until_ok();
        cluster
    }

    /// Starts a node and adds it as a replica of `master` (`redis-cli --cluster add-node
    /// --cluster-slave`); returns its index once it is in sync and `CLUSTER SLOTS` names it.
    pub fn add_replica(&mut self, master: usize) -> usize {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let node = RedisServer::start_with(&args);
        let output = Command::new("redis-cli")
            .args(["--cluster", "add-node"])
            .arg(format!("127.0.0.1:{}", node.port()))
            .arg(format!("127.0.0.1:{}", self.nodes[master].port()))
            .args([
                "--cluster-slave",
                "--cluster-master-id",
                &self.node_id(master),
            ])
            .output()
            .expect("run redis-cli --cluster add-node");
        assert!(
            output.status.success(),
            "add-node failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let port = node.port();
        self.nodes.push(node);
        let replica = self.nodes.len() - 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let synced = redis::cmd("INFO")
                .arg("replication")
                .query::<String>(&mut self.nodes[replica].conn())
                .is_ok_and(|info| info.contains("master_link_status:up"));
            let listed = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query::<Vec<Vec<redis::Value>>>(&mut self.nodes[0].conn())
                .is_ok_and(|ranges| {
                    ranges
                        .iter()
                        .flat_map(|range| range.iter().skip(2))
                        .any(|node| {
                            matches!(node, redis::Value::Array(node)
                            if node.get(1) == Some(&redis::Value::Int(i64::from(port))))
                        })
                });
            if synced && listed {
                self.wait_until_ok();
                return replica;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let info = redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut self.nodes[replica].conn());
        let slots = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<redis::Value>(&mut self.nodes[0].conn());
        panic!("the replica did not join and sync within 30 s: {info:?}; {slots:?}");
    }

    fn wait_until_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let all_ok = self.nodes.iter().all(|node| {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut node.conn())
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            });
            if all_ok {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not reach cluster_state:ok within 30 s");
    }

    /// The seed URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .expect("CLUSTER KEYSLOT")
    }

    /// The slot ranges now: (first slot, last slot, index of the serving node).
    pub fn ranges(&self) -> Vec<(u16, u16, usize)> {
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.nodes[0].conn())
            .expect("CLUSTER SLOTS");
        let mut ranges = Vec::new();
        for range in slots {
            let redis::Value::Array(range) = range else {
                continue;
            };
            if let (
                Some(redis::Value::Int(start)),
                Some(redis::Value::Int(end)),
                Some(redis::Value::Array(master)),
            ) = (range.first(), range.get(1), range.get(2))
                && let Some(redis::Value::Int(port)) = master.get(1)
            {
                let node = self
                    .nodes
                    .iter()
                    .position(|node| i64::from(node.port()) == *port)
                    .expect("a range served by a node of ours");
                ranges.push((*start as u16, *end as u16, node));
            }
        }
        ranges
    }

    /// The index of the node that serves `slot` now.
    pub fn owner(&self, slot: u16) -> usize {
        self.ranges()
            .into_iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| node)
            .expect("every slot is served")
    }

    /// The lowest slot `node` serves.
    pub fn first_slot(&self, node: usize) -> u16 {
        self.ranges()
            .into_iter()
            .filter(|(_, _, owner)| *owner == node)
            .map(|(start, _, _)| start)
            .min()
            .expect("node serves no slot")
    }

    /// A key of the form `PREFIX{N}` whose slot is below `limit` slots past the first slot
    /// of `node`.
    pub fn key_near_first_slot(&self, prefix: &str, node: usize, limit: u16) -> String {
        let first = self.first_slot(node);
        (0..100_000)
            .map(|n| format!("{prefix}{{{n}}}"))
            .find(|key| {
                let slot = self.slot(key);
                slot >= first && slot < first + limit
            })
            .expect("no key found near the first slot")
    }

    /// A key of the form `PREFIX{N}` that `node` serves now.
    pub fn key_on(&self, prefix: &str, node: usize) -> String {
        let ranges = self.ranges();
        (0..100_000)
            .map(|n| format!("{prefix}{{{n}}}"))
            .find(|key| {
                let slot = self.slot(key);
                ranges
                    .iter()
                    .any(|(start, end, owner)| *owner == node && (*start..=*end).contains(&slot))
            })
            .expect("no key found on the node")
    }

    /// The node id of `node`.
    pub fn node_id(&self, node: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[node].conn())
            .expect("CLUSTER MYID")
    }

    /// Moves `slots` slots from node `from` to node `to` with `redis-cli --cluster reshard`.
    pub fn reshard(&self, from: usize, to: usize, slots: u16) {
        let output = Command::new("redis-cli")
            .args([
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{}", self.nodes[from].port()),
            ])
            .args(["--cluster-from", &self.node_id(from)])
            .args(["--cluster-to", &self.node_id(to)])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster reshard");
        assert!(
            output.status.success(),
            "reshard failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// GET on the node that serves `key`.
    pub fn get(&self, key: &str) -> Option<String> {
        self.nodes[self.owner(self.slot(key))].get(key)
    }
}
