//! The raw measurements as CSV files, one per scenario, beside results.json.

use std::fmt::Write as _;
use std::path::Path;

use super::results::Results;
use crate::error::BenchResult;
use crate::instructions;

/// What writes one CSV file's text.
type Writer = fn(&Results) -> String;

/// Each CSV file and what writes it, in the order they are written.
const FILES: [(&str, Writer); 10] = [
    ("cycles.csv", cycles_csv),
    ("hot_key.csv", hot_key_csv),
    ("hot_key_processes.csv", hot_key_processes_csv),
    ("hot_key_waits.csv", hot_key_waits_csv),
    ("watchdog.csv", watchdog_csv),
    ("redlock_hot_key.csv", redlock_hot_key_csv),
    ("instructions.csv", instructions_csv),
    ("scaling_cycles.csv", scaling_cycles_csv),
    ("scaling_held.csv", scaling_held_csv),
    ("scaling_wakeups.csv", scaling_wakeups_csv),
];

/// The CSV files of every scenario.
pub(super) fn write_csv(results: &Results, dir: &Path) -> BenchResult<()> {
    for (name, csv) in FILES {
        std::fs::write(dir.join(name), csv(results))?;
    }
    Ok(())
}

/// cycles.csv: scenarios 1 and 2: a row per measurement.
fn cycles_csv(results: &Results) -> String {
    let mut cycles = String::from(
        "scenario,contender,run,tasks,cycles,failures,elapsed_s,per_s,client_cpu_us_per_cycle,server_cmds_per_cycle,server_us_per_cycle\n",
    );
    for (scenario, list) in [
        ("uncontended", &results.uncontended),
        ("many_keys", &results.many_keys),
    ] {
        for r in list {
            let _ = writeln!(
                cycles,
                "{scenario},{},{},{},{},{},{:.3},{:.1},{:.2},{:.2},{:.2}",
                r.contender.id(),
                r.run,
                r.tasks,
                r.cycles,
                r.failures,
                r.elapsed_s,
                r.per_s,
                r.client_cpu_us_per_cycle,
                r.server_cmds_per_cycle,
                r.server_us_per_cycle
            );
        }
    }
    cycles
}

/// hot_key.csv: scenario 3: a row per measurement.
fn hot_key_csv(results: &Results) -> String {
    let mut hot = String::from(
        "contender,run,tasks,acquisitions,per_s,p50_us,p99_us,max_us,mean_hold_us,same_task_share,requests_per_acq,lua_cmds_per_acq,server_cmds_per_acq,open_waits,violations,utilization\n",
    );
    for r in &results.hot_key {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
        let _ = writeln!(
            hot,
            "{},{},{},{},{:.1},{},{},{},{:.1},{:.4},{},{},{:.3},{},{},{:.4}",
            r.contender.id(),
            r.run,
            r.tasks,
            r.acquisitions,
            r.per_s,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.mean_hold_us,
            r.same_task_share,
            opt(r.requests_per_acq),
            opt(r.lua_cmds_per_acq),
            r.server_cmds_per_acq,
            r.censored_us.len(),
            r.violations,
            r.utilization
        );
    }
    hot
}

/// hot_key_processes.csv: scenario 3b: a row per measurement.
fn hot_key_processes_csv(results: &Results) -> String {
    let mut spread = String::from(
        "contender,run,processes,tasks,acquisitions,per_s,utilization,mean_hold_us,p50_us,p99_us,max_us,process_acquisitions,same_task_share,requests_per_acq,server_cmds_per_acq,open_waits,violations\n",
    );
    for r in &results.hot_key_processes {
        let per_process: Vec<String> = r.process_acquisitions.iter().map(u64::to_string).collect();
        let _ = writeln!(
            spread,
            "{},{},{},{},{},{:.1},{:.4},{:.1},{},{},{},{},{:.4},{},{:.3},{},{}",
            r.contender.id(),
            r.run,
            r.processes,
            r.tasks,
            r.acquisitions,
            r.per_s,
            r.utilization,
            r.mean_hold_us,
            r.p50_us,
            r.p99_us,
            r.max_us,
            per_process.join(" "),
            r.same_task_share,
            r.requests_per_acq
                .map_or(String::new(), |v| format!("{v:.3}")),
            r.server_cmds_per_acq,
            r.censored_us.len(),
            r.violations
        );
    }
    spread
}

/// hot_key_waits.csv: scenario 3: every wait, open (censored) or not.
fn hot_key_waits_csv(results: &Results) -> String {
    let mut waits = String::from("contender,run,wait_us,open\n");
    for r in &results.hot_key {
        for w in &r.waits_us {
            let _ = writeln!(waits, "{},{},{w},0", r.contender.id(), r.run);
        }
        for w in &r.censored_us {
            let _ = writeln!(waits, "{},{},{w},1", r.contender.id(), r.run);
        }
    }
    waits
}

/// watchdog.csv: scenario 4: a row per measurement.
fn watchdog_csv(results: &Results) -> String {
    let mut wd = String::from(
        "contender,run,locks,ttl_ms,acquire_s,hold_s,renewals_per_period,server_reads_per_period,client_cpu_share,client_cpu_us_per_renewal,rss_per_lock_bytes,dbsize_before,dbsize_held,dbsize_after,settle_ms,lost\n",
    );
    for r in &results.watchdog {
        let _ = writeln!(
            wd,
            "{},{},{},{},{:.3},{:.3},{:.1},{:.1},{:.4},{:.2},{:.0},{},{},{},{:.1},{}",
            r.contender.id(),
            r.run,
            r.locks,
            r.ttl_ms,
            r.acquire_s,
            r.hold_s,
            r.renewals_per_period,
            r.server_reads_per_period,
            r.client_cpu_share,
            r.client_cpu_us_per_renewal,
            r.rss_per_lock_bytes,
            r.dbsize_before,
            r.dbsize_held,
            r.dbsize_after,
            r.settle_ms,
            r.lost
        );
    }
    wd
}

/// redlock_hot_key.csv: section 5: a row per measurement.
fn redlock_hot_key_csv(results: &Results) -> String {
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
    hot
}

/// instructions.csv: section 6: a row per measurement.
fn instructions_csv(results: &Results) -> String {
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
    counted
}

/// scaling_cycles.csv: section 7, tasks on distinct keys: a row per measurement.
fn scaling_cycles_csv(results: &Results) -> String {
    let mut cycles = String::from(
        "contender,run,tasks,cycles,per_s,client_cpu_us_per_cycle,server_us_per_cycle,server_cmds_per_cycle\n",
    );
    for r in &results.scaling.cycles {
        let _ = writeln!(
            cycles,
            "{},{},{},{},{:.1},{:.2},{:.2},{:.2}",
            r.contender.id(),
            r.run,
            r.tasks,
            r.cycles,
            r.per_s,
            r.client_cpu_us_per_cycle,
            r.server_us_per_cycle,
            r.server_cmds_per_cycle
        );
    }
    cycles
}

/// scaling_held.csv: section 7, held locks: a row per measurement.
fn scaling_held_csv(results: &Results) -> String {
    let mut held = String::from(
        "contender,locks,acquire_s,heap_per_lock_bytes,rss_per_lock_bytes,renewals_per_period,server_reads_per_period,client_cpu_us_per_renewal,client_cpu_share,lost\n",
    );
    for r in &results.scaling.held {
        let _ = writeln!(
            held,
            "{},{},{:.3},{:.0},{:.0},{:.1},{:.1},{:.3},{:.4},{}",
            r.contender.id(),
            r.locks,
            r.acquire_s,
            r.heap_per_lock_bytes,
            r.rss_per_lock_bytes,
            r.renewals_per_period,
            r.server_reads_per_period,
            r.client_cpu_us_per_renewal,
            r.client_cpu_share,
            r.lost
        );
    }
    held
}

/// scaling_wakeups.csv: section 7, wake-ups: a row per measurement.
fn scaling_wakeups_csv(results: &Results) -> String {
    let mut wake = String::from(
        "contender,run,keys,woken,missed,early,p50_us,p99_us,max_us,server_cmds_per_key\n",
    );
    for r in &results.scaling.wakeups {
        let _ = writeln!(
            wake,
            "{},{},{},{},{},{},{},{},{},{:.2}",
            r.contender.id(),
            r.run,
            r.keys,
            r.woken,
            r.missed,
            r.early,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.server_cmds_per_key
        );
    }
    wake
}
