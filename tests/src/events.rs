//! The runtime's `tracing` events as text, for the suites that check what it logs: one
//! global subscriber per test binary (the runtime logs from its own tasks, so a
//! per-thread one would miss them), installed by the first [`capture`].

use std::sync::{Mutex, MutexGuard, Once};

static LOG: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static INSTALLED: Once = Once::new();

struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        log().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn log() -> MutexGuard<'static, Vec<u8>> {
    LOG.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Captures every event at `level` and above from now on (the first call's level holds for
/// the whole binary; later calls do nothing).
pub fn capture(level: tracing::Level) {
    install(level, tracing_subscriber::fmt::format::FmtSpan::NONE);
}

/// [`capture`], with a line for each span at `level` and above when it closes, which shows
/// the fields the span recorded (`<name>{<fields>}: <target>: close ...`). Every test of a
/// binary that reads span closes calls this one.
pub fn capture_with_span_closes(level: tracing::Level) {
    install(level, tracing_subscriber::fmt::format::FmtSpan::CLOSE);
}

fn install(level: tracing::Level, spans: tracing_subscriber::fmt::format::FmtSpan) {
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_span_events(spans)
            .with_writer(|| Capture)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
    });
}

/// The events captured so far, a line each.
pub fn lines() -> Vec<String> {
    String::from_utf8_lossy(&log())
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The captured lines that mention every one of `texts`.
pub fn mentioning(texts: &[&str]) -> Vec<String> {
    let mut lines = lines();
    lines.retain(|line| texts.iter().all(|text| line.contains(text)));
    lines
}

/// Forgets what was captured so far.
pub fn clear() {
    log().clear();
}
