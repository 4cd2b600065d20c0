//! What the runtime tells operators: `tracing` events for the outcomes that need
//! attention, and, with the `metrics` feature, counters, histograms and gauges through the
//! [`metrics`](https://docs.rs/metrics) facade (install any recorder: Prometheus,
//! StatsD, OpenTelemetry; without one they cost a branch each).
//!
//! # Metrics (feature `metrics`)
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`ACQUISITIONS`] | counter | `outcome` | every acquire that took a new lock or failed: `acquired`, `busy` (held, `wait` zero), `timeout`, `no_quorum`, `not_replicated`, `not_durable`, `deadlock`, `backend`, `other` (a lost lease, a bad key, a configuration error, a shut-down client) |
//! | [`WAIT_SECONDS`] | histogram | `outcome` | how long those acquires took, waiting included |
//! | [`HOLD_SECONDS`] | histogram | | how long each lock was held: from the acquire's return until the holder released or dropped the guard (the `held_ms` of the "lock released" event is the same measurement) |
//! | [`LOST`] | counter | `cause` | leases lost while held: `token_gone` (the key was deleted or taken over: a renewal or [`LockGuard::extend`](crate::LockGuard::extend) found it gone), `renewal_failed` (Redis did not answer renewals until the lease's validity ended), `found_at_release` (only the release found the key gone or another owner's: a failover, an eviction or a `DEL` between renewals), `force_released` (an operator's `force_release` took it and told the holder at once), `max_hold` (the hold reached its `max_hold` and was ended); each lease counted once. A lease that reaches its ttl with the watchdog off, and one the client's shutdown gives back, are not losses here (their holders are told, as `LostCause::Expired` and `LostCause::Shutdown`) |
//! | [`RENEWAL_FAILURES`] | counter | | renewals of one lease that failed (retried; a lease is lost only when they fail until its validity ends) |
//! | [`DEADLOCKS`] | counter | | deadlocks broken: waits that closed a cycle and gave way with `LockError::Deadlock` ([`Config::deadlock_detection`](crate::Config::deadlock_detection)); one per cycle |
//! | [`HELD`] | gauge | | locks, read shares and permits this process's guards hold now: from the acquire's return until the guard is released or dropped (a reentrant guard is not counted) |
//! | [`OLDEST_HOLD_SECONDS`] | gauge | | how long the oldest of those holds has lasted so far; zero when none. A stuck holder (a body that hangs while the watchdog renews its lease) shows here long before any waiter times out |
//! | [`WAITING`] | gauge | | tasks of this process waiting now for a lock, a read share or a permit that another owner holds: in the local queue behind this process's own holder, or in Redis (an acquire that takes at once is not counted) |
//! | [`OLDEST_WAIT_SECONDS`] | gauge | | how long the oldest of those waits has lasted so far (since its acquire began); zero when none |
//!
//! Each metric is described to the recorder (its unit, `Unit::Count` for counters and
//! gauges of how many, `Unit::Seconds` for histograms and ages, and a line of text) when a
//! client first records one.
//!
//! The four gauges are live: every hold and every wait of the process is counted while it
//! lasts (a guard dropped without a release and a waiting future dropped mid-way end it
//! too), and each client publishes them once a second from its own runtime. They are the
//! process's: two clients in one process publish the same values.
//!
//! Reentrant acquires (a task that holds the key already) are not counted. No metric is
//! labelled by the key itself: keys hold user data and are unbounded. With
//! [`Config::metrics_key_label`](crate::Config::metrics_key_label) every metric also gets a
//! `key` label that a function derives from the lock's Redis key, such as the part before
//! its first `:`; the function decides the label's cardinality.
//!
//! # Events (`tracing`, targets under `lock_runtime::`)
//!
//! Every event about a lock names its Redis key once, in a `key` field (an event about a
//! batch of renewals lists them in `keys`, the first eight and how many more, and counts
//! them in `leases`). An event's target is the module that emits it, under
//! `lock_runtime::`. The `distributed_lock` span of a guarded call (`semaphore` for a
//! permit) covers the body only, so the application's own events in the body say which
//! lock they ran under. A wait that does not take the key at its first try lasts as a
//! `lock wait` span (INFO, a child of the caller's span): `key` from the start, and
//! `holder` (host, pid, service, function), `holder_token` and `held_ms` once the wait
//! has looked at the key, when it passes `log_long_waits` (its `lock wait long` event is
//! inside the span) or when it runs out; a trace then shows each wait and whom it waited
//! for.
//!
//! An event is named by the start of its message (`…` stands for a part that varies); the
//! table lists every event the crate emits:
//!
//! | level | event | fields | means |
//! |---|---|---|---|
//! | INFO | `lock wait timed out` | `key`, `waited_ms`, `holder`, `holder_token`, `held_ms` | an acquire returned `Timeout`: another owner held the lock for longer than `wait`; `holder` names it (host, pid, service, function) and `held_ms` how long it had held the key |
//! | INFO | `lock not acquired: no Redlock majority` | `error`, `key` | `NoQuorum`: too few Redlock masters granted the lock |
//! | INFO | `the lease was lost: the guarded body was stopped` | `cause`, `key` | a guarded body was stopped and returned `Lost` ([`OnLost::Cancel`](crate::OnLost::Cancel)) |
//! | INFO | `lock wait long` | `held_ms`, `holder`, `holder_token`, `key`, `waited_ms` | an acquire has waited past [`Config::log_long_waits`](crate::Config::log_long_waits) (default 10 s) for a held key, and waits on: once per wait (PostgreSQL's `log_lock_waits`); `holder` names who holds the key then, as one look at it sees it (host, pid, service, function; none in Redlock mode), and `held_ms` how long it has held it |
//! | INFO | `lock held long` | `held_ms`, `key`, `progress_ago_ms`, `token` | a hold passed [`Config::log_long_holds`](crate::Config::log_long_holds) (default off): once per hold, with how long ago its holder last reported progress (`progress_ago_ms` absent: never); a hold whose progress stays old is stuck, not slow |
//! | INFO | `lock force-released by an operator` | `key`, `token` | [`force_release`](crate::force_release) deleted a holder's key; the holder hears of it at once once it has renewed its lease (`lock force-released by an operator: its holder was told`), else at its first renewal |
//! | INFO | `the … answers again` | `server`, `unreachable_ms` | a server that was unreachable past the outage grace answers again: locks are taken on it again |
//! | INFO | `the Redis Cluster master serves no slot any more` | `server` | a cluster master that was down lost its slots to a failover: its keys are checked on their new master |
//! | INFO | `the Redis server refuses RESP3` | `error`, `server` | wake-ups come over a RESP2 pub/sub connection instead |
//! | INFO | `…: released every lock it held and left every queue` | `kept`, `left`, `not_held`, `released`, `took_ms` | a shutdown (of the client, or of the process with locks held) gave every lock back |
//! | WARN | `lock lost`, `read lock lost`, `permit lost` | `cause`, `found`, `key`, `token` | a held lease is gone: its key deleted or taken over (a renewal or `extend` found the token gone), renewals failed until its validity ended, or its release found another owner's token or no key (`found`); counted in [`LOST`] |
//! | WARN | `lock held past its max_hold` | `held_ms`, `key`, `max_hold_ms`, `token` | a hold reached its `max_hold`: the watchdog stopped renewing it, its holder reads it lost (`LostCause::MaxHold`), and a guarded body is stopped and its lock released; counted in [`LOST`] as `max_hold`. A hold that outlives its bound is a bug in the holder (a hung await), as a statement past PostgreSQL's `statement_timeout` is |
//! | WARN | `lock force-released by an operator: its holder was told` | `by`, `key`, `token` | an operator's [`force_release`](crate::force_release) took a lock this process held, and told it at once: the lease ends with `LostCause::ForceReleased`; `by` names the releaser (host, pid, service); counted in [`LOST`] |
//! | WARN | `deadlock detected: this wait gives way` | `cycle`, `key` | this wait closed a cycle of tasks that each hold a lock the next waits for, and is the one that gives way (`LockError::Deadlock`); `cycle` names each key, its holder and what it waits for; counted in [`DEADLOCKS`] |
//! | WARN | `lease renewal failed`, `reloading the renew script failed` | `error`, `key`, `keys`, `leases` | Redis failed a renewal or a pipeline of them; each is tried again until the lease's validity ends |
//! | WARN | `lease renewals not confirmed by enough replicas` | `answer`, `keys`, `leases` | with [`Config::wait_for_replicas`](crate::Config::wait_for_replicas), renewals too few replicas confirmed do not count |
//! | WARN | `lock not acquired: too few replicas confirmed the grant`, `lock not acquired: the grant was not in the append-only files asked for` | `error`, `key` | an acquire failed with `NotReplicated` or `NotDurable` |
//! | WARN | `giving the lock back failed`, `release on drop failed`, `releasing a parked lock failed`, `releasing a late acquisition failed`, `releasing a partial multi-lock failed`, `giving a read share back on drop failed`, `giving the permit back failed`, `undoing a grant the replicas did not confirm failed`, `undoing a share the replicas did not confirm failed` | `error`, `key` | Redis failed a release: the lease ends by its ttl |
//! | WARN | `lock-order inversion` | `classes`, `inversion`, `key` | with [`Config::lock_order_check`](crate::Config::lock_order_check) on: a task took two classes of locks in the reverse of an order seen before (or closed a longer cycle), which can deadlock; `classes` is the cycle, `inversion` names each order's call sites. Once per inversion, before the acquisition waits
//! | WARN | `acquire reply arrived after the lease validity`, `permit reply arrived after the lease validity` | `key` | a grant answered after its validity had ended: it is given back and tried again within `wait` |
//! | WARN | `cannot subscribe to release messages` | `error`, `key` | a waiter could not subscribe: it waits for the holder's lease instead of its release message |
//! | WARN | `the … has been unreachable for …` | `error`, `grace_ms`, `server` | a server unreachable for longer than the outage grace: acquisitions that need it fail at once with `Backend` until it answers |
//! | WARN | `the Redis primary moved`, `no sentinel named the primary` | `error`, `from`, `master`, `to` | Sentinel: the connections and the wake-ups follow a new primary, or no sentinel could name it |
//! | WARN | `Redis request timed out`, `cluster request timed out` | `error` | a request had no answer by its deadline: the connection is replaced |
//! | WARN | `the Redis server may evict lock keys` | `policy`, `server` | the server's `maxmemory-policy` may evict locks (use `noeviction`) |
//! | WARN | `the process exited or the lock client was dropped with locks held, and Redis did not answer`, `…: … releases or leaves got no answer from Redis` | `budget_ms`, `failed`, `kept`, `left`, `not_held`, `released`, `took_ms` | a shutdown could not give every lock back: those end by their ttl |
//! | DEBUG | `lock busy`, `lock acquired`, `lease renewed`, `lease renewals sent`, `lock released`, `lock passed to the next local waiter`, `lock yielded to the next process`, `lease reached its ttl` | `attempts`, `granted`, `held_ms`, `kept_for_hold_at_least`, `key`, `keys`, `leases`, `outcome`, `token`, `waited_ms` | the normal path |
//! | DEBUG | `transient error; retrying`, `… failed; trying again`, `lease renewal failed; trying again soon`, `lease renewals redirected`, `connection dropped; trying once more`, `release sent again after a lost reply`, `grant not replicated; undoing it`, `the fence reached no majority; trying again`, `giving back a lost round`, `taking a passed lock over failed`, `the lock key was lost while a reader entered`, `the lock key was lost while a writer waited for the readers`, `passing the read-write lock on failed`, `giving back a write lock that could not wait out the readers failed`, `giving back a share no majority took failed`, `keeping queue places alive failed`, `refreshing the process's liveness key failed`, `the notice channel could not be subscribed; trying again`, `deadlock found; another wait of the cycle gives way`, `writing or removing a wait's deadlock record failed; it expires` | `cycle`, `error`, `key`, `keys`, `leases`, `reply` | a step that is tried again or given up without a loss |
//! | DEBUG | `cannot subscribe to release messages`, `subscribe failed`, `unsubscribe failed`, `the primary did not answer the start-up check`, `the server did not answer the WAITAOF check`, `FUNCTION LIST refused`, `request refused by its lock`, `the server did not take the connection's name` | `channel`, `error`, `key`, `master`, `name`, `server` | connections, subscriptions and start-up checks; a `LockLayer` request answered with its lock's error |
//!
//! ```
//! // With the `metrics` feature, a dashboard refers to the names through the constants:
//! assert_eq!(lock_runtime::telemetry::ACQUISITIONS, "lock_acquisitions_total");
//! assert_eq!(lock_runtime::telemetry::OLDEST_HOLD_SECONDS, "lock_oldest_hold_seconds");
//! ```

use std::time::Duration;

use crate::{error::LockError, error::LostCause};

/// How long an acquire waits before one INFO event says so, by default (see
/// [`Config::log_long_waits`](crate::Config::log_long_waits)).
pub const DEFAULT_LOG_LONG_WAITS: Duration = Duration::from_secs(10);

/// The thresholds past which a hold or a wait is logged at INFO (`None`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LongThresholds {
    pub(crate) hold: Option<Duration>,
    pub(crate) wait: Option<Duration>,
}

impl Default for LongThresholds {
    fn default() -> Self {
        LongThresholds {
            hold: None,
            wait: Some(DEFAULT_LOG_LONG_WAITS),
        }
    }
}

/// Counter of acquires that took a new lock or failed, by `outcome`.
pub const ACQUISITIONS: &str = "lock_acquisitions_total";
/// Histogram of how long acquires took, in seconds, by `outcome`.
pub const WAIT_SECONDS: &str = "lock_wait_seconds";
/// Histogram of how long locks were held, in seconds: from the moment the acquire returned
/// the guard until its holder released it (called [`LockGuard::release`](crate::LockGuard::release))
/// or dropped it. The release's own round trip is not included. The `held_ms` of the
/// "lock released" event is the same measurement.
pub const HOLD_SECONDS: &str = "lock_hold_seconds";
/// Counter of leases lost while held, by `cause`.
pub const LOST: &str = "lock_lost_total";
/// Counter of failed renewals (each lease, each attempt).
pub const RENEWAL_FAILURES: &str = "lock_renewal_failures_total";
/// Counter of deadlocks broken (the victim's wait, one per cycle).
pub const DEADLOCKS: &str = "lock_deadlocks_total";
/// Gauge of the locks, read shares and permits this process's guards hold now.
pub const HELD: &str = "lock_held";
/// Gauge of the age, in seconds, of the oldest hold this process's guards still hold.
pub const OLDEST_HOLD_SECONDS: &str = "lock_oldest_hold_seconds";
/// Gauge of the tasks of this process waiting now for a lock, a share or a permit.
pub const WAITING: &str = "lock_waiting";
/// Gauge of the age, in seconds, of the oldest wait of this process still waiting.
pub const OLDEST_WAIT_SECONDS: &str = "lock_oldest_wait_seconds";

/// Derives the `key` label from a lock's Redis key (see
/// [`Config::metrics_key_label`](crate::Config::metrics_key_label)).
pub type KeyLabel = fn(&str) -> String;

/// The `outcome` label of an acquire that failed with `err`.
fn outcome_of(err: &LockError) -> &'static str {
    match err {
        LockError::Busy { .. } => "busy",
        LockError::Timeout { .. } => "timeout",
        LockError::NoQuorum { .. } => "no_quorum",
        LockError::Backend { .. } => "backend",
        LockError::NotReplicated { .. } => "not_replicated",
        LockError::NotDurable { .. } => "not_durable",
        LockError::Deadlock { .. } => "deadlock",
        _ => "other",
    }
}

/// The `cause` label of a lost lease.
fn cause_label(cause: LostCause) -> &'static str {
    match cause {
        LostCause::TokenGone => "token_gone",
        LostCause::RenewalFailed => "renewal_failed",
        LostCause::FoundAtRelease => "found_at_release",
        LostCause::Expired => "expired",
        LostCause::Shutdown => "shutdown",
        LostCause::MaxHold => "max_hold",
        LostCause::ForceReleased => "force_released",
    }
}

/// Where a client reports outcomes: a clone lives in the client and in its watchdog.
#[derive(Clone, Default)]
pub(crate) struct Telemetry {
    key_label: Option<KeyLabel>,
    /// When a hold or a wait is logged as long ([`Config::log_long_holds`](crate::Config::log_long_holds)).
    long: LongThresholds,
    /// Set once the metrics were described to the recorder (at the client's first metric).
    #[cfg(feature = "metrics")]
    described: std::sync::Arc<std::sync::OnceLock<()>>,
}

impl Telemetry {
    pub(crate) fn new(key_label: Option<KeyLabel>, long: LongThresholds) -> Self {
        Telemetry {
            key_label,
            long,
            #[cfg(feature = "metrics")]
            described: Default::default(),
        }
    }

    /// How long a hold lasts before one INFO event says so (`None`: never).
    pub(crate) fn long_hold(&self) -> Option<Duration> {
        self.long.hold
    }

    /// How long an acquire waits before one INFO event says so (`None`: never).
    pub(crate) fn long_wait(&self) -> Option<Duration> {
        self.long.wait
    }

    /// Gives the recorder each metric's unit and description, once per client: when the
    /// client first records, so a recorder installed after the client was made (but before
    /// its first lock) still gets them.
    #[cfg(feature = "metrics")]
    fn describe(&self) {
        use ::metrics::Unit;
        self.described.get_or_init(|| {
            ::metrics::describe_counter!(
                ACQUISITIONS,
                Unit::Count,
                "Acquires that took a new lock or failed, by outcome: acquired, busy, \
                 timeout, no_quorum, not_replicated, not_durable, deadlock, backend, other."
            );
            ::metrics::describe_histogram!(
                WAIT_SECONDS,
                Unit::Seconds,
                "How long acquires took, waiting included, by outcome."
            );
            ::metrics::describe_histogram!(
                HOLD_SECONDS,
                Unit::Seconds,
                "How long locks were held: from the acquire's return until the holder \
                 released or dropped the guard (the release's round trip not included)."
            );
            ::metrics::describe_counter!(
                LOST,
                Unit::Count,
                "Leases lost while held, by cause: token_gone, renewal_failed, \
                 found_at_release, force_released, max_hold."
            );
            ::metrics::describe_counter!(
                DEADLOCKS,
                Unit::Count,
                "Deadlocks broken: waits that closed a cycle and gave way (one per cycle)."
            );
            ::metrics::describe_counter!(
                RENEWAL_FAILURES,
                Unit::Count,
                "Renewals of held leases that failed (each is retried)."
            );
            ::metrics::describe_gauge!(
                HELD,
                Unit::Count,
                "Locks, read shares and permits this process's guards hold now."
            );
            ::metrics::describe_gauge!(
                OLDEST_HOLD_SECONDS,
                Unit::Seconds,
                "How long the oldest hold still held has lasted so far (zero when none)."
            );
            ::metrics::describe_gauge!(
                WAITING,
                Unit::Count,
                "Tasks of this process waiting now for a lock, a share or a permit."
            );
            ::metrics::describe_gauge!(
                OLDEST_WAIT_SECONDS,
                Unit::Seconds,
                "How long the oldest wait still waiting has lasted so far (zero when none)."
            );
        });
    }

    /// An acquire took the lock after `waited`.
    pub(crate) fn acquired(&self, key: &str, waited: Duration) {
        self.acquire_outcome(key, "acquired", waited);
    }

    /// An acquire failed with `err` after `waited`.
    pub(crate) fn refused(&self, err: &LockError, waited: Duration) {
        let key = err.key();
        match err {
            LockError::Busy { .. } => {
                tracing::debug!(key, "lock busy: another owner holds it (wait = 0s)");
            }
            LockError::Timeout { waited, holder, .. } => {
                let held_by = holder.as_deref().map(|seen| &seen.identity);
                tracing::info!(
                    key,
                    waited_ms = waited.as_millis() as u64,
                    holder = held_by.map(tracing::field::display),
                    holder_token = holder.as_deref().map(|seen| seen.token.as_str()),
                    held_ms = holder
                        .as_deref()
                        .and_then(|seen| seen.held_for)
                        .map(|held| held.as_millis() as u64),
                    "lock wait timed out: another owner still holds it"
                );
            }
            LockError::NoQuorum { .. } => {
                tracing::info!(key, error = %err.cause(), "lock not acquired: no Redlock majority");
            }
            LockError::NotReplicated { .. } => {
                tracing::warn!(key, error = %err, "lock not acquired: too few replicas confirmed the grant");
            }
            LockError::NotDurable { .. } => {
                tracing::warn!(key, error = %err, "lock not acquired: the grant was not in the append-only files asked for");
            }
            _ => {}
        }
        self.acquire_outcome(key, outcome_of(err), waited);
    }

    /// A lock was held for `held` (see [`HOLD_SECONDS`]).
    pub(crate) fn held(&self, key: &str, held: Duration) {
        #[cfg(feature = "metrics")]
        ::metrics::histogram!(HOLD_SECONDS, self.labels(key, None)).record(held.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = (key, held, self.key_label);
    }

    /// A held lease was lost.
    pub(crate) fn lost(&self, key: &str, cause: LostCause) {
        let cause = cause_label(cause);
        #[cfg(feature = "metrics")]
        ::metrics::counter!(LOST, self.labels(key, Some(("cause", cause)))).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (key, cause, self.key_label);
    }

    /// A wait closed a deadlock and gave way.
    pub(crate) fn deadlock(&self, key: &str) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!(DEADLOCKS, self.labels(key, None)).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (key, self.key_label);
    }

    /// A renewal of a held lease failed (it is tried again).
    pub(crate) fn renewal_failed(&self, key: &str) {
        #[cfg(feature = "metrics")]
        ::metrics::counter!(RENEWAL_FAILURES, self.labels(key, None)).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = (key, self.key_label);
    }

    fn acquire_outcome(&self, key: &str, outcome: &'static str, waited: Duration) {
        #[cfg(feature = "metrics")]
        {
            let labels = self.labels(key, Some(("outcome", outcome)));
            ::metrics::counter!(ACQUISITIONS, labels.clone()).increment(1);
            ::metrics::histogram!(WAIT_SECONDS, labels).record(waited.as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (key, outcome, waited, self.key_label);
    }

    /// The labels of one sample: `label`, and `key` when a key label is configured. Made
    /// before each record, so the metrics are described first.
    #[cfg(feature = "metrics")]
    fn labels(
        &self,
        key: &str,
        label: Option<(&'static str, &'static str)>,
    ) -> Vec<::metrics::Label> {
        self.describe();
        let mut labels = Vec::with_capacity(2);
        if let Some((name, value)) = label {
            labels.push(::metrics::Label::new(name, value));
        }
        if let Some(key_label) = self.key_label {
            labels.push(::metrics::Label::new("key", key_label(key)));
        }
        labels
    }
}

#[cfg(test)]
mod label_tests {
    use super::{cause_label, outcome_of};
    use crate::error::{LockError, LostCause};

    /// Every value of the `outcome` label of `ACQUISITIONS` and `WAIT_SECONDS`, as the
    /// module's table lists them.
    const OUTCOMES: [&str; 9] = [
        "acquired",
        "busy",
        "timeout",
        "no_quorum",
        "not_replicated",
        "not_durable",
        "deadlock",
        "backend",
        "other",
    ];

    /// Every value of the `cause` label of `LOST`, as the module's table lists them: the
    /// causes the code counts (`Telemetry::lost`'s callers).
    const LOST_CAUSES: [&str; 5] = [
        "token_gone",
        "renewal_failed",
        "found_at_release",
        "force_released",
        "max_hold",
    ];

    /// The values listed in the module table's row of `metric`: the code spans after the
    /// colon of its last cell, outside parentheses.
    fn listed(metric: &str) -> Vec<String> {
        let row = include_str!("telemetry.rs")
            .lines()
            .find(|line| line.starts_with(&format!("//! | [`{metric}`]")))
            .unwrap_or_else(|| panic!("no row for {metric}"));
        let what = row.trim_end().trim_end_matches('|');
        let what = what.rsplit(" | ").next().unwrap_or("");
        let what = what.split_once(':').map_or(what, |(_, values)| values);
        let (mut values, mut depth, mut code) = (Vec::new(), 0, None::<String>);
        for c in what.chars() {
            match (c, code.as_mut()) {
                ('`', Some(_)) => values.extend(code.take().filter(|_| depth == 0)),
                ('`', None) => code = Some(String::new()),
                (c, Some(text)) => text.push(c),
                ('(', None) => depth += 1,
                (')', None) => depth -= 1,
                _ => {}
            }
        }
        values
    }

    #[test]
    fn the_table_lists_every_label_value_the_code_gives() {
        assert_eq!(listed("ACQUISITIONS"), OUTCOMES);
        let causes = [
            LostCause::TokenGone,
            LostCause::RenewalFailed,
            LostCause::FoundAtRelease,
            LostCause::ForceReleased,
            LostCause::MaxHold,
        ];
        assert_eq!(causes.map(cause_label), LOST_CAUSES);
        assert_eq!(listed("LOST"), LOST_CAUSES);
        let errors = [
            LockError::Busy { key: "k".into() },
            LockError::config("x"),
            LockError::Shutdown { key: "k".into() },
        ];
        for err in &errors {
            assert!(OUTCOMES.contains(&outcome_of(err)), "{err:?}");
        }
        // The descriptions given to the recorder name the same values.
        let source = include_str!("telemetry.rs");
        for (label, values) in [
            ("by outcome: ", &OUTCOMES[..]),
            ("by cause: ", &LOST_CAUSES),
        ] {
            let text = &source[source.find(label).expect(label) + label.len()..];
            let text: String = text[..text.find('.').unwrap_or(0)]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace("\\ ", "");
            assert_eq!(text, values.join(", "), "the description {label}");
        }
    }
}

/// A lock's key as the live gauges read it (the lock's names, from `scripts.rs`), so that
/// a hold keeps its names, not a copy of its key.
pub(crate) trait LockKey: Send + Sync {
    /// The lock key (the client's prefix included).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn lock_key(&self) -> &str;
}

/// Without the `metrics` feature, a hold or a wait counts nothing and costs nothing.
#[cfg(not(feature = "metrics"))]
#[derive(Debug)]
pub(crate) struct Live;

#[cfg(not(feature = "metrics"))]
impl Live {
    pub(crate) const fn none() -> Self {
        Live
    }
}

#[cfg(not(feature = "metrics"))]
impl Telemetry {
    #[inline]
    pub(crate) fn hold_started<K: LockKey + 'static>(
        &self,
        _: &std::sync::Arc<K>,
        _: std::time::Instant,
    ) -> Live {
        Live
    }

    #[inline]
    pub(crate) fn wait_started(&self, _: &str, _: std::time::Instant) -> Live {
        Live
    }

    pub(crate) fn start_publishing(&self) {}
}

/// The live gauges: what the process holds and waits for now.
#[cfg(feature = "metrics")]
mod gauges;
#[cfg(feature = "metrics")]
pub(crate) use gauges::Live;

/// The events table of the module's docs is the one list of the events the crate emits:
/// these tests read every `tracing` event out of the crate's sources and hold each against
/// the table's rows.
#[cfg(test)]
mod event_table;
