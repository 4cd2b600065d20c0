//! What a run measures with: the settings, the server and its clients, and the optional
//! servers and tools bench/run provides (Redlock masters, replicated pairs, a cluster,
//! redis-py, valgrind). What is missing is noted and its scenarios are left out.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::Admin;
use crate::contenders::Clients;
use crate::error::BenchResult;
use crate::host::machine;
use crate::python::Python;
use crate::report::{Machine, Settings};
use crate::{cluster, processes, redlock, replicas};

/// Reads a number from the environment, or the default.
pub(crate) fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

/// Reads a path from the environment, or the default.
pub(crate) fn env_path(name: &str, default: &str) -> PathBuf {
    std::env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

/// The settings of a run at `scale` (`BENCH_SCALE`: every duration multiplied by it).
pub(crate) fn settings(scale: f64) -> Settings {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    Settings {
        runs: env_number("BENCH_RUNS", 5),
        uncontended_s: 1.5 * scale,
        many_tasks: 256,
        many_s: 2.0 * scale,
        hot_tasks: 64,
        hot_hold_ms: 1.0,
        hot_window_s: 5.0 * scale,
        hot_processes: 4,
        hot_tasks_per_process: 16,
        hot_processes_window_s: 4.0 * scale,
        hot_processes_queue: processes::QueueSettings::from_env(),
        watchdog_locks: env_number("BENCH_WATCHDOG_LOCKS", 10_000),
        watchdog_ttl_ms: 3_000,
        watchdog_hold_s: 4.0 * scale.max(0.5),
        redlock_tasks: 64,
        redlock_window_s: 4.0 * scale,
        redlock_masters: 0,
        scaling_runs: env_number("BENCH_RUNS", 5).min(3),
        scaling_cycle_s: 1.0 * scale,
        semaphore_window_s: 4.0 * scale,
        rwlock_tasks: 64,
        rwlock_window_s: 4.0 * scale,
        waiting_window_s: 10.0 * scale,
        server: std::env::var("BENCH_SERVER").unwrap_or_else(|_| "REDIS_URL".into()),
        command: std::env::var("BENCH_COMMAND").unwrap_or_else(|_| "bench/run".into()),
        worker_threads: workers,
    }
}

/// The server, its clients and the optional servers and tools of one bench invocation.
pub(crate) struct Setup {
    /// The main server (`REDIS_URL`).
    pub(crate) url: String,
    /// `BENCH_SCALE`.
    pub(crate) scale: f64,
    /// How the run is set up.
    pub(crate) settings: Settings,
    /// The bench's own connection to the main server (counters, MONITOR, clean-up).
    pub(crate) admin: Admin,
    /// The contenders' clients of the main server.
    pub(crate) clients: Arc<Clients>,
    /// redis-py, when an interpreter with `redis` was given (`BENCH_PYTHON`).
    pub(crate) python: Option<Python>,
    /// The Redlock masters of section 5.
    pub(crate) masters: Option<redlock::Masters>,
    /// The primary and replica of section 8.
    pub(crate) replicated: Option<replicas::Replicated>,
    /// The Valkey primary and replica of section 8's durable grants (`WAITAOF` 1 1).
    pub(crate) durable: Option<replicas::Replicated>,
    /// The same pair, for grants durable on the primary's own append-only file (`WAITAOF` 1 0).
    pub(crate) durable_local: Option<replicas::Replicated>,
    /// The Redis Cluster of section 4b.
    pub(crate) cluster: Option<cluster::Cluster>,
    /// valgrind, for section 6.
    pub(crate) valgrind: Option<PathBuf>,
}

impl Setup {
    /// Connects to the main server and finds what bench/run provided; what is missing goes
    /// to `skipped`. Also returns the machine the figures come from.
    pub(crate) async fn connect(
        url: String,
        scale: f64,
        mut settings: Settings,
        skipped: &mut Vec<String>,
    ) -> BenchResult<(Self, Machine)> {
        let admin = Admin::connect(&url).await?;
        let clients = Arc::new(Clients::connect(&url).await?);
        let python = match std::env::var_os("BENCH_PYTHON") {
            Some(interpreter) if !interpreter.is_empty() => {
                let script = env_path("BENCH_PY_SCRIPT", "redis_py_bench.py");
                Python::find(PathBuf::from(interpreter), script, &url).await
            }
            _ => None,
        };
        if python.is_none() {
            skipped.push("redis-py: no Python interpreter with `redis` (BENCH_PYTHON)".to_owned());
        }
        let machine = machine(&admin, python.as_ref()).await?;
        eprintln!(
            "bench: {} runs on {} CPUs ({}), redis {}, scale {scale}",
            settings.runs, machine.nproc, machine.cpu_model, machine.redis_version
        );
        let masters = redlock::Masters::from_env().await?;
        settings.redlock_masters = masters.as_ref().map_or(0, |m| m.urls.len() as u64);
        let mut setup = Setup {
            url,
            scale,
            settings,
            admin,
            clients,
            python,
            masters,
            replicated: None,
            durable: None,
            durable_local: None,
            cluster: None,
            valgrind: None,
        };
        setup.find_servers(skipped).await?;
        Ok((setup, machine))
    }

    /// The optional servers and valgrind, each noted in `skipped` when missing.
    async fn find_servers(&mut self, skipped: &mut Vec<String>) -> BenchResult<()> {
        if self.masters.is_none() {
            skipped.push(
                "Redlock hot key: no masters (BENCH_REDLOCK_URLS; bench/run starts three)"
                    .to_owned(),
            );
        }
        self.valgrind = std::env::var_os("BENCH_VALGRIND")
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);
        self.replicated = replicas::Replicated::from_env(replicas::Rule::Replicas).await?;
        if self.replicated.is_none() {
            skipped.push(
                "wait for replicas: no primary and replica (BENCH_REPLICA_URLS; bench/run starts them)"
                    .to_owned(),
            );
        }
        self.durable = replicas::Replicated::from_env(replicas::Rule::Aof).await?;
        self.durable_local = replicas::Replicated::from_env(replicas::Rule::AofLocal).await?;
        if self.durable.is_none() {
            skipped.push(
                "durable grants (section 8): no Valkey primary and replica (BENCH_AOF_URLS; bench/run \
                 starts them when valkey-server is installed)"
                    .to_owned(),
            );
        }
        self.cluster = cluster::Cluster::from_env().await?;
        if self.cluster.is_none() {
            skipped.push(
                "watchdog of a cluster holder (section 4b): no cluster (BENCH_CLUSTER_URLS; bench/run \
                 starts one)"
                    .to_owned(),
            );
        }
        if self.valgrind.is_none() {
            skipped.push("instructions per cycle: no valgrind (BENCH_VALGRIND)".to_owned());
        }
        Ok(())
    }

    /// `base` seconds at the run's scale.
    pub(crate) fn seconds(&self, base: f64) -> Duration {
        Duration::from_secs_f64(base * self.scale)
    }
}
