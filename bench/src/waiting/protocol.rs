//! The lines between the bench and a waiting child: `ready`, `go`, `stop` and the child's
//! report.

use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::error::BenchResult;

/// How long a child may take to start its waiters and see them all wait.
pub(super) const READY_LIMIT: Duration = Duration::from_secs(90);

/// What a child prints at `stop`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct WaitReport {
    /// The child's CPU time from `go` to `stop`.
    pub(crate) client_cpu_s: f64,
    /// Its waiters that acquired (the keys are held throughout: 0).
    pub(crate) acquired: u64,
    /// Its waiters that stopped waiting with an error (must be 0).
    #[serde(default)]
    pub(crate) failed: u64,
    /// The first such error.
    #[serde(default)]
    pub(crate) failure: Option<String>,
}

/// Waiters that stopped waiting with an error, and the first error.
#[derive(Default)]
pub(super) struct Failures {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl Failures {
    pub(super) fn note(&self, error: String) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first.lock() {
            first.get_or_insert(error);
        }
    }
}

/// `ready`, then the window between `go` and `stop` on stdin, then the report.
pub(super) async fn serve(acquired: &AtomicU64, failures: &Failures) -> BenchResult<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = String::new();
    tokio::time::timeout(READY_LIMIT, stdin.read_line(&mut line))
        .await
        .map_err(|_| "no go from the bench")??;
    if line.trim() != "go" {
        return Err(format!("expected go, got {line:?}").into());
    }
    let cpu0 = crate::admin::cpu_time();
    line.clear();
    tokio::time::timeout(Duration::from_secs(600), stdin.read_line(&mut line))
        .await
        .map_err(|_| "no stop from the bench")??;
    let report = WaitReport {
        client_cpu_s: crate::admin::cpu_time().saturating_sub(cpu0).as_secs_f64(),
        acquired: acquired.load(Ordering::Relaxed),
        failed: failures.count.load(Ordering::Relaxed),
        failure: failures.first.lock().ok().and_then(|first| first.clone()),
    };
    writeln!(stdout, "{}", serde_json::to_string(&report)?)?;
    stdout.flush()?;
    // The waiters go on until the bench has tapped what they send (or gives up on them).
    line.clear();
    let _ = tokio::time::timeout(Duration::from_secs(60), stdin.read_line(&mut line)).await;
    Ok(())
}
