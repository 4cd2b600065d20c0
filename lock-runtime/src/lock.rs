//! The programmatic API: a lock built from a key and options, acquired into a guard.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::context;
use crate::guard::LockGuard;
use crate::redlock;
use crate::scripts::{ACQUIRE, KeyNames, LEAVE, QUEUE_LEASE, RELEASE, invoke, queue_call};
use crate::watchdog::{millis, validity};
use crate::{LockClient, LockError};

/// What happens when the lease is lost while a guarded body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body at its next await point and return [`LockError::Lost`].
    #[default]
    Cancel,
    /// Let the body finish; it can check `current_lock().is_lost()` or the guard.
    Continue,
}

/// How a lock behaves: lease, waiting, renewal, loss, fencing.
///
/// Defaults: `ttl` 30 s, `wait` 10 s, watchdog on, [`OnLost::Cancel`], no fencing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// The lease: how long Redis keeps the key without renewal (at most [`MAX_TTL`]).
    pub ttl: Duration,
    /// How long to wait for a held lock; zero tries once.
    pub wait: Duration,
    /// Renew the lease every `ttl/3` while held.
    pub watchdog: bool,
    /// What a guarded body does when the lease is lost.
    pub on_lost: OnLost,
    /// Issue a fencing token on every acquisition.
    pub fencing: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            watchdog: true,
            on_lost: OnLost::Cancel,
            fencing: false,
        }
    }
}

/// How long a fence counter outlives the last acquisition of its key.
///
/// Long enough that a stale holder's token is always compared against a newer counter;
/// after it, the counter is re-seeded from the server clock, which keeps tokens increasing.
pub const FENCE_COUNTER_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The longest lease a lock takes (365 days); a longer `ttl` is refused with
/// [`LockError::Config`] before any Redis traffic.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Waits longer than this (say `Duration::MAX`, "wait forever") are waited this long, so
/// that deadlines stay representable.
const MAX_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The longest a waiter parks without checking again, should a wake-up be lost (the
/// subscription reconnecting, a foreign client releasing without a message, a grant to a
/// waiter whose process died and lapses without any message). Releases wake the next
/// waiter at once; this bounds how long the waiters behind a dead one learn of its lapse
/// (one queue lease), so it is no longer than the queue lease.
const MAX_PARK: Duration = QUEUE_LEASE;

/// A distributed lock on one key: build it, then [`acquire`](Lock::acquire) a guard or
/// [`run`](Lock::run) a future under it.
///
/// This is what `#[distributed_lock]` expands to; use it directly for keys computed at run
/// time or for locks held across calls.
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
#[derive(Debug, Clone)]
pub struct Lock {
    key: String,
    options: LockOptions,
    client: Option<LockClient>,
}

enum Attempt {
    Acquired {
        fence: Option<u64>,
    },
    /// Held (or another waiter's turn): try again after at most this long.
    NotNow {
        retry_in: Duration,
    },
}

impl Lock {
    /// A lock on `key` with default options, on the global client.
    pub fn new(key: impl Into<String>) -> Self {
        Lock {
            key: key.into(),
            options: LockOptions::default(),
            client: None,
        }
    }

    /// Sets the lease (default 30 s, at most [`MAX_TTL`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    /// Sets how long to wait for a held lock (default 10 s; zero tries once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Turns renewal on or off (default on).
    pub fn watchdog(mut self, watchdog: bool) -> Self {
        self.options.watchdog = watchdog;
        self
    }

    /// Sets what [`run`](Lock::run) does when the lease is lost (default cancel).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.options.on_lost = on_lost;
        self
    }

    /// Issues a fencing token on every acquisition (default off).
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.options.fencing = fencing;
        self
    }

    /// Replaces all options at once.
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Takes the lock through `client` instead of the global one.
    pub fn client(mut self, client: &LockClient) -> Self {
        self.client = Some(client.clone());
        self
    }

    /// The key as given (without the client's prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    fn resolve_client(&self) -> Result<LockClient, LockError> {
        match &self.client {
            Some(client) => Ok(client.clone()),
            None => crate::client().cloned(),
        }
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
        let client = self.resolve_client()?;
        let names = KeyNames::new(client.redis_key(&self.key)?)?;
        if let Some(held) = context::held_by_this_task(client.id(), &names.lock) {
            return Ok(LockGuard::reentrant(client, names, &held));
        }
        self.acquire_new(client, names).await
    }

    async fn acquire_new(
        &self,
        client: LockClient,
        names: KeyNames,
    ) -> Result<LockGuard, LockError> {
        let ttl = self.options.ttl;
        if ttl < Duration::from_millis(1) {
            return Err(LockError::Config {
                reason: format!(
                    "lock `{}` has a ttl under 1 ms; give it a lease of at least 1ms",
                    names.lock
                ),
            });
        }
        if ttl > MAX_TTL {
            return Err(LockError::Config {
                reason: format!(
                    "lock `{}` has a ttl of {ttl:?}, over the maximum of 365 days; give it a \
                     shorter lease (the watchdog renews it for as long as it is held)",
                    names.lock
                ),
            });
        }
        if let Some(redlock) = client.redlock() {
            return self.acquire_redlock(&client, redlock, names).await;
        }
        let wait = self.options.wait.min(MAX_WAIT);
        let token = Uuid::new_v4().simple().to_string();
        let started = Instant::now();
        let deadline = started + wait;
        let mut seat = Seat::new(&client, &names, &token);
        // No local waiter on this key and no fence wanted: the first try is a plain
        // `SET NX PX`, the cheapest grant Redis has (a release leaves a contended key to the
        // next waiter, never free, so this cannot jump a queue).
        let mut quick = !self.options.fencing && !client.wakeups().has_waiters(&names.channel);
        // Join the local waiters at once when the key's subscription is already up: then
        // no release can slip between the first attempt and the wait.
        let mut ticket = if wait.is_zero() {
            None
        } else {
            client.wakeups().register(&names.channel, &token, true)
        };
        // No try may keep the caller past its wait by more than one response timeout.
        let overrun = deadline + client.response_timeout();
        let mut transient_pause = TRANSIENT_PAUSE;
        let mut attempts = 0u64;
        let mut late = false;
        loop {
            attempts += 1;
            let subscribed_before = ticket.as_ref().is_some_and(|ticket| ticket.is_subscribed());
            let sent = Instant::now();
            // Until the reply says otherwise, this try may have queued us or granted us the
            // lock: giving up now must clean both.
            seat.joined = true;
            let quick = std::mem::take(&mut quick);
            let attempt = try_acquire(&client, &names, &token, &self.options, quick);
            let attempt = match tokio::time::timeout_at(overrun, attempt).await {
                Ok(Ok(attempt)) => attempt,
                // A cluster moving the slot, a server loading or restarting, a reset
                // connection, a reply that timed out: worth another try in time (with the
                // same token, so a lost grant is found again). A server that never answered
                // is unreachable: reported at once, within the connect timeout.
                Ok(Err(err)) if is_retryable(&client, &err) && Instant::now() < deadline => {
                    tracing::debug!(key = %names.lock, error = %err, "transient error; retrying");
                    let pause = transient_pause.saturating_add(jitter());
                    tokio::time::sleep(pause.min(deadline - Instant::now())).await;
                    transient_pause = (transient_pause * 2).min(MAX_TRANSIENT_PAUSE);
                    continue;
                }
                Ok(Err(err)) => return Err(err),
                // The try outlasted the wait by a whole response timeout: give up; the seat
                // leaves the queue in the background.
                Err(_) => {
                    return Err(LockError::Timeout {
                        key: names.lock.clone(),
                        waited: started.elapsed(),
                    });
                }
            };
            let retry_in = match attempt {
                Attempt::Acquired { fence } if Instant::now() < validity(sent, ttl) => {
                    seat.joined = false;
                    tracing::debug!(
                        key = %names.lock,
                        waited_ms = started.elapsed().as_millis() as u64,
                        attempts,
                        "lock acquired"
                    );
                    return Ok(LockGuard::new(
                        client.clone(),
                        names.clone(),
                        token.clone(),
                        fence,
                        &self.options,
                        sent,
                    ));
                }
                Attempt::Acquired { .. } => {
                    // The reply came after the lease's validity point: it acquires nothing.
                    seat.joined = false;
                    tracing::warn!(key = %names.lock, "acquire reply arrived after the lease validity; retrying");
                    release_token(&client, &names, &token).await;
                    late = true;
                    Duration::ZERO
                }
                Attempt::NotNow { retry_in } => {
                    if !wait.is_zero() {
                        // This try queued us: from now on the watchdog keeps our place.
                        seat.keep_place();
                    }
                    retry_in
                }
            };
            let now = Instant::now();
            if wait.is_zero() && !late {
                // Tried once without joining the queue: nothing to clean.
                seat.joined = false;
                return Err(LockError::Busy {
                    key: names.lock.clone(),
                });
            }
            if now >= deadline {
                // Leave the queue before reporting, but never past the overrun bound: a seat
                // still joined then leaves in the background when it is dropped.
                if let Ok(Ok(())) =
                    tokio::time::timeout_at(overrun, leave_queue(&client, &names, &token)).await
                {
                    seat.joined = false;
                }
                return Err(LockError::Timeout {
                    key: names.lock.clone(),
                    waited: now - started,
                });
            }
            let ticket = match &mut ticket {
                Some(ticket) => ticket,
                empty => empty.insert(
                    client
                        .wakeups()
                        .register(&names.channel, &token, false)
                        .ok_or_else(|| LockError::Config {
                            reason: "waiter registry refused an unconditional registration".into(),
                        })?,
                ),
            };
            if !subscribed_before {
                // Subscribe, then try again at once: a release between the attempt and the
                // subscription would otherwise go unheard.
                match tokio::time::timeout_at(deadline, ticket.subscribe()).await {
                    Ok(Ok(())) => continue,
                    Ok(Err(err)) => tracing::warn!(
                        key = %names.lock,
                        error = %err,
                        "cannot subscribe to release messages; waiting for the lease instead"
                    ),
                    Err(_) => continue,
                }
            }
            let park = retry_in
                .min(MAX_PARK)
                .saturating_add(jitter())
                .min(deadline - Instant::now());
            ticket.wait(park).await;
            if ticket.take_grant() {
                // The release granted us the lock for its confirmation window: the next try
                // finds our token and takes the key for our whole ttl, so the lease is dated
                // from that try, as any other. A grant that lapsed meanwhile (this process
                // was too slow to confirm) queues us again instead.
                continue;
            }
        }
    }

    /// Redlock mode: rounds on every master until a majority grants a valid lease.
    async fn acquire_redlock(
        &self,
        client: &LockClient,
        redlock: &crate::client::Redlock,
        names: KeyNames,
    ) -> Result<LockGuard, LockError> {
        let ttl = self.options.ttl;
        let wait = self.options.wait.min(MAX_WAIT);
        let started = Instant::now();
        let deadline = started + wait;
        let mut backoff = Duration::from_millis(5);
        loop {
            let token = Uuid::new_v4().simple().to_string();
            let round =
                redlock::acquire_round(client, redlock, &names, &token, &self.options).await?;
            if redlock::won(&round, redlock, ttl) {
                tracing::debug!(
                    key = %names.lock,
                    granted = round.granted,
                    waited_ms = started.elapsed().as_millis() as u64,
                    "lock acquired on a quorum"
                );
                return Ok(LockGuard::new(
                    client.clone(),
                    names,
                    token,
                    None,
                    &self.options,
                    round.sent,
                ));
            }
            // Give back every grant, also on masters that seemed to fail: their grant may
            // only have been late.
            if (round.granted > 0 || !round.failures.is_empty())
                && let Err(err) = redlock::release_all(client, redlock, &names, &token).await
            {
                tracing::debug!(key = %names.lock, error = %err, "releasing a failed round");
            }
            let now = Instant::now();
            let out_of_time = wait.is_zero() || now >= deadline;
            if out_of_time {
                if let Some(err) = redlock::no_quorum(&round, redlock, &names.lock) {
                    return Err(err);
                }
                if wait.is_zero() && round.held_for.is_some() {
                    return Err(LockError::Busy { key: names.lock });
                }
                return Err(LockError::Timeout {
                    key: names.lock,
                    waited: now - started,
                });
            }
            let pause = backoff
                .min(round.held_for.unwrap_or(backoff))
                .max(Duration::from_millis(1));
            tokio::time::sleep(pause.saturating_add(jitter()).min(deadline - now)).await;
            backoff = (backoff * 2).min(Duration::from_millis(200));
        }
    }

    /// Acquires the lock, runs `body`, and releases the lock, also when `body` returns an
    /// error, panics, or the returned future is dropped.
    ///
    /// On a lock error the body does not run and the error comes back as `E`. With
    /// [`OnLost::Cancel`], a lease lost while `body` runs drops `body` at its next await
    /// point and returns [`LockError::Lost`]. Inside `body`, [`crate::current_lock`] describes
    /// this lock, and a nested lock on the same key in the same task is reentrant.
    pub async fn run<F, T, E>(&self, body: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let span = tracing::debug_span!("distributed_lock", key = %self.key);
        tracing::Instrument::instrument(self.run_in_span(body), span).await
    }

    async fn run_in_span<F, T, E>(&self, body: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let guard = match self.acquire().await {
            Ok(guard) => guard,
            Err(err) => return Err(err.into()),
        };
        if guard.is_reentrant() {
            // The outer body of this task holds the lock, renews it and watches for loss.
            return body.await;
        }
        let current = guard.current();
        let outcome = match self.options.on_lost {
            OnLost::Continue => Ok(context::hold(current, body).await),
            _ => {
                let body = context::hold(current, body);
                tokio::pin!(body);
                tokio::select! {
                    biased;
                    result = &mut body => Ok(result),
                    cause = guard.lost() => Err(LockError::Lost { key: guard.key().to_owned(), cause }),
                }
            }
        };
        if let Err(err) = guard.release().await {
            // The body's outcome stands; the lease runs out by itself.
            tracing::warn!(key = %err.key(), error = %err, "releasing the lock failed");
        }
        outcome.unwrap_or_else(|err| Err(err.into()))
    }
}

/// A waiter's stake in Redis: its place in the key's queue, and possibly a grant whose reply
/// it never saw. Leaving (on timeout, or on drop before the lock was taken: the acquiring
/// future was dropped, Redis failed) removes both.
struct Seat<'a> {
    client: &'a LockClient,
    names: &'a KeyNames,
    token: &'a str,
    joined: bool,
    /// The watchdog's keep-alive of our place in the queue, once a try queued us.
    kept: Option<u64>,
}

impl<'a> Seat<'a> {
    fn new(client: &'a LockClient, names: &'a KeyNames, token: &'a str) -> Self {
        Seat {
            client,
            names,
            token,
            joined: false,
            kept: None,
        }
    }

    /// Has the watchdog keep our place in the queue alive (once).
    fn keep_place(&mut self) {
        if self.kept.is_none() {
            self.kept = Some(self.client.watchdog().keep_queued(self.names, self.token));
        }
    }
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.kept.take() {
            self.client.watchdog().forget_queued(id);
        }
        if !self.joined {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, names, token) = (
            self.client.clone(),
            self.names.clone(),
            self.token.to_owned(),
        );
        // In the background, so retried like a release: a grant this waiter never heard of
        // (its reply lost with a reset connection) would otherwise stay until its ttl.
        runtime.spawn(async move {
            let give_up = Instant::now() + RELEASE_BUDGET;
            let _ = retrying(&names, "leaving the queue", give_up, || {
                leave_queue(&client, &names, &token)
            })
            .await;
        });
    }
}

/// One acquire try: a round trip to the acquire script, or with `quick` first a plain
/// `SET NX PX` (and the script only when that finds the key taken and we may wait).
async fn try_acquire(
    client: &LockClient,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
    quick: bool,
) -> Result<Attempt, LockError> {
    if quick {
        let reply: redis::RedisResult<Option<String>> = redis::cmd("SET")
            .arg(&names.lock)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(millis(options.ttl))
            .query_async(&mut client.connection())
            .await;
        match reply {
            Ok(Some(_)) => {
                client.mark_answered();
                return Ok(Attempt::Acquired { fence: None });
            }
            Ok(None) => {
                client.mark_answered();
                if options.wait.is_zero() {
                    return Ok(Attempt::NotNow {
                        retry_in: Duration::ZERO,
                    });
                }
            }
            // A connection the server dropped: the script below reconnects, and grants our
            // token again if this SET did get through.
            Err(err) if err.is_connection_dropped() && !err.is_connection_refusal() => {}
            Err(err) => return Err(LockError::backend(&names.lock, err)),
        }
    }
    let fence_lifetime = if options.fencing {
        millis(FENCE_COUNTER_LIFETIME.max(options.ttl * 2))
    } else {
        0
    };
    let (acquired, value): (i64, i64) = invoke(
        ACQUIRE
            .key(&names.lock)
            .key(&names.fence)
            .key(&names.queue)
            .key(&names.deadlines)
            .key(&names.ttls)
            .arg(token)
            .arg(millis(options.ttl))
            .arg(fence_lifetime)
            .arg(u8::from(!options.wait.is_zero()))
            .arg(millis(QUEUE_LEASE)),
        &mut client.connection(),
    )
    .await
    .map_err(|err| LockError::backend(&names.lock, err))?;
    client.mark_answered();
    let value = u64::try_from(value).unwrap_or(0);
    Ok(if acquired == 1 {
        Attempt::Acquired {
            fence: options.fencing.then_some(value),
        }
    } else {
        Attempt::NotNow {
            retry_in: Duration::from_millis(value),
        }
    })
}

/// Compare-and-delete that wakes the next waiter; 1 released, 0 gone, -1 another owner.
///
/// A release that fails on a transient or connection error is tried again: compare-and-
/// delete makes a repeat harmless, and a lock left to its ttl would stall every waiter.
/// It gives up at the lease's validity point `valid_until` (after it the key expires by
/// itself) and after [`RELEASE_BUDGET`] at most, whichever comes first.
pub(crate) async fn release_script(
    client: &LockClient,
    names: &KeyNames,
    token: &str,
    valid_until: Instant,
) -> Result<i64, LockError> {
    let give_up = valid_until.min(Instant::now() + RELEASE_BUDGET);
    retrying(names, "release", give_up, || {
        release_once(client, names, token)
    })
    .await
}

/// Makes `call` again after a transient or connection error, for the calls whose repeat is
/// harmless (a release, a waiter leaving the queue), until `give_up`; one try at least.
async fn retrying<T, F, Fut>(
    names: &KeyNames,
    what: &str,
    give_up: Instant,
    mut call: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let give_up = give_up.max(Instant::now() + MIN_RELEASE_TRY);
    let mut pause = Duration::from_millis(25);
    for _ in 0..RELEASE_TRIES {
        let outcome = match tokio::time::timeout_at(give_up, call()).await {
            Ok(outcome) => outcome,
            Err(_) => break,
        };
        match outcome {
            Err(err) if is_transient(&err) || is_connection(&err) => {
                tracing::debug!(key = %names.lock, error = %err, "{what} failed; trying again");
                if Instant::now() + pause >= give_up {
                    return Err(err);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(400));
            }
            outcome => return outcome,
        }
    }
    Err(gave_up(names, what))
}

/// The error of a release or leave that ran out of time: the lease (or the queue place)
/// then ends by itself.
fn gave_up(names: &KeyNames, what: &str) -> LockError {
    LockError::backend(
        &names.lock,
        redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} gave up: Redis did not answer before the lease could end by itself"),
        )),
    )
}

/// The longest a release (or a dropped waiter's leave) keeps trying.
const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// A release past its lease's validity point is still tried once, this long at most: the
/// key may outlive the local validity by the drift margin.
const MIN_RELEASE_TRY: Duration = Duration::from_millis(50);

/// How many times a release (or a dropped waiter's leave) is tried at most.
const RELEASE_TRIES: u32 = 8;

/// The first pause before retrying an acquire after a transient error; it doubles up to
/// [`MAX_TRANSIENT_PAUSE`] while the errors go on (a server restarting).
const TRANSIENT_PAUSE: Duration = Duration::from_millis(20);

/// The longest pause between acquire tries while Redis keeps failing.
const MAX_TRANSIENT_PAUSE: Duration = Duration::from_millis(250);

/// Errors that a retry may cure: a cluster in the middle of moving the slot (TRYAGAIN,
/// ASK, MOVED past the client's own retries), a cluster or primary briefly down, a server
/// loading its data set.
pub(crate) fn is_transient(err: &LockError) -> bool {
    use redis::ServerErrorKind as Server;
    let LockError::Backend { source, .. } = err else {
        return false;
    };
    matches!(
        source.kind(),
        redis::ErrorKind::Server(
            Server::TryAgain
                | Server::Ask
                | Server::Moved
                | Server::ClusterDown
                | Server::BusyLoading
                | Server::MasterDown
        )
    )
}

/// Whether an acquire may try again after `err`: a transient server state, or, once Redis
/// has answered this client, a lost connection (refused or reset while it restarts, a
/// reply that timed out and may hide a grant).
fn is_retryable(client: &LockClient, err: &LockError) -> bool {
    is_transient(err) || (client.has_answered() && is_connection(err))
}

fn is_connection(err: &LockError) -> bool {
    matches!(err, LockError::Backend { source, .. }
        if source.is_io_error()
            || source.is_timeout()
            || source.is_connection_dropped()
            || source.is_connection_refusal())
}

async fn release_once(
    client: &LockClient,
    names: &KeyNames,
    token: &str,
) -> Result<i64, LockError> {
    if let Some(redlock) = client.redlock() {
        return redlock::release_all(client, redlock, names, token).await;
    }
    invoke(
        &queue_call(&RELEASE, names, token, client.publish_command()),
        &mut client.connection(),
    )
    .await
    .map_err(|err| LockError::backend(&names.lock, err))
}

async fn leave_queue(client: &LockClient, names: &KeyNames, token: &str) -> Result<(), LockError> {
    invoke::<i64>(
        &queue_call(&LEAVE, names, token, client.publish_command()),
        &mut client.connection(),
    )
    .await
    .map(|_| ())
    .map_err(|err| LockError::backend(&names.lock, err))
}

/// Best-effort release of a token we should not keep (a late acquire reply).
async fn release_token(client: &LockClient, names: &KeyNames, token: &str) {
    let give_up = Instant::now() + RELEASE_BUDGET;
    if let Err(err) = release_script(client, names, token, give_up).await {
        tracing::warn!(key = %names.lock, error = %err, "releasing a late acquisition failed; it expires by its ttl");
    }
}

/// A few random milliseconds added to a park, so waiters woken by time do not retry in
/// lockstep.
fn jitter() -> Duration {
    Duration::from_micros(fastrand::u64(0..=3_000))
}
