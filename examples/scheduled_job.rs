//! A job scheduled on three replicas runs once per tick: each replica has the same
//! `tokio` interval, the first to take the job's lock runs the tick, the others are told
//! they skipped it (`Busy`), also the replicas whose schedule fires a little late.
//!
//! Run it (it starts a Redis if none runs):
//!
//! ```text
//! cargo run -p lock-examples --example scheduled_job
//! ```
//!
//! Options: `--ticks N` (5). Redis: `REDIS_URL`, else a server on 127.0.0.1:6379, else a
//! throwaway one.
//!
//! The example starts three copies of itself with `--replica I` (handing them the Redis URL,
//! the job's name and the first tick's time in `SCHEDULED_JOB_*` variables). Replica I's
//! schedule runs I × 150 ms late, as a replica whose clock is a little behind would. At
//! each tick every replica calls `run_tick` (see `examples/src/scheduled_job.rs`) under
//! `#[distributed_lock(key = "job:<job>", ttl = "1s", wait = "0s", hold_at_least = "700ms")]`;
//! the job is quick, and `hold_at_least` keeps the key until the late replicas have asked.
//! The parent then reads each tick's run counter: 1 for every tick.

use std::error::Error;
use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_examples::cli::Words;
use lock_examples::scheduled_job::{self, TickOutcome};
use lock_examples::servers::{Mode, Servers};
use lock_examples::store::Store;

const REPLICAS: u64 = 3;
/// How late each replica's schedule runs behind the one before it.
const LATE_STEP: Duration = Duration::from_millis(150);
const URL_ENV: &str = "SCHEDULED_JOB_URL";
const JOB_ENV: &str = "SCHEDULED_JOB_NAME";
/// The first tick, in Unix milliseconds (every replica counts its ticks from it).
const START_ENV: &str = "SCHEDULED_JOB_START_MS";

fn main() -> Result<ExitCode, Box<dyn Error>> {
    let mut replica = None;
    let mut ticks: u64 = 5;
    let mut words = Words::from_env();
    while let Some(word) = words.next_flag() {
        match word.as_str() {
            "--replica" => replica = Some(words.value::<u64>("--replica")?),
            "--ticks" => ticks = words.value("--ticks")?,
            other => return Err(format!("unknown argument {other:?}; use --ticks N").into()),
        }
    }
    if !(1..=100).contains(&ticks) {
        return Err("use 1..=100 ticks".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match replica {
        Some(index) => runtime.block_on(replica_main(index, ticks)),
        None => runtime.block_on(parent_main(ticks)),
    }
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// The parent: starts the replicas, waits for them, checks every tick ran once.
async fn parent_main(ticks: u64) -> Result<ExitCode, Box<dyn Error>> {
    let servers = Servers::for_mode(Mode::Single)?;
    let url = servers.urls.first().cloned().ok_or("no Redis URL")?;
    let store = Store::connect(&servers).await?;
    let job = format!("report-{}", std::process::id());
    // Time for the replicas to start before the first tick.
    let start_ms = unix_millis() + 1000;
    println!(
        "job {job:?} every {:?} for {ticks} ticks on {REPLICAS} replicas (redis {url})",
        scheduled_job::PERIOD
    );
    let exe = std::env::current_exe()?;
    let mut replicas = Vec::new();
    for index in 0..REPLICAS {
        replicas.push(
            Command::new(&exe)
                .args(["--replica", &index.to_string()])
                .args(["--ticks", &ticks.to_string()])
                .env(URL_ENV, &url)
                .env(JOB_ENV, &job)
                .env(START_ENV, start_ms.to_string())
                .spawn()?,
        );
    }
    let mut failed = 0;
    for mut replica in replicas {
        if !replica.wait()?.success() {
            failed += 1;
        }
    }
    let mut exact = failed == 0;
    for tick in 0..ticks {
        let key = scheduled_job::runs_key(&job, tick);
        let runs = store.get(&key).await?.unwrap_or(0);
        store.del(&[&key]).await?;
        println!("tick {tick}: the job ran {runs} time(s)");
        exact &= runs == 1;
    }
    if exact {
        println!("every tick ran exactly once, on one of {REPLICAS} replicas");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("the invariant broke: a tick ran twice or not at all ({failed} replicas failed)");
        Ok(ExitCode::FAILURE)
    }
}

/// A replica: the schedule, `index` × [`LATE_STEP`] late; one line per tick.
async fn replica_main(index: u64, ticks: u64) -> Result<ExitCode, Box<dyn Error>> {
    let url = std::env::var(URL_ENV).map_err(|_| format!("{URL_ENV} is not set"))?;
    let job = std::env::var(JOB_ENV).map_err(|_| format!("{JOB_ENV} is not set"))?;
    let start_ms: u64 = std::env::var(START_ENV)
        .map_err(|_| format!("{START_ENV} is not set"))?
        .parse()?;
    lock_runtime::init(lock_runtime::Config::single(url.clone()))?;
    let store = Store::connect_urls(Mode::Single, &[url]).await?;
    let late = LATE_STEP * u32::try_from(index)?;
    let first = tokio::time::Instant::now()
        + Duration::from_millis(start_ms.saturating_sub(unix_millis()))
        + late;
    scheduled_job::replica(&store, &job, first, ticks, |tick, outcome| {
        let what = match outcome {
            TickOutcome::Ran { runs: 1 } => "ran the job".to_owned(),
            TickOutcome::Ran { runs } => format!("ran the job: run {runs} of this tick!"),
            TickOutcome::Skipped => "skipped: another replica has it (Busy)".to_owned(),
        };
        println!(
            "[replica {index}, {:>3} ms late] tick {tick}: {what}",
            late.as_millis()
        );
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
