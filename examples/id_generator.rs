//! Unique ids from 3 processes: each id is a read-increment-write of one counter in Redis,
//! guarded by one lock; no id is handed out twice.
//!
//! Run it (it starts a Redis if none runs):
//!
//! ```text
//! cargo run -p lock-examples --example id_generator
//! cargo run -p lock-examples --example id_generator -- --no-lock     # duplicate ids
//! ```
//!
//! Options: `--processes N` (3), `--tasks N` concurrent generators per process (4),
//! `--ids N` per generator (10), `--no-lock`. Redis: `REDIS_URL`, else a server on
//! 127.0.0.1:6379, else a throwaway one.
//!
//! The example starts copies of itself with `--worker` (handing them the Redis URL in
//! `ID_GENERATOR_URL`); each prints the ids it got. Every id is `GET`, 1 ms of work, `SET`
//! one higher (see `examples/src/id_generator.rs`), under
//! `#[distributed_lock(key = "id-generator:<name>")]`. The parent collects the ids and
//! checks that none repeats and that the counter ends at the number of ids.

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use lock_examples::cli::Words;
use lock_examples::id_generator::{self, Report};
use lock_examples::servers::{Mode, Servers};
use lock_examples::store::Store;

const URL_ENV: &str = "ID_GENERATOR_URL";
const NAME_ENV: &str = "ID_GENERATOR_NAME";
/// What a worker's line of ids starts with (the parent reads the ids after it).
const IDS_MARK: &str = " ids:";

struct Args {
    worker: Option<usize>,
    processes: usize,
    tasks: usize,
    ids: usize,
    locked: bool,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            worker: None,
            processes: 3,
            tasks: 4,
            ids: 10,
            locked: true,
        };
        let mut words = Words::from_env();
        while let Some(word) = words.next_flag() {
            match word.as_str() {
                "--worker" => args.worker = Some(words.value("--worker")?),
                "--processes" => args.processes = words.value("--processes")?,
                "--tasks" => args.tasks = words.value("--tasks")?,
                "--ids" => args.ids = words.value("--ids")?,
                "--no-lock" => args.locked = false,
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; use --processes N, --tasks N, --ids N, \
                         --no-lock"
                    ));
                }
            }
        }
        if !(1..=16).contains(&args.processes)
            || !(1..=64).contains(&args.tasks)
            || !(1..=1000).contains(&args.ids)
        {
            return Err("use 1..=16 processes, 1..=64 tasks, 1..=1000 ids per task".into());
        }
        Ok(args)
    }
}

fn main() -> Result<ExitCode, Box<dyn Error>> {
    let args = Args::parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match args.worker {
        Some(worker) => worker_main(&args, worker, &runtime),
        None => parent_main(&args, &runtime),
    }
}

/// The parent: starts the workers, echoes what they print, checks the ids.
fn parent_main(args: &Args, runtime: &tokio::runtime::Runtime) -> Result<ExitCode, Box<dyn Error>> {
    let servers = Servers::for_mode(Mode::Single)?;
    let url = servers.urls.first().cloned().ok_or("no Redis URL")?;
    // A fresh counter per run, removed at the end.
    let name = format!("orders-{}", std::process::id());
    let store = runtime.block_on(Store::connect(&servers))?;
    runtime.block_on(store.del(&[&id_generator::counter_key(&name)]))?;
    println!(
        "id generator {name:?}: {} processes x {} tasks x {} ids, lock {} (redis {url}{})",
        args.processes,
        args.tasks,
        args.ids,
        if args.locked { "on" } else { "OFF" },
        if servers.started_here() {
            ", started for this run"
        } else {
            ""
        },
    );

    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut workers = Vec::new();
    for worker in 0..args.processes {
        let mut command = Command::new(&exe);
        command
            .args(["--worker", &worker.to_string()])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--ids", &args.ids.to_string()])
            .env(URL_ENV, &url)
            .env(NAME_ENV, &name)
            .stdout(Stdio::piped());
        if !args.locked {
            command.arg("--no-lock");
        }
        workers.push(command.spawn()?);
    }
    let mut ids = Vec::new();
    let mut failed_workers = 0;
    for mut worker in workers {
        if let Some(stdout) = worker.stdout.take() {
            for line in BufReader::new(stdout).lines() {
                let line = line?;
                println!("{line}");
                if let Some((_, list)) = line.split_once(IDS_MARK) {
                    for id in list.split_whitespace() {
                        ids.push(id.parse::<i64>()?);
                    }
                }
            }
        }
        if !worker.wait()?.success() {
            failed_workers += 1;
        }
    }
    let counter = runtime
        .block_on(store.get(&id_generator::counter_key(&name)))?
        .unwrap_or(0);
    runtime.block_on(store.del(&[&id_generator::counter_key(&name)]))?;

    let report = Report::of(&ids);
    let expected = args.processes * args.tasks * args.ids;
    println!(
        "summary after {:.2?}: {report}; counter at {counter}{}",
        started.elapsed(),
        if failed_workers > 0 {
            format!("; {failed_workers} worker processes failed")
        } else {
            String::new()
        }
    );
    let exact = report.is_unique()
        && report.total == expected
        && usize::try_from(counter).is_ok_and(|counter| counter == expected)
        && failed_workers == 0;
    if exact {
        println!("no duplicates: every read-increment-write ran alone, across all processes");
        Ok(ExitCode::SUCCESS)
    } else if !args.locked {
        let examples: Vec<String> = report
            .duplicates
            .iter()
            .take(5)
            .map(|(id, times)| format!("{id} x{times}"))
            .collect();
        println!(
            "without the lock, generators read the same counter value: duplicates {}{}",
            examples.join(", "),
            if report.duplicates.len() > examples.len() {
                ", ..."
            } else {
                ""
            }
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("the invariant broke: every id must be handed out once");
        Ok(ExitCode::FAILURE)
    }
}

/// A worker process: `args.tasks` concurrent generators, then one line with its ids.
fn worker_main(
    args: &Args,
    worker: usize,
    runtime: &tokio::runtime::Runtime,
) -> Result<ExitCode, Box<dyn Error>> {
    let url = std::env::var(URL_ENV).map_err(|_| format!("{URL_ENV} is not set"))?;
    let name = std::env::var(NAME_ENV).map_err(|_| format!("{NAME_ENV} is not set"))?;
    let ids = runtime.block_on(async {
        lock_runtime::init(lock_runtime::Config::single(url.clone()))?;
        let store = Store::connect_urls(Mode::Single, &[url]).await?;
        let ids = id_generator::generate(&store, &name, args.tasks, args.ids, args.locked).await?;
        Ok::<_, Box<dyn Error>>(ids)
    })?;
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    println!(
        "[worker {worker}, pid {}] {}{IDS_MARK} {}",
        std::process::id(),
        ids.len(),
        list.join(" ")
    );
    Ok(ExitCode::SUCCESS)
}
