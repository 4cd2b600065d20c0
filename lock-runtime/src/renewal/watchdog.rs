//! The watchdog: one scheduler per client that renews every held lease in batches and
//! tells a holder the moment its lease is lost.
//!
//! Each lease is renewed every `ttl/3`. Leases that fall due close together go out in one
//! pipeline, so 10,000 held locks cost a handful of round trips per period, not 10,000
//! timers. The scheduler also watches each lease's validity point on the local monotonic
//! clock: a lease whose renewals failed until then, or whose token a renewal found gone,
//! is marked lost and leaves the schedule.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::LostCause;
use crate::lease::{Token, millis, validity};
use crate::renewal::liveness::Liveness;
use crate::renewal::lost_signal::LostSignal;
use crate::replicas::Replicas;
use crate::scripts::{KeyNames, QUEUE_LEASE, invoke};
use crate::telemetry::Telemetry;

mod hold_clock;
mod renewals;
mod schedule;
mod taken_away;
mod timeline;
use schedule::schedule;

/// The longest the scheduler sleeps when nothing is scheduled (a registration that needs it
/// sooner wakes it).
const IDLE: Duration = Duration::from_secs(3600);

/// The shortest idle look-again period, so that a tiny ttl cannot make the scheduler spin.
const MIN_IDLE: Duration = Duration::from_millis(1);

/// A renewal that failed with an error is retried after this share of the ttl.
const RETRY_DIVISOR: u32 = 10;

#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<WatchdogShared>,
    wake: Arc<Notify>,
}

/// Where renewals go: every node (one in single mode), and how many must confirm.
#[derive(Clone)]
struct Nodes {
    connections: Vec<Connection>,
    quorum: usize,
    /// Per-node time limit on a renewal pipeline (Redlock mode).
    timeout: Option<Duration>,
    /// How many replicas must confirm a renewal (its pipeline ends with their `WAIT`).
    replicas: Option<Replicas>,
    /// The client's liveness key, named by renewals of contended keys (see
    /// [`crate::renewal::liveness`]); `None` where queue places are kept per key.
    alive: Option<Arc<Liveness>>,
}

struct WatchdogShared {
    state: Mutex<WatchdogState>,
    stopped: AtomicBool,
    /// When a hold counts as long ([`Config::log_long_holds`](crate::Config::log_long_holds)).
    long_hold: Option<Duration>,
    /// Set at the first lease renewed (see [`taken_away`]), and its wake-up.
    renewed: AtomicBool,
    first_renewal: Notify,
}

/// The schedule's ids are the watchdog's own counter, never a caller's value: a
/// multiplicative hash spreads them at a fraction of the default hasher's cost (the
/// uncontended cycle looks its lease up twice).
#[derive(Default)]
struct IdHasher(u64);

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
type Leases = HashMap<u64, Lease, BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct WatchdogState {
    next_id: u64,
    leases: Leases,
    /// When each lease must be looked at next (see `timeline.rs`).
    timeline: timeline::Timeline,
    /// How many leases on the schedule are [`Lease::contended`].
    contended: usize,
    /// Queue places this process keeps alive (its waiters), by id.
    queued: HashMap<u64, QueuePlace>,
    /// When the queue places are kept alive next (`None`: no place is kept).
    next_keepalive: Option<Instant>,
    /// Where lost leases and failed renewals are reported.
    telemetry: Telemetry,
    /// When the scheduler will look at the schedule next (`None`: it has not yet). A new
    /// lease wakes it only when it needs it sooner, so an acquire does not cost a wake-up
    /// of the scheduler task (a thread switch) in the common case.
    scheduled_wake: Option<Instant>,
    /// The shortest time from an acquire to its lease's first event among the leases
    /// registered since the scheduler last looked.
    recent_period: Option<Duration>,
    /// How long the scheduler last slept with nothing scheduled.
    idle_period: Duration,
    /// The client's liveness key: kept alive by one request per period while the client
    /// holds or waits (instead of one keep-alive per key), see [`crate::renewal::liveness`].
    liveness: Option<Arc<Liveness>>,
}

struct Lease {
    /// The lock's names, shared with its guard.
    names: Arc<KeyNames>,
    token: Token,
    ttl: Duration,
    renew: bool,
    next_renewal: Instant,
    valid_until: Instant,
    in_flight: bool,
    /// The time of the lease's live entry in the timeline, if it has one.
    entry: Option<Instant>,
    /// Waiters were queued behind this lease (it was taken after queueing, or a renewal
    /// noted it for them): the client's liveness key must live while it is held.
    contended: bool,
    lost: LostSignal,
    /// What the holder keeps only while its lease lives (its turn in the key's local
    /// queue): dropped when the lease is lost, before the holder is told, so the next
    /// local waiter (or the holder trying again) goes on.
    attached: Option<Attachment>,
    /// Its current holder's clock: the end of its `max_hold`, its long-hold event.
    hold: hold_clock::HoldClock,
}

/// What is kept with a lease and dropped when the lease is lost: the holder's turn.
pub(crate) type Attachment = crate::turn::Turn;

/// A waiter's place in a key's queue, kept alive while the waiter waits.
struct QueuePlace {
    names: Arc<KeyNames>,
    token: Token,
    /// Kept by a keep-alive of its key even where the client has a liveness key: its entry
    /// names none and lives by its deadline (cluster mode before the slot map was read,
    /// see [`crate::renewal::liveness::Liveness::key_for`]).
    per_key: bool,
}

/// One keep-alive call: a key's queue and the places this process keeps in it.
struct KeepAlive {
    names: Arc<KeyNames>,
    tokens: Vec<Token>,
}

/// How often queue places are kept alive: three times per queue lease, so that one lost
/// or late keep-alive does not cost a live waiter its place.
const KEEPALIVE_EVERY: Duration = Duration::from_millis(QUEUE_LEASE.as_millis() as u64 / 3);

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

#[derive(Clone)]
struct Renewal {
    id: u64,
    names: Arc<KeyNames>,
    token: Token,
    ttl: Duration,
    /// How long before the renewal was sent its holder last reported progress (`None`:
    /// not during this hold), recorded with it in Redis.
    progress_ago: Option<Duration>,
    /// Waiters queue behind the lease (its take after a wait recorded when the hold
    /// began): its renewals keep the hold record.
    contended: bool,
}

impl WatchdogShared {
    fn state(&self) -> MutexGuard<'_, WatchdogState> {
        // A panic while holding this lock cannot leave the map half-updated in a way that
        // matters (every update is a single insert, remove or field store), so poisoning
        // is ignored rather than turned into a panic of our own.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
            hold: hold_clock::HoldClock::new(held_from, max_hold, self.shared.long_hold),
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
        let hold = hold_clock::HoldClock::new(Instant::now(), max_hold, self.shared.long_hold);
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

#[cfg(test)]
mod tests {
    use super::renewals::Keys;
    use super::schedule::collect_due;
    use super::*;

    pub(super) fn lease(ttl: Duration, now: Instant) -> Lease {
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
            hold: hold_clock::HoldClock::new(now, None, None),
        }
    }

    /// A queue place of `token` in the queue of `names` (`per_key` false).
    fn place(names: &Arc<KeyNames>, token: &str) -> QueuePlace {
        QueuePlace {
            names: names.clone(),
            token: Token::from(token),
            per_key: false,
        }
    }

    #[test]
    fn an_idle_scheduler_looks_again_after_the_recent_renewal_interval_then_backs_off() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        // Never used: the long idle sleep.
        assert_eq!(collect_due(&mut state, now).next_wake, now + IDLE);
        // A 3 s lease came and went before the scheduler looked: it looks again after 1 s,
        // so the next such lease (due no sooner) need not wake it.
        state.recent_period = Some(Duration::from_secs(1));
        assert_eq!(
            collect_due(&mut state, now).next_wake,
            now + Duration::from_secs(1)
        );
        // No lease since: the look-again period doubles.
        assert_eq!(
            collect_due(&mut state, now).next_wake,
            now + Duration::from_secs(2)
        );
        assert_eq!(
            collect_due(&mut state, now).next_wake,
            now + Duration::from_secs(4)
        );
    }

    #[test]
    fn queue_places_are_kept_alive_a_third_of_a_queue_lease_apart() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        let names = Arc::new(KeyNames::prefixed("", "k").unwrap());
        for token in ["a", "b"] {
            state.next_id += 1;
            let id = state.next_id;
            state.queued.insert(id, place(&names, token));
        }
        // Due at once (never kept yet): one call for the key, with both places.
        let due = collect_due(&mut state, now);
        let (next, places) = (due.next_wake, due.places);
        assert_eq!(places.len(), 1);
        assert_eq!(places[0].tokens.len(), 2);
        assert_eq!(next, now + KEEPALIVE_EVERY);
        // Not again before its time; then again.
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY / 2)
                .places
                .is_empty()
        );
        assert_eq!(
            collect_due(&mut state, now + KEEPALIVE_EVERY).places.len(),
            1
        );
        // No place left: nothing to keep, and the scheduler may idle.
        state.queued.clear();
        let due = collect_due(&mut state, now + KEEPALIVE_EVERY * 2);
        let (next, places) = (due.next_wake, due.places);
        assert!(places.is_empty());
        assert!(next > now + KEEPALIVE_EVERY * 3);
    }

    #[test]
    fn with_a_liveness_key_places_cost_one_refresh_per_period_and_uncontended_leases_none() {
        let now = Instant::now();
        let liveness = Liveness::new();
        let mut state = WatchdogState {
            liveness: Some(liveness.clone()),
            ..WatchdogState::default()
        };
        // An uncontended lease renewed by the watchdog: nothing to refresh.
        state.insert_lease(1, lease(Duration::from_secs(3), now));
        let due = collect_due(&mut state, now);
        assert!(due.refresh.is_none() && due.places.is_empty());
        // A thousand places on a thousand keys: one refresh, no per-key keep-alive.
        for index in 0..1_000u64 {
            let names = Arc::new(KeyNames::prefixed("", &format!("k{index}")).unwrap());
            state
                .queued
                .insert(100 + index, place(&names, &format!("t{index}")));
        }
        let due = collect_due(&mut state, now);
        assert!(due.refresh.is_some());
        assert!(due.places.is_empty());
        assert!(due.next_wake <= now + KEEPALIVE_EVERY);
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY / 2)
                .refresh
                .is_none()
        );
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY)
                .refresh
                .is_some()
        );
        // The places gone, a lease that waiters queue behind still keeps the key.
        state.queued.clear();
        state.note_contended(1);
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY * 2)
                .refresh
                .is_some()
        );
        state.leases.clear();
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY * 3)
                .refresh
                .is_none()
        );
    }

    #[test]
    fn a_batch_names_its_first_keys_and_counts_the_rest() {
        let renewal = |key: &str| Renewal {
            id: 0,
            names: Arc::new(KeyNames::prefixed("", key).unwrap()),
            token: "t".into(),
            ttl: Duration::from_secs(3),
            progress_ago: None,
            contended: false,
        };
        assert_eq!(Keys(&[renewal("a")]).to_string(), "a");
        let many: Vec<Renewal> = (0..10).map(|i| renewal(&format!("k{i}"))).collect();
        assert_eq!(
            Keys(&many).to_string(),
            "k0, k1, k2, k3, k4, k5, k6, k7 and 2 more"
        );
    }

    #[test]
    fn a_held_lease_sets_the_next_look_at_its_renewal() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        state.insert_lease(1, lease(Duration::from_secs(3), now));
        let due = collect_due(&mut state, now);
        let (batch, next) = (due.batch, due.next_wake);
        assert!(batch.is_empty());
        assert_eq!(next, now + Duration::from_secs(1));
    }
}
