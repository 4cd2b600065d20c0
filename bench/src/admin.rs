//! What the bench reads besides the contenders' own timings: the server's counters
//! (`INFO commandstats`, `INFO stats`, `DBSIZE`), a `MONITOR` tap that tells requests sent
//! by clients from commands run inside Lua, and this process's CPU, memory and writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::BenchResult;

/// A connection of the bench's own, for counters and clean-up.
#[derive(Clone)]
pub(crate) struct Admin {
    connection: MultiplexedConnection,
    address: Option<String>,
}

/// The server's per-command counters since the last reset, without the bench's own
/// administrative commands.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct CommandStats {
    /// Calls per command name (as Redis counts them: commands run inside Lua included).
    pub(crate) calls: BTreeMap<String, u64>,
    /// Microseconds the server spent per command name.
    pub(crate) usec: BTreeMap<String, u64>,
    /// Calls that failed or were rejected (e.g. NOSCRIPT), per command name.
    pub(crate) errors: BTreeMap<String, u64>,
}

impl CommandStats {
    /// All calls, the bench's own administrative ones excluded.
    pub(crate) fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// All server time in microseconds, the bench's own commands excluded.
    pub(crate) fn total_usec(&self) -> u64 {
        self.usec.values().sum()
    }

    /// Adds another server's counters to these (the Redlock masters, summed).
    pub(crate) fn add(&mut self, other: &CommandStats) {
        for (mine, theirs) in [
            (&mut self.calls, &other.calls),
            (&mut self.usec, &other.usec),
            (&mut self.errors, &other.errors),
        ] {
            for (name, value) in theirs {
                *mine.entry(name.clone()).or_insert(0) += value;
            }
        }
    }

    /// Calls of one command (lower case, e.g. `evalsha`).
    pub(crate) fn get(&self, name: &str) -> u64 {
        self.calls.get(name).copied().unwrap_or(0)
    }

    /// Server time of one command's calls, in microseconds.
    pub(crate) fn usec(&self, name: &str) -> u64 {
        self.usec.get(name).copied().unwrap_or(0)
    }
}

/// Commands the bench itself sends around a measurement; they are not the contenders'.
const OWN_COMMANDS: &[&str] = &[
    "info",
    "config|resetstat",
    "config",
    "monitor",
    "echo",
    "dbsize",
];

impl Admin {
    /// Connects to `url`.
    pub(crate) async fn connect(url: &str) -> BenchResult<Self> {
        let client = redis::Client::open(url)?;
        let connection = client.get_multiplexed_async_connection().await?;
        Ok(Admin {
            connection,
            address: plain_address(url),
        })
    }

    /// `CONFIG RESETSTAT`: zeroes the command statistics and `INFO stats` counters.
    pub(crate) async fn reset_stats(&self) -> BenchResult<()> {
        let mut connection = self.connection.clone();
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut connection)
            .await?;
        Ok(())
    }

    async fn info(&self, section: &str) -> BenchResult<String> {
        let mut connection = self.connection.clone();
        Ok(redis::cmd("INFO")
            .arg(section)
            .query_async::<String>(&mut connection)
            .await?)
    }

    /// `INFO commandstats`, parsed.
    pub(crate) async fn command_stats(&self) -> BenchResult<CommandStats> {
        let text = self.info("commandstats").await?;
        let mut stats = CommandStats::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            if OWN_COMMANDS.contains(&name) {
                continue;
            }
            for field in fields.split(',') {
                match field.split_once('=') {
                    Some(("calls", value)) => {
                        stats
                            .calls
                            .insert(name.to_owned(), value.trim().parse().unwrap_or(0));
                    }
                    Some(("failed_calls" | "rejected_calls", value)) => {
                        *stats.errors.entry(name.to_owned()).or_insert(0) +=
                            value.trim().parse().unwrap_or(0);
                    }
                    Some(("usec", value)) => {
                        stats
                            .usec
                            .insert(name.to_owned(), value.trim().parse().unwrap_or(0));
                    }
                    _ => {}
                }
            }
        }
        Ok(stats)
    }

    /// One numeric field of `INFO <section>` (e.g. `total_reads_processed`).
    pub(crate) async fn info_field(&self, section: &str, field: &str) -> BenchResult<u64> {
        let text = self.info(section).await?;
        text.lines()
            .find_map(|line| {
                line.strip_prefix(field)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .and_then(|value| value.trim().parse().ok())
            })
            .ok_or_else(|| format!("INFO {section} has no field {field}").into())
    }

    /// One decimal field of `INFO <section>` (e.g. `used_cpu_user`, in seconds).
    pub(crate) async fn info_decimal(&self, section: &str, field: &str) -> BenchResult<f64> {
        self.info_text(section, field)
            .await?
            .parse()
            .map_err(|err| format!("INFO {section} {field}: {err}").into())
    }

    /// One text field of `INFO <section>` (e.g. `redis_version`).
    pub(crate) async fn info_text(&self, section: &str, field: &str) -> BenchResult<String> {
        let text = self.info(section).await?;
        text.lines()
            .find_map(|line| {
                line.strip_prefix(field)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .map(|value| value.trim().to_owned())
            })
            .ok_or_else(|| format!("INFO {section} has no field {field}").into())
    }

    /// `DBSIZE`.
    pub(crate) async fn dbsize(&self) -> BenchResult<u64> {
        let mut connection = self.connection.clone();
        Ok(redis::cmd("DBSIZE")
            .query_async::<u64>(&mut connection)
            .await?)
    }

    /// Deletes keys (clean-up between runs).
    pub(crate) async fn del(&self, keys: &[String]) -> BenchResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut connection = self.connection.clone();
        redis::cmd("DEL")
            .arg(keys)
            .query_async::<u64>(&mut connection)
            .await?;
        Ok(())
    }

    /// Deletes every key matching the glob `pattern` (`SCAN`, bounded to 10,000 pages).
    pub(crate) async fn del_matching(&self, pattern: &str) -> BenchResult<()> {
        let mut connection = self.connection.clone();
        let mut cursor = 0u64;
        for _ in 0..10_000 {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1_000)
                .query_async(&mut connection)
                .await?;
            self.del(&keys).await?;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Starts a `MONITOR` tap, when the server is reachable without a password.
    pub(crate) async fn monitor(&self) -> BenchResult<Option<Monitor>> {
        let Some(address) = &self.address else {
            return Ok(None);
        };
        Monitor::start(address).await.map(Some)
    }

    /// Sends the marker that ends a monitor tap.
    async fn echo(&self, text: &str) -> BenchResult<()> {
        let mut connection = self.connection.clone();
        redis::cmd("ECHO")
            .arg(text)
            .query_async::<String>(&mut connection)
            .await?;
        Ok(())
    }
}

/// `host:port` of a `redis://host:port[/db]` URL without credentials; `None` otherwise.
fn plain_address(url: &str) -> Option<String> {
    let rest = url.strip_prefix("redis://")?;
    let address = rest.split('/').next()?;
    if address.contains('@') || address.is_empty() {
        return None;
    }
    Some(address.to_owned())
}

/// What the server executed while a [`Monitor`] listened.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Monitored {
    /// Commands sent by clients (EVALSHA, SET, SUBSCRIBE, ...).
    pub(crate) requests: u64,
    /// Commands run inside Lua scripts.
    pub(crate) in_lua: u64,
}

/// A `MONITOR` connection counting what the server runs.
pub(crate) struct Monitor {
    requests: Arc<AtomicU64>,
    in_lua: Arc<AtomicU64>,
    marker: Arc<Notify>,
    reader: JoinHandle<()>,
}

/// The `ECHO` argument that closes a tap.
const MARKER: &str = "lock-bench-monitor-end";

impl Monitor {
    async fn start(address: &str) -> BenchResult<Self> {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(b"MONITOR\r\n").await?;
        let mut reader = BufReader::new(stream);
        let mut first = String::new();
        reader.read_line(&mut first).await?;
        if !first.starts_with("+OK") {
            return Err(format!("MONITOR refused: {}", first.trim()).into());
        }
        let requests = Arc::new(AtomicU64::new(0));
        let in_lua = Arc::new(AtomicU64::new(0));
        let marker = Arc::new(Notify::new());
        let (r, l, m) = (requests.clone(), in_lua.clone(), marker.clone());
        let reader = tokio::spawn(async move {
            let mut line = String::new();
            // Bounded: the tap is aborted after its marker, or when the server goes.
            loop {
                line.clear();
                match reader.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if line.contains(MARKER) {
                    m.notify_one();
                } else if line.contains(" lua] ") {
                    l.fetch_add(1, Ordering::Relaxed);
                } else if line.starts_with('+') {
                    r.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Monitor {
            requests,
            in_lua,
            marker,
            reader,
        })
    }

    /// Sends the marker through `admin`, waits until the tap has read everything before
    /// it, and returns the counts.
    pub(crate) async fn finish(self, admin: &Admin) -> BenchResult<Monitored> {
        let seen = self.marker.notified();
        tokio::pin!(seen);
        seen.as_mut().enable();
        admin.echo(MARKER).await?;
        let arrived = tokio::time::timeout(Duration::from_secs(10), seen).await;
        arrived.map_err(|_| "the MONITOR tap never saw its end marker")?;
        Ok(Monitored {
            requests: self.requests.load(Ordering::Relaxed),
            in_lua: self.in_lua.load(Ordering::Relaxed),
        })
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        // A tap left behind (a measurement that failed half-way) must not keep reading.
        self.reader.abort();
    }
}

/// This process's resource use so far: CPU time and context switches.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Usage {
    /// User + system CPU time.
    pub(crate) cpu: Duration,
    /// Voluntary + involuntary context switches of all threads.
    pub(crate) switches: u64,
}

impl Usage {
    /// What was used since `earlier`.
    pub(crate) fn since(self, earlier: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            switches: self.switches.saturating_sub(earlier.switches),
        }
    }
}

/// `getrusage(RUSAGE_SELF)`.
pub(crate) fn usage() -> Usage {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is given, which points
    // to a zeroed value of that type; RUSAGE_SELF is always valid.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return Usage::default();
        }
        usage.assume_init()
    };
    let micros = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    Usage {
        cpu: Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime)),
        switches: (usage.ru_nvcsw + usage.ru_nivcsw) as u64,
    }
}

/// This process's CPU time (user + system) so far.
pub(crate) fn cpu_time() -> Duration {
    usage().cpu
}

/// This process's resident set size in bytes (`/proc/self/statm`), 0 where unavailable.
pub(crate) fn rss_bytes() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// Bytes the allocator has handed out and not yet taken back (glibc `mallinfo2`: arena
/// chunks in use plus mmapped blocks). Unlike RSS, it does not hide memory reused from
/// earlier scenarios.
pub(crate) fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics and returns them by value.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}
