//! Several keys at once, all or none: a transfer between two accounts locks both.

use std::time::Duration;

use tokio::time::Instant;

use crate::{Lock, LockClient, LockError, LockGuard, LockOptions, ReleaseOutcome};

/// Locks on several keys, taken all or none (Redisson's `MultiLock`, node-redlock's
/// resource arrays).
///
/// The keys are taken one after another in a canonical order (sorted, duplicates once), so
/// two callers that name the same keys in different orders never wait for each other in a
/// cycle. The options apply to each key; `wait` bounds the whole acquisition. When a key
/// cannot be had in time, the keys already taken are released before the error returns.
/// In a cluster the keys may live in different slots: each is a lock of its own.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{LockError, MultiLock};
///
/// # async fn demo(from: u64, to: u64) -> Result<(), LockError> {
/// let both = MultiLock::new([format!("account:{from}"), format!("account:{to}")])
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// // ... move money from one account to the other ...
/// both.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    keys: Vec<String>,
    options: LockOptions,
    client: Option<LockClient>,
}

/// The guards of a [`MultiLock`]: releasing (or dropping) it releases every key.
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiLock {
    /// Locks on `keys` with default options, on the global client.
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        keys.sort();
        keys.dedup();
        MultiLock {
            keys,
            options: LockOptions::default(),
            client: None,
        }
    }

    /// Sets each lock's lease (default 30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    /// Sets how long the whole acquisition may wait (default 10 s; zero tries each once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Replaces all options at once.
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Takes the locks through `client` instead of the global one.
    pub fn client(mut self, client: &LockClient) -> Self {
        self.client = Some(client.clone());
        self
    }

    /// The keys, in the order they are taken.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Takes every key, in order, within `wait` in all. On an error the keys already
    /// taken are released first; the error names the key that could not be had.
    pub async fn acquire(&self) -> Result<MultiGuard, LockError> {
        let deadline = Instant::now() + self.options.wait;
        let mut guards = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut lock = Lock::new(key.clone())
                .with_options(self.options.clone())
                .wait(left);
            if let Some(client) = &self.client {
                lock = lock.client(client);
            }
            match lock.acquire().await {
                Ok(guard) => guards.push(guard),
                Err(err) => {
                    release_all(guards).await;
                    return Err(err);
                }
            }
        }
        Ok(MultiGuard { guards })
    }
}

impl MultiGuard {
    /// The guard of each key, in the order they were taken.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Releases every key (in reverse order); the first error, if any, after trying all.
    pub async fn release(self) -> Result<Vec<ReleaseOutcome>, LockError> {
        let mut outcomes = Vec::with_capacity(self.guards.len());
        let mut first_error = None;
        for guard in self.guards.into_iter().rev() {
            match guard.release().await {
                Ok(outcome) => outcomes.push(outcome),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(outcomes),
        }
    }
}

/// Gives back the keys a failed acquisition took (a failed release leaves a key to its
/// ttl, and is logged by the guard).
async fn release_all(guards: Vec<LockGuard>) {
    for guard in guards.into_iter().rev() {
        if let Err(err) = guard.release().await {
            tracing::warn!(key = %err.key(), error = %err, "releasing a partial multi-lock failed");
        }
    }
}
