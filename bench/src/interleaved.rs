//! The scenarios measured in every run, each contender in turn (the order rotates by run):
//! one function per scenario family, each noting a failed measurement and carrying on.

use std::time::Duration;

use crate::contenders::Contender;
use crate::failures::failed;
use crate::plan::{Plan, rotated};
use crate::report::Results;
use crate::setup::Setup;
use crate::{processes, redlock, replicas, scaling, scenarios};

/// One run of every interleaved scenario, in the order of the report.
pub(crate) async fn run_scenarios(setup: &Setup, plan: &Plan, run: usize, results: &mut Results) {
    uncontended_cycles(setup, &plan.uncontended, run, results).await;
    many_key_cycles(setup, &plan.many, run, results).await;
    one_process_hot_key(setup, &plan.hot, run, results).await;
    many_process_hot_key(setup, &plan.hot_processes, run, results).await;
    many_held_locks(setup, &plan.watchdog, run, results).await;
    redlock_hot_key(setup, &plan.redlock, run, results).await;
    redlock_silent_master(setup, &plan.redlock_silent, run, results).await;
    replica_grants(setup, plan, run, results).await;
    if run < setup.settings.scaling_runs {
        cycles_by_tasks(setup, &plan.scaling, run, results).await;
        wakeups_by_keys(setup, &plan.wakeup, run, results).await;
    }
}

/// Section 1: one task, one key, acquire (no waiting) and release.
async fn uncontended_cycles(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    for contender in rotated(list, run) {
        let measured = if contender == Contender::RedisPy {
            match &setup.python {
                Some(python) => {
                    scenarios::python_cycles(python, &setup.admin, run, setup.seconds(1.5)).await
                }
                None => continue,
            }
        } else {
            let (clients, admin) = (&setup.clients, &setup.admin);
            scenarios::cycles(clients, admin, contender, run, 1, setup.seconds(1.5)).await
        };
        match measured {
            Ok(record) => {
                eprintln!(
                    "run {run} uncontended {:<18} {:>9.0} cycles/s, {:.2} requests/cycle",
                    contender.id(),
                    record.per_s,
                    record.requests_per_cycle.unwrap_or(f64::NAN)
                );
                results.uncontended.push(record);
            }
            Err(err) => failed(&mut results.skipped, run, "uncontended", contender, &*err),
        }
    }
}

/// Section 2: many tasks, each cycling on its own key.
async fn many_key_cycles(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    for contender in rotated(list, run) {
        match scenarios::cycles(
            &setup.clients,
            &setup.admin,
            contender,
            run,
            setup.settings.many_tasks,
            setup.seconds(2.0),
        )
        .await
        {
            Ok(record) => {
                eprintln!(
                    "run {run} 256 keys    {:<18} {:>9.0} cycles/s",
                    contender.id(),
                    record.per_s
                );
                results.many_keys.push(record);
            }
            Err(err) => failed(&mut results.skipped, run, "256 keys", contender, &*err),
        }
    }
}

/// Section 3: tasks of this process contending for one key.
async fn one_process_hot_key(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    for contender in rotated(list, run) {
        match scenarios::hot_key(
            &setup.clients,
            &setup.admin,
            contender,
            run,
            setup.settings.hot_tasks,
            Duration::from_millis(1),
            setup.seconds(5.0),
            setup.python.as_ref(),
        )
        .await
        {
            Ok(record) => {
                eprintln!(
                    "run {run} hot key     {:<18} {:>9.0} acq/s, utilization {:.2}, p99 {:.1} ms, max {:.1} ms, {:.2} requests/acq, {:.1} server cmds/acq",
                    contender.id(),
                    record.per_s,
                    record.utilization,
                    record.p99_us as f64 / 1e3,
                    record.max_us as f64 / 1e3,
                    record.requests_per_acq.unwrap_or(f64::NAN),
                    record.server_cmds_per_acq
                );
                results.hot_key.push(record);
            }
            Err(err) => failed(&mut results.skipped, run, "hot key", contender, &*err),
        }
    }
}

/// Section 3b: one key contended by tasks in several processes.
async fn many_process_hot_key(
    setup: &Setup,
    list: &[Contender],
    run: usize,
    results: &mut Results,
) {
    let s = &setup.settings;
    let shape = processes::Shape {
        processes: s.hot_processes,
        tasks_each: s.hot_tasks_per_process,
        hold: Duration::from_millis(1),
        window: Duration::from_secs_f64(s.hot_processes_window_s),
    };
    for contender in rotated(list, run) {
        let scenario = format!("hot key, {} processes", shape.processes);
        let python = setup.python.as_ref();
        match processes::hot_key_processes(&setup.admin, &setup.url, contender, run, shape, python)
            .await
        {
            Ok(record) => {
                eprintln!(
                    "run {run} hot key {}×{:<2} {:<18} {:>9.0} acq/s, utilization {:.2}, p99 {:.1} ms, max {:.1} ms, {:.1} server cmds/acq, per process {:?}",
                    shape.processes,
                    shape.tasks_each,
                    contender.id(),
                    record.per_s,
                    record.utilization,
                    record.p99_us as f64 / 1e3,
                    record.max_us as f64 / 1e3,
                    record.server_cmds_per_acq,
                    record.process_acquisitions
                );
                results.hot_key_processes.push(record);
            }
            Err(err) => failed(&mut results.skipped, run, &scenario, contender, &*err),
        }
    }
}

/// Section 4: many locks held at once, renewed by the watchdog.
async fn many_held_locks(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    let s = &setup.settings;
    for contender in rotated(list, run) {
        match scenarios::watchdog(
            &setup.clients,
            &setup.admin,
            &setup.url,
            contender,
            run,
            s.watchdog_locks,
            Duration::from_millis(s.watchdog_ttl_ms),
            Duration::from_secs_f64(s.watchdog_hold_s),
        )
        .await
        {
            Ok(record) => {
                eprintln!(
                    "run {run} watchdog    {:<18} {:>9.0} renewals/period, {:.0} reads/period, CPU {:.1}%",
                    contender.id(),
                    record.renewals_per_period,
                    record.server_reads_per_period,
                    record.client_cpu_share * 100.0
                );
                results.watchdog.push(record);
            }
            Err(err) => failed(&mut results.skipped, run, "watchdog", contender, &*err),
        }
    }
}

/// Section 5: one hot key in Redlock mode, every master answering.
async fn redlock_hot_key(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    let s = &setup.settings;
    for contender in rotated(list, run) {
        let Some(masters) = &setup.masters else { break };
        let window = Duration::from_secs_f64(s.redlock_window_s);
        let hold = Duration::from_millis(1);
        match redlock::hot_key(
            masters,
            contender,
            run,
            s.redlock_tasks,
            hold,
            window,
            false,
        )
        .await
        {
            Ok(record) => {
                eprintln!(
                    "run {run} redlock hot {:<18} {:>9.0} acq/s, utilization {:.2}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {:.2} requests/acq (3 masters)",
                    contender.id(),
                    record.per_s,
                    record.utilization,
                    record.p50_us as f64 / 1e3,
                    record.p99_us as f64 / 1e3,
                    record.max_us as f64 / 1e3,
                    record.requests_per_acq.unwrap_or(f64::NAN),
                );
                results.redlock_hot.push(record);
            }
            Err(err) => failed(
                &mut results.skipped,
                run,
                "Redlock hot key",
                contender,
                &*err,
            ),
        }
    }
}

/// Section 5 with one master stopped (`SIGSTOP`) for the window.
async fn redlock_silent_master(
    setup: &Setup,
    list: &[Contender],
    run: usize,
    results: &mut Results,
) {
    let s = &setup.settings;
    for contender in rotated(list, run) {
        let Some(masters) = &setup.masters else { break };
        let window = Duration::from_secs_f64(s.redlock_window_s);
        let hold = Duration::from_millis(1);
        match redlock::hot_key(masters, contender, run, s.redlock_tasks, hold, window, true).await {
            Ok(record) => {
                eprintln!(
                    "run {run} redlock hot, 1 master silent {:<18} {:>9.0} acq/s, utilization {:.2}, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                    contender.id(),
                    record.per_s,
                    record.utilization,
                    record.p50_us as f64 / 1e3,
                    record.p99_us as f64 / 1e3,
                    record.max_us as f64 / 1e3,
                );
                results.redlock_silent.push(record);
            }
            Err(err) => {
                let scenario = "Redlock hot key, 1 master silent";
                failed(&mut results.skipped, run, scenario, contender, &*err);
            }
        }
    }
}

/// Section 8: grants that wait for a replica, then durable grants (on the replica's and
/// the primary's append-only files, then on the primary's own only).
async fn replica_grants(setup: &Setup, plan: &Plan, run: usize, results: &mut Results) {
    let tasks = setup.settings.many_tasks;
    let durations = (setup.seconds(1.5), setup.seconds(2.0));
    let hot = (Duration::from_millis(1), setup.seconds(5.0));
    if let Some(pair) = &setup.replicated {
        let (measured, skipped) = (&mut results.replicas, &mut results.skipped);
        replicas::measure_run(
            pair,
            &plan.replicas,
            run,
            durations,
            tasks,
            hot,
            measured,
            skipped,
        )
        .await;
    }
    for (pair, measured) in [
        (&setup.durable, &mut results.durable),
        (&setup.durable_local, &mut results.durable_local),
    ] {
        let Some(pair) = pair else { continue };
        let skipped = &mut results.skipped;
        replicas::measure_run(
            pair,
            &plan.durable,
            run,
            durations,
            tasks,
            hot,
            measured,
            skipped,
        )
        .await;
    }
}

/// Section 7: cycles/s and client CPU against tasks on distinct keys.
async fn cycles_by_tasks(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    let duration = Duration::from_secs_f64(setup.settings.scaling_cycle_s);
    for tasks in scaling::TASKS {
        for contender in rotated(list, run) {
            let (clients, admin) = (&setup.clients, &setup.admin);
            match scenarios::cycles(clients, admin, contender, run, tasks, duration).await {
                Ok(record) => {
                    eprintln!(
                        "run {run} scaling {tasks:>5} tasks {:<18} {:>9.0} cycles/s, {:.1} µs client CPU/cycle",
                        contender.id(),
                        record.per_s,
                        record.client_cpu_us_per_cycle
                    );
                    results.scaling.cycles.push(record);
                }
                Err(err) => {
                    let scenario = format!("scaling, {tasks} tasks");
                    failed(&mut results.skipped, run, &scenario, contender, &*err);
                }
            }
        }
    }
}

/// Section 7: how long waiters on many keys take to be woken by their holders' releases.
async fn wakeups_by_keys(setup: &Setup, list: &[Contender], run: usize, results: &mut Results) {
    for keys in scaling::KEYS {
        for contender in rotated(list, run) {
            let (clients, admin, url) = (&setup.clients, &setup.admin, &setup.url);
            match scaling::wakeup(clients, admin, url, contender, run, keys).await {
                Ok(record) => {
                    eprintln!(
                        "run {run} wake-up {keys:>5} keys {:<18} p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, woken {}, missed {}, {:.1} server cmds/key",
                        contender.id(),
                        record.p50_us as f64 / 1e3,
                        record.p99_us as f64 / 1e3,
                        record.max_us as f64 / 1e3,
                        record.woken,
                        record.missed,
                        record.server_cmds_per_key
                    );
                    results.scaling.wakeups.push(record);
                }
                Err(err) => {
                    let scenario = format!("wake-up, {keys} keys");
                    failed(&mut results.skipped, run, &scenario, contender, &*err);
                }
            }
        }
    }
}
