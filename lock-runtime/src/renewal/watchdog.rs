//! The watchdog: one scheduler per client that renews every held lease in batches and
//! tells a holder the moment its lease is lost.
//!
//! Each lease is renewed every `ttl/3`. Leases that fall due close together go out in one
//! pipeline, so 10,000 held locks cost a handful of round trips per period, not 10,000
//! timers. The scheduler also watches each lease's validity point on the local monotonic
//! clock: a lease whose renewals failed until then, or whose token a renewal found gone,
//! is marked lost and leaves the schedule.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::LostCause;
use crate::lease::{Token, validity};
use crate::renewal::liveness::Liveness;
use crate::renewal::lost_signal::LostSignal;
use crate::replicas::Replicas;
use crate::scripts::KeyNames;
use crate::telemetry::Telemetry;

mod hold_clock;
mod lease;
mod places;
mod renewals;
mod schedule;
mod state;
mod taken_away;
mod timeline;

use hold_clock::HoldClock;
pub(crate) use lease::Attachment;
use lease::Lease;
use places::{KEEPALIVE_EVERY, QueuePlace};
use renewals::Nodes;
use schedule::{MIN_IDLE, schedule};
use state::{WatchdogShared, WatchdogState};

#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<WatchdogShared>,
    wake: Arc<Notify>,
}

/// What a lease is taken with: its ttl, whether the watchdog renews it, and the longest
/// its holder may keep it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) max_hold: Option<Duration>,
}

impl Terms {
    /// The terms `options` ask for.
    pub(crate) fn of(options: &crate::options::LockOptions) -> Self {
        Terms {
            ttl: options.ttl,
            renew: options.watchdog,
            max_hold: options.max_hold,
        }
    }
}

/// A lease re-dated for its next holder in this process: the owner-checked command that
/// set its new expiry was sent at `sent`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retake {
    pub(crate) ttl: Duration,
    pub(crate) renew: bool,
    pub(crate) sent: Instant,
}

/// A held lease as the guard sees it: its schedule id and the lost signal.
#[derive(Debug)]
pub(crate) struct LeaseHandle {
    pub(crate) id: u64,
    pub(crate) lost: LostSignal,
}

impl Watchdog {
    /// Starts the scheduler task on the current Tokio runtime (the client's own, see
    /// `client_thread.rs`). Renewals go to every one of
    /// `connections`; a lease stays valid when `quorum` of them confirm it (and, with
    /// `replicas`, when that many replicas confirm the renewal).
    ///
    /// `on_dropped` runs when the runtime drops the scheduler task before the watchdog
    /// stopped it (the runtime is shutting down, see `shutdown.rs`).
    ///
    /// With `liveness`, queue places are kept by the client's liveness key (one request per
    /// period) instead of one keep-alive call per key.
    pub(crate) fn start(
        connections: Vec<Connection>,
        quorum: usize,
        (timeout, replicas): (Option<Duration>, Option<Replicas>),
        liveness: Option<Arc<Liveness>>,
        telemetry: Telemetry,
        on_dropped: OnDropped,
    ) -> Self {
        let shared = Arc::new(WatchdogShared {
            long_hold: telemetry.long_hold(),
            state: Mutex::new(WatchdogState {
                telemetry,
                liveness: liveness.clone(),
                ..WatchdogState::default()
            }),
            stopped: AtomicBool::new(false),
            renewed: AtomicBool::new(false),
            first_renewal: Notify::new(),
        });
        let wake = Arc::new(Notify::new());
        let nodes = Nodes {
            connections,
            quorum,
            timeout,
            replicas,
            alive: liveness,
        };
        let scheduler = schedule(Arc::downgrade(&shared), wake.clone(), nodes);
        tokio::spawn(async move {
            let mut armed = WhenDropped(Some(on_dropped));
            scheduler.await;
            armed.0 = None;
        });
        Watchdog { shared, wake }
    }

    /// Puts a fresh lease (sent at `sent`, answered at `held_from`: the hold's start) on the
    /// schedule, with what is kept with it ([`attach`](Self::attach)). Without renewal it
    /// is only watched for the end of its validity (and of its `max_hold`).
    pub(crate) fn register(
        &self,
        names: &Arc<KeyNames>,
        token: &Token,
        terms: Terms,
        (sent, held_from): (Instant, Instant),
        attached: Option<Attachment>,
    ) -> LeaseHandle {
        let Terms {
            ttl,
            renew,
            max_hold,
        } = terms;
        let lost = LostSignal::new();
        let receiver = lost.clone();
        let renewal_period = ttl / 3;
        let valid_until = validity(sent, ttl);
        lost.valid_until(valid_until, renew);
        let lease = Lease {
            names: names.clone(),
            token: token.clone(),
            ttl,
            renew,
            next_renewal: sent + renewal_period,
            valid_until,
            in_flight: false,
            entry: None,
            contended: false,
            lost,
            attached,
            hold: HoldClock::new(held_from, max_hold, self.shared.long_hold),
        };
        let first_event = lease.first_event();
        let mut state = self.shared.state();
        state.next_id += 1;
        let id = state.next_id;
        // The renewal's period without a clock subtraction when it comes first.
        let period = if first_event == lease.next_renewal {
            renewal_period
        } else {
            first_event.saturating_duration_since(sent)
        }
        .max(MIN_IDLE);
        state.recent_period = Some(state.recent_period.map_or(period, |p| p.min(period)));
        state.insert_lease(id, lease);
        self.wake_for(state, first_event);
        LeaseHandle { id, lost: receiver }
    }

    /// Takes a lease off the schedule at once (release, drop, panic): no renewal follows.
    /// Returns the lease's validity point, when it was still on the schedule.
    pub(crate) fn remove(&self, id: u64) -> Option<Instant> {
        self.shared
            .state()
            .take_lease(id)
            .map(|lease| lease.valid_until)
    }

    /// [`remove`](Self::remove) and [`detach`](Self::detach) at once (a release).
    pub(crate) fn remove_attached(&self, id: u64) -> Option<(Instant, Option<Attachment>)> {
        self.shared
            .state()
            .take_lease(id)
            .map(|lease| (lease.valid_until, lease.attached))
    }

    /// Gives a lease that stays on the schedule to its next holder in this process (a local
    /// pass): the holder gets a lost signal of its own and a hold clock that starts now
    /// with its `max_hold`, and the one before it no longer hears of this lease. With
    /// `retake`, the lease was just re-dated by an owner-checked round trip sent at that
    /// instant, with that ttl and renewal (the new holder's options). `None` when the lease
    /// is no longer on the schedule (lost, or past its validity).
    pub(crate) fn hand_over(
        &self,
        id: u64,
        retake: Option<Retake>,
        max_hold: Option<Duration>,
    ) -> Option<LeaseHandle> {
        let sender = LostSignal::new();
        let receiver = sender.clone();
        let hold = HoldClock::new(Instant::now(), max_hold, self.shared.long_hold);
        let mut state = self.shared.state();
        let lease = state.leases.get_mut(&id)?;
        lease.lost = sender;
        lease.hold = hold;
        let Some(retake) = retake else {
            lease.set_valid_until(lease.valid_until);
            let first_event = lease.first_event();
            state.reschedule(id);
            self.wake_for(state, first_event);
            return Some(LeaseHandle { id, lost: receiver });
        };
        lease.renew = retake.renew;
        lease.redate(retake.ttl, retake.sent);
        let first_event = lease.first_event();
        state.reschedule(id);
        self.wake_for(state, first_event);
        Some(LeaseHandle { id, lost: receiver })
    }

    /// Keeps `value` with the lease `id` until [`detach`](Self::detach), or drops it when the
    /// lease is lost; a lease no longer on the schedule drops it at once.
    pub(crate) fn attach(&self, id: u64, value: Attachment) {
        let mut state = self.shared.state();
        if let Some(lease) = state.leases.get_mut(&id) {
            lease.attached = Some(value);
        }
    }

    /// Takes back what [`attach`](Self::attach) kept with the lease `id`, if it was not
    /// lost meanwhile.
    pub(crate) fn detach(&self, id: u64) -> Option<Attachment> {
        self.shared
            .state()
            .leases
            .get_mut(&id)
            .and_then(|lease| lease.attached.take())
    }

    /// Re-dates a lease that an owner-checked command sent at `sent` extended to `ttl`
    /// (its renewal stays as it was); false when it is no longer on the schedule.
    pub(crate) fn extend(&self, id: u64, ttl: Duration, sent: Instant) -> bool {
        let mut state = self.shared.state();
        let Some(lease) = state.leases.get_mut(&id) else {
            return false;
        };
        lease.redate(ttl, sent);
        let first_event = lease.first_event();
        state.reschedule(id);
        self.wake_for(state, first_event);
        true
    }

    /// Brings a lease's validity point forward to where an owner-checked command sent at
    /// `sent` with `ttl` put the key, when that is sooner: an extension the replicas did not
    /// confirm still took effect on the primary, and may have shortened the key's life.
    pub(crate) fn shorten(&self, id: u64, ttl: Duration, sent: Instant) {
        let mut state = self.shared.state();
        let Some(lease) = state.leases.get_mut(&id) else {
            return;
        };
        let valid_until = validity(sent, ttl);
        if valid_until >= lease.valid_until {
            return;
        }
        lease.set_valid_until(valid_until);
        lease.next_renewal = lease.next_renewal.min(sent + ttl / 3);
        state.reschedule(id);
        self.wake_for(state, valid_until);
    }

    /// A lease's validity point and ttl as the schedule knows them, while it is on it.
    pub(crate) fn lease_state(&self, id: u64) -> Option<(Instant, Duration)> {
        self.shared
            .state()
            .leases
            .get(&id)
            .map(|lease| (lease.valid_until, lease.ttl))
    }

    /// Keeps a waiter's place in a key's queue alive until [`forget_queued`](Self::forget_queued):
    /// its process renews it with the others, so a process that dies or stops loses it
    /// within one queue lease. The place was just refreshed by the waiter's own try. A lock's
    /// and a semaphore's alike, by the client's liveness key, or with `per_key` (the entry
    /// names no liveness key, or the client has none) by a keep-alive of its key.
    pub(crate) fn keep_queued(&self, names: &Arc<KeyNames>, token: &Token, per_key: bool) -> u64 {
        let now = Instant::now();
        let mut state = self.shared.state();
        state.next_id += 1;
        let id = state.next_id;
        state.queued.insert(
            id,
            QueuePlace {
                names: names.clone(),
                token: token.clone(),
                per_key,
            },
        );
        let due = *state.next_keepalive.get_or_insert(now + KEEPALIVE_EVERY);
        self.wake_for(state, due);
        id
    }

    /// Stops keeping a place alive (the waiter acquired, left or was dropped).
    pub(crate) fn forget_queued(&self, id: u64) {
        self.shared.state().queued.remove(&id);
    }

    /// Takes every lease and queue place off the schedule (shutdown): each lease's turn
    /// is let go, then its holder is told it is gone ([`LostCause::Shutdown`]). Returns
    /// them, as (names, token, whether it is a queue place), to be given back.
    pub(crate) fn drain(&self) -> Vec<(Arc<KeyNames>, Token, bool)> {
        let (leases, queued) = {
            let mut state = self.shared.state();
            (state.take_all_leases(), std::mem::take(&mut state.queued))
        };
        let mut drained = Vec::with_capacity(leases.len() + queued.len());
        for (_, mut lease) in leases {
            drop(lease.attached.take());
            lease.lost.set(LostCause::Shutdown);
            drained.push((lease.names, lease.token, false));
        }
        for (_, place) in queued {
            drained.push((place.names, place.token, true));
        }
        drained
    }

    /// Marks a lease as one that waiters queue behind (it was taken after queueing, so
    /// acquire.lua noted its holder for them): the client's liveness key lives while it does.
    pub(crate) fn mark_contended(&self, id: u64) {
        self.shared.state().note_contended(id);
    }

    /// Resolves once a lease of this client has been renewed: a hold long enough that an
    /// operator may take it away (a shorter one finds out at its first renewal).
    pub(crate) async fn first_renewal(&self) {
        self.shared.first_renewal().await;
    }

    /// An operator (`by`) took away the lock held under `token`: its lease ends now, lost
    /// with [`LostCause::ForceReleased`]; false when no lease of this client has it (it
    /// was released or lost meanwhile).
    pub(crate) fn force_released(&self, token: &str, by: &str) -> bool {
        self.shared.force_released(token, by)
    }

    /// How many leases are on the schedule.
    pub(crate) fn len(&self) -> usize {
        self.shared.state().leases.len()
    }

    pub(crate) fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Lets go of the state, then wakes the scheduler when it must look at `at` sooner
    /// than it planned: a change that needs it no sooner costs no wake-up (a thread switch).
    fn wake_for(&self, state: MutexGuard<'_, WatchdogState>, at: Instant) {
        let sooner = state.scheduled_wake.is_none_or(|scheduled| at < scheduled);
        drop(state);
        if sooner {
            self.wake.notify_one();
        }
    }
}

/// What runs when the scheduler task is dropped before it ended by itself.
pub(crate) type OnDropped = Box<dyn FnOnce() + Send>;

/// Runs its function when dropped, unless emptied first.
struct WhenDropped(Option<OnDropped>);

impl Drop for WhenDropped {
    fn drop(&mut self) {
        if let Some(on_dropped) = self.0.take() {
            on_dropped();
        }
    }
}
