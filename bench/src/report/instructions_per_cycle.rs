//! Section 6, instructions per uncontended cycle counted by callgrind, and the attribute's
//! goal against the API.

use std::fmt::Write as _;

use super::goal::{Goal, not_measured};
use super::results::Results;
use super::summaries::{InstructionSummary, find};
use crate::contenders::Contender;
use crate::figures::thousands;
use crate::instructions;

/// The attribute's instructions per uncontended cycle against the API's: within 2 %.
pub(super) fn attribute_instructions_goal(counted: &[InstructionSummary]) -> Goal {
    let attribute = find(counted, Contender::Attribute, |c| c.contender);
    let api = find(counted, Contender::Api, |c| c.contender);
    match (attribute, api) {
        (Some(attribute), Some(api)) if api.per_cycle > 0.0 => {
            let overhead = attribute.per_cycle / api.per_cycle - 1.0;
            Goal {
                goal: "Attribute's instructions per uncontended cycle within 2 % of the API's"
                    .into(),
                met: Some(overhead <= 0.02),
                inconclusive: false,
                detail: format!(
                    "#[distributed_lock] {} vs Lock API {} instructions per cycle ({:+.1} %; \
                     callgrind, section 6).{}",
                    thousands(attribute.per_cycle),
                    thousands(api.per_cycle),
                    overhead * 100.0,
                    if overhead <= 0.02 {
                        ""
                    } else {
                        " What the attribute adds is its run path, which the API's bare \
                         acquire and release skip: the body's `current_lock()` scope (a \
                         description of the lock shared with the body, made and dropped per \
                         call) and the watch that stops the body at a loss (`OnLost::Cancel`), \
                         about 1.5k instructions in callgrind's per-function counts. Next \
                         step: a scope that borrows the guard's description instead of \
                         sharing a new one."
                    }
                ),
            }
        }
        _ => not_measured("Attribute's instructions per uncontended cycle within 2 % of the API's"),
    }
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
         count, {} and {} measured cycles after the same {} warm-up cycles, and divides \
         the difference of the two totals (Ir, every thread) by the {} extra cycles, so \
         start-up, connecting and shutdown cancel. The mode uses a current-thread tokio \
         runtime (no work-stealing between workers); the redis-server runs natively, only \
         the client is counted. {} counts per contender, interleaved; the range shows what \
         is left of noise.\n",
        thousands(instructions::SHORT as f64),
        thousands(instructions::LONG as f64),
        thousands(instructions::WARM_UP as f64),
        thousands((instructions::LONG - instructions::SHORT) as f64),
        instructions::COUNTS
    );
    if counted.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    instructions_table(out, results, counted);
}

/// Section 6's table: a row per contender.
fn instructions_table(out: &mut String, results: &Results, counted: &[InstructionSummary]) {
    let raw = find(counted, Contender::Raw, |c| c.contender).map(|c| c.per_cycle);
    let api = find(counted, Contender::Api, |c| c.contender).map(|c| c.per_cycle);
    let _ = writeln!(
        out,
        "| contender | instructions/cycle | range over counts | × raw | over Lock API | short run total (first count) | long run total (first count) |"
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
