//! Section 8 (issue 25): what `Config::wait_for_replicas` costs, on a primary with one
//! replica (both throwaway redis-servers started by `bench/run`, loopback, no persistence).
//!
//! Every measurement runs twice in the same run, without and with the option: ours through
//! `LockClient::new(Config::single(primary))` and the Lock API, and the raw limit on one
//! multiplexed connection, whose `SET NX PX` then goes out pipelined with `WAIT 1 timeout`
//! (what the option needs at the least: the write and the `WAIT` that counts it, in one
//! round trip). The scenarios are those of sections 1–3 ([`scenarios::cycles`],
//! [`scenarios::hot_key`]), on the primary.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::BenchResult;
use crate::admin::Admin;
use crate::contenders::{Clients, Contender};
use crate::scenarios::{self, CycleRecord, HotRecord};

/// Replicas every grant waits for, with the option on.
pub(crate) const REPLICAS: u32 = 1;

/// How long a `WAIT` may wait (a healthy replica on loopback answers long before).
pub(crate) const WAIT_TIMEOUT: Duration = Duration::from_millis(100);

/// Tasks on one key in the hot-key row (the shape of section 3 with fewer tasks).
pub(crate) const HOT_TASKS: u64 = 16;

/// The contenders of section 8 (the hot key: ours only, raw has no waiter).
pub(crate) const CONTENDERS: [Contender; 2] = [Contender::Api, Contender::Raw];

/// The primary, its replica, and each contender's clients without and with the option.
pub(crate) struct Replicated {
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
    /// Connects to the pair in `BENCH_REPLICA_URLS` (`primary,replica`); `None` when it is
    /// unset (the binary run without `bench/run`).
    pub(crate) async fn from_env() -> BenchResult<Option<Self>> {
        let Ok(list) = std::env::var("BENCH_REPLICA_URLS") else {
            return Ok(None);
        };
        let urls: Vec<&str> = list.split(',').map(str::trim).collect();
        let [primary, replica] = urls[..] else {
            return Err(format!("BENCH_REPLICA_URLS is {list:?}, not `primary,replica`").into());
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
            admin,
            replica: Admin::connect(replica).await?,
            plain: Arc::new(Clients::replicated(primary, None).await?),
            waiting: Arc::new(Clients::replicated(primary, Some((REPLICAS, WAIT_TIMEOUT))).await?),
        }))
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
pub(crate) fn label(contender: Contender, waits: bool) -> String {
    match (contender, waits) {
        (Contender::Raw, false) => "raw limit (SET NX PX + EVALSHA)".to_owned(),
        (Contender::Raw, true) => "raw limit, SET NX PX + pipelined WAIT 1".to_owned(),
        (other, false) => other.label().to_owned(),
        (other, true) => format!(
            "{}, wait_for_replicas(1, {} ms)",
            other.label(),
            WAIT_TIMEOUT.as_millis()
        ),
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
    let mut variants: Vec<(Contender, bool)> = list
        .iter()
        .flat_map(|&contender| [(contender, false), (contender, true)])
        .collect();
    if !variants.is_empty() {
        let by = run % variants.len();
        variants.rotate_left(by);
    }
    for (tasks, duration) in [(1, uncontended), (many_tasks, many)] {
        for &(contender, waits) in &variants {
            let clients = pair.clients(waits);
            match scenarios::cycles(clients, &pair.admin, contender, run, tasks, duration).await {
                Ok(record) => {
                    eprintln!(
                        "run {run} replicas {tasks:>3} tasks {:<50} {:>9.0} cycles/s, {} busy",
                        label(contender, waits),
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
                    contender,
                    waits,
                    &*err,
                ),
            }
        }
    }
    for &(contender, waits) in variants.iter().filter(|(c, _)| *c == Contender::Api) {
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
                    label(contender, waits),
                    record.per_s,
                    record.p99_us as f64 / 1e3,
                    record.violations
                );
                measured.hot_key.push(Variant { waits, record });
            }
            Err(err) => note(skipped, run, "hot key", contender, waits, &*err),
        }
    }
    match pair.replica_link().await {
        Ok(link) => measured.replica_link = link,
        Err(err) => note(skipped, run, "replica link", Contender::Raw, false, &*err),
    }
}

fn note(
    skipped: &mut Vec<String>,
    run: usize,
    scenario: &str,
    contender: Contender,
    waits: bool,
    err: &dyn std::fmt::Display,
) {
    let note = format!(
        "run {run}, replicas, {scenario}, {}: failed: {err}",
        label(contender, waits)
    );
    eprintln!("{note}");
    skipped.push(note);
}
