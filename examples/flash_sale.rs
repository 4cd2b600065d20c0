//! The flash sale: 100 buyers in 4 processes race for 10 phones whose stock lives in Redis.
//!
//! Run it (the README's first command does exactly this, and starts a Redis if none runs):
//!
//! ```text
//! cargo run --release -p lock-examples --example flash_sale
//! cargo run --release -p lock-examples --example flash_sale -- --no-lock     # oversells
//! cargo run --release -p lock-examples --example flash_sale -- --mode redlock
//! cargo run --release -p lock-examples --example flash_sale -- --mode cluster
//! ```
//!
//! Options: `--mode single|redlock|cluster` (redlock starts 3 independent masters, cluster a
//! 3-master Redis Cluster; single uses `REDIS_URL`, else a server on 127.0.0.1:6379, else a
//! throwaway one), `--processes N` (4), `--buyers N` per process (25), `--stock N` (10),
//! `--no-lock`.
//!
//! Every purchase reads the stock, "pays" for 5 ms, and writes the stock back one lower
//! (see `examples/src/flash_sale.rs`). Under `#[distributed_lock(key = "stock:<item>")]`
//! exactly the stock is sold; without it, buyers who read the same stock all sell it.

use std::process::{Command, ExitCode};
use std::time::Instant;

use lock_examples::cli::Words;
use lock_examples::flash_sale::{self, Outcome};
use lock_examples::servers::{Mode, Servers};
use lock_examples::store::Store;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const WORKER_ENV: &str = "FLASH_SALE_WORKER";
const URLS_ENV: &str = "FLASH_SALE_URLS";
const START_ENV: &str = "FLASH_SALE_START_AT_MS";
const ITEM: &str = "phone";

/// The command line.
#[derive(Clone, Debug)]
struct Args {
    mode: Mode,
    processes: usize,
    buyers: usize,
    stock: i64,
    locked: bool,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            mode: Mode::Single,
            processes: 4,
            buyers: 25,
            stock: 10,
            locked: true,
        };
        let mut words = Words::from_env();
        while let Some(word) = words.next_flag() {
            match word.as_str() {
                "--mode" => args.mode = words.value("--mode")?,
                "--processes" => args.processes = words.value("--processes")?,
                "--buyers" => args.buyers = words.value("--buyers")?,
                "--stock" => args.stock = words.value("--stock")?,
                "--no-lock" => args.locked = false,
                "--help" | "-h" => {
                    return Err("usage: flash_sale [--mode single|redlock|cluster] \
                                [--processes N] [--buyers N] [--stock N] [--no-lock]"
                        .into());
                }
                other => return Err(format!("unknown argument {other:?}; try --help")),
            }
        }
        if args.processes == 0 || args.processes > 64 || args.buyers > 10_000 {
            return Err("use 1..=64 processes and at most 10000 buyers each".into());
        }
        Ok(args)
    }
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let result = match std::env::var(WORKER_ENV) {
        Ok(worker) => worker_main(&args, &worker),
        Err(_) => sale_main(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("flash sale failed: {err}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The parent: opens the sale, starts the buyer processes, checks the result.
fn sale_main(args: &Args) -> Result<ExitCode, BoxError> {
    let servers = Servers::for_mode(args.mode)?;
    let runtime = runtime()?;
    let store = runtime.block_on(Store::connect(&servers))?;
    runtime.block_on(flash_sale::open_sale(&store, ITEM, args.stock))?;
    println!(
        "flash sale: {} phones, {} processes x {} buyers, lock {}, mode {} ({}{})",
        args.stock,
        args.processes,
        args.buyers,
        if args.locked { "on" } else { "OFF" },
        args.mode.name(),
        servers.urls.join(", "),
        if servers.started_here() {
            ", started for this run"
        } else {
            ""
        },
    );
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    // The sale opens for every process at once, a moment after they have all started.
    let start_at = unix_ms() + 400;
    let mut workers = Vec::new();
    for worker in 0..args.processes {
        workers.push(
            Command::new(&exe)
                .args(std::env::args().skip(1))
                .env(WORKER_ENV, worker.to_string())
                .env(URLS_ENV, servers.urls.join(","))
                .env(START_ENV, start_at.to_string())
                .spawn()?,
        );
    }
    let mut failed_workers = 0;
    for mut worker in workers {
        if !worker.wait()?.success() {
            failed_workers += 1;
        }
    }
    let outcome = runtime.block_on(Outcome::read(&store, ITEM, args.stock))?;
    println!(
        "summary after {:.2?}: {outcome}{}",
        started.elapsed(),
        if failed_workers > 0 {
            format!(", {failed_workers} worker processes failed")
        } else {
            String::new()
        }
    );
    if outcome.is_exact() && failed_workers == 0 {
        println!("exactly the stock was sold: the lock kept the read-pay-write sections apart");
        Ok(ExitCode::SUCCESS)
    } else if !args.locked {
        println!(
            "without the lock the sale oversold by {}: buyers read the same stock and all sold it",
            outcome.oversold()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("the invariant broke: sold must equal the stock and nothing may remain");
        Ok(ExitCode::FAILURE)
    }
}

/// A buyer process: `args.buyers` concurrent buyers, each trying once.
fn worker_main(args: &Args, worker: &str) -> Result<ExitCode, BoxError> {
    let urls: Vec<String> = std::env::var(URLS_ENV)?
        .split(',')
        .map(str::to_owned)
        .collect();
    lock_runtime::init(args.mode.config(&urls))?;
    let runtime = runtime()?;
    let tally = runtime.block_on(async {
        let store = Store::connect_urls(args.mode, &urls).await?;
        let start_at: u64 = std::env::var(START_ENV)
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let until_open = start_at.saturating_sub(unix_ms()).min(2_000);
        tokio::time::sleep(std::time::Duration::from_millis(until_open)).await;
        let name = format!("p{worker}");
        let prefix = name.clone();
        let tally = flash_sale::run_buyers(
            &store,
            ITEM,
            args.buyers,
            args.locked,
            move |buyer, left| {
                println!("[{prefix}] buyer {buyer:>3} bought a phone, {left} left");
            },
        )
        .await;
        Ok::<_, BoxError>((name, tally))
    })?;
    let (name, tally) = tally;
    println!(
        "[{name}] done: {} bought, {} found it sold out, {} failed",
        tally.bought, tally.sold_out, tally.failed
    );
    Ok(if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
