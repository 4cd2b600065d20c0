//! Redlock: a lock held on a majority of independent masters.
//!
//! Acquire runs the acquire script on every master at once, each with a short time limit
//! (the node timeout). The lock is ours when a majority granted it and the validity left
//! (`ttl` − elapsed − drift, measured from the send time) is positive; otherwise every
//! master is asked to release it, including those that seemed to fail (their grant may only
//! have been late), and the caller retries. Renewal (the watchdog) and release also go to
//! every master; a renewal keeps the lease only when a majority confirms it.
//!
//! A silent master (stopped, or behind a dead network path: it accepts connections and
//! answers nothing) costs next to nothing while a majority answers: a round or a release
//! ends once its outcome is known, giving the other masters a short grace (a silent master
//! still gets a release in the background), and a waiter subscribes on a majority without
//! waiting for the rest. A round without a majority of answers ends at the node timeout,
//! whatever the response timeout; the first such round of a wait in a row is tried again at
//! once (a stalled process, or a master starved for a moment beside one that is down), and
//! the second fails the call with `NoQuorum`.
//!
//! Waiting goes through the one wait loop (`queue/quorum_wait.rs` holds the waiter; this
//! module its rounds, subscriptions and give-backs): a waiter subscribes to the key's
//! release channel on every master (one subscription per key per process per master) and
//! parks until the first release message,
//! capped by the holder's remaining lease (a crashed holder publishes nothing). A round lost
//! to a split vote (waiters woken together took a master each) is retried after a random
//! pause, as in the reference algorithm; a fair queue across independent masters would need
//! its own consensus. When so many masters refuse or do not answer that no majority is left
//! in two rounds in a row, the call fails with `NoQuorum`.
//!
//! Fencing: each master keeps the key's counter, as in single-instance mode (a grant issues
//! `max(counter + 1, server time in µs)`). The token is the largest fence of the masters that
//! granted the lock, and before it is handed out it is written back (owner-checked) to a
//! majority of the masters' counters. A later holder is granted by a majority, which shares a
//! master with that one, where the counter now issues a greater fence: tokens strictly
//! increase from holder to holder, also across a master restarting empty or down. (The
//! largest fence alone would not do: a master whose counter ran ahead may be missing from
//! the next majority.) It costs one more round trip per fenced acquisition.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::call_site::CallSite;
use crate::connection::Connection;
use crate::identity::TokenMaker;
use crate::lease::{Taken, lateness, validity};
use redis::{RedisError, RedisResult};

use crate::options::fence_lifetime;
use crate::renewal::shutdown::Shutdown;
use crate::scripts::{
    Call, KeyNames, RELEASE, acquire_call, announced_release_call, queue_call, raise_fence_call,
    retake_call,
};
use crate::wakeups::{WaitTicket, Wakeups};
use crate::{error::LockError, options::LockOptions};

pub(crate) mod every_master;
use every_master::{AskUntil, ask_all};

/// The Redlock settings of a client in that mode.
pub(crate) struct Redlock {
    pub(crate) urls: Vec<String>,
    pub(crate) quorum: usize,
    pub(crate) node_timeout: Duration,
    /// The release messages of each master, in the order of `urls`.
    pub(crate) wakeups: Vec<Wakeups>,
}

impl Redlock {
    /// What asking every master at once needs of them: the node timeout and the quorum.
    fn majority(&self) -> (Duration, usize) {
        (self.node_timeout, self.quorum)
    }
}

/// What a Redlock acquisition needs of its client: the masters' connections, its shutdown
/// (checked between rounds) and the signal that ends a park when it shuts down.
pub(crate) struct Masters<'a> {
    pub(crate) nodes: &'a [Connection],
    pub(crate) shutdown: &'a Shutdown,
    pub(crate) interrupt: &'a tokio::sync::Notify,
    /// When a wait is told as long ([`Config::log_long_waits`](crate::Config::log_long_waits)).
    pub(crate) long_wait: Option<Duration>,
    /// Makes the tokens of the rounds, and where the lock was asked for (the tokens name it).
    pub(crate) tokens: (&'a TokenMaker, &'a CallSite),
    /// Where the wait is counted while it lasts.
    pub(crate) telemetry: &'a crate::telemetry::Telemetry,
}

/// Gives back what a lost round may have granted: every grant, also on masters that seemed
/// to fail (their grant may only have been late). Silently: announcing it would wake every
/// waiter into the next split of the votes. Only the masters that answered the round are
/// waited for (a silent one would add its response timeout). Returns the error that ends
/// the call when no majority answered.
pub(crate) async fn give_back_lost(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    round: &Round,
) -> Option<LockError> {
    let no_quorum = no_quorum(&round.failures, redlock, names.lock());
    if no_quorum.is_some()
        || round.granted > 0
        || round.answered.contains(&false)
        || !round.failures.is_empty()
    {
        give_back(nodes, redlock, names, token, &round.answered).await;
    }
    no_quorum
}

/// What a round that a majority granted gives: the lock, unless the client shut down
/// meanwhile (the grants are given back) or, with fencing, too few masters took the
/// fence in time (`None`: the next round decides).
pub(crate) async fn take_won(
    client: &Masters<'_>,
    redlock: &Redlock,
    names: &KeyNames,
    options: &LockOptions,
    (token, round): (&str, &Round),
) -> Result<Option<Taken>, LockError> {
    let nodes = client.nodes;
    if let Err(shut) = client.shutdown.check_open(names.lock()) {
        give_back(nodes, redlock, names, token, &round.answered).await;
        return Err(shut);
    }
    // With fencing, the token counts once a majority of the masters know it.
    let fence = match round.fence {
        Some(fence) => (raise_fences(nodes, redlock, names, token, fence, options).await
            && won(round, redlock, options.ttl))
        .then_some(fence),
        None => None,
    };
    Ok((fence.is_some() || !options.fencing).then(|| Taken {
        sent: round.sent,
        answered: Instant::now(),
        fence,
        queued: false,
    }))
}

/// The longest a Redlock waiter parks without trying again, should a release message be
/// lost (a master's subscription reconnecting, a foreign client releasing).
pub(crate) const MAX_PARK: Duration = Duration::from_secs(1);

/// Registers this process's waiter on every master's release channel for the key and
/// subscribes, all at once (each master's reconciler on its own connection), and returns
/// once a majority confirmed (or every master answered): a holder's release reaches a
/// majority, which shares a master with ours, so its message cannot go unheard. A master
/// whose subscription fails or is slow (a silent master answers nothing until its
/// connection times out) is not waited for: its subscription goes on in the background,
/// and the others' messages and the park's cap still wake us.
pub(crate) async fn subscribe(
    redlock: &Redlock,
    names: &KeyNames,
    deadline: Instant,
) -> Vec<WaitTicket> {
    use futures_util::StreamExt as _;
    let tickets: Vec<WaitTicket> = redlock
        .wakeups
        .iter()
        .map(|wakeups| wakeups.register(names.channel(), ""))
        .collect();
    let mut answers: futures_util::stream::FuturesUnordered<_> = tickets
        .iter()
        .zip(&redlock.urls)
        .map(|(ticket, url)| async move { (ticket.subscribe().await, url) })
        .collect();
    let mut confirmed = 0;
    while confirmed < redlock.quorum {
        match tokio::time::timeout_at(deadline, answers.next()).await {
            Ok(Some((Ok(()), _))) => confirmed += 1,
            Ok(Some((Err(err), url))) => {
                tracing::debug!(key = %names.lock(), master = %url, error = %err, "cannot subscribe to release messages");
            }
            Ok(None) | Err(_) => break,
        }
    }
    drop(answers);
    tickets
}

/// What one round of acquire requests to every master found.
pub(crate) struct Round {
    /// The send time of the round (the start of the lease's validity).
    pub(crate) sent: Instant,
    /// Masters that granted the lock.
    pub(crate) granted: usize,
    /// With fencing: the largest fence of the masters that granted the lock.
    pub(crate) fence: Option<u64>,
    /// The shortest remaining lease among masters where another owner holds it.
    pub(crate) held_for: Option<Duration>,
    /// Masters that failed or did not answer within the node timeout, with why.
    pub(crate) failures: Vec<String>,
    /// Which masters replied within the node timeout, with an answer or an error (in the
    /// order of the masters).
    pub(crate) answered: Vec<bool>,
    /// The round's end came well after the node timeout: this process was late (starved
    /// on a busy machine, or stopped), so a master without an answer may only have had
    /// its answer unread. Such a master is no failure: the round is lost, not hopeless.
    pub(crate) late: bool,
}

/// One acquire round on every master, each within the node timeout. Once its outcome is
/// known (a majority granted, or so many masters hold the key for another owner that no
/// majority can grant it) the other masters get a short grace only, so a silent minority
/// costs next to nothing; the round's requests end with it.
pub(crate) async fn acquire_round(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
) -> Result<Round, LockError> {
    let limit = redlock.node_timeout.max(Duration::from_millis(1));
    let lifetime = fence_lifetime(options);
    let sent = Instant::now();
    // Try once, never queue: there is no queue across independent masters. Every master
    // is waited for (up to the node timeout), so that the lock lands on all that answer.
    let call = || {
        acquire_call(
            names,
            token,
            options.ttl,
            lifetime,
            (false, false),
            (Duration::ZERO, None),
        )
    };
    let (replies, decided) = ask_all::<(i64, i64)>(
        nodes,
        redlock.majority(),
        AskUntil::NodeTimeout,
        call,
        |replies| round_decided(replies, redlock),
    )
    .await;
    // Ended well past the node timeout: this process was late to read the replies.
    let late = lateness(sent + limit).is_some();
    let mut round = Round {
        sent,
        granted: 0,
        fence: None,
        held_for: None,
        failures: Vec::new(),
        answered: replies.iter().map(Option::is_some).collect(),
        late,
    };
    for (reply, url) in replies.into_iter().zip(&redlock.urls) {
        match reply {
            Some(reply) => round.add(reply, url, options.fencing),
            // Not waited for: the outcome was known without it (given back or released
            // with the lock, should its grant land).
            None if decided || late => {}
            None => round
                .failures
                .push(format!("{url}: no answer within {limit:?}")),
        }
    }
    Ok(round)
}

/// Whether the outcome of an acquire round is known from the replies so far.
fn round_decided(replies: &[Option<RedisResult<(i64, i64)>>], redlock: &Redlock) -> bool {
    let count = |granted: bool| {
        replies
            .iter()
            .filter(|reply| matches!(reply, Some(Ok((acquired, _))) if (*acquired == 1) == granted))
            .count()
    };
    count(true) >= redlock.quorum || count(false) > redlock.urls.len() - redlock.quorum
}

impl Round {
    /// Counts a master's reply: a grant (and its fence), another owner's lease, or a failure.
    fn add(&mut self, reply: RedisResult<(i64, i64)>, url: &str, fencing: bool) {
        match reply {
            Ok((1, fence)) => {
                self.granted += 1;
                if fencing {
                    let fence = u64::try_from(fence).unwrap_or(0);
                    self.fence = Some(self.fence.map_or(fence, |max| max.max(fence)));
                }
            }
            Ok((_, pttl)) => {
                let pttl = Duration::from_millis(u64::try_from(pttl).unwrap_or(0));
                self.held_for = Some(self.held_for.map_or(pttl, |held| held.min(pttl)));
            }
            Err(err) => self.failures.push(format!("{url}: {err}")),
        }
    }
}

/// Raises the fence counter of every master to the holder's `fence`, while its `token`
/// still holds the key there; true when a majority did. Any later holder is granted by a
/// majority, which shares a master with this one, where the counter then issues a greater
/// fence: tokens strictly increase from holder to holder. A single master's counter is
/// seeded from its clock when it restarted empty, as in single-instance mode.
async fn raise_fences(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    fence: u64,
    options: &LockOptions,
) -> bool {
    let lifetime = fence_lifetime(options);
    let call = || raise_fence_call(names, token, fence, lifetime);
    let (replies, _) = ask_all(
        nodes,
        redlock.majority(),
        AskUntil::Quorum,
        call,
        |replies| ones(replies) >= redlock.quorum,
    )
    .await;
    let done = ones(&replies) >= redlock.quorum;
    if !done {
        tracing::debug!(key = %names.lock(), "the fence reached no majority; trying again");
    }
    done
}

/// How many masters answered 1 (raised the fence, released the lock).
fn ones(replies: &[Option<RedisResult<i64>>]) -> usize {
    replies
        .iter()
        .filter(|reply| matches!(reply, Some(Ok(1))))
        .count()
}

/// Re-dates the lock `token` holds on every master for a task of its process that takes it
/// over: the key's expiry becomes `options.ttl` and, with fencing, a fresh fence is issued
/// (the largest of the masters', raised on a majority). `Ok(None)` when no majority of the
/// masters holds the token any more.
pub(crate) async fn retake(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
) -> Result<Option<Option<u64>>, LockError> {
    let lifetime = fence_lifetime(options);
    let call = || retake_call(names, token, options.ttl, lifetime);
    let taken = |replies: &[Option<RedisResult<(i64, i64)>>]| {
        replies
            .iter()
            .filter(|reply| matches!(reply, Some(Ok((1, _)))))
            .count()
    };
    let (replies, _) = ask_all(
        nodes,
        redlock.majority(),
        AskUntil::Quorum,
        call,
        |replies| taken(replies) >= redlock.quorum,
    )
    .await;
    if taken(&replies) < redlock.quorum {
        return match replies.into_iter().flatten().find_map(Result::err) {
            Some(err) => Err(LockError::backend(names.lock(), err)),
            None => Ok(None),
        };
    }
    if !options.fencing {
        return Ok(Some(None));
    }
    let fence = replies
        .iter()
        .filter_map(|reply| match reply {
            Some(Ok((1, fence))) => u64::try_from(*fence).ok(),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    if raise_fences(nodes, redlock, names, token, fence, options).await {
        Ok(Some(Some(fence)))
    } else {
        Ok(None)
    }
}

/// Whether a round holds the lock: a majority granted it and the lease is still valid.
pub(crate) fn won(round: &Round, redlock: &Redlock, ttl: Duration) -> bool {
    round.granted >= redlock.quorum && Instant::now() < validity(round.sent, ttl)
}

/// Whether so many masters failed (`failures`) that no quorum is left.
pub(crate) fn short_of_quorum(failures: &[String], redlock: &Redlock) -> bool {
    failures.len() > redlock.urls.len() - redlock.quorum
}

/// The error for a round in which too many masters failed (`failures`) for any quorum.
pub(crate) fn no_quorum(failures: &[String], redlock: &Redlock, key: &str) -> Option<LockError> {
    let nodes = redlock.urls.len();
    short_of_quorum(failures, redlock).then(|| LockError::NoQuorum {
        key: key.to_owned(),
        answered: nodes - failures.len(),
        needed: redlock.quorum,
        nodes,
        failures: failures.join("; "),
    })
}

/// Releases on every master and wakes the waiters subscribed on each. 1 when a majority
/// released our token, -1 when another owner holds it somewhere, 0 when it was gone
/// everywhere else.
///
/// A silent minority costs next to nothing: once a majority released, the others get a
/// short grace ([`ask_all`]) and the release returns (a silent master still gets the
/// command, in the background). Without a majority released, the node timeout ends the
/// wait once a majority answered.
pub(crate) async fn release_all(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
) -> Result<i64, LockError> {
    let call = || announced_release_call(names, token, "PUBLISH");
    release_each(nodes, redlock, names.lock(), call).await
}

/// Sends a release `call` of the lease at `key` (its reply: 1 released, 0 gone, -1 another
/// owner's) to every master, as [`release_all`] does: 1 when a majority released it; a
/// master that failed it for a passing reason (a restart) is asked again in the background.
pub(crate) async fn release_each(
    nodes: &[Connection],
    redlock: &Redlock,
    key: &str,
    call: impl Fn() -> Call<'static>,
) -> Result<i64, LockError> {
    let (replies, _) = ask_all(
        nodes,
        redlock.majority(),
        AskUntil::Quorum,
        call,
        |replies| ones(replies) >= redlock.quorum,
    )
    .await;
    let count = ones(&replies);
    if count >= redlock.quorum {
        return Ok(1);
    }
    if replies.iter().any(|reply| matches!(reply, Some(Ok(-1)))) {
        return Ok(-1);
    }
    let silent = redlock
        .urls
        .iter()
        .zip(&replies)
        .filter(|(_, reply)| reply.is_none())
        .map(|(url, _)| url.as_str())
        .collect::<Vec<_>>();
    let error = replies.into_iter().flatten().find_map(Result::err);
    match error {
        Some(err) if count == 0 => Err(LockError::backend(key, err)),
        None if count == 0 && !silent.is_empty() => Err(LockError::backend(
            key,
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from {}", silent.join(", ")),
            )),
        )),
        _ => Ok(0),
    }
}

/// Gives back a lost round's grants on every master, waiting only for the masters that
/// answered the round (`answered`): a silent one gets the command in the background.
pub(crate) async fn give_back(
    nodes: &[Connection],
    redlock: &Redlock,
    names: &KeyNames,
    token: &str,
    answered: &[bool],
) {
    // A silent release: announcing it would wake every waiter into the next split of the
    // votes. A lost round's token never had a hold record to delete.
    let call = || queue_call(&RELEASE, names, token, "PUBLISH");
    let (replies, _) = ask_all::<i64>(
        nodes,
        redlock.majority(),
        AskUntil::Quorum,
        call,
        |replies| {
            (replies.iter().zip(answered)).all(|(reply, answered)| reply.is_some() || !answered)
        },
    )
    .await;
    if let Some(Err(err)) = replies.into_iter().flatten().find(Result::is_err) {
        tracing::debug!(key = %names.lock(), error = %err, "giving back a lost round");
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
    let failures: Vec<String> = (replies.into_iter().zip(&redlock.urls))
        .filter_map(|(reply, url)| reply.err().map(|err| format!("{url}: {err}")))
        .collect();
    match no_quorum(&failures, redlock, key) {
        Some(err) => Err(err),
        None => Ok(held >= redlock.quorum),
    }
}
