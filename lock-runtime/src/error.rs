//! The one error type of the crate.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a lock could not be taken or kept.
///
/// Every variant names the key, so a log line says which lock failed and why.
/// Functions guarded by `#[distributed_lock]` return these through their own error
/// type (`E: From<LockError>`), and the body does not run.
///
/// `Display` says what failed, for which key, and the fix when there is one; it never
/// repeats the underlying cause, which [`source()`](std::error::Error::source) returns
/// instead. Printing the chain (as `anyhow`, `eyre` or `{:#}` reporters do) therefore names
/// each cause once:
///
/// ```text
/// lock `stock:7`: the request to Redis failed (Redis unreachable or answering with an error)
/// caused by: Connection refused (os error 111)
/// ```
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
    },
    /// The lease was lost while the guarded body ran.
    Lost {
        /// The Redis key of the lock.
        key: String,
        /// What took the lease away.
        cause: LostCause,
    },
    /// Redis could not be reached, or answered with an error.
    ///
    /// [`source()`](std::error::Error::source) is the cause: for a connection failure the
    /// I/O error itself (redis-rs' error only repeats its text), else the redis-rs error.
    /// The redis-rs error is in the `source` field for code that inspects it.
    Backend {
        /// The Redis key of the lock (empty when no key was involved).
        key: String,
        /// The client's error.
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
    /// The key is empty, too long, or a placeholder rendered an empty value.
    /// Reported before any Redis traffic.
    InvalidKey {
        /// The key as far as it could be rendered (or its template).
        key: String,
        /// What is wrong with it, and how to fix it.
        reason: String,
    },
    /// The runtime is misconfigured: `init` twice, no Tokio runtime, an out-of-range
    /// option. A configuration the Redis client itself rejects (a bad URL) is
    /// [`LockError::InvalidUrl`], with the client's error as its source.
    Config {
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// The lock client was shut down ([`crate::shutdown`], [`crate::LockClient::shutdown`]),
    /// or the Tokio runtime it lives on shut down: it takes no new locks.
    Shutdown {
        /// The Redis key of the lock.
        key: String,
    },
    /// The Redis client rejected the configured URL(s): a malformed URL, an unknown
    /// scheme, TLS asked for but not compiled in. [`source()`](std::error::Error::source)
    /// is the client's error.
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
            LockError::Timeout { key, waited } => write!(
                f,
                "lock `{key}` could not be acquired within {waited:?}: another owner held it \
                 (or Redis answered too late); raise `wait` or shorten the holder's work"
            ),
            LockError::Lost { key, cause } => {
                write!(f, "lock `{key}` was lost while the body ran: {cause}")
            }
            LockError::Backend { key, .. } if key.is_empty() => f.write_str(
                "the request to Redis failed (Redis unreachable or answering with an error)",
            ),
            LockError::Backend { key, .. } => write!(
                f,
                "lock `{key}`: the request to Redis failed (Redis unreachable or answering \
                 with an error)"
            ),
            LockError::NoQuorum {
                key,
                answered,
                needed,
                nodes,
                failures,
            } => write!(
                f,
                "lock `{key}`: only {answered} of {nodes} Redis masters answered, a quorum \
                 needs {needed}: {failures}"
            ),
            LockError::InvalidKey { key, reason } => {
                write!(f, "invalid lock key `{key}`: {reason}")
            }
            LockError::Config { reason } => write!(f, "lock runtime configuration: {reason}"),
            LockError::Shutdown { key } => write!(
                f,
                "lock `{key}` was not acquired: the lock client has been shut down \
                 (lock_runtime::shutdown or LockClient::shutdown was called, or the Tokio \
                 runtime it was created on shut down); take locks before shutting down"
            ),
            LockError::InvalidUrl { url, .. } => write!(
                f,
                "lock runtime configuration: the Redis client rejects the URL `{url}`; fix \
                 REDIS_URL or the URLs given to `Config` (e.g. redis://127.0.0.1:6379)"
            ),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::Backend { source, .. } | LockError::InvalidUrl { source, .. } => {
                Some(redis_cause(source))
            }
            _ => None,
        }
    }
}

/// The cause to report for a redis-rs error. redis-rs' error for an I/O, server or parse
/// failure displays its inner error's text verbatim and returns that error as its own
/// `source()`: reporting both would print the same text twice, so the inner error stands
/// for it. Its other kinds (its own descriptions) are reported as they are.
fn redis_cause(err: &redis::RedisError) -> &(dyn std::error::Error + 'static) {
    use std::error::Error as _;
    match err.source() {
        Some(inner) => inner,
        None => err,
    }
}

impl LockError {
    /// The Redis key this error is about (empty for configuration errors).
    pub fn key(&self) -> &str {
        match self {
            LockError::Busy { key }
            | LockError::Timeout { key, .. }
            | LockError::Lost { key, .. }
            | LockError::Backend { key, .. }
            | LockError::NoQuorum { key, .. }
            | LockError::InvalidKey { key, .. }
            | LockError::Shutdown { key } => key,
            LockError::Config { .. } | LockError::InvalidUrl { .. } => "",
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
    /// A renewal found the token gone: the key was deleted, evicted, expired or taken over.
    #[error("the token is no longer in Redis (deleted, evicted, expired or taken over)")]
    TokenGone,
    /// Renewals kept failing until the lease's validity ran out on the local clock.
    #[error("renewals failed until the lease's validity ran out")]
    RenewalFailed,
    /// The lease ran to the end of its ttl (watchdog off).
    #[error("the lease reached its ttl (watchdog is off)")]
    Expired,
    /// The lock client shut down and released the lock ([`crate::shutdown`],
    /// [`crate::LockClient::shutdown`], or the end of its Tokio runtime).
    #[error("the lock client shut down and released the lock")]
    Shutdown,
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
