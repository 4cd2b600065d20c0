//! A real Sentinel deployment on loopback: one primary, one replica and three
//! `redis-server --sentinel` processes monitoring it under the name [`MASTER`], with short
//! timeouts (down after 1 s, failover timeout 5 s) so that a failover takes seconds.

use crate::wait_for;
use std::time::{Duration, Instant};

use crate::RedisServer;
use crate::tls::Certificates;

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "mymaster";

/// One primary, one replica, three sentinels.
pub struct SentinelDeployment {
    /// `servers[0]` started as the primary, `servers[1]` as its replica; after a failover
    /// the roles are swapped (see [`primary_index`](Self::primary_index)).
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
    /// With TLS on the nodes: `servers[i]`'s TLS port (the one the sentinels name).
    pub tls_ports: Vec<u16>,
}

impl SentinelDeployment {
    /// Starts the servers, waits for the replica to be in sync, starts the sentinels and
    /// waits until each of them knows the replica (a forced failover needs one).
    pub fn start() -> SentinelDeployment {
        SentinelDeployment::start_protected(None, None)
    }

    /// The same deployment with two passwords, as managed set-ups have them: the sentinels
    /// need `sentinel_password` (their own `requirepass`), the primary and the replica
    /// `node_password` (the sentinels monitor them with `sentinel auth-pass`, the replica
    /// replicates with `masterauth`). The servers' and sentinels' URLs carry their password.
    pub fn start_with_passwords(
        sentinel_password: &str,
        node_password: &str,
    ) -> SentinelDeployment {
        SentinelDeployment::start_protected(Some((sentinel_password, node_password)), None)
    }

    /// The same deployment with TLS on the data nodes only (as managed set-ups often have
    /// it): the primary and the replica also listen with TLS (`tls_ports`, certificates
    /// from `certificates`: the server's for 127.0.0.1, signed by `ca.crt`), replicate and
    /// are monitored over it; the sentinels listen without TLS (they use the certificates
    /// only to reach the nodes). The plain ports stay open for the harness's assertions.
    pub fn start_with_tls_nodes(certificates: &Certificates) -> SentinelDeployment {
        SentinelDeployment::start_protected(None, Some(certificates))
    }

    fn start_protected(
        passwords: Option<(&str, &str)>,
        tls: Option<&Certificates>,
    ) -> SentinelDeployment {
        let path = |name: &str| {
            tls.map(|certificates| certificates.path(name).to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
        let tls_files = [
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            "--tls-replication",
            "yes",
        ];
        // A node, and the port the replica and the sentinels reach it on (its TLS port
        // with TLS).
        let node = |extra: &[&str]| {
            let mut args = extra.to_vec();
            let tls_port = crate::free_port().to_string();
            if tls.is_some() {
                args.extend(["--tls-port", &tls_port]);
                args.extend(tls_files);
            }
            let server = match passwords {
                None => RedisServer::start_with(&args),
                Some((_, password)) => {
                    args.extend(["--requirepass", password, "--masterauth", password]);
                    RedisServer::start_with_password(None, &args, password)
                }
            };
            let port = match tls {
                Some(_) => tls_port.parse::<u16>().unwrap(),
                None => server.port(),
            };
            (server, port)
        };
        let (primary, primary_port) = node(&[]);
        let (replica, replica_port) =
            node(&["--replicaof", "127.0.0.1", &primary_port.to_string()]);
        let tls_ports = match tls {
            Some(_) => vec![primary_port, replica_port],
            None => Vec::new(),
        };
        wait_for(Duration::from_secs(20), "replica in sync", || {
            info(&replica, "replication").contains("master_link_status:up")
        });
        let mut config = format!(
            "sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 5000\n\
             sentinel parallel-syncs {MASTER} 1"
        );
        if let Some((sentinel_password, node_password)) = passwords {
            config.push_str(&format!(
                "\nsentinel auth-pass {MASTER} {node_password}\nrequirepass {sentinel_password}"
            ));
        }
        if tls.is_some() {
            // Outgoing TLS to the nodes; the sentinels' own port stays plain.
            config.push_str(&format!(
                "\ntls-replication yes\ntls-cert-file {cert}\ntls-key-file {key}\n\
                 tls-ca-cert-file {ca}"
            ));
        }
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| match passwords {
                None => RedisServer::start_with_config(Some(&config), &["--sentinel"]),
                Some((password, _)) => {
                    RedisServer::start_with_password(Some(&config), &["--sentinel"], password)
                }
            })
            .collect();
        let deployment = SentinelDeployment {
            servers: vec![primary, replica],
            sentinels,
            tls_ports,
        };
        for sentinel in &deployment.sentinels {
            wait_for(Duration::from_secs(20), "sentinel sees the replica", || {
                replicas_known(sentinel) >= 1
            });
        }
        deployment
    }

    /// The sentinels' URLs.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The port the first sentinel names as the primary.
    pub fn primary_port(&self) -> u16 {
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut self.sentinels[0].conn())
            .unwrap();
        port
    }

    /// The index in `servers` of the server the first sentinel names as the primary.
    pub fn primary_index(&self) -> usize {
        let port = self.primary_port();
        self.servers
            .iter()
            .position(|server| server.port() == port)
            .or_else(|| self.tls_ports.iter().position(|tls_port| *tls_port == port))
            .expect("the primary is one of ours")
    }

    /// Forces a failover with `SENTINEL FAILOVER` and waits (at most 30 s) until the first
    /// sentinel names the other server and that server says `role:master`. Returns how
    /// long that took. The old primary is demoted later (see [`demoted`](Self::demoted)).
    pub fn failover(&self) -> Duration {
        let old = self.primary_index();
        let new = 1 - old;
        let started = Instant::now();
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER)
            .query(&mut self.sentinels[0].conn())
            .unwrap();
        wait_for(Duration::from_secs(30), "the failover", || {
            self.primary_port() == self.servers[new].port()
                && info(&self.servers[new], "replication").contains("role:master")
        });
        started.elapsed()
    }

    /// Waits (at most 30 s) until server `old` says `role:slave` with its link up: the
    /// sentinels demoted the old primary. Returns how long that took.
    pub fn demoted(&self, old: usize) -> Duration {
        wait_for(
            Duration::from_secs(30),
            "the old primary's demotion",
            || {
                let old_info = info(&self.servers[old], "replication");
                old_info.contains("role:slave") && old_info.contains("master_link_status:up")
            },
        )
    }
}

/// `INFO section` of `server`.
pub fn info(server: &RedisServer, section: &str) -> String {
    // A node that is being demoted drops its clients: a refused or reset connection reads as
    // no answer yet (empty), as a failed INFO does, and the caller's bounded poll asks again.
    let Ok(mut conn) = server
        .redis()
        .get_connection_with_timeout(Duration::from_secs(2))
    else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg(section)
        .query(&mut conn)
        .unwrap_or_default()
}

/// How many replicas of [`MASTER`] `sentinel` knows and considers up.
fn replicas_known(sentinel: &RedisServer) -> usize {
    let replicas: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
        .arg("REPLICAS")
        .arg(MASTER)
        .query(&mut sentinel.conn())
        .unwrap_or_default();
    replicas
        .iter()
        .filter(|replica| {
            replica
                .get("flags")
                .is_some_and(|flags| !flags.contains("s_down") && !flags.contains("disconnected"))
        })
        .count()
}
