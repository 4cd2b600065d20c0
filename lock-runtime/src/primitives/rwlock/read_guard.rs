//! The guard of a reader's share.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::shares::{release_in_background, release_share};
use crate::client::LockClient;
use crate::context::CurrentLock;
use crate::error::{LockError, LostCause, ReleaseOutcome};
use crate::lease::{Token, validity};
use crate::options::LockOptions;
use crate::primitives::extend::extend_guard;
use crate::renewal::watchdog::LeaseHandle;
use crate::scripts::KeyNames;

/// A reader's share of a [`RwLock`](crate::RwLock). Give it back with [`release`](ReadGuard::release);
/// dropping it (cancellation, panic, early return) stops renewal at once and gives it back
/// in the background.
///
/// The share is a lease of its own, renewed by the watchdog: [`is_lost`](Self::is_lost) and
/// [`lost`](Self::lost) say when it was lost (a writer may then hold the key).
#[derive(Debug)]
#[must_use = "dropping the guard gives the share back at once"]
pub struct ReadGuard {
    pub(super) client: LockClient,
    pub(super) names: Arc<KeyNames>,
    pub(super) share: Arc<KeyNames>,
    pub(super) token: Token,
    pub(super) lease: LeaseHandle,
    pub(super) acquired_at: Instant,
    pub(super) valid_until: Instant,
    pub(super) released: bool,
    pub(super) reentrant: bool,
}

impl ReadGuard {
    pub(super) fn new(
        client: &LockClient,
        names: &Arc<KeyNames>,
        share: Arc<KeyNames>,
        token: Token,
        options: &LockOptions,
        sent: Instant,
    ) -> Self {
        let lease =
            client
                .watchdog()
                .register(&share, &token, (options.ttl, options.watchdog), sent, None);
        ReadGuard {
            client: client.clone(),
            names: names.clone(),
            share,
            token,
            lease,
            acquired_at: Instant::now(),
            valid_until: validity(sent, options.ttl),
            released: false,
            reentrant: false,
        }
    }

    /// A share of a key this task already holds (for reading or writing).
    pub(super) fn reentrant(client: LockClient, names: Arc<KeyNames>, held: &CurrentLock) -> Self {
        ReadGuard {
            client,
            share: names.clone(),
            names,
            token: held.token().clone(),
            lease: LeaseHandle {
                id: 0,
                lost: held.lost_signal(),
            },
            acquired_at: Instant::now(),
            valid_until: Instant::now(),
            released: false,
            reentrant: true,
        }
    }

    /// The Redis key of the lock (with the client's prefix, if any).
    pub fn key(&self) -> &str {
        self.names.lock()
    }

    /// The random token of this reader's share (`lr-` and a uuid v4, never reused).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether this guard re-entered a key its task already held (no Redis traffic; the
    /// outer holder gives it back).
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// How long the share has been held.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Extends the share's lease to `ttl` from now, as [`LockGuard::extend`] does a
    /// lock's (the same errors; a reentrant guard's outer guard owns the share). A writer
    /// waits for the share until it ends.
    ///
    /// [`LockGuard::extend`]: crate::LockGuard::extend
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        extend_guard!(self, &self.share, self.reentrant, ttl).await
    }

    crate::renewal::lost_signal::loss_accessors!("the share's lease");

    /// What a guarded body sees of this share through [`crate::current_lock`].
    pub(super) fn current(&self) -> CurrentLock {
        CurrentLock::new(
            self.client.id(),
            self.names.clone(),
            self.token.clone(),
            None,
            self.lease.lost.clone(),
        )
        .read_share()
    }

    /// Takes the lease off the watchdog; its validity point as last known.
    pub(super) fn stop_renewing(&mut self) -> Instant {
        if let Some(valid_until) = self.client.watchdog().remove(self.lease.id) {
            self.valid_until = valid_until;
        }
        self.valid_until
    }

    /// Gives the share back and reports what Redis had: the share (released), nothing (its
    /// lease had expired) or, never expected, another token. The last reader to leave wakes
    /// a writer waiting for it. Finding the share gone while the lease seemed valid is a
    /// loss: WARNed, counted, and [`crate::current_lock`] handles read
    /// [`LostCause::FoundAtRelease`]. Releasing a reentrant guard does nothing.
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        if self.reentrant {
            self.released = true;
            return Ok(ReleaseOutcome::Released);
        }
        self.client
            .telemetry()
            .held(self.names.lock(), self.acquired_at.elapsed());
        let valid_until = self.stop_renewing();
        let reply = release_share(&self.client, &self.names, &self.share, &self.token).await;
        self.released = true;
        let outcome = reply?;
        self.judge(outcome, valid_until);
        Ok(outcome)
    }

    /// A share found gone at its release while its lease seemed valid was lost.
    pub(super) fn judge(&self, outcome: ReleaseOutcome, valid_until: Instant) {
        if outcome == ReleaseOutcome::Released || self.lease.lost.reported().is_some() {
            return;
        }
        if Instant::now() >= valid_until {
            self.lease.lost.set(LostCause::Expired);
            return;
        }
        tracing::warn!(key = %self.names.lock(), "read lock lost: its release found the share gone (a failover, an eviction or a DEL during the hold)");
        let cause = LostCause::FoundAtRelease;
        self.client.telemetry().lost(self.names.lock(), cause);
        self.lease.lost.set(cause);
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        if self.released || self.reentrant {
            return;
        }
        self.client
            .telemetry()
            .held(self.names.lock(), self.acquired_at.elapsed());
        self.stop_renewing();
        let token = std::mem::take(&mut self.token);
        release_in_background(&self.client, &self.names, &self.share, token, true);
    }
}

crate::primitives::run_path::held_for_one_lease!(ReadGuard, reentrant: ReadGuard::is_reentrant);
