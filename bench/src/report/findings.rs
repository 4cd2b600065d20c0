//! The findings: what the figures say about lock-runtime's own costs.

use std::fmt::Write as _;

use super::replicas;
use super::results::{Results, Settings};
use super::summaries::{CycleSummary, HotSummary, WatchdogSummary, find};
use crate::contenders::Contender;
use crate::figures::{ms, thousands};

/// What the figures say about lock-runtime's own costs; each paragraph appears only while
/// the measurement still shows it.
pub(super) fn findings(
    out: &mut String,
    (uncontended, hot, watchdog): (&[CycleSummary], &[HotSummary], &[WatchdogSummary]),
    results: &Results,
    s: &Settings,
) {
    let mut notes = Vec::new();
    notes.extend(uncontended_findings(uncontended));
    notes.extend(hot_key_findings(hot, s));
    if let Some(ours) = find(watchdog, Contender::Api, |w| w.contender)
        && ours.renewals_per_period > 1.2 * ours.locks as f64
    {
        notes.push(format!(
            "**Renewals more often than every ttl/3.** {} renewals per period for {} \
                 locks: leases renewed early (up to ttl/12 before they fall due, to share a \
                 pipeline) restart their ttl/3 from the early send time.",
            thousands(ours.renewals_per_period),
            ours.locks
        ));
    }
    notes.extend(replicas::finding(&results.replicas));
    notes.extend(replicas::durable_finding(results));
    if notes.is_empty() {
        return;
    }
    let _ = writeln!(out, "## Findings\n");
    for note in notes {
        let _ = writeln!(out, "- {note}");
    }
    let _ = writeln!(out);
}

/// The uncontended cycle's findings: a task wake-up per cycle, the server time per cycle.
fn uncontended_findings(uncontended: &[CycleSummary]) -> Vec<String> {
    let mut notes = Vec::new();
    let api = find(uncontended, Contender::Api, |c| c.contender);
    let raw = find(uncontended, Contender::Raw, |c| c.contender);
    if let (Some(api), Some(raw)) = (api, raw) {
        if let (Some(a), Some(b)) = (api.client_switches_per_cycle, raw.client_switches_per_cycle)
            && a > b + 1.0
        {
            notes.push(format!(
                "**A task wake-up per acquisition.** {a:.1} thread switches per cycle where \
                 raw's costs {b:.1}, and {:.0} µs of client CPU per cycle against {:.0} µs. \
                 The watchdog's scheduler used to be woken by every lease registration \
                 (fixed: an idle scheduler now looks again after the recent ttl/3, see \
                 bench/HISTORY.md); something else now wakes a task per cycle.",
                api.client_cpu_us_per_cycle, raw.client_cpu_us_per_cycle
            ));
        }
        if api.server_us_per_cycle > 1.5 * raw.server_us_per_cycle {
            notes.push(format!(
                "**Server time per uncontended cycle.** Ours acquires with a plain `SET NX \
                 PX` (a client that knows of no waiter on the key) and releases with \
                 release.lua, which besides compare-and-delete looks at the wait queue for \
                 a waiter to hand the lock to: {:.1} server commands and {:.1} µs of server \
                 time per cycle against raw's {:.1} and {:.1} µs. That is the price of \
                 fairness across processes; it shows most where client and server share two \
                 cores.",
                api.server_cmds_per_cycle,
                api.server_us_per_cycle,
                raw.server_cmds_per_cycle,
                raw.server_us_per_cycle
            ));
        }
    }
    notes
}

/// The hot key's findings: three requests per hand-over, the timer's longer holds.
fn hot_key_findings(hot: &[HotSummary], s: &Settings) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(ours) = find(hot, Contender::Api, |h| h.contender) {
        if ours.requests_per_acq.is_some_and(|r| r > 2.5) {
            notes.push(format!(
                "**Three requests per hand-over on a hot key.** A waiter sends one acquire \
                 that puts it in the queue and another when the release wakes it, and the \
                 holder sends the release: {:.2} script calls (FCALL or EVALSHA) per acquisition measured (plus the \
                 one subscription per process and the waiters' first tries and give-ups at \
                 the edges of the window). The release already keeps the key for the head \
                 waiter (`~handover`); setting it to the head's own token instead would save \
                 the woken waiter's round trip, but the waiter could then date its lease only \
                 from its first try (a lease shortened by the whole wait). That round trip is \
                 also what separates ours from the peers in acquisitions/s: they skip the \
                 hand-over when the releasing task takes the lock straight back.",
                ours.evalsha_per_acq
            ));
        }
        if ours.mean_hold_us > 1.5e3 * s.hot_hold_ms {
            notes.push(format!(
                "**`tokio::time::sleep({} ms)` holds for {}.** Tokio's timer wheel has a \
                 1 ms tick and rounds up, so every Rust contender holds about 2 ms; redis-py's \
                 `time.sleep` holds closer to 1 ms. The fairness bounds above use the measured \
                 mean hold.",
                s.hot_hold_ms,
                ms(ours.mean_hold_us)
            ));
        }
    }
    notes
}
