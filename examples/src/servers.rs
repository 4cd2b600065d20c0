//! Throwaway `redis-server` processes for the examples, so that each example runs with one
//! command on a machine where nothing listens yet. Loopback only, no persistence; the
//! servers are killed when [`Servers`] is dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_runtime::Config;

/// How long a fresh server (or cluster) may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// The lock topologies the examples can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One Redis server.
    Single,
    /// Redlock over three independent masters.
    Redlock,
    /// A Redis Cluster of three masters.
    Cluster,
}

impl Mode {
    /// The lock configuration for nodes at `urls` in this mode.
    pub fn config(self, urls: &[String]) -> Config {
        match self {
            Mode::Single => Config::single(
                urls.first()
                    .cloned()
                    .unwrap_or_else(|| lock_runtime::DEFAULT_REDIS_URL.to_owned()),
            ),
            Mode::Redlock => Config::redlock(urls.to_vec()),
            Mode::Cluster => Config::cluster(urls.to_vec()),
        }
    }

    /// The name `--mode` takes.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Redlock => "redlock",
            Mode::Cluster => "cluster",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "single" => Ok(Mode::Single),
            "redlock" => Ok(Mode::Redlock),
            "cluster" => Ok(Mode::Cluster),
            other => Err(format!(
                "unknown mode {other:?}; use single, redlock or cluster"
            )),
        }
    }
}

/// The servers an example runs against: either found (`REDIS_URL`, or a server on the
/// default port) or started here and stopped on drop.
pub struct Servers {
    /// `redis://` URLs of every node.
    pub urls: Vec<String>,
    /// The topology.
    pub mode: Mode,
    children: Vec<(Child, PathBuf)>,
}

impl Servers {
    /// Servers for `mode`. Single mode uses `REDIS_URL` when set, else a server already
    /// answering on 127.0.0.1:6379, else a throwaway one; the other modes always start
    /// their own nodes.
    pub fn for_mode(mode: Mode) -> Result<Servers, String> {
        match mode {
            Mode::Single => {
                if let Ok(url) = std::env::var(lock_runtime::REDIS_URL_ENV) {
                    return Ok(Servers::found(vec![url], mode));
                }
                if answers(lock_runtime::DEFAULT_REDIS_URL) {
                    return Ok(Servers::found(
                        vec![lock_runtime::DEFAULT_REDIS_URL.to_owned()],
                        mode,
                    ));
                }
                Servers::start(1, mode, &[])
            }
            Mode::Redlock => Servers::start(3, mode, &[]),
            Mode::Cluster => {
                let servers = Servers::start(
                    3,
                    mode,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                    ],
                )?;
                servers.create_cluster()?;
                Ok(servers)
            }
        }
    }

    fn found(urls: Vec<String>, mode: Mode) -> Servers {
        Servers {
            urls,
            mode,
            children: Vec::new(),
        }
    }

    fn start(count: usize, mode: Mode, extra: &[&str]) -> Result<Servers, String> {
        let mut servers = Servers::found(Vec::new(), mode);
        for _ in 0..count {
            let port = free_port()?;
            let dir =
                std::env::temp_dir().join(format!("lock-example-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&dir)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|err| {
                    format!(
                        "cannot start redis-server ({err}); install it with \
                         ./scripts/ensure-redis or set REDIS_URL"
                    )
                })?;
            servers.children.push((child, dir));
            let url = format!("redis://127.0.0.1:{port}");
            let deadline = Instant::now() + READY_TIMEOUT;
            while !answers(&url) {
                if Instant::now() > deadline {
                    return Err(format!("redis-server on port {port} did not start"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            servers.urls.push(url);
        }
        Ok(servers)
    }

    fn create_cluster(&self) -> Result<(), String> {
        let addresses: Vec<String> = self
            .urls
            .iter()
            .map(|url| url.trim_start_matches("redis://").to_owned())
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .map_err(|err| format!("cannot run redis-cli: {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
            ));
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = self.urls.iter().all(|url| {
                query(url, redis::cmd("CLUSTER").arg("INFO"))
                    .is_some_and(|info: String| info.contains("cluster_state:ok"))
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("the cluster did not reach cluster_state:ok".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The lock configuration for these servers.
    pub fn config(&self) -> Config {
        self.mode.config(&self.urls)
    }

    /// Whether the servers were started here (and will be stopped on drop).
    pub fn started_here(&self) -> bool {
        !self.children.is_empty()
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for (child, dir) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|err| format!("no free loopback port: {err}"))
}

fn answers(url: &str) -> bool {
    query::<String>(url, &redis::cmd("PING")).is_some()
}

fn query<T: redis::FromRedisValue>(url: &str, command: &redis::Cmd) -> Option<T> {
    let client = redis::Client::open(url).ok()?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    command.query(&mut connection).ok()
}
