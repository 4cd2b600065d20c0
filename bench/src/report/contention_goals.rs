//! The contention goals with every contender of the run side by side: the uncontended
//! cycle's round trips, the hot key in one process and across processes.

use std::fmt::Write as _;

use serde::Serialize;

use super::results::Settings;
use super::summaries::{CycleSummary, HotSummary, find};
use crate::contenders::Contender;
use crate::figures::ms;

/// One contention goal, judged for every contender of the run, side by side.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SideBySide {
    /// The scenario it is measured in.
    scenario: String,
    /// The goal, with its bound.
    goal: String,
    /// Per contender: the measured value (as shown) and whether it meets the bound.
    cells: Vec<Cell>,
}

/// One contender's value of a [`SideBySide`] goal.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Cell {
    contender: Contender,
    measured: String,
    met: bool,
}

/// The contenders that get a column in the side-by-side goals: ours, then the peers.
const SIDE_BY_SIDE: [Contender; 4] = [
    Contender::Api,
    Contender::Rslock,
    Contender::AsyncRedisLock,
    Contender::RedisPy,
];

/// One row of the side-by-side goals: `judge` gives a contender's value and verdict.
fn side_by_side<T>(
    scenario: &str,
    goal: String,
    list: &[T],
    of: impl Fn(&T) -> Contender,
    judge: impl Fn(&T) -> Option<(String, bool)>,
) -> Option<SideBySide> {
    let cells: Vec<Cell> = SIDE_BY_SIDE
        .iter()
        .filter_map(|&contender| {
            let (measured, met) = judge(find(list, contender, &of)?)?;
            Some(Cell {
                contender,
                measured,
                met,
            })
        })
        .collect();
    (!cells.is_empty()).then(|| SideBySide {
        scenario: scenario.to_owned(),
        goal,
        cells,
    })
}

/// The contention goals: the uncontended cycle's round trips, the hot key in one
/// process and the hot key across processes, each for every contender of the run.
pub(super) fn contention_goals(
    s: &Settings,
    uncontended: &[CycleSummary],
    hot: &[HotSummary],
    spread: &[HotSummary],
) -> Vec<SideBySide> {
    let mut rows = Vec::new();
    rows.push(side_by_side(
        "uncontended, 1 task",
        "requests sent (round trips) per cycle ≤ 2".into(),
        uncontended,
        |c| c.contender,
        |c| {
            c.requests_per_cycle
                .map(|r| (format!("{r:.2}"), r <= 2.005))
        },
    ));
    let one = format!("hot key, {} tasks in 1 process", s.hot_tasks);
    let many = format!(
        "hot key, {} processes × {} tasks",
        s.hot_processes, s.hot_tasks_per_process
    );
    for (scenario, list, utilization, commands) in
        [(&one, hot, 0.97, 1.0), (&many, spread, 0.93, 5.0)]
    {
        rows.extend(hot_key_rows(scenario, list, utilization, commands));
    }
    rows.extend(across_processes_rows(s, &many, spread));
    rows.into_iter().flatten().collect()
}

/// The hot key's utilization and server commands per acquisition, in one scenario.
fn hot_key_rows(
    scenario: &str,
    list: &[HotSummary],
    utilization: f64,
    commands: f64,
) -> [Option<SideBySide>; 2] {
    [
        side_by_side(
            scenario,
            format!("utilization (acquisitions/s × mean hold) ≥ {utilization:.2}"),
            list,
            |h| h.contender,
            |h| {
                Some((
                    format!(
                        "{:.2} ({:.0}/s × {})",
                        h.utilization,
                        h.per_s,
                        ms(h.mean_hold_us)
                    ),
                    h.utilization >= utilization,
                ))
            },
        ),
        side_by_side(
            scenario,
            format!("server commands per acquisition (Lua included) ≤ {commands:.0}"),
            list,
            |h| h.contender,
            |h| {
                Some((
                    format!("{:.1}", h.server_cmds_per_acq),
                    h.server_cmds_per_acq <= commands,
                ))
            },
        ),
    ]
}

/// The hot key across processes (`many`): each process's share, the p99 and max waits,
/// and no two holders at once.
fn across_processes_rows(
    s: &Settings,
    many: &str,
    spread: &[HotSummary],
) -> Vec<Option<SideBySide>> {
    let mut rows = Vec::new();
    let quarter = 1.0 / s.hot_processes.max(1) as f64;
    rows.push(side_by_side(
        many,
        format!(
            "each process's share of acquisitions within ±25 % of 1/{} ({:.1}–{:.1} %)",
            s.hot_processes,
            75.0 * quarter,
            125.0 * quarter
        ),
        spread,
        |h| h.contender,
        |h| {
            Some((
                format!("{:.1}–{:.1} %", h.share_min * 100.0, h.share_max * 100.0),
                h.share_min >= 0.75 * quarter && h.share_max <= 1.25 * quarter,
            ))
        },
    ));
    for (name, times, pick) in [
        (
            "p99",
            2.0,
            (|h: &HotSummary| h.p99_us) as fn(&HotSummary) -> f64,
        ),
        ("max", 3.0, |h: &HotSummary| h.max_us),
    ] {
        rows.push(side_by_side(
            many,
            format!("{name} wait ≤ {times:.0} × (contenders × mean hold)"),
            spread,
            |h| h.contender,
            |h| {
                let bound = times * h.tasks as f64 * h.mean_hold_us;
                let wait = pick(h);
                Some((format!("{} vs {}", ms(wait), ms(bound)), wait <= bound))
            },
        ));
    }
    rows.push(side_by_side(
        many,
        "no two holders at once (wall-clock holds of all processes)".into(),
        spread,
        |h| h.contender,
        |h| Some((format!("{} overlaps", h.violations), h.violations == 0)),
    ));
    rows
}

/// The contention goals with every contender of the run side by side.
pub(super) fn side_by_side_table(out: &mut String, rows: &[SideBySide]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Goals: contention, every contender side by side\n");
    let _ = writeln!(
        out,
        "The bounds are the contention goals for ours; the peers are judged by the same bounds \
         for comparison. Each value is the median over the runs.\n"
    );
    let columns: Vec<Contender> = SIDE_BY_SIDE
        .iter()
        .copied()
        .filter(|c| {
            rows.iter()
                .any(|r| r.cells.iter().any(|x| x.contender == *c))
        })
        .collect();
    let _ = write!(out, "| scenario | goal |");
    for c in &columns {
        let _ = write!(out, " {} |", c.label());
    }
    let _ = write!(out, "\n|---|---|");
    for _ in &columns {
        let _ = write!(out, "---|");
    }
    let _ = writeln!(out);
    for row in rows {
        let _ = write!(out, "| {} | {} |", row.scenario, row.goal);
        for c in &columns {
            match row.cells.iter().find(|x| x.contender == *c) {
                Some(cell) => {
                    let verdict = if cell.met { "**met**" } else { "**missed**" };
                    let _ = write!(out, " {} {verdict} |", cell.measured);
                }
                None => {
                    let _ = write!(out, " not measured |");
                }
            }
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
}
