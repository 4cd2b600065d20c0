//! The guard of a held lock.

use std::time::Duration;

use tokio::time::Instant;

use crate::context::{self, CurrentLock};
use crate::lock::release_script;
use crate::scripts::KeyNames;
use crate::watchdog::{LeaseHandle, validity};
use crate::{LockClient, LockError, LockOptions, LostCause, ReleaseOutcome};

/// A held lock. Release it with [`release`](LockGuard::release); dropping it (cancellation,
/// panic, early return) stops renewal at once and releases in the background.
///
/// Release is owner-checked: it never deletes a key that another owner holds now.
///
/// A guard taken inside a guarded body of the same task for the same key is *reentrant*:
/// it cost no round trip, and releasing or dropping it leaves the outer lock held.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    client: LockClient,
    names: KeyNames,
    token: String,
    fence: Option<u64>,
    lease: LeaseHandle,
    acquired_at: Instant,
    /// The lease's validity point as last known (the watchdog's, until it lets go).
    valid_until: Instant,
    released: bool,
    reentrant: bool,
}

impl LockGuard {
    pub(crate) fn new(
        client: LockClient,
        names: KeyNames,
        token: String,
        fence: Option<u64>,
        options: &LockOptions,
        sent: Instant,
    ) -> Self {
        let lease =
            client
                .watchdog()
                .register(&names.lock, &token, options.ttl, options.watchdog, sent);
        LockGuard {
            client,
            names,
            token,
            fence,
            lease,
            acquired_at: Instant::now(),
            valid_until: validity(sent, options.ttl),
            released: false,
            reentrant: false,
        }
    }

    /// A guard for a lock this task already holds: shares the outer lock's lease.
    pub(crate) fn reentrant(client: LockClient, names: KeyNames, held: &CurrentLock) -> Self {
        LockGuard {
            client,
            names,
            token: held.token().to_owned(),
            fence: held.fence(),
            lease: LeaseHandle {
                id: 0,
                lost: held.lost_receiver(),
            },
            acquired_at: Instant::now(),
            valid_until: Instant::now(),
            released: false,
            reentrant: true,
        }
    }

    /// Takes the lease off the watchdog (once: a release cut short comes here again on drop)
    /// and returns its validity point, past which a release no longer matters.
    fn stop_renewing(&mut self) -> Instant {
        let removed = self.client.watchdog().remove(self.lease.id);
        let valid_until = removed.unwrap_or(self.valid_until);
        self.valid_until = valid_until;
        valid_until
    }

    /// What a guarded body sees of this lock through [`crate::current_lock`].
    pub(crate) fn current(&self) -> CurrentLock {
        CurrentLock::new(
            self.client.id(),
            self.names.lock.clone(),
            self.token.clone(),
            self.fence,
            self.lease.lost.clone(),
        )
    }

    /// Whether this guard re-entered a lock its task already held (no Redis traffic; the
    /// outer holder releases it).
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// The Redis key of the lock (with the client's prefix, if any).
    pub fn key(&self) -> &str {
        &self.names.lock
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
        context::lost(&self.lease.lost).await
    }

    /// Releases the lock and reports what Redis had: our token (released), nothing
    /// (the lease had expired), or another owner's token (left alone).
    ///
    /// Releasing a reentrant guard does nothing and reports `Released`: the outer holder
    /// releases the lock.
    ///
    /// The release survives the cancellation of this future: dropped before Redis answered,
    /// the guard releases in the background as on any drop (releasing twice is harmless).
    /// It gives up when the lease's validity point passes, and after 2 s at most: the lease
    /// then ends by its ttl.
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        if self.reentrant {
            self.released = true;
            return Ok(ReleaseOutcome::Released);
        }
        let valid_until = self.stop_renewing();
        let reply = release_script(&self.client, &self.names, &self.token, valid_until).await;
        // Only now: until Redis answered, a drop of this future must still release.
        self.released = true;
        let outcome = match reply? {
            1 => ReleaseOutcome::Released,
            0 => ReleaseOutcome::AlreadyExpired,
            _ => ReleaseOutcome::NotOwner,
        };
        tracing::debug!(
            key = %self.names.lock,
            held_ms = self.acquired_at.elapsed().as_millis() as u64,
            ?outcome,
            "lock released"
        );
        Ok(outcome)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released || self.reentrant {
            return;
        }
        let valid_until = self.stop_renewing();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to release on: the lease ends by its ttl.
            tracing::warn!(key = %self.names.lock, "lock guard dropped outside a Tokio runtime; the lease expires by its ttl");
            return;
        };
        let client = self.client.clone();
        let names = self.names.clone();
        let token = std::mem::take(&mut self.token);
        runtime.spawn(async move {
            match release_script(&client, &names, &token, valid_until).await {
                Ok(_) => tracing::debug!(key = %names.lock, "lock released on drop"),
                Err(err) => {
                    tracing::warn!(key = %names.lock, error = %err, "release on drop failed; the lease expires by its ttl")
                }
            }
        });
    }
}
