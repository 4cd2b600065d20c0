//! Section 7: how cost grows with load. Three sweeps:
//!
//! - cycles/s and client CPU per cycle for 1, 16, 256 and 4,096 tasks on distinct keys
//!   (the cycle of sections 1 and 2, [`scenarios::cycles`]);
//! - heap per held lock and renewals per period for 1,000, 10,000 and 100,000 held locks
//!   (the watchdog of section 4, [`scenarios::watchdog`]);
//! - wake-up latency with 1, 100 and 10,000 keys contended at once: each key has one
//!   holder and one waiter; when every waiter waits, all holders release together, and
//!   each key's latency is from its holder's release call to its waiter's acquire
//!   returning.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lock_runtime::{Config, LockClient};
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::admin::Admin;
use crate::contenders::{Clients, Contender, Held, TTL};
use crate::error::BenchResult;
use crate::scenarios::{CycleRecord, WatchdogRecord, percentile};

/// Task counts of the cycle sweep.
pub(crate) const TASKS: [u64; 4] = [1, 16, 256, 4_096];
/// Contenders of the cycle sweep.
pub(crate) const CYCLE_CONTENDERS: [Contender; 3] =
    [Contender::Api, Contender::Raw, Contender::Rslock];
/// Held locks of the watchdog sweep (ours only: the sweep is about our per-lock cost).
pub(crate) const HELD: [u64; 3] = [1_000, 10_000, 100_000];
/// Contended keys of the wake-up sweep.
pub(crate) const KEYS: [u64; 3] = [1, 100, 10_000];
/// Contenders of the wake-up sweep (raw has no waiting; rslock polls).
pub(crate) const WAKE_CONTENDERS: [Contender; 2] = [Contender::Api, Contender::Rslock];

/// Everything the sweeps measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Scaling {
    /// The cycle sweep, every measurement.
    pub(crate) cycles: Vec<CycleRecord>,
    /// The held-locks sweep.
    pub(crate) held: Vec<WatchdogRecord>,
    /// The wake-up sweep.
    pub(crate) wakeups: Vec<WakeRecord>,
}

/// One measurement of the wake-up sweep.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WakeRecord {
    /// Which client.
    pub(crate) contender: Contender,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    /// Keys contended at once (one holder and one waiter each).
    pub(crate) keys: u64,
    /// How long the waiters were given to start waiting before the releases.
    pub(crate) settle_ms: f64,
    /// Waiters woken (acquired after their holder's release).
    pub(crate) woken: u64,
    /// Waiters that acquired before their holder released (must be 0).
    pub(crate) early: u64,
    /// Waiters still waiting when the window closed.
    pub(crate) missed: u64,
    /// Release call to acquire returned, per key: median, 99th percentile, largest.
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) max_us: u64,
    /// Server commands per key over the settle and release window (commandstats, Lua
    /// included): what waiting costs the server.
    pub(crate) server_cmds_per_key: f64,
}

/// How long a waiter may wait after its holder's release before it counts as missed.
const WAKE_LIMIT: Duration = Duration::from_secs(10);

/// The wake-up sweep for one contender and key count.
pub(crate) async fn wakeup(
    clients: &Arc<Clients>,
    admin: &Admin,
    url: &str,
    contender: Contender,
    run: usize,
    keys: u64,
) -> BenchResult<WakeRecord> {
    // Holders use a client of their own, so that our waiters are woken through Redis (a
    // release message), not handed the lock inside one client.
    let holder_client = LockClient::new(Config::single(url))?;
    let prefix = format!("bench:wake:{}:{keys}:{run}", contender.id());
    let names: Vec<String> = (0..keys).map(|k| format!("{prefix}:{k}")).collect();
    let started = Instant::now();
    let holders = hold_all(clients, &holder_client, contender, &names).await?;
    // Every waiter waits at most until the releases plus WAKE_LIMIT.
    let settle = Duration::from_millis(200) + Duration::from_micros(50) * keys as u32;
    let until = started + Duration::from_secs(30) + settle + WAKE_LIMIT;
    let waiters: Vec<_> = names
        .iter()
        .map(|key| {
            let clients = clients.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let held = clients.acquire_hot(contender, &key, until).await?;
                let acquired = Instant::now();
                if let Some(held) = held {
                    held.release().await?;
                    BenchResult::Ok(Some(acquired))
                } else {
                    Ok(None)
                }
            })
        })
        .collect();
    tokio::time::sleep(settle).await;
    admin.reset_stats().await?;
    let released = release_all(holders).await;
    let (mut latencies, early, missed) = outcomes(waiters, released, until).await?;
    let commands = admin.command_stats().await?;
    admin.del_matching(&format!("*{prefix}*")).await?;
    latencies.sort_unstable();
    Ok(WakeRecord {
        contender,
        run,
        keys,
        settle_ms: settle.as_secs_f64() * 1e3,
        woken: latencies.len() as u64,
        early,
        missed,
        p50_us: percentile(&latencies, 0.50),
        p99_us: percentile(&latencies, 0.99),
        max_us: latencies.last().copied().unwrap_or(0),
        server_cmds_per_key: commands.total_calls() as f64 / keys.max(1) as f64,
    })
}

/// Every key of `names` taken by its holder, 1,000 at a time.
async fn hold_all(
    clients: &Arc<Clients>,
    holder_client: &LockClient,
    contender: Contender,
    names: &[String],
) -> BenchResult<Vec<Held>> {
    let holders: Vec<BenchResult<Held>> = futures_util::stream::iter(names.to_vec())
        .map(|key| async move { hold(clients, holder_client, contender, &key).await })
        .buffer_unordered(1_000)
        .collect()
        .await;
    holders.into_iter().collect::<BenchResult<_>>()
}

/// All holders release together; each notes when its release was called.
async fn release_all(holders: Vec<Held>) -> Vec<BenchResult<Instant>> {
    futures_util::future::join_all(holders.into_iter().map(|held| async move {
        let at = Instant::now();
        held.release().await?;
        BenchResult::Ok(at)
    }))
    .await
}

/// Each waiter's outcome against its holder's release: the latencies (µs), the
/// waiters that acquired early and those that missed.
async fn outcomes(
    waiters: Vec<JoinHandle<BenchResult<Option<Instant>>>>,
    released: Vec<BenchResult<Instant>>,
    until: Instant,
) -> BenchResult<(Vec<u64>, u64, u64)> {
    let mut latencies = Vec::new();
    let (mut early, mut missed) = (0u64, 0u64);
    for (waiter, released) in waiters.into_iter().zip(released) {
        let released = released?;
        match tokio::time::timeout_at(until + Duration::from_secs(5), waiter).await {
            Ok(joined) => match joined?? {
                Some(acquired) if acquired >= released => {
                    latencies.push(u64::try_from((acquired - released).as_micros())?);
                }
                Some(_) => early += 1,
                None => missed += 1,
            },
            Err(_) => missed += 1,
        }
    }
    Ok((latencies, early, missed))
}

/// Takes `key` at once for a holder of the wake-up sweep.
async fn hold(
    clients: &Clients,
    holder_client: &LockClient,
    contender: Contender,
    key: &str,
) -> BenchResult<Held> {
    match contender {
        Contender::Api => Ok(Held::Ours(
            lock_runtime::Lock::new(key)
                .ttl(TTL)
                .wait(Duration::ZERO)
                .client(holder_client)
                .acquire()
                .await?,
        )),
        _ => clients
            .acquire_hot(contender, key, Instant::now() + Duration::from_secs(5))
            .await?
            .ok_or_else(|| format!("{key} was not free for its holder").into()),
    }
}
