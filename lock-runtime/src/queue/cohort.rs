//! The local level of the two-level queue (lock cohorting: Dice, Marathe and Shavit, "Lock
//! Cohorting", PPoPP 2012; the process plays the NUMA node, Redis the global lock).
//!
//! The tasks of this process that want the same key wait in a local first-come-first-served
//! queue, the key's *turn*; only the process waits in Redis, as one [`Place`] per key,
//! however many of its tasks wait. The task that has the turn either takes over the lock
//! the process already holds (a *pass*: no Redis round trip), or leads the process's wait
//! in Redis.
//!
//! A holder that ends its hold with local waiters behind it passes the lock on while the
//! [`PassBound`] and the lease allow. Past the bound the process *yields*: one release call
//! gives the lock to the next process in the Redis queue and puts this one at the tail, or
//! lets it keep the lock when no other process waits. A task that releases and asks again
//! queues behind the waiters already there, here and in Redis.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use once_cell::sync::Lazy;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::client::LockClient;
use crate::config::PassBound;
use crate::lease::{Token, passable};
use crate::lease_parts::LeaseParts;
use crate::queue::redis_queue::place::Place;
use crate::queue::redis_queue::release::release_script;
use crate::scripts::KeyNames;
use crate::turn::{Queue, Turn};
use crate::wakeups::WaitTicket;

/// The local queues of every client of this process, by client and Redis key; a key's
/// entry lives while a task acquires or holds it through that client. Sharded by key, so
/// tasks on different keys rarely meet on one lock.
static COHORTS: Lazy<[Shard; SHARDS]> =
    Lazy::new(|| std::array::from_fn(|_| Mutex::new(HashMap::default())));

/// How many entries [`COHORTS`] has, over all its shards: a task that finds none skips
/// the lookup of its key (changed under the shard's lock, with the entry).
static ENTRIES: AtomicUsize = AtomicUsize::new(0);

/// One shard of [`COHORTS`]. Its keys carry their hash, computed once per acquisition.
type Shard = Mutex<ShardMap>;

/// The table of one [`Shard`].
type ShardMap = HashMap<CohortKey, Arc<Cohort>, BuildHasherDefault<Hashed>>;

/// How many shards [`COHORTS`] has.
const SHARDS: usize = 16;

/// A client (its id) and a Redis key, with their hash: it picks the shard and the bucket,
/// so a task hashes its key once to join and not again to leave. The names are shared
/// with the task's guard, not copied.
#[derive(Clone)]
struct CohortKey {
    hash: u64,
    client: usize,
    names: Arc<KeyNames>,
}

impl CohortKey {
    fn new(client: usize, names: &Arc<KeyNames>) -> Self {
        // Keyed SipHash: keys may come from users, and must not pile up in one bucket.
        static HASHER: Lazy<std::collections::hash_map::RandomState> =
            Lazy::new(std::collections::hash_map::RandomState::new);
        let mut hasher = HASHER.build_hasher();
        client.hash(&mut hasher);
        names.lock().hash(&mut hasher);
        CohortKey {
            hash: hasher.finish(),
            client,
            names: names.clone(),
        }
    }

    /// The shard of this key: bits of the hash that the shard's table does not use for
    /// buckets (the low ones) or tags (the top seven).
    fn shard(&self) -> &'static Shard {
        &COHORTS[((self.hash >> 32) as usize) % SHARDS]
    }
}

impl Hash for CohortKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for CohortKey {
    fn eq(&self, other: &Self) -> bool {
        self.client == other.client && self.names.lock() == other.names.lock()
    }
}

impl Eq for CohortKey {}

/// The hasher of a [`Shard`]: passes the precomputed hash of a [`CohortKey`] through.
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (by `CohortKey`); any other input still hashes.
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// One key's local queue and what the process holds of the key between two of its tasks.
struct Cohort {
    /// The local queue: a fair (first-come-first-served) semaphore of one permit. Its
    /// holder holds the lock, or leads the process's wait in Redis.
    turn: Semaphore,
    state: Mutex<CohortState>,
    /// The client's watchdog that holds a parked lock, and the reach and shutdown that give
    /// it back.
    parts: Arc<LeaseParts>,
    /// How long the process may keep the key for its own tasks while another waits.
    pass_bound: PassBound,
}

#[derive(Default)]
struct CohortState {
    /// Tasks that acquire or hold the key through this client.
    members: usize,
    /// Of those, the ones still acquiring.
    waiting: usize,
    /// Of those, the ones queued for the turn.
    queued: usize,
    /// What the process keeps of the key between its tasks: boxed, made only once the key
    /// is contended here, so that a key held by one task costs less memory.
    parked: Option<Box<Parked>>,
}

/// What the process keeps of a key between two of its tasks.
#[derive(Default)]
struct Parked {
    /// The lock, held by the process while it passes from one task to the next.
    tenure: Option<Tenure>,
    /// The process's place in the Redis queue while no task leads the wait.
    place: Option<Place>,
    /// The process's subscription to the key's release messages, kept while it has members.
    ticket: Option<WaitTicket>,
}

impl CohortState {
    /// What is parked, made on first use.
    fn parked(&mut self) -> &mut Parked {
        self.parked.get_or_insert_with(Box::default)
    }

    /// Takes one parked thing out (`None` when nothing was ever parked).
    fn take<T>(&mut self, slot: impl FnOnce(&mut Parked) -> &mut Option<T>) -> Option<T> {
        self.parked.as_mut().and_then(|parked| slot(parked).take())
    }
}

/// The lock as the process holds it between two of its tasks.
#[derive(Debug)]
pub(crate) struct Tenure {
    /// The process's token: the key's value for the whole tenure.
    pub(crate) token: Token,
    /// The lease's id on the watchdog, which keeps renewing it.
    pub(crate) lease: u64,
    pub(crate) ttl: Duration,
    /// Whether the watchdog renews the lease.
    pub(crate) renew: bool,
    /// When the process took the lock in Redis (or kept it when nobody else waited).
    pub(crate) began: Instant,
    /// Local passes since then.
    pub(crate) passes: u32,
}

impl Queue for Cohort {
    fn next(&self) {
        self.turn.add_permits(1);
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is a few field stores or one map operation, so a
    // panic elsewhere cannot leave them half-done: poisoning is ignored.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A task starts to acquire `names.lock()` through `client`: it joins the key's local level.
pub(crate) fn join(client: &LockClient, names: &Arc<KeyNames>) -> Member {
    let key = CohortKey::new(client.id(), names);
    let map = locked(key.shard());
    enter(client, key, map)
}

/// A task starts to acquire `names.lock()` through `client`: it joins the key's local level
/// when another task of this process acquires or holds the key through `client` now.
/// `None` when none does: nothing is made, and the task may try the key in Redis alone.
pub(crate) fn join_if_wanted(client: &LockClient, names: &Arc<KeyNames>) -> Option<Member> {
    if ENTRIES.load(Ordering::Acquire) == 0 {
        return None;
    }
    let key = CohortKey::new(client.id(), names);
    let map = locked(key.shard());
    if !map.contains_key(&key) {
        return None;
    }
    Some(enter(client, key, map))
}

/// Joins the key's entry in `map`, made when there is none.
fn enter(client: &LockClient, key: CohortKey, mut map: MutexGuard<'_, ShardMap>) -> Member {
    let cohort = map
        .entry(key.clone())
        .or_insert_with(|| {
            ENTRIES.fetch_add(1, Ordering::Release);
            Arc::new(Cohort {
                turn: Semaphore::new(1),
                state: Mutex::default(),
                parts: client.parts().clone(),
                pass_bound: client.pass_bound(),
            })
        })
        .clone();
    {
        let mut state = locked(&cohort.state);
        state.members += 1;
        state.waiting += 1;
    }
    drop(map);
    Member {
        key,
        cohort,
        waiting: true,
    }
}

impl LockClient {
    /// How many tasks of this process wait for a lock through this client now (in a key's
    /// local queue, or leading the process's wait in Redis), and on how many keys' release
    /// channels it is subscribed (one per key the process waits for in Redis). Both return
    /// to zero when no one waits.
    pub fn waiting(&self) -> (usize, usize) {
        let id = self.id();
        let tasks = COHORTS
            .iter()
            .map(|shard| {
                locked(shard)
                    .iter()
                    .filter(|(key, _)| key.client == id)
                    .map(|(_, cohort)| locked(&cohort.state).waiting)
                    .sum::<usize>()
            })
            .sum();
        (tasks, self.wakeups().channels())
    }
}

/// A task's membership in a key's local level, from the start of its acquire to its
/// release. The last member to leave gives back what the process still has of the key:
/// a lock parked between two tasks is released, a place in the Redis queue is left.
pub(crate) struct Member {
    /// The key's entry in the registry (and the key's names).
    key: CohortKey,
    cohort: Arc<Cohort>,
    /// Still acquiring (counted in `waiting`).
    waiting: bool,
}

/// Counts a task queued for the turn while it is.
struct TaskInQueue<'a>(&'a Cohort);

impl<'a> TaskInQueue<'a> {
    fn new(cohort: &'a Cohort) -> Self {
        locked(&cohort.state).queued += 1;
        TaskInQueue(cohort)
    }
}

impl Drop for TaskInQueue<'_> {
    fn drop(&mut self) {
        locked(&self.0.state).queued -= 1;
    }
}

impl Member {
    fn state(&self) -> MutexGuard<'_, CohortState> {
        locked(&self.cohort.state)
    }

    /// The turn without waiting: `None` when another task of this process has it.
    pub(crate) fn try_turn(&self) -> Option<Turn> {
        let permit = self.cohort.turn.try_acquire().ok()?;
        permit.forget();
        Some(Turn::new(self.cohort.clone()))
    }

    /// Waits for the turn, behind the tasks of this process already waiting, until
    /// `deadline`.
    pub(crate) async fn turn(&self, deadline: Instant) -> Option<Turn> {
        if let Some(turn) = self.try_turn() {
            return Some(turn);
        }
        let _queued = TaskInQueue::new(&self.cohort);
        // The semaphore is never closed; a permit taken is handed to the turn.
        let permit = tokio::time::timeout_at(deadline, self.cohort.turn.acquire())
            .await
            .ok()?
            .ok()?;
        permit.forget();
        Some(Turn::new(self.cohort.clone()))
    }

    /// The process's place in the Redis queue, for the task that leads the wait.
    pub(crate) fn take_place(&self) -> Option<Place> {
        self.state().take(|parked| &mut parked.place)
    }

    /// The process's subscription to the key's release messages, while a task leads the wait.
    pub(crate) fn take_ticket(&self) -> Option<WaitTicket> {
        self.state().take(|parked| &mut parked.ticket)
    }

    /// Puts the subscription back for the next task that leads the wait.
    pub(crate) fn put_ticket(&self, ticket: Option<WaitTicket>) {
        if ticket.is_some() {
            self.state().parked().ticket = ticket;
        }
    }

    /// A leading task gave up (its wait ran out): the place stays for the process's next
    /// leading task when other tasks still want the key; otherwise it is handed back, to
    /// be left.
    pub(crate) fn keep_place(&self, place: Place) -> Option<Place> {
        let mut state = self.state();
        if state.members > 1 {
            state.parked().place = Some(place);
            return None;
        }
        Some(place)
    }

    /// The task holds the lock now: it no longer counts as waiting.
    pub(crate) fn holds(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.state().waiting -= 1;
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // The place leaves the queue and the subscription ends as they are dropped here.
        let (tenure, _place, _ticket) = {
            let mut map = locked(self.key.shard());
            let mut state = self.state();
            state.members -= 1;
            if self.waiting {
                state.waiting -= 1;
            }
            if state.members > 0 {
                return;
            }
            if let std::collections::hash_map::Entry::Occupied(entry) = map.entry(self.key.clone())
                && Arc::ptr_eq(entry.get(), &self.cohort)
            {
                entry.remove();
                ENTRIES.fetch_sub(1, Ordering::Release);
            }
            let parked = state
                .parked
                .take()
                .map(|parked| *parked)
                .unwrap_or_default();
            (parked.tenure, parked.place, parked.ticket)
        };
        if let Some(tenure) = tenure {
            release_parked(&self.cohort.parts, &self.key.names, tenure);
        }
    }
}

/// A tenure taken out of the cohort by the task that has the turn, until that task has
/// taken the lock over: a task dropped before that (cancelled during the round trip that
/// re-dates the lease) gives the lock back instead of leaving it held and renewed.
pub(crate) struct Unclaimed<'a> {
    tenure: Option<Tenure>,
    parts: &'a LeaseParts,
    names: &'a KeyNames,
}

impl<'a> Unclaimed<'a> {
    pub(crate) fn new(member: &'a Member) -> Self {
        Unclaimed {
            tenure: member.state().take(|parked| &mut parked.tenure),
            parts: &member.cohort.parts,
            names: &member.key.names,
        }
    }

    /// The tenure, while it is unclaimed.
    pub(crate) fn tenure(&self) -> Option<&Tenure> {
        self.tenure.as_ref()
    }

    /// The task took the lock over, or its lease is gone: nothing to give back.
    pub(crate) fn claim(&mut self) -> Option<Tenure> {
        self.tenure.take()
    }
}

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        if let Some(tenure) = self.tenure.take() {
            release_parked(self.parts, self.names, tenure);
        }
    }
}

/// Releases, in the background, a lock parked for a task that gave up before taking it.
fn release_parked(parts: &LeaseParts, names: &KeyNames, tenure: Tenure) {
    let Some(valid_until) = parts.watchdog.remove(tenure.lease) else {
        return; // lost meanwhile: nothing of ours to release
    };
    let (reach, names) = (parts.reach.clone(), Arc::new(names.clone()));
    // Given back synchronously instead when the runtime drops it (shutting down).
    let leftover = crate::renewal::shutdown::Leftover::lock(&names, &tenure.token);
    parts.shutdown.give_back_in_background(leftover, async move {
        if let Err(err) = release_script(&reach, &names, &tenure.token, valid_until).await {
            tracing::warn!(key = %names.lock(), error = %err.cause(), "releasing a parked lock failed; it expires by its ttl");
        }
    });
}

/// How a holder with this local level ends its hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// To the next local waiter, without Redis.
    Pass,
    /// To the next process in Redis, requeueing this one (or keeping the lock when no other
    /// process waits).
    Yield,
    /// In Redis: no local waiter, or the lease is too short (or lost) to pass on.
    Release,
}

/// What a holding task has of the local level: its membership and where the process's
/// tenure stands. Its turn is kept with its lease on the watchdog (see
/// [`Holding::take_turn`]), so that a lost lease lets the next local waiter go on at once.
pub(crate) struct Holding {
    member: Member,
    turn: Option<Turn>,
    began: Instant,
    passes: u32,
    contended: bool,
}

impl std::fmt::Debug for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holding")
            .field("key", &self.member.key.names.lock())
            .field("passes", &self.passes)
            .finish_non_exhaustive()
    }
}

impl Holding {
    /// The holding of a task that took the lock: in Redis (`tenure` none: a new tenure
    /// begins, at `now`; `waited`: the process waited in the key's Redis queue for it) or
    /// from the task before it.
    pub(crate) fn new(
        mut member: Member,
        turn: Turn,
        (tenure, now): (Option<&Tenure>, Instant),
        waited: bool,
    ) -> Self {
        member.holds();
        let (began, passes) = tenure.map_or((now, 0), |t| (t.began, t.passes));
        Holding {
            member,
            turn: Some(turn),
            began,
            passes,
            contended: waited || tenure.is_some(),
        }
    }

    /// The turn, to be kept with the holder's lease on the watchdog: the lease's loss
    /// drops it, and the end of the hold takes it back (`detach`) and gives it up once the
    /// lock is parked, yielded or released.
    pub(crate) fn take_turn(&mut self) -> Option<Turn> {
        self.turn.take()
    }

    /// How the hold of the lease `lease` should end now.
    pub(crate) fn ending(&self, lease: u64, yields: bool) -> Ending {
        let queued = self.member.state().queued;
        if queued == 0 {
            return Ending::Release;
        }
        let now = Instant::now();
        let watchdog = &self.member.cohort.parts.watchdog;
        let Some((valid_until, ttl)) = watchdog.lease_state(lease) else {
            return Ending::Release;
        };
        if !passable(valid_until, ttl, now) {
            return Ending::Release;
        }
        let bound = self.member.cohort.pass_bound;
        if self.passes < bound.passes && now.saturating_duration_since(self.began) < bound.time {
            return Ending::Pass;
        }
        if yields {
            Ending::Yield
        } else {
            Ending::Release
        }
    }

    /// Whether the key has been contended during this hold's tenure: the process waited for
    /// it in Redis, or passed or kept it for waiting tasks. Such a hold's release offers
    /// Redis the foreign window (which ends the key's window schedule when nobody waits).
    pub(crate) fn contended(&self) -> bool {
        self.contended
    }

    /// Parks the lock for the next local waiter and gives up the turn: a pass.
    pub(crate) fn pass(self, token: Token, lease: u64, ttl: Duration, renew: bool) {
        let bound = (self.began, self.passes + 1);
        self.park(token, lease, (ttl, renew), bound);
    }

    /// No other process waited at a yield: the process keeps the lock, with a new bound.
    pub(crate) fn kept(self, token: Token, lease: u64, ttl: Duration, renew: bool) {
        self.park(token, lease, (ttl, renew), (Instant::now(), 0));
    }

    /// Parks the lock for the next local waiter, its tenure begun at `began` with `passes`
    /// passes so far; the caller gives up the turn after this.
    fn park(self, token: Token, lease: u64, (ttl, renew): (Duration, bool), bound: (Instant, u32)) {
        let (began, passes) = bound;
        self.member.state().parked().tenure = Some(Tenure {
            token,
            lease,
            ttl,
            renew,
            began,
            passes,
        });
    }

    /// The lock went to another process and the process queued again with `place`: the
    /// next local waiter leads the wait for it (the caller gives up the turn after this).
    pub(crate) fn requeued(self, place: Place) {
        self.member.state().parked().place = Some(place);
    }
}
