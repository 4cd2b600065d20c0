//! A held permit of a semaphore: its lease (on the semaphore's key, or on its slot across
//! independent masters), extended, released, given back on drop.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::context::CurrentLock;
use crate::error::{LockError, LostCause, ReleaseOutcome};
use crate::lease::Token;
use crate::lock_order::OrderHold;
use crate::options::LockOptions;
use crate::primitives::held_lease::HeldLease;
use crate::primitives::run_path::OneLease;
use crate::queue::redis_queue::release::release_script;
use crate::renewal::shutdown::Leftover;
use crate::scripts::KeyNames;

/// A held permit of a [`Semaphore`](crate::Semaphore). Release it with [`release`](SemaphoreGuard::release);
/// dropping it (cancellation, panic, early return) stops renewal at once and gives the
/// permit back in the background.
#[derive(Debug)]
#[must_use = "dropping the guard gives the permit back at once"]
pub struct SemaphoreGuard {
    /// What every guard holds: the permit's lease, named by the semaphore's key.
    lease: HeldLease,
    /// The key the lease keeps: the semaphore's key on one node, the permit's slot on
    /// independent masters.
    leased: Arc<KeyNames>,
    permits: u32,
}

impl SemaphoreGuard {
    /// The guard of a permit just taken with the command sent at `sent`: its lease goes on
    /// the watchdog.
    pub(crate) fn new(
        client: &LockClient,
        (names, leased): (Arc<KeyNames>, Arc<KeyNames>),
        token: Token,
        (options, permits): (&LockOptions, u32),
        sent: Instant,
    ) -> Self {
        let terms = crate::renewal::watchdog::Terms::of(options);
        SemaphoreGuard {
            lease: HeldLease::registered(client.parts(), (&names, &leased), token, terms, sent),
            leased,
            permits,
        }
    }

    /// The guard with its hold's class and call site, for the lock-order check.
    pub(crate) fn ordered(mut self, order: Option<Arc<OrderHold>>) -> Self {
        self.lease.order = order;
        self
    }

    /// The Redis key of the semaphore (with the client's prefix, if any).
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// This permit's token (`permit:` and a token as a lock's, never reused): its member in
    /// the key (in Redlock mode, the lock token alone: the value of the permit's slot key).
    /// It names the process that holds the permit ([`Identity`](crate::Identity)).
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// How many holders the key admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// How long the permit has been held.
    pub fn held_for(&self) -> Duration {
        self.lease.held_for()
    }

    /// Extends the permit's lease to `ttl` from now, as [`LockGuard::extend`] does a
    /// lock's (the same errors): the permit stays taken until it ends.
    ///
    /// [`LockGuard::extend`]: crate::LockGuard::extend
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        let leased = self.leased.clone();
        self.lease.extend(&leased, ttl).await
    }

    /// Whether the permit's lease has been lost, and why: told (by the watchdog, `extend`,
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

    /// Whether the permit's lease has been lost (see [`lost_cause`](Self::lost_cause)).
    pub fn is_lost(&self) -> bool {
        self.lost_cause().is_some()
    }

    /// Resolves when the permit's lease is lost; never, while it is held.
    pub async fn lost(&self) -> LostCause {
        self.lease.lost().await
    }

    /// What a guarded body sees of this permit through [`crate::current_lock`].
    fn current(&self) -> CurrentLock {
        self.lease.current(None)
    }

    /// Gives the permit back and wakes the waiter it is for: `Released`, or
    /// `AlreadyExpired` when its lease had ended (it was lost: a WARN and a counted loss,
    /// [`LostCause::FoundAtRelease`], unless the watchdog reported it already).
    ///
    /// Survives the cancellation of this future: dropped before Redis answered, the guard
    /// gives the permit back in the background. Gives up when the lease's validity point
    /// passes, and after 2 s at most: the permit then ends by its ttl.
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        let valid_until = self.stop_renewing();
        self.lease
            .parts
            .telemetry()
            .held(self.lease.names.lock(), self.lease.acquired_at.elapsed());
        let reply = release_script(
            self.lease.parts.reach(),
            &self.leased,
            &self.lease.token,
            valid_until,
        )
        .await;
        // Only now: until Redis answered, a drop of this future must still give it back.
        self.lease.released = true;
        if reply? == 1 {
            return Ok(ReleaseOutcome::Released);
        }
        if self.lease.handle.lost.reported().is_none() {
            let cause = LostCause::FoundAtRelease;
            tracing::warn!(key = %self.lease.names.lock(), token = %self.lease.token, %cause, "permit lost");
            self.lease
                .parts
                .telemetry()
                .lost(self.lease.names.lock(), cause);
            self.lease.handle.lost.set(cause);
        }
        Ok(ReleaseOutcome::AlreadyExpired)
    }

    /// Takes the lease off the watchdog and returns its validity point.
    fn stop_renewing(&mut self) -> Instant {
        self.lease.stop_renewing()
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if self.lease.released {
            return;
        }
        self.lease.released = true;
        let valid_until = self.stop_renewing();
        let (parts, names, token) = (
            self.lease.parts.clone(),
            self.leased.clone(),
            self.lease.token.clone(),
        );
        let leftover = Leftover::lock(&names, &token);
        let shutdown = parts.shutdown_state().clone();
        shutdown.give_back_in_background(leftover, async move {
            if let Err(err) = release_script(parts.reach(), &names, &token, valid_until).await {
                tracing::warn!(key = %names.lock(), error = %err.cause(), "giving the permit back failed; it ends by its ttl");
            }
        });
    }
}

impl OneLease for SemaphoreGuard {
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
