//! The one wait loop: try, ride out a transient error, subscribe to the key's release
//! messages once, park until a release wakes us or the retry time passes, and give up at
//! the end of the wait. The lock's and the semaphore's waits differ only in their try
//! ([`Waiting::attempt`]) and in what a park watches; the read-write lock's script calls
//! ride out transient errors the same way ([`ride_out`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::wait_context::WaitContext;
use crate::error::LockError;
use crate::identity::SeenHolder;
use crate::lease::jitter;
use crate::ops::seen_holder::{seen_holder, with_holder};
use crate::scripts::KeyNames;
use crate::telemetry::Telemetry;
use crate::topology::reach::Reach;
use crate::wakeups::{WaitTicket, Wakeups, Woken};

/// The first pause after a transient error; it doubles up to [`MAX_TRANSIENT_PAUSE`] while
/// the errors go on (a server restarting).
pub(crate) const TRANSIENT_PAUSE: Duration = Duration::from_millis(20);

/// The longest pause between tries while Redis keeps failing.
pub(crate) const MAX_TRANSIENT_PAUSE: Duration = Duration::from_millis(250);

/// A bound on the tries of one wait, far above what any wait makes (each try but the
/// first is preceded by a park, a subscription or a back-off).
const MAX_TRIES: u32 = 10_000_000;

/// What to do after one try.
pub(crate) enum Step<T> {
    /// Taken: the wait is over.
    Done(T),
    /// Try again at once (after a back-off the try already slept).
    Again,
    /// Not now: park this long at most (a release wakes us first), then try again.
    Park(Duration),
}

/// One waiter's side of the loop: its try, and how it parks.
pub(crate) trait Waiting {
    /// What a successful try hands over.
    type Taken;

    /// One try and what it means.
    async fn attempt(&mut self) -> Result<Step<Self::Taken>, LockError>;

    /// The wait's key, whether it tries once, when it started and when it ends.
    fn bounds(&self) -> (&str, bool, Instant, Instant);

    /// The check after a try that did not take: `Busy` for a try-once caller, `Timeout`
    /// once the wait ran out.
    fn check_time(&self) -> Result<(), LockError> {
        let (key, once, _, deadline) = self.bounds();
        if once {
            return Err(LockError::Busy {
                key: key.to_owned(),
            });
        }
        if Instant::now() >= deadline {
            return Err(self.timeout());
        }
        Ok(())
    }

    /// The waiter's release-message ticket, once registered.
    fn ticket(&self) -> Option<&WaitTicket>;

    /// Where the wait is counted while it lasts (its client's live gauges).
    fn telemetry(&self) -> &Telemetry;

    /// Where the key is and its names, for a look at the key's holder when the wait has
    /// gone on long ([`LongWait`]); `None` where the wait has no one client (a quorum's).
    fn looked_up(&self) -> Option<(&Arc<Reach>, &KeyNames)> {
        None
    }

    /// Registers the waiter on the key's release channel and subscribes it (see
    /// [`subscribe`]); true when the caller should try again at once.
    async fn subscribe(&mut self) -> bool;

    /// Parks until a release wakes us, `retry_in` passes, or the wait ends.
    async fn park(&mut self, retry_in: Duration);

    /// The error of a wait that ran out.
    fn timeout(&self) -> LockError {
        let (key, _, started, _) = self.bounds();
        LockError::timeout(key, started.elapsed())
    }
}

/// Runs `waiter`'s wait: tries until it takes what it waits for or gives up. A waiter that
/// has no confirmed subscription subscribes after a try that did not take, then tries
/// again at once: a release between that try and the subscription would go unheard.
///
/// From the first try that did not take until the wait ends (also when its future is
/// dropped), the wait is counted on the live gauges, as begun when the waiter started,
/// and lasts as a `lock wait` span ([`WaitSpan`]) that names the holder once the wait has
/// seen it (past `long_wait`, or at its timeout).
/// A wait still going after `long_wait` ([`Config::log_long_waits`](crate::Config::log_long_waits))
/// is told once, at INFO, when it passes it (see [`LongWait`]).
pub(crate) async fn wait<W: Waiting>(
    waiter: &mut W,
    long_wait: Option<Duration>,
) -> Result<W::Taken, LockError> {
    let mut long = LongWait::new(long_wait, waiter.bounds().2);
    let mut waiting = None;
    for _ in 0..MAX_TRIES {
        let subscribed_before = waiter.ticket().is_some_and(WaitTicket::is_subscribed);
        let retry_in = match waiter.attempt().await? {
            Step::Done(taken) => return Ok(taken),
            Step::Again => continue,
            Step::Park(retry_in) => retry_in,
        };
        if let Err(err) = waiter.check_time() {
            let span = waiting.as_ref().map(|(_, span)| span);
            // Boxed: only a wait that ran out looks at the holder.
            return Err(Box::pin(timed_out(&*waiter, span, err)).await);
        }
        let (_, span) = waiting.get_or_insert_with(|| {
            let (key, _, started, _) = waiter.bounds();
            let gauge = waiter.telemetry().wait_started(key, started.into_std());
            (gauge, WaitSpan::new(key))
        });
        if !subscribed_before && waiter.subscribe().await {
            continue;
        }
        match long.due_within(retry_in) {
            None => waiter.park(retry_in).await,
            // Boxed: the one park that tells the event does not grow every wait's future
            // (nested guarded bodies hold several).
            Some(at) => Box::pin(long.park_telling(waiter, retry_in, at, span)).await,
        }
    }
    Err(waiter.timeout())
}

/// `err`, the error of `waiter`'s wait that ran out, with the holder of the key as one
/// look sees it when it is a `Timeout` (see [`with_holder`]), told to the wait's span.
async fn timed_out<W: Waiting>(waiter: &W, span: Option<&WaitSpan>, err: LockError) -> LockError {
    let (Some(span), Some((reach, names))) = (span, waiter.looked_up()) else {
        return err;
    };
    let err = with_holder(reach, names, err).await;
    if let LockError::Timeout {
        holder: Some(seen), ..
    } = &err
    {
        span.saw(seen);
    }
    err
}

/// The `lock wait` span (INFO) of a wait that did not take at its first try: its `key`
/// from the start, and the `holder` (host, pid, service, function), `holder_token` and
/// `held_ms` once the wait has looked at the key (past `log_long_waits`, or when it ran
/// out). It lasts as long as the wait, so a trace shows the wait and whom it waited for.
pub(crate) struct WaitSpan(tracing::Span);

impl WaitSpan {
    fn new(key: &str) -> Self {
        use tracing::field::Empty;
        WaitSpan(tracing::info_span!(
            "lock wait",
            key,
            holder = Empty,
            holder_token = Empty,
            held_ms = Empty
        ))
    }

    /// Tells the span whom the wait saw holding the key.
    fn saw(&self, seen: &SeenHolder) {
        let span = &self.0;
        span.record("holder", tracing::field::display(&seen.identity));
        span.record("holder_token", seen.token.as_str());
        if let Some(held) = seen.held_for {
            span.record("held_ms", crate::lease::millis(held));
        }
    }
}

/// The one INFO event of a long wait (PostgreSQL's `log_lock_waits`): due at its start
/// plus the client's threshold, told once, in the middle of a park if that is when it
/// falls (the park goes on). A wait that ends sooner, the uncontended path included, makes
/// no timer and no allocation for it.
pub(crate) struct LongWait {
    /// When it is due (`None`: off, or told already).
    at: Option<Instant>,
    started: Instant,
}

impl LongWait {
    /// The event of a wait that started at `started`, due after `threshold`.
    fn new(threshold: Option<Duration>, started: Instant) -> Self {
        LongWait {
            at: threshold.and_then(|after| started.checked_add(after)),
            started,
        }
    }

    /// When the event falls due, if that is within a park of `retry_in` from now.
    fn due_within(&self, retry_in: Duration) -> Option<Instant> {
        self.at.filter(|at| *at <= Instant::now() + retry_in)
    }

    /// Parks `waiter` for `retry_in`, telling the event at `at` if the park lasts that long.
    async fn park_telling<W: Waiting>(
        &mut self,
        waiter: &mut W,
        retry_in: Duration,
        at: Instant,
        span: &WaitSpan,
    ) {
        let key = waiter.bounds().0.to_owned();
        let lookup = (waiter.looked_up()).map(|(reach, names)| (reach.clone(), names.clone()));
        let park = waiter.park(retry_in);
        tokio::pin!(park);
        tokio::select! {
            biased;
            () = &mut park => return,
            () = tokio::time::sleep_until(at) => {}
        }
        // Told now, once: a park that ended sooner leaves it due for a later one. With the
        // holder as one look at the key sees it (bounded: the park goes on meanwhile, a
        // release it hears meanwhile ends it at once after).
        self.at = None;
        let waited_ms = crate::lease::millis(self.started.elapsed());
        let seen = match &lookup {
            Some((reach, names)) => seen_holder(reach, names).await,
            None => None,
        };
        if let Some(seen) = &seen {
            span.saw(seen);
        }
        // Inside the wait's span, which names the holder now.
        span.0.in_scope(|| {
            tracing::info!(
                key,
                waited_ms,
                holder = seen
                    .as_ref()
                    .map(|seen| tracing::field::display(&seen.identity)),
                holder_token = seen.as_ref().map(|seen| seen.token.as_str()),
                held_ms = seen
                    .as_ref()
                    .and_then(|seen| seen.held_for)
                    .map(crate::lease::millis),
                "lock wait long: past the log_long_waits threshold"
            )
        });
        park.await;
    }
}

/// Registers a waiter under `token` on `channel` (once: the ticket is kept in `ticket`)
/// and, unless its subscription is already up, subscribes it within `deadline`. True when
/// the caller should try again at once (subscribed now, or out of time: the next check
/// ends the wait); false when the subscription failed and the waiter must rely on its
/// park's bound instead.
pub(crate) async fn subscribe(
    wakeups: &Wakeups,
    (key, channel, token): (&str, &str, &str),
    ticket: &mut Option<WaitTicket>,
    deadline: Instant,
) -> bool {
    let ticket = ticket.get_or_insert_with(|| wakeups.register(channel, token));
    if ticket.is_subscribed() {
        return true;
    }
    match tokio::time::timeout_at(deadline, ticket.subscribe()).await {
        Ok(Ok(())) | Err(_) => true,
        Ok(Err(err)) => {
            tracing::warn!(key, error = %err, "cannot subscribe to release messages; waiting for the lease instead");
            false
        }
    }
}

/// Parks a waiter whose place its process's liveness key keeps, for as long as `park`:
/// until a release wakes it, this client's liveness key is found lapsed (its places may be
/// gone; `lapses` is the count its last try saw), `gone` fires (a watched process ended),
/// or the client is interrupted (shut down, Redis declared down). True when a release woke
/// it to look later.
pub(crate) async fn park_kept(
    context: &WaitContext<'_>,
    (key, lapses): (&str, u64),
    ticket: &WaitTicket,
    park: Duration,
    gone: Option<&Notify>,
) -> bool {
    let Some(liveness) = context.liveness else {
        return park_on(context, key, Some(ticket), park).await;
    };
    let never = Notify::new();
    let gone = gone.unwrap_or(&never).notified();
    let lapsed = liveness.lapsed().notified();
    tokio::pin!(gone, lapsed);
    gone.as_mut().enable();
    lapsed.as_mut().enable();
    if liveness.lapses() != lapses {
        return false;
    }
    tokio::select! {
        look_later = park_on(context, key, Some(ticket), park) => look_later,
        () = gone => false,
        () = lapsed => false,
    }
}

/// Parks for `park` at most on `ticket` (or a plain sleep without one); a server declared
/// down or the client shut down ends it early (the next try then fails at once). True when
/// a release woke us only to look later ([`Woken::LookLater`]).
pub(crate) async fn park_on(
    context: &WaitContext<'_>,
    key: &str,
    ticket: Option<&WaitTicket>,
    park: Duration,
) -> bool {
    let interrupted = context.interrupt.notified();
    tokio::pin!(interrupted);
    interrupted.as_mut().enable();
    if context.may_try(key).is_err() {
        return false;
    }
    match ticket {
        Some(ticket) => tokio::select! {
            woken = ticket.wait(park) => woken == Woken::LookLater,
            () = interrupted => false,
        },
        None => tokio::select! {
            () = tokio::time::sleep(park) => false,
            () = interrupted => false,
        },
    }
}

/// After a grant too few replicas confirmed was undone: another try after the back-off's
/// pause, or `shortfall` when the wait has no room for one (a try-once caller, or a pause
/// that would pass `deadline`) or when the server refused the rule itself.
pub(crate) async fn after_shortfall<T>(
    shortfall: LockError,
    backoff: &Backoff,
    once: bool,
    deadline: Instant,
) -> Result<Step<T>, LockError> {
    let pause = backoff.next();
    // A server that refused the rule's `WAIT` (a configuration error) refuses every try.
    let refused = matches!(shortfall, LockError::Config { .. });
    if once || refused || Instant::now() + pause >= deadline {
        return Err(shortfall);
    }
    tokio::time::sleep(pause).await;
    Ok(Step::Again)
}

/// The pause between tries after transient errors: [`TRANSIENT_PAUSE`] doubling up to
/// [`MAX_TRANSIENT_PAUSE`], each with a little jitter.
pub(crate) struct Backoff {
    pause: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            pause: TRANSIENT_PAUSE,
        }
    }

    /// The next pause, jitter included (without advancing the schedule).
    pub(crate) fn next(&self) -> Duration {
        self.pause.saturating_add(jitter())
    }

    /// Sleeps the next pause (until `deadline` at most; `interrupt`, which fires when a
    /// server is declared down or the client shuts down, ends it early) and doubles the
    /// one after.
    pub(crate) async fn sleep(&mut self, interrupt: &Notify, deadline: Instant) {
        let pause = self
            .next()
            .min(deadline.saturating_duration_since(Instant::now()));
        let interrupted = interrupt.notified();
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = interrupted => {}
        }
        // By hand: a back-off crate (backon) is no shorter than this and `jitter()`.
        self.pause = (self.pause * 2).min(MAX_TRANSIENT_PAUSE);
    }
}

/// After a try on `key` failed with `err`: `Ok` once the back-off has passed, when the error
/// is worth another try within `deadline` (see [`is_retryable`]); else the error to give
/// up with (`err`, or the outage of a server unreachable past the client's grace).
pub(crate) async fn ride_out(
    context: &WaitContext<'_>,
    key: &str,
    err: LockError,
    deadline: Instant,
    backoff: &mut Backoff,
) -> Result<(), LockError> {
    if !is_retryable(context.reach, &err) || Instant::now() >= deadline {
        return Err(err);
    }
    if let Some(outage) = context.reach.outage(key) {
        // Unreachable past the grace: no use waiting for it.
        return Err(outage);
    }
    tracing::debug!(key, error = %err.cause(), "transient error; retrying");
    backoff.sleep(context.interrupt, deadline).await;
    Ok(())
}

/// Whether a wait may try again after `err`: a transient server state, a grant too few
/// replicas confirmed (undone by the try that got it), or, once Redis has answered this
/// client (`reach`), a lost connection (refused or reset while it restarts, a reply that
/// timed out and may hide a grant).
pub(crate) fn is_retryable(reach: &Reach, err: &LockError) -> bool {
    err.is_transient()
        || matches!(
            err,
            LockError::NotReplicated { .. } | LockError::NotDurable { .. }
        )
        || (reach.has_answered() && err.is_connection())
}
