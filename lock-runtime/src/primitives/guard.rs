//! The guard of a held lock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::context::CurrentLock;
use crate::lease::{Token, validity};
use crate::lease_parts::LeaseParts;
use crate::lock_order::OrderHold;
use crate::primitives::held_lease::HeldLease;
use crate::primitives::run_path::OneLease;
use crate::queue::cohort::{Ending, Holding};
use crate::queue::redis_queue::place::Place;
use crate::queue::redis_queue::release::{keep_until, release_contended};
use crate::queue::redis_queue::{Yielded, yield_lock};
use crate::renewal::lost_signal::LostSignal;
use crate::renewal::shutdown::Leftover;
use crate::renewal::watchdog::{LeaseHandle, Terms};
use crate::scripts::{KeyNames, Requeue};
use crate::topology::one_node::Waiters;
use crate::{error::LockError, error::LostCause, error::ReleaseOutcome, options::LockOptions};

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
    /// What every guard holds: the client, the key, the token, the lease, its validity.
    lease: HeldLease,
    fence: Option<u64>,
    /// How long the lock was held, once measured and reported (a release future dropped
    /// mid-way is followed by the drop's release: one hold, reported once).
    held: Option<Duration>,
    /// The lease's ttl and whether the watchdog renews it (the next local holder may keep
    /// them as they are).
    ttl: Duration,
    renew: bool,
    /// The key's local level: the turn, passed to the next local waiter on release.
    local: Option<Holding>,
    /// This guard took its lease off the watchdog's schedule itself (at its release): a
    /// loss its release finds is then its own to report, never the watchdog's too.
    took_off_schedule: bool,
    /// How long after `acquired_at` the key stays, however soon this hold ends
    /// ([`Lock::hold_at_least`](crate::Lock::hold_at_least); zero: released at once).
    hold_at_least: Duration,
    /// The longest this hold may last ([`Lock::max_hold`](crate::Lock::max_hold)).
    max_hold: Option<Duration>,
}

/// How a [`LockGuard`]'s lease came to it.
pub(crate) enum LeaseOrigin {
    /// Taken in Redis with the command sent at `.0` and answered at `.1` (the hold begins
    /// then): the lease goes on the watchdog.
    Taken(Instant, Instant),
    /// Passed on by another task of this process: the lease is on the watchdog already.
    Passed(LeaseHandle),
}

impl LockGuard {
    /// This guard, with its class and call site for the lock-order check.
    pub(crate) fn ordered(mut self, order: Option<Arc<OrderHold>>) -> Self {
        self.lease.order = order;
        self
    }

    /// When the hold began (the acquire's reply came).
    pub(crate) fn acquired_at(&self) -> Instant {
        self.lease.acquired_at
    }

    /// The lease's id on the watchdog's schedule.
    pub(crate) fn lease_id(&self) -> u64 {
        self.lease.handle.id
    }

    /// The guard of a lock whose lease came as `came` says; the holder's turn in the local
    /// queue goes on the watchdog with the lease (its loss lets the next local waiter on).
    pub(crate) fn new(
        parts: Arc<LeaseParts>,
        names: Arc<KeyNames>,
        token: Token,
        fence: Option<u64>,
        options: &LockOptions,
        came: LeaseOrigin,
        mut local: Option<Holding>,
    ) -> Self {
        let turn = local.as_mut().and_then(Holding::take_turn);
        let watchdog = parts.watchdog();
        let (lease, valid_until, acquired_at) = match came {
            LeaseOrigin::Taken(sent, answered) => {
                // The turn goes on the schedule with the lease (one visit of the watchdog).
                let terms = Terms::of(options);
                let lease = watchdog.register(&names, &token, terms, (sent, answered), turn);
                (lease, validity(sent, options.ttl), answered)
            }
            LeaseOrigin::Passed(lease) => {
                let valid_until = (watchdog.lease_state(lease.id))
                    .map_or_else(Instant::now, |(valid_until, _)| valid_until);
                let acquired_at = Instant::now();
                if let Some(turn) = turn {
                    watchdog.attach(lease.id, turn);
                }
                (lease, valid_until, acquired_at)
            }
        };
        LockGuard {
            lease: HeldLease::new(parts, names, token, lease, (acquired_at, valid_until)),
            fence,
            held: None,
            ttl: options.ttl,
            renew: options.watchdog,
            local,
            took_off_schedule: false,
            hold_at_least: options.hold_at_least,
            max_hold: options.max_hold,
        }
    }

    /// A guard for a lock this task already holds: shares the outer lock's lease.
    pub(crate) fn reentrant(
        parts: Arc<LeaseParts>,
        names: Arc<KeyNames>,
        held: &CurrentLock,
    ) -> Self {
        LockGuard {
            lease: HeldLease::reentrant(parts, names, held),
            fence: held.fence(),
            held: None,
            ttl: Duration::ZERO,
            renew: false,
            local: None,
            took_off_schedule: false,
            hold_at_least: Duration::ZERO,
            max_hold: None,
        }
    }

    /// Re-dates the lease after an owner-checked command sent at `sent` set the key's expiry
    /// to `ttl`, renewed from now on or not (a read-write lock's writer, which waits for the
    /// readers on a short lease, then holds the key on its own); false when the lease is no
    /// longer on the schedule. Only for a lease the watchdog does not renew meanwhile, so
    /// that no renewal with the old ttl can land after the command.
    pub(crate) fn redate(&mut self, ttl: Duration, renew: bool, sent: Instant) -> bool {
        let retake = crate::renewal::watchdog::Retake { ttl, renew, sent };
        let Some(lease) = (self.lease.parts.watchdog()).hand_over(
            self.lease.handle.id,
            Some(retake),
            self.max_hold,
        ) else {
            return false;
        };
        self.lease.handle = lease;
        self.ttl = ttl;
        self.renew = renew;
        self.lease.valid_until = validity(sent, ttl);
        true
    }

    /// What a guarded body sees of this lock through [`crate::current_lock`].
    pub(crate) fn current(&self) -> CurrentLock {
        self.lease.current(self.fence)
    }

    /// Whether this guard re-entered a lock its task already held (no Redis traffic; the
    /// outer holder releases it).
    pub fn is_reentrant(&self) -> bool {
        self.lease.reentrant
    }

    /// The Redis key of the lock (with the client's prefix, if any).
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// The token stored under the key: `lr-`, a random id of the client and a counter (never
    /// reused), and who asked for the key: when, the lease, the host, the process id, the
    /// service and the function ([`Identity`](crate::Identity) reads them back).
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The fencing token of this acquisition, when the lock was taken with fencing.
    /// Strictly greater than every earlier fence for the key.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// How long the lock has been held.
    pub fn held_for(&self) -> Duration {
        self.lease.held_for()
    }

    /// How much of the lease is left, as this process's clock knows it: until the lease's
    /// validity point (the last renewal's or extension's send time + ttl − drift). Zero once
    /// the lease is lost. A reentrant guard reports zero: its outer guard holds the lease.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// let guard = lock_runtime::Lock::new("report").ttl(Duration::from_secs(10)).acquire().await?;
    /// assert!(guard.remaining() <= Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub fn remaining(&self) -> Duration {
        if self.lease.reentrant {
            return Duration::ZERO;
        }
        self.lease
            .parts
            .watchdog()
            .lease_state(self.lease.handle.id)
            .map_or(Duration::ZERO, |(valid_until, _)| {
                valid_until.saturating_duration_since(Instant::now())
            })
    }

    /// Extends the lease to `ttl` from now, if this owner still holds the key (an
    /// owner-checked `PEXPIRE`; in Redlock mode on a majority of the masters). With the
    /// watchdog on, renewals go on with the new ttl; without it, the lease now ends `ttl`
    /// after this call. The key's expiry in Redis never shrinks: a renewal still in flight
    /// with the old ttl cannot cut the extension short, and a `ttl` shorter than what the
    /// key has left leaves the key as it is (the lease then counts from the shorter one).
    ///
    /// Errors: [`LockError::Lost`] when the token is gone (the lease was lost meanwhile),
    /// [`LockError::Config`] for a ttl outside 1 ms to [`crate::MAX_TTL`] or on a reentrant
    /// guard (its outer guard owns the lease), [`LockError::Backend`] when Redis fails,
    /// [`LockError::NotReplicated`] when grants wait for replicas and too few confirmed the
    /// extension (the lease keeps its earlier validity, or the new one if that is sooner).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// let mut guard = lock_runtime::Lock::new("import")
    ///     .ttl(Duration::from_secs(5))
    ///     .watchdog(false)
    ///     .acquire()
    ///     .await?;
    /// // ... the job turns out to need longer ...
    /// guard.extend(Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), LockError> {
        let leased = self.lease.names.clone();
        self.lease.extend(&leased, ttl).await?;
        self.ttl = ttl;
        Ok(())
    }

    /// Whether the lease has been lost, and why: told (by the watchdog, `extend`, the
    /// release or a shutdown), or past its validity point by the local clock, whenever the
    /// watchdog gets its turn.
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.lease.lost_cause()
    }

    /// Reports that the holder is making progress: one atomic store, no Redis command (see
    /// [`CurrentLock::progress`](crate::CurrentLock::progress): the next renewal carries it
    /// to Redis, for [`inspect`](crate::inspect) and the `lock held long` event).
    pub fn progress(&self) {
        self.lease.progress();
    }

    /// Whether the lease has been lost (see [`lost_cause`](Self::lost_cause)).
    pub fn is_lost(&self) -> bool {
        self.lost_cause().is_some()
    }

    /// Resolves when the lease is lost; never, while it is held.
    pub async fn lost(&self) -> LostCause {
        self.lease.lost().await
    }

    /// Releases the lock and reports what Redis had: our token (released), nothing
    /// (the lease had expired), or another owner's token (left alone).
    ///
    /// Finding nothing or another owner's token while the lease still seemed valid (no
    /// renewal had reported a loss) means the lease was lost during the hold, say to a
    /// failover: besides the outcome, that is a WARN naming the key and a loss counted as
    /// `found_at_release` (once: not again for a loss the watchdog or
    /// [`extend`](Self::extend) reported), and [`crate::current_lock`] handles taken from
    /// this guard read [`LostCause::FoundAtRelease`].
    ///
    /// Releasing a reentrant guard does nothing and reports `Released`: the outer holder
    /// releases the lock.
    ///
    /// The release survives the cancellation of this future: dropped before Redis answered,
    /// the guard releases in the background as on any drop (releasing twice is harmless).
    /// It gives up when the lease's validity point passes, and after 2 s at most: the lease
    /// then ends by its ttl.
    pub async fn release(mut self) -> Result<ReleaseOutcome, LockError> {
        if self.lease.reentrant {
            self.lease.released = true;
            return Ok(ReleaseOutcome::Released);
        }
        let Some((held, kept_until, yields)) = self.end_hold() else {
            return Ok(ReleaseOutcome::Released);
        };
        if yields {
            // In a task of its own: the other processes and this one's next task depend on
            // it, so it must not stop half-way when this future is dropped.
            let yielding = self.yield_lock();
            let yielding = self.lease.parts.runtime().spawn(yielding);
            self.lease.released = true;
            return yielding.await.unwrap_or(Ok(ReleaseOutcome::AlreadyExpired));
        }
        // No pass after this point, also when this future is dropped before Redis answers
        // (the drop then releases in the background); the turn is held until the reply.
        let (turn, valid_until, waiters) = self.begin_release();
        let reply = match kept_until {
            Some(until) => {
                keep_until(
                    self.lease.parts.reach(),
                    &self.lease.names,
                    &self.lease.token,
                    until,
                    valid_until,
                )
                .await
            }
            None => {
                release_contended(
                    self.lease.parts.reach(),
                    &self.lease.names,
                    &self.lease.token,
                    valid_until,
                    waiters,
                )
                .await
            }
        };
        // Only now: until Redis answered, a drop of this future must still release.
        self.lease.released = true;
        drop(turn);
        let outcome = outcome_of(reply?);
        self.witness(valid_until).judge(
            &self.lease.parts,
            (&self.lease.names, &self.lease.token),
            outcome,
        );
        tracing::debug!(
            key = %self.lease.names.lock(),
            token = %self.lease.token,
            held_ms = held.as_millis() as u64,
            kept_for_hold_at_least = kept_until.is_some(),
            ?outcome,
            "lock released"
        );
        Ok(outcome)
    }

    /// What this guard's release needs to tell a loss it finds (see [`Witness`]).
    fn witness(&self, valid_until: Instant) -> Witness {
        Witness {
            lost: self.lease.handle.lost.clone(),
            ours: self.took_off_schedule,
            renew: self.renew,
            valid_until,
        }
    }

    /// Reports the hold and starts its end, for [`release`](Self::release) and the drop
    /// alike: `None` when that is all (the shutdown gave the lock back, or it was passed on
    /// in this process); else how long it was held, until when the key must stay, and
    /// whether the lock is yielded to the next process (else released in Redis).
    fn end_hold(&mut self) -> Option<(Duration, Option<Instant>, bool)> {
        let held = self.report_hold();
        // The client's shutdown took this lease off the watchdog: it gives the lock back
        // itself, and counts it in its report, so this holder sends nothing (its local turn
        // is given up, and it counts as released).
        if self.lease.handle.lost.reported() == Some(LostCause::Shutdown) {
            self.lease.released = true;
            drop(self.begin_release());
            return None;
        }
        // A `hold_at_least` still ahead: the key stays in Redis until then, for every other
        // owner, in this process too, so such a hold is never passed on or yielded.
        let kept_until = Some(self.lease.acquired_at + self.hold_at_least)
            .filter(|until| !self.hold_at_least.is_zero() && *until > Instant::now());
        let ending = match (&self.local, kept_until) {
            (Some(local), None) => local.ending(
                self.lease.handle.id,
                self.lease.parts.reach().deployment().queues(),
            ),
            _ => Ending::Release,
        };
        if ending == Ending::Pass {
            self.pass();
            return None;
        }
        Some((held, kept_until, ending == Ending::Yield))
    }

    /// How long the lock was held, measured and reported once, when its holder gives it
    /// up (the call of [`release`](Self::release), or the drop): from the moment the acquire
    /// returned this guard until then, the release's round trip not included. The
    /// `lock_hold_seconds` histogram and the `held_ms` of the release's event are this one
    /// measurement.
    fn report_hold(&mut self) -> Duration {
        if let Some(held) = self.held {
            return held;
        }
        let held = self.lease.acquired_at.elapsed();
        self.held = Some(held);
        self.lease
            .parts
            .telemetry()
            .held(self.lease.names.lock(), held);
        held
    }

    /// Ends the hold for a release in Redis: takes the local level and the turn (kept until
    /// Redis answered, so the next local waiter starts after it), takes the lease off the
    /// watchdog (once: a release cut short comes here again on drop), and returns them with
    /// the lease's validity point, past which a release no longer matters, and what the
    /// release knows of the key's waiters: contended during this hold's tenure, with the
    /// foreign window it then offers Redis (which also ends the key's window schedule if
    /// nobody waits), or none.
    fn begin_release(&mut self) -> (LocalHold, Instant, Waiters) {
        let removed = self
            .lease
            .parts
            .watchdog()
            .remove_attached(self.lease.handle.id);
        self.took_off_schedule |= removed.is_some();
        let (valid_until, turn) = removed.unwrap_or((self.lease.valid_until, None));
        self.lease.valid_until = valid_until;
        let waiters = match &self.local {
            Some(local) if local.contended() => {
                Waiters::Contended(self.lease.parts.foreign_window())
            }
            _ => Waiters::NoneKnown,
        };
        ((self.local.take(), turn), valid_until, waiters)
    }

    /// Parks the lock for the next task of this process (no Redis round trip), then gives
    /// up the turn (taken back from the watchdog: gone when the lease was lost, and the
    /// next local waiter has gone on already).
    fn pass(&mut self) {
        self.lease.released = true;
        let turn = self.lease.parts.watchdog().detach(self.lease.handle.id);
        if let Some(local) = self.local.take() {
            local.pass(
                self.lease.token.clone(),
                self.lease.handle.id,
                self.ttl,
                self.renew,
            );
            tracing::debug!(key = %self.lease.names.lock(), token = %self.lease.token, "lock passed to the next local waiter");
        }
        drop(turn);
    }

    /// Gives the lock to the next process and queues this one again (its tasks still
    /// wait), or keeps it when no other process waits, or (when the key's schedule says a
    /// foreign window is due) leaves the key free for one first. Holds the turn until Redis
    /// answered.
    fn yield_lock(&mut self) -> impl Future<Output = Result<ReleaseOutcome, LockError>> + use<> {
        self.lease.released = true;
        let (parts, names, token) = (
            self.lease.parts.clone(),
            self.lease.names.clone(),
            std::mem::take(&mut self.lease.token),
        );
        let (lease, ttl, renew, local) = (
            self.lease.handle.id,
            self.ttl,
            self.renew,
            self.local.take(),
        );
        let turn = parts.watchdog().detach(lease);
        let valid_until = parts
            .watchdog()
            .lease_state(lease)
            .map_or(self.lease.valid_until, |(valid_until, _)| valid_until);
        let mut witness = self.witness(valid_until);
        async move {
            let requeue = Requeue {
                token: parts.tokens().successor(ttl, &token),
                ttl,
                window: parts.foreign_window(),
            };
            let alive = parts.liveness_key(names.lock());
            let reach = (&**parts.reach(), alive.as_deref());
            let yielded = yield_lock(reach, &names, &token, &requeue, valid_until).await;
            // The turn is given up only once the lock is parked, or the next place is.
            let Some(local) = local else {
                return yielded.map(|_| ReleaseOutcome::Released);
            };
            if let Ok(Yielded::Kept) = yielded {
                local.kept(token, lease, ttl, renew);
                return Ok(ReleaseOutcome::Released);
            }
            // Off the schedule only now: the watchdog reports a loss it finds until here.
            witness.ours = parts.watchdog().remove(lease).is_some();
            if !matches!(yielded, Ok(Yielded::Gone | Yielded::NotOwner)) {
                // Queued with the release (or perhaps, when it failed): the next local
                // waiter leads the wait with this place, or it is left.
                let place = Place::new(&parts, &names, requeue.token, true);
                local.requeued(if matches!(yielded, Ok(Yielded::Passed)) {
                    place.behind_grant()
                } else {
                    place
                });
            }
            drop(turn);
            let outcome = match yielded? {
                Yielded::Gone => ReleaseOutcome::AlreadyExpired,
                Yielded::NotOwner => ReleaseOutcome::NotOwner,
                Yielded::Passed | Yielded::Kept | Yielded::Gapped => ReleaseOutcome::Released,
            };
            witness.judge(&parts, (&names, &token), outcome);
            tracing::debug!(key = %names.lock(), token = %token, ?outcome, "lock yielded to the next process");
            Ok(outcome)
        }
    }
}

/// What a release needs to tell a loss it finds: the key gone or another owner's, while
/// the holder still believed its lease valid. A failover that promoted a replica without
/// the key, an eviction, or a `DEL` between two renewals all look like this, and without
/// this check the hold would end as a success.
struct Witness {
    /// The holder's lost signal (what `current_lock()` reads).
    lost: LostSignal,
    /// The release took the lease off the watchdog's schedule: the watchdog did not and
    /// will not report this lease, so a loss found now is the release's to report.
    ours: bool,
    /// Whether the watchdog renewed the lease.
    renew: bool,
    /// The lease's validity point, as last known.
    valid_until: Instant,
}

impl Witness {
    /// Tells the loss a release found, once: a WARN naming the key, a loss counted with
    /// [`LostCause::FoundAtRelease`], and the holder's lost signal. Nothing when the release
    /// found the token, when the loss was reported already (by the watchdog or `extend`),
    /// or when the lease, not renewed, had simply reached its ttl. Called after the turn
    /// was given up, so that whoever hears of the loss finds the key's turn free.
    fn judge(
        &self,
        parts: &LeaseParts,
        (names, token): (&KeyNames, &str),
        outcome: ReleaseOutcome,
    ) {
        if outcome == ReleaseOutcome::Released || !self.ours || self.lost.reported().is_some() {
            return;
        }
        let key = names.lock();
        if !self.renew && Instant::now() >= self.valid_until {
            tracing::debug!(key, token = %token, "lease reached its ttl");
            self.lost.set(LostCause::Expired);
            return;
        }
        let found = match outcome {
            ReleaseOutcome::NotOwner => "another owner's token",
            _ => "the key gone",
        };
        tracing::warn!(
            key,
            token = %token,
            found,
            "lock lost: its release found it taken away (a failover, an eviction or a DEL \
             during the hold); the guarded work ran without the lock for a while"
        );
        let cause = LostCause::FoundAtRelease;
        parts.telemetry().lost(key, cause);
        self.lost.set(cause);
    }
}

/// What a holder keeps of the local level until its release is answered.
type LocalHold = (
    Option<Holding>,
    Option<crate::renewal::watchdog::Attachment>,
);

/// What a release script's reply says.
pub(crate) fn outcome_of(reply: i64) -> ReleaseOutcome {
    match reply {
        1 => ReleaseOutcome::Released,
        0 => ReleaseOutcome::AlreadyExpired,
        _ => ReleaseOutcome::NotOwner,
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.lease.released || self.lease.reentrant {
            return;
        }
        let Some((held, kept_until, yields)) = self.end_hold() else {
            return;
        };
        if yields {
            let yielding = self.yield_lock();
            self.lease.parts.runtime().spawn(yielding);
            return;
        }
        // The turn goes with the release: the next local waiter starts once it is done.
        let (local, valid_until, waiters) = self.begin_release();
        let witness = self.witness(valid_until);
        let (parts, names) = (self.lease.parts.clone(), self.lease.names.clone());
        let token = std::mem::take(&mut self.lease.token);
        // Given back synchronously instead when the runtime drops it (shutting down).
        let leftover = match kept_until {
            Some(until) => Leftover::kept(&names, &token, until.into_std()),
            None => Leftover::lock(&names, &token),
        };
        let shutdown = self.lease.parts.shutdown_state().clone();
        shutdown.give_back_in_background(leftover, async move {
            let reply = match kept_until {
                Some(until) => keep_until(parts.reach(), &names, &token, until, valid_until).await,
                None => release_contended(parts.reach(), &names, &token, valid_until, waiters).await,
            };
            drop(local);
            match reply {
                Ok(reply) => {
                    let outcome = outcome_of(reply);
                    witness.judge(&parts, (&names, &token), outcome);
                    tracing::debug!(
                        key = %names.lock(),
                        token = %token,
                        held_ms = held.as_millis() as u64,
                        ?outcome,
                        "lock released on drop"
                    );
                }
                Err(err) => {
                    tracing::warn!(key = %names.lock(), error = %err.cause(), "release on drop failed; the lease expires by its ttl")
                }
            }
        });
    }
}

impl OneLease for LockGuard {
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
