//! The subscription reconciler: one task per client sends every `SUBSCRIBE` and
//! `UNSUBSCRIBE` (`SSUBSCRIBE`/`SUNSUBSCRIBE` in a cluster), so that the server's channels
//! follow the local waiters and the commands for one channel never overtake each other.
//!
//! Each pass subscribes the channels that waiters asked for, and unsubscribes the channels
//! that may be on the server but have no waiter any more. "May be on the server" is this
//! task's own set: a channel enters it when its `SUBSCRIBE` is *sent* (it may reach the
//! server even when the reply is lost, or when the waiter that asked leaves mid-way) and
//! leaves it only when an `UNSUBSCRIBE` of it succeeded. A disconnection does not clear it:
//! an `UNSUBSCRIBE` of a channel that is not there is harmless, while forgetting one that
//! is there leaks it (a cluster connection subscribes its channels again by itself after a
//! reconnect).
//!
//! The task sleeps until woken: a waiter asked, a channel's last waiter left, the
//! connection dropped, the server dropped a channel being subscribed, the client was
//! dropped. A failed `SUBSCRIBE` is told to the waiters that asked (they park, capped, and
//! ask again); a failed `UNSUBSCRIBE` is tried again at the next wake, or after a pause
//! that doubles up to a minute while nothing else wakes the task.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::{join, join_all};
use redis::RedisResult;
use redis::aio::ConnectionManager;
use tokio::sync::Notify;

use super::{Registry, Shared, Subscription};
use crate::connection::LazyCluster;

/// The first pause before a failed `UNSUBSCRIBE` is tried again with nothing else to do.
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// The longest such pause (it doubles from [`FIRST_RETRY`]).
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Where subscriptions go: a dedicated RESP3 connection to a single server (`SUBSCRIBE`),
/// or a cluster connection (`SSUBSCRIBE`: sharded, served by the key's own shard).
#[derive(Clone)]
pub(super) enum Subscriber {
    Single(ConnectionManager),
    Cluster(LazyCluster),
}

/// One pass's commands.
#[derive(Default)]
struct Pass {
    /// The channels to subscribe, each with the stamp it was wanted under.
    subscribe: Vec<(String, u64)>,
    /// The channels to unsubscribe.
    unsubscribe: Vec<String>,
}

/// The outcome of each channel of a pass, in the pass's order.
struct Outcome {
    subscribed: Vec<RedisResult<()>>,
    unsubscribed: Vec<RedisResult<()>>,
}

/// The reconciler's loop; it ends when the client is dropped (the registry is closed or
/// gone), which drops the subscription connection and with it every subscription.
pub(super) async fn run(shared: Weak<Shared>, wake: Arc<Notify>, subscriber: Subscriber) {
    let mut on_server = HashSet::new();
    let mut retry = FIRST_RETRY;
    loop {
        // Registered before looking at the registry, so no wake between the two is lost.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(pass) = shared
            .upgrade()
            .and_then(|shared| shared.registry().plan(&on_server))
        else {
            return;
        };
        let mut unsubscribe_failed = false;
        if !pass.subscribe.is_empty() || !pass.unsubscribe.is_empty() {
            on_server.extend(pass.subscribe.iter().map(|(channel, _)| channel.clone()));
            let outcome = subscriber.apply(&pass).await;
            let Some(failed) = shared
                .upgrade()
                .and_then(|shared| shared.registry().settle(pass, outcome, &mut on_server))
            else {
                return;
            };
            unsubscribe_failed = failed;
        }
        if unsubscribe_failed {
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(retry) => {}
            }
            retry = (retry * 2).min(MAX_RETRY);
        } else {
            retry = FIRST_RETRY;
            notified.await;
        }
    }
}

impl Registry {
    /// The next pass: the pending channels (every channel after a disconnection) that are
    /// wanted, or that have no waiter but may be on the server. `None`: the client is gone.
    fn plan(&mut self, on_server: &HashSet<String>) -> Option<Pass> {
        if self.closed {
            return None;
        }
        let mut candidates = std::mem::take(&mut self.pending);
        if std::mem::take(&mut self.resync) {
            candidates.extend(self.channels.keys().cloned());
            candidates.extend(on_server.iter().cloned());
        }
        let mut pass = Pass::default();
        for channel in candidates {
            match self.channels.get(&channel) {
                Some(entry) if entry.state == Subscription::Wanted => {
                    let stamp = entry.stamp;
                    pass.subscribe.push((channel, stamp));
                }
                Some(_) => {}
                None if on_server.contains(&channel) => pass.unsubscribe.push(channel),
                None => {}
            }
        }
        Some(pass)
    }

    /// Records a pass's outcome and answers the waiters that asked. A `SUBSCRIBE` reply
    /// counts only if its channel's stamp did not change meanwhile (else whatever changed
    /// it made the channel pending again). Whether an `UNSUBSCRIBE` failed (those stay
    /// pending, to try again); `None`: the client is gone.
    fn settle(
        &mut self,
        pass: Pass,
        outcome: Outcome,
        on_server: &mut HashSet<String>,
    ) -> Option<bool> {
        if self.closed {
            return None;
        }
        let mut unsubscribe_failed = false;
        for (channel, result) in pass.unsubscribe.into_iter().zip(outcome.unsubscribed) {
            match result {
                Ok(()) => {
                    on_server.remove(&channel);
                }
                Err(err) => {
                    tracing::debug!(channel = %channel, error = %err, "unsubscribe failed");
                    unsubscribe_failed = true;
                    self.pending.insert(channel);
                }
            }
        }
        for ((channel, stamp), result) in pass.subscribe.into_iter().zip(outcome.subscribed) {
            let Some(entry) = self.channels.get_mut(&channel) else {
                continue;
            };
            if entry.stamp != stamp {
                continue;
            }
            entry.state = match &result {
                Ok(()) => Subscription::Confirmed,
                Err(err) => {
                    tracing::debug!(channel = %channel, error = %err, "subscribe failed");
                    Subscription::Idle
                }
            };
            entry.answer(&result);
        }
        Some(unsubscribe_failed)
    }
}

impl Subscriber {
    async fn apply(&self, pass: &Pass) -> Outcome {
        match self {
            Subscriber::Single(connection) => single(connection, pass).await,
            Subscriber::Cluster(lazy) => sharded(lazy, pass).await,
        }
    }
}

/// A single server: one `SUBSCRIBE` and one `UNSUBSCRIBE` for all the pass's channels,
/// sent together (the two sets are disjoint, so their order does not matter).
async fn single(connection: &ConnectionManager, pass: &Pass) -> Outcome {
    let subscribe: Vec<&str> = pass.subscribe.iter().map(|(c, _)| c.as_str()).collect();
    let unsubscribe: Vec<&str> = pass.unsubscribe.iter().map(String::as_str).collect();
    let (subscribed, unsubscribed) = join(
        send(connection, Command::Subscribe, &subscribe),
        send(connection, Command::Unsubscribe, &unsubscribe),
    )
    .await;
    Outcome {
        subscribed: vec![subscribed; subscribe.len()],
        unsubscribed: vec![unsubscribed; unsubscribe.len()],
    }
}

/// Which of the two a [`send`] is.
#[derive(Clone, Copy)]
enum Command {
    Subscribe,
    Unsubscribe,
}

/// Sends one (un)subscription of `channels` (none: sends nothing, as an `UNSUBSCRIBE`
/// without channels drops them all). When it finds the connection down it is sent once
/// more at once: the manager starts reconnecting only when a command finds its last
/// reconnection failed (the server was still down after a restart), and without a second
/// try the waiters would park until they ask again.
async fn send(
    connection: &ConnectionManager,
    command: Command,
    channels: &[&str],
) -> RedisResult<()> {
    if channels.is_empty() {
        return Ok(());
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let mut connection = connection.clone();
        let result = match command {
            Command::Subscribe => connection.subscribe(channels).await,
            Command::Unsubscribe => connection.unsubscribe(channels).await,
        };
        match result {
            Err(err) if err.is_io_error() && tries < 2 => continue,
            result => return result,
        }
    }
}

/// A cluster: one sharded command per channel, all at once (a sharded command must stay
/// within one slot, and each channel has its own).
async fn sharded(lazy: &LazyCluster, pass: &Pass) -> Outcome {
    let connection = match lazy.get().await {
        Ok(connection) => connection,
        Err(err) => {
            return Outcome {
                subscribed: vec![Err(err.clone()); pass.subscribe.len()],
                unsubscribed: vec![Err(err); pass.unsubscribe.len()],
            };
        }
    };
    let subscribe = join_all(pass.subscribe.iter().map(|(channel, _)| {
        let mut connection = connection.clone();
        async move { connection.ssubscribe(channel).await }
    }));
    let unsubscribe = join_all(pass.unsubscribe.iter().map(|channel| {
        let mut connection = connection.clone();
        async move { connection.sunsubscribe(channel).await }
    }));
    let (subscribed, unsubscribed) = join(subscribe, unsubscribe).await;
    Outcome {
        subscribed,
        unsubscribed,
    }
}
