//! The sections of issues 14 and 15 in BENCHMARKS.md: their goals, the Redlock hot key
//! (section 5) and the instructions per cycle (section 6).

use std::fmt::Write as _;

use super::{Goal, HotSummary, Results, Settings, find, median, ms, thousands, verdict};
use crate::contenders::Contender;
use crate::instructions::{self, InstructionRecord};
use crate::redlock;

/// Medians of one contender's instruction counts.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct InstructionSummary {
    contender: Contender,
    runs: usize,
    per_cycle: f64,
    per_cycle_min: f64,
    per_cycle_max: f64,
}

pub(super) fn instruction_summaries(records: &[InstructionRecord]) -> Vec<InstructionSummary> {
    super::contenders_in(records.iter().map(|r| r.contender))
        .into_iter()
        .map(|contender| {
            let mine: Vec<f64> = records
                .iter()
                .filter(|r| r.contender == contender)
                .map(|r| r.per_cycle)
                .collect();
            InstructionSummary {
                contender,
                runs: mine.len(),
                per_cycle: median(mine.iter().copied()),
                per_cycle_min: mine.iter().copied().fold(f64::INFINITY, f64::min),
                per_cycle_max: mine.iter().copied().fold(0.0, f64::max),
            }
        })
        .collect()
}

/// The goals of issues 14 (Redlock hot key) and 15 (the attribute's instructions).
pub(super) fn goals(redlock: &[HotSummary], counted: &[InstructionSummary]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let ours = find(redlock, Contender::Api, |h| h.contender);
    let theirs = find(redlock, Contender::Rslock, |h| h.contender);
    let (p99, rate) = match (ours, theirs) {
        (Some(ours), Some(theirs)) => (
            Goal {
                goal: "Redlock hot key (3 masters): our p99 wait at most 1/5 of rslock's".into(),
                met: Some(ours.p99_us * 5.0 <= theirs.p99_us),
                inconclusive: false,
                detail: format!(
                    "ours {} vs rslock {} ({:.2}× rslock's; the bound is 0.20×).",
                    ms(ours.p99_us),
                    ms(theirs.p99_us),
                    ours.p99_us / theirs.p99_us.max(1.0)
                ),
            },
            Goal {
                goal: "Redlock hot key (3 masters): our acquisitions/s at least rslock's".into(),
                met: Some(ours.per_s >= theirs.per_s),
                inconclusive: false,
                detail: format!(
                    "ours {:.0}/s vs rslock {:.0}/s ({:.2}×); requests sent per acquisition, \
                     all masters: ours {}, rslock {}.",
                    ours.per_s,
                    theirs.per_s,
                    ours.per_s / theirs.per_s.max(1e-9),
                    ours.requests_per_acq
                        .map_or("–".to_owned(), |r| format!("{r:.2}")),
                    theirs
                        .requests_per_acq
                        .map_or("–".to_owned(), |r| format!("{r:.2}")),
                ),
            },
        ),
        _ => (
            not_measured("Redlock hot key (3 masters): our p99 wait at most 1/5 of rslock's"),
            not_measured("Redlock hot key (3 masters): our acquisitions/s at least rslock's"),
        ),
    };
    goals.push(p99);
    goals.push(rate);
    let attribute = find(counted, Contender::Attribute, |c| c.contender);
    let api = find(counted, Contender::Api, |c| c.contender);
    goals.push(match (attribute, api) {
        (Some(attribute), Some(api)) if api.per_cycle > 0.0 => {
            let overhead = attribute.per_cycle / api.per_cycle - 1.0;
            Goal {
                goal: "Attribute's instructions per uncontended cycle within 2 % of the API's"
                    .into(),
                met: Some(overhead <= 0.02),
                inconclusive: false,
                detail: format!(
                    "#[distributed_lock] {} vs Lock API {} instructions per cycle ({:+.1} %; \
                     callgrind, section 6).",
                    thousands(attribute.per_cycle),
                    thousands(api.per_cycle),
                    overhead * 100.0
                ),
            }
        }
        _ => not_measured("Attribute's instructions per uncontended cycle within 2 % of the API's"),
    });
    goals
}

fn not_measured(goal: &str) -> Goal {
    Goal {
        goal: goal.into(),
        met: None,
        inconclusive: false,
        detail: "not measured in this run".into(),
    }
}

/// The goals table of issues 14 and 15.
pub(super) fn goals_table(out: &mut String, goals: &[Goal]) {
    let _ = writeln!(out, "## Goals (issues 14 and 15)\n");
    let _ = writeln!(out, "| goal | verdict | measured |\n|---|---|---|");
    for goal in goals {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            goal.goal,
            verdict(goal),
            goal.detail
        );
    }
    let _ = writeln!(out);
}

/// Section 5: the Redlock hot key.
pub(super) fn redlock_section(out: &mut String, s: &Settings, hot: &[HotSummary]) {
    let _ = writeln!(out, "## 5. One hot key in Redlock mode, 3 masters\n");
    let _ = writeln!(
        out,
        "`bench/run` starts {} more throwaway redis-servers (loopback, no persistence) as \
         independent masters. {} tasks in this process contend for one key for {:.1} s per \
         run, each holding it for `tokio::time::sleep(1 ms)`, as in section 3: ours through \
         `LockClient::new(Config::redlock([3 URLs]))` and the Lock API, rslock through \
         `LockManager::new([3 URLs])` and `acquire` (its default retry: 3 tries 0–200 ms \
         apart, then again). Each contender warms up with one acquisition on a key of its \
         own first. *Requests sent* are counted by a `MONITOR` tap on every master and \
         summed (commands inside Lua not counted); *server cmds* are `INFO commandstats` \
         calls summed over the masters, Lua included. Both are per acquisition, so a \
         Redlock round over 3 masters counts 3 requests.\n",
        s.redlock_masters.max(3),
        s.redlock_tasks,
        s.redlock_window_s
    );
    if hot.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | utilization | mean hold | p50 wait | p99 wait | max wait | went back to the releaser | requests sent/acq (3 masters) | server cmds/acq (3 masters) | open waits at end | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for h in hot {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {} | {} | {} | {} | {:.1}% | {} | {:.1} | {:.0} | {} |",
            redlock::label(h.contender),
            h.per_s,
            h.utilization,
            ms(h.mean_hold_us),
            ms(h.p50_us),
            ms(h.p99_us),
            ms(h.max_us),
            h.same_task_share * 100.0,
            h.requests_per_acq
                .map_or("–".to_owned(), |r| format!("{r:.2}")),
            h.server_cmds_per_acq,
            h.open_waits,
            h.violations
        );
    }
    let _ = writeln!(
        out,
        "\n*Utilization* is acquisitions/s × mean hold. Exclusion is checked in-process (two \
         tasks holding at once).\n"
    );
}

/// Section 6: instructions per uncontended cycle.
pub(super) fn instructions_section(
    out: &mut String,
    results: &Results,
    counted: &[InstructionSummary],
) {
    let _ = writeln!(
        out,
        "## 6. Instructions per uncontended cycle (callgrind)\n"
    );
    let _ = writeln!(
        out,
        "Client instructions per acquire + release (one task, one key, as in section 1), \
         counted by `valgrind --tool=callgrind`: a count that other work on the machine does \
         not move. The bench runs itself in its `instructions` mode under callgrind twice per \
         contender, {} and {} measured cycles after the same {} warm-up cycles, and divides \
         the difference of the two totals (Ir, every thread) by the {} extra cycles, so \
         start-up, connecting and shutdown cancel. The mode uses a current-thread tokio \
         runtime (no work-stealing between workers); the redis-server runs natively, only \
         the client is counted.\n",
        instructions::SHORT,
        instructions::LONG,
        instructions::WARM_UP,
        instructions::LONG - instructions::SHORT
    );
    if counted.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    let raw = find(counted, Contender::Raw, |c| c.contender).map(|c| c.per_cycle);
    let api = find(counted, Contender::Api, |c| c.contender).map(|c| c.per_cycle);
    let _ = writeln!(
        out,
        "| contender | instructions/cycle | range over counts | × raw | × Lock API | short run total | long run total |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for c in counted {
        let record = results
            .instructions
            .iter()
            .find(|r| r.contender == c.contender);
        let _ = writeln!(
            out,
            "| {} | {} | {}–{} | {} | {} | {} | {} |",
            c.contender.label(),
            thousands(c.per_cycle),
            thousands(c.per_cycle_min),
            thousands(c.per_cycle_max),
            raw.filter(|r| *r > 0.0)
                .map_or("–".to_owned(), |r| format!("{:.2}×", c.per_cycle / r)),
            api.filter(|a| *a > 0.0).map_or("–".to_owned(), |a| format!(
                "{:+.1} %",
                (c.per_cycle / a - 1.0) * 100.0
            )),
            record.map_or("–".to_owned(), |r| thousands(r.short_total as f64)),
            record.map_or("–".to_owned(), |r| thousands(r.long_total as f64)),
        );
    }
    let _ = writeln!(out);
}

/// redlock_hot_key.csv and instructions.csv.
pub(super) fn write_csv(results: &Results, dir: &std::path::Path) -> crate::BenchResult<()> {
    let mut hot = String::from(
        "contender,run,tasks,acquisitions,per_s,utilization,mean_hold_us,p50_us,p99_us,max_us,same_task_share,requests_per_acq,server_cmds_per_acq,open_waits,violations\n",
    );
    for r in &results.redlock_hot {
        let _ = writeln!(
            hot,
            "{},{},{},{},{:.1},{:.4},{:.1},{},{},{},{:.4},{},{:.3},{},{}",
            r.contender.id(),
            r.run,
            r.tasks,
            r.acquisitions,
            r.per_s,
            r.utilization,
            r.mean_hold_us,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.same_task_share,
            r.requests_per_acq
                .map_or(String::new(), |v| format!("{v:.3}")),
            r.server_cmds_per_acq,
            r.censored_us.len(),
            r.violations
        );
    }
    std::fs::write(dir.join("redlock_hot_key.csv"), hot)?;
    let mut counted =
        String::from("contender,run,short_cycles,long_cycles,short_total,long_total,per_cycle\n");
    for r in &results.instructions {
        let _ = writeln!(
            counted,
            "{},{},{},{},{},{},{:.1}",
            r.contender.id(),
            r.run,
            instructions::SHORT,
            instructions::LONG,
            r.short_total,
            r.long_total,
            r.per_cycle
        );
    }
    std::fs::write(dir.join("instructions.csv"), counted)?;
    Ok(())
}
