//! Section 4b: the watchdog of one holder on a Redis Cluster. One process holds 10,000
//! leases spread over three masters (throwaway servers started by `bench/run` with
//! `cluster-enabled yes`) and its watchdog renews them; what does that cost each master,
//! and the holder?
//!
//! Per master, over a window after every key is held and one renewal round has passed:
//! read events per second (`INFO stats` `total_reads_processed`: one per request read, or
//! per chunk of a pipeline, so a pipeline per master per round shows as few reads where one
//! request per lease shows as many), commands per second (`total_commands_processed`,
//! commands run inside Lua included) and the server's CPU (`INFO cpu` user + system). For
//! the holder: its CPU (`getrusage`) and the leases it lost (`is_lost()`, 0 expected).

use std::time::Duration;

use futures_util::StreamExt;
use lock_runtime::{Config, LockClient, LockGuard};
use serde::Serialize;
use tokio::time::Instant;

use crate::admin::{self, Admin};
use crate::error::BenchResult;

/// The scenario's name for `BENCH_ONLY`.
pub(crate) const NAME: &str = "cluster-watchdog";

/// Leases held at once.
pub(crate) const LOCKS: u64 = 10_000;

/// Their ttl: the watchdog renews every ttl/3, one round a second.
pub(crate) const TTL: Duration = Duration::from_secs(3);

/// The measured window (six renewal rounds).
pub(crate) const WINDOW: Duration = Duration::from_secs(6);

/// The three masters, each with a connection of the bench's own for its counters.
pub(crate) struct Cluster {
    urls: Vec<String>,
    masters: Vec<Admin>,
}

/// What one master did over the window.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MasterRecord {
    /// `host:port` of the master.
    pub(crate) address: String,
    /// Keys it held while the leases were held (`DBSIZE`).
    pub(crate) keys: u64,
    /// `total_reads_processed` per second: read events, one per request or pipeline chunk.
    pub(crate) reads_per_s: f64,
    /// `total_commands_processed` per second (commands inside Lua included).
    pub(crate) commands_per_s: f64,
    /// `used_cpu_user + used_cpu_sys` over the window, as a share of one core.
    pub(crate) cpu_share: f64,
}

/// One run of section 4b.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ClusterWatchdogRecord {
    /// Which run.
    pub(crate) run: usize,
    /// Leases held.
    pub(crate) locks: u64,
    /// Their ttl in milliseconds.
    pub(crate) ttl_ms: u64,
    /// How long acquiring them all took.
    pub(crate) acquire_s: f64,
    /// The measured window's length.
    pub(crate) window_s: f64,
    /// Every master's figures over the window.
    pub(crate) masters: Vec<MasterRecord>,
    /// The holder's CPU over the window (`getrusage`: this whole process), share of a core.
    pub(crate) client_cpu_share: f64,
    /// Leases reported lost at the end of the window.
    pub(crate) lost: u64,
}

/// One master's counters at one moment.
#[derive(Clone, Copy)]
struct Counters {
    reads: u64,
    commands: u64,
    cpu_s: f64,
}

impl Cluster {
    /// Connects to the masters in `BENCH_CLUSTER_URLS` (comma-separated); `None` when it is
    /// unset (the binary run without `bench/run`).
    pub(crate) async fn from_env() -> BenchResult<Option<Self>> {
        let Ok(list) = std::env::var("BENCH_CLUSTER_URLS") else {
            return Ok(None);
        };
        let urls: Vec<String> = list.split(',').map(|url| url.trim().to_owned()).collect();
        let mut masters = Vec::with_capacity(urls.len());
        for url in &urls {
            masters.push(Admin::connect(url).await?);
        }
        Ok(Some(Cluster { urls, masters }))
    }

    /// The number of masters.
    pub(crate) fn len(&self) -> usize {
        self.masters.len()
    }

    async fn counters(&self) -> BenchResult<Vec<Counters>> {
        let mut all = Vec::with_capacity(self.masters.len());
        for master in &self.masters {
            all.push(Counters {
                reads: master.info_field("stats", "total_reads_processed").await?,
                commands: master
                    .info_field("stats", "total_commands_processed")
                    .await?,
                cpu_s: master.info_decimal("cpu", "used_cpu_user").await?
                    + master.info_decimal("cpu", "used_cpu_sys").await?,
            });
        }
        Ok(all)
    }
}

/// The key of held lease `n` (its hash tag spreads the keys over every slot).
fn key(n: u64) -> String {
    format!("bench:held:{{{n}}}")
}

/// `runs` runs of section 4b, each with a client of its own; failures are noted in
/// `skipped`.
pub(crate) async fn measure(
    cluster: &Cluster,
    runs: usize,
    skipped: &mut Vec<String>,
) -> Vec<ClusterWatchdogRecord> {
    let mut records = Vec::new();
    for run in 0..runs {
        match one_run(cluster, run).await {
            Ok(record) => {
                eprintln!(
                    "run {run} cluster watchdog {} leases: {:.0} reads/s, {:.0} cmds/s, redis-server {:.1}% of a core (all masters), holder {:.1}%, lost {}",
                    record.locks,
                    record.masters.iter().map(|m| m.reads_per_s).sum::<f64>(),
                    record.masters.iter().map(|m| m.commands_per_s).sum::<f64>(),
                    100.0 * record.masters.iter().map(|m| m.cpu_share).sum::<f64>(),
                    100.0 * record.client_cpu_share,
                    record.lost
                );
                records.push(record);
            }
            Err(err) => {
                let note = format!("run {run}, watchdog of a cluster holder: failed: {err}");
                eprintln!("{note}");
                skipped.push(note);
            }
        }
    }
    records
}

async fn one_run(cluster: &Cluster, run: usize) -> BenchResult<ClusterWatchdogRecord> {
    let client = LockClient::new(Config::cluster(cluster.urls.iter().cloned()))?;
    let (held, acquire_s) = take_all(&client).await?;
    // One renewal round passes (every ttl/3) before the window opens.
    tokio::time::sleep(TTL / 3 + Duration::from_millis(200)).await;
    let mut keys = Vec::with_capacity(cluster.len());
    for master in &cluster.masters {
        keys.push(master.dbsize().await?);
    }
    let before = cluster.counters().await?;
    let cpu0 = admin::cpu_time();
    let window = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let after = cluster.counters().await?;
    let cpu = admin::cpu_time().saturating_sub(cpu0).as_secs_f64();
    let window_s = window.elapsed().as_secs_f64();
    let lost = held.iter().filter(|guard| guard.is_lost()).count() as u64;
    release_all(held).await?;
    let masters = cluster
        .urls
        .iter()
        .zip(keys)
        .zip(before.iter().zip(&after))
        .map(|((url, keys), (b, a))| MasterRecord {
            address: url.trim_start_matches("redis://").to_owned(),
            keys,
            reads_per_s: a.reads.saturating_sub(b.reads) as f64 / window_s,
            commands_per_s: a.commands.saturating_sub(b.commands) as f64 / window_s,
            cpu_share: (a.cpu_s - b.cpu_s).max(0.0) / window_s,
        })
        .collect();
    Ok(ClusterWatchdogRecord {
        run,
        locks: LOCKS,
        ttl_ms: TTL.as_millis() as u64,
        acquire_s,
        window_s,
        masters,
        client_cpu_share: cpu / window_s,
        lost,
    })
}

/// Takes the [`LOCKS`] keys with `client`, 1,000 at a time: the guards, and how long
/// taking them all took.
async fn take_all(client: &LockClient) -> BenchResult<(Vec<LockGuard>, f64)> {
    let started = Instant::now();
    let acquired: Vec<BenchResult<LockGuard>> = futures_util::stream::iter(0..LOCKS)
        .map(|n| async move {
            let guard = lock_runtime::Lock::new(key(n))
                .ttl(TTL)
                .wait(Duration::ZERO)
                .client(client)
                .acquire()
                .await?;
            Ok(guard)
        })
        .buffer_unordered(1_000)
        .collect()
        .await;
    let acquire_s = started.elapsed().as_secs_f64();
    let held: Vec<LockGuard> = acquired.into_iter().collect::<BenchResult<_>>()?;
    Ok((held, acquire_s))
}

/// Releases every guard, 1,000 at a time.
async fn release_all(held: Vec<LockGuard>) -> BenchResult<()> {
    let released: Vec<BenchResult<()>> = futures_util::stream::iter(held)
        .map(|guard| async move {
            guard.release().await?;
            Ok(())
        })
        .buffer_unordered(1_000)
        .collect()
        .await;
    released.into_iter().collect::<BenchResult<()>>()?;
    Ok(())
}
