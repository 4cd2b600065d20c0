//! The semaphore: at most N holders of a key at once, each permit a lease of its own.
//!
//! A thin front over the mutex's parts: the permits are a sorted set in Redis (token ->
//! lease end in server time, `lua/semaphore_permits.lua`), taken by `semaphore_acquire.lua`
//! and renewed, released and given back at shutdown by the very scripts and watchdog that
//! serve locks (they turn to the permits for a permit's token, `permit:…`). Waiters queue in the key's
//! Redis queue in arrival order, each task as its own place, kept by its process's liveness
//! key as a lock's waiter is (one refresh per period, whatever number of keys the process
//! waits on), and are woken by the key's release messages. A holder that crashes gives its
//! permit back when its lease ends (its ttl); a waiter that crashes holds the others up about
//! a second (one liveness lease), wherever it stands among those the free permits are owed
//! to.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Token, jitter, validity};
use crate::ops::seen_holder::with_holder;
use crate::options::Taker;
use crate::primitives::builder::{LockBuilder, LockSpec, with_client};
use crate::primitives::kind::Permits;
use crate::primitives::lock::MAX_WAIT;
#[cfg(feature = "redlock")]
use crate::primitives::permit_slots::take_slot;
use crate::primitives::semaphore_guard::SemaphoreGuard;
use crate::queue::redis_queue::LONG_PARK;
use crate::queue::redis_queue::place::Place;
use crate::queue::redis_queue::release::release_script;
use crate::queue::wait::{self, Backoff, Step, Waiting, ride_out};
use crate::queue::wait_context::WaitContext;
use crate::scripts::{KeyNames, QUEUE_LEASE, invoke_granting};
use crate::scripts::{PermitTry, semaphore_acquire_call};
use crate::topology::deployment::ByDeployment;
use crate::topology::reach::Reach;
#[cfg(feature = "redlock")]
use crate::topology::redlock::Redlock;
use crate::wakeups::WaitTicket;
use crate::{client::LockClient, error::LockError};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

impl LockClient {
    /// A semaphore of `permits` on `key` taken through this client (see [`Semaphore`]).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let permit = locks.semaphore("partner-api", 10).acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn semaphore(&self, key: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(key, permits).client(self)
    }
}

/// A distributed semaphore: at most `permits` holders of `key` at once, across every
/// process that shares the Redis. Each permit is a lease of its own, renewed by the
/// watchdog while held, so the permit of a holder that crashed comes back after its ttl.
///
/// Waiters are served in arrival order across processes and woken by the releases (no
/// polling). A waiting process that dies or stops holds the others up about a second.
///
/// All holders of a key must use the same number of permits: it is recorded with the key
/// while anyone holds it, and an acquisition with another number fails with
/// [`LockError::Config`] naming the key and both numbers (once nobody holds the key, the
/// next acquisition records its own). A semaphore is not reentrant: a task that acquires
/// twice holds two permits. Its options are [`LockBuilder`]'s setters, but a permit takes
/// no fencing token and no minimum hold.
///
/// In Redlock mode (independent masters, no single order of holders) each permit is one of
/// `permits` numbered slots, each a lock of its own on a majority of the masters, so never
/// more than `permits` hold at once; at most [`MAX_REDLOCK_PERMITS`](crate::MAX_REDLOCK_PERMITS)
/// permits, waiters are not served in arrival order, and a different count per holder is
/// not detected there.
///
/// `#[distributed_lock(key = "...", permits = 3)]` expands to [`Semaphore::run`].
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{LockError, Semaphore};
///
/// # async fn export(tenant: &str) -> Result<(), LockError> {
/// // At most 3 exports per tenant at once, across the fleet.
/// let permit = Semaphore::new(format!("export:{tenant}"), 3)
///     .ttl(Duration::from_secs(30))
///     .wait(Duration::from_secs(60))
///     .acquire()
///     .await?;
/// // ... the export ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
pub type Semaphore = LockBuilder<Permits>;

impl Semaphore {
    /// A semaphore of `permits` on `key` with default options (ttl 30 s, wait 10 s,
    /// watchdog on, [`OnLost::Cancel`](crate::OnLost::Cancel)), on the global client.
    ///
    /// The line that calls this is its call site for the lock-order check, where the key
    /// is its class.
    #[track_caller]
    pub fn new(key: impl Into<String>, permits: u32) -> Self {
        LockBuilder::of(Permits {
            key: key.into(),
            permits,
        })
    }

    /// How many holders the key admits at once.
    pub fn permits(&self) -> u32 {
        self.kind.permits
    }

    /// Tries once: a permit, or [`LockError::Busy`] at once when none is free (or the free
    /// ones are owed to earlier waiters). The same as `wait(Duration::ZERO)`.
    pub async fn try_acquire(&self) -> Result<SemaphoreGuard, LockError> {
        self.clone().wait(Duration::ZERO).acquire().await
    }

    /// Acquires a permit, waiting up to `wait` while all are held.
    ///
    /// Errors: [`LockError::Busy`] when none is free and `wait` is zero,
    /// [`LockError::Timeout`] when none came within `wait`, [`LockError::Config`] for a
    /// permit count of zero or over [`MAX_PERMITS`], one other than the key's holders use,
    /// a ttl out of range, an option only locks take, or over
    /// `MAX_REDLOCK_PERMITS` in Redlock mode;
    /// [`LockError::InvalidKey`] for a bad key or one that holds a lock (not a
    /// semaphore), [`LockError::Backend`] when Redis fails.
    pub async fn acquire(&self) -> Result<SemaphoreGuard, LockError> {
        let (client, semaphore) = with_client(self, &self.kind.key)?;
        semaphore.acquire_through(client).await
    }

    async fn acquire_through(&self, client: LockClient) -> Result<SemaphoreGuard, LockError> {
        let names = Arc::new(client.key_names(&self.kind.key)?);
        let order = self
            .spec
            .check_order(&client, &self.kind.key, names.lock())?;
        let started = Instant::now();
        let telemetry = client.telemetry().clone();
        match self.acquire_permit(client.clone(), names.clone()).await {
            Ok(guard) => {
                telemetry.acquired(guard.key(), started.elapsed());
                Ok(guard.ordered(order))
            }
            Err(err) => {
                let err = with_holder(client.reach(), &names, err).await;
                telemetry.refused(&err, started.elapsed());
                Err(err)
            }
        }
    }

    /// Refuses what a semaphore cannot do, before any traffic.
    fn check(&self, client: &LockClient, key: &str) -> Result<(), LockError> {
        let refuse = |why: String| Err(LockError::config(format!("semaphore `{key}` {why}")));
        let permits = self.kind.permits;
        if permits == 0 || permits > MAX_PERMITS {
            return refuse(format!(
                "has {permits} permits; give it from 1 to {MAX_PERMITS} (1 is a mutex)"
            ));
        }
        (self.spec.options).check_for(Taker::Semaphore, key)?;
        if let Some(most) = client.reach().deployment().most_permits()
            && permits > most
        {
            return refuse(format!(
                "has {permits} permits; on independent masters (Redlock) each permit is a \
                 lock that a try asks for in turn, so give it from 1 to {most}"
            ));
        }
        Ok(())
    }

    async fn acquire_permit(
        &self,
        client: LockClient,
        names: Arc<KeyNames>,
    ) -> Result<SemaphoreGuard, LockError> {
        self.check(&client, names.lock())?;
        client.shutdown_state().check_open(names.lock())?;
        let started = Instant::now();
        let deadline = started + self.spec.options.wait.min(MAX_WAIT);
        let take = TakePermit {
            semaphore: self,
            client: &client,
            names,
            window: (started, deadline),
        };
        client.reach().deployment().take(take).await
    }

    /// A permit from the key's permit set, waiting in the key's queue (one node).
    async fn permit_in_queue(
        &self,
        client: &LockClient,
        names: Arc<KeyNames>,
        (started, deadline): (Instant, Instant),
    ) -> Result<SemaphoreGuard, LockError> {
        let overrun = deadline + client.reach().response_timeout();
        let mut wait = PermitWait {
            semaphore: self,
            client,
            place: Place::new(
                client.parts(),
                &names,
                permit_token(client, &self.spec),
                false,
            ),
            ticket: None,
            started,
            deadline,
            overrun,
            backoff: Backoff::new(),
            lapses: 0,
            heads: false,
        };
        wait::wait(&mut wait, client.telemetry().long_wait()).await
    }

    /// One call of the acquire script: `(code, value)` as it returns them, and whether a
    /// queue entry it made lives by its deadline (it names no liveness key of the process:
    /// the watchdog keeps it per key), as a lock's does.
    async fn try_once(
        &self,
        client: &LockClient,
        place: &Place,
    ) -> Result<(TryReply, bool), LockError> {
        let names = &place.names;
        let alive = client.parts().liveness_key(names.lock());
        let permit = PermitTry {
            token: &place.token,
            ttl: self.spec.options.ttl,
            permits: self.kind.permits,
            may_wait: !self.spec.options.wait.is_zero(),
            publish: client.reach().publish_command(),
            alive: alive.as_deref(),
        };
        let call = semaphore_acquire_call(names, &permit);
        let replicas = (client.reach().replicas(), names.lock());
        let reply = invoke_granting(&call, replicas, &mut client.reach().connection()).await?;
        Ok((reply, alive.is_none()))
    }

    /// Acquires a permit, runs `body`, and gives the permit back, also when `body` returns
    /// an error, panics, or the returned future is dropped.
    ///
    /// On a lock error the body does not run and the error comes back as `E`. With
    /// [`OnLost::Cancel`](crate::OnLost::Cancel), a lease lost while `body` runs drops `body` at its next await
    /// point and returns [`LockError::Lost`]. Inside `body`, [`crate::current_lock`]
    /// describes the permit (its key, whether it was lost).
    ///
    /// ```no_run
    /// use lock_runtime::{LockError, Semaphore};
    ///
    /// # async fn call_partner() -> Result<u32, LockError> {
    /// // At most 10 calls to the partner's API at once, across the fleet.
    /// Semaphore::new("partner-api", 10)
    ///     .run(async { /* ... the call ... */ Ok::<_, LockError>(200) })
    ///     .await
    /// # }
    /// ```
    pub fn run<F, T, E>(&self, body: F) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let span =
            tracing::debug_span!("semaphore", key = %self.kind.key, permits = self.kind.permits);
        self.run_under(|| self.acquire(), body, span)
    }

    /// The error for a key whose holders use `held` permits, not this semaphore's count.
    fn other_permits(&self, key: &str, held: i64) -> LockError {
        LockError::config(format!(
            "semaphore `{key}` is held with {held} permits, this caller asks for {}; \
             every holder of a key must use the same number of permits",
            self.kind.permits
        ))
    }
}

/// One task's acquisition of a permit of `semaphore` (`names`: its key), within `window`,
/// in its deployment's form.
struct TakePermit<'a> {
    semaphore: &'a Semaphore,
    client: &'a LockClient,
    names: Arc<KeyNames>,
    /// When the wait started, and when it ends.
    window: (Instant, Instant),
}

impl ByDeployment for TakePermit<'_> {
    type Output = Result<SemaphoreGuard, LockError>;

    /// A member of the key's permit set, in the key's queue.
    async fn one_node(self) -> Self::Output {
        let TakePermit {
            semaphore,
            client,
            names,
            window,
        } = self;
        semaphore.permit_in_queue(client, names, window).await
    }

    /// A slot on a majority of the masters ([`take_slot`]).
    #[cfg(feature = "redlock")]
    async fn quorum(self, redlock: &Redlock) -> Self::Output {
        let semaphore = self.semaphore;
        let key = (&*self.names, semaphore.kind.permits);
        let (slot, token, sent) =
            take_slot(self.client, key, &semaphore.spec, redlock, self.window).await?;
        let names = (self.names, slot);
        let held = (&semaphore.spec.options, semaphore.kind.permits);
        Ok(SemaphoreGuard::new(self.client, names, token, held, sent))
    }
}

/// A new permit's token: a token of ours (naming its process, see [`crate::identity`])
/// behind `permit:`, by which
/// the scripts shared with locks (renewal, release, leaving the queue: also the watchdog's
/// and the shutdown's) know to serve a permit (`is_permit` in `semaphore_permits.lua`).
fn permit_token(client: &LockClient, spec: &LockSpec) -> Token {
    let token = client.new_token(spec.options.ttl, &spec.order.site);
    Token::from(format!("permit:{token}"))
}

/// One task's wait for a permit (see [`wait::wait`]): its try is one call of the acquire
/// script, which queues it behind earlier waiters.
struct PermitWait<'a> {
    semaphore: &'a Semaphore,
    client: &'a LockClient,
    place: Place,
    ticket: Option<WaitTicket>,
    started: Instant,
    deadline: Instant,
    /// No try may keep the caller past its wait by more than one response timeout.
    overrun: Instant,
    backoff: Backoff,
    /// How many times the client's liveness key was found lapsed, as the last try saw it.
    lapses: u64,
    /// Whether the last try found this waiter at the head of the queue.
    heads: bool,
}

impl PermitWait<'_> {
    /// A permit the try granted: the guard when the reply came within the lease's
    /// validity, else (it holds nothing) given back before another try.
    async fn granted(&mut self, names: Arc<KeyNames>, sent: Instant) -> Step<SemaphoreGuard> {
        let client = self.client;
        if Instant::now() < validity(sent, self.semaphore.spec.options.ttl) {
            self.place.settle();
            let token = std::mem::take(&mut self.place.token);
            let names = (names.clone(), names);
            let held = (&self.semaphore.spec.options, self.semaphore.kind.permits);
            return Step::Done(SemaphoreGuard::new(client, names, token, held, sent));
        }
        tracing::warn!(key = %names.lock(), "permit reply arrived after the lease validity; retrying");
        let _ = release_script(client.reach(), &names, &self.place.token, Instant::now()).await;
        Step::Again
    }

    /// A permit too few replicas confirmed does not count: given back, then tried again
    /// within the wait as a lock's grant is (or `shortfall` when no room is left).
    async fn undo(
        &mut self,
        shortfall: LockError,
        sent: Instant,
    ) -> Result<Step<SemaphoreGuard>, LockError> {
        let undo_by = validity(sent, self.semaphore.spec.options.ttl).min(self.overrun);
        self.place.undo_unconfirmed(undo_by).await;
        let once = self.semaphore.spec.options.wait.is_zero();
        wait::after_shortfall(shortfall, &self.backoff, once, self.deadline).await
    }
}

/// semaphore_acquire.lua's reply (`{code, value, heads}`), and the error to give when too
/// few replicas confirmed a permit it granted.
type TryReply = ((i64, i64, i64), Option<LockError>);

impl Waiting for PermitWait<'_> {
    type Taken = SemaphoreGuard;

    async fn attempt(&mut self) -> Result<Step<SemaphoreGuard>, LockError> {
        let (client, names) = (self.client, self.place.names.clone());
        let context = WaitContext::of(client);
        context.may_try(names.lock())?;
        if let Some(liveness) = context.liveness {
            self.lapses = liveness.lapses();
        }
        // A shutdown meanwhile waits until the reply's place or permit is registered.
        let _in_flight = context.shutdown.try_in_flight();
        let sent = Instant::now();
        // Until the reply says otherwise, this try may have queued us or given us a
        // permit: giving up now must clean both.
        self.place.joined = true;
        let reply =
            tokio::time::timeout_at(self.overrun, self.semaphore.try_once(client, &self.place))
                .await
                .map_err(|_| self.timeout())?;
        let (((code, value, heads), shortfall), per_key) = match reply {
            Ok(reply) => reply,
            Err(err) => {
                ride_out(
                    &context,
                    names.lock(),
                    err,
                    self.deadline,
                    &mut self.backoff,
                )
                .await?;
                return Ok(Step::Again);
            }
        };
        client.reach().mark_answered();
        if code == 1
            && let Some(shortfall) = shortfall
        {
            return self.undo(shortfall, sent).await;
        }
        match code {
            1 => return Ok(self.granted(names, sent).await),
            -1 => return Err(self.semaphore.other_permits(names.lock(), value)),
            -2 => return Err(not_a_semaphore(names.lock())),
            _ => {}
        }
        self.place
            .not_taken(self.semaphore.spec.options.wait.is_zero(), per_key);
        self.heads = heads == 1;
        Ok(Step::Park(Duration::from_millis(
            u64::try_from(value).unwrap_or(0),
        )))
    }

    fn bounds(&self) -> (&str, bool, Instant, Instant) {
        let once = self.semaphore.spec.options.wait.is_zero();
        (self.place.names.lock(), once, self.started, self.deadline)
    }

    fn ticket(&self) -> Option<&WaitTicket> {
        self.ticket.as_ref()
    }

    fn telemetry(&self) -> &crate::telemetry::Telemetry {
        self.client.telemetry()
    }

    fn looked_up(&self) -> Option<(&Arc<Reach>, &KeyNames)> {
        Some((self.client.reach(), &self.place.names))
    }

    async fn subscribe(&mut self) -> bool {
        let names = &self.place.names;
        let channel = (names.lock(), names.channel(), &*self.place.token);
        wait::subscribe(
            self.client.wakeups(),
            channel,
            &mut self.ticket,
            self.deadline,
        )
        .await
    }

    /// The head of the queue, its place kept by its process's liveness key, parks until the
    /// first permit's lease ends (its holder may have crashed; a renewal moves that end, and
    /// the try then finds the next one), unless a release wakes it first: the next permit
    /// that frees is its. Any other waiter parks at most one queue lease: a waiter ahead of
    /// it may be gone, and only a try drops it (and a place kept per key lives by its tries).
    async fn park(&mut self, retry_in: Duration) {
        let context = WaitContext::of(self.client);
        let key = self.place.names.lock();
        let kept = (self.ticket.as_ref())
            .filter(|ticket| self.heads && ticket.is_subscribed() && self.place.kept_by_liveness());
        let cap = kept.map_or(QUEUE_LEASE, |_| LONG_PARK);
        let park = (retry_in.min(cap))
            .saturating_add(jitter())
            .min(self.deadline.saturating_duration_since(Instant::now()));
        match kept {
            Some(ticket) => wait::park_kept(&context, (key, self.lapses), ticket, park, None).await,
            None => wait::park_on(&context, key, self.ticket.as_ref(), park).await,
        };
    }
}

/// The error for a key that holds a lock or another value, not a semaphore's permits.
fn not_a_semaphore(key: &str) -> LockError {
    LockError::InvalidKey {
        key: key.to_owned(),
        reason: "the key holds a lock or another value, not a semaphore's permits; give the \
                 semaphore a key of its own"
            .into(),
    }
}
