//! What one run of the bench measured, and on what: the machine, the settings, and every
//! scenario's records.

use serde::Serialize;

use crate::scenarios::{CycleRecord, HotRecord, WatchdogRecord};

/// The machine the figures came from.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    /// Logical CPUs.
    pub(crate) nproc: usize,
    /// `model name` from /proc/cpuinfo.
    pub(crate) cpu_model: String,
    /// The server's `redis_version`.
    pub(crate) redis_version: String,
    /// `rustc --version`.
    pub(crate) rustc: String,
    /// `uname -sr`-like kernel string from /proc.
    pub(crate) kernel: String,
    /// redis-py and Python versions, when redis-py ran.
    pub(crate) python: Option<String>,
    /// The commit measured (and the runtime files changed from it), from bench/run.
    pub(crate) code: String,
    /// `/proc/loadavg` when the measurements started and when they ended: other work on
    /// the machine shows here.
    pub(crate) load: (String, String),
}

/// How the run was set up.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    /// Repetitions of every measurement.
    pub(crate) runs: usize,
    /// Scenario 1 duration per measurement.
    pub(crate) uncontended_s: f64,
    /// Scenario 2 tasks.
    pub(crate) many_tasks: u64,
    /// Scenario 2 duration per measurement.
    pub(crate) many_s: f64,
    /// Scenario 3 tasks.
    pub(crate) hot_tasks: u64,
    /// Scenario 3 hold.
    pub(crate) hot_hold_ms: f64,
    /// Scenario 3 window per measurement.
    pub(crate) hot_window_s: f64,
    /// Scenario 3b: processes.
    pub(crate) hot_processes: u64,
    /// Scenario 3b: tasks in each process.
    pub(crate) hot_tasks_per_process: u64,
    /// Scenario 3b window per measurement.
    pub(crate) hot_processes_window_s: f64,
    /// Scenario 3b: our two-level queue's settings (the defaults unless an experiment set
    /// them).
    pub(crate) hot_processes_queue: crate::processes::QueueSettings,
    /// Scenario 4 locks.
    pub(crate) watchdog_locks: u64,
    /// Scenario 4 ttl.
    pub(crate) watchdog_ttl_ms: u64,
    /// Scenario 4 window.
    pub(crate) watchdog_hold_s: f64,
    /// Section 5 (Redlock hot key): contending tasks.
    pub(crate) redlock_tasks: u64,
    /// Section 5 window per measurement.
    pub(crate) redlock_window_s: f64,
    /// Section 5: the masters started by bench/run (0: none).
    pub(crate) redlock_masters: u64,
    /// Section 7: runs of the cycle and wake-up sweeps (at most 3).
    pub(crate) scaling_runs: usize,
    /// Section 7: duration of each cycle measurement.
    pub(crate) scaling_cycle_s: f64,
    /// Section 9 (semaphore) window per measurement.
    pub(crate) semaphore_window_s: f64,
    /// Section 10 (read-heavy workload): tasks.
    pub(crate) rwlock_tasks: u64,
    /// Section 10 window per measurement.
    pub(crate) rwlock_window_s: f64,
    /// Section 11 (what waiting costs): the window of each measurement, at most.
    pub(crate) waiting_window_s: f64,
    /// Where the server came from.
    pub(crate) server: String,
    /// The command that produced these figures.
    pub(crate) command: String,
    /// Tokio worker threads.
    pub(crate) worker_threads: usize,
}

/// Everything one run of the bench measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Results {
    /// The machine.
    pub(crate) machine: Machine,
    /// The set-up.
    pub(crate) settings: Settings,
    /// Scenario 1, every measurement.
    pub(crate) uncontended: Vec<CycleRecord>,
    /// Scenario 2, every measurement.
    pub(crate) many_keys: Vec<CycleRecord>,
    /// Scenario 3, every measurement.
    pub(crate) hot_key: Vec<HotRecord>,
    /// Scenario 3b (several processes), every measurement.
    pub(crate) hot_key_processes: Vec<HotRecord>,
    /// Scenario 4, every measurement.
    pub(crate) watchdog: Vec<WatchdogRecord>,
    /// Section 4b (the watchdog of a cluster holder), every run.
    pub(crate) cluster_watchdog: Vec<crate::cluster::ClusterWatchdogRecord>,
    /// Section 5 (Redlock hot key), every measurement.
    pub(crate) redlock_hot: Vec<HotRecord>,
    /// Section 5 with one master silent (SIGSTOP), ours only, every measurement.
    pub(crate) redlock_silent: Vec<HotRecord>,
    /// Section 6 (instructions per cycle under callgrind), every count.
    pub(crate) instructions: Vec<crate::instructions::InstructionRecord>,
    /// Section 7 (how cost grows), every measurement.
    pub(crate) scaling: crate::scaling::Scaling,
    /// Section 8 (grants that wait for replicas), every measurement.
    pub(crate) replicas: crate::replicas::Measured,
    /// Section 8, durable grants (`WAITAOF`, on Valkey), every measurement.
    pub(crate) durable: crate::replicas::Measured,
    /// Section 8, durable grants on the primary's own append-only file only.
    pub(crate) durable_local: crate::replicas::Measured,
    /// Section 9 (a semaphore on a hot key), every run.
    pub(crate) semaphore: Vec<crate::semaphore::SemaphoreRecord>,
    /// Section 10 (read-heavy workload), every measurement.
    pub(crate) rwlock: Vec<crate::rwlock::RwRecord>,
    /// Section 11 (what waiting costs), every measurement.
    pub(crate) waiting: Vec<crate::waiting::WaitRecord>,
    /// Section 12 (a key shared with foreign clients), every measurement.
    pub(crate) foreign: Vec<crate::foreign::ForeignRecord>,
    /// Contenders or scenarios that could not run, and why.
    pub(crate) skipped: Vec<String>,
    /// Total wall time of the measurements.
    pub(crate) wall_s: f64,
}

impl Results {
    /// A run on `machine` with `settings` that has measured nothing yet; `skipped` notes
    /// what it will not measure.
    pub(crate) fn new(machine: Machine, settings: Settings, skipped: Vec<String>) -> Self {
        Results {
            machine,
            settings,
            uncontended: Vec::new(),
            many_keys: Vec::new(),
            hot_key: Vec::new(),
            hot_key_processes: Vec::new(),
            watchdog: Vec::new(),
            cluster_watchdog: Vec::new(),
            redlock_hot: Vec::new(),
            redlock_silent: Vec::new(),
            instructions: Vec::new(),
            scaling: crate::scaling::Scaling::default(),
            replicas: crate::replicas::Measured::default(),
            durable: crate::replicas::Measured::default(),
            durable_local: crate::replicas::Measured::default(),
            semaphore: Vec::new(),
            rwlock: Vec::new(),
            waiting: Vec::new(),
            foreign: Vec::new(),
            skipped,
            wall_s: 0.0,
        }
    }
}

#[cfg(test)]
impl Results {
    /// The results of a run that measured nothing, for the report's tests.
    pub(crate) fn empty() -> Self {
        Results::new(
            Machine {
                nproc: 2,
                cpu_model: "test".into(),
                redis_version: "7".into(),
                rustc: "rustc".into(),
                kernel: "Linux".into(),
                python: None,
                code: "test".into(),
                load: (String::new(), String::new()),
            },
            Settings {
                runs: 1,
                uncontended_s: 1.0,
                many_tasks: 256,
                many_s: 1.0,
                hot_tasks: 64,
                hot_hold_ms: 1.0,
                hot_window_s: 1.0,
                hot_processes: 4,
                hot_tasks_per_process: 16,
                hot_processes_window_s: 1.0,
                hot_processes_queue: crate::processes::QueueSettings::defaults(),
                watchdog_locks: 10,
                watchdog_ttl_ms: 3_000,
                watchdog_hold_s: 1.0,
                redlock_tasks: 64,
                redlock_window_s: 1.0,
                redlock_masters: 0,
                scaling_runs: 1,
                scaling_cycle_s: 1.0,
                semaphore_window_s: 1.0,
                rwlock_tasks: 64,
                rwlock_window_s: 1.0,
                waiting_window_s: 1.0,
                server: "test".into(),
                command: "bench/run".into(),
                worker_threads: 2,
            },
            Vec::new(),
        )
    }
}
