//! Medians, ratios, the goal verdicts, and the files: results JSON/CSV and BENCHMARKS.md.

mod cluster_watchdog;
mod contention_goals;
mod cost_at_scale;
mod cost_growth;
mod csv;
mod cycle_goals;
mod cycles;
mod document;
mod findings;
mod goal;
mod instructions_per_cycle;
mod one_hot_key;
mod primitives;
mod redlock_hot_key;
mod replicas;
mod results;
mod speed_goals;
mod summaries;
mod watchdog_at_scale;

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::error::BenchResult;
use contention_goals::{SideBySide, contention_goals};
use document::{Tables, markdown};
use goal::Goal;
pub(crate) use results::{Machine, Results, Settings};
use summaries::{CycleSummary, HotSummary, InstructionSummary, WatchdogSummary};
use summaries::{cycle_summaries, hot_summaries, instruction_summaries, watchdog_summaries};

/// Everything a reader of the results needs: the medians next to the raw measurements.
#[derive(Debug, Clone, Serialize)]
struct Summary<'a> {
    uncontended: Vec<CycleSummary>,
    many_keys: Vec<CycleSummary>,
    hot_key: Vec<HotSummary>,
    hot_key_processes: Vec<HotSummary>,
    watchdog: Vec<WatchdogSummary>,
    redlock_hot_key: Vec<HotSummary>,
    instructions: Vec<InstructionSummary>,
    goals: Vec<Goal>,
    contention_goals: Vec<SideBySide>,
    /// The goals of Redlock, the uncontended path and held locks (the key results.json has
    /// always given them).
    #[serde(rename = "issue_goals")]
    redlock_path_goals: Vec<Goal>,
    /// The goals of cost at scale (the key results.json has always given them).
    #[serde(rename = "issue27_goals")]
    scale_goals: Vec<Goal>,
    results: &'a Results,
}

/// Writes results.json, the CSV files, and BENCHMARKS.md.
pub(crate) fn write_all(
    results: &Results,
    results_dir: &Path,
    report: &Path,
    (plot_link, scaling_link): (Option<&str>, Option<&str>),
) -> BenchResult<()> {
    std::fs::create_dir_all(results_dir)?;
    let uncontended = cycle_summaries(&results.uncontended);
    let many = cycle_summaries(&results.many_keys);
    let hot = hot_summaries(&results.hot_key);
    let spread = hot_summaries(&results.hot_key_processes);
    let watchdog = watchdog_summaries(&results.watchdog);
    let goals = speed_goals::speed_goals(results, &uncontended, &many, &hot);
    let contention = contention_goals(&results.settings, &uncontended, &hot, &spread);
    let redlock = hot_summaries(&results.redlock_hot);
    let counted = instruction_summaries(&results.instructions);
    let redlock_path_goals = redlock_path_goals(results, (&uncontended, &many), &redlock, &counted);
    let mut scale_goals = cost_at_scale::scale_goals(results, &spread);
    scale_goals.extend(cluster_watchdog::goals(results));
    let summary = Summary {
        uncontended: uncontended.clone(),
        many_keys: many.clone(),
        hot_key: hot.clone(),
        hot_key_processes: spread.clone(),
        watchdog: watchdog.clone(),
        redlock_hot_key: redlock.clone(),
        instructions: counted.clone(),
        goals: goals.clone(),
        contention_goals: contention.clone(),
        redlock_path_goals: redlock_path_goals.clone(),
        scale_goals: scale_goals.clone(),
        results,
    };
    std::fs::write(
        results_dir.join("results.json"),
        serde_json::to_string_pretty(&summary)?,
    )?;
    csv::write_csv(results, results_dir)?;
    let markdown = markdown(
        results,
        Tables {
            uncontended: &uncontended,
            many: &many,
            hot: &hot,
            spread: &spread,
            watchdog: &watchdog,
            goals: &goals,
            contention: &contention,
            redlock: &redlock,
            counted: &counted,
            redlock_path_goals: &redlock_path_goals,
            scale_goals: &scale_goals,
        },
        (plot_link, scaling_link),
    );
    std::fs::write(report, markdown)?;
    Ok(())
}

/// The goals of Redlock, the uncontended path and held locks, in the table's order.
fn redlock_path_goals(
    results: &Results,
    (uncontended, many): (&[CycleSummary], &[CycleSummary]),
    redlock: &[HotSummary],
    counted: &[InstructionSummary],
) -> Vec<Goal> {
    let mut redlock_path_goals = Vec::from(redlock_hot_key::redlock_goals(redlock));
    redlock_path_goals.push(instructions_per_cycle::attribute_instructions_goal(counted));
    redlock_path_goals.extend(cycle_goals::cycle_goals(uncontended, many, counted));
    redlock_path_goals.extend(cost_growth::held_goals(&results.scaling.held));
    redlock_path_goals
}

/// Sections 9 and 10 alone, for a `BENCH_ONLY=semaphore` or `BENCH_ONLY=rwlock` run
/// (BENCHMARKS.md is then left as it was).
pub(crate) fn primitives_markdown(results: &Results) -> String {
    primitives::markdown(results)
}

/// Section 4b alone, for a `BENCH_ONLY=cluster-watchdog` run (BENCHMARKS.md is then left
/// as it was; the section is pasted into it by hand).
pub(crate) fn cluster_watchdog_markdown(results: &Results) -> String {
    let mut out = String::new();
    cluster_watchdog::section(&mut out, results);
    out
}

/// Section 8 and its finding alone, for a `BENCH_ONLY=replicas` run (BENCHMARKS.md is then
/// left as it was; the section is pasted into it by hand).
pub(crate) fn replicas_markdown(results: &Results) -> String {
    let mut out = String::new();
    replicas::section(&mut out, results);
    if let Some(finding) = replicas::finding(&results.replicas) {
        let _ = writeln!(out, "Finding:\n\n- {finding}\n");
    }
    out
}

/// Section 12 and its goals alone, for a `BENCH_ONLY=foreign` run.
pub(crate) fn foreign_markdown(results: &Results) -> String {
    let mut out = String::new();
    cost_at_scale::scale_goals_table(&mut out, &cost_at_scale::foreign_goals(results));
    crate::foreign::section(&mut out, &results.foreign, &results.skipped);
    out
}

/// Section 11 and its goals alone, for a `BENCH_ONLY=waiting` run (BENCHMARKS.md
/// is then left as it was; they are pasted into it by hand).
pub(crate) fn waiting_markdown(results: &Results) -> String {
    let mut out = String::new();
    cost_at_scale::scale_goals_table(&mut out, &cost_at_scale::waiting_goals(results));
    crate::waiting::section(
        &mut out,
        &results.waiting,
        results.settings.waiting_window_s,
    );
    let _ = writeln!(
        out,
        "Command: `{}` (BENCH_ONLY=waiting), code {}, load average {} at start / {} at end, wall time {:.0} s.\n",
        results.settings.command,
        results.machine.code,
        results.machine.load.0,
        results.machine.load.1,
        results.wall_s
    );
    out
}
