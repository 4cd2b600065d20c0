//! The comparative lock benchmark: ours (attribute and API) against the raw
//! Redis limit, rslock, async-redis-lock and redis-py, on one server in one run.
//!
//! Run it with `bench/run` from the repository root: the script provides the server and
//! the settings through the environment (`REDIS_URL`, `BENCH_*`), builds this binary in
//! release mode, and this binary writes `bench/results/` and `BENCHMARKS.md`.

mod admin;
mod cluster;
mod contenders;
mod figures;
mod foreign;
mod host;
mod instructions;
mod plot;
mod processes;
mod python;
mod redlock;
mod replicas;
mod report;
mod rwlock;
mod scaling;
mod scenarios;
mod semaphore;
mod tenures;
mod waiting;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lock_runtime::Config;
use tokio::time::Instant;

use crate::admin::Admin;
use crate::contenders::{Clients, Contender};
use crate::host::{load_average, machine, relative_link};
use crate::python::Python;
use crate::report::{Results, Settings};

/// The bench's error type: anything, with its message.
pub(crate) type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Reads a number from the environment, or the default.
fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

fn env_path(name: &str, default: &str) -> PathBuf {
    std::env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

/// The list rotated by `run`, so that no contender always goes first.
fn rotated(list: &[Contender], run: usize) -> Vec<Contender> {
    let mut list = list.to_vec();
    if !list.is_empty() {
        let by = run % list.len();
        list.rotate_left(by);
    }
    list
}

fn main() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(processes::WORKER_ARG) {
        return processes::worker_main(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some(waiting::WORKER_ARG) {
        return waiting::worker_main(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some(instructions::MODE_ARG) {
        return instructions::mode_main(&args[2..]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench())
}

async fn bench() -> BenchResult<()> {
    let url = std::env::var("REDIS_URL")
        .map_err(|_| "REDIS_URL is not set: run the bench through bench/run")?;
    let scale: f64 = env_number("BENCH_SCALE", 1.0);
    let seconds = |base: f64| Duration::from_secs_f64(base * scale);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut settings = Settings {
        runs: env_number("BENCH_RUNS", 5),
        uncontended_s: 1.5 * scale,
        many_tasks: 256,
        many_s: 2.0 * scale,
        hot_tasks: 64,
        hot_hold_ms: 1.0,
        hot_window_s: 5.0 * scale,
        hot_processes: 4,
        hot_tasks_per_process: 16,
        hot_processes_window_s: 4.0 * scale,
        hot_processes_queue: processes::QueueSettings::from_env(),
        watchdog_locks: env_number("BENCH_WATCHDOG_LOCKS", 10_000),
        watchdog_ttl_ms: 3_000,
        watchdog_hold_s: 4.0 * scale.max(0.5),
        redlock_tasks: 64,
        redlock_window_s: 4.0 * scale,
        redlock_masters: 0,
        scaling_runs: env_number("BENCH_RUNS", 5).min(3),
        scaling_cycle_s: 1.0 * scale,
        semaphore_window_s: 4.0 * scale,
        rwlock_tasks: 64,
        rwlock_window_s: 4.0 * scale,
        waiting_window_s: 10.0 * scale,
        server: std::env::var("BENCH_SERVER").unwrap_or_else(|_| "REDIS_URL".into()),
        command: std::env::var("BENCH_COMMAND").unwrap_or_else(|_| "bench/run".into()),
        worker_threads: workers,
    };
    let results_dir = env_path("BENCH_RESULTS", "results");
    let report_path = env_path("BENCH_REPORT", "../BENCHMARKS.md");
    let plot_path = env_path("BENCH_PLOT", "results/hot-key-waits.svg");

    lock_runtime::init(Config::single(url.clone()))?;
    let admin = Admin::connect(&url).await?;
    let clients = Arc::new(Clients::connect(&url).await?);
    let python = match std::env::var_os("BENCH_PYTHON") {
        Some(interpreter) if !interpreter.is_empty() => {
            let script = env_path("BENCH_PY_SCRIPT", "redis_py_bench.py");
            Python::find(PathBuf::from(interpreter), script, &url).await
        }
        _ => None,
    };
    let mut skipped = Vec::new();
    if python.is_none() {
        skipped.push("redis-py: no Python interpreter with `redis` (BENCH_PYTHON)".to_owned());
    }
    let machine = machine(&admin, python.as_ref()).await?;
    eprintln!(
        "bench: {} runs on {} CPUs ({}), redis {}, scale {scale}",
        settings.runs, machine.nproc, machine.cpu_model, machine.redis_version
    );

    let mut uncontended_list = vec![
        Contender::Attribute,
        Contender::Api,
        Contender::Raw,
        Contender::Rslock,
        Contender::AsyncRedisLock,
    ];
    let mut many_list = uncontended_list.clone();
    let mut hot_list = vec![Contender::Api, Contender::Rslock, Contender::AsyncRedisLock];
    if python.is_some() {
        uncontended_list.push(Contender::RedisPy);
        hot_list.push(Contender::RedisPy);
    }
    let mut hot_processes_list = hot_list.clone();
    let mut watchdog_list = vec![Contender::Api, Contender::AsyncRedisLock];
    let masters = redlock::Masters::from_env().await?;
    settings.redlock_masters = masters.as_ref().map_or(0, |m| m.urls.len() as u64);
    let mut redlock_list = redlock::CONTENDERS.to_vec();
    let mut redlock_silent_list = vec![Contender::Api];
    if masters.is_none() {
        redlock_list.clear();
        redlock_silent_list.clear();
        skipped.push(
            "Redlock hot key: no masters (BENCH_REDLOCK_URLS; bench/run starts three)".to_owned(),
        );
    }
    let valgrind = std::env::var_os("BENCH_VALGRIND")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from);
    let mut scaling_list = scaling::CYCLE_CONTENDERS.to_vec();
    let mut held_list = vec![Contender::Api];
    let mut wakeup_list = scaling::WAKE_CONTENDERS.to_vec();
    let mut instructions_list = instructions::CONTENDERS.to_vec();
    let replicated = replicas::Replicated::from_env(replicas::Rule::Replicas).await?;
    let mut replicas_list = replicas::CONTENDERS.to_vec();
    if replicated.is_none() {
        replicas_list.clear();
        skipped.push(
            "wait for replicas: no primary and replica (BENCH_REPLICA_URLS; bench/run starts them)"
                .to_owned(),
        );
    }
    let durable = replicas::Replicated::from_env(replicas::Rule::Aof).await?;
    let durable_local = replicas::Replicated::from_env(replicas::Rule::AofLocal).await?;
    let mut durable_list = replicas::CONTENDERS.to_vec();
    if durable.is_none() {
        durable_list.clear();
        skipped.push(
            "durable grants (section 8): no Valkey primary and replica (BENCH_AOF_URLS; bench/run \
             starts them when valkey-server is installed)"
                .to_owned(),
        );
    }
    let cluster = cluster::Cluster::from_env().await?;
    if cluster.is_none() {
        skipped.push(
            "watchdog of a cluster holder (section 4b): no cluster (BENCH_CLUSTER_URLS; bench/run \
             starts one)"
                .to_owned(),
        );
    }
    if valgrind.is_none() {
        instructions_list.clear();
        skipped.push("instructions per cycle: no valgrind (BENCH_VALGRIND)".to_owned());
    }
    // BENCH_ONLY=scenario[/contender] (uncontended, many, hot, hot4, watchdog, redlock,
    // redlock-silent, instructions, scaling, held, wakeup, replicas, durable, cluster-watchdog, semaphore, rwlock;
    // e.g. hot4/api)
    // narrows the run (for profiling and bench/ab); the report is then
    // not rewritten, only bench/results.
    let only = std::env::var("BENCH_ONLY")
        .ok()
        .filter(|only| !only.is_empty());
    if let Some(only) = &only {
        let (scenario, contender) = only.split_once('/').unwrap_or((only.as_str(), ""));
        for (name, list) in [
            ("uncontended", &mut uncontended_list),
            ("many", &mut many_list),
            ("hot", &mut hot_list),
            ("hot4", &mut hot_processes_list),
            ("watchdog", &mut watchdog_list),
            ("redlock", &mut redlock_list),
            ("redlock-silent", &mut redlock_silent_list),
            ("instructions", &mut instructions_list),
            ("scaling", &mut scaling_list),
            ("held", &mut held_list),
            ("wakeup", &mut wakeup_list),
            ("replicas", &mut replicas_list),
            ("durable", &mut durable_list),
        ] {
            list.retain(|c| name == scenario && (contender.is_empty() || c.id() == contender));
        }
    }

    // Sections 9 and 10: in a full run, or alone (BENCH_ONLY=semaphore, rwlock).
    let alone = |name: &str| {
        only.as_deref()
            .is_none_or(|only| only.split('/').next() == Some(name))
    };
    let (run_semaphore, run_rwlock) = (alone(semaphore::NAME), alone(rwlock::NAME));
    let run_cluster = alone(cluster::NAME);

    let mut results = Results {
        machine,
        settings: settings.clone(),
        uncontended: Vec::new(),
        many_keys: Vec::new(),
        hot_key: Vec::new(),
        hot_key_processes: Vec::new(),
        watchdog: Vec::new(),
        cluster_watchdog: Vec::new(),
        redlock_hot: Vec::new(),
        redlock_silent: Vec::new(),
        instructions: Vec::new(),
        scaling: scaling::Scaling::default(),
        replicas: replicas::Measured::default(),
        durable: replicas::Measured::default(),
        durable_local: replicas::Measured::default(),
        semaphore: Vec::new(),
        rwlock: Vec::new(),
        waiting: Vec::new(),
        foreign: Vec::new(),
        skipped,
        wall_s: 0.0,
    };
    // Section 11: what waiting costs. Alone with BENCH_ONLY=waiting (its section
    // is then written to bench/results/waiting.md); in a full run, once, before the runs.
    let (waiting_only, waiting_contender) = match only
        .as_deref()
        .map(|o| o.split_once('/').unwrap_or((o, "")))
    {
        Some((scenario, contender)) => (scenario == waiting::NAME, contender),
        None => (false, ""),
    };
    let started = Instant::now();
    if only.is_none() || waiting_only {
        results.waiting = waiting::measure(
            &admin,
            &url,
            python.as_ref(),
            waiting_contender,
            Duration::from_secs_f64(settings.waiting_window_s),
            &mut results.skipped,
        )
        .await;
    }
    if waiting_only {
        results.wall_s = started.elapsed().as_secs_f64();
        results.machine.load.1 = load_average();
        std::fs::create_dir_all(&results_dir)?;
        std::fs::write(
            results_dir.join("waiting.json"),
            serde_json::to_string_pretty(&results)?,
        )?;
        let section = report::waiting_markdown(&results);
        std::fs::write(results_dir.join("waiting.md"), &section)?;
        eprintln!(
            "bench: BENCH_ONLY=waiting run in {:.0} s; BENCHMARKS.md left as it was, the section is in {}",
            results.wall_s,
            results_dir.join("waiting.md").display()
        );
        return Ok(());
    }
    for run in 0..settings.runs {
        for contender in rotated(&uncontended_list, run) {
            let measured = if contender == Contender::RedisPy {
                match &python {
                    Some(python) => {
                        scenarios::python_cycles(python, &admin, run, seconds(1.5)).await
                    }
                    None => continue,
                }
            } else {
                scenarios::cycles(&clients, &admin, contender, run, 1, seconds(1.5)).await
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
        for contender in rotated(&many_list, run) {
            match scenarios::cycles(
                &clients,
                &admin,
                contender,
                run,
                settings.many_tasks,
                seconds(2.0),
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
        for contender in rotated(&hot_list, run) {
            match scenarios::hot_key(
                &clients,
                &admin,
                contender,
                run,
                settings.hot_tasks,
                Duration::from_millis(1),
                seconds(5.0),
                python.as_ref(),
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
        let shape = processes::Shape {
            processes: settings.hot_processes,
            tasks_each: settings.hot_tasks_per_process,
            hold: Duration::from_millis(1),
            window: Duration::from_secs_f64(settings.hot_processes_window_s),
        };
        for contender in rotated(&hot_processes_list, run) {
            let scenario = format!("hot key, {} processes", shape.processes);
            match processes::hot_key_processes(&admin, &url, contender, run, shape, python.as_ref())
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
        for contender in rotated(&watchdog_list, run) {
            match scenarios::watchdog(
                &clients,
                &admin,
                &url,
                contender,
                run,
                settings.watchdog_locks,
                Duration::from_millis(settings.watchdog_ttl_ms),
                Duration::from_secs_f64(settings.watchdog_hold_s),
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
        for contender in rotated(&redlock_list, run) {
            let Some(masters) = &masters else { break };
            match redlock::hot_key(
                masters,
                contender,
                run,
                settings.redlock_tasks,
                Duration::from_millis(1),
                Duration::from_secs_f64(settings.redlock_window_s),
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
        for contender in rotated(&redlock_silent_list, run) {
            let Some(masters) = &masters else { break };
            match redlock::hot_key(
                masters,
                contender,
                run,
                settings.redlock_tasks,
                Duration::from_millis(1),
                Duration::from_secs_f64(settings.redlock_window_s),
                true,
            )
            .await
            {
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
                Err(err) => failed(
                    &mut results.skipped,
                    run,
                    "Redlock hot key, 1 master silent",
                    contender,
                    &*err,
                ),
            }
        }
        if let Some(pair) = &replicated {
            replicas::measure_run(
                pair,
                &replicas_list,
                run,
                (seconds(1.5), seconds(2.0)),
                settings.many_tasks,
                (Duration::from_millis(1), seconds(5.0)),
                &mut results.replicas,
                &mut results.skipped,
            )
            .await;
        }
        for (pair, measured) in [
            (&durable, &mut results.durable),
            (&durable_local, &mut results.durable_local),
        ] {
            let Some(pair) = pair else { continue };
            replicas::measure_run(
                pair,
                &durable_list,
                run,
                (seconds(1.5), seconds(2.0)),
                settings.many_tasks,
                (Duration::from_millis(1), seconds(5.0)),
                measured,
                &mut results.skipped,
            )
            .await;
        }
        if run < settings.scaling_runs {
            for tasks in scaling::TASKS {
                for contender in rotated(&scaling_list, run) {
                    let duration = Duration::from_secs_f64(settings.scaling_cycle_s);
                    match scenarios::cycles(&clients, &admin, contender, run, tasks, duration).await
                    {
                        Ok(record) => {
                            eprintln!(
                                "run {run} scaling {tasks:>5} tasks {:<18} {:>9.0} cycles/s, {:.1} µs client CPU/cycle",
                                contender.id(),
                                record.per_s,
                                record.client_cpu_us_per_cycle
                            );
                            results.scaling.cycles.push(record);
                        }
                        Err(err) => failed(
                            &mut results.skipped,
                            run,
                            &format!("scaling, {tasks} tasks"),
                            contender,
                            &*err,
                        ),
                    }
                }
            }
            for keys in scaling::KEYS {
                for contender in rotated(&wakeup_list, run) {
                    match scaling::wakeup(&clients, &admin, &url, contender, run, keys).await {
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
                        Err(err) => failed(
                            &mut results.skipped,
                            run,
                            &format!("wake-up, {keys} keys"),
                            contender,
                            &*err,
                        ),
                    }
                }
            }
        }
    }
    // Section 4b: the watchdog of a holder of 10,000 leases on a 3-master cluster.
    if let Some(cluster) = cluster.as_ref().filter(|_| run_cluster) {
        results.cluster_watchdog =
            cluster::measure(cluster, settings.runs, &mut results.skipped).await;
    }
    // Section 9: the semaphore, the mutex and raw round trips, interleaved in each run.
    if run_semaphore {
        let window = Duration::from_secs_f64(settings.semaphore_window_s);
        match semaphore::measure(&clients.ours, &url, settings.runs, window).await {
            Ok(records) => results.semaphore = records,
            Err(err) => skip(&mut results.skipped, "semaphore hot key (section 9)", &*err),
        }
    }
    // Section 10: the read-heavy workload, read-write lock and mutex interleaved.
    if run_rwlock {
        let window = Duration::from_secs_f64(settings.rwlock_window_s);
        match rwlock::measure(settings.runs, settings.rwlock_tasks, window).await {
            Ok(records) => results.rwlock = records,
            Err(err) => skip(
                &mut results.skipped,
                "read-heavy workload (section 10)",
                &*err,
            ),
        }
    }
    // The held-locks sweep, once: ours at 1,000, 10,000 and 100,000 held locks.
    for locks in scaling::HELD {
        for contender in &held_list {
            match scenarios::watchdog(
                &clients,
                &admin,
                &url,
                *contender,
                0,
                locks,
                Duration::from_millis(settings.watchdog_ttl_ms),
                Duration::from_secs_f64(settings.watchdog_hold_s),
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
                Err(err) => failed(
                    &mut results.skipped,
                    0,
                    &format!("held locks, {locks}"),
                    *contender,
                    &*err,
                ),
            }
        }
    }
    // Section 12: one key shared with foreign clients, each client in turn.
    let only_foreign = only
        .as_deref()
        .map(|only| only.split_once('/').unwrap_or((only, "")));
    if only_foreign.is_none_or(|(scenario, _)| scenario == foreign::NAME) {
        let mut clients = Vec::new();
        if let Some(python) = &python {
            clients.push(foreign::Foreign::RedisPy(python));
        }
        match foreign::node_redlock() {
            Ok(node) => clients.push(node),
            Err(why) => results.skipped.push(why),
        }
        if let Some((_, id)) = only_foreign.filter(|(_, id)| !id.is_empty()) {
            clients.retain(|client| client.id() == id);
        }
        results.foreign = foreign::measure(
            &url,
            &clients,
            settings.runs,
            seconds(foreign::WINDOW_S),
            &mut results.skipped,
        )
        .await;
    }
    // Three counts per contender, interleaved: the spread shows what is left of noise.
    for (count, contender) in (0..instructions::COUNTS).flat_map(|count| {
        rotated(&instructions_list, count)
            .into_iter()
            .map(move |c| (count, c))
    }) {
        let Some(valgrind) = &valgrind else { break };
        match instructions::measure(valgrind, &url, contender, count).await {
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
    results.wall_s = started.elapsed().as_secs_f64();
    results.machine.load.1 = load_average();

    if only.is_some() {
        std::fs::create_dir_all(&results_dir)?;
        std::fs::write(
            results_dir.join("only.json"),
            serde_json::to_string_pretty(&results)?,
        )?;
        if !results.semaphore.is_empty() {
            std::fs::write(
                results_dir.join("semaphore.json"),
                serde_json::to_string_pretty(&results.semaphore)?,
            )?;
        }
        for (records, name) in [
            (!results.semaphore.is_empty(), semaphore::NAME),
            (!results.rwlock.is_empty(), rwlock::NAME),
        ] {
            if records {
                let path = results_dir.join(format!("{name}.md"));
                std::fs::write(&path, report::primitives_markdown(&results))?;
                eprintln!("bench: its section written to {}", path.display());
            }
        }
        if !results.foreign.is_empty() {
            let path = results_dir.join("foreign.md");
            std::fs::write(&path, report::foreign_markdown(&results))?;
            eprintln!("bench: section 12 written to {}", path.display());
        }
        if !results.cluster_watchdog.is_empty() {
            let path = results_dir.join(format!("{}.md", cluster::NAME));
            std::fs::write(&path, report::cluster_watchdog_markdown(&results))?;
            eprintln!("bench: section 4b written to {}", path.display());
        }
        if !replicas_list.is_empty() || !durable_list.is_empty() {
            let section = report::replicas_markdown(&results);
            std::fs::write(results_dir.join("replicas.md"), section)?;
            eprintln!(
                "bench: section 8 written to {}",
                results_dir.join("replicas.md").display()
            );
        }
        eprintln!("bench: BENCH_ONLY run; BENCHMARKS.md left as it was");
        return Ok(());
    }
    if !results.hot_key.is_empty() {
        plot::hot_key_cdf(&results.hot_key, settings.hot_tasks, &plot_path)?;
    }
    let plot_link = relative_link(&report_path, &plot_path);
    let scaling_link = if results.scaling.cycles.is_empty() {
        None
    } else {
        let path = env_path("BENCH_SCALING_PLOT", "results/scaling.svg");
        plot::scaling(&results.scaling.cycles, &path)?;
        relative_link(&report_path, &path)
    };
    report::write_all(
        &results,
        &results_dir,
        &report_path,
        (plot_link.as_deref(), scaling_link.as_deref()),
    )?;
    eprintln!(
        "bench: wrote {} and {}/ in {:.0} s",
        report_path.display(),
        results_dir.display(),
        results.wall_s
    );
    Ok(())
}

/// Notes a scenario that failed as a whole (and carries on with the others).
fn skip(skipped: &mut Vec<String>, scenario: &str, err: &dyn std::fmt::Display) {
    let note = format!("{scenario}: failed: {err}");
    eprintln!("{note}");
    skipped.push(note);
}

/// Notes a failed measurement (and carries on with the others).
fn failed(
    skipped: &mut Vec<String>,
    run: usize,
    scenario: &str,
    contender: Contender,
    err: &dyn std::fmt::Display,
) {
    let note = format!(
        "run {run}, {scenario}, {}: failed: {err}",
        contender.label()
    );
    eprintln!("{note}");
    skipped.push(note);
}
