//! Section 5, one hot key in Redlock mode over 3 masters, and its goals against rslock.

use std::fmt::Write as _;

use super::goal::{Goal, not_measured};
use super::results::Settings;
use super::summaries::{HotSummary, find};
use crate::contenders::Contender;
use crate::figures::ms;
use crate::redlock;

/// The Redlock hot key's goals against rslock: our p99 wait at most a fifth of its, our
/// acquisitions/s at least its.
pub(super) fn redlock_goals(redlock: &[HotSummary]) -> [Goal; 2] {
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
    [p99, rate]
}

/// Section 5: the Redlock hot key.
pub(super) fn redlock_section(
    out: &mut String,
    s: &Settings,
    hot: &[HotSummary],
    silent: &[HotSummary],
) {
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
    if hot.is_empty() && silent.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    redlock_table(out, hot, silent);
    let _ = writeln!(
        out,
        "\n*Utilization* is acquisitions/s × mean hold. Exclusion is checked in-process (two \
         tasks holding at once). *1 master silent*: the last master is stopped with `SIGSTOP` \
         (it accepts connections and answers nothing, as behind a dead network path) for the \
         whole window, after the warm-up, and continued (`SIGCONT`) before the counters are \
         read; ours only (node timeout 100 ms), its requests and commands counted on the two \
         masters that answer.\n"
    );
}

/// Section 5's table: a row per contender, then the rows with a master silent.
fn redlock_table(out: &mut String, hot: &[HotSummary], silent: &[HotSummary]) {
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | utilization | mean hold | p50 wait | p99 wait | max wait | went back to the releaser | requests sent/acq (3 masters) | server cmds/acq (3 masters) | open waits at end | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let rows = hot
        .iter()
        .map(|h| (h, ""))
        .chain(silent.iter().map(|h| (h, ", 1 master silent (SIGSTOP)")));
    for (h, fault) in rows {
        let _ = writeln!(
            out,
            "| {}{fault} | {:.0} | {:.2} | {} | {} | {} | {} | {:.1}% | {} | {:.1} | {:.0} | {} |",
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
}
