//! redis-py's `Lock`, run in a Python subprocess against the same server
//! (`bench/redis_py_bench.py`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::process::Command;

use crate::error::BenchResult;

/// The interpreter (with `redis` installed) and the script.
pub(crate) struct Python {
    interpreter: PathBuf,
    script: PathBuf,
    url: String,
    /// redis-py's and Python's versions.
    pub(crate) versions: String,
}

/// The uncontended measurement as the script reports it.
#[derive(Debug, Deserialize)]
pub(crate) struct PyCycles {
    pub(crate) cycles: u64,
    pub(crate) failures: u64,
    pub(crate) elapsed_s: f64,
    pub(crate) client_cpu_s: f64,
}

/// The hot-key measurement as the script reports it.
#[derive(Debug, Deserialize)]
pub(crate) struct PyHot {
    pub(crate) waits_us: Vec<u64>,
    pub(crate) censored_us: Vec<u64>,
    pub(crate) mean_hold_us: f64,
    pub(crate) same_task: u64,
    pub(crate) violations: u64,
    pub(crate) client_cpu_s: f64,
}

#[derive(Debug, Deserialize)]
struct PyVersions {
    redis_py: String,
    python: String,
}

impl Python {
    /// Checks that `interpreter` can import redis; `None` (with the reason on stderr) when
    /// it cannot.
    pub(crate) async fn find(interpreter: PathBuf, script: PathBuf, url: &str) -> Option<Self> {
        let mut python = Python {
            interpreter,
            script,
            url: url.to_owned(),
            versions: String::new(),
        };
        match python
            .call::<PyVersions>(&["version"], Duration::from_secs(30))
            .await
        {
            Ok(versions) => {
                python.versions = format!(
                    "redis-py {} on Python {}",
                    versions.redis_py, versions.python
                );
                Some(python)
            }
            Err(err) => {
                eprintln!("redis-py is not usable, skipping it: {err}");
                None
            }
        }
    }

    async fn call<T: DeserializeOwned>(&self, args: &[&str], limit: Duration) -> BenchResult<T> {
        let child = Command::new(&self.interpreter)
            .arg(&self.script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let output = tokio::time::timeout(limit, child.wait_with_output())
            .await
            .map_err(|_| format!("the redis-py script ran over {limit:?}"))??;
        if !output.status.success() {
            return Err(format!(
                "the redis-py script failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
            .into());
        }
        Ok(serde_json::from_slice(&output.stdout)?)
    }

    /// One task, one key, acquire + release for `duration`.
    pub(crate) async fn uncontended(&self, key: &str, duration: Duration) -> BenchResult<PyCycles> {
        let seconds = duration.as_secs_f64().to_string();
        self.call(
            &["uncontended", &self.url, key, &seconds],
            duration + Duration::from_secs(60),
        )
        .await
    }

    /// The command of one worker of scenario 3b: `tasks` threads on `key`, started by `go`
    /// on stdin (the protocol of [`crate::processes`]).
    pub(crate) fn hot_worker(
        &self,
        key: &str,
        window: Duration,
        tasks: u64,
        hold: Duration,
    ) -> Command {
        self.worker("hotworker", key, window, tasks, hold)
    }

    /// The script in one of its worker modes (`ready`, then `go` on stdin).
    fn worker(
        &self,
        mode: &str,
        key: &str,
        window: Duration,
        tasks: u64,
        hold: Duration,
    ) -> Command {
        let mut command = Command::new(&self.interpreter);
        command.arg(&self.script).args([
            mode,
            &self.url,
            key,
            &window.as_secs_f64().to_string(),
            &tasks.to_string(),
            &(hold.as_secs_f64() * 1e3).to_string(),
        ]);
        command
    }

    /// The command of one waiting child of section 11: one `redis.asyncio` task blocking
    /// on each of `PREFIX:FROM` … `PREFIX:FROM+COUNT-1` (the protocol of
    /// [`crate::waiting`]).
    pub(crate) fn wait_worker(&self, prefix: &str, from: u64, count: u64) -> Command {
        let mut command = Command::new(&self.interpreter);
        command.arg(&self.script).args([
            "waitworker",
            &self.url,
            prefix,
            &from.to_string(),
            &count.to_string(),
        ]);
        command
    }

    /// The command of the foreign side of section 12 ([`crate::foreign`]): `tasks` threads
    /// on `key`, started by `go` on stdin, each hold marking the server-side overlap counter.
    pub(crate) fn foreign_worker(
        &self,
        key: &str,
        window: Duration,
        tasks: u64,
        hold: Duration,
    ) -> Command {
        self.worker("foreign", key, window, tasks, hold)
    }

    /// `tasks` threads contending for `key` for `window`, each holding it for `hold`.
    pub(crate) async fn hot(
        &self,
        key: &str,
        window: Duration,
        tasks: u64,
        hold: Duration,
    ) -> BenchResult<PyHot> {
        let seconds = window.as_secs_f64().to_string();
        let hold_ms = (hold.as_secs_f64() * 1e3).to_string();
        let tasks = tasks.to_string();
        self.call(
            &["hot", &self.url, key, &seconds, &tasks, &hold_ms],
            window + Duration::from_secs(60),
        )
        .await
    }
}
