//! The hot key's sections: contended from one process (section 3) and from several (3b).

use std::fmt::Write as _;

use super::results::Settings;
use super::summaries::HotSummary;
use crate::contenders::Contender;
use crate::figures::ms;

/// Section 3: tasks of one process contending for one key, with the plot of their waits.
pub(super) fn hot_key_section(
    out: &mut String,
    s: &Settings,
    hot: &[HotSummary],
    plot_link: Option<&str>,
) {
    let _ = writeln!(out, "## 3. One hot key\n");
    let _ = writeln!(
        out,
        "{} tasks contend for one key for {:.1} s per run; each holds it for \
         `tokio::time::sleep({} ms)` (the mean hold below is what that really took). Waits \
         still open when the window closed count at their length so far. The peers wait with \
         their defaults: rslock retries 3 times 0–200 ms apart and starts over, \
         async-redis-lock polls every 100 ms, redis-py polls every 100 ms.\n",
        s.hot_tasks, s.hot_window_s, s.hot_hold_ms
    );
    hot_table(out, hot);
    let _ = writeln!(
        out,
        "\n*Requests sent* are the commands clients sent (counted by a `MONITOR` tap, which \
         tells them from commands run inside Lua); *server cmds* are `INFO commandstats` \
         calls, Lua included. *Utilization* is acquisitions/s × mean hold: the share of the \
         window in which some task held the lock (1 would be a lock never idle between \
         holders). A fair hand-over bounds the wait by contenders × hold: here \
         {} × {} = {}.\n",
        s.hot_tasks,
        hot.iter()
            .find(|h| h.contender == Contender::Api)
            .map_or("–".to_owned(), |h| ms(h.mean_hold_us)),
        hot.iter()
            .find(|h| h.contender == Contender::Api)
            .map_or("–".to_owned(), |h| ms(h.mean_hold_us * s.hot_tasks as f64))
    );
    if let Some(link) = plot_link {
        let _ = writeln!(
            out,
            "![Acquire-wait distributions on the hot key (CDF, all runs pooled)]({link})\n"
        );
    }
}

/// Section 3b: the hot key contended from several processes.
pub(super) fn hot_processes_section(out: &mut String, s: &Settings, spread: &[HotSummary]) {
    let _ = writeln!(
        out,
        "## 3b. One hot key, {} processes × {} tasks\n",
        s.hot_processes, s.hot_tasks_per_process
    );
    let _ = writeln!(
        out,
        "The bench starts {} child processes of its own (this binary in worker mode; for \
         redis-py, {} Python processes with {} threads each), each with {} tasks contending \
         for one key for {:.1} s per run and holding it for a 1 ms sleep (the mean hold is \
         what that really took). The children connect and warm up, say `ready`, and start \
         together on `go`; the server's counters and the `MONITOR` tap cover the window. \
         Waits still open when the window closed count at their length so far. A process's \
         share is its part of all acquisitions (smallest – largest); *went back to the \
         releaser* counts, over the holds of all processes in time order, a hold by the task \
         that held just before. Utilization, requests sent and server cmds are as in section \
         3. Exclusion is checked across processes from every hold's wall-clock interval, \
         measured inside the critical section.\n",
        s.hot_processes,
        s.hot_processes,
        s.hot_tasks_per_process,
        s.hot_tasks_per_process,
        s.hot_processes_window_s
    );
    if spread.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    processes_table(out, spread);
    let _ = writeln!(out);
}

/// Section 3's table: a row per contender.
fn hot_table(out: &mut String, hot: &[HotSummary]) {
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | p50 wait | p99 wait | max wait | mean hold | utilization | went back to the releaser | requests sent/acq | server cmds/acq | open waits at end | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for h in hot {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {} | {} | {} | {} | {:.2} | {:.1}% | {} | {:.1} | {:.0} | {} |",
            h.contender.label(),
            h.per_s,
            ms(h.p50_us),
            ms(h.p99_us),
            ms(h.max_us),
            ms(h.mean_hold_us),
            h.utilization,
            h.same_task_share * 100.0,
            h.requests_per_acq
                .map_or("–".to_owned(), |r| format!("{r:.2}")),
            h.server_cmds_per_acq,
            h.open_waits,
            h.violations
        );
    }
}

/// Section 3b's table: a row per contender.
fn processes_table(out: &mut String, spread: &[HotSummary]) {
    let _ = writeln!(
        out,
        "| contender | acquisitions/s | utilization | mean hold | p50 wait | p99 wait | max wait | contenders × mean hold | share per process | went back to the releaser | requests sent/acq | server cmds/acq | open waits at end | exclusion violations |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for h in spread {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {} | {} | {} | {} | {} | {:.1}–{:.1} % | {:.1}% | {} | {:.1} | {:.0} | {} |",
            h.contender.label(),
            h.per_s,
            h.utilization,
            ms(h.mean_hold_us),
            ms(h.p50_us),
            ms(h.p99_us),
            ms(h.max_us),
            ms(h.tasks as f64 * h.mean_hold_us),
            h.share_min * 100.0,
            h.share_max * 100.0,
            h.same_task_share * 100.0,
            h.requests_per_acq
                .map_or("–".to_owned(), |r| format!("{r:.2}")),
            h.server_cmds_per_acq,
            h.open_waits,
            h.violations
        );
    }
}
