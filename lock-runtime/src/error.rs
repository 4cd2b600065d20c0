//! The one error type of the crate.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::identity::SeenHolder;

/// Why a lock could not be taken or kept.
///
/// Every variant names the key, so a log line says which lock failed and why.
/// Functions guarded by `#[distributed_lock]` return these through their own error
/// type (`E: From<LockError>`), and the body does not run.
///
/// `Display` says what failed, for which key, why, and the fix when there is one: a
/// variant that wraps an error of the Redis client names that error's text, so `{err}` in a
/// log line is enough:
///
/// ```text
/// lock `stock:7`: the request to Redis failed: Redis server 127.0.0.1:6379: Connection refused (os error 111)
/// ```
///
/// Because `Display` already prints the cause, [`source()`](std::error::Error::source)
/// returns only what that text does not say (the cause's own cause, if it has one), so
/// printing the chain (as `anyhow`, `eyre` or `{:#}` reporters do) names each cause once.
/// The Redis client's error itself stays in the variant's `source` field, for code that
/// inspects it (`is_connection_refusal()`, `kind()`, ...).
///
/// | variant | when | what to do | with `axum` |
/// |---|---|---|---|
/// | [`Busy`](Self::Busy) | another owner holds the key and `wait` is zero | nothing: the duplicate is refused, as a dedup or a run-once job wants | 429 |
/// | [`Timeout`](Self::Timeout) | the key was still held when `wait` ran out; `holder` names who held it (host, pid, service, function) and for how long | a holder that held the key through the whole wait may be stuck: look at it (`lockctl inspect`); otherwise retry later, raise `wait` or shorten the critical section | 503, `Retry-After: 1` |
/// | [`Lost`](Self::Lost) | the lease was lost while the body ran ([`OnLost::Cancel`](crate::OnLost::Cancel)), the release found another owner, or the hold reached its `max_hold`; `cause` says how | the body's effects may have happened without the lock: check them, and use fencing where two holders would corrupt data; for `MaxHold`, find why the body hung (the WARN names the key and token) | 503 |
/// | [`Backend`](Self::Backend) | Redis unreachable or failing (a typed error within the connect timeout, never a hang) | retry later; the message names the cause (the I/O error or the Redis reply) | 503, `Retry-After: 1` |
/// | [`ReleaseGaveUp`](Self::ReleaseGaveUp) | a release kept failing until its time ran out: the key expires by its ttl | nothing to undo; the others wait at most the rest of the ttl | 503, `Retry-After: 1` |
/// | [`NoQuorum`](Self::NoQuorum) | Redlock: fewer than N/2+1 masters answered; `failures` says what the others said | bring the failed masters back; retry later | 503, `Retry-After: 1` |
/// | [`NotReplicated`](Self::NotReplicated) | with [`Config::wait_for_replicas`](crate::Config::wait_for_replicas): too few replicas confirmed the grant in time (it was undone) | check the replicas and their lag; retry later | 503, `Retry-After: 1` |
/// | [`NotDurable`](Self::NotDurable) | with [`Config::wait_for_aof`](crate::Config::wait_for_aof): the grant was not in the append-only files asked for in time (it was undone) | check the primary's and replicas' AOF (`appendonly`, disk latency); retry later | 503, `Retry-After: 1` |
/// | [`InvalidKey`](Self::InvalidKey) | an empty or over-long key, a reserved prefix, or a key of another Redis type, before any Redis traffic | fix the key or the argument that rendered it; `reason` says how | 400 |
/// | [`Config`](Self::Config) | `init` twice, an out-of-range option, a mode the deployment does not offer, a server that refuses the `WAIT`/`WAITAOF` a grant needs | fix the configuration; `reason` says how | 500 |
/// | [`OrderInversion`](Self::OrderInversion) | with [`Config::lock_order_check`](crate::Config::lock_order_check) set to `Fail`: this nested acquisition takes two classes of locks in the reverse of an order seen before (a deadlock waiting to happen), before any Redis traffic | take nested locks in one order everywhere; `inversion` names both orders and their call sites | 500 |
/// | [`Deadlock`](Self::Deadlock) | this wait closed a cycle of tasks that each hold a lock the next one waits for, and it is the one that gives way (the youngest wait), after the detection delay ([`Config::deadlock_detection`](crate::Config::deadlock_detection)) | retry: the others of the cycle go on and let go; take nested locks in one order everywhere; `cycle` names each key, its holder and what it waits for | 503, `Retry-After: 1` |
/// | [`Shutdown`](Self::Shutdown) | the client was shut down ([`crate::shutdown`]), or the process is exiting | nothing: the process is stopping | 503 |
/// | [`InvalidUrl`](Self::InvalidUrl) | the Redis client rejects a configured URL (`REDIS_URL` or [`Config`](crate::Config)) | fix the URL, or turn on the TLS feature it needs; the message says why | 500 |
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the lock and `wait` is zero (try once).
    Busy {
        /// The Redis key of the lock.
        key: String,
    },
    /// The lock was still held by another owner when `wait` ran out (or, with `wait`
    /// zero, Redis answered only after the lease's validity had passed).
    Timeout {
        /// The Redis key of the lock.
        key: String,
        /// How long this caller waited.
        waited: Duration,
        /// Who held the key when the wait ran out, as the waiter saw it then (one look
        /// at the key, made only when a wait runs out); `None` when the key was free by
        /// then, or the look failed.
        holder: Option<Box<SeenHolder>>,
    },
    /// The lease was lost while the guarded body ran, or its release found the key gone or
    /// held by another owner ([`LostCause::FoundAtRelease`]: the body ran to its end, so its
    /// effects may have happened without the lock).
    Lost {
        /// The Redis key of the lock.
        key: String,
        /// What took the lease away.
        cause: LostCause,
    },
    /// Redis could not be reached, or answered with an error.
    ///
    /// The message names the cause: for a connection failure the I/O error (with the
    /// server's address), else the Redis reply or the client's error. The redis-rs error
    /// is in the `source` field for code that inspects it.
    Backend {
        /// The Redis key of the lock (empty when no key was involved).
        key: String,
        /// The client's error.
        source: Arc<redis::RedisError>,
    },
    /// A release (or a waiting process's leave of the queue) kept meeting transient errors
    /// or no answer until its time ran out (the lease's validity point, 2 s at most): it
    /// gave up, and the lock ends by itself when its ttl runs out. One outcome, whatever
    /// the last error was (in a cluster under resharding or failover: `TRYAGAIN`, `MOVED`
    /// to a dead node, `ASK`, or a timeout); the message names that last error, and the
    /// `source` field holds it.
    ReleaseGaveUp {
        /// The Redis key of the lock.
        key: String,
        /// The last error met before giving up.
        source: Arc<redis::RedisError>,
    },
    /// Redlock mode: too few masters answered for a majority.
    NoQuorum {
        /// The Redis key of the lock.
        key: String,
        /// How many masters answered.
        answered: usize,
        /// How many must grant the lock.
        needed: usize,
        /// How many masters there are.
        nodes: usize,
        /// What the others said.
        failures: String,
    },
    /// With [`Config::wait_for_replicas`](crate::Config::wait_for_replicas): the primary
    /// granted or extended the lease, but fewer replicas than asked confirmed it within the
    /// timeout (`WAIT`), so it does not count. A grant is undone (owner-checked) before this
    /// is returned; for [`LockGuard::extend`](crate::LockGuard::extend) the lease keeps
    /// its earlier validity.
    NotReplicated {
        /// The Redis key of the lock.
        key: String,
        /// How many replicas confirmed the write.
        confirmed: u32,
        /// How many were asked for.
        needed: u32,
        /// How long `WAIT` waited for them.
        timeout: Duration,
    },
    /// With [`Config::wait_for_aof`](crate::Config::wait_for_aof): the primary granted or
    /// extended the lease, but it was not in the append-only files asked for within the
    /// timeout (`WAITAOF`), so it does not count; undone as for
    /// [`NotReplicated`](Self::NotReplicated).
    NotDurable {
        /// The Redis key of the lock.
        key: String,
        /// Whether the primary's own append-only file had the write.
        local: bool,
        /// How many replicas' append-only files had it.
        replicas: u32,
        /// Whether the primary's own was asked for.
        needed_local: bool,
        /// How many replicas' were asked for.
        needed_replicas: u32,
        /// How long `WAITAOF` waited.
        timeout: Duration,
    },
    /// The key is empty, too long, or a placeholder rendered an empty value.
    /// Reported before any Redis traffic. Also [`inspect`](crate::inspect) and
    /// [`force_release`](crate::force_release) of a key that holds another Redis type than
    /// a lock's string (named in `reason`; the key is left alone).
    InvalidKey {
        /// The key as far as it could be rendered (or its template).
        key: String,
        /// What is wrong with it, and how to fix it.
        reason: String,
    },
    /// The runtime is misconfigured: `init` twice, an out-of-range
    /// option, or a server that cannot give what the configuration asks for (a grant's
    /// `WAITAOF` refused under `appendonly no`: `reason` names the key, the server's
    /// reply and the fix). A configuration the Redis client itself rejects (a bad URL) is
    /// [`LockError::InvalidUrl`], with the client's error as its source.
    Config {
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// With [`Config::lock_order_check`](crate::Config::lock_order_check) set to
    /// [`Fail`](crate::LockOrderCheck::Fail): a task that holds one class of locks takes
    /// another in the reverse of an order seen before (or closes a longer cycle), which
    /// can deadlock. Reported once per inversion, before any Redis traffic; the body does
    /// not run.
    OrderInversion {
        /// The Redis key this acquisition was for.
        key: String,
        /// The classes and call sites of this order and of the earlier ones it inverts.
        inversion: String,
    },
    /// This wait closed a deadlock: a cycle of tasks (in this process or others) that each
    /// hold a lock the next one waits for. One task of the cycle gives way, the one whose
    /// wait began last, and fails with this; the others go on as soon as it lets go of
    /// what it holds. Found by following the wait-for chain in Redis after the detection
    /// delay ([`Config::deadlock_detection`](crate::Config::deadlock_detection)).
    Deadlock {
        /// The Redis key this wait was for.
        key: String,
        /// The cycle, one step per key: its holder (host, pid, service, function) and the
        /// key that holder waits for.
        cycle: String,
    },
    /// The lock client was shut down ([`crate::shutdown`], [`crate::LockClient::shutdown`]),
    /// or the process is exiting: it takes no new locks.
    Shutdown {
        /// The Redis key of the lock.
        key: String,
    },
    /// The Redis client rejected the configured URL(s): a malformed URL, an unknown
    /// scheme, TLS asked for but not compiled in. The message names the client's reason;
    /// the `source` field holds its error.
    InvalidUrl {
        /// The URL (or, for Redlock and cluster, the URLs) as configured.
        url: String,
        /// The client's error.
        source: Arc<redis::RedisError>,
    },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Busy { key } => write!(
                f,
                "lock `{key}` is busy: another owner holds it (wait = 0s, so it was tried once)"
            ),
            LockError::Timeout {
                key,
                waited,
                holder: None,
            } => write!(
                f,
                "lock `{key}` could not be acquired within {waited:?}: another owner held it \
                 (or Redis answered too late); raise `wait` or shorten the holder's work"
            ),
            LockError::Timeout {
                key,
                waited,
                holder: Some(holder),
            } => {
                let seconds = crate::identity::Seconds(*waited);
                write!(f, "waited {seconds} for `{key}`, {holder}; ")?;
                holder.advice(key, *waited, f)
            }
            LockError::Lost { key, cause } => {
                write!(f, "lock `{key}` was lost while the body ran: {cause}")
            }
            LockError::Backend { key, .. } => {
                if !key.is_empty() {
                    write!(f, "lock `{key}`: ")?;
                }
                fmt::Display::fmt(&self.cause(), f)
            }
            LockError::ReleaseGaveUp { key, source } => write!(
                f,
                "lock `{key}`: the release gave up, Redis did not answer it in time (last \
                 error: {}); the key expires by its ttl",
                redis_cause(source)
            ),
            LockError::NoQuorum { key, .. } => write!(f, "lock `{key}`: {}", self.cause()),
            LockError::NotReplicated { .. } | LockError::NotDurable { .. } => self.fmt_shortfall(f),
            LockError::InvalidKey { key, reason } => {
                write!(f, "invalid lock key `{key}`: {reason}")
            }
            LockError::Config { reason } => write!(f, "lock runtime configuration: {reason}"),
            LockError::OrderInversion { key, inversion } => {
                write!(f, "lock `{key}` was not taken: {inversion}")
            }
            LockError::Deadlock { key, cycle } => write!(
                f,
                "lock `{key}` was not taken: this wait closed a deadlock ({cycle}); it gives \
                 way so the others go on: retry, and take nested locks in one order"
            ),
            LockError::Shutdown { key } => write!(
                f,
                "lock `{key}` was not acquired: the lock client has been shut down \
                 (lock_runtime::shutdown or LockClient::shutdown was called, or the Tokio \
                 runtime it was created on shut down); take locks before shutting down"
            ),
            LockError::InvalidUrl { url, source } => write!(
                f,
                "lock runtime configuration: the Redis client rejects the URL `{url}`: {}; \
                 fix REDIS_URL or the URLs given to `Config` (e.g. redis://127.0.0.1:6379)",
                redis_cause(source)
            ),
        }
    }
}

impl LockError {
    /// The message of a grant that reached too few replicas.
    fn fmt_shortfall(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::NotReplicated {
                key,
                confirmed,
                needed,
                timeout,
            } => write!(
                f,
                "lock `{key}`: the grant reached {confirmed} of the {needed} replicas asked for \
                 within {timeout:?} (WAIT), so it was not counted; check the primary's \
                 replicas (INFO replication), or lower Config::wait_for_replicas"
            ),
            LockError::NotDurable {
                key,
                local,
                replicas,
                needed_local,
                needed_replicas,
                timeout,
            } => {
                let here = if *needed_local && !local {
                    "not in the primary's append-only file, "
                } else {
                    ""
                };
                write!(
                    f,
                    "lock `{key}`: the grant was {here}in {replicas} of the {needed_replicas} \
                     replicas' append-only files asked for within {timeout:?} (WAITAOF), so it \
                     was not counted; check appendonly and the disks of the primary and its \
                     replicas, or lower Config::wait_for_aof"
                )
            }
            _ => Ok(()),
        }
    }
}

/// `Display` prints the Redis client's error (see `redis_cause`), so the chain goes on
/// from what that text does not say: its own cause, if it has one.
impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::Backend { source, .. }
            | LockError::ReleaseGaveUp { source, .. }
            | LockError::InvalidUrl { source, .. } => redis_cause(source).source(),
            _ => None,
        }
    }
}

/// A [`LockError`] displayed without its key (see [`LockError::cause`]).
pub(crate) struct Cause<'a>(&'a LockError);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            LockError::Backend { source, .. } => {
                write!(f, "the request to Redis failed: {}", redis_cause(source))
            }
            LockError::NoQuorum {
                answered,
                needed,
                nodes,
                failures,
                ..
            } => write!(
                f,
                "only {answered} of {nodes} Redis masters answered, a quorum needs {needed}: \
                 {failures}"
            ),
            LockError::Lost { cause, .. } => write!(f, "the lease was lost: {cause}"),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// The cause to print for a redis-rs error. redis-rs' error for an I/O, server or parse
/// failure displays its inner error's text verbatim and returns that error as its own
/// `source()`: the inner error stands for both. Its other kinds (its own descriptions) are
/// printed as they are.
fn redis_cause(err: &redis::RedisError) -> &(dyn std::error::Error + 'static) {
    use std::error::Error as _;
    err.source().unwrap_or(err)
}

impl LockError {
    /// The error of a task that holds `key` for reading and asks for it for writing (or
    /// as a mutex): it would wait for its own share to leave.
    pub(crate) fn upgrade_refused(key: &str) -> LockError {
        LockError::config(format!(
            "lock `{key}` is held for reading by this task: a read lock cannot be upgraded \
             to a write lock (the writer would wait for this task's own share); release the \
             read lock first, or take the write lock from the start"
        ))
    }

    /// The Redis key this error is about (empty for configuration errors).
    pub fn key(&self) -> &str {
        match self {
            LockError::Busy { key }
            | LockError::Timeout { key, .. }
            | LockError::Lost { key, .. }
            | LockError::Backend { key, .. }
            | LockError::ReleaseGaveUp { key, .. }
            | LockError::NoQuorum { key, .. }
            | LockError::NotReplicated { key, .. }
            | LockError::NotDurable { key, .. }
            | LockError::InvalidKey { key, .. }
            | LockError::OrderInversion { key, .. }
            | LockError::Deadlock { key, .. }
            | LockError::Shutdown { key } => key,
            LockError::Config { .. } | LockError::InvalidUrl { .. } => "",
        }
    }

    /// What went wrong, without the key: for events that name the key in a field of their
    /// own (`key = .., error = %err.cause()`), so that a log line names it once.
    pub(crate) fn cause(&self) -> Cause<'_> {
        Cause(self)
    }

    /// The error of a wait for `key` that ran out after `waited`.
    pub(crate) fn timeout(key: &str, waited: Duration) -> Self {
        LockError::Timeout {
            key: key.to_owned(),
            waited,
            holder: None,
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Self {
        LockError::Config {
            reason: reason.into(),
        }
    }

    pub(crate) fn backend(key: &str, source: redis::RedisError) -> Self {
        LockError::Backend {
            key: key.to_owned(),
            source: Arc::new(source),
        }
    }

    pub(crate) fn invalid_url(url: impl Into<String>, source: redis::RedisError) -> Self {
        LockError::InvalidUrl {
            url: url.into(),
            source: Arc::new(source),
        }
    }
}

/// What took a lease away from its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LostCause {
    /// A renewal found the token gone: the key was deleted (also by an operator's
    /// [`force_release`](crate::force_release)), evicted, expired or taken over.
    #[error("the token is no longer in Redis (deleted, evicted, expired or taken over)")]
    TokenGone,
    /// Renewals kept failing until the lease's validity ran out on the local clock.
    #[error("renewals failed until the lease's validity ran out")]
    RenewalFailed,
    /// The lease ran to the end of its ttl (watchdog off).
    #[error("the lease reached its ttl (watchdog is off)")]
    Expired,
    /// The release found the key held by another owner, or gone, while this holder still
    /// believed its lease valid (no renewal had reported a loss): the lease was lost at
    /// some point during the hold, unseen until then. The typical cause is a failover that
    /// promoted a replica without the key, after which another client acquired it; also an
    /// eviction or an operator's `DEL` between two renewals. The guarded body ran to its
    /// end, so its effects may have happened without the lock: only
    /// [fencing](crate::Lock::fencing) makes storage reject them. A release whose first
    /// send lost its reply (a dropped connection, a time-out) and that finds the key gone
    /// or taken when sent again cannot tell its own first send from a loss: it counts as
    /// released, and only the renewals report a loss during such a hold.
    #[error(
        "the release found the key gone or held by another owner (lost during the hold, \
         e.g. to a failover; the body's effects may have happened)"
    )]
    FoundAtRelease,
    /// The lock client shut down and released the lock ([`crate::shutdown`],
    /// [`crate::LockClient::shutdown`], or the process's exit).
    #[error("the lock client shut down and released the lock")]
    Shutdown,
    /// The hold reached its `max_hold` ([`Lock::max_hold`](crate::Lock::max_hold),
    /// [`Config::default_max_hold`](crate::Config::default_max_hold)): the watchdog stopped
    /// renewing it and the guarded body was stopped. The lease itself was still ours: the
    /// run path releases it at once, and a guard held by hand keeps it until it is released
    /// or its ttl ends. A hold that outlives its bound is taken as a bug in the holder (a
    /// hung await), as PostgreSQL's `statement_timeout` takes a runaway statement.
    #[error("the hold reached its max_hold (the holder ran too long, or hung)")]
    MaxHold,
    /// An operator took the lock away ([`force_release`](crate::force_release), `lockctl
    /// release`), and its release told this holder's process at once (a holder that has
    /// renewed its lease at least once listens for that; one that has not finds the token
    /// gone at its first renewal, [`TokenGone`](Self::TokenGone)). The WARN event names
    /// who released it.
    #[error("an operator force-released the lock")]
    ForceReleased,
}

/// What releasing a lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// Our token was there and the key is deleted.
    Released,
    /// The key was already gone: the lease had expired (nothing deleted).
    AlreadyExpired,
    /// Another owner holds the key now (nothing deleted).
    NotOwner,
}

/// What the waits and releases make of an error: whether another try may cure it.
impl LockError {
    /// A passing server state that a retry may cure: a cluster in the middle of moving the
    /// slot (TRYAGAIN, ASK, MOVED past the client's own retries), a cluster or primary
    /// briefly down, a server loading its data set.
    pub(crate) fn is_transient(&self) -> bool {
        use redis::ServerErrorKind as Server;
        let LockError::Backend { source, .. } = self else {
            return false;
        };
        matches!(
            source.kind(),
            redis::ErrorKind::Server(
                Server::TryAgain
                    | Server::Ask
                    | Server::Moved
                    | Server::ClusterDown
                    | Server::BusyLoading
                    | Server::MasterDown
            )
        )
    }

    /// A lost, refused or timed-out connection.
    pub(crate) fn is_connection(&self) -> bool {
        matches!(self, LockError::Backend { source, .. } if is_connection_error(source))
    }

    /// A request that may have run on the server though its reply never came (a dropped
    /// or reset connection, a time-out), as opposed to one refused before it was sent.
    pub(crate) fn reply_lost(&self) -> bool {
        matches!(self, LockError::Backend { source, .. }
            if is_connection_error(source) && !source.is_connection_refusal())
    }
}

/// Whether `err` is a lost, refused or timed-out connection: the server could not be
/// reached (as opposed to a reply).
pub(crate) fn is_connection_error(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
}
