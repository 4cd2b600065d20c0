//! Redlock: a lock held on a majority of independent masters.
//!
//! Acquire runs the acquire script on every master at once, each with a short time limit.
//! The lock is ours when a majority granted it and the validity left (`ttl` − elapsed −
//! drift, measured from the send time) is positive; otherwise every master is asked to
//! release it, including those that seemed to fail (their grant may only have been slow),
//! and the caller retries after a jittered pause. Renewal (the watchdog) and release also go
//! to every master; a renewal keeps the lease only when a majority confirms it.
//!
//! Waiting here is a jittered retry capped by the holders' remaining leases, as in the
//! reference algorithm: a fair queue across independent masters would need its own
//! consensus. Fencing is refused: independent counters cannot give one total order.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::connection::Connection;
use crate::lease::{Taken, jitter, millis, new_token, validity};
use crate::scripts::{ACQUIRE, KeyNames, RELEASE, invoke, queue_call};
use crate::{LockError, LockOptions};

/// The Redlock settings of a client in that mode.
#[derive(Debug)]
pub(crate) struct Redlock {
    pub(crate) urls: Vec<String>,
    pub(crate) quorum: usize,
    pub(crate) node_timeout: Duration,
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
) -> Result<(String, Taken), LockError> {
    let mut backoff = Duration::from_millis(5);
    loop {
        let token = new_token();
        let round = acquire_round(nodes, redlock, names, &token, options).await?;
        if won(&round, redlock, options.ttl) {
            tracing::debug!(
                key = %names.lock,
                granted = round.granted,
                waited_ms = started.elapsed().as_millis() as u64,
                "lock acquired on a quorum"
            );
            let taken = Taken {
                sent: round.sent,
                fence: None,
                window_used: false,
            };
            return Ok((token, taken));
        }
        // Give back every grant, also on masters that seemed to fail: their grant may
        // only have been late.
        if (round.granted > 0 || !round.failures.is_empty())
            && let Err(err) = release_all(nodes, redlock, names, &token).await
        {
            tracing::debug!(key = %names.lock, error = %err, "releasing a failed round");
        }
        let now = Instant::now();
        if options.wait.is_zero() || now >= deadline {
            if let Some(err) = no_quorum(&round, redlock, &names.lock) {
                return Err(err);
            }
            if options.wait.is_zero() && round.held_for.is_some() {
                return Err(LockError::Busy {
                    key: names.lock.clone(),
                });
            }
            return Err(LockError::Timeout {
                key: names.lock.clone(),
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
                names.lock
            ),
        });
    }
    let limit = redlock.node_timeout.max(Duration::from_millis(1));
    let sent = Instant::now();
    let replies = join_all(nodes.iter().map(|connection| {
        let mut connection = connection.clone();
        async move {
            let mut invocation = ACQUIRE.key(&names.lock);
            invocation
                .key(&names.fence)
                .key(&names.queue)
                .key(&names.deadlines)
                .key(&names.ttls)
                .arg(token)
                .arg(millis(options.ttl))
                .arg(0)
                .arg(0)
                .arg(0);
            tokio::time::timeout(limit, invoke::<(i64, i64)>(&invocation, &mut connection)).await
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
/// holds it somewhere, 0 when it was gone everywhere else.
pub(crate) async fn release_all(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
) -> Result<i64, LockError> {
    let replies = join_all(nodes.iter().map(|connection| {
        let mut connection = connection.clone();
        async move {
            invoke::<i64>(
                &queue_call(&RELEASE, names, token, "PUBLISH"),
                &mut connection,
            )
            .await
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
        Some(err) if released == 0 => Err(LockError::backend(&names.lock, err)),
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
