//! Redlock: a lock held on a majority of independent masters.
//!
//! Acquire runs the acquire script on every master at once, each with a short time limit.
//! The lock is ours when a majority granted it and the validity left (`ttl` − elapsed −
//! drift, measured from the send time) is positive; otherwise every master is asked to
//! release it, including those that seemed to fail (their grant may only have been slow),
//! and the caller retries after a jittered pause. Renewal (the watchdog) and release also go
//! to every master; a renewal keeps the lease only when a majority confirms it.
//!
//! Waiting: a waiter subscribes to the key's release channel on every master (one
//! subscription per key per process per master) and parks until the first release message,
//! capped by the holder's remaining lease (a crashed holder publishes nothing). A round lost
//! to a split vote (waiters woken together took a master each) is retried after a random
//! pause, as in the reference algorithm; a fair queue across independent masters would need
//! its own consensus. When so many masters refuse or do not answer that no majority is left,
//! the call fails at once with `NoQuorum`. Fencing is refused: independent counters cannot
//! give one total order.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::connection::Connection;
use crate::lease::{Taken, Token, jitter, new_token, validity};
use crate::scripts::{KeyNames, RELEASE, acquire_call, announced_release_call, invoke, queue_call};
use crate::wakeups::{WaitTicket, Wakeups};
use crate::{LockError, LockOptions};

/// The Redlock settings of a client in that mode.
pub(crate) struct Redlock {
    pub(crate) urls: Vec<String>,
    pub(crate) quorum: usize,
    pub(crate) node_timeout: Duration,
    /// The release messages of each master, in the order of `urls`.
    pub(crate) wakeups: Vec<Wakeups>,
}

/// Rounds on every master until a majority grants a valid lease, or the wait ends: the
/// process's leading task runs them (its other tasks wait in the local queue). Returns the
/// token and when its round was sent.
pub(crate) async fn acquire(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    options: &LockOptions,
    (started, deadline): (Instant, Instant),
) -> Result<(Token, Taken), LockError> {
    // One subscription per master, made after the first lost round.
    let mut tickets: Vec<WaitTicket> = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let token = new_token();
        let round = acquire_round(nodes, redlock, names, &token, options).await?;
        if won(&round, redlock, options.ttl) {
            tracing::debug!(
                key = %names.lock(),
                granted = round.granted,
                waited_ms = started.elapsed().as_millis() as u64,
                "lock acquired on a quorum"
            );
            let taken = Taken {
                sent: round.sent,
                fence: None,
                queued: false,
            };
            return Ok((token, taken));
        }
        // Give back every grant, also on masters that seemed to fail: their grant may
        // only have been late. Silently: announcing it would wake every waiter into the
        // next split of the votes.
        if (round.granted > 0 || !round.failures.is_empty())
            && let Err(err) = release_all(nodes, redlock, names, &token, false).await
        {
            tracing::debug!(key = %names.lock(), error = %err.cause(), "releasing a failed round");
        }
        if let Some(err) = lost_for_good(&round, redlock, names.lock(), options, started, deadline)
        {
            return Err(err);
        }
        let now = Instant::now();
        if tickets.is_empty() {
            // Subscribe, then try again at once: a release in between would go unheard.
            tickets = subscribe(redlock, names, deadline).await;
            continue;
        }
        if round.granted > 0 {
            // A split vote (waiters woken by one release took a master each): try again
            // after a random pause, which breaks the symmetry, as the reference algorithm
            // does.
            tokio::time::sleep(jitter().min(deadline - now)).await;
            continue;
        }
        // Held by another owner: parked until the first release message of any master,
        // the holder's lease (a crashed holder publishes nothing), or the wait's end.
        let park = round
            .held_for
            .unwrap_or(MAX_PARK)
            .clamp(Duration::from_millis(1), MAX_PARK)
            .saturating_add(jitter())
            .min(deadline - now);
        wait_any(&tickets, park).await;
    }
    Err(LockError::Timeout {
        key: names.lock().to_owned(),
        waited: started.elapsed(),
    })
}

/// The error that ends a wait after a lost round: no majority left (only "held by another
/// owner" is worth waiting for: masters that refuse or do not answer fail the call at
/// once), `Busy` for a try-once caller, `Timeout` once the wait ran out.
fn lost_for_good(
    round: &Round,
    redlock: &Redlock,
    key: &str,
    options: &LockOptions,
    started: Instant,
    deadline: Instant,
) -> Option<LockError> {
    if let Some(err) = no_quorum(round, redlock, key) {
        return Some(err);
    }
    let now = Instant::now();
    if options.wait.is_zero() && round.held_for.is_some() {
        return Some(LockError::Busy {
            key: key.to_owned(),
        });
    }
    (options.wait.is_zero() || now >= deadline).then(|| LockError::Timeout {
        key: key.to_owned(),
        waited: now - started,
    })
}

/// A bound on the rounds of one wait, far above what any wait makes (each round but the
/// first is preceded by a park or a subscription).
const MAX_ROUNDS: u32 = 1_000_000;

/// The longest a Redlock waiter parks without trying again, should a release message be
/// lost (a master's subscription reconnecting, a foreign client releasing).
const MAX_PARK: Duration = Duration::from_secs(1);

/// Registers this process's waiter on every master's release channel for the key and
/// subscribes, all at once (each master's reconciler on its own connection). A master whose
/// subscription fails is left out: the others' messages and the park's cap still wake us.
async fn subscribe(redlock: &Redlock, names: &KeyNames, deadline: Instant) -> Vec<WaitTicket> {
    let tickets: Vec<WaitTicket> = redlock
        .wakeups
        .iter()
        .map(|wakeups| wakeups.register(names.channel(), ""))
        .collect();
    let answers = tokio::time::timeout_at(
        deadline,
        join_all(tickets.iter().map(WaitTicket::subscribe)),
    )
    .await;
    if let Ok(answers) = answers {
        for (answer, url) in answers.iter().zip(&redlock.urls) {
            if let Err(err) = answer {
                tracing::debug!(key = %names.lock(), master = %url, error = %err, "cannot subscribe to release messages");
            }
        }
    }
    tickets
}

/// Waits until any of `tickets` is woken by a release message, or `park` passes.
async fn wait_any(tickets: &[WaitTicket], park: Duration) {
    let woken = tickets.iter().map(|ticket| Box::pin(ticket.wait(park)));
    let _ = futures_util::future::select_all(woken).await;
}

/// What one round of acquire requests to every master found.
pub(crate) struct Round {
    /// The send time of the round (the start of the lease's validity).
    pub(crate) sent: Instant,
    /// Masters that granted the lock.
    pub(crate) granted: usize,
    /// The shortest remaining lease among masters where another owner holds it.
    pub(crate) held_for: Option<Duration>,
    /// Masters that failed or did not answer in time, with why.
    pub(crate) failures: Vec<String>,
}

/// One acquire round on every master.
async fn acquire_round(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
) -> Result<Round, LockError> {
    if options.fencing {
        return Err(LockError::Config {
            reason: format!(
                "lock `{}` asks for fencing, which Redlock mode does not offer: counters on \
                 independent masters give no single order; use a single instance or a cluster",
                names.lock()
            ),
        });
    }
    let limit = redlock.node_timeout.max(Duration::from_millis(1));
    let sent = Instant::now();
    let replies = join_all(nodes.iter().map(|connection| {
        let mut connection = connection.clone();
        async move {
            // Try once, never queue: there is no queue across independent masters.
            let invocation = acquire_call(names, token, options.ttl, 0, false, Duration::ZERO);
            let ask = async {
                match invoke::<(i64, i64)>(&invocation, &mut connection).await {
                    // A connection manager answers the first command after a failed
                    // reconnection with that failure and reconnects for the next: a master
                    // back from a restart is asked once more before it counts as down.
                    Err(err) if err.is_connection_refusal() || err.is_connection_dropped() => {
                        invoke::<(i64, i64)>(&invocation, &mut connection).await
                    }
                    reply => reply,
                }
            };
            tokio::time::timeout(limit, ask).await
        }
    }))
    .await;
    let mut round = Round {
        sent,
        granted: 0,
        held_for: None,
        failures: Vec::new(),
    };
    for (reply, url) in replies.into_iter().zip(&redlock.urls) {
        match reply {
            Ok(Ok((1, _))) => round.granted += 1,
            Ok(Ok((_, pttl))) => {
                let pttl = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
                round.held_for = Some(round.held_for.map_or(pttl, |held| held.min(pttl)));
            }
            Ok(Err(err)) => round.failures.push(format!("{url}: {err}")),
            Err(_) => round
                .failures
                .push(format!("{url}: no answer within {limit:?}")),
        }
    }
    Ok(round)
}

/// Whether a round holds the lock: a majority granted it and the lease is still valid.
fn won(round: &Round, redlock: &Redlock, ttl: Duration) -> bool {
    round.granted >= redlock.quorum && Instant::now() < validity(round.sent, ttl)
}

/// The error for a round in which too many masters failed for any quorum.
fn no_quorum(round: &Round, redlock: &Redlock, key: &str) -> Option<LockError> {
    let nodes = redlock.urls.len();
    (round.failures.len() > nodes - redlock.quorum).then(|| LockError::NoQuorum {
        key: key.to_owned(),
        answered: nodes - round.failures.len(),
        needed: redlock.quorum,
        nodes,
        failures: round.failures.join("; "),
    })
}

/// Releases on every master. 1 when a majority released our token, -1 when another owner
/// holds it somewhere, 0 when it was gone everywhere else. An `announce`d release (a
/// holder's) wakes the waiters subscribed on each master; a lost round's give-back does not.
pub(crate) async fn release_all(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    announce: bool,
) -> Result<i64, LockError> {
    let replies = join_all(nodes.iter().map(|connection| {
        let mut connection = connection.clone();
        async move {
            let call = if announce {
                announced_release_call(names, token, "PUBLISH")
            } else {
                queue_call(&RELEASE, names, token, "PUBLISH")
            };
            invoke::<i64>(&call, &mut connection).await
        }
    }))
    .await;
    let mut released = 0;
    let mut foreign = 0;
    let mut last_error = None;
    for reply in replies {
        match reply {
            Ok(1) => released += 1,
            Ok(-1) => foreign += 1,
            Ok(_) => {}
            Err(err) => last_error = Some(err),
        }
    }
    if released >= redlock.quorum {
        return Ok(1);
    }
    if foreign > 0 {
        return Ok(-1);
    }
    match last_error {
        Some(err) if released == 0 => Err(LockError::backend(names.lock(), err)),
        _ => Ok(0),
    }
}

/// Whether a majority of the masters hold `key`.
pub(crate) async fn is_locked(
    nodes: &[Connection],
    redlock: &Redlock,
    key: &str,
) -> Result<bool, LockError> {
    let replies = join_all(nodes.iter().map(|connection| {
        let mut connection = connection.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(key)
                .query_async::<bool>(&mut connection)
                .await
        }
    }))
    .await;
    let held = replies
        .iter()
        .filter(|reply| matches!(reply, Ok(true)))
        .count();
    let answered = replies.iter().filter(|reply| reply.is_ok()).count();
    if answered < redlock.quorum {
        let failures = replies
            .into_iter()
            .zip(&redlock.urls)
            .filter_map(|(reply, url)| reply.err().map(|err| format!("{url}: {err}")))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(LockError::NoQuorum {
            key: key.to_owned(),
            answered,
            needed: redlock.quorum,
            nodes: redlock.urls.len(),
            failures,
        });
    }
    Ok(held >= redlock.quorum)
}
