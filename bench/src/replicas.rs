//! Section 8: what `Config::wait_for_replicas` costs, on a primary with one
//! replica (both throwaway redis-servers started by `bench/run`, loopback, no persistence).
//!
//! Every measurement runs twice in the same run, without and with the option: ours through
//! `LockClient::new(Config::single(primary))` and the Lock API, and the raw limit on one
//! multiplexed connection, whose `SET NX PX` then goes out pipelined with `WAIT 1 timeout`
//! (what the option needs at the least: the write and the `WAIT` that counts it, in one
//! round trip). The scenarios are those of sections 1–3 ([`scenarios::cycles`],
//! [`scenarios::hot_key`]), on the primary.
//!
//! Durable grants (`Config::wait_for_aof`) are measured the same way on a Valkey primary
//! and replica with their append-only files on (`BENCH_AOF_URLS`; Redis 7.0 has no
//! `WAITAOF`): ours with `wait_for_aof(true, 1, timeout)`, raw with a pipelined `WAITAOF 1
//! 1 timeout`, on one task and on many keys.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::admin::Admin;
use crate::contenders::{Clients, Contender, Durability};
use crate::error::BenchResult;
use crate::scenarios::{self, CycleRecord, HotRecord};

/// Replicas every grant waits for, with the option on.
pub(crate) const REPLICAS: u32 = 1;

/// How long a `WAIT` may wait (a healthy replica on loopback answers long before).
pub(crate) const WAIT_TIMEOUT: Duration = Duration::from_millis(100);

/// How long a `WAITAOF` that counts a replica may wait: a replica reports how far its
/// append-only file is written about once a second, so [`WAIT_TIMEOUT`] confirms almost no
/// grant (measured on Valkey 8 with `appendfsync everysec` and `always`).
pub(crate) const AOF_REPLICA_TIMEOUT: Duration = Duration::from_millis(1500);

/// Tasks on one key in the hot-key row (the shape of section 3 with fewer tasks).
pub(crate) const HOT_TASKS: u64 = 16;

/// The contenders of section 8 (the hot key: ours only, raw has no waiter).
pub(crate) const CONTENDERS: [Contender; 2] = [Contender::Api, Contender::Raw];

/// What the option of a pair waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Rule {
    /// `wait_for_replicas(1, timeout)`: `WAIT 1 timeout`.
    Replicas,
    /// `wait_for_aof(true, 1, timeout)`: `WAITAOF 1 1 timeout`, the primary's append-only
    /// file and one replica's.
    Aof,
    /// `wait_for_aof(true, 0, timeout)`: `WAITAOF 1 0 timeout`, the primary's own only.
    AofLocal,
}

impl Rule {
    /// The variable naming the pair (`primary,replica`).
    fn variable(self) -> &'static str {
        match self {
            Rule::Replicas => "BENCH_REPLICA_URLS",
            Rule::Aof | Rule::AofLocal => "BENCH_AOF_URLS",
        }
    }

    /// How long the command that waits may wait.
    pub(crate) fn timeout(self) -> Duration {
        match self {
            Rule::Aof => AOF_REPLICA_TIMEOUT,
            Rule::Replicas | Rule::AofLocal => WAIT_TIMEOUT,
        }
    }

    /// What the clients with the option wait for.
    pub(crate) fn durability(self) -> Durability {
        match self {
            Rule::Replicas => Durability::Replicas(REPLICAS, self.timeout()),
            Rule::Aof => Durability::Aof(true, REPLICAS, self.timeout()),
            Rule::AofLocal => Durability::Aof(true, 0, self.timeout()),
        }
    }

    /// The command that waits, lower case as `INFO commandstats` names it.
    pub(crate) fn command(self) -> &'static str {
        match self {
            Rule::Replicas => "wait",
            Rule::Aof | Rule::AofLocal => "waitaof",
        }
    }
}

/// The primary, its replica, and each contender's clients without and with the option.
pub(crate) struct Replicated {
    /// What the option waits for.
    pub(crate) rule: Rule,
    admin: Admin,
    replica: Admin,
    plain: Arc<Clients>,
    waiting: Arc<Clients>,
}

/// One measurement, with the option on or off.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Variant<T> {
    /// Whether the grants waited for the replica.
    pub(crate) waits: bool,
    /// The measurement, as in sections 1–3.
    pub(crate) record: T,
}

/// Everything section 8 measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Measured {
    /// One task on one key.
    pub(crate) uncontended: Vec<Variant<CycleRecord>>,
    /// Many tasks, each on its own key.
    pub(crate) many_keys: Vec<Variant<CycleRecord>>,
    /// Tasks contending for one key.
    pub(crate) hot_key: Vec<Variant<HotRecord>>,
    /// The replica's `master_link_status` after the measurements (`up` expected).
    pub(crate) replica_link: String,
}

impl Replicated {
    /// Connects to the pair in `BENCH_REPLICA_URLS`, or `BENCH_AOF_URLS` for durable
    /// grants (`primary,replica`); `None` when it is unset or empty (the binary run
    /// without `bench/run`, or no `valkey-server`).
    pub(crate) async fn from_env(rule: Rule) -> BenchResult<Option<Self>> {
        let variable = rule.variable();
        let Some(list) = std::env::var(variable).ok().filter(|list| !list.is_empty()) else {
            return Ok(None);
        };
        let urls: Vec<&str> = list.split(',').map(str::trim).collect();
        let [primary, replica] = urls[..] else {
            return Err(format!("{variable} is {list:?}, not `primary,replica`").into());
        };
        let admin = Admin::connect(primary).await?;
        let connected = admin.info_field("replication", "connected_slaves").await?;
        if connected < u64::from(REPLICAS) {
            return Err(format!(
                "the primary {primary} has {connected} replicas connected, not {REPLICAS}"
            )
            .into());
        }
        Ok(Some(Replicated {
            rule,
            admin,
            replica: Admin::connect(replica).await?,
            plain: Arc::new(Clients::replicated(primary, None).await?),
            waiting: Arc::new(Clients::replicated(primary, Some(rule.durability())).await?),
        }))
    }

    /// The `run` that picks a measurement's keys: the run itself on the replicas' pair;
    /// on the Valkey pair, keys of their own per setting and variant, since commands queued
    /// behind a `WAITAOF` can still set keys after their measurement ended.
    fn key_run(&self, run: usize, waits: bool) -> usize {
        let slot = match self.rule {
            Rule::Replicas => return run,
            Rule::Aof => 1,
            Rule::AofLocal => 3,
        };
        run + 10 * (slot + usize::from(waits))
    }

    fn clients(&self, waits: bool) -> &Arc<Clients> {
        if waits { &self.waiting } else { &self.plain }
    }

    /// The replica's `master_link_status`.
    pub(crate) async fn replica_link(&self) -> BenchResult<String> {
        self.replica
            .info_text("replication", "master_link_status")
            .await
    }
}

/// The label of a contender in section 8.
pub(crate) fn label(contender: Contender, rule: Rule, waits: bool) -> String {
    let timeout = rule.timeout().as_millis();
    match (contender, rule, waits) {
        (Contender::Raw, _, false) => "raw limit (SET NX PX + EVALSHA)".to_owned(),
        (Contender::Raw, Rule::Replicas, true) => {
            "raw limit, SET NX PX + pipelined WAIT 1".to_owned()
        }
        (Contender::Raw, Rule::Aof, true) => {
            "raw limit, SET NX PX + pipelined WAITAOF 1 1".to_owned()
        }
        (Contender::Raw, Rule::AofLocal, true) => {
            "raw limit, SET NX PX + pipelined WAITAOF 1 0".to_owned()
        }
        (other, _, false) => other.label().to_owned(),
        (other, Rule::Replicas, true) => {
            format!("{}, wait_for_replicas(1, {timeout} ms)", other.label())
        }
        (other, Rule::Aof, true) => {
            format!("{}, wait_for_aof(true, 1, {timeout} ms)", other.label())
        }
        (other, Rule::AofLocal, true) => {
            format!("{}, wait_for_aof(true, 0, {timeout} ms)", other.label())
        }
    }
}

/// One run of section 8: every contender in `list` without and with the option (the order
/// rotates with `run`), on one task, on `many_tasks` keys, and (ours) on the hot key.
#[allow(clippy::too_many_arguments)] // the section's knobs, each used once
pub(crate) async fn measure_run(
    pair: &Replicated,
    list: &[Contender],
    run: usize,
    (uncontended, many): (Duration, Duration),
    many_tasks: u64,
    (hold, window): (Duration, Duration),
    measured: &mut Measured,
    skipped: &mut Vec<String>,
) {
    let variants = variants(list, run);
    for (tasks, duration) in [(1, uncontended), (many_tasks, many)] {
        for &variant in &variants {
            let scenario = (tasks, duration);
            measure_cycles(pair, run, variant, scenario, measured, skipped).await;
        }
    }
    // The hot key: for the replicas only (durable grants are measured on cycles).
    let hot = variants
        .iter()
        .filter(|(c, _)| *c == Contender::Api && pair.rule == Rule::Replicas);
    for &variant in hot {
        let scenario = (hold, window);
        measure_hot(pair, run, variant, scenario, measured, skipped).await;
    }
    match pair.replica_link().await {
        Ok(link) => measured.replica_link = link,
        Err(err) => note(
            skipped,
            run,
            "replica link",
            (Contender::Raw, pair.rule, false),
            &*err,
        ),
    }
}

/// Every contender in `list` without and with the option, the order rotated by `run`.
fn variants(list: &[Contender], run: usize) -> Vec<(Contender, bool)> {
    let mut variants: Vec<(Contender, bool)> = list
        .iter()
        .flat_map(|&contender| [(contender, false), (contender, true)])
        .collect();
    if !variants.is_empty() {
        let by = run % variants.len();
        variants.rotate_left(by);
    }
    variants
}

/// One contender's cycles, without or with the option, on `tasks` keys for `duration`.
async fn measure_cycles(
    pair: &Replicated,
    run: usize,
    (contender, waits): (Contender, bool),
    (tasks, duration): (u64, Duration),
    measured: &mut Measured,
    skipped: &mut Vec<String>,
) {
    let clients = pair.clients(waits);
    let keys = pair.key_run(run, waits);
    let outcome = scenarios::cycles(clients, &pair.admin, contender, keys, tasks, duration)
        .await
        .map(|record| CycleRecord { run, ..record });
    if pair.rule != Rule::Replicas {
        // Grants undone or releases given up leave keys to their ttl; the next
        // measurement on the same keys must not find them.
        if let Err(err) = pair.admin.del_matching("bench:*").await {
            note(
                skipped,
                run,
                "clean-up",
                (contender, pair.rule, waits),
                &*err,
            );
        }
    }
    match outcome {
        Ok(record) => {
            eprintln!(
                "run {run} replicas {tasks:>3} tasks {:<50} {:>9.0} cycles/s, {} busy",
                label(contender, pair.rule, waits),
                record.per_s,
                record.failures
            );
            let variant = Variant { waits, record };
            if tasks == 1 {
                measured.uncontended.push(variant);
            } else {
                measured.many_keys.push(variant);
            }
        }
        Err(err) => note(
            skipped,
            run,
            &format!("{tasks} tasks"),
            (contender, pair.rule, waits),
            &*err,
        ),
    }
}

/// Ours on the hot key, without or with the option.
async fn measure_hot(
    pair: &Replicated,
    run: usize,
    (contender, waits): (Contender, bool),
    (hold, window): (Duration, Duration),
    measured: &mut Measured,
    skipped: &mut Vec<String>,
) {
    let clients = pair.clients(waits);
    let outcome = scenarios::hot_key(
        clients,
        &pair.admin,
        contender,
        run,
        HOT_TASKS,
        hold,
        window,
        None,
    )
    .await;
    match outcome {
        Ok(record) => {
            eprintln!(
                "run {run} replicas hot key {:<50} {:>9.0} acq/s, p99 {:.1} ms, {} violations",
                label(contender, pair.rule, waits),
                record.per_s,
                record.p99_us as f64 / 1e3,
                record.violations
            );
            measured.hot_key.push(Variant { waits, record });
        }
        Err(err) => note(
            skipped,
            run,
            "hot key",
            (contender, pair.rule, waits),
            &*err,
        ),
    }
}

fn note(
    skipped: &mut Vec<String>,
    run: usize,
    scenario: &str,
    (contender, rule, waits): (Contender, Rule, bool),
    err: &dyn std::fmt::Display,
) {
    let note = format!(
        "run {run}, replicas, {scenario}, {}: failed: {err}",
        label(contender, rule, waits)
    );
    eprintln!("{note}");
    skipped.push(note);
}
