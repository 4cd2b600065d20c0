//! Asking every master at once: the answers gathered until the outcome is known, a
//! silent minority given a short grace only, and releases that keep asking a master back
//! from a passing failure.

use std::future::Future;
use std::time::Duration;

use redis::{FromRedisValue, RedisError, RedisResult};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::LockError;
use crate::scripts::{Call, invoke};
use crate::topology::redlock::{Redlock, no_quorum};

/// How long [`ask_all`] waits for the masters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AskUntil {
    /// Until the node timeout, whatever answered (an acquire round: a silent majority
    /// fails the call then, not after the connections' response timeout).
    NodeTimeout,
    /// Past the node timeout only until a majority answered; without one, until the
    /// connections' response timeout (a release: a late answer still says it released).
    Quorum,
}

/// Asks one master: a master back from a restart is asked twice, as a connection manager
/// answers the first command after a failed reconnection with that failure, and
/// reconnects for the next.
pub(super) async fn ask_one<T: FromRedisValue>(
    mut connection: Connection,
    call: &Call<'static>,
) -> RedisResult<T> {
    match invoke::<T>(call, &mut connection).await {
        Err(err) if err.is_connection_refusal() || err.is_connection_dropped() => {
            invoke::<T>(call, &mut connection).await
        }
        reply => reply,
    }
}

/// How long a release or give-back keeps asking a master that failed it for a passing
/// reason (as a single server's release keeps trying).
pub(super) const GIVE_BACK_BUDGET: Duration = Duration::from_secs(2);

/// Asks one master in a task of its own (a release or a give-back) and sends the first
/// answer to `reply`. A passing failure (the master restarting, its connection dropped or
/// timing out) is asked again in the background, for [`GIVE_BACK_BUDGET`] at most: a
/// master back within it does not keep a released token until its ttl, where it would
/// block the key should another master fail.
pub(super) async fn ask_on<T: FromRedisValue>(
    connection: Connection,
    call: Call<'static>,
    reply: tokio::sync::oneshot::Sender<RedisResult<T>>,
) {
    let until = Instant::now() + GIVE_BACK_BUDGET;
    let answer = ask_one::<T>(connection.clone(), &call).await;
    let mut again = answer.as_ref().is_err_and(is_passing);
    let _ = reply.send(answer);
    let mut pause = Duration::from_millis(20);
    for _ in 0..100 {
        if !again || Instant::now() + pause >= until {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
        again = ask_one::<T>(connection.clone(), &call)
            .await
            .is_err_and(|err| is_passing(&err));
    }
}

/// A failure that another try may not meet: the connection, a time-out, a server loading.
pub(super) fn is_passing(err: &RedisError) -> bool {
    crate::error::is_connection_error(err)
        || matches!(
            err.kind(),
            redis::ErrorKind::Server(
                redis::ServerErrorKind::BusyLoading | redis::ServerErrorKind::TryAgain
            )
        )
}

/// Sends `call()` to every master at once and gathers the answers, in the
/// order of the masters, until `decided` says the outcome is known, every master answered,
/// or the node timeout ends the wait (see [`AskUntil`]); once `decided` holds, the others
/// get a short grace only. A master that had not answered
/// then is `None`; the flag says whether `decided` held (the outcome is known without
/// those masters).
pub(super) async fn ask_all<T>(
    nodes: &[Connection],
    (node_timeout, quorum): (Duration, usize),
    patience: AskUntil,
    call: impl Fn() -> Call<'static>,
    decided: impl Fn(&[Option<RedisResult<T>>]) -> bool,
) -> (Vec<Option<RedisResult<T>>>, bool)
where
    T: FromRedisValue + Send + 'static,
{
    use futures_util::StreamExt as _;
    let limit = Instant::now() + node_timeout.max(Duration::from_millis(1));
    let mut pending: futures_util::stream::FuturesUnordered<_> = nodes
        .iter()
        .enumerate()
        .map(|(index, connection)| {
            let ask = ask_node::<T>(connection, call(), patience);
            async move { (index, ask.await) }
        })
        .collect();
    let started = Instant::now();
    let mut replies: Vec<Option<RedisResult<T>>> = (0..nodes.len()).map(|_| None).collect();
    let mut answered = 0;
    // Once the outcome is known, the others get as long again as it took (and 2 ms), so
    // that healthy masters are all heard while a silent one costs next to nothing.
    let mut grace: Option<Instant> = None;
    while answered < nodes.len() {
        if grace.is_none() && decided(&replies) {
            grace = Some((Instant::now() + started.elapsed() + GRACE).min(limit));
        }
        let next = match grace {
            Some(end) => match tokio::time::timeout_at(end, pending.next()).await {
                Ok(next) => next,
                Err(_) => return (replies, true),
            },
            None if patience == AskUntil::NodeTimeout || answered >= quorum => {
                match tokio::time::timeout_at(limit, pending.next()).await {
                    Ok(next) => next,
                    Err(_) => return (replies, false),
                }
            }
            None => pending.next().await,
        };
        let Some((index, reply)) = next else { break };
        answered += 1;
        replies[index] = Some(reply);
    }
    (replies, grace.is_some())
}

/// One master's request of [`ask_all`], sent at once. An acquire's requests end with the
/// round: a grant sent after it would only block a master. Others (releases, give-backs) run
/// on in tasks of their own, so that a master the caller stops waiting for still gets them.
fn ask_node<T: FromRedisValue + Send + 'static>(
    connection: &Connection,
    call: Call<'static>,
    patience: AskUntil,
) -> futures_util::future::BoxFuture<'static, RedisResult<T>> {
    if patience == AskUntil::NodeTimeout {
        let connection = connection.clone();
        return Box::pin(async move { ask_one::<T>(connection, &call).await });
    }
    let (reply, answer) = tokio::sync::oneshot::channel();
    tokio::spawn(ask_on(connection.clone(), call, reply));
    Box::pin(async move {
        answer.await.unwrap_or_else(|_| {
            Err(RedisError::from((
                redis::ErrorKind::Client,
                "the request to the master ended abnormally",
            )))
        })
    })
}

/// How long past the time a decision took [`ask_all`] still waits for the other masters.
pub(super) const GRACE: Duration = Duration::from_millis(2);

/// Asks every master (`nodes`, in the order of the client's URLs) about the lock `key` with
/// `ask`, each within the node timeout: per master, its answer (`None` for a master that
/// failed), once every master answered or timed out. A key that is no lock on some master
/// is that master's error; fewer answers than a majority is `NoQuorum`, naming what the
/// others said.
pub(crate) async fn ask_each<T, F, Fut>(
    nodes: &[Connection],
    redlock: &Redlock,
    key: &str,
    ask: F,
) -> Result<Vec<Option<T>>, LockError>
where
    F: Fn(Connection) -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let limit = redlock.node_timeout.max(Duration::from_millis(1));
    let replies = futures_util::future::join_all(nodes.iter().map(|node| {
        let asked = ask(node.clone());
        async move {
            tokio::time::timeout(limit, asked)
                .await
                .unwrap_or_else(|_| {
                    Err(LockError::config(format!(
                        "no answer within the node timeout ({limit:?})"
                    )))
                })
        }
    }))
    .await;
    let mut failures = Vec::new();
    let mut answers = Vec::with_capacity(replies.len());
    for (url, reply) in redlock.urls.iter().zip(replies) {
        match reply {
            Ok(answer) => answers.push(Some(answer)),
            Err(err @ LockError::InvalidKey { .. }) => return Err(err),
            Err(err) => {
                failures.push(format!("{url}: {}", err.cause()));
                answers.push(None);
            }
        }
    }
    no_quorum(&failures, redlock, key).map_or(Ok(answers), Err)
}
