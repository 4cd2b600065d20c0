//! The guard of a held lock.

use std::time::Duration;

use tokio::time::Instant;

use crate::lock::release_script;
use crate::watchdog::LeaseHandle;
use crate::{LockClient, LockError, LockOptions, LostCause, ReleaseOutcome};

/// A held lock. Release it with [`release`](LockGuard::release); dropping it (cancellation,
/// panic, early return) stops renewal at once and releases in the background.
///
/// Release is owner-checked: it never deletes a key that another owner holds now.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    client: LockClient,
    key: String,
    token: String,
    fence: Option<u64>,
    lease: LeaseHandle,
    acquired_at: Instant,
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(
        client: LockClient,
        key: String,
        token: String,
        fence: Option<u64>,
        options: &LockOptions,
        sent: Instant,
    ) -> Self {
        let lease = client
            .watchdog()
            .register(&key, &token, options.ttl, options.watchdog, sent);
        LockGuard {
            client,
            key,
            token,
            fence,
            lease,
            acquired_at: Instant::now(),
            released: false,
        }
    }

    /// The Redis key of the lock (with the client's prefix, if any).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The random token stored under the key (a uuid v4, never reused).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this acquisition, when the lock was taken with fencing.
    /// Strictly greater than every earlier fence for the key.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// How long the lock has been held.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Whether the lease has been lost (and why), as far as the watchdog knows.
    pub fn lost_cause(&self) -> Option<LostCause> {
        *self.lease.lost.borrow()
    }

    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.lost_cause().is_some()
    }

    /// Resolves when the lease is lost; never, while it is held.
    pub async fn lost(&self) -> LostCause {
        let mut lost = self.lease.lost.clone();
        if let Ok(cause) = lost.wait_for(Option::is_some).await {
            if let Some(cause) = *cause {
                return cause;
            }
        }
        // The watchdog dropped the lease without a loss (it was released): never lost.
        std::future::pending().await
    }

    /// Releases the lock and reports what Redis had: our token (released), nothing
    /// (the lease had expired), or another owner's token (left alone).
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        self.released = true;
        self.client.watchdog().remove(self.lease.id);
        let reply = release_script(&self.client, &self.key, &self.token).await?;
        let outcome = match reply {
            1 => ReleaseOutcome::Released,
            0 => ReleaseOutcome::AlreadyExpired,
            _ => ReleaseOutcome::NotOwner,
        };
        tracing::debug!(
            key = %self.key,
            held_ms = self.acquired_at.elapsed().as_millis() as u64,
            ?outcome,
            "lock released"
        );
        Ok(outcome)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.client.watchdog().remove(self.lease.id);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to release on: the lease ends by its ttl.
            tracing::warn!(key = %self.key, "lock guard dropped outside a Tokio runtime; the lease expires by its ttl");
            return;
        };
        let client = self.client.clone();
        let key = std::mem::take(&mut self.key);
        let token = std::mem::take(&mut self.token);
        runtime.spawn(async move {
            match release_script(&client, &key, &token).await {
                Ok(_) => tracing::debug!(key = %key, "lock released on drop"),
                Err(err) => {
                    tracing::warn!(key = %key, error = %err, "release on drop failed; the lease expires by its ttl")
                }
            }
        });
    }
}
