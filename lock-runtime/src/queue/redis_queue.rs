//! The Redis level of the two-level queue, client side: one process's place in a key's
//! Redis queue ([`Place`]), the wait for the lock that the process's leading task runs
//! ([`acquire`]), and the script calls that take, give back or pass on the lock.
//!
//! A process waits in Redis as one entry per key, whatever number of its tasks want the key
//! (those wait in the local queue, [`crate::queue::cohort`]). The entry lives only while the
//! process keeps it alive (the watchdog's keep-alive); a release grants the head entry the
//! lock for a short confirmation window, which the process's next try confirms.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::connection::Query;
use crate::lease::{Taken, jitter, millis, validity};
use crate::options::fence_lifetime;
use crate::queue::wait::{self, Backoff, Step, Waiting, ride_out};
use crate::queue::wait_context::WaitContext;
use crate::scripts::{
    GRANT_CONFIRM_WINDOW, KeptAlive, KeyNames, QUEUE_LEASE, Requeue, acquire_call, invoke_granting,
    invoke_noting_repeat, release_call,
};
use crate::topology::one_node::after_lost_reply;
use crate::topology::reach::Reach;
use crate::wakeups::WaitTicket;
use crate::{error::LockError, options::LockOptions};

pub(crate) mod place;
pub(crate) mod release;
use place::Place;
use release::*;

/// The longest a waiter parks without checking again, should a wake-up be lost (the
/// subscription reconnecting, a foreign client releasing without a message, a grant to a
/// waiter whose process died and lapses without any message). Releases wake the next
/// waiter at once; this bounds how long the waiters behind a dead one learn of its lapse
/// (one queue lease), so it is no longer than the queue lease.
const MAX_PARK: Duration = QUEUE_LEASE;

/// The longest a waiter parks while it watches a live process (see [`crate::renewal::liveness`]):
/// a release, that process's end, or this client's own liveness lapsing wakes it first.
/// Its try then also renews its entry's deadline, which older clients' scripts go by
/// (`ENTRY_BOUND_MS` in prelude.lua, twice this).
pub(crate) const LONG_PARK: Duration = Duration::from_secs(30 * 60);

/// Awaits one try (`$attempt`, a future) bounded by `$overrun`: by each request's own
/// deadline on a single server's connection (no timer of the try's own beside the
/// request's), by a timer elsewhere. Gives `(bounded, outcome)` for [`settle_try`]. A
/// macro, so that the try's future is awaited where it was made: moved into a helper
/// function's future, it cost the uncontended cycle about 650 instructions (`bench/count`).
macro_rules! bounded_try {
    ($context:expr, $overrun:expr, $attempt:expr) => {{
        let bounded = $context.reach.keeps_deadlines();
        let outcome = if bounded {
            Ok($attempt.await)
        } else {
            tokio::time::timeout_at($overrun, $attempt).await
        };
        (bounded, outcome)
    }};
}

/// What the try of a task alone on its key found (see [`try_alone`]).
pub(crate) enum Alone {
    /// The lock, in one round trip (the process did not queue for it).
    Taken(Taken),
    /// Not taken (held, or a reply lost and its grant, if any, given back): the task goes
    /// on through the key's local queue, and its wait in Redis starts with the script.
    Refused,
}

/// The try of a task that no other task of this process joins on its key: a plain
/// `SET NX PX`, the uncontended lock in one round trip, with no local queue made. The
/// caller makes sure that this is the first step its wait in Redis would take (no fence,
/// one server, grants not waiting for replicas). A held key with `wait` zero is
/// [`LockError::Busy`]; an error is ridden out as a wait's first try would be (or
/// returned); a reply past the lease's validity gives the lock back.
pub(crate) async fn try_alone(
    context: &WaitContext<'_>,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
    (started, deadline): (Instant, Instant),
) -> Result<Alone, LockError> {
    context.may_try(names.lock())?;
    let overrun = deadline + context.reach.response_timeout();
    let sent = Instant::now();
    let tried = bounded_try!(
        context,
        overrun,
        try_set_nx(context, names, token, options, (overrun, sent))
    );
    let (window, backoff) = ((started, overrun, deadline), &mut Backoff::new());
    let Some(attempt) = settle_try(context, names.lock(), tried, window, backoff).await? else {
        return Ok(Alone::Refused);
    };
    match attempt {
        SetNx::Done(Attempt::Acquired { fence }) => {
            if let Some(taken) = Taken::if_in_time(sent, options.ttl, fence, false) {
                tracing::debug!(
                    key = %names.lock(),
                    token = %token,
                    waited_ms = started.elapsed().as_millis() as u64,
                    attempts = 1,
                    "lock acquired"
                );
                return Ok(Alone::Taken(taken));
            }
            tracing::warn!(key = %names.lock(), "acquire reply arrived after the lease validity; retrying");
            release_token(context.reach, names, token).await;
            // Tried again within the wait, as a wait's late grant is; none left: timed out.
            if Instant::now() >= deadline {
                return Err(LockError::timeout(names.lock(), started.elapsed()));
            }
            Ok(Alone::Refused)
        }
        SetNx::Done(Attempt::NotNow { .. }) => Err(LockError::Busy {
            key: names.lock().to_owned(),
        }),
        SetNx::Held => Ok(Alone::Refused),
        // The SET may have been applied (a dropped connection), or, with replicas (not
        // asked here), not confirmed: whatever our token holds is given back.
        SetNx::Dropped | SetNx::Done(Attempt::Unreplicated(_)) => {
            release_token(context.reach, names, token).await;
            Ok(Alone::Refused)
        }
    }
}

/// What a try that [`bounded_try!`] awaited came to: its reply; `None` after an error worth
/// another try in time, ridden out first (a cluster moving the slot, a server loading or
/// restarting, a reset connection, a reply that timed out; with the same token, so a lost
/// grant is found again); a timeout when the try ran into the end of the wait plus one
/// response timeout, or outlasted the wait by a whole response timeout. A server that
/// never answered is unreachable: reported at once, within the connect timeout.
async fn settle_try<T>(
    context: &WaitContext<'_>,
    key: &str,
    (bounded, outcome): (
        bool,
        Result<Result<T, LockError>, tokio::time::error::Elapsed>,
    ),
    (started, overrun, deadline): (Instant, Instant, Instant),
    backoff: &mut Backoff,
) -> Result<Option<T>, LockError> {
    match outcome {
        Ok(Ok(reply)) => Ok(Some(reply)),
        Ok(Err(err)) if !bounded || Instant::now() < overrun => {
            ride_out(context, key, err, deadline, backoff).await?;
            Ok(None)
        }
        _ => Err(LockError::timeout(key, started.elapsed())),
    }
}

/// What one acquire try found.
enum Attempt {
    Acquired {
        fence: Option<u64>,
    },
    /// Held (or another waiter's turn): try again after at most this long, or, with
    /// `watch`, once a release wakes us or that process's liveness key vanishes.
    NotNow {
        retry_in: Duration,
        watch: Option<String>,
        /// The try's queue entry lives by its deadline (it names no liveness key): the
        /// watchdog keeps it per key.
        per_key: bool,
    },
    /// Granted, but too few replicas confirmed the grant within the timeout
    /// ([`crate::Config::wait_for_replicas`]): it does not count, and is undone.
    Unreplicated(LockError),
}

/// The wait of a process for a key in Redis, run by its leading task: tries, joins the
/// queue, subscribes to the key's release messages once, and parks until a release wakes
/// or grants it, the holder's lease would end, or `deadline`.
struct RedisWait<'a> {
    context: WaitContext<'a>,
    names: &'a KeyNames,
    options: &'a LockOptions,
    place: &'a mut Place,
    ticket: &'a mut Option<WaitTicket>,
    started: Instant,
    deadline: Instant,
    /// No try may keep the caller past its wait by more than one response timeout.
    overrun: Instant,
    /// The first try is a plain `SET NX PX` (no place in the queue yet, no fence wanted).
    quick: bool,
    backoff: Backoff,
    attempts: u64,
    /// The last grant arrived after its validity point and was given back.
    late: bool,
    /// Whose liveness key the last try said to watch (see [`crate::renewal::liveness`]).
    watch: Option<String>,
    /// How many times this client's liveness key had lapsed when the last try was sent.
    lapses: u64,
}

/// Waits for the lock on behalf of the process in `place` (see [`RedisWait`]).
///
/// On success the place is settled (its token is the lock's). On an error the place is
/// left to the caller: kept for the process's next leading task, or dropped (it leaves).
pub(crate) async fn acquire(
    context: WaitContext<'_>,
    names: &KeyNames,
    options: &LockOptions,
    place: &mut Place,
    ticket: &mut Option<WaitTicket>,
    (started, deadline): (Instant, Instant),
) -> Result<Taken, LockError> {
    let quick = !options.fencing && !place.joined && !std::mem::take(&mut place.tried_alone);
    let behind_grant = std::mem::take(&mut place.behind_grant);
    if let Some(ticket) = ticket.as_ref() {
        ticket.retoken(&place.token);
    }
    let mut wait = RedisWait {
        context,
        names,
        options,
        place,
        ticket,
        started,
        deadline,
        overrun: deadline + context.reach.response_timeout(),
        quick,
        backoff: Backoff::new(),
        attempts: 0,
        late: false,
        watch: None,
        lapses: 0,
    };
    if behind_grant
        && !options.wait.is_zero()
        && wait.ticket.as_ref().is_some_and(WaitTicket::is_subscribed)
    {
        wait.check_time()?;
        wait.park(GRANT_CONFIRM_WINDOW).await;
    }
    wait::wait(&mut wait, context.telemetry.long_wait()).await
}

impl Waiting for RedisWait<'_> {
    type Taken = Taken;

    async fn attempt(&mut self) -> Result<Step<Taken>, LockError> {
        // Shut down, or Redis declared down: fail now rather than at the end of the wait.
        self.context.may_try(self.names.lock())?;
        self.attempts += 1;
        if let Some(liveness) = self.context.liveness {
            self.lapses = liveness.lapses();
        }
        // A shutdown meanwhile waits until the reply's place is kept (a grant's lease is
        // registered by the caller, after this try).
        let _in_flight =
            (!self.options.wait.is_zero()).then(|| self.context.shutdown.try_in_flight());
        let sent = Instant::now();
        // Until the reply says otherwise, this try may have queued us or granted us the
        // lock: giving up now must clean both.
        self.place.joined = true;
        let quick = std::mem::take(&mut self.quick);
        let attempt = try_acquire(
            &self.context,
            (self.names, &self.place.token, self.place.queued),
            self.options,
            (quick, self.overrun, sent),
        );
        let tried = bounded_try!(self.context, self.overrun, attempt);
        let window = (self.started, self.overrun, self.deadline);
        let names = self.names;
        let settled = settle_try(
            &self.context,
            names.lock(),
            tried,
            window,
            &mut self.backoff,
        );
        let Some(attempt) = settled.await? else {
            return Ok(Step::Again);
        };
        self.read(attempt, sent).await
    }

    fn bounds(&self) -> (&str, bool, Instant, Instant) {
        // A try-once caller whose grant came too late tries again.
        let once = self.options.wait.is_zero() && !self.late;
        (self.names.lock(), once, self.started, self.deadline)
    }

    fn ticket(&self) -> Option<&WaitTicket> {
        self.ticket.as_ref()
    }

    fn telemetry(&self) -> &crate::telemetry::Telemetry {
        self.context.telemetry
    }

    fn looked_up(&self) -> Option<(&Arc<Reach>, &KeyNames)> {
        Some((self.context.reach, self.names))
    }

    async fn subscribe(&mut self) -> bool {
        let names = (self.names.lock(), self.names.channel(), &*self.place.token);
        wait::subscribe(self.context.wakeups, names, self.ticket, self.deadline).await
    }

    /// Parks until a release wakes us, `retry_in` (capped) passes, or the wait ends; while
    /// the last try said to watch a live process, until that process's liveness key
    /// vanishes instead of `retry_in`, as a release wakes us before.
    ///
    /// A release that granted the key to the process ahead of ours wakes us only to say
    /// that the process we watch holds it no more (`=token` with no key, see
    /// [`WaitTicket::wait`]): what a try would learn now is that the grantee holds the key
    /// for at most its confirmation window, unconfirmed and so not yet noted as a holder
    /// to watch. We park that long instead, without a watch (a release reaching us, or the
    /// grant's end, comes first), which saves one script run per hand-over.
    async fn park(&mut self, retry_in: Duration) {
        let mut retry_in = retry_in;
        // Each round but the first follows a release's message: bounded by the releases.
        for _ in 0..MAX_LOOK_LATER {
            if !self.park_once(retry_in).await {
                return;
            }
            self.watch = None;
            retry_in = GRANT_CONFIRM_WINDOW;
        }
    }
}

impl RedisWait<'_> {
    /// What a try's answer means for the wait: the lock (when it came within the lease's
    /// validity), a park, or another try.
    async fn read(&mut self, attempt: Attempt, sent: Instant) -> Result<Step<Taken>, LockError> {
        let ttl = self.options.ttl;
        Ok(match attempt {
            Attempt::Acquired { fence } => {
                let Some(taken) = Taken::if_in_time(sent, ttl, fence, self.place.queued) else {
                    return Ok(self.late_grant().await);
                };
                self.place.settle();
                tracing::debug!(
                    key = %self.names.lock(),
                    token = %self.place.token,
                    waited_ms = self.started.elapsed().as_millis() as u64,
                    attempts = self.attempts,
                    "lock acquired"
                );
                Step::Done(taken)
            }
            Attempt::NotNow {
                retry_in,
                watch,
                per_key,
            } => {
                self.watch = watch;
                self.place.not_taken(self.options.wait.is_zero(), per_key);
                Step::Park(retry_in)
            }
            Attempt::Unreplicated(shortfall) => self.undo_unreplicated(shortfall, sent).await?,
        })
    }

    /// A grant whose reply came after the lease's validity point: it acquires nothing, and
    /// our token is given back before the next try.
    async fn late_grant(&mut self) -> Step<Taken> {
        self.place.joined = false;
        tracing::warn!(key = %self.names.lock(), "acquire reply arrived after the lease validity; retrying");
        release_token(self.context.reach, self.names, &self.place.token).await;
        self.late = true;
        Step::Park(Duration::ZERO)
    }

    /// A grant too few replicas confirmed does not count: undone with the owner check, at
    /// the latest by the time the grant would have ended anyway (it then expires by
    /// itself), then tried again after a pause, or `shortfall` when no wait is left.
    async fn undo_unreplicated(
        &mut self,
        shortfall: LockError,
        sent: Instant,
    ) -> Result<Step<Taken>, LockError> {
        tracing::debug!(key = %self.names.lock(), error = %shortfall, "grant not replicated; undoing it");
        let undo_by = validity(sent, self.options.ttl).min(self.overrun);
        self.place.undo_unconfirmed(undo_by).await;
        let once = self.options.wait.is_zero();
        wait::after_shortfall(shortfall, &self.backoff, once, self.deadline).await
    }

    /// One park of [`park`](Self::park); true when a release woke us to look later.
    async fn park_once(&mut self, retry_in: Duration) -> bool {
        let watch = self.watch.take();
        let watching = match (self.context.liveness, &watch, self.ticket.as_ref()) {
            (Some(liveness), Some(key), Some(ticket)) if ticket.is_subscribed() => {
                if liveness.lapses() != self.lapses {
                    // Our own places may have been dropped meanwhile: look again now.
                    return false;
                }
                Some((liveness.watch(key), ticket))
            }
            _ => None,
        };
        let cap = if watching.is_some() {
            LONG_PARK
        } else {
            retry_in.min(MAX_PARK)
        };
        // The jitter spreads asks that would otherwise come together; it stays below a short
        // park (acquire.lua's 1 ms poll of a foreign holder), which it would otherwise
        // slow down several times over.
        let spread = if cap.is_zero() {
            jitter()
        } else {
            jitter().min(cap)
        };
        let park = cap
            .saturating_add(spread)
            .min(self.deadline.saturating_duration_since(Instant::now()));
        if let Some((watch, ticket)) = watching {
            let waiter = (self.names.lock(), self.lapses);
            return wait::park_kept(&self.context, waiter, ticket, park, Some(watch.gone())).await;
        }
        // A grant (the key holds our token for its confirmation window) is confirmed by
        // the next try, which takes the key for our whole ttl, so the lease is dated from
        // that try, as any other. A grant that lapsed meanwhile (this process was too slow
        // to confirm) queues us again instead.
        wait::park_on(&self.context, self.names.lock(), self.ticket.as_ref(), park).await
    }
}

/// A bound on the look-later messages one park follows (each is a release of another
/// process's lock), far above what a wait meets within its park.
const MAX_LOOK_LATER: u32 = 10_000;

/// What a release that offers to requeue the process found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Yielded {
    /// The lock went to the next process (or is free), and the process's next place is at
    /// the tail of the queue.
    Passed,
    /// No other process waits: the holder keeps the lock.
    Kept,
    /// The key is free for a foreign window, and the process's next place is queued.
    Gapped,
    /// The key was gone (the lease had expired).
    Gone,
    /// Another owner holds the key.
    NotOwner,
}

/// Gives the lock to the next process in the queue and puts this one at the tail with
/// `requeue`, in one round trip; keeps it when no other process waits. Retried as a
/// release, until `valid_until` (2 s at most). The call goes through `reach`, and names
/// the process's liveness key for the lock (`alive`), if it has one, as what keeps the
/// requeued place.
pub(crate) async fn yield_lock(
    (reach, alive): (&Reach, Option<&str>),
    names: &KeyNames,
    token: &str,
    requeue: &Requeue,
    valid_until: Instant,
) -> Result<Yielded, LockError> {
    let ((reply, repeated), reply_lost): ((i64, bool), bool) =
        retrying(names, "release", (valid_until, false), |_, _| async {
            invoke_noting_repeat(
                &release_call(names, token, reach.publish_command(), requeue, alive),
                &mut reach.connection(),
            )
            .await
            .map_err(|err| LockError::backend(names.lock(), err))
        })
        .await?;
    let reply = after_lost_reply(names, reply, reply_lost || repeated);
    Ok(match reply {
        2 => Yielded::Kept,
        3 => Yielded::Gapped,
        1 => Yielded::Passed,
        0 => Yielded::Gone,
        _ => Yielded::NotOwner,
    })
}

/// One acquire try: a round trip to the acquire script, or with `quick` first a plain
/// `SET NX PX` (and the script only when that finds the key taken and we may wait). Its
/// requests end by `until` where the connection keeps deadlines. A try `queued` behind
/// others records when its hold began, should it take the key.
async fn try_acquire(
    context: &WaitContext<'_>,
    (names, token, queued): (&KeyNames, &str, bool),
    options: &LockOptions,
    (quick, until, now): (bool, Instant, Instant),
) -> Result<Attempt, LockError> {
    if quick
        && let SetNx::Done(attempt) =
            try_set_nx(context, names, token, options, (until, now)).await?
    {
        return Ok(attempt);
    }
    let alive = context.liveness_key(names.lock());
    let kept = alive.as_deref().map(|alive| KeptAlive {
        alive,
        publish: context.reach.publish_command(),
        renews: options.watchdog,
    });
    let call = acquire_call(
        names,
        token,
        options.ttl,
        fence_lifetime(options),
        (!options.wait.is_zero(), queued),
        (context.pass_bound.time, kept),
    );
    // After a quick try, the clock is read again: its round trip is not this request's.
    let now = if quick { Instant::now() } else { now };
    let mut connection = context.reach.connection().until(until, now);
    let replicas = (context.reach.replicas(), names.lock());
    let (reply, shortfall): (AcquireReply, _) =
        invoke_granting(&call, replicas, &mut connection).await?;
    let AcquireReply {
        acquired,
        value,
        watch,
    } = reply;
    context.reach.mark_answered();
    let value = u64::try_from(value).unwrap_or(0);
    if acquired != 1 {
        return Ok(Attempt::NotNow {
            retry_in: Duration::from_millis(value),
            watch,
            per_key: alive.is_none(),
        });
    }
    Ok(match shortfall {
        Some(shortfall) => Attempt::Unreplicated(shortfall),
        None => Attempt::Acquired {
            fence: options.fencing.then_some(value),
        },
    })
}

/// acquire.lua's reply: `{acquired, fence or wait_ms}`, and where queue places are kept by
/// the process's liveness key, a third element: whose liveness key to watch ('' none).
struct AcquireReply {
    acquired: i64,
    value: i64,
    watch: Option<String>,
}

impl redis::FromRedisValue for AcquireReply {
    fn from_redis_value(value: redis::Value) -> Result<Self, redis::ParsingError> {
        let items: Vec<redis::Value> = redis::from_redis_value(value)?;
        let mut items = items.into_iter();
        let mut next_int = || -> Result<i64, redis::ParsingError> {
            redis::from_redis_value(items.next().unwrap_or(redis::Value::Nil))
        };
        let acquired = next_int()?;
        let value = next_int()?;
        let watch: Option<String> = items.next().map(redis::from_redis_value).transpose()?;
        Ok(AcquireReply {
            acquired,
            value,
            watch: watch.filter(|watch| !watch.is_empty()),
        })
    }
}

/// What the quick first try found, when it did not decide the try itself.
enum SetNx {
    /// Taken, or (with `wait` zero) held, or too few replicas confirmed it.
    Done(Attempt),
    /// Held, and the caller may wait.
    Held,
    /// The connection was dropped: the SET may have been applied (the script reconnects,
    /// and grants our token again if it was).
    Dropped,
}

/// The quick first try: a plain `SET NX PX`. The caller goes on with the script when the
/// key was held and it may wait, or when the connection was dropped.
async fn try_set_nx(
    context: &WaitContext<'_>,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
    (until, now): (Instant, Instant),
) -> Result<SetNx, LockError> {
    // Sized up front: a command grown argument by argument reallocates several times.
    let mut set = redis::Cmd::with_capacity(6, 16 + names.lock().len() + token.len() + 20);
    set.arg("SET")
        .arg(names.lock())
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(millis(options.ttl));
    let mut connection = context.reach.connection().until(until, now);
    // Read as a bare value: `OK` or nil, with no string made of the reply.
    let reply: redis::RedisResult<(redis::Value, _)> = match context.reach.replicas() {
        None => connection.query(&set).await.map(|reply| (reply, None)),
        Some(replicas) => replicas
            .send(&set, &mut connection)
            .await
            .map(|(reply, waited)| (reply, replicas.judge(names.lock(), waited))),
    };
    match reply {
        Ok((redis::Value::Nil, _)) => {
            context.reach.mark_answered();
            if !options.wait.is_zero() {
                return Ok(SetNx::Held);
            }
            Ok(SetNx::Done(Attempt::NotNow {
                retry_in: Duration::ZERO,
                watch: None,
                per_key: true,
            }))
        }
        Ok((_, shortfall)) => {
            context.reach.mark_answered();
            Ok(SetNx::Done(match shortfall {
                Some(shortfall) => Attempt::Unreplicated(shortfall),
                None => Attempt::Acquired { fence: None },
            }))
        }
        Err(err) if err.is_connection_dropped() && !err.is_connection_refusal() => {
            Ok(SetNx::Dropped)
        }
        Err(err) => Err(LockError::backend(names.lock(), err)),
    }
}
