//! Sections 9 and 10: the other primitives on a hot key, the semaphore against
//! the mutex and raw round trips, the read-write lock against the mutex.

use std::fmt::Write as _;

use super::results::Results;
use crate::figures::{median, ms, thousands};
use crate::rwlock::{Kind, RwRecord};
use crate::semaphore::{self, SemaphoreRecord};

/// Section 9: a semaphore of 4 permits beside the mutex and raw round trips, interleaved
/// in each run. `hold_us` is the mean hold section 3 measured for ours (the same sleep).
pub(crate) fn semaphore_section(out: &mut String, results: &Results, hold_us: Option<f64>) {
    let records = &results.semaphore;
    let s = &results.settings;
    let _ = writeln!(
        out,
        "## 9. A semaphore of {} permits on a hot key\n",
        semaphore::PERMITS
    );
    let _ = writeln!(
        out,
        "{} tasks in one process contend for one key for {:.1} s per run, each holding what \
         it took for `tokio::time::sleep({} ms)` (see Findings): a semaphore of {} permits, \
         then the mutex (`Lock`) on the same shape, then raw round trips (`PING` by the same \
         {} tasks on one multiplexed connection), interleaved in each of {} runs. Medians of \
         the runs; the ratios are the medians of the per-run ratios (`bench/src/semaphore.rs`; \
         alone: `BENCH_ONLY=semaphore bench/run`, which writes `bench/results/semaphore.md`).\n",
        semaphore::TASKS,
        s.semaphore_window_s,
        semaphore::HOLD.as_millis(),
        semaphore::PERMITS,
        semaphore::TASKS,
        records.len()
    );
    if records.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    let of = |pick: fn(&SemaphoreRecord) -> f64| median(records.iter().map(pick));
    let per_s = of(|r| r.semaphore_per_s);
    let to_mutex = of(|r| r.semaphore_per_s / r.mutex_per_s);
    let _ = writeln!(out, "| measurement | per second | ratio |\n|---|---:|---:|");
    let _ = writeln!(
        out,
        "| semaphore, {} permits: permits taken and given back | {} | {:.2}× the mutex; {:.3}× raw |",
        semaphore::PERMITS,
        thousands(per_s),
        to_mutex,
        of(|r| r.semaphore_per_s / r.raw_round_trips_per_s)
    );
    let _ = writeln!(
        out,
        "| mutex (`Lock` API), same tasks and hold | {} | 1 |",
        thousands(of(|r| r.mutex_per_s))
    );
    let _ = writeln!(
        out,
        "| raw round trips (`PING`) | {} | |",
        thousands(of(|r| r.raw_round_trips_per_s))
    );
    let most = most_at_once(records);
    let _ = writeln!(out, "| most permit holders seen at once | {most} | |");
    let _ = writeln!(
        out,
        "| semaphore p99 wait | {} | |\n",
        ms(of(|r| r.semaphore_p99_wait_us as f64))
    );
    permits_against_mutex(out, per_s, to_mutex, hold_us);
}

/// The most permit holders seen at once in each run ("4 (every run)" when all agree).
fn most_at_once(records: &[SemaphoreRecord]) -> String {
    let most: Vec<String> = records
        .iter()
        .map(|r| r.semaphore_most_at_once.to_string())
        .collect();
    if most.iter().all(|m| *m == most[0]) {
        format!("{} (every run)", most[0])
    } else {
        most.join(", ")
    }
}

/// Why the permits give `to_mutex` times the mutex, not one per permit.
fn permits_against_mutex(out: &mut String, per_s: f64, to_mutex: f64, hold_us: Option<f64>) {
    let utilization = hold_us.map_or(String::new(), |hold| {
        format!(
            " (utilization {} × {} / {} = {:.2})",
            thousands(per_s),
            ms(hold),
            semaphore::PERMITS,
            per_s * hold / 1e6 / f64::from(semaphore::PERMITS)
        )
    });
    let _ = writeln!(
        out,
        "{} permits give {to_mutex:.1}×, not {}×, the mutex: the mutex passes the lock between \
         the tasks of one process without Redis (section 3), while every permit goes back \
         through Redis (the release, then the woken waiter's acquire: two round trips at \
         least), so a permit stays idle for a round trip or more between holders{utilization}.\n",
        semaphore::PERMITS,
        semaphore::PERMITS
    );
}

/// Section 10: the read-heavy workload under the read-write lock and under the mutex.
pub(crate) fn rwlock_section(out: &mut String, results: &Results) {
    let records = &results.rwlock;
    let s = &results.settings;
    let _ = writeln!(
        out,
        "## 10. Read-heavy workload: read-write lock against the mutex\n"
    );
    let _ = writeln!(
        out,
        "{} tasks in one process on one key, each operation a read (90 %) or a write (10 %) \
         held 1 ms, for {:.1} s; the same workload under `RwLock::read` / `write` and under \
         `Lock` (every operation exclusive), the two interleaved over {} runs (the order \
         alternating; `bench/src/rwlock.rs`; alone: `BENCH_ONLY=rwlock bench/run`, which \
         writes `bench/results/rwlock.md`). Waits are from the call to the guard. Medians of \
         the runs.\n",
        s.rwlock_tasks,
        s.rwlock_window_s,
        records.iter().map(|r| r.run).max().map_or(0, |r| r + 1)
    );
    if records.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    let mine =
        |kind: Kind| -> Vec<&RwRecord> { records.iter().filter(|r| r.kind == kind).collect() };
    let of = |kind: Kind, pick: fn(&RwRecord) -> f64| median(mine(kind).into_iter().map(pick));
    let mutex_ops = of(Kind::Mutex, |r| r.operations_per_s);
    let _ = writeln!(
        out,
        "| lock | operations/s (median) | × mutex | read wait p50 | read wait p99 | write wait p99 | errors |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for kind in [Kind::ReadWrite, Kind::Mutex] {
        let ops = of(kind, |r| r.operations_per_s);
        let _ = writeln!(
            out,
            "| {} | {} | {:.2}× | {} | {} | {} | {} |",
            kind.name(),
            thousands(ops),
            ops / mutex_ops,
            ms(of(kind, |r| r.read_p50_us as f64)),
            ms(of(kind, |r| r.read_p99_us as f64)),
            ms(of(kind, |r| r.write_p99_us as f64)),
            mine(kind).iter().map(|r| r.errors).sum::<u64>()
        );
    }
    let per_run = |kind: Kind| {
        mine(kind)
            .iter()
            .map(|r| thousands(r.operations_per_s))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "\nPer run, RwLock: {} operations/s; Lock: {}.\n",
        per_run(Kind::ReadWrite),
        per_run(Kind::Mutex)
    );
}

/// Both sections alone, for a `BENCH_ONLY=semaphore` or `BENCH_ONLY=rwlock` run
/// (BENCHMARKS.md is then left as it was).
pub(crate) fn markdown(results: &Results) -> String {
    let mut out = String::new();
    if !results.semaphore.is_empty() {
        semaphore_section(&mut out, results, None);
    }
    if !results.rwlock.is_empty() {
        rwlock_section(&mut out, results);
    }
    out
}
