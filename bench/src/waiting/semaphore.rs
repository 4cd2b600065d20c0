//! Section 11's semaphore rows: the holders' permits and the waiting child's semaphores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use lock_runtime::{Config, LockClient};
use tokio::time::Instant;

use super::case::Case;
use super::protocol::{Failures, READY_LIMIT, serve};
use crate::error::BenchResult;

/// What the holders hold: a lock on each key, or the one permit of each key's semaphore.
pub(super) enum Held {
    Locks(Vec<lock_runtime::LockGuard>),
    Permits(Vec<lock_runtime::SemaphoreGuard>),
}

impl Held {
    pub(super) async fn release(self) {
        match self {
            Held::Locks(guards) => {
                let _ = join_all(guards.into_iter().map(|guard| guard.release())).await;
            }
            Held::Permits(guards) => {
                let _ = join_all(guards.into_iter().map(|guard| guard.release())).await;
            }
        }
    }
}

/// Takes every key of the case with `holder` (ttl, renewed by its watchdog when `renew`).
pub(super) async fn hold(
    holder: &LockClient,
    prefix: &str,
    case: Case,
    (ttl, renew): (Duration, bool),
) -> BenchResult<Held> {
    if case.semaphore {
        let guards = join_all((0..case.keys).map(|i| {
            let permit = holder
                .semaphore(format!("{prefix}:{i}"), 1)
                .ttl(ttl)
                .watchdog(renew);
            async move { permit.acquire().await }
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        return Ok(Held::Permits(guards));
    }
    let guards = join_all((0..case.keys).map(|i| {
        let lock = holder
            .lock(format!("{prefix}:{i}"))
            .ttl(ttl)
            .watchdog(renew);
        async move { lock.acquire().await }
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    Ok(Held::Locks(guards))
}

/// The waiting child of a semaphore case: one waiter on each key's semaphore of one permit.
pub(super) async fn semaphore_worker(
    url: &str,
    keys: impl Iterator<Item = String>,
    count: u64,
    (acquired, failures): (&Arc<AtomicU64>, &Arc<Failures>),
) -> BenchResult<()> {
    let client = LockClient::new(Config::single(url.to_owned()))?;
    for key in keys {
        let permit = client
            .semaphore(key, 1)
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(600));
        let (acquired, failures) = (acquired.clone(), failures.clone());
        tokio::spawn(async move {
            match permit.acquire().await {
                Ok(guard) => {
                    acquired.fetch_add(1, Ordering::Relaxed);
                    drop(guard);
                }
                Err(err) => failures.note(err.to_string()),
            }
        });
    }
    // A semaphore's waiter subscribes to its key's channel once its first try queued it.
    let all = usize::try_from(count)?;
    let deadline = Instant::now() + READY_LIMIT - Duration::from_secs(5);
    while client.waiting().1 != all {
        if Instant::now() > deadline {
            return Err(format!(
                "the semaphore waiters did not all queue: {} of {all} subscribed",
                client.waiting().1
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    serve(acquired, failures).await?;
    drop(client);
    Ok(())
}
