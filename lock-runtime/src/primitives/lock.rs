//! The programmatic API: a lock built from a key and options, acquired into a guard.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::context;
use crate::deadlock::Watcher;
use crate::lease::{Taken, Token};
use crate::lease_parts::LeaseParts;
use crate::ops::seen_holder::with_holder;
use crate::options::Taker;
use crate::primitives::builder::{LockBuilder, with_client};
use crate::primitives::guard::{LeaseOrigin, LockGuard};
use crate::primitives::kind::Exclusive;
use crate::queue::cohort::{self, Holding, Member, Tenure, Unclaimed};
#[cfg(feature = "redlock")]
use crate::queue::quorum_wait;
use crate::queue::redis_queue::place::Place;
use crate::queue::redis_queue::{self, Alone, release::give_back};
use crate::queue::wait_context::WaitContext;
use crate::renewal::watchdog::{LeaseHandle, Retake};
use crate::scripts::KeyNames;
use crate::topology::deployment::ByDeployment;
#[cfg(feature = "redlock")]
use crate::topology::redlock::{self, Redlock};
use crate::turn::Turn;
use crate::{client::LockClient, error::LockError};

/// Waits longer than this (say `Duration::MAX`, "wait forever") are waited this long, so
/// that deadlines stay representable.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl LockClient {
    /// A lock on `key` taken through this client (options default; see [`Lock`]).
    #[track_caller]
    pub fn lock(&self, key: impl Into<String>) -> Lock {
        Lock::new(key).client(self)
    }
}

/// A distributed lock on one key: build it, then [`acquire`](Lock::acquire) a guard or
/// [`run`](Lock::run) a future under it.
///
/// This is what `#[distributed_lock]` expands to; use it directly for keys computed at run
/// time or for locks held across calls. Its options are set with [`LockBuilder`]'s setters,
/// every one of which a lock takes.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{Lock, LockError, ReleaseOutcome};
///
/// # async fn demo(order_id: u64) -> Result<(), LockError> {
/// let guard = Lock::new(format!("order:{order_id}"))
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// // ... the critical section ...
/// assert_eq!(guard.release().await?, ReleaseOutcome::Released);
/// # Ok(()) }
/// ```
pub type Lock = LockBuilder<Exclusive>;

/// What the first step of an acquisition came to (see [`Lock::enter`]). It lives for one
/// step, on the stack: boxing the guard would add an allocation to the uncontended path.
#[allow(clippy::large_enum_variant)]
enum Entered {
    /// The key, taken by a task alone on it.
    Alone(LockGuard),
    /// The key's local queue, joined (after a try alone that found the key held: true).
    Joined(Member, bool),
}

impl Lock {
    /// A lock on `key` with default options, on the global client.
    ///
    /// The line that calls this is the lock's call site in the reports of the lock-order
    /// check ([`Config::lock_order_check`](crate::Config::lock_order_check)).
    #[track_caller]
    pub fn new(key: impl Into<String>) -> Self {
        LockBuilder::of(Exclusive { key: key.into() })
    }

    /// Names the class of this lock for the lock-order check
    /// ([`Config::lock_order_check`](crate::Config::lock_order_check)); by default the key
    /// is its class. Give the template the key is made from, so that the orders of all its
    /// keys count as one, as the attribute does for its `key`:
    ///
    /// ```no_run
    /// use lock_runtime::{Lock, LockError};
    ///
    /// # async fn demo(id: u64) -> Result<(), LockError> {
    /// Lock::new(format!("stock:{id}"))
    ///     .order_class("stock:<id>")
    ///     .run(async { Ok::<(), LockError>(()) })
    ///     .await
    /// # }
    /// ```
    pub fn order_class(mut self, class: impl Into<Cow<'static, str>>) -> Self {
        self.spec.order.class = Some(class.into());
        self
    }

    /// Acquires the lock, waiting up to `wait` while another owner holds it.
    ///
    /// Waiters are served in arrival order, across processes: a task that releases and asks
    /// again queues behind those already waiting. A waiter parks until the release wakes it
    /// (or until the holder's lease would end, should the holder crash), never in a poll loop.
    ///
    /// Inside a guarded body (`#[distributed_lock]` or [`run`](Lock::run)) that already
    /// holds this key, this returns at once without a Redis round trip: the task owns it.
    ///
    /// Errors: [`LockError::Busy`] when held and `wait` is zero, [`LockError::Timeout`]
    /// when still held after `wait`, [`LockError::InvalidKey`] before any Redis traffic,
    /// [`LockError::Backend`] when Redis fails.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        let (client, lock) = with_client(self, &self.kind.key)?;
        lock.acquire_through(client).await
    }

    async fn acquire_through(&self, client: LockClient) -> Result<LockGuard, LockError> {
        let names = Arc::new(client.key_names(&self.kind.key)?);
        if let Some(held) = context::held_by_this_task(client.id(), names.lock()) {
            if held.is_read() {
                return Err(LockError::upgrade_refused(names.lock()));
            }
            return Ok(LockGuard::reentrant(client.parts().clone(), names, &held));
        }
        let order = self
            .spec
            .check_order(&client, &self.kind.key, names.lock())?;
        let started = Instant::now();
        let telemetry = client.telemetry();
        // The wait's future is made in each arm: one that is not watched is not moved. A
        // watched one (a nested lock's) is boxed, so that this future does not grow by it
        // (nested guarded bodies hold one each).
        let acquired = match Watcher::for_task(&client, self.spec.options.wait) {
            Some(watcher) => {
                let acquire = self.acquire_new(&client, &names, started);
                Box::pin(watcher.watch(&client, &names, acquire)).await
            }
            None => self.acquire_new(&client, &names, started).await,
        };
        match acquired {
            Ok(guard) => {
                // Read off the guard: its hold began when the lock was taken.
                let waited = guard.acquired_at().saturating_duration_since(started);
                telemetry.acquired(guard.key(), waited);
                Ok(guard.ordered(order))
            }
            Err(err) => {
                let err = with_holder(client.reach(), &names, err).await;
                telemetry.refused(&err, started.elapsed());
                Err(err)
            }
        }
    }

    /// A lock this task does not hold yet, taken within its wait from `started` (the
    /// client and the names are borrowed: a guard clones them once it is made).
    async fn acquire_new(
        &self,
        client: &LockClient,
        names: &Arc<KeyNames>,
        started: Instant,
    ) -> Result<LockGuard, LockError> {
        self.check_options(names.lock())?;
        client.shutdown_state().check_open(names.lock())?;
        let deadline = started + self.spec.options.wait.min(MAX_WAIT);
        let window = (started, deadline);
        let (member, tried_alone) = match self.enter(client, names, window).await? {
            Entered::Alone(guard) => return Ok(guard),
            Entered::Joined(member, tried_alone) => (member, tried_alone),
        };
        let turn = self.turn(&member, (client, names.lock()), window).await?;
        // The task before us passed the lock on: take it over.
        let mut unclaimed = Unclaimed::new(&member);
        if let Some(tenure) = unclaimed.tenure() {
            let taken = self.take_over(client, names, tenure).await;
            // Claimed either way: taken over, or (`None`) its lease already given back.
            if let (Some(tenure), Some((lease, fence))) = (unclaimed.claim(), taken) {
                drop(unclaimed);
                let local = Holding::new(member, turn, (Some(&tenure), tenure.began), true);
                return Ok(LockGuard::new(
                    client.parts().clone(),
                    names.clone(),
                    tenure.token,
                    fence,
                    &self.spec.options,
                    LeaseOrigin::Passed(lease),
                    Some(local),
                ));
            }
        }
        drop(unclaimed);
        // Lead the process's wait in Redis: through the key's queue on one server (a
        // cluster's node, a Sentinel's primary), or across the Redlock masters.
        let lead = LeadWait {
            lock: self,
            client,
            names,
            member: (&member, tried_alone),
            window,
        };
        let taken = client.reach().deployment().take(lead).await?;
        Ok(self.new_guard(client.parts(), names.clone(), Some((member, turn)), taken))
    }

    /// The turn in the key's local queue: at once (or `Busy`) with `wait` zero, else by the
    /// deadline (or `Timeout`). A task behind another of this process is counted as
    /// waiting while it waits here.
    async fn turn(
        &self,
        member: &Member,
        (client, key): (&LockClient, &str),
        (started, deadline): (Instant, Instant),
    ) -> Result<Turn, LockError> {
        let now = member.try_turn();
        if self.spec.options.wait.is_zero() || now.is_some() {
            return now.ok_or_else(|| LockError::Busy {
                key: key.to_owned(),
            });
        }
        let _waiting = client.telemetry().wait_started(key, started.into_std());
        (member.turn(deadline).await).ok_or_else(|| LockError::timeout(key, started.elapsed()))
    }

    /// The first step of an acquisition: the key's local queue, behind the tasks of this
    /// process that want the key. A task alone on the key tries it in Redis at once (where
    /// [`may_try_alone`](Self::may_try_alone)), and joins the local queue only when that
    /// found it held (then true: its wait in Redis starts with the script).
    async fn enter(
        &self,
        client: &LockClient,
        names: &Arc<KeyNames>,
        window: (Instant, Instant),
    ) -> Result<Entered, LockError> {
        if let Some(member) = cohort::join_if_wanted(client, names) {
            return Ok(Entered::Joined(member, false));
        }
        if !self.may_try_alone(client) {
            return Ok(Entered::Joined(cohort::join(client, names), false));
        }
        let shutdown = client.shutdown_state();
        // A shutdown meanwhile waits until the lease is registered, then gives it back.
        let _in_flight = (!self.spec.options.wait.is_zero()).then(|| shutdown.try_in_flight());
        let token = client.new_token(self.spec.options.ttl, &self.spec.order.site);
        let context = WaitContext::of(client);
        let alone = redis_queue::try_alone(&context, names, &token, &self.spec.options, window);
        if let Alone::Taken(taken) = alone.await? {
            let guard = self.new_guard(client.parts(), names.clone(), None, (token, taken));
            return Ok(Entered::Alone(guard));
        }
        Ok(Entered::Joined(cohort::join(client, names), true))
    }

    /// The guard of a lock the process's task just took in Redis (with its turn in the
    /// local queue, or alone on the key: none).
    fn new_guard(
        &self,
        parts: &Arc<LeaseParts>,
        names: Arc<KeyNames>,
        local: Option<(Member, Turn)>,
        (token, taken): (Token, Taken),
    ) -> LockGuard {
        let local = local
            .map(|(member, turn)| Holding::new(member, turn, (None, taken.answered), taken.queued));
        let watchdog = taken.queued.then(|| parts.watchdog().clone());
        let guard = LockGuard::new(
            parts.clone(),
            names,
            token,
            taken.fence,
            &self.spec.options,
            LeaseOrigin::Taken(taken.sent, taken.answered),
            local,
        );
        if let Some(watchdog) = watchdog {
            // Taken after queueing: other waiters may wait for this holder's process.
            watchdog.mark_contended(guard.lease_id());
        }
        guard
    }

    /// Whether the first step of the wait in Redis is a plain `SET NX PX` that a task alone
    /// on the key may send before it makes the key's local queue: no fence wanted, one
    /// server (a cluster's node, a Sentinel's primary; not Redlock), grants that wait for
    /// no replica.
    fn may_try_alone(&self, client: &LockClient) -> bool {
        !self.spec.options.fencing
            && client.reach().deployment().queues()
            && client.reach().replicas().is_none()
    }

    /// Refuses what a lock cannot do with its options, before any traffic (see
    /// [`LockOptions::check_for`](crate::options::LockOptions::check_for)).
    pub(crate) fn check_options(&self, key: &str) -> Result<(), LockError> {
        (self.spec.options).check_for(Taker::Lock, key)
    }

    /// Takes over the lock the process holds from the task before this one. Free when this
    /// task's options match the lease (same ttl, watchdog on, no fence); otherwise one
    /// owner-checked round trip gives the lease this task's ttl and, with fencing, a fresh
    /// fence. `None` when the lease is gone (lost meanwhile, or that round trip failed: the
    /// lock is given back): the caller takes the lock in Redis, where a failing Redis is
    /// tried again within the wait.
    async fn take_over(
        &self,
        client: &LockClient,
        names: &KeyNames,
        tenure: &Tenure,
    ) -> Option<(LeaseHandle, Option<u64>)> {
        let options = &self.spec.options;
        let as_is =
            tenure.renew && options.watchdog && tenure.ttl == options.ttl && !options.fencing;
        let (retake, fence) = if as_is {
            (None, None)
        } else {
            let sent = Instant::now();
            match client.reach().retake(names, &tenure.token, options).await {
                Ok(Some(fence)) => {
                    let retake = Retake {
                        ttl: options.ttl,
                        renew: options.watchdog,
                        sent,
                    };
                    (Some(retake), fence)
                }
                Ok(None) => {
                    client.parts().watchdog().remove(tenure.lease);
                    return None;
                }
                Err(err) => {
                    tracing::debug!(key = %names.lock(), error = %err.cause(), "taking a passed lock over failed; taking it in Redis");
                    client.parts().watchdog().remove(tenure.lease);
                    give_back(
                        (client.reach(), client.shutdown_state()),
                        names,
                        &tenure.token,
                    );
                    return None;
                }
            }
        };
        let lease = (client.parts().watchdog()).hand_over(tenure.lease, retake, options.max_hold);
        if lease.is_none() {
            // Lost meanwhile: the watchdog gave up on it, and the key may still hold it.
            give_back(
                (client.reach(), client.shutdown_state()),
                names,
                &tenure.token,
            );
        }
        lease.map(|lease| (lease, fence))
    }

    /// Leads the process's wait in the Redis queue, with its place there (one is made for
    /// the first wait). A wait that ends without the lock leaves the place for the
    /// process's other waiting tasks, or leaves the queue when there are none.
    async fn acquire_in_redis(
        &self,
        client: &LockClient,
        names: &Arc<KeyNames>,
        (member, tried_alone): (&Member, bool),
        window: (Instant, Instant),
    ) -> Result<(Token, Taken), LockError> {
        let mut place = member.take_place().unwrap_or_else(|| {
            let token = client.new_token(self.spec.options.ttl, &self.spec.order.site);
            let place = Place::new(client.parts(), names, token, false);
            // Found held just now: the wait starts with the script.
            if tried_alone {
                place.after_try_alone()
            } else {
                place
            }
        });
        let mut ticket = member.take_ticket();
        let taken = redis_queue::acquire(
            WaitContext::of(client),
            names,
            &self.spec.options,
            &mut place,
            &mut ticket,
            window,
        )
        .await;
        member.put_ticket(ticket);
        match taken {
            Ok(taken) => Ok((place.into_token(), taken)),
            Err(err) => {
                // A wait that ran out leaves before reporting, but never past the overrun
                // bound; after a Redis error the place leaves in the background as it is
                // dropped (a synchronous leave would wait on the failing Redis again).
                if let Some(place) = member.keep_place(place)
                    && matches!(err, LockError::Timeout { .. })
                {
                    place
                        .leave(window.1 + client.reach().response_timeout())
                        .await;
                }
                Err(err)
            }
        }
    }

    /// Tries once: the lock, or [`LockError::Busy`] at once when another owner holds it
    /// (also another task of this process). The same as `wait(Duration::ZERO)`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// match lock_runtime::Lock::new("nightly-report").try_acquire().await {
    ///     Ok(guard) => { /* ... this replica runs the report ... */ guard.release().await?; }
    ///     Err(lock_runtime::LockError::Busy { .. }) => { /* another replica runs it */ }
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<LockGuard, LockError> {
        self.clone().wait(Duration::ZERO).acquire().await
    }

    /// Acquires the lock, runs `body`, and releases the lock, also when `body` returns an
    /// error, panics, or the returned future is dropped.
    ///
    /// On a lock error the body does not run and the error comes back as `E`. With
    /// [`OnLost::Cancel`](crate::OnLost::Cancel), a lease lost while `body` runs drops `body` at its next await
    /// point and returns [`LockError::Lost`]. Inside `body`, [`crate::current_lock`] describes
    /// this lock, and a nested lock on the same key in the same task is reentrant.
    ///
    /// A loss found only at the release (the key gone, or held by another owner: a failover
    /// that promoted a replica without the key, an eviction between two renewals) is a loss
    /// too: WARNed and counted, and with [`OnLost::Cancel`](crate::OnLost::Cancel) the call returns
    /// [`LockError::Lost`] with [`LostCause::FoundAtRelease`](crate::LostCause::FoundAtRelease)
    /// instead of the body's result. The body ran to its end then: its effects may have
    /// happened without the lock. With [`OnLost::Continue`](crate::OnLost::Continue) the body's result is returned
    /// and its [`current_lock`](crate::current_lock) reads lost.
    pub fn run<F, T, E>(&self, body: F) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let span = tracing::debug_span!("distributed_lock", key = %self.kind.key);
        self.run_under(|| self.acquire(), body, span)
    }
}

/// A process's wait for the lock in Redis, led by one task of the process (the others
/// wait in the local queue), in the deployment's form.
struct LeadWait<'a> {
    lock: &'a Lock,
    client: &'a LockClient,
    names: &'a Arc<KeyNames>,
    /// The task's place in the local queue, and whether it just found the key held.
    member: (&'a Member, bool),
    window: (Instant, Instant),
}

impl ByDeployment for LeadWait<'_> {
    type Output = Result<(Token, Taken), LockError>;

    /// Through the key's fair queue.
    async fn one_node(self) -> Self::Output {
        let LeadWait {
            lock,
            client,
            names,
            member,
            window,
        } = self;
        lock.acquire_in_redis(client, names, member, window).await
    }

    /// In rounds on every master, through the one wait loop.
    #[cfg(feature = "redlock")]
    async fn quorum(self, redlock: &Redlock) -> Self::Output {
        let masters = redlock::Masters {
            nodes: self.client.reach().nodes(),
            shutdown: self.client.shutdown_state(),
            interrupt: self.client.interrupt(),
            long_wait: self.client.telemetry().long_wait(),
            tokens: (self.client.parts().tokens(), &self.lock.spec.order.site),
            telemetry: self.client.telemetry(),
        };
        let options = &self.lock.spec.options;
        quorum_wait::acquire(masters, redlock, self.names, options, self.window).await
    }
}
