//! The one error type of the crate.

use std::sync::Arc;
use std::time::Duration;

/// Why a lock could not be taken or kept.
///
/// Every variant names the key, so a log line says which lock failed and why.
/// Functions guarded by `#[distributed_lock]` return these through their own error
/// type (`E: From<LockError>`), and the body does not run.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another owner holds the lock and `wait` is zero (try once).
    #[error("lock `{key}` is busy: another owner holds it (wait = 0s, so it was tried once)")]
    Busy {
        /// The Redis key of the lock.
        key: String,
    },
    /// The lock was still held by another owner when `wait` ran out (or, with `wait`
    /// zero, Redis answered only after the lease's validity had passed).
    #[error(
        "lock `{key}` could not be acquired within {waited:?}: another owner held it \
         (or Redis answered too late); raise `wait` or shorten the holder's work"
    )]
    Timeout {
        /// The Redis key of the lock.
        key: String,
        /// How long this caller waited.
        waited: Duration,
    },
    /// The lease was lost while the guarded body ran.
    #[error("lock `{key}` was lost while the body ran: {cause}")]
    Lost {
        /// The Redis key of the lock.
        key: String,
        /// What took the lease away.
        cause: LostCause,
    },
    /// Redis could not be reached, or answered with an error.
    #[error("lock `{key}`: Redis failed: {source}")]
    Backend {
        /// The Redis key of the lock (empty when no key was involved).
        key: String,
        /// The client's error.
        #[source]
        source: Arc<redis::RedisError>,
    },
    /// Redlock mode: too few masters answered for a majority.
    #[error(
        "lock `{key}`: only {answered} of {nodes} Redis masters answered, a quorum needs \
         {needed}: {failures}"
    )]
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
    #[error("invalid lock key `{key}`: {reason}")]
    InvalidKey {
        /// The key as far as it could be rendered (or its template).
        key: String,
        /// What is wrong with it, and how to fix it.
        reason: String,
    },
    /// The runtime is misconfigured: `init` twice, a bad `REDIS_URL`, no Tokio runtime.
    #[error("lock runtime configuration: {reason}")]
    Config {
        /// What is wrong, and how to fix it.
        reason: String,
    },
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
            | LockError::InvalidKey { key, .. } => key,
            LockError::Config { .. } => "",
        }
    }

    pub(crate) fn backend(key: &str, source: redis::RedisError) -> Self {
        LockError::Backend {
            key: key.to_owned(),
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
