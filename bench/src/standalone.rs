//! The scenarios measured once per invocation, after the interleaved runs (each repeats or
//! interleaves its own measurements): the cluster holder's watchdog, the semaphore, the
//! read-write lock, the held-locks sweep, foreign clients and the instruction counts; and
//! what waiting costs, measured before the runs.

use std::time::Duration;

use crate::contenders::Contender;
use crate::failures::{failed, skip};
use crate::plan::{Only, rotated};
use crate::report::Results;
use crate::setup::Setup;
use crate::{cluster, foreign, instructions, rwlock, scaling, scenarios, semaphore, waiting};

/// Section 11, what waiting costs: the waiters of `contender` (all when empty).
pub(crate) async fn waiting_cost(setup: &Setup, contender: &str, results: &mut Results) {
    results.waiting = waiting::measure(
        &setup.admin,
        &setup.url,
        setup.python.as_ref(),
        contender,
        Duration::from_secs_f64(setup.settings.waiting_window_s),
        &mut results.skipped,
    )
    .await;
}

/// Every scenario that runs once, in the order of a full run.
pub(crate) async fn run_once_scenarios(
    setup: &Setup,
    only: Option<&Only>,
    (held, counted): (&[Contender], &[Contender]),
    results: &mut Results,
) {
    let s = &setup.settings;
    // Section 4b: the watchdog of a holder of 10,000 leases on a 3-master cluster.
    if let Some(cluster) = setup
        .cluster
        .as_ref()
        .filter(|_| Only::runs(only, cluster::NAME))
    {
        results.cluster_watchdog = cluster::measure(cluster, s.runs, &mut results.skipped).await;
    }
    // Sections 9 and 10: in a full run, or alone (BENCH_ONLY=semaphore, rwlock).
    if Only::runs(only, semaphore::NAME) {
        semaphore_hot_key(setup, results).await;
    }
    if Only::runs(only, rwlock::NAME) {
        read_heavy_workload(setup, results).await;
    }
    held_sweep(setup, held, results).await;
    if Only::runs(only, foreign::NAME) {
        let id = only.map_or("", |only| only.contender.as_str());
        foreign_clients(setup, id, results).await;
    }
    instruction_counts(setup, counted, results).await;
}

/// Section 9: the semaphore, the mutex and raw round trips, interleaved in each run.
async fn semaphore_hot_key(setup: &Setup, results: &mut Results) {
    let s = &setup.settings;
    let window = Duration::from_secs_f64(s.semaphore_window_s);
    match semaphore::measure(&setup.clients.ours, &setup.url, s.runs, window).await {
        Ok(records) => results.semaphore = records,
        Err(err) => skip(&mut results.skipped, "semaphore hot key (section 9)", &*err),
    }
}

/// Section 10: the read-heavy workload, read-write lock and mutex interleaved.
async fn read_heavy_workload(setup: &Setup, results: &mut Results) {
    let s = &setup.settings;
    let window = Duration::from_secs_f64(s.rwlock_window_s);
    match rwlock::measure(s.runs, s.rwlock_tasks, window).await {
        Ok(records) => results.rwlock = records,
        Err(err) => skip(
            &mut results.skipped,
            "read-heavy workload (section 10)",
            &*err,
        ),
    }
}

/// Section 7's held-locks sweep, once: ours at 1,000, 10,000 and 100,000 held locks.
async fn held_sweep(setup: &Setup, list: &[Contender], results: &mut Results) {
    let s = &setup.settings;
    for locks in scaling::HELD {
        for contender in list {
            match scenarios::watchdog(
                &setup.clients,
                &setup.admin,
                &setup.url,
                *contender,
                0,
                locks,
                Duration::from_millis(s.watchdog_ttl_ms),
                Duration::from_secs_f64(s.watchdog_hold_s),
            )
            .await
            {
                Ok(record) => {
                    eprintln!(
                        "held {locks:>6} locks {:<18} {:.0} B heap/lock (guard {} B), {:.0} renewals/period, {:.0} reads/period, {:.2} µs CPU/renewal, {:.2} server µs/renewal, acquired in {:.2} s, lost {}",
                        contender.id(),
                        record.heap_per_lock_bytes,
                        record.guard_bytes,
                        record.renewals_per_period,
                        record.server_reads_per_period,
                        record.client_cpu_us_per_renewal,
                        record.server_us_per_renewal,
                        record.acquire_s,
                        record.lost
                    );
                    results.scaling.held.push(record);
                }
                Err(err) => {
                    let scenario = format!("held locks, {locks}");
                    failed(&mut results.skipped, 0, &scenario, *contender, &*err);
                }
            }
        }
    }
}

/// Section 12: one key shared with foreign clients, each client (or only `id`) in turn.
async fn foreign_clients(setup: &Setup, id: &str, results: &mut Results) {
    let mut clients = Vec::new();
    if let Some(python) = &setup.python {
        clients.push(foreign::Foreign::RedisPy(python));
    }
    match foreign::node_redlock() {
        Ok(node) => clients.push(node),
        Err(why) => results.skipped.push(why),
    }
    if !id.is_empty() {
        clients.retain(|client| client.id() == id);
    }
    results.foreign = foreign::measure(
        &setup.url,
        &clients,
        setup.settings.runs,
        setup.seconds(foreign::WINDOW_S),
        &mut results.skipped,
    )
    .await;
}

/// Section 6: three counts per contender, interleaved: the spread shows what is left of
/// noise.
async fn instruction_counts(setup: &Setup, list: &[Contender], results: &mut Results) {
    for (count, contender) in (0..instructions::COUNTS)
        .flat_map(|count| rotated(list, count).into_iter().map(move |c| (count, c)))
    {
        let Some(valgrind) = &setup.valgrind else {
            break;
        };
        match instructions::measure(valgrind, &setup.url, contender, count).await {
            Ok(record) => {
                eprintln!(
                    "instructions {:<18} {:>9.0} per cycle ({} − {} Ir over {} cycles; {:.1} s under valgrind)",
                    contender.id(),
                    record.per_cycle,
                    record.long_total,
                    record.short_total,
                    instructions::LONG - instructions::SHORT,
                    record.wall_s
                );
                results.instructions.push(record);
            }
            Err(err) => failed(
                &mut results.skipped,
                count,
                "instructions",
                contender,
                &*err,
            ),
        }
    }
}
