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

#[cfg(feature = "cluster")]
use futures_util::future::{join, join_all};
use redis::RedisResult;
use tokio::sync::Notify;

use super::single::{Command, SingleSubscriber};
use super::{Registry, Subscription, WakeupsShared};
#[cfg(feature = "cluster")]
use crate::connection::lazy_cluster::LazyCluster;

/// The first pause before a failed `UNSUBSCRIBE` is tried again with nothing else to do.
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// The longest such pause (it doubles from [`FIRST_RETRY`]).
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Where subscriptions go: a dedicated connection to a single server (`SUBSCRIBE`; RESP3,
/// or RESP2 pub/sub on a server that refuses RESP3), or a cluster connection
/// (`SSUBSCRIBE`: sharded, served by the key's own shard).
pub(super) enum Subscriber {
    Single(Box<SingleSubscriber>),
    #[cfg(feature = "cluster")]
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
struct PassOutcome {
    subscribed: Vec<RedisResult<()>>,
    unsubscribed: Vec<RedisResult<()>>,
}

/// The reconciler's loop; it ends when the client is dropped (the registry is closed or
/// gone), which drops the subscription connection and with it every subscription.
pub(super) async fn run(
    shared: Weak<WakeupsShared>,
    wake: Arc<Notify>,
    mut subscriber: Subscriber,
) {
    let mut on_server = HashSet::new();
    let mut retry = FIRST_RETRY;
    loop {
        // Registered before looking at the registry, so no wake between the two is lost.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(shared_now) = shared.upgrade() else {
            return;
        };
        let moved = shared_now.registry().moved.take();
        if let Some(primary) = moved
            && subscriber.move_to(primary)
        {
            // The old server's connection is closed, and its subscriptions with it.
            on_server.clear();
            shared_now.registry().disconnected();
        }
        let Some(pass) = shared_now.registry().plan(&on_server) else {
            return;
        };
        drop(shared_now);
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
        outcome: PassOutcome,
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
    async fn apply(&mut self, pass: &Pass) -> PassOutcome {
        match self {
            Subscriber::Single(subscriber) => single(subscriber, pass).await,
            #[cfg(feature = "cluster")]
            Subscriber::Cluster(lazy) => sharded(lazy, pass).await,
        }
    }

    /// Moves a single server's subscriptions to `primary`; true when they moved.
    fn move_to(&mut self, primary: redis::Client) -> bool {
        match self {
            Subscriber::Single(subscriber) => subscriber.move_to(primary),
            #[cfg(feature = "cluster")]
            Subscriber::Cluster(_) => false,
        }
    }
}

/// A single server: one `SUBSCRIBE` and one `UNSUBSCRIBE` for all the pass's channels.
async fn single(subscriber: &mut SingleSubscriber, pass: &Pass) -> PassOutcome {
    let subscribe: Vec<&str> = pass.subscribe.iter().map(|(c, _)| c.as_str()).collect();
    let unsubscribe: Vec<&str> = pass.unsubscribe.iter().map(String::as_str).collect();
    let subscribed = subscriber.send(Command::Subscribe, &subscribe).await;
    let unsubscribed = subscriber.send(Command::Unsubscribe, &unsubscribe).await;
    PassOutcome {
        subscribed: vec![subscribed; subscribe.len()],
        unsubscribed: vec![unsubscribed; unsubscribe.len()],
    }
}

/// A cluster: one sharded command per channel, all at once (a sharded command must stay
/// within one slot, and each channel has its own).
#[cfg(feature = "cluster")]
async fn sharded(lazy: &LazyCluster, pass: &Pass) -> PassOutcome {
    let connection = match lazy.get().await {
        Ok(connection) => connection,
        Err(err) => {
            return PassOutcome {
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
    PassOutcome {
        subscribed,
        unsubscribed,
    }
}
