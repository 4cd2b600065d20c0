//! Section 11's waiting child: this binary in `wait-worker` mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockClient};
use tokio::time::Instant;

use super::protocol::{Failures, READY_LIMIT, serve};
use super::semaphore::semaphore_worker;
use crate::contenders::Contender;
use crate::error::BenchResult;

/// The first argument that makes this binary a waiting child of this section.
pub(crate) const WORKER_ARG: &str = "wait-worker";

/// Waiting mode: `lock-bench wait-worker CONTENDER URL PREFIX FROM COUNT`: one waiter on
/// each of `PREFIX:FROM` … `PREFIX:FROM+COUNT-1` (CONTENDER `semaphore`: our semaphore of
/// one permit on each).
pub(crate) fn worker_main(args: &[String]) -> BenchResult<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(worker(args))?;
    // The waiters still wait: the process ends with them (their places lapse with its
    // liveness key, or their polling stops).
    std::process::exit(0)
}

async fn worker(args: &[String]) -> BenchResult<()> {
    let [contender, url, prefix, from, count] = args else {
        return Err(format!("usage: {WORKER_ARG} CONTENDER URL PREFIX FROM COUNT").into());
    };
    let from: u64 = from.parse()?;
    let count: u64 = count.parse()?;
    let acquired = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Failures::default());
    let keys = (from..from + count).map(|i| format!("{prefix}:{i}"));
    if contender == "semaphore" {
        return semaphore_worker(url, keys, count, (&acquired, &failures)).await;
    }
    let contender = Contender::from_id(contender).ok_or("unknown contender")?;
    match contender {
        Contender::Api | Contender::Attribute => {
            lock_worker(url, keys, count, (&acquired, &failures)).await?;
        }
        Contender::Rslock => rslock_worker(url, keys, (&acquired, &failures)).await?,
        _ => return Err(format!("{} has no waiting mode", contender.id()).into()),
    }
    Ok(())
}

/// The waiting child of our lock: one waiter on each key, `ready` once all have queued.
async fn lock_worker(
    url: &str,
    keys: impl Iterator<Item = String>,
    count: u64,
    (acquired, failures): (&Arc<AtomicU64>, &Arc<Failures>),
) -> BenchResult<()> {
    let client = LockClient::new(Config::single(url.to_owned()))?;
    for key in keys {
        let lock = client
            .lock(key)
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(600));
        let (acquired, failures) = (acquired.clone(), failures.clone());
        tokio::spawn(async move {
            match lock.acquire().await {
                Ok(guard) => {
                    acquired.fetch_add(1, Ordering::Relaxed);
                    drop(guard);
                }
                Err(err) => failures.note(err.to_string()),
            }
        });
    }
    let all = usize::try_from(count)?;
    let deadline = Instant::now() + READY_LIMIT - Duration::from_secs(5);
    while client.waiting() != (all, all) {
        if Instant::now() > deadline {
            return Err(format!(
                "the waiters did not all queue: {:?} of {all}",
                client.waiting()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serve(acquired, failures).await?;
    drop(client);
    Ok(())
}

/// The waiting child of rslock: one polling waiter on each key, `ready` a second after
/// they start.
async fn rslock_worker(
    url: &str,
    keys: impl Iterator<Item = String>,
    (acquired, failures): (&Arc<AtomicU64>, &Arc<Failures>),
) -> BenchResult<()> {
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    for key in keys {
        let manager = manager.clone();
        let (acquired, failures) = (acquired.clone(), failures.clone());
        tokio::spawn(async move {
            // `acquire` polls until it wins (3 tries 0-200 ms apart, then again).
            match manager.acquire(key.as_str(), Duration::from_secs(10)).await {
                Ok(_guard) => {
                    acquired.fetch_add(1, Ordering::Relaxed);
                }
                Err(err) => failures.note(err.to_string()),
            }
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    serve(acquired, failures).await?;
    Ok(())
}
