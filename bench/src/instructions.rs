//! Section 6: instructions per uncontended cycle, counted by
//! `valgrind --tool=callgrind`, a figure that other work on the machine cannot move.
//!
//! The bench runs this binary under callgrind in its `instructions` mode twice per
//! contender, with [`SHORT`] and [`LONG`] measured cycles after the same warm-up, and takes
//! the difference of the two totals per extra cycle: start-up, connecting, the warm-up and
//! shutdown are the same in both and cancel. The mode runs the cycle of sections 1 and 2
//! ([`Clients::cycle`]: one task, one key, acquire without waiting, release) on a
//! current-thread tokio runtime, so that no work-stealing between worker threads adds
//! instructions that depend on timing. The redis-server is the bench's own, not under
//! valgrind: only the client's instructions count.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::Config;
use serde::Serialize;
use tokio::process::Command;

use crate::contenders::{Clients, Contender};
use crate::error::BenchResult;

/// The first argument that selects this mode.
pub(crate) const MODE_ARG: &str = "instructions";

/// Cycles before the measured ones, in every run.
pub(crate) const WARM_UP: u64 = 200;
/// Measured cycles of the short run.
pub(crate) const SHORT: u64 = 200;
/// Measured cycles of the long run.
pub(crate) const LONG: u64 = 1_200;
/// Counts per contender (each a short and a long run).
pub(crate) const COUNTS: usize = 3;
/// How long one run under valgrind may take.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The contenders counted.
pub(crate) const CONTENDERS: [Contender; 3] =
    [Contender::Attribute, Contender::Api, Contender::Raw];

/// One contender's count.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InstructionRecord {
    /// Which client.
    pub(crate) contender: Contender,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    /// Callgrind's total instructions (Ir) of the short run.
    pub(crate) short_total: u64,
    /// Of the long run.
    pub(crate) long_total: u64,
    /// (long − short) / (LONG − SHORT).
    pub(crate) per_cycle: f64,
    /// Wall time of both runs under valgrind.
    pub(crate) wall_s: f64,
}

/// Counts `contender`'s instructions per cycle with `valgrind` against the server at `url`.
pub(crate) async fn measure(
    valgrind: &Path,
    url: &str,
    contender: Contender,
    run: usize,
) -> BenchResult<InstructionRecord> {
    let started = tokio::time::Instant::now();
    let dir = std::env::temp_dir().join(format!(
        "lock-bench-callgrind-{}-{}",
        std::process::id(),
        contender.id()
    ));
    std::fs::create_dir_all(&dir)?;
    let counted = async {
        let short_total = callgrind_total(valgrind, url, contender, SHORT, &dir).await?;
        let long_total = callgrind_total(valgrind, url, contender, LONG, &dir).await?;
        BenchResult::Ok((short_total, long_total))
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    let (short_total, long_total) = counted?;
    Ok(InstructionRecord {
        contender,
        run,
        short_total,
        long_total,
        per_cycle: (long_total as f64 - short_total as f64) / (LONG - SHORT) as f64,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// One run of this binary's instruction mode under callgrind: its total Ir.
async fn callgrind_total(
    valgrind: &Path,
    url: &str,
    contender: Contender,
    cycles: u64,
    dir: &Path,
) -> BenchResult<u64> {
    let out = dir.join(format!("callgrind.{cycles}.out"));
    let mut command = Command::new(valgrind);
    command
        .arg("--tool=callgrind")
        .arg("--quiet")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe()?)
        .args([MODE_ARG, contender.id(), &cycles.to_string()])
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn()?;
    let output = tokio::time::timeout(RUN_LIMIT, child.wait_with_output())
        .await
        .map_err(|_| format!("callgrind did not finish {cycles} cycles in {RUN_LIMIT:?}"))??;
    if !output.status.success() {
        return Err(format!(
            "callgrind run failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let text = std::fs::read_to_string(&out)?;
    total_of(&text).ok_or_else(|| format!("no totals line in {}", out.display()).into())
}

/// The `totals:` (or `summary:`) line of a callgrind output file: the first event, Ir.
fn total_of(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line
            .strip_prefix("totals:")
            .or_else(|| line.strip_prefix("summary:"))?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Instruction mode: `lock-bench instructions CONTENDER CYCLES` against `REDIS_URL`.
pub(crate) fn mode_main(args: &[String]) -> BenchResult<()> {
    let [contender, cycles] = args else {
        return Err(format!("usage: {MODE_ARG} CONTENDER CYCLES").into());
    };
    let contender = Contender::from_id(contender).ok_or("unknown contender")?;
    let cycles: u64 = cycles.parse()?;
    let url = std::env::var("REDIS_URL").map_err(|_| "REDIS_URL is not set")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        lock_runtime::init(Config::single(url.clone()))?;
        let clients = Arc::new(Clients::connect(&url).await?);
        // One key per process (the key ids of this mode sit above every other scenario's).
        let id = contender.key_base() + 990_000 + u64::from(std::process::id()) % 9_000;
        for _ in 0..WARM_UP + cycles {
            if !clients.cycle(contender, id).await? {
                return Err("the key was busy (another user of the bench's keys?)".into());
            }
        }
        BenchResult::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::total_of;

    #[test]
    fn reads_the_totals_line() {
        let text = "events: Ir\nfn=main\n1 5\ntotals: 123456\n";
        assert_eq!(total_of(text), Some(123_456));
        assert_eq!(total_of("summary: 42 7\n"), Some(42));
        assert_eq!(total_of("events: Ir\n"), None);
    }
}
