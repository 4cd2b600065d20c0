//! Release notifications: one subscription per key per process, shared by all local
//! waiters, waking exactly the waiter whose turn it is.
//!
//! The release script publishes the token of the waiter at the head of the key's queue
//! (`=token key` when it granted that waiter the lock outright, or an empty message when the
//! queue is empty). The push handler runs on the subscription connection's reader and only
//! touches a map under a short lock: it wakes the local waiter with that token (marking it
//! granted for `=token`), or the longest-waiting local waiter for an empty message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, OnceCell};

use crate::connection::LazyCluster;

/// The registry of local waiters and the subscription connection.
pub(crate) struct Wakeups {
    channels: Arc<Channels>,
    subscriber: Subscriber,
}

/// Where subscriptions go: a dedicated RESP3 connection to a single server (`SUBSCRIBE`),
/// or the cluster connection (`SSUBSCRIBE`: sharded, served by the key's own shard).
#[derive(Clone)]
enum Subscriber {
    Single(ConnectionManager),
    Cluster(LazyCluster),
}

impl Subscriber {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Subscriber::Single(connection) => connection.clone().subscribe(channel).await,
            Subscriber::Cluster(lazy) => lazy.get().await?.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match self {
            Subscriber::Single(connection) => connection.clone().unsubscribe(channel).await,
            Subscriber::Cluster(lazy) => lazy.get().await?.sunsubscribe(channel).await,
        }
    }
}

#[derive(Default)]
struct Channels {
    map: Mutex<HashMap<String, ChannelWaiters>>,
}

struct ChannelWaiters {
    /// In arrival order; the first is the longest-waiting local waiter.
    waiters: Vec<(String, Arc<Wake>)>,
    subscribed: Arc<OnceCell<()>>,
}

impl ChannelWaiters {
    /// Marks the channel unsubscribed, so that its next waiter subscribes it again; true when
    /// it was subscribed.
    fn forget_subscription(&mut self) -> bool {
        let was = self.subscribed.initialized();
        if was {
            self.subscribed = Arc::new(OnceCell::new());
        }
        was
    }

    /// Wakes every local waiter on the channel to try again.
    fn wake_all(&self) {
        for (_, wake) in &self.waiters {
            wake.notify.notify_one();
        }
    }
}

/// How one local waiter is woken, and whether the release granted it the lock.
#[derive(Default)]
struct Wake {
    notify: Notify,
    granted: AtomicBool,
}

impl Channels {
    fn map(&self) -> MutexGuard<'_, HashMap<String, ChannelWaiters>> {
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Handles one push from the subscription connection.
    fn dispatch(&self, push: PushInfo) {
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                let [channel, payload] = push.data.as_slice() else {
                    return;
                };
                let (Some(channel), Some(payload)) = (text(channel), text(payload)) else {
                    return;
                };
                let map = self.map();
                let Some(entry) = map.get(channel) else {
                    return;
                };
                let (granted, payload) = match payload.strip_prefix('=') {
                    Some(grant) => grant_on(channel, grant),
                    None => (false, payload),
                };
                let chosen = if payload.is_empty() {
                    entry.waiters.first()
                } else {
                    entry.waiters.iter().find(|(token, _)| token == payload)
                };
                if let Some((_, wake)) = chosen {
                    if granted {
                        wake.granted.store(true, Ordering::Release);
                    }
                    wake.notify.notify_one();
                }
            }
            // The server dropped a subscription (in a cluster: the slot moved to another
            // node). Forget it, and let the channel's waiters try again and resubscribe,
            // which now reaches the slot's new owner.
            PushKind::Unsubscribe | PushKind::SUnsubscribe => {
                let Some(channel) = push.data.first().and_then(text) else {
                    return;
                };
                let mut map = self.map();
                let Some(entry) = map.get_mut(channel) else {
                    return;
                };
                if entry.forget_subscription() {
                    entry.wake_all();
                }
            }
            // Messages may have been missed while disconnected: every waiter checks again.
            // The subscriptions count as gone too: the connection's one reconnection
            // attempt may fail (the server still down), and then only a command on it
            // reconnects it, so the waiters subscribe again themselves.
            PushKind::Disconnection => {
                for entry in self.map().values_mut() {
                    entry.forget_subscription();
                    entry.wake_all();
                }
            }
            _ => {}
        }
    }
}

/// Reads a grant message `TOKEN KEY`: the token it grants the lock to, and whether it is a
/// grant of this channel's own key (a message naming another key only wakes the waiter).
fn grant_on<'a>(channel: &str, grant: &'a str) -> (bool, &'a str) {
    match grant.split_once(' ') {
        Some((token, key)) => (
            crate::scripts::channel_of(key).is_some_and(|own| own == channel),
            token,
        ),
        None => (false, grant),
    }
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// The push handler: runs on the connection's reader, so it only dispatches.
fn handler(
    channels: &Arc<Channels>,
) -> impl Fn(PushInfo) -> Result<(), redis::aio::SendError> + Send + Sync + 'static {
    let channels = channels.clone();
    move |push: PushInfo| {
        channels.dispatch(push);
        Ok(())
    }
}

impl Wakeups {
    /// Sets up the (lazily connected, RESP3) subscription connection to a single server.
    pub(crate) fn single(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<Self> {
        let channels = Arc::new(Channels::default());
        let config = config
            .set_push_sender(handler(&channels))
            .set_automatic_resubscription();
        let connection = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Wakeups {
            channels,
            subscriber: Subscriber::Single(connection),
        })
    }

    /// Sets up a (lazily connected, RESP3) cluster connection of its own for sharded
    /// subscriptions, with this registry as its push handler. Commands go over another
    /// connection, so a subscription being moved between nodes never holds them up.
    pub(crate) fn cluster(builder: ClusterClientBuilder) -> redis::RedisResult<Self> {
        let channels = Arc::new(Channels::default());
        let client = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(handler(&channels))
            .build()?;
        Ok(Wakeups {
            channels,
            subscriber: Subscriber::Cluster(LazyCluster::new(client)),
        })
    }

    /// Registers a local waiter on `channel`. With `only_if_subscribed`, registers only when
    /// the channel's subscription is already confirmed (so no release can go unheard
    /// between the caller's next attempt and its wait).
    pub(crate) fn register(
        &self,
        channel: &str,
        token: &str,
        only_if_subscribed: bool,
    ) -> Option<WaitTicket> {
        let wake = Arc::new(Wake::default());
        let mut map = self.channels.map();
        if only_if_subscribed
            && !map
                .get(channel)
                .is_some_and(|entry| entry.subscribed.initialized())
        {
            return None;
        }
        let entry = map
            .entry(channel.to_owned())
            .or_insert_with(|| ChannelWaiters {
                waiters: Vec::new(),
                subscribed: Arc::new(OnceCell::new()),
            });
        entry.waiters.push((token.to_owned(), wake.clone()));
        Some(WaitTicket {
            channels: self.channels.clone(),
            subscriber: self.subscriber.clone(),
            channel: channel.to_owned(),
            token: token.to_owned(),
            wake,
        })
    }

    /// Whether any local waiter is registered on `channel`: the key is contended here.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.channels
            .map()
            .get(channel)
            .is_some_and(|entry| !entry.waiters.is_empty())
    }

    /// How many local waiters are registered (all channels).
    pub(crate) fn waiting(&self) -> usize {
        self.channels
            .map()
            .values()
            .map(|entry| entry.waiters.len())
            .sum()
    }

    /// How many channels this process is subscribed to (or subscribing).
    pub(crate) fn channels(&self) -> usize {
        self.channels.map().len()
    }
}

/// A local waiter's place: it is woken through [`WaitTicket::wait`] and leaves the
/// registry when dropped (unsubscribing when it was the channel's last waiter).
pub(crate) struct WaitTicket {
    channels: Arc<Channels>,
    subscriber: Subscriber,
    channel: String,
    token: String,
    wake: Arc<Wake>,
}

impl WaitTicket {
    /// The channel's subscription state now (it is replaced when the server drops it).
    fn subscription(&self) -> Option<Arc<OnceCell<()>>> {
        self.channels
            .map()
            .get(&self.channel)
            .map(|entry| entry.subscribed.clone())
    }

    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscription().is_some_and(|cell| cell.initialized())
    }

    /// Subscribes the channel once for all local waiters; later callers wait for the first.
    pub(crate) async fn subscribe(&self) -> redis::RedisResult<()> {
        let Some(cell) = self.subscription() else {
            return Ok(());
        };
        cell.get_or_try_init(|| self.subscriber.subscribe(&self.channel))
            .await
            .map(|_| ())
    }

    /// Whether a release granted this waiter the lock outright (the key holds its token).
    pub(crate) fn granted(&self) -> bool {
        self.wake.granted.load(Ordering::Acquire)
    }

    /// Waits until woken or `max` passes; true when woken.
    pub(crate) async fn wait(&self, max: Duration) -> bool {
        tokio::time::timeout(max, self.wake.notify.notified())
            .await
            .is_ok()
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let mut map = self.channels.map();
        let Some(entry) = map.get_mut(&self.channel) else {
            return;
        };
        entry
            .waiters
            .retain(|(token, wake)| !(token == &self.token && Arc::ptr_eq(wake, &self.wake)));
        if !entry.waiters.is_empty() {
            return;
        }
        let was_subscribed = entry.subscribed.initialized();
        map.remove(&self.channel);
        drop(map);
        if !was_subscribed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let channels = self.channels.clone();
        let subscriber = self.subscriber.clone();
        let channel = std::mem::take(&mut self.channel);
        runtime.spawn(async move {
            // A new waiter may have subscribed the channel again meanwhile: keep it then.
            if channels.map().contains_key(&channel) {
                return;
            }
            if let Err(err) = subscriber.unsubscribe(&channel).await {
                tracing::debug!(channel = %channel, error = %err, "unsubscribe failed");
            }
        });
    }
}
