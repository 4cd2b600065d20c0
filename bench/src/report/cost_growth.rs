//! Section 7, how cost grows (tasks on distinct keys, held locks, wake-ups), and the goals
//! of the held-locks sweep.

use std::fmt::Write as _;

use super::goal::{Goal, not_measured};
use super::results::Results;
use crate::contenders::Contender;
use crate::figures::{median, ms, thousands};
use crate::scaling::WakeRecord;
use crate::scenarios::{CycleRecord, WatchdogRecord};

/// The goals of the held-locks sweep: at most 1 KB of heap per held lock at every size,
/// and a flat per-lock cost (largest over smallest at most 1.5, heap and CPU per renewal).
pub(super) fn held_goals(held: &[WatchdogRecord]) -> Vec<Goal> {
    let mut held: Vec<&WatchdogRecord> = held.iter().collect();
    held.sort_by_key(|r| r.locks);
    if held.is_empty() {
        return vec![
            not_measured("Held locks (1,000 to 100,000): at most 1 KB of heap per held lock"),
            not_measured("Held locks (1,000 to 100,000): flat per-lock cost"),
        ];
    }
    let heaps = heap_per_size(&held);
    // Growth: the largest size's per-lock cost over the smallest size's (fixed costs per
    // period weigh most at the smallest size, so a value below 1 is no growth either).
    let (Some(smallest), Some(largest)) = (held.first(), held.last()) else {
        return Vec::new();
    };
    let growth = |pick: fn(&WatchdogRecord) -> f64| {
        let (low, high) = (pick(smallest), pick(largest));
        if low > 0.0 { high / low } else { f64::INFINITY }
    };
    let heap_growth = growth(|r| r.heap_per_lock_bytes);
    let cpu_growth = growth(|r| r.client_cpu_us_per_renewal);
    let reads_growth = growth(|r| r.server_reads_per_period / r.locks.max(1) as f64);
    let lost: u64 = held.iter().map(|r| r.lost).sum();
    vec![
        Goal {
            goal: "Held locks (1,000 to 100,000): at most 1 KB of heap per held lock".into(),
            met: Some(held.iter().all(|r| r.heap_per_lock_bytes <= 1024.0)),
            inconclusive: false,
            detail: format!(
                "{} (`mallinfo2`: what the locks allocate, the guards' own allocations \
                 included; the guard value itself, {} B, is the caller's: on its stack or in \
                 storage it made before the count; section 7).",
                heaps,
                held.first().map_or(0, |r| r.guard_bytes)
            ),
        },
        Goal {
            goal: "Held locks (1,000 to 100,000): flat per-lock cost (at the largest size at \
                   most 1.5× the smallest size's: heap per lock, client CPU per renewal, server \
                   reads per lock and period; no lease lost)"
                .into(),
            met: Some(heap_growth <= 1.5 && cpu_growth <= 1.5 && reads_growth <= 1.5 && lost == 0),
            inconclusive: false,
            detail: format!(
                "from {} to {} locks: heap per lock {heap_growth:.2}×, CPU per renewal \
                 {cpu_growth:.2}×, server reads per lock and period {reads_growth:.2}×; {lost} \
                 leases lost.",
                thousands(smallest.locks as f64),
                thousands(largest.locks as f64)
            ),
        },
    ]
}

/// Heap per held lock at each size, e.g. "312 B at 1,000".
fn heap_per_size(held: &[&WatchdogRecord]) -> String {
    let heaps: Vec<String> = held
        .iter()
        .map(|r| {
            format!(
                "{} B at {}",
                thousands(r.heap_per_lock_bytes),
                thousands(r.locks as f64)
            )
        })
        .collect();
    heaps.join(", ")
}

/// Section 7: how cost grows.
pub(super) fn scaling_section(out: &mut String, results: &Results, link: Option<&str>) {
    let scaling = &results.scaling;
    let _ = writeln!(out, "## 7. How cost grows\n");
    if scaling.cycles.is_empty() && scaling.held.is_empty() && scaling.wakeups.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    tasks_part(out, results, link);
    if !scaling.held.is_empty() {
        held_part(out, results);
    }
    if !scaling.wakeups.is_empty() {
        wakeups_part(out, results);
    }
}

/// Section 7's tasks on distinct keys: the cycles/s and client CPU per cycle by tasks.
fn tasks_part(out: &mut String, results: &Results, link: Option<&str>) {
    let s = &results.settings;
    let scaling = &results.scaling;
    let _ = writeln!(
        out,
        "**Tasks on distinct keys.** 1 to 4,096 tasks, each cycling acquire (no waiting) + \
         release on a key of its own for {:.1} s per run ({} runs, medians), as in sections 1 \
         and 2 (the 1- and 256-task rows repeat those scenarios with this section's \
         duration). Client CPU is this process's user + system time per cycle. Both are \
         wall-clock figures of a process sharing its cores with the server: other work on the \
         machine moves them (section 6 counts the one-task cycle in instructions instead).\n",
        s.scaling_cycle_s, s.scaling_runs
    );
    let mut tasks: Vec<u64> = scaling.cycles.iter().map(|r| r.tasks).collect();
    tasks.sort_unstable();
    tasks.dedup();
    if !tasks.is_empty() {
        cycles_table(out, &scaling.cycles, &tasks);
        let _ = writeln!(out);
        if let Some(link) = link {
            let _ = writeln!(
                out,
                "![Cycles/s and client CPU per cycle against tasks on distinct keys]({link})\n"
            );
        }
    }
}

/// The table of tasks on distinct keys: a row per number of tasks.
fn cycles_table(out: &mut String, cycles: &[CycleRecord], tasks: &[u64]) {
    let columns = crate::scaling::CYCLE_CONTENDERS;
    let _ = write!(out, "| tasks |");
    for c in columns {
        let _ = write!(out, " {} cycles/s |", c.label());
    }
    for c in columns {
        let _ = write!(out, " {} CPU µs/cycle |", c.label());
    }
    let _ = write!(out, " ours × raw |\n|---:|");
    for _ in 0..2 * columns.len() + 1 {
        let _ = write!(out, "---:|");
    }
    let _ = writeln!(out);
    for n in tasks {
        cycles_row(out, cycles, *n);
    }
}

/// One row of [`cycles_table`]: the medians at `n` tasks.
fn cycles_row(out: &mut String, cycles: &[CycleRecord], n: u64) {
    let columns = crate::scaling::CYCLE_CONTENDERS;
    let of = |c: Contender, pick: fn(&CycleRecord) -> f64| {
        let mine: Vec<f64> = cycles
            .iter()
            .filter(|r| r.contender == c && r.tasks == n)
            .map(pick)
            .collect();
        (!mine.is_empty()).then(|| median(mine))
    };
    let _ = write!(out, "| {} |", thousands(n as f64));
    for c in columns {
        let _ = write!(
            out,
            " {} |",
            of(c, |r| r.per_s).map_or("–".to_owned(), thousands)
        );
    }
    for c in columns {
        let _ = write!(
            out,
            " {} |",
            of(c, |r| r.client_cpu_us_per_cycle).map_or("–".to_owned(), |v| format!("{v:.1}"))
        );
    }
    let ratio = match (
        of(Contender::Api, |r| r.per_s),
        of(Contender::Raw, |r| r.per_s),
    ) {
        (Some(ours), Some(raw)) if raw > 0.0 => format!("{:.2}×", ours / raw),
        _ => "–".to_owned(),
    };
    let _ = writeln!(out, " {ratio} |");
}

/// Section 7's held locks: the watchdog sweep, a row per size.
fn held_part(out: &mut String, results: &Results) {
    let s = &results.settings;
    let scaling = &results.scaling;
    let _ = writeln!(
        out,
        "**Held locks.** Ours (Lock API, a client of its own) holds 1,000, 10,000 and \
         100,000 locks at once (ttl {:.0} s, renewed every ttl/3), for {:.1} s each, once; \
         measured as in section 4.\n",
        s.watchdog_ttl_ms as f64 / 1e3,
        s.watchdog_hold_s
    );
    let _ = writeln!(
        out,
        "| held locks | acquire all | heap per held lock | RSS per held lock | renewals/period | server reads/period | reads per 1,000 locks and period | client CPU µs/renewal | client CPU (share of a core) | lost | leases tracked after |"
    );
    let _ = writeln!(
        out,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let mut held: Vec<&WatchdogRecord> = scaling.held.iter().collect();
    held.sort_by_key(|r| r.locks);
    for r in held {
        let _ = writeln!(
            out,
            "| {} | {:.2} s | {:.0} B | {:.0} B | {} | {} | {:.1} | {:.2} | {:.1}% | {} | {} |",
            thousands(r.locks as f64),
            r.acquire_s,
            r.heap_per_lock_bytes,
            r.rss_per_lock_bytes,
            thousands(r.renewals_per_period),
            thousands(r.server_reads_per_period),
            r.server_reads_per_period * 1e3 / r.locks.max(1) as f64,
            r.client_cpu_us_per_renewal,
            r.client_cpu_share * 100.0,
            r.lost,
            r.tracked_after.map_or("–".to_owned(), |t| t.to_string())
        );
    }
    let _ = writeln!(out);
}

/// Section 7's wake-ups: a row per number of keys and contender.
fn wakeups_part(out: &mut String, results: &Results) {
    let s = &results.settings;
    let scaling = &results.scaling;
    let _ = writeln!(
        out,
        "**Wake-ups.** 1, 100 and 10,000 keys contended at once, each by one holder and \
         one waiter. The holders take their keys, the waiters start waiting (200 ms plus \
         50 µs per key to settle), then every holder releases at once; a key's latency is \
         from its holder's release call to its waiter's acquire returning. Ours: the \
         holders use a client of their own, so each waiter is woken through Redis (a \
         release message); the waiters share the global client. rslock polls (its \
         default retry). *Server cmds per key* count `INFO commandstats` calls (Lua \
         included) from just before the releases until every waiter finished. Medians \
         over {} runs.\n",
        s.scaling_runs
    );
    let _ = writeln!(
        out,
        "| keys | contender | p50 latency | p99 latency | max latency | woken | missed | acquired before the release | server cmds/key |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut keys: Vec<u64> = scaling.wakeups.iter().map(|r| r.keys).collect();
    keys.sort_unstable();
    keys.dedup();
    for k in keys {
        for c in crate::scaling::WAKE_CONTENDERS {
            let mine: Vec<&WakeRecord> = scaling
                .wakeups
                .iter()
                .filter(|r| r.keys == k && r.contender == c)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
                thousands(k as f64),
                c.label(),
                ms(median(mine.iter().map(|r| r.p50_us as f64))),
                ms(median(mine.iter().map(|r| r.p99_us as f64))),
                ms(median(mine.iter().map(|r| r.max_us as f64))),
                thousands(median(mine.iter().map(|r| r.woken as f64))),
                mine.iter().map(|r| r.missed).sum::<u64>(),
                mine.iter().map(|r| r.early).sum::<u64>(),
                median(mine.iter().map(|r| r.server_cmds_per_key))
            );
        }
    }
    let _ = writeln!(out);
}
