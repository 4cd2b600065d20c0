//! Runs the built `lockctl` binary for the integration tests.
#![allow(clippy::unwrap_used, dead_code)]

use std::process::Command;

/// What one run of `lockctl` printed, and its exit code.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    pub(crate) fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
}

/// Runs `lockctl ARGS` with `REDIS_URL` set to `url` (off the runtime's threads: the lock
/// clients of the test keep their places alive meanwhile).
pub(crate) async fn lockctl(url: &str, args: &[&str]) -> Run {
    let binary = env!("CARGO_BIN_EXE_lockctl");
    let url = url.to_owned();
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(binary)
            .args(&args)
            .env("REDIS_URL", url)
            .output()
            .unwrap();
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// Each line of `run`'s stdout as a JSON object.
pub(crate) fn objects(run: &Run) -> Vec<serde_json::Value> {
    run.lines()
        .into_iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}
