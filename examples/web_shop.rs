//! The web shop: an axum service whose handlers are guarded by `#[distributed_lock]`.
//!
//! What it shows: a flash sale that cannot oversell (`stock:<id>`, waits its turn), a
//! daily gift granted once per user however many concurrent clicks arrive
//! (`sign-in:<user.id>`, `wait = "0s"`: a concurrent claim gets 429 Too Many Requests), and
//! unique ids from a read-increment-write counter (`next-id`), all correct across several
//! replicas sharing one Redis. The code is in `examples/src/web_shop.rs`.
//!
//! Run it (two replicas of one shop, sharing its stock through `--run`):
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p lock-examples --features web --example web_shop -- --port 3000 --stock 10 --run demo
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p lock-examples --features web --example web_shop -- --port 3001 --stock 10 --run demo
//!
//! curl -i -X POST localhost:3000/items/1/buy          # 200 {"item":1,"remaining":9,...}, 410 once sold out
//! curl -i -X POST localhost:3001/gift -H 'x-user-id: 7' # 200 once, 409 after, 429 while a claim runs
//! curl -i localhost:3000/ids/next                      # {"id":1}, {"id":2}, ... across both replicas
//! for i in $(seq 12); do curl -s -X POST localhost:3000/items/1/buy & curl -s -X POST localhost:3001/items/1/buy & done; wait
//! ```
//!
//! Options: `--port` (default 3000), `--stock` per item for items 1 to 3 (default 10; set once
//! per run, by the first replica), `--run` (the shop's data scope in Redis; default: a new
//! one per process). Logs: `RUST_LOG` (default `info,lock_runtime=debug`, which shows every
//! acquisition with its wait and attempts, and every release with the time held).
//! Stop it with Ctrl-C or SIGTERM: requests in flight finish and release their locks, then
//! `lock_runtime::shutdown()` gives back whatever the process still holds.

use std::error::Error;

use lock_examples::cli::Words;
use lock_examples::web_shop::{self, Shop};
use lock_runtime::{Config, DEFAULT_REDIS_URL, REDIS_URL_ENV};
use tracing_subscriber::EnvFilter;

/// Items 1 to this are on sale.
const ITEMS: u64 = 3;

struct Args {
    port: u16,
    stock: u32,
    run: String,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args = Args {
            port: 3000,
            stock: 10,
            run: format!("{}-{}", std::process::id(), unix_millis()),
        };
        let mut words = Words::from_env();
        while let Some(flag) = words.next_flag() {
            match flag.as_str() {
                "--port" => args.port = words.value("--port")?,
                "--stock" => args.stock = words.value("--stock")?,
                "--run" => args.run = words.value("--run")?,
                _ => return Err(format!("unknown option {flag}; use --port, --stock, --run")),
            }
        }
        Ok(args)
    }
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis())
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,lock_runtime=debug"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let args = Args::parse()?;

    let url = std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned());
    lock_runtime::init(Config::single(url.clone()))?;
    let instance = format!("port-{}", args.port);
    let shop = Shop::connect(&url, args.run.clone(), instance).await?;
    for item in 1..=ITEMS {
        shop.stock_if_new(item, args.stock).await?;
    }

    // README:start
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        run = %args.run,
        redis = %url,
        "web shop listening"
    );
    // Until Ctrl-C or SIGTERM, then the requests in flight finish (axum's graceful
    // shutdown: `axum::serve(..).with_graceful_shutdown(signal)`).
    web_shop::serve(listener, shop, web_shop::shutdown_signal()).await?;
    // Then every lock still held (by background tasks) is released and every wait-queue
    // place left, so the other replicas need not wait out a ttl.
    let report = lock_runtime::shutdown().await;
    tracing::info!(
        released = report.released,
        left = report.left,
        "web shop stopped"
    );
    Ok(())
    // README:end
}
