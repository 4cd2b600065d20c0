//! The comparative lock benchmark: ours (attribute and API) against the raw
//! Redis limit, rslock, async-redis-lock and redis-py, on one server in one run.
//!
//! Run it with `bench/run` from the repository root: the script provides the server and
//! the settings through the environment (`REDIS_URL`, `BENCH_*`), builds this binary in
//! release mode, and this binary writes `bench/results/` and `BENCHMARKS.md`.

mod admin;
mod cluster;
mod contenders;
mod error;
mod failures;
mod figures;
mod foreign;
mod host;
mod instructions;
mod interleaved;
mod outputs;
mod plan;
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
mod setup;
mod standalone;
mod tenures;
mod waiting;

use lock_runtime::Config;
use tokio::time::Instant;

use crate::error::BenchResult;
use crate::host::load_average;
use crate::outputs::Paths;
use crate::plan::{Only, Plan};
use crate::report::Results;
use crate::setup::{Setup, env_number, settings};

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

/// One invocation: what waiting costs, the interleaved runs, the scenarios that run once,
/// then the files (BENCHMARKS.md only after a full run).
async fn bench() -> BenchResult<()> {
    let url = std::env::var("REDIS_URL")
        .map_err(|_| "REDIS_URL is not set: run the bench through bench/run")?;
    let scale: f64 = env_number("BENCH_SCALE", 1.0);
    let paths = Paths::from_env();
    lock_runtime::init(Config::single(url.clone()))?;
    let mut skipped = Vec::new();
    let (setup, machine) = Setup::connect(url, scale, settings(scale), &mut skipped).await?;
    let mut plan = Plan::new(&setup);
    let only = Only::from_env();
    if let Some(only) = &only {
        plan.narrow(only);
    }
    let mut results = Results::new(machine, setup.settings.clone(), skipped);
    // Section 11, what waiting costs: alone with BENCH_ONLY=waiting (its section is then
    // written to bench/results/waiting.md); in a full run, once, before the runs.
    let waiting_only = only.as_ref().filter(|only| only.scenario == waiting::NAME);
    let started = Instant::now();
    if only.is_none() || waiting_only.is_some() {
        let contender = waiting_only.map_or("", |only| only.contender.as_str());
        standalone::waiting_cost(&setup, contender, &mut results).await;
    }
    if waiting_only.is_some() {
        results.wall_s = started.elapsed().as_secs_f64();
        results.machine.load.1 = load_average();
        return outputs::write_waiting(&results, &paths.results_dir);
    }
    for run in 0..setup.settings.runs {
        interleaved::run_scenarios(&setup, &plan, run, &mut results).await;
    }
    let once = (plan.held.as_slice(), plan.instructions.as_slice());
    standalone::run_once_scenarios(&setup, only.as_ref(), once, &mut results).await;
    results.wall_s = started.elapsed().as_secs_f64();
    results.machine.load.1 = load_average();
    if only.is_some() {
        let replicated = !plan.replicas.is_empty() || !plan.durable.is_empty();
        return outputs::write_only(&results, &paths.results_dir, replicated);
    }
    outputs::write_full(&results, &paths)
}
