//! The read-write lock: many readers or one writer per key.
//!
//! Built on the mutex, not beside it. The writer *is* the mutex: it takes the lock key as
//! [`Lock`] does (the fair two-level queue, grants, keep-alives, wake-ups, fencing, the
//! watchdog), then waits, holding the key, until the readers have left. A reader holds a
//! *share*: a key of its own in the lock key's cluster slot, holding its token with a `PX`
//! expiry, listed in the lock's set of readers, and renewed by the watchdog like any lease
//! (a crashed reader's share lapses at its ttl). A reader takes its share at once, in one
//! round trip, when the lock key is free and nobody queues for it; otherwise it waits its
//! turn in the lock key's queue like a writer, and takes its share while it holds the key
//! for a moment before passing it on. So a reader that arrives after a queued writer waits
//! behind it, and a stream of readers never starves a writer.
//!
//! Redis layout, for a lock key `K`: `K` itself (a writer's token, or a reader's for the
//! moment it enters behind a queue), `~lock/readers{K}` (a set of the readers' tokens) and
//! one `~lock/share/TOKEN{K}` per reader (`/K` instead of `{K}` when `K` has a hash tag),
//! beside the mutex's queue, fence counter and channel.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::context::{self};
use crate::ops::seen_holder::with_holder;
use crate::options::Taker;
use crate::primitives::builder::{LockBuilder, with_client};
use crate::primitives::kind::ReadWrite;
use crate::queue::wait::{self, Backoff, ride_out};
use crate::queue::wait_context::WaitContext;
use crate::scripts::KeyNames;
use crate::scripts::ShareNames;
use crate::{
    client::LockClient, error::LockError, primitives::guard::LockGuard, primitives::lock::Lock,
};

mod drain;
pub(crate) mod read_guard;
pub(crate) mod shares;
use drain::Drain;
use read_guard::ReadGuard;
use shares::*;

/// The lease on the lock key of a writer waiting for the readers to leave: a writer that
/// dies then holds up the waiters behind it about this long, as a waiter does. Renewed by
/// each look at the readers (every third of it at most), which also catches a wake-up that
/// was lost (a share that lapsed, a release on shutdown, which sends no message).
const DRAIN_LEASE: Duration = crate::scripts::QUEUE_LEASE;

/// The longest lease a reader holds the lock key for while it takes its share behind a
/// queue (a round trip or two): a reader that dies in that moment blocks the key no longer.
const GATE_TTL: Duration = crate::scripts::QUEUE_LEASE;

/// A bound on the rounds of one wait: a reader or writer waits its turn again when the lock
/// key it held was lost meanwhile (a Redis restart or failover, a `DEL`), within its wait.
const MAX_ROUNDS: u32 = 1_000;

/// Makes a script call again after a transient or connection error until `deadline`, as
/// the mutex's waiters ride out a short restart within their wait; fails at once when
/// Redis has been down past the client's grace. Every call here is safe to repeat (the
/// same token; owner-checked).
async fn riding_out<T, F, Fut>(
    client: &LockClient,
    key: &str,
    deadline: Instant,
    mut call: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let mut backoff = Backoff::new();
    for _ in 0..MAX_ROUNDS {
        match call().await {
            Err(err) => {
                ride_out(&WaitContext::of(client), key, err, deadline, &mut backoff).await?
            }
            outcome => return outcome,
        }
    }
    call().await
}

impl LockClient {
    /// A read-write lock on `key` taken through this client (see [`RwLock`]).
    #[track_caller]
    pub fn rw_lock(&self, key: impl Into<String>) -> RwLock {
        RwLock::new(key).client(self)
    }
}

/// A distributed read-write lock on one key: many readers, or one writer.
///
/// [`read`](RwLock::read) shares the key with other readers; [`write`](RwLock::write) waits
/// until no reader or writer holds it and keeps everyone else out. A writer waiting in the
/// key's queue is never starved by readers: a reader that arrives after it waits behind
/// it. Each reader's share is a lease of its own, renewed by the watchdog; a reader that
/// crashes gives its share back when its ttl runs out, a waiter that crashes costs the
/// others about a second (its place in the queue lapses), as with [`Lock`].
///
/// The options are [`LockBuilder`]'s setters, as for a [`Lock`] but for the minimum hold;
/// fencing applies to writers ([`LockGuard::fence`]).
/// `#[distributed_lock(key = "...", mode = "read")]` and `mode = "write"` expand to
/// [`run_read`](RwLock::run_read) and [`run_write`](RwLock::run_write).
///
/// **Reentrancy** (per task, as for [`Lock`]): inside a body that holds the key for writing,
/// a read or a write of the same key is reentrant (no round trip); inside a body that holds
/// it for reading, a read is reentrant, and a write (or a [`Lock`] on the key) is refused
/// with [`LockError::Config`]: an upgrade would wait for its own share to leave.
///
/// In Redlock mode ([`crate::Config::redlock`]) each step goes to every master: a reader
/// holds its share on a majority (a master refuses a share while a writer holds the key
/// there), and a writer holds the key on a majority and writes once a majority has no
/// reader left. A writer's majority and a reader's share a master, which refuses one of
/// them. There is no queue across masters: a reader may pass a writer that waits for the
/// key, though not one that holds it.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{LockError, RwLock};
///
/// # async fn demo() -> Result<(), LockError> {
/// let doc = RwLock::new("doc:1").ttl(Duration::from_secs(10));
/// let reading = doc.read().await?; // other readers may hold it too
/// // ... read the document ...
/// reading.release().await?;
///
/// let writing = doc.write().await?; // no reader, no other writer
/// // ... change the document ...
/// writing.release().await?;
/// # Ok(()) }
/// ```
pub type RwLock = LockBuilder<ReadWrite>;

impl RwLock {
    /// A read-write lock on `key` with default options, on the global client (the line
    /// that calls this is its call site for the lock-order check, where the key is its
    /// class).
    #[track_caller]
    pub fn new(key: impl Into<String>) -> Self {
        LockBuilder::of(ReadWrite { key: key.into() })
    }

    /// The mutex on the same key, with these options (the writer's lock, and the gate a
    /// reader passes behind a queue).
    fn mutex(&self, client: &LockClient) -> Lock {
        let mut lock = Lock::new(self.kind.key.clone())
            .with_explicit_options(self.spec.options.clone(), self.spec.explicit)
            .client(client);
        lock.spec.order = self.spec.order.clone();
        lock
    }

    /// Refuses what a read-write lock cannot do with its options, before any traffic
    /// (see [`LockOptions::check_for`](crate::options::LockOptions::check_for)).
    fn check(&self, key: &str) -> Result<(), LockError> {
        (self.spec.options).check_for(Taker::ReadWrite, key)
    }

    /// What is left of the wait until `deadline`, or zero for a caller that tries once.
    fn wait_left(&self, deadline: Instant) -> Duration {
        if self.spec.options.wait.is_zero() {
            return Duration::ZERO;
        }
        deadline.saturating_duration_since(Instant::now())
    }

    /// Takes a reader's share of the key, waiting up to `wait` while a writer holds it or
    /// waits for it.
    ///
    /// Free of writers and of waiters, this is one round trip. Behind a queue the reader
    /// waits its turn as a writer would (so it never passes a writer that came first), then
    /// takes its share and lets the next waiter in (another reader enters at once too).
    ///
    /// Inside a body of this task that holds the key (reading or writing), this returns at
    /// once, without a round trip: a reentrant guard.
    ///
    /// Errors as [`Lock::acquire`]'s: `Busy`, `Timeout`, `InvalidKey`, `Backend`, `Config`.
    pub async fn read(&self) -> Result<ReadGuard, LockError> {
        let (client, rwlock) = with_client(self, &self.kind.key)?;
        rwlock.read_through(client).await
    }

    async fn read_through(&self, client: LockClient) -> Result<ReadGuard, LockError> {
        let names = Arc::new(client.key_names(&self.kind.key)?);
        if let Some(held) = context::held_by_this_task(client.id(), names.lock()) {
            return Ok(ReadGuard::reentrant(client.parts().clone(), names, &held));
        }
        let order = self
            .spec
            .check_order(&client, &self.kind.key, names.lock())?;
        let started = Instant::now();
        let telemetry = client.telemetry().clone();
        match self.read_new(&client, &names, started).await {
            Ok(mut guard) => {
                telemetry.acquired(guard.key(), started.elapsed());
                guard.lease.order = order;
                Ok(guard)
            }
            Err(err) => {
                let err = with_holder(client.reach(), &names, err).await;
                telemetry.refused(&err, started.elapsed());
                Err(err)
            }
        }
    }

    async fn read_new(
        &self,
        client: &LockClient,
        names: &Arc<KeyNames>,
        started: Instant,
    ) -> Result<ReadGuard, LockError> {
        self.check(names.lock())?;
        let mutex = self.mutex(client);
        WaitContext::of(client).may_try(names.lock())?;
        let shares = ShareNames::of(names);
        let token = client.new_token(self.spec.options.ttl, &self.spec.order.site);
        let share = Arc::new(shares.share(&token));
        let deadline = started
            + self
                .spec
                .options
                .wait
                .min(crate::primitives::lock::MAX_WAIT);
        let unsure = AtomicBool::new(false);
        let entered = self
            .enter(
                client,
                names,
                &mutex,
                (&shares, &share, &token),
                (deadline, &unsure),
            )
            .await;
        match entered {
            Ok(sent) => Ok(ReadGuard::new(
                client,
                names,
                share,
                token,
                &self.spec.options,
                sent,
            )),
            Err(err) => {
                if unsure.load(Ordering::Relaxed) {
                    // A try whose reply was lost may have taken the share: give it back
                    // rather than leave it to hold writers up until its ttl.
                    release_in_background(client.parts(), names, &share, token, false);
                }
                Err(err)
            }
        }
    }

    /// Takes the share (`token`'s key in `shares`): at once when the key is free and nobody
    /// queues, else behind the queue, holding the key for a moment. When the share was
    /// taken, the instant its command was sent. `unsure` is set when a call failed without
    /// an answer (it may have taken the share).
    async fn enter(
        &self,
        client: &LockClient,
        names: &KeyNames,
        mutex: &Lock,
        (shares, share, token): (&ShareNames, &KeyNames, &str),
        (deadline, unsure): (Instant, &AtomicBool),
    ) -> Result<Instant, LockError> {
        let take = |gate: String| async move {
            let taken = take_share(
                client.parts(),
                names,
                shares,
                share,
                token,
                &self.spec.options,
                &gate,
            )
            .await;
            if taken.is_err() {
                unsure.store(true, Ordering::Relaxed);
            }
            taken
        };
        let sent = Instant::now();
        let quick = riding_out(client, names.lock(), deadline, || take(String::new())).await?;
        if quick == 1 {
            return Ok(sent);
        }
        for _ in 0..MAX_ROUNDS {
            // Our turn in the key's queue, behind whoever came first: the gate.
            let gate = mutex
                .clone()
                .ttl(self.spec.options.ttl.min(GATE_TTL))
                .watchdog(true)
                .fencing(false)
                .wait(self.wait_left(deadline))
                .acquire()
                .await?;
            let sent = Instant::now();
            let gate_token = gate.token().to_owned();
            let taken =
                riding_out(client, names.lock(), deadline, || take(gate_token.clone())).await;
            // The next waiter's turn, whatever happened (a reader behind us enters too).
            if let Err(err) = gate.release().await {
                tracing::debug!(key = %names.lock(), error = %err.cause(), "passing the read-write lock on failed; it expires by its ttl");
            }
            if taken? == 1 {
                return Ok(sent);
            }
            tracing::debug!(key = %names.lock(), "the lock key was lost while a reader entered; waiting for it again");
            if Instant::now() >= deadline {
                break;
            }
        }
        Err(LockError::timeout(names.lock(), self.spec.options.wait))
    }

    /// Takes the key for writing: waits its turn in the key's queue (as [`Lock::acquire`]
    /// does), then, holding the key so that no new reader enters, waits until the readers
    /// that hold shares have left. Both within `wait`; a writer that times out while
    /// readers remain gives the key back to the queue.
    ///
    /// While it waits for readers, the writer holds the key on a lease of about a second,
    /// renewed by each look at the readers: a writer that dies meanwhile holds up the
    /// waiters behind it about a second, as a waiter does. Once the readers have left, the
    /// key gets the writer's ttl and the watchdog renews it.
    ///
    /// The guard is the mutex's [`LockGuard`]: the same release, renewal, lost signal and,
    /// with fencing, a fence strictly greater than every earlier writer's.
    ///
    /// Errors: [`LockError::Config`] inside a body of this task that holds the key for
    /// reading (an upgrade would wait for itself), else as [`Lock::acquire`]'s.
    pub async fn write(&self) -> Result<LockGuard, LockError> {
        let (client, rwlock) = with_client(self, &self.kind.key)?;
        rwlock.write_through(client).await
    }

    async fn write_through(&self, client: LockClient) -> Result<LockGuard, LockError> {
        let names = client.key_names(&self.kind.key)?;
        let mutex = self.mutex(&client);
        if context::held_by_this_task(client.id(), names.lock()).is_some() {
            // Reentrant when the task writes; refused when it reads.
            return mutex.acquire().await;
        }
        self.check(names.lock())?;
        let started = Instant::now();
        let deadline = started
            + self
                .spec
                .options
                .wait
                .min(crate::primitives::lock::MAX_WAIT);
        let waiting_lease = self.spec.options.ttl.min(DRAIN_LEASE);
        for _ in 0..MAX_ROUNDS {
            let mut guard = mutex
                .clone()
                .ttl(waiting_lease)
                .watchdog(false)
                .wait(self.wait_left(deadline))
                .acquire()
                .await?;
            match self
                .drain(&client, &names, &mut guard, started, deadline)
                .await
            {
                Ok(true) => return Ok(guard),
                Ok(false) => {
                    tracing::debug!(key = %names.lock(), "the lock key was lost while a writer waited for the readers; waiting for it again");
                    drop(guard);
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                Err(err) => {
                    if let Err(release) = guard.release().await {
                        tracing::debug!(key = %names.lock(), error = %release.cause(), "giving back a write lock that could not wait out the readers failed; it expires by its ttl");
                    }
                    return Err(err);
                }
            }
        }
        Err(LockError::timeout(names.lock(), started.elapsed()))
    }

    /// Waits, holding the key as `guard`, until no reader holds a share: woken by the last
    /// reader's release, or at the soonest share's end should that reader have crashed.
    /// Each look renews the key's short waiting lease; the last gives it the writer's ttl.
    /// `Ok(false)` when the key was lost meanwhile.
    async fn drain(
        &self,
        client: &LockClient,
        names: &KeyNames,
        guard: &mut LockGuard,
        started: Instant,
        deadline: Instant,
    ) -> Result<bool, LockError> {
        let mut drain = Drain {
            options: &self.spec.options,
            client,
            names,
            guard,
            shares: ShareNames::of(names),
            waiting_lease: self.spec.options.ttl.min(DRAIN_LEASE),
            ticket: None,
            started,
            deadline,
            backoff: Backoff::new(),
        };
        wait::wait(&mut drain, client.telemetry().long_wait()).await
    }

    /// Tries once to read: [`read`](Self::read) with `wait` zero ([`LockError::Busy`] when a
    /// writer holds or waits for the key).
    pub async fn try_read(&self) -> Result<ReadGuard, LockError> {
        self.clone().wait(Duration::ZERO).read().await
    }

    /// Tries once to write: [`write`](Self::write) with `wait` zero ([`LockError::Busy`]
    /// when a reader or a writer holds the key).
    pub async fn try_write(&self) -> Result<LockGuard, LockError> {
        self.clone().wait(Duration::ZERO).write().await
    }

    /// Takes a reader's share, runs `body`, and gives the share back, also when `body`
    /// returns an error, panics, or the returned future is dropped: [`Lock::run`] for a
    /// reader. Inside `body`, [`crate::current_lock`] describes the share
    /// ([`CurrentLock::is_read`](crate::CurrentLock::is_read)).
    ///
    /// ```no_run
    /// use lock_runtime::{LockError, RwLock};
    ///
    /// # async fn demo() -> Result<(), LockError> {
    /// let title = RwLock::new("doc:1")
    ///     .run_read(async {
    ///         // ... read the document; other readers may run beside us ...
    ///         Ok::<_, LockError>("title".to_owned())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn run_read<F, T, E>(&self, body: F) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let span = tracing::debug_span!("distributed_lock", key = %self.kind.key, mode = "read");
        self.run_under(|| self.read(), body, span)
    }

    /// Takes the key for writing, runs `body`, and releases it, also when `body` returns an
    /// error, panics, or the returned future is dropped: [`Lock::run`] for a writer.
    ///
    /// ```no_run
    /// use lock_runtime::{LockError, RwLock};
    ///
    /// # async fn demo() -> Result<(), LockError> {
    /// RwLock::new("doc:1")
    ///     .run_write(async {
    ///         // ... change the document: no reader, no other writer ...
    ///         Ok::<(), LockError>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn run_write<F, T, E>(&self, body: F) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let span = tracing::debug_span!("distributed_lock", key = %self.kind.key, mode = "write");
        self.run_under(|| self.write(), body, span)
    }
}
