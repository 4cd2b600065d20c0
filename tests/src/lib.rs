//! The test harness: real `redis-server` processes on free loopback ports.
//!
//! Each [`RedisServer`] runs without persistence (unless asked), is ready when `start`
//! returns, and is killed when dropped. It is started behind a tiny shell wrapper that
//! holds a pipe from this process: if the test process dies without running destructors
//! (a panic in a static, a killed run), the pipe closes and the wrapper kills the server,
//! so no server outlives its test run.
//!
//! Test code may panic freely: a harness that cannot start Redis fails the test loudly.
#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use once_cell::sync::{Lazy, OnceCell};

pub mod checkers;
pub mod child;
pub mod cluster;
pub mod events;
pub mod failover;
pub mod proxy;
pub mod sentinel;
pub mod tls;

/// How long a server may take to answer PING after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The ports [`free_port`] handed out in this process. A server that a test kills and
/// restarts keeps its port while it is down; without this, a test running beside it could
/// be handed that port, and the two servers' tests would share one server (the restart's
/// PING answered by the other test's server), until one of them stopped it.
static HANDED_OUT: Lazy<std::sync::Mutex<std::collections::HashSet<u16>>> =
    Lazy::new(Default::default);

/// A free TCP port on 127.0.0.1 that this process has not handed out before (the OS picks
/// it; a race with another process is possible, and `start` retries on a new port when it
/// happens).
pub fn free_port() -> u16 {
    for _ in 0..1_000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("no free loopback port");
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
    panic!("no loopback port left that this process has not used");
}

/// A real redis-server on 127.0.0.1.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// A config file given before the options (sentinels need one they can rewrite).
    config_file: Option<PathBuf>,
    /// The default user's password, when the server requires one (see
    /// [`start_with_password`](Self::start_with_password)).
    password: Option<String>,
    wrapper: Option<(Child, ChildStdin)>,
    pid: u32,
    /// The server's binary: `redis-server`, or `valkey-server` (see
    /// [`start_valkey`](Self::start_valkey)).
    binary: &'static str,
}

impl RedisServer {
    /// Starts a server without persistence on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (e.g. `["--appendonly", "yes"]`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_with_config(None, extra)
    }

    /// Starts a Valkey server (`valkey-server`, 8 from Debian's bookworm-backports, which
    /// `scripts/ensure-redis` installs) with extra arguments: for what Redis 7.0 lacks
    /// (`WAITAOF`).
    pub fn start_valkey(extra: &[&str]) -> RedisServer {
        RedisServer::start_configured(None, extra, None, "valkey-server")
    }

    /// Starts a server with a config file (written into its directory) and extra arguments,
    /// e.g. a sentinel: `start_with_config(Some("sentinel monitor ..."), &["--sentinel"])`.
    pub fn start_with_config(config: Option<&str>, extra: &[&str]) -> RedisServer {
        RedisServer::start_configured(config, extra, None, "redis-server")
    }

    /// Starts a server whose default user needs `password`: the caller sets it (`requirepass`
    /// in `config` or `--requirepass` in `extra`); the harness authenticates with it, and
    /// [`url`](Self::url) carries it (`redis://:PASSWORD@127.0.0.1:PORT`).
    pub fn start_with_password(
        config: Option<&str>,
        extra: &[&str],
        password: &str,
    ) -> RedisServer {
        RedisServer::start_configured(config, extra, Some(password), "redis-server")
    }

    fn start_configured(
        config: Option<&str>,
        extra: &[&str],
        password: Option<&str>,
        binary: &'static str,
    ) -> RedisServer {
        let dir =
            std::env::temp_dir().join(format!("lock-tests-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let config_file = config.map(|contents| {
            let path = dir.join("redis.conf");
            std::fs::write(&path, format!("{contents}\n")).unwrap();
            path
        });
        let mut server = RedisServer {
            port: 0,
            dir,
            extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
            config_file,
            password: password.map(str::to_owned),
            wrapper: None,
            pid: 0,
            binary,
        };
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(err) => last_error = err,
            }
        }
        panic!("could not start {binary}: {last_error}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("sh");
        // The server runs in the background; the wrapper prints its pid, then waits for
        // this process's pipe to close (drop, exit or crash) and kills the server.
        command
            .arg("-c")
            .arg(
                r#""$LOCK_TESTS_SERVER" "$@" >/dev/null 2>&1 & echo $!; read -r _; kill -9 $! 2>/dev/null"#,
            )
            .env("LOCK_TESTS_SERVER", self.binary)
            .arg("redis-wrapper")
            .args(&self.config_file)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(["--logfile", self.dir.join("redis.log").to_str().unwrap()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(&self.extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command
            .spawn()
            .map_err(|err| format!("cannot run sh/redis-server: {err}"))?;
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .map_err(|err| err.to_string())?;
        self.pid = line
            .trim()
            .parse()
            .map_err(|_| format!("wrapper said {line:?}"))?;
        self.wrapper = Some((child, stdin));
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if self.ping() {
                return self.answered_by_own_process();
            }
            if !self.process_alive() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        self.stop();
        Err(format!(
            "redis-server on port {} did not become ready: {log}",
            self.port
        ))
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut conn).is_ok()
    }

    /// Ok when the server that answers on the port is the process this harness started
    /// (`INFO server`'s `process_id`): not another server that took the port first.
    fn answered_by_own_process(&mut self) -> Result<(), String> {
        let info: Result<String, _> = self
            .redis()
            .get_connection_with_timeout(Duration::from_secs(2))
            .and_then(|mut conn| redis::cmd("INFO").arg("server").query(&mut conn));
        let pid = info.ok().and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("process_id:"))
                .and_then(|pid| pid.trim().parse::<u32>().ok())
        });
        if pid == Some(self.pid) || pid.is_none() {
            return Ok(());
        }
        self.stop();
        Err(format!(
            "port {} is served by another process ({pid:?}, not {})",
            self.port, self.pid
        ))
    }

    fn process_alive(&self) -> bool {
        std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
            && !std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                .unwrap_or_default()
                .contains(") Z ")
    }

    /// `redis://127.0.0.1:PORT` (`redis://:PASSWORD@127.0.0.1:PORT` for a server started
    /// with a password).
    pub fn url(&self) -> String {
        match &self.password {
            None => format!("redis://127.0.0.1:{}", self.port),
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", self.port),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// kill -9 the server (it stays down until [`restart`](Self::restart)).
    pub fn kill9(&mut self) {
        self.signal("KILL");
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.process_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.reap_wrapper();
    }

    /// Starts the server again on the same port with the same arguments.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn().unwrap();
    }

    /// Sends a signal by name (`STOP`, `CONT`, `KILL`, ...) to the server process.
    pub fn signal(&self, name: &str) {
        // Quiet: a server already gone (killed before a restart) is not news.
        let _ = Command::new("kill")
            .args([format!("-{name}"), self.pid.to_string()])
            .stderr(Stdio::null())
            .status();
    }

    fn reap_wrapper(&mut self) {
        if let Some((mut child, stdin)) = self.wrapper.take() {
            drop(stdin);
            let _ = child.wait();
        }
    }

    fn stop(&mut self) {
        self.signal("KILL");
        self.reap_wrapper();
    }

    /// A plain redis-rs client for assertions.
    pub fn redis(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A blocking connection for assertions.
    pub fn conn(&self) -> redis::Connection {
        self.redis()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    /// A lock client of its own on this server.
    pub fn lock_client(&self) -> lock_runtime::LockClient {
        lock_runtime::LockClient::new(lock_runtime::Config::single(self.url())).unwrap()
    }

    /// How many times the server executed `command` (lower-case, e.g. `set`), from
    /// `INFO commandstats`. Scripts count as `fcall` or `evalsha` (and the commands they
    /// run): count them with [`script_calls`](Self::script_calls).
    pub fn calls(&self, command: &str) -> u64 {
        self.command_stat(command, "calls")
    }

    /// How many script calls the server executed, of either kind: `FCALL` (a server with
    /// Functions) and `EVALSHA` (one without, and the watchdog's batched renewals).
    pub fn script_calls(&self) -> u64 {
        script_stat_on(&mut self.conn(), "calls")
    }

    /// How many of those failed (a missing function or script before a reload, among others).
    pub fn failed_script_calls(&self) -> u64 {
        script_stat_on(&mut self.conn(), "failed_calls")
    }

    /// How many of those calls failed (e.g. EVALSHA answered NOSCRIPT before a reload).
    pub fn failed_calls(&self, command: &str) -> u64 {
        self.command_stat(command, "failed_calls")
    }

    fn command_stat(&self, command: &str, field: &str) -> u64 {
        command_stat_on(&mut self.conn(), command, field)
    }

    /// Every command the server executed since the last [`reset_stats`](Self::reset_stats)
    /// (commands inside Lua included), but the harness's own `INFO` and `CONFIG`.
    pub fn server_commands(&self) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        calls_per_command(&info)
            .into_iter()
            .filter(|(_, name)| *name != "info" && !name.starts_with("config"))
            .map(|(calls, _)| calls)
            .sum()
    }

    /// Every command's calls since the last [`reset_stats`](Self::reset_stats), most called
    /// first (`fcall=120, set=40`): what a count that came out high was made of.
    pub fn command_calls(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap_or_default();
        let mut calls = calls_per_command(&info);
        calls.sort_unstable_by(|a, b| b.cmp(a));
        let named: Vec<String> = calls
            .iter()
            .map(|(calls, name)| format!("{name}={calls}"))
            .collect();
        named.join(", ")
    }

    /// Resets `INFO commandstats`.
    pub fn reset_stats(&self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.conn())
            .unwrap();
    }

    /// The number of keys in db 0.
    pub fn dbsize(&self) -> u64 {
        redis::cmd("DBSIZE").query(&mut self.conn()).unwrap()
    }

    /// Whether db 0 empties within `bound`: a process that waited in a queue keeps its
    /// liveness key (`~lock/alive/…`) up to one liveness lease (1 s) after its last wait,
    /// while every lock and queue key is gone at once.
    pub async fn until_empty(&self, bound: Duration) -> bool {
        until(bound, Duration::from_millis(20), || self.dbsize() == 0)
            .await
            .is_some()
    }

    /// GET as an optional string.
    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query(&mut self.conn()).unwrap()
    }

    /// How many waiters (processes: one entry each) the Redis queue of `lock` holds; `lock`
    /// without a hash tag (its queue is `~lock/queue{LOCK}`).
    pub fn queued(&self, lock: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(format!("~lock/queue{{{lock}}}"))
            .query(&mut self.conn())
            .unwrap()
    }

    /// Waits (bounded: 5 s) until the Redis queue of `lock` holds `count` waiters.
    pub async fn until_queued(&self, lock: &str, count: usize) {
        for _ in 0..2500 {
            if self.queued(lock) >= count {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        panic!(
            "only {} queued on {lock}, expected {count}",
            self.queued(lock)
        );
    }

    /// PTTL in milliseconds (-2 missing, -1 no expiry).
    pub fn pttl(&self, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(&mut self.conn()).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One server shared by the tests of a binary that use the *global* client (the attribute,
/// `Lock::new`), with the global client initialised to it.
///
/// The global client binds its connections to the Tokio runtime that first uses it, so
/// such tests run on [`runtime()`] through [`block_on`] instead of `#[tokio::test]`.
pub fn shared_server() -> &'static RedisServer {
    static SERVER: Lazy<RedisServer> = Lazy::new(RedisServer::start);
    static INIT: OnceCell<()> = OnceCell::new();
    INIT.get_or_init(|| {
        lock_runtime::init(lock_runtime::Config::single(SERVER.url())).unwrap();
    });
    &SERVER
}

/// A fresh multi-thread runtime with two workers (the machine's cores): for a test, a row
/// or a child process that wants a runtime of its own.
pub fn two_worker_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Waits (bounded: 5 s) until `count` tasks of `client` wait for a lock (in its local
/// queues, or leading its wait in Redis).
pub async fn until_waiting(client: &lock_runtime::LockClient, count: usize) {
    for _ in 0..2500 {
        if client.waiting().0 >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("only {:?} waiting, expected {count}", client.waiting());
}

/// Counts bodies that run while another is inside: every guarded body calls
/// [`enter`](Overlaps::enter) first and drops what it returns last.
#[derive(Debug, Clone, Default)]
pub struct Overlaps {
    inside: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A body inside [`Overlaps`]; it leaves when dropped.
#[derive(Debug)]
pub struct Inside(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Overlaps {
    /// A body enters; an overlap is counted when another is inside.
    pub fn enter(&self) -> Inside {
        use std::sync::atomic::Ordering;
        if self.inside.fetch_add(1, Ordering::SeqCst) > 0 {
            self.seen.fetch_add(1, Ordering::SeqCst);
        }
        Inside(self.inside.clone())
    }

    /// How many bodies ran while another was inside.
    pub fn count(&self) -> usize {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs `future` on a fresh [`two_worker_runtime`], one such call at a time in this test
/// binary: for tests that measure latencies, which two at once on two cores would spoil.
pub fn one_at_a_time<F: std::future::Future>(future: F) -> F::Output {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    two_worker_runtime().block_on(future)
}

/// The multi-thread runtime shared by the tests of one binary.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: Lazy<tokio::runtime::Runtime> = Lazy::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap()
    });
    &RUNTIME
}

/// Runs `future` on [`runtime()`] from the calling thread, with [`shared_server()`] up and
/// the global client set: for tests that read what the future does through this thread's
/// own recorder (`metrics::with_local_recorder`). Other tests are plain `#[tokio::test]`s.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    shared_server();
    runtime().block_on(future)
}

/// The longest a queue's ttls hash outlives its queue: the foreign-window schedule's memory
/// (prelude.lua's `forget`: the window period, at most 16 s, and one second).
pub const TTLS_MEMORY_MS: i64 = 17_000;

/// What the channel starts with on which a client hears that an operator released one of
/// its locks (`~lock/notice/<client id>`, one per client that renewed a lease, for the
/// client's life).
pub const NOTICE_CHANNEL: &str = "~lock/notice/";

/// `PUBSUB CHANNELS *` on `admin`, without the clients' notice channels ([`NOTICE_CHANNEL`]:
/// each lives as long as its client), sorted.
pub fn lock_channels(admin: &mut redis::Connection) -> Vec<String> {
    let all: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("*")
        .query(admin)
        .unwrap();
    let mut channels: Vec<String> = all
        .into_iter()
        .filter(|channel| !channel.starts_with(NOTICE_CHANNEL))
        .collect();
    channels.sort();
    channels
}

/// Whether `key`, left after every queue emptied, is a queue's ttls hash (`~lock/ttls{KEY}`,
/// or `~lock/ttls/KEY` for a key with a hash tag) that ends by itself within
/// [`TTLS_MEMORY_MS`]: not a leftover.
pub fn ends_by_itself(conn: &mut redis::Connection, key: &str) -> bool {
    if !(key.starts_with("~lock/ttls{") || key.starts_with("~lock/ttls/")) {
        return false;
    }
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap_or(-1);
    (0..=TTLS_MEMORY_MS).contains(&pttl)
}

/// `field` of `command` in `INFO commandstats` (0 when the server never ran it), over a
/// connection the caller already holds: for rows that refuse new connections for a while.
pub fn command_stat_on(conn: &mut redis::Connection, command: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|pair| pair.strip_prefix(field)?.strip_prefix('='))
        })
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// Each command's `calls` in an `INFO commandstats` reply, with its name (`fcall`,
/// `function|load`).
fn calls_per_command(info: &str) -> Vec<(u64, &str)> {
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, stats) = line.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|pair| pair.strip_prefix("calls="))?;
            Some((calls.parse().ok()?, name))
        })
        .collect()
}

/// [`command_stat_on`] summed over the commands that call a script: `fcall` and `evalsha`.
pub fn script_stat_on(conn: &mut redis::Connection, field: &str) -> u64 {
    SCRIPT_COMMANDS
        .iter()
        .map(|command| command_stat_on(conn, command, field))
        .sum()
}

/// The commands a script call arrives as (lower case), for `INFO commandstats` and
/// `MONITOR`: `FCALL` where the server has Functions, `EVALSHA` elsewhere.
pub const SCRIPT_COMMANDS: [&str; 2] = ["fcall", "evalsha"];

/// Polls `condition` (a server- or client-side state with no event to wait on) every
/// `every`, for at most `bound`; how long it took to hold, or `None`.
pub async fn until(
    bound: Duration,
    every: Duration,
    mut condition: impl FnMut() -> bool,
) -> Option<Duration> {
    let started = Instant::now();
    for _ in 0..1_000_000 {
        if condition() {
            return Some(started.elapsed());
        }
        if started.elapsed() > bound {
            return None;
        }
        tokio::time::sleep(every).await;
    }
    None
}

/// An error and its `source()` chain, as anyhow and tracing print it (bounded).
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut links = vec![err.to_string()];
    let mut next = err.source();
    while let Some(cause) = next {
        assert!(links.len() < 16, "source() chain does not end: {links:?}");
        links.push(cause.to_string());
        next = cause.source();
    }
    links.join(": ")
}

/// Polls `condition` every 20 ms until it holds (how long that took), failing the test
/// after `bound`.
pub fn wait_for(bound: Duration, what: &str, mut condition: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    for _ in 0..100_000 {
        if condition() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < bound,
            "{what} did not happen within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: poll budget spent");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ttls hash that ends by itself is excused in both spellings of its name: a key with
    /// a hash tag names it `~lock/ttls/KEY` (the adversary once reported `~lock/ttls/{x}`,
    /// holding the foreign-window schedule's memory, as a leftover).
    #[test]
    fn a_ttls_hash_with_its_memory_ends_by_itself_whatever_the_key() {
        let server = RedisServer::start();
        let mut conn = server.conn();
        for key in [
            "~lock/ttls{x}",
            "~lock/ttls/{x}",
            "~lock/ttls/{x}-kept",
            "other",
        ] {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("~gap-every")
                .arg(1000)
                .query(&mut conn)
                .unwrap();
            if !key.ends_with("-kept") {
                let _: () = redis::cmd("PEXPIRE")
                    .arg(key)
                    .arg(2000)
                    .query(&mut conn)
                    .unwrap();
            }
        }
        assert!(ends_by_itself(&mut conn, "~lock/ttls{x}"));
        assert!(ends_by_itself(&mut conn, "~lock/ttls/{x}"));
        assert!(!ends_by_itself(&mut conn, "~lock/ttls/{x}-kept"), "no ttl");
        assert!(!ends_by_itself(&mut conn, "other"), "not a ttls hash");
    }
}
