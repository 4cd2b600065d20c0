//! Sections 1 and 2: the uncontended cycle and many keys, against the raw limit.

use std::fmt::Write as _;

use super::results::Settings;
use super::summaries::CycleSummary;
use crate::figures::thousands;

/// Sections 1 and 2, one table each.
pub(super) fn cycle_sections(
    out: &mut String,
    s: &Settings,
    uncontended: &[CycleSummary],
    many: &[CycleSummary],
) {
    for (title, note, list) in [
        (
            "1. Uncontended cycle",
            format!(
                "One task, one key: acquire (no waiting) + release, for {:.1} s per run.",
                s.uncontended_s
            ),
            uncontended,
        ),
        (
            "2. Many keys",
            format!(
                "{} concurrent tasks, each cycling on its own key, for {:.1} s per run.",
                s.many_tasks, s.many_s
            ),
            many,
        ),
    ] {
        let _ = writeln!(out, "## {title}\n\n{note}\n");
        cycle_table(out, list);
        let _ = writeln!(
            out,
            "\nServer commands count what `INFO commandstats` counts, commands run inside Lua \
             scripts included. Client CPU is this process's (or the Python process's) user + \
             system time over the measurement. Requests sent per cycle are counted by a \
             `MONITOR` tap over a pass of up to 1,000 cycles of its own after the timed one \
             (the tap slows the server); one task waits for each reply, so every request is \
             a round trip.\n"
        );
    }
}

/// One table of sections 1 and 2: a row per contender.
fn cycle_table(out: &mut String, list: &[CycleSummary]) {
    let _ = writeln!(
        out,
        "| contender | cycles/s (median) | range over runs | × raw | × raw, same run (median) | client CPU µs/cycle | client thread switches/cycle | server µs/cycle | server cmds/cycle | requests sent/cycle | busy |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for c in list {
        let _ = writeln!(
            out,
            "| {} | {} | {}–{} | {} | {} | {:.1} | {} | {:.1} | {:.1} | {} | {} |",
            c.contender.label(),
            thousands(c.per_s),
            thousands(c.per_s_min),
            thousands(c.per_s_max),
            c.ratio_to_raw
                .map_or("–".to_owned(), |r| format!("{r:.2}×")),
            c.paired_ratio
                .map_or("–".to_owned(), |r| format!("{r:.2}×")),
            c.client_cpu_us_per_cycle,
            c.client_switches_per_cycle
                .map_or("–".to_owned(), |v| format!("{v:.1}")),
            c.server_us_per_cycle,
            c.server_cmds_per_cycle,
            c.requests_per_cycle
                .map_or("–".to_owned(), |r| format!("{r:.2}")),
            c.failures
        );
    }
}
