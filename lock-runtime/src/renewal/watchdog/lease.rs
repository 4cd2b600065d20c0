//! A lease on the watchdog's schedule: what the scheduler knows of one held lock (its
//! token, ttl, renewal and validity points, its holder's lost signal and hold clock), and
//! what it does to one lease (date it, find its next event, end it when it is lost).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::hold_clock::{HoldClock, LongHold};
use crate::error::LostCause;
use crate::lease::{Token, millis, validity};
use crate::renewal::lost_signal::LostSignal;
use crate::scripts::KeyNames;
use crate::telemetry::Telemetry;

/// The most a renewal is sent before it falls due (a twelfth of its ttl, at most this), so
/// that leases due close together share a pipeline.
pub(super) const EARLY: Duration = Duration::from_millis(250);

/// The schedule's ids are the watchdog's own counter, never a caller's value: a
/// multiplicative hash spreads them at a fraction of the default hasher's cost (the
/// uncontended cycle looks its lease up twice).
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = (self.0 ^ id).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Leases by their schedule id.
pub(super) type Leases = HashMap<u64, Lease, BuildHasherDefault<IdHasher>>;

/// A held lease as the schedule keeps it.
pub(super) struct Lease {
    /// The lock's names, shared with its guard.
    pub(super) names: Arc<KeyNames>,
    pub(super) token: Token,
    pub(super) ttl: Duration,
    pub(super) renew: bool,
    pub(super) next_renewal: Instant,
    pub(super) valid_until: Instant,
    pub(super) in_flight: bool,
    /// The time of the lease's live entry in the timeline, if it has one.
    pub(super) entry: Option<Instant>,
    /// Waiters were queued behind this lease (it was taken after queueing, or a renewal
    /// noted it for them): the client's liveness key must live while it is held.
    pub(super) contended: bool,
    pub(super) lost: LostSignal,
    /// What the holder keeps only while its lease lives (its turn in the key's local
    /// queue): dropped when the lease is lost, before the holder is told, so the next
    /// local waiter (or the holder trying again) goes on.
    pub(super) attached: Option<Attachment>,
    /// Its current holder's clock: the end of its `max_hold`, its long-hold event.
    pub(super) hold: HoldClock,
}

/// What is kept with a lease and dropped when the lease is lost: the holder's turn.
pub(crate) type Attachment = crate::turn::Turn;

impl Lease {
    /// How early this lease's renewal may go with its neighbours'.
    pub(super) fn early(&self) -> Duration {
        (self.ttl / 12).min(EARLY)
    }

    /// Its first event once (re)dated: its renewal if it renews, and the end of its
    /// validity at the latest, or its hold's next event ([`HoldClock`]) when sooner.
    pub(super) fn first_event(&self) -> Instant {
        let look = if self.renew {
            self.next_renewal.min(self.valid_until)
        } else {
            self.valid_until
        };
        self.hold.sooner(look)
    }

    /// When the scheduler must look at this lease next: its renewal, unless one is in
    /// flight or it is not renewed, and the end of its validity at the latest, or its
    /// hold's next event when sooner.
    pub(super) fn next_look(&self) -> Instant {
        let look = if self.renew && !self.in_flight {
            self.next_renewal.min(self.valid_until)
        } else {
            self.valid_until
        };
        self.hold.sooner(look)
    }

    /// Moves the validity point, and tells the holder's signal, which judges the lease by
    /// the clock too (see `lost_signal.rs`).
    pub(super) fn set_valid_until(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.lost.valid_until(valid_until, self.renew);
    }

    /// Re-dates the lease from an owner-checked command sent at `sent` that set its expiry
    /// to `ttl`.
    pub(super) fn redate(&mut self, ttl: Duration, sent: Instant) {
        self.ttl = ttl;
        self.set_valid_until(validity(sent, ttl));
        self.next_renewal = sent + ttl / 3;
    }

    /// Ends a lease taken off the schedule because it is lost (or, watchdog off, reached
    /// its ttl): frees its holder's turn first, then reports the loss, and only then tells
    /// the holder. A task woken by the loss may try the key again at once, and must not
    /// find its own old turn still taken. Called outside the state's lock, so that the
    /// woken holder never waits on it.
    pub(super) fn end(mut self, cause: LostCause, telemetry: &Telemetry) {
        drop(self.attached.take());
        let (key, token) = (self.names.lock(), &*self.token);
        match cause {
            LostCause::Expired => tracing::debug!(key, token = %token, "lease reached its ttl"),
            LostCause::MaxHold => {
                self.warn_max_hold();
                telemetry.lost(key, cause);
            }
            LostCause::TokenGone => {
                tracing::warn!(key, token = %token, "lock lost: the token is gone from Redis");
                telemetry.lost(key, cause);
            }
            // Its WARN, naming who released it, went out already (`taken_away.rs`).
            LostCause::ForceReleased => telemetry.lost(key, cause),
            _ => {
                tracing::warn!(key, token = %token, %cause, "lock lost");
                telemetry.lost(key, cause);
            }
        }
        self.lost.set(cause);
    }

    /// Tells of a hold that reached its `max_hold`: a WARN naming the key, the token, how
    /// long it was held and the bound (a hold that outlives its bound is a bug in its
    /// holder, as a statement past PostgreSQL's `statement_timeout` is).
    pub(super) fn warn_max_hold(&self) {
        let held_ms = millis(self.hold.since.elapsed());
        let max_hold_ms = self.hold.max_hold.map_or(0, millis);
        tracing::warn!(
            key = self.names.lock(),
            token = %self.token,
            held_ms,
            max_hold_ms,
            "lock held past its max_hold: renewal stopped and the holder told it is lost"
        );
    }

    /// The long-hold event of this lease, at `now`.
    pub(super) fn long_hold(&self, now: Instant) -> LongHold {
        LongHold {
            names: self.names.clone(),
            token: self.token.clone(),
            held: now.saturating_duration_since(self.hold.since),
            last_progress: self.lost.last_progress(),
        }
    }
}

/// A lease of `ttl` on key `k`, renewed, taken at `now`.
#[cfg(test)]
pub(super) fn for_test(ttl: Duration, now: Instant) -> Lease {
    Lease {
        names: Arc::new(KeyNames::prefixed("", "k").unwrap()),
        token: "t".into(),
        ttl,
        renew: true,
        next_renewal: now + ttl / 3,
        valid_until: validity(now, ttl),
        in_flight: false,
        entry: None,
        contended: false,
        lost: LostSignal::new(),
        attached: None,
        hold: HoldClock::new(now, None, None),
    }
}
