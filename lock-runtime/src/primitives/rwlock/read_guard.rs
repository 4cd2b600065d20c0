//! The guard of a reader's share.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::shares::{release_in_background, release_share};
use crate::client::LockClient;
use crate::context::CurrentLock;
use crate::error::{LockError, LostCause, ReleaseOutcome};
use crate::lease::Token;
use crate::lease_parts::LeaseParts;
use crate::options::LockOptions;
use crate::primitives::held_lease::HeldLease;
use crate::primitives::run_path::OneLease;
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
    /// What every guard holds; its key is the lock's, its lease keeps the share.
    pub(super) lease: HeldLease,
    /// The key of this reader's share, which the lease keeps.
    pub(super) share: Arc<KeyNames>,
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
        let terms = crate::renewal::watchdog::Terms::of(options);
        let lease = HeldLease::registered(client.parts(), (names, &share), token, terms, sent);
        ReadGuard { lease, share }
    }

    /// A share of a key this task already holds (for reading or writing).
    pub(super) fn reentrant(
        parts: Arc<LeaseParts>,
        names: Arc<KeyNames>,
        held: &CurrentLock,
    ) -> Self {
        ReadGuard {
            share: names.clone(),
            lease: HeldLease::reentrant(parts, names, held),
        }
    }

    /// The Redis key of the lock (with the client's prefix, if any).
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// The token of this reader's share (never reused; it names the process that holds the
    /// share, see [`Identity`](crate::Identity)).
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// Whether this guard re-entered a key its task already held (no Redis traffic; the
    /// outer holder gives it back).
    pub fn is_reentrant(&self) -> bool {
        self.lease.reentrant
    }

    /// How long the share has been held.
    pub fn held_for(&self) -> Duration {
        self.lease.held_for()
    }

    /// Extends the share's lease to `ttl` from now, as [`LockGuard::extend`] does a
    /// lock's (the same errors; a reentrant guard's outer guard owns the share). A writer
    /// waits for the share until it ends.
    ///
    /// [`LockGuard::extend`]: crate::LockGuard::extend
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        self.lease.extend(&self.share, ttl).await
    }

    /// Whether the share's lease has been lost, and why: told (by the watchdog, `extend`,
    /// the release or a shutdown), or past its validity point by the local clock, whenever
    /// the watchdog gets its turn.
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.lease.lost_cause()
    }

    /// Reports that the holder is making progress: one atomic store, no Redis command (see
    /// [`CurrentLock::progress`](crate::CurrentLock::progress): the next renewal carries it
    /// to Redis, for [`inspect`](crate::inspect) and the `lock held long` event).
    pub fn progress(&self) {
        self.lease.progress();
    }

    /// Whether the share's lease has been lost (see [`lost_cause`](Self::lost_cause)).
    pub fn is_lost(&self) -> bool {
        self.lost_cause().is_some()
    }

    /// Resolves when the share's lease is lost; never, while it is held.
    pub async fn lost(&self) -> LostCause {
        self.lease.lost().await
    }

    /// What a guarded body sees of this share through [`crate::current_lock`].
    pub(super) fn current(&self) -> CurrentLock {
        self.lease.current(None).read_share()
    }

    /// Takes the lease off the watchdog; its validity point as last known.
    pub(super) fn stop_renewing(&mut self) -> Instant {
        self.lease.stop_renewing()
    }

    /// Gives the share back and reports what Redis had: the share (released), nothing (its
    /// lease had expired) or, never expected, another token. The last reader to leave wakes
    /// a writer waiting for it. Finding the share gone while the lease seemed valid is a
    /// loss: WARNed, counted, and [`crate::current_lock`] handles read
    /// [`LostCause::FoundAtRelease`]. Releasing a reentrant guard does nothing.
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        if self.lease.reentrant {
            self.lease.released = true;
            return Ok(ReleaseOutcome::Released);
        }
        self.lease
            .parts
            .telemetry()
            .held(self.lease.names.lock(), self.lease.acquired_at.elapsed());
        let valid_until = self.stop_renewing();
        let reply = release_share(
            &self.lease.parts,
            &self.lease.names,
            &self.share,
            &self.lease.token,
        )
        .await;
        self.lease.released = true;
        let outcome = reply?;
        self.judge(outcome, valid_until);
        Ok(outcome)
    }

    /// A share found gone at its release while its lease seemed valid was lost.
    pub(super) fn judge(&self, outcome: ReleaseOutcome, valid_until: Instant) {
        if outcome == ReleaseOutcome::Released || self.lease.handle.lost.reported().is_some() {
            return;
        }
        if Instant::now() >= valid_until {
            self.lease.handle.lost.set(LostCause::Expired);
            return;
        }
        tracing::warn!(key = %self.lease.names.lock(), token = %self.lease.token, "read lock lost: its release found the share gone (a failover, an eviction or a DEL during the hold)");
        let cause = LostCause::FoundAtRelease;
        self.lease
            .parts
            .telemetry()
            .lost(self.lease.names.lock(), cause);
        self.lease.handle.lost.set(cause);
    }
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        if self.lease.released || self.lease.reentrant {
            return;
        }
        self.lease
            .parts
            .telemetry()
            .held(self.lease.names.lock(), self.lease.acquired_at.elapsed());
        self.stop_renewing();
        let token = std::mem::take(&mut self.lease.token);
        release_in_background(
            &self.lease.parts,
            &self.lease.names,
            &self.share,
            token,
            true,
        );
    }
}

impl OneLease for ReadGuard {
    fn held_lease(&self) -> &HeldLease {
        &self.lease
    }

    fn current_lock(&self) -> CurrentLock {
        self.current()
    }

    fn give_back(self) -> impl Future<Output = Result<ReleaseOutcome, LockError>> {
        self.release()
    }
}
