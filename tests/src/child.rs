//! Running parts of a test in other OS processes.
//!
//! A test binary re-runs itself with `--exact <name>` and an environment variable that
//! tells the named test to act as a worker; everywhere else that test returns at once.

use std::process::{Child, Command, Stdio};

/// The environment variable that carries a worker's role into the child process.
pub const ROLE_ENV: &str = "LOCK_TESTS_CHILD_ROLE";

/// The role of this process when it was started by [`spawn`], else `None`.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// Starts this test binary again running only `test_name`, with `role` and `env` set.
/// Its stdout is piped (read it for results); stderr is inherited.
pub fn spawn(test_name: &str, role: &str, env: &[(&str, String)]) -> Child {
    spawn_command(test_name, role, env, Stdio::inherit())
}

/// [`spawn`], with the child's stdin piped too: the test writes lines to it
/// (`child.stdin.take()`) to tell the child when to go on.
pub fn spawn_with_stdin(test_name: &str, role: &str, env: &[(&str, String)]) -> Child {
    spawn_command(test_name, role, env, Stdio::piped())
}

fn spawn_command(test_name: &str, role: &str, env: &[(&str, String)], stdin: Stdio) -> Child {
    let exe = std::env::current_exe().expect("current test binary");
    let mut command = Command::new(exe);
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE_ENV, role)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (name, value) in env {
        command.env(name, value);
    }
    command.spawn().expect("spawn child test process")
}

/// Waits for a child and returns what follows `prefix` on each line that contains it
/// (libtest may print `test name ... ` on the same line first). Panics when the child
/// failed.
pub fn collect(child: Child, prefix: &str) -> Vec<String> {
    let output = child.wait_with_output().expect("wait for child");
    assert!(
        output.status.success(),
        "child process failed: {:?}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            line.find(prefix)
                .map(|at| line[at + prefix.len()..].to_owned())
        })
        .collect()
}

/// The lines of a child's stdout as they come, read on a thread of their own (take the
/// child's stdout first: `child.stdout.take()`).
pub fn stream_lines(
    stdout: impl std::io::Read + Send + 'static,
) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    lines_rx
}

/// Waits, at most `bound`, for the child's next line containing `prefix`, and returns the
/// rest of that line (trimmed). Panics when none comes.
pub fn expect_line(
    lines: &std::sync::mpsc::Receiver<String>,
    prefix: &str,
    bound: std::time::Duration,
) -> String {
    let deadline = std::time::Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the child never printed {prefix:?}"));
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
}

/// Sends the signal `name` (`TERM`, `CONT`, `KILL`, ...) to process `pid`; panics when
/// `kill` fails.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Stops process `pid` (`SIGSTOP`) and returns once every thread of it has stopped.
///
/// A multi-threaded process stops lazily: the kernel hands the signal to one thread, which
/// stops the others only when it next runs. On a busy machine that thread may wait for a
/// core while the others run on (take a lock, answer a grant) after `kill` has returned,
/// so a test that pauses a process must wait for the stop itself.
pub fn pause(pid: u32) {
    signal(pid, "STOP");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !all_threads_stopped(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} did not stop within 10 s of SIGSTOP"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether every thread of `pid` is stopped (`T`) or gone, from `/proc/<pid>/task/*/stat`.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            return true;
        };
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        matches!(state, Some('T' | 't' | 'Z' | 'X') | None)
    })
}
