//! Scenario 4: many held locks, renewed by the watchdog.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use lock_runtime::{Config, LockClient};
use serde::Serialize;
use tokio::time::Instant;

use crate::admin::{self, Admin, CommandStats};
use crate::contenders::{Clients, Contender, Held};
use crate::error::BenchResult;

/// One measurement of many held, renewed locks (scenario 4).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WatchdogRecord {
    /// Which client.
    pub(crate) contender: Contender,
    /// Which repetition (0-based).
    pub(crate) run: usize,
    /// Locks held at once.
    pub(crate) locks: u64,
    /// Their lease.
    pub(crate) ttl_ms: u64,
    /// How long acquiring all of them took.
    pub(crate) acquire_s: f64,
    /// The window over which renewals were counted.
    pub(crate) hold_s: f64,
    /// `hold_s` in renewal periods (ttl/3).
    pub(crate) periods: f64,
    /// Renewal commands (EVALSHA) per period.
    pub(crate) renewals_per_period: f64,
    /// Renewal calls that failed (e.g. NOSCRIPT) per period.
    pub(crate) failed_per_period: f64,
    /// Reads the server processed per period (`total_reads_processed`): one per request or
    /// pipeline chunk, so batching shows here.
    pub(crate) server_reads_per_period: f64,
    /// Client CPU over the hold window, as a share of one core.
    pub(crate) client_cpu_share: f64,
    /// Client CPU per renewal.
    pub(crate) client_cpu_us_per_renewal: f64,
    /// Server time of the script calls in the window (`INFO commandstats` usec of
    /// `evalsha`, which includes the commands run inside) per renewal.
    pub(crate) server_us_per_renewal: f64,
    /// Resident memory added per held lock (`/proc/self/statm`; heap reused from earlier
    /// scenarios does not show here).
    pub(crate) rss_per_lock_bytes: f64,
    /// Heap in use added per held lock (`mallinfo2`): what the lock allocates, the guard's
    /// own allocations included; the guard's inline size (in the caller's storage, made
    /// before the count) is `guard_bytes`.
    pub(crate) heap_per_lock_bytes: f64,
    /// The size of the contender's guard value itself (`size_of`), kept by the caller.
    pub(crate) guard_bytes: usize,
    /// `DBSIZE` before acquiring.
    pub(crate) dbsize_before: u64,
    /// `DBSIZE` while all were held.
    pub(crate) dbsize_held: u64,
    /// `DBSIZE` after releasing (polled until it reached the baseline, up to 5 s).
    pub(crate) dbsize_after: u64,
    /// How long after the releases returned the baseline was reached.
    pub(crate) settle_ms: f64,
    /// Locks whose holder was told the lease was lost (must be 0).
    pub(crate) lost: u64,
    /// Leases ours still tracks after all were released (must be 0).
    pub(crate) tracked_after: Option<u64>,
}

/// Holds `locks` locks with lease `ttl` for `hold`, then releases them all.
#[allow(clippy::too_many_arguments)] // the scenario's parameters, each used once
pub(crate) async fn watchdog(
    clients: &Arc<Clients>,
    admin: &Admin,
    url: &str,
    contender: Contender,
    run: usize,
    locks: u64,
    ttl: Duration,
    hold: Duration,
) -> BenchResult<WatchdogRecord> {
    // A client of its own, so that its watchdog schedules these leases only.
    let client = LockClient::new(Config::single(url))?;
    let base = contender.key_base() + 500_000 + (run as u64) * 20_000;
    warm_up(clients, contender, &client, base).await?;
    let dbsize_before = admin.dbsize().await?;
    let taken = take_all(clients, contender, &client, (base, locks), ttl).await?;
    let dbsize_held = admin.dbsize().await?;
    let window = renewal_window(admin, hold, &taken.held).await?;
    let (dbsize_after, settle_ms) = release_all(admin, taken.held, dbsize_before).await?;
    let tracked_after = (contender == Contender::Api).then(|| client.held_leases() as u64);

    let periods = window.hold_s / (ttl.as_secs_f64() / 3.0);
    let renewals = window.renewals();
    Ok(WatchdogRecord {
        contender,
        run,
        locks,
        ttl_ms: ttl.as_millis() as u64,
        acquire_s: taken.acquire_s,
        hold_s: window.hold_s,
        periods,
        renewals_per_period: renewals / periods,
        failed_per_period: window.failed() as f64 / periods,
        server_reads_per_period: window.reads as f64 / periods,
        client_cpu_share: window.cpu / window.hold_s,
        client_cpu_us_per_renewal: window.client_cpu_us_per_renewal(),
        server_us_per_renewal: window.server_us_per_renewal(),
        rss_per_lock_bytes: taken.rss_added as f64 / locks as f64,
        heap_per_lock_bytes: taken.heap_added as f64 / locks as f64,
        guard_bytes: contender.guard_size(),
        dbsize_before,
        dbsize_held,
        dbsize_after,
        settle_ms,
        lost: window.lost,
        tracked_after,
    })
}

/// Warm-up: open the connection, load the scripts, renewal included (a short lease held
/// past its first renewal), so the window sees steady-state renewals, not script loads.
async fn warm_up(
    clients: &Arc<Clients>,
    contender: Contender,
    client: &LockClient,
    base: u64,
) -> BenchResult<()> {
    let warm = clients
        .acquire_renewed(contender, client, base + 19_999, Duration::from_millis(300))
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    warm.release().await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// The locks held, how long taking them took and the memory they added.
struct Taken {
    held: Vec<Held>,
    acquire_s: f64,
    /// Resident memory added, bytes.
    rss_added: u64,
    /// Heap in use added, bytes.
    heap_added: u64,
}

/// Takes the `locks` keys from `base` on, 1,000 at a time, with lease `ttl`.
async fn take_all(
    clients: &Arc<Clients>,
    contender: Contender,
    client: &LockClient,
    (base, locks): (u64, u64),
    ttl: Duration,
) -> BenchResult<Taken> {
    let rss0 = admin::rss_bytes();
    // The caller's storage for the guards is made before the count starts: the count is
    // the heap the locks themselves take (guards' own allocations included), not the
    // slack of a growing vector. The guard's inline size is reported beside it.
    let mut held: Vec<Held> = Vec::with_capacity(usize::try_from(locks)?);
    let mut failed_acquire = None;
    let heap0 = admin::heap_in_use();
    let started = Instant::now();
    futures_util::stream::iter(0..locks)
        .map(|i| async move {
            clients
                .acquire_renewed(contender, client, base + i, ttl)
                .await
        })
        .buffer_unordered(1_000)
        .for_each(|acquired| {
            match acquired {
                Ok(guard) => held.push(guard),
                Err(err) => {
                    failed_acquire.get_or_insert(err);
                }
            }
            std::future::ready(())
        })
        .await;
    let acquire_s = started.elapsed().as_secs_f64();
    let rss1 = admin::rss_bytes();
    let heap1 = admin::heap_in_use();
    if let Some(err) = failed_acquire {
        return Err(err);
    }
    Ok(Taken {
        held,
        acquire_s,
        rss_added: rss1.saturating_sub(rss0),
        heap_added: heap1.saturating_sub(heap0),
    })
}

/// What the server and this process did while the locks were held.
struct Window {
    /// How long the window lasted.
    hold_s: f64,
    /// This process's CPU seconds in it.
    cpu: f64,
    commands: CommandStats,
    /// Reads the server processed.
    reads: u64,
    /// Locks whose holder was told the lease was lost.
    lost: u64,
}

impl Window {
    /// A renewal is its `PEXPIRE` (run inside the script, which may renew many leases).
    fn renewals(&self) -> f64 {
        self.commands.get("pexpire") as f64
    }

    /// Failed script calls (NOSCRIPT after a script flush, errors), counted apart.
    fn failed(&self) -> u64 {
        ["fcall", "evalsha"]
            .iter()
            .map(|command| self.commands.errors.get(*command).copied().unwrap_or(0))
            .sum()
    }

    fn client_cpu_us_per_renewal(&self) -> f64 {
        let renewals = self.renewals();
        if renewals > 0.0 {
            self.cpu * 1e6 / renewals
        } else {
            0.0
        }
    }

    fn server_us_per_renewal(&self) -> f64 {
        let renewals = self.renewals();
        if renewals > 0.0 {
            (self.commands.usec("fcall") + self.commands.usec("evalsha")) as f64 / renewals
        } else {
            0.0
        }
    }
}

/// Holds the locks for `hold` with the server's counters reset at its start.
async fn renewal_window(admin: &Admin, hold: Duration, held: &[Held]) -> BenchResult<Window> {
    admin.reset_stats().await?;
    let reads0 = admin.info_field("stats", "total_reads_processed").await?;
    let cpu0 = admin::cpu_time();
    let window = Instant::now();
    tokio::time::sleep(hold).await;
    let hold_s = window.elapsed().as_secs_f64();
    let cpu = admin::cpu_time().saturating_sub(cpu0).as_secs_f64();
    let commands = admin.command_stats().await?;
    let reads = admin
        .info_field("stats", "total_reads_processed")
        .await?
        .saturating_sub(reads0);
    let lost = held.iter().filter(|held| held.is_lost()).count() as u64;
    Ok(Window {
        hold_s,
        cpu,
        commands,
        reads,
        lost,
    })
}

/// Releases every lock, then polls `DBSIZE` until it is back at `dbsize_before` (up to
/// 5 s): the size reached, and how long after the releases returned.
async fn release_all(
    admin: &Admin,
    held: Vec<Held>,
    dbsize_before: u64,
) -> BenchResult<(u64, f64)> {
    let released: Vec<BenchResult<()>> = futures_util::stream::iter(held)
        .map(Held::release)
        .buffer_unordered(1_000)
        .collect()
        .await;
    released.into_iter().collect::<BenchResult<()>>()?;
    let released_at = Instant::now();
    let mut dbsize_after = admin.dbsize().await?;
    for _ in 0..500 {
        if dbsize_after <= dbsize_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        dbsize_after = admin.dbsize().await?;
    }
    let settle_ms = released_at.elapsed().as_secs_f64() * 1e3;
    Ok((dbsize_after, settle_ms))
}
