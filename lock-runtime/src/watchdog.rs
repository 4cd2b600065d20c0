//! The watchdog: one scheduler per client that renews every held lease in batches and
//! tells a holder the moment its lease is lost.
//!
//! Each lease is renewed every `ttl/3`. Leases that fall due close together go out in one
//! pipeline, so 10,000 held locks cost a handful of round trips per period, not 10,000
//! timers. The scheduler also watches each lease's validity point on the local monotonic
//! clock: a lease whose renewals failed until then, or whose token a renewal found gone,
//! is marked lost and leaves the schedule.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::LostCause;
use crate::lease::{Token, millis, validity};
use crate::liveness::Liveness;
use crate::lost_signal::LostSignal;
use crate::replicas::Replicas;
use crate::scripts::{Call, GROW_ONLY, KEEPALIVE, KeyNames, QUEUE_LEASE, RENEW, invoke};
use crate::telemetry::Telemetry;

/// The longest the scheduler sleeps when nothing is scheduled (a registration that needs it
/// sooner wakes it).
const IDLE: Duration = Duration::from_secs(3600);

/// The shortest idle look-again period, so that a tiny ttl cannot make the scheduler spin.
const MIN_IDLE: Duration = Duration::from_millis(1);

/// A renewal that failed with an error is retried after this share of the ttl.
const RETRY_DIVISOR: u32 = 10;

#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
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
    /// [`crate::liveness`]); `None` where queue places are kept per key.
    alive: Option<Arc<Liveness>>,
}

struct Shared {
    state: Mutex<State>,
    stopped: AtomicBool,
}

#[derive(Default)]
struct State {
    next_id: u64,
    leases: HashMap<u64, Lease>,
    /// Queue places this process keeps alive (its waiters), by id.
    queued: HashMap<u64, Queued>,
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
    /// holds or waits (instead of one keep-alive per key), see [`crate::liveness`].
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
    /// Waiters were queued behind this lease (it was taken after queueing, or a renewal
    /// noted it for them): the client's liveness key must live while it is held.
    contended: bool,
    lost: LostSignal,
    /// What the holder keeps only while its lease lives (its turn in the key's local
    /// queue): dropped when the lease is lost, before the holder is told, so the next
    /// local waiter (or the holder trying again) goes on.
    attached: Option<Attachment>,
}

/// What is kept with a lease and dropped when the lease is lost: the holder's turn.
pub(crate) type Attachment = crate::turn::Turn;

/// A waiter's place in a key's queue, kept alive while the waiter waits.
struct Queued {
    names: Arc<KeyNames>,
    token: Token,
    /// Kept by a keep-alive per key even where the client has a liveness key: a semaphore's
    /// waiter, whose entry lives by its deadline (see [`Watchdog::keep_queued_per_key`]).
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

struct Renewal {
    id: u64,
    names: Arc<KeyNames>,
    token: Token,
    ttl: Duration,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the map half-updated in a way that
        // matters (every update is a single insert, remove or field store), so poisoning
        // is ignored rather than turned into a panic of our own.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Watchdog {
    /// Starts the scheduler task on the current Tokio runtime (the client's own, see
    /// `home.rs`). Renewals go to every one of
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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                telemetry,
                liveness: liveness.clone(),
                ..State::default()
            }),
            stopped: AtomicBool::new(false),
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

    /// Puts a freshly acquired lease (command sent at `sent`) on the schedule.
    /// With `renew` false it is only watched for the end of its validity.
    pub(crate) fn register(
        &self,
        names: &Arc<KeyNames>,
        token: &Token,
        ttl: Duration,
        renew: bool,
        sent: Instant,
    ) -> LeaseHandle {
        let lost = LostSignal::new();
        let receiver = lost.clone();
        let next_renewal = sent + ttl / 3;
        let valid_until = validity(sent, ttl);
        lost.valid_until(valid_until, renew);
        let first_event = if renew {
            next_renewal.min(valid_until)
        } else {
            valid_until
        };
        let (id, wake_sooner) = {
            let mut state = self.shared.state();
            state.next_id += 1;
            let id = state.next_id;
            let wake_sooner = state
                .scheduled_wake
                .is_none_or(|scheduled| first_event < scheduled);
            let period = first_event.saturating_duration_since(sent).max(MIN_IDLE);
            state.recent_period = Some(state.recent_period.map_or(period, |p| p.min(period)));
            state.leases.insert(
                id,
                Lease {
                    names: names.clone(),
                    token: token.clone(),
                    ttl,
                    renew,
                    next_renewal,
                    valid_until,
                    in_flight: false,
                    contended: false,
                    lost,
                    attached: None,
                },
            );
            (id, wake_sooner)
        };
        if wake_sooner {
            self.wake.notify_one();
        }
        LeaseHandle { id, lost: receiver }
    }

    /// Takes a lease off the schedule at once (release, drop, panic): no renewal follows.
    /// Returns the lease's validity point, when it was still on the schedule.
    pub(crate) fn remove(&self, id: u64) -> Option<Instant> {
        self.shared
            .state()
            .leases
            .remove(&id)
            .map(|lease| lease.valid_until)
    }

    /// Gives a lease that stays on the schedule to its next holder in this process (a local
    /// pass): the holder gets a lost signal of its own, and the one before it no longer hears
    /// of this lease. With `retake`, the lease was just re-dated by an owner-checked round
    /// trip sent at that instant, with that ttl and renewal (the new holder's options).
    /// `None` when the lease is no longer on the schedule (lost, or past its validity).
    pub(crate) fn hand_over(&self, id: u64, retake: Option<Retake>) -> Option<LeaseHandle> {
        let sender = LostSignal::new();
        let receiver = sender.clone();
        let wake_sooner = {
            let mut state = self.shared.state();
            let lease = state.leases.get_mut(&id)?;
            lease.lost = sender;
            let Some(retake) = retake else {
                lease.set_valid_until(lease.valid_until);
                return Some(LeaseHandle { id, lost: receiver });
            };
            lease.ttl = retake.ttl;
            lease.renew = retake.renew;
            lease.set_valid_until(validity(retake.sent, retake.ttl));
            lease.next_renewal = retake.sent + retake.ttl / 3;
            let first_event = if retake.renew {
                lease.next_renewal.min(lease.valid_until)
            } else {
                lease.valid_until
            };
            state
                .scheduled_wake
                .is_none_or(|scheduled| first_event < scheduled)
        };
        if wake_sooner {
            self.wake.notify_one();
        }
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
        let renew = lease.renew;
        lease.ttl = ttl;
        lease.set_valid_until(validity(sent, ttl));
        lease.next_renewal = sent + ttl / 3;
        let first_event = if renew {
            lease.next_renewal.min(lease.valid_until)
        } else {
            lease.valid_until
        };
        let wake_sooner = state
            .scheduled_wake
            .is_none_or(|scheduled| first_event < scheduled);
        drop(state);
        if wake_sooner {
            self.wake.notify_one();
        }
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
        let wake_sooner = state
            .scheduled_wake
            .is_none_or(|scheduled| valid_until < scheduled);
        drop(state);
        if wake_sooner {
            self.wake.notify_one();
        }
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
    /// within one queue lease. The place was just refreshed by the waiter's own try.
    pub(crate) fn keep_queued(&self, names: &Arc<KeyNames>, token: &Token) -> u64 {
        self.queue_place(names, token, false)
    }

    /// Keeps a waiter's place alive like [`keep_queued`](Self::keep_queued), but always by a
    /// keep-alive of its key: for a semaphore's waiter, whose queue entry names no liveness
    /// key and lives by its deadline.
    pub(crate) fn keep_queued_per_key(&self, names: &Arc<KeyNames>, token: &Token) -> u64 {
        self.queue_place(names, token, true)
    }

    fn queue_place(&self, names: &Arc<KeyNames>, token: &Token, per_key: bool) -> u64 {
        let now = Instant::now();
        let (id, wake_sooner) = {
            let mut state = self.shared.state();
            state.next_id += 1;
            let id = state.next_id;
            state.queued.insert(
                id,
                Queued {
                    names: names.clone(),
                    token: token.clone(),
                    per_key,
                },
            );
            let due = *state.next_keepalive.get_or_insert(now + KEEPALIVE_EVERY);
            let wake_sooner = state.scheduled_wake.is_none_or(|wake| due < wake);
            (id, wake_sooner)
        };
        if wake_sooner {
            self.wake.notify_one();
        }
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
            (
                std::mem::take(&mut state.leases),
                std::mem::take(&mut state.queued),
            )
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
        if let Some(lease) = self.shared.state().leases.get_mut(&id) {
            lease.contended = true;
        }
    }

    /// How many leases are on the schedule.
    pub(crate) fn len(&self) -> usize {
        self.shared.state().leases.len()
    }

    pub(crate) fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
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

/// The scheduler loop: renew what is due, expire what ran out, sleep until the next event.
async fn schedule(shared: Weak<Shared>, wake: Arc<Notify>, nodes: Nodes) {
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next_wake = {
            let Some(shared_now) = shared.upgrade() else {
                return;
            };
            if shared_now.stopped.load(Ordering::Acquire) {
                return;
            }
            let due = collect_due(&mut shared_now.state(), Instant::now());
            for (lease, cause) in due.lapsed {
                lease.end(cause, &due.telemetry);
            }
            if !due.places.is_empty() {
                tokio::spawn(keep_places(nodes.connections[0].clone(), due.places));
            }
            if let Some(liveness) = due.refresh {
                let connection = nodes.connections[0].clone();
                tokio::spawn(async move { liveness.refresh(connection).await });
            }
            if !due.batch.is_empty() {
                tokio::spawn(renew_batch(
                    shared.clone(),
                    wake.clone(),
                    nodes.clone(),
                    due.batch,
                ));
            }
            due.next_wake
        };
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(next_wake) => {}
        }
    }
}

/// What the scheduler does after a look at the schedule, once it let go of the state.
struct Due {
    /// Renewals to send now.
    batch: Vec<Renewal>,
    /// When to look again.
    next_wake: Instant,
    /// Queue places to keep alive now.
    places: Vec<KeepAlive>,
    /// The liveness key to refresh now.
    refresh: Option<Arc<Liveness>>,
    /// Leases past their validity, taken off the schedule, to [`end`](Lease::end).
    lapsed: Vec<(Lease, LostCause)>,
    /// Where their losses are counted.
    telemetry: Telemetry,
}

/// Takes leases past their validity off the schedule (to be ended by the caller, outside
/// the state's lock) and takes out the renewals that are due, and the queue places to keep
/// alive when their time has come. A renewal is sent up to a quarter interval early so
/// that neighbours share a pipeline.
fn collect_due(state: &mut State, now: Instant) -> Due {
    let mut batch = Vec::new();
    let mut lapsed_ids = Vec::new();
    let mut next_wake = now + IDLE;
    for (&id, lease) in &mut state.leases {
        if now >= lease.valid_until {
            lapsed_ids.push(id);
            continue;
        }
        if lease.renew && !lease.in_flight {
            let early = lease.ttl / 12;
            if lease.next_renewal <= now + early {
                lease.in_flight = true;
                batch.push(Renewal {
                    id,
                    names: lease.names.clone(),
                    token: lease.token.clone(),
                    ttl: lease.ttl,
                });
            } else {
                next_wake = next_wake.min(lease.next_renewal);
            }
        }
        next_wake = next_wake.min(lease.valid_until);
    }
    let lapsed = lapsed_ids
        .into_iter()
        .filter_map(|id| state.leases.remove(&id))
        .map(|lease| {
            let cause = if lease.renew {
                LostCause::RenewalFailed
            } else {
                LostCause::Expired
            };
            (lease, cause)
        })
        .collect();
    let (places, refresh) = match state.liveness.clone() {
        None => (due_places(state, now), None),
        Some(liveness) => {
            let refresh = due_refresh(state, liveness, now);
            // Semaphore waiters' places still go by their deadlines: kept per key, with the
            // refresh.
            let places = match refresh {
                Some(_) => group_places(state.queued.values().filter(|place| place.per_key)),
                None => Vec::new(),
            };
            (places, refresh)
        }
    };
    if let Some(keepalive) = state.next_keepalive {
        next_wake = next_wake.min(keepalive);
    }
    let recent_period = state.recent_period.take();
    if batch.is_empty()
        && state.leases.is_empty()
        && state.queued.is_empty()
        && state.next_keepalive.is_none()
    {
        // Nothing to watch. While locks keep coming and going (each held for less than its
        // first renewal interval), look again after that interval: a new lease is then due
        // no sooner than this look and need not wake the scheduler (a thread switch per
        // acquire). Once they stop, back off towards IDLE.
        let idle = recent_period
            .unwrap_or_else(|| match state.idle_period {
                Duration::ZERO => IDLE,
                last => last.saturating_mul(2),
            })
            .clamp(MIN_IDLE, IDLE);
        state.idle_period = idle;
        next_wake = now + idle;
    }
    state.scheduled_wake = Some(next_wake);
    Due {
        batch,
        next_wake,
        places,
        refresh,
        lapsed,
        telemetry: state.telemetry.clone(),
    }
}

impl Lease {
    /// Moves the validity point, and tells the holder's signal, which judges the lease by
    /// the clock too (see `lost_signal.rs`).
    fn set_valid_until(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.lost.valid_until(valid_until, self.renew);
    }

    /// Ends a lease taken off the schedule because it is lost (or, watchdog off, reached
    /// its ttl): frees its holder's turn first, then reports the loss, and only then tells
    /// the holder. A task woken by the loss may try the key again at once, and must not
    /// find its own old turn still taken. Called outside the state's lock, so that the
    /// woken holder never waits on it.
    fn end(mut self, cause: LostCause, telemetry: &Telemetry) {
        drop(self.attached.take());
        let key = self.names.lock();
        match cause {
            LostCause::Expired => tracing::debug!(key, "lease reached its ttl"),
            LostCause::TokenGone => {
                tracing::warn!(key, "lock lost: the token is gone from Redis");
                telemetry.lost(key, cause);
            }
            _ => {
                tracing::warn!(key, %cause, "lock lost");
                telemetry.lost(key, cause);
            }
        }
        self.lost.set(cause);
    }
}

/// The queue places to keep alive now, one call per key, when their time has come.
fn due_places(state: &mut State, now: Instant) -> Vec<KeepAlive> {
    if state.queued.is_empty() {
        state.next_keepalive = None;
        return Vec::new();
    }
    if state.next_keepalive.is_some_and(|due| due > now) {
        return Vec::new();
    }
    state.next_keepalive = Some(now + KEEPALIVE_EVERY);
    group_places(state.queued.values())
}

/// The places, one keep-alive call per key.
fn group_places<'a>(places: impl Iterator<Item = &'a Queued>) -> Vec<KeepAlive> {
    let mut by_key: HashMap<&str, KeepAlive> = HashMap::new();
    for place in places {
        by_key
            .entry(place.names.lock())
            .or_insert_with(|| KeepAlive {
                names: place.names.clone(),
                tokens: Vec::new(),
            })
            .tokens
            .push(place.token.clone());
    }
    by_key.into_values().collect()
}

/// The liveness key, when its refresh is due: every [`KEEPALIVE_EVERY`] while the client
/// keeps a queue place, watches another process, or renews a lease that waiters queue
/// behind (a renewal notes its holder's liveness key for them; a lease without renewal
/// never does). A client that only takes uncontended locks never writes it.
fn due_refresh(state: &mut State, liveness: Arc<Liveness>, now: Instant) -> Option<Arc<Liveness>> {
    if state.queued.is_empty()
        && !liveness.is_watching()
        && !state
            .leases
            .values()
            .any(|lease| lease.renew && lease.contended)
    {
        state.next_keepalive = None;
        return None;
    }
    if state.next_keepalive.is_some_and(|due| due > now) {
        return None;
    }
    state.next_keepalive = Some(now + KEEPALIVE_EVERY);
    Some(liveness)
}

/// Keeps queue places alive: one script call per key, all in flight at once on the
/// multiplexed connection. A failure is only logged: the next keep-alive comes a third of
/// a queue lease later, and a place that lapses costs its waiter its turn, never safety.
async fn keep_places(connection: Connection, places: Vec<KeepAlive>) {
    join_all(places.iter().map(|place| {
        let mut connection = connection.clone();
        async move {
            let names = &place.names;
            let mut call = Call::new(
                &KEEPALIVE,
                &[names.queue(), names.deadlines(), names.ttls()],
            );
            call.arg(millis(QUEUE_LEASE));
            for token in &place.tokens {
                call.arg(&**token);
            }
            if let Err(err) = invoke::<i64>(&call, &mut connection).await {
                tracing::debug!(key = %place.names.lock(), error = %err, "keeping queue places alive failed");
            }
        }
    }))
    .await;
}

/// What the nodes said of one lease's renewal.
enum Verdict {
    /// Renewed; `noted`: waiters are queued, and the renewal noted this holder for them.
    Renewed {
        noted: bool,
    },
    Gone,
    Failed,
}

/// Sends one pipeline of renewals to every node and applies the replies: a lease is renewed
/// when a quorum confirmed it, lost when so many found the token gone that no quorum is
/// left, and retried soon otherwise.
async fn renew_batch(shared: Weak<Shared>, wake: Arc<Notify>, nodes: Nodes, batch: Vec<Renewal>) {
    let sent = Instant::now();
    let per_node = join_all(nodes.connections.iter().map(|connection| {
        let mut connection = connection.clone();
        let batch = &batch;
        let nodes = &nodes;
        async move {
            let replicas = nodes.replicas.as_ref();
            let alive = nodes.alive.as_deref();
            match nodes.timeout {
                Some(limit) => {
                    tokio::time::timeout(limit, renew_on(&mut connection, batch, replicas, alive))
                        .await
                        .unwrap_or(Err(()))
                }
                None => renew_on(&mut connection, batch, replicas, alive).await,
            }
        }
    }))
    .await;
    let node_count = nodes.connections.len();
    let verdict = |index: usize| {
        let (mut renewed, mut gone, mut noted) = (0, 0, false);
        for replies in per_node.iter().flatten() {
            match replies.get(index) {
                Some(Ok((true, holder_noted))) => {
                    renewed += 1;
                    noted |= *holder_noted;
                }
                Some(Ok((false, _))) => gone += 1,
                _ => {}
            }
        }
        if renewed >= nodes.quorum {
            Verdict::Renewed { noted }
        } else if gone > node_count - nodes.quorum {
            Verdict::Gone
        } else {
            Verdict::Failed
        }
    };
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let now = Instant::now();
    let mut state = shared.state();
    let telemetry = state.telemetry.clone();
    let mut gone = Vec::new();
    for (index, renewal) in batch.iter().enumerate() {
        let Some(lease) = state.leases.get_mut(&renewal.id) else {
            continue; // released while the renewal was in flight
        };
        lease.in_flight = false;
        match verdict(index) {
            Verdict::Renewed { noted } => {
                // Waiters are queued behind this holder: its liveness key must live.
                lease.contended |= noted;
                lease.set_valid_until(lease.valid_until.max(validity(sent, renewal.ttl)));
                lease.next_renewal = sent + renewal.ttl / 3;
                tracing::debug!(key = %renewal.names.lock(), "lease renewed");
            }
            Verdict::Gone => gone.extend(state.leases.remove(&renewal.id)),
            Verdict::Failed => {
                telemetry.renewal_failed(renewal.names.lock());
                let retry = (renewal.ttl / RETRY_DIVISOR).max(Duration::from_millis(10));
                lease.next_renewal = now + retry;
            }
        }
    }
    drop(state);
    for lease in gone {
        lease.end(LostCause::TokenGone, &telemetry);
    }
    wake.notify_one();
}

/// Renews a batch on one node: one pipeline, or in a cluster (where a pipeline must stay in
/// one slot) one request per lease, all in flight at once on the multiplexed connection.
async fn renew_on(
    connection: &mut Connection,
    batch: &[Renewal],
    replicas: Option<&Replicas>,
    alive: Option<&Liveness>,
) -> Result<Vec<RenewalReply>, ()> {
    if !connection.is_cluster() {
        return send_renewals(connection, batch, replicas, alive).await;
    }
    let replies = join_all(batch.iter().map(|renewal| {
        let mut connection = connection.clone();
        async move {
            send_renewals(
                &mut connection,
                std::slice::from_ref(renewal),
                replicas,
                alive,
            )
            .await
        }
    }))
    .await;
    Ok(replies
        .into_iter()
        .map(|reply| reply.ok().and_then(|mut one| one.pop()).unwrap_or(Err(())))
        .collect())
}

/// Renews every lease of the batch in one pipeline; reloads the script once on NOSCRIPT.
/// Returns, per lease, whether its token was still there; `Err(())` where the command
/// failed (the failure is logged here). With `replicas`, the pipeline ends with their
/// `WAIT`, and a renewal too few replicas confirmed counts as failed.
async fn send_renewals(
    connection: &mut Connection,
    batch: &[Renewal],
    replicas: Option<&Replicas>,
    alive: Option<&Liveness>,
) -> Result<Vec<RenewalReply>, ()> {
    let pipeline = |only: &dyn Fn(usize) -> bool| {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (index, renewal) in batch.iter().enumerate() {
            if only(index) {
                let names = &renewal.names;
                let command = pipe.cmd("EVALSHA").arg(RENEW.get_hash());
                match alive.and_then(|liveness| liveness.key_for(names.lock())) {
                    // Notes this holder for the key's waiters, while there are some.
                    Some(alive) => command
                        .arg(3)
                        .arg(names.lock())
                        .arg(names.queue())
                        .arg(names.ttls())
                        .arg(&*renewal.token)
                        .arg(millis(renewal.ttl))
                        .arg(&*alive)
                        .arg(GROW_ONLY),
                    None => command
                        .arg(1)
                        .arg(names.lock())
                        .arg(&*renewal.token)
                        .arg(millis(renewal.ttl))
                        .arg("")
                        .arg(GROW_ONLY),
                };
            }
        }
        if let Some(replicas) = replicas {
            pipe.add_command(replicas.wait_command());
        }
        pipe
    };
    let mut first: Vec<redis::RedisResult<i64>> = match pipeline(&|_| true)
        .query_async(connection)
        .await
    {
        Ok(replies) => replies,
        Err(err) => {
            tracing::warn!(keys = %Keys(batch), leases = batch.len(), error = %err, "lease renewal failed");
            return Err(());
        }
    };
    let first_confirmed = confirmed_by_replicas(&mut first, replicas, batch.len(), batch);
    let missing: Vec<bool> = first.iter().map(is_noscript).collect();
    let mut results: Vec<RenewalReply> = first
        .iter()
        .map(|reply| renewal_result(reply, first_confirmed))
        .collect();
    if !missing.contains(&true) {
        log_errors(&first, batch);
        return Ok(results);
    }
    // The server lost its script cache (restart, SCRIPT FLUSH): load and resend those.
    if let Err(err) = RENEW.prepare_invoke().load_async(connection).await {
        tracing::warn!(keys = %Keys(batch), leases = batch.len(), error = %err, "reloading the renew script failed");
        return Ok(results);
    }
    let mut retry: Vec<redis::RedisResult<i64>> = match pipeline(&|index| missing[index])
        .query_async(connection)
        .await
    {
        Ok(replies) => replies,
        Err(err) => {
            tracing::warn!(keys = %Keys(batch), leases = batch.len(), error = %err, "lease renewal failed after reloading the script");
            return Ok(results);
        }
    };
    let resent = missing
        .iter()
        .enumerate()
        .filter(|(_, noscript)| **noscript);
    let retry_confirmed =
        confirmed_by_replicas(&mut retry, replicas, resent.clone().count(), batch);
    for ((index, _), reply) in resent.zip(retry) {
        results[index] = renewal_result(&reply, retry_confirmed);
    }
    Ok(results)
}

/// How many keys an event about a whole batch of renewals lists (its `leases` field says
/// how many there were).
const LISTED_KEYS: usize = 8;

/// The keys of a batch of renewals, for an event: the first [`LISTED_KEYS`], then how many
/// more, so that a line stays short with 10,000 leases held.
struct Keys<'a>(&'a [Renewal]);

impl std::fmt::Display for Keys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, renewal) in self.0.iter().take(LISTED_KEYS).enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            f.write_str(renewal.names.lock())?;
        }
        match self.0.len().saturating_sub(LISTED_KEYS) {
            0 => Ok(()),
            more => write!(f, " and {more} more"),
        }
    }
}

/// Takes the `WAIT` answer off the end of a renewal pipeline's replies (`renewals` of
/// them before it, from `batch`, whose keys an event names) and says whether enough replicas confirmed them; true without replicas.
fn confirmed_by_replicas(
    replies: &mut Vec<redis::RedisResult<i64>>,
    replicas: Option<&Replicas>,
    renewals: usize,
    batch: &[Renewal],
) -> bool {
    let Some(replicas) = replicas else {
        return true;
    };
    let answer = if replies.len() > renewals {
        replies.pop()
    } else {
        None
    };
    match answer {
        Some(Ok(answer)) if replicas.confirmed(answer) => true,
        answer => {
            tracing::warn!(
                keys = %Keys(batch),
                leases = renewals,
                ?answer,
                "lease renewals not confirmed by enough replicas; they do not count"
            );
            false
        }
    }
}

/// One node's answer to one renewal: `(renewed, noted)`, `noted` when renew.lua found
/// waiters queued and noted the holder for them (reply 2); `(false, _)` the token was gone;
/// `Err(())` failed.
type RenewalReply = Result<(bool, bool), ()>;

/// What one renewal reply means: renewed (counted only when the replicas `confirmed` it),
/// the token gone, or failed.
fn renewal_result(reply: &redis::RedisResult<i64>, confirmed: bool) -> RenewalReply {
    match reply {
        Ok(renewed @ (1 | 2)) if confirmed => Ok((true, *renewed == 2)),
        Ok(1 | 2) => Err(()),
        Ok(_) => Ok((false, false)),
        Err(_) => Err(()),
    }
}

fn is_noscript(reply: &redis::RedisResult<i64>) -> bool {
    matches!(reply, Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}

fn log_errors(replies: &[redis::RedisResult<i64>], batch: &[Renewal]) {
    for (reply, renewal) in replies.iter().zip(batch) {
        if let Err(err) = reply {
            tracing::warn!(key = %renewal.names.lock(), error = %err, "lease renewal failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ttl: Duration, now: Instant) -> Lease {
        Lease {
            names: Arc::new(KeyNames::prefixed("", "k").unwrap()),
            token: "t".into(),
            ttl,
            renew: true,
            next_renewal: now + ttl / 3,
            valid_until: validity(now, ttl),
            in_flight: false,
            contended: false,
            lost: LostSignal::new(),
            attached: None,
        }
    }

    #[test]
    fn an_idle_scheduler_looks_again_after_the_recent_renewal_interval_then_backs_off() {
        let now = Instant::now();
        let mut state = State::default();
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
        let mut state = State::default();
        let names = Arc::new(KeyNames::prefixed("", "k").unwrap());
        for token in ["a", "b"] {
            state.next_id += 1;
            let id = state.next_id;
            let token = Token::from(token);
            let names = names.clone();
            state.queued.insert(
                id,
                Queued {
                    names,
                    token,
                    per_key: false,
                },
            );
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
        let mut state = State {
            liveness: Some(liveness.clone()),
            ..State::default()
        };
        // An uncontended lease renewed by the watchdog: nothing to refresh.
        state.leases.insert(1, lease(Duration::from_secs(3), now));
        let due = collect_due(&mut state, now);
        assert!(due.refresh.is_none() && due.places.is_empty());
        // A thousand places on a thousand keys: one refresh, no per-key keep-alive.
        for index in 0..1_000u64 {
            let names = Arc::new(KeyNames::prefixed("", &format!("k{index}")).unwrap());
            let token = Token::from(format!("t{index}").as_str());
            state.queued.insert(
                100 + index,
                Queued {
                    names,
                    token,
                    per_key: false,
                },
            );
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
        if let Some(lease) = state.leases.get_mut(&1) {
            lease.contended = true;
        }
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
        let mut state = State::default();
        state.leases.insert(1, lease(Duration::from_secs(3), now));
        let due = collect_due(&mut state, now);
        let (batch, next) = (due.batch, due.next_wake);
        assert!(batch.is_empty());
        assert_eq!(next, now + Duration::from_secs(1));
    }
}
