//! The lease every guard holds: a lock's ([`LockGuard`](crate::LockGuard)), a reader's
//! share ([`ReadGuard`](crate::ReadGuard)) and a permit
//! ([`SemaphoreGuard`](crate::SemaphoreGuard)). One struct keeps what they all keep (the
//! parts of the client a lease uses, the key, the token, the lease on the watchdog's
//! schedule with its lost signal, when the hold began, its validity point, whether it was
//! given back, whether it re-entered an outer hold of the task) and does what they all do
//! with it (the getters, the loss accessors, `extend`, what a guarded body sees); each
//! guard adds only its own.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::context::CurrentLock;
use crate::error::{LockError, LostCause};
use crate::lease::{Token, validity};
use crate::lease_parts::LeaseParts;
use crate::lock_order::OrderHold;
use crate::options::MAX_TTL;
use crate::queue::redis_queue::release::{Expiry, extend_lease};
use crate::renewal::watchdog::{LeaseHandle, Terms};
use crate::scripts::KeyNames;
use crate::telemetry::Live;

/// A held lease, as every guard holds it.
#[derive(Debug)]
pub(crate) struct HeldLease {
    /// What it keeps of its client.
    pub(crate) parts: Arc<LeaseParts>,
    /// The key the application named (with the client's prefix).
    pub(crate) names: Arc<KeyNames>,
    pub(crate) token: Token,
    /// The lease's place on the watchdog's schedule, and its lost signal.
    pub(crate) handle: LeaseHandle,
    /// When the hold began.
    pub(crate) acquired_at: Instant,
    /// The lease's validity point as last known (the watchdog's, until it lets go).
    pub(crate) valid_until: Instant,
    /// Given back (or passed on): the drop has nothing left to do.
    pub(crate) released: bool,
    /// Re-entered: an outer guard of this task owns the lease (no Redis traffic here).
    pub(crate) reentrant: bool,
    /// Its class and call site, for the lock-order check (none: the check is off).
    pub(crate) order: Option<Arc<OrderHold>>,
    /// The hold on the live gauges, counted until the lease is dropped (not a reentrant
    /// guard's: its outer guard's hold counts).
    _live: Live,
}

impl HeldLease {
    /// A lease this guard holds itself: on the watchdog's schedule as `handle`, taken at
    /// `acquired_at`, valid until `valid_until`.
    ///
    /// Always inlined: built in place in its guard on the uncontended path, not built in a
    /// call of its own and copied.
    #[inline(always)]
    pub(crate) fn new(
        parts: Arc<LeaseParts>,
        names: Arc<KeyNames>,
        token: Token,
        handle: LeaseHandle,
        (acquired_at, valid_until): (Instant, Instant),
    ) -> Self {
        let live = (parts.telemetry()).hold_started(&names, acquired_at.into_std());
        HeldLease {
            parts,
            names,
            token,
            handle,
            acquired_at,
            valid_until,
            released: false,
            reentrant: false,
            order: None,
            _live: live,
        }
    }

    /// The lease `outer` (this task's hold of the same key) owns, as a reentrant guard
    /// sees it: its token and lost signal, on no schedule of its own.
    pub(crate) fn reentrant(
        parts: Arc<LeaseParts>,
        names: Arc<KeyNames>,
        outer: &CurrentLock,
    ) -> Self {
        let handle = LeaseHandle {
            id: 0,
            lost: outer.lost_signal(),
        };
        let now = Instant::now();
        HeldLease {
            parts,
            names,
            token: outer.token().clone(),
            handle,
            acquired_at: now,
            valid_until: now,
            released: false,
            reentrant: true,
            order: None,
            _live: Live::none(),
        }
    }

    /// A lease just taken with the command sent at `sent`, put on the watchdog's schedule:
    /// `leased` is the key the lease keeps (the lock's, a reader's share, the semaphore's),
    /// renewed (or not) and bounded as `terms` say.
    pub(crate) fn registered(
        parts: &Arc<LeaseParts>,
        (names, leased): (&Arc<KeyNames>, &Arc<KeyNames>),
        token: Token,
        terms: Terms,
        sent: Instant,
    ) -> Self {
        let now = Instant::now();
        let handle = (parts.watchdog()).register(leased, &token, terms, (sent, now), None);
        let valid_until = validity(sent, terms.ttl);
        let times = (now, valid_until);
        HeldLease::new(parts.clone(), names.clone(), token, handle, times)
    }

    /// The Redis key (with the client's prefix, if any).
    pub(crate) fn key(&self) -> &str {
        self.names.lock()
    }

    /// How long the hold has lasted.
    pub(crate) fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// Whether the lease has been lost, and why (see the guards' `lost_cause`).
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        self.handle.lost.cause()
    }

    /// Reports the holder's progress (see [`CurrentLock::progress`]).
    pub(crate) fn progress(&self) {
        self.handle.lost.progress();
    }

    /// Resolves when the lease is lost.
    pub(crate) async fn lost(&self) -> LostCause {
        self.handle.lost.lost().await
    }

    /// What a guarded body sees of this hold through [`crate::current_lock`], with the
    /// hold's fence.
    pub(crate) fn current(&self, fence: Option<u64>) -> CurrentLock {
        CurrentLock::new(
            self.parts.id(),
            self.names.clone(),
            self.token.clone(),
            fence,
            self.handle.lost.clone(),
            self.order.clone(),
        )
    }

    /// Takes the lease off the watchdog; its validity point as last known.
    pub(crate) fn stop_renewing(&mut self) -> Instant {
        if let Some(valid_until) = self.parts.watchdog().remove(self.handle.id) {
            self.valid_until = valid_until;
        }
        self.valid_until
    }

    /// Extends the lease, which keeps `leased`, to `ttl` from now (the key's expiry in
    /// Redis never shrinks) and moves the validity point; see
    /// [`LockGuard::extend`](crate::LockGuard::extend) for the errors.
    pub(crate) async fn extend(
        &mut self,
        leased: &KeyNames,
        ttl: Duration,
    ) -> Result<(), LockError> {
        if self.reentrant || ttl < Duration::from_millis(1) || ttl > MAX_TTL {
            return Err(LockError::config(format!(
                "cannot extend lock `{}` to {ttl:?}: {}",
                self.key(),
                if self.reentrant {
                    "this guard re-entered a lock its task already holds; extend the outer guard"
                } else {
                    "give a ttl from 1 ms to 365 days"
                }
            )));
        }
        if self.handle.lost.reported() == Some(LostCause::MaxHold) {
            // The hold is over: an extension must not keep the key past its bound.
            return Err(LockError::Lost {
                key: self.key().to_owned(),
                cause: LostCause::MaxHold,
            });
        }
        let sent = Instant::now();
        let watchdog = self.parts.watchdog();
        let grow = (ttl, Expiry::Grow);
        let extended = match extend_lease(self.parts.reach(), leased, &self.token, grow).await {
            Err(err @ (LockError::NotReplicated { .. } | LockError::NotDurable { .. })) => {
                // Not counted, but the primary took it: a shorter ttl holds from now on.
                watchdog.shorten(self.handle.id, ttl, sent);
                self.valid_until = self.valid_until.min(validity(sent, ttl));
                return Err(err);
            }
            extended => extended?,
        };
        if !extended || !watchdog.extend(self.handle.id, ttl, sent) {
            self.found_lost();
            return Err(LockError::Lost {
                key: self.key().to_owned(),
                cause: LostCause::TokenGone,
            });
        }
        self.valid_until = validity(sent, ttl);
        Ok(())
    }

    /// Counts the loss an extension found, once: not when the watchdog reported this lease
    /// lost already, and the lease leaves the watchdog's schedule so that its next renewal
    /// does not report it again. The guard reads as lost from now on.
    fn found_lost(&self) {
        let on_schedule = self.parts.watchdog().remove(self.handle.id).is_some();
        let reported = matches!(
            self.handle.lost.reported(),
            Some(LostCause::TokenGone | LostCause::RenewalFailed)
        );
        if on_schedule || !reported {
            tracing::warn!(key = %self.key(), token = %self.token, "lock lost: extending found the token gone");
            let cause = LostCause::TokenGone;
            self.parts.telemetry().lost(self.key(), cause);
            self.handle.lost.set(cause);
        }
    }
}
