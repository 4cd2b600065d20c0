//! Release notifications: one subscription per key per process, shared by all local
//! waiters, waking exactly the waiter whose turn it is.
//!
//! The release script publishes the token of the waiter at the head of the key's queue
//! (`=token key` when it granted that waiter the lock outright, or an empty message when the
//! queue is empty). The push handler runs on the subscription connection's reader and only
//! touches a map under a short lock: it wakes the local waiter with that token, or the
//! longest-waiting local waiter for an empty message. A woken waiter tries again: that try
//! confirms a grant, so the message need not say which it was. One message does not ask
//! for a try: `=token` with no key, which a release sends to the waiter next after the
//! grantee ([`Woken::LookLater`]).
//!
//! Subscriptions follow the waiters: a channel is subscribed while it has a local waiter
//! that asked for it, and only then. One task per client, the [`reconciler`], sends every
//! `SUBSCRIBE` and `UNSUBSCRIBE` (sharded in a cluster), so the commands for one channel
//! are strictly ordered, and it remembers every channel it may have left on the server, so
//! a waiter that leaves mid-`SUBSCRIBE`, or while the server is down, still gets its
//! channel unsubscribed. redis-rs's own resubscription after a reconnect is off: it would
//! restore channels whose waiters left while the connection was down.

mod reconciler;
mod single;

pub(crate) use single::Timeouts;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClientBuilder;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::{Notify, oneshot};

#[cfg(feature = "cluster")]
use crate::connection::lazy_cluster::LazyCluster;
use reconciler::Subscriber;
use single::SingleSubscriber;

/// The registry of local waiters; its reconciler owns the subscription connection.
pub(crate) struct Wakeups {
    shared: Arc<WakeupsShared>,
}

/// What the push handler, the waiters and the reconciler share.
struct WakeupsShared {
    registry: Mutex<Registry>,
    /// Wakes the reconciler: a waiter asked for a subscription, a channel's last waiter
    /// left, the connection dropped, the client was dropped.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct Registry {
    /// The channels with local waiters: the only ones that may stay subscribed.
    channels: HashMap<String, ChannelWaiters>,
    /// Channels the reconciler must look at again: asked for, left by their last waiter,
    /// dropped by the server while being subscribed, or not unsubscribed yet.
    pending: HashSet<String>,
    /// A disconnection happened: the reconciler looks at every channel, the wanted ones and
    /// every one it may have left on the server.
    resync: bool,
    /// The source of [`ChannelWaiters::stamp`]s, so that no two are ever equal.
    last_stamp: u64,
    /// The client is gone: no subscription will be made any more.
    closed: bool,
    /// The server the subscriptions should move to (a new primary), for the reconciler.
    moved: Option<redis::Client>,
    /// Notices (`!TOKEN WHO`: a lock of this client's taken away by an operator) not yet
    /// read by the client's notice listener (`renewal/notices.rs`), at most
    /// [`MAX_NOTICES`].
    notices: Vec<String>,
}

/// The most notices kept unread; more are dropped (their holders find out at their next
/// renewal).
const MAX_NOTICES: usize = 1024;

struct ChannelWaiters {
    /// In arrival order; the first is the longest-waiting local waiter.
    waiters: Vec<(String, Arc<Wake>)>,
    state: Subscription,
    /// Renewed whenever the subscription may have been lost (a disconnection, the server
    /// dropping it); a new entry gets a fresh one. A `SUBSCRIBE` reply confirms the channel
    /// only if the stamp is still the one it was sent under.
    stamp: u64,
    /// The waiters blocked in [`WaitTicket::subscribe`], answered with the outcome of the
    /// next `SUBSCRIBE`.
    asking: Vec<oneshot::Sender<RedisResult<()>>>,
    /// A channel the client keeps while it lives (its notice channel, see
    /// [`Wakeups::registrar`]), not one a wait asked for.
    standing: bool,
}

/// A channel's subscription as this process knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subscription {
    /// Not asked for, or the last try failed: a waiter asks again after its park.
    Idle,
    /// A waiter asked (or a disconnection dropped it): the reconciler subscribes it.
    Wanted,
    /// The server confirmed it on the current connection.
    Confirmed,
}

impl ChannelWaiters {
    /// Wakes every local waiter on the channel to try again.
    fn wake_all(&self) {
        for (_, wake) in &self.waiters {
            wake.notify.notify_one();
        }
    }

    /// Answers the waiters blocked in `subscribe` (a waiter that gave up is gone: ignored).
    fn answer(&mut self, outcome: &RedisResult<()>) {
        for asking in self.asking.drain(..) {
            let _ = asking.send(outcome.clone());
        }
    }
}

/// How one local waiter is woken.
#[derive(Default)]
struct Wake {
    notify: Notify,
    /// The last message for this waiter was a look-later one (see [`Woken::LookLater`]).
    later: AtomicBool,
}

/// Why a parked waiter woke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// Its park ran out.
    Timeout,
    /// A message: try again now.
    TryNow,
    /// A release granted the key to the process ahead (message `=token`, no key): the
    /// process this waiter watched holds the key no more, and the grantee holds it for at
    /// most its confirmation window. Clients without this distinction read it as a grant
    /// message for another token than theirs and try again at once.
    LookLater,
}

impl WakeupsShared {
    fn new() -> Arc<Self> {
        Arc::new(WakeupsShared {
            registry: Mutex::new(Registry::default()),
            wake: Arc::new(Notify::new()),
        })
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Every update under this lock is a few field stores or single map operations, so
        // a panic elsewhere cannot leave it half-done: poisoning is ignored.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Registry {
    fn next_stamp(&mut self) -> u64 {
        self.last_stamp += 1;
        self.last_stamp
    }

    /// Wakes the waiter a release message names (or the longest-waiting one); a notice
    /// (`!…`) is kept for the channel's listener, which it wakes.
    fn deliver(&mut self, channel: &str, payload: &str) {
        let Some(entry) = self.channels.get(channel) else {
            return;
        };
        if payload.starts_with('!') {
            if self.notices.len() < MAX_NOTICES {
                self.notices.push(payload.to_owned());
            }
            entry.wake_all();
            return;
        }
        // A grant `=TOKEN KEY` wakes the waiter with that token, like a hand-over's `TOKEN`;
        // `=TOKEN` alone (no key: never a grant) wakes it to look later.
        let (payload, later) = match payload.strip_prefix('=') {
            Some(grant) => grant
                .split_once(' ')
                .map_or((grant, true), |(token, _)| (token, false)),
            None => (payload, false),
        };
        let chosen = if payload.is_empty() {
            entry.waiters.first()
        } else {
            entry.waiters.iter().find(|(token, _)| token == payload)
        };
        if let Some((_, wake)) = chosen {
            // A message that says to try now overrides a look-later one not yet read.
            wake.later.store(later, Ordering::SeqCst);
            wake.notify.notify_one();
        }
    }

    /// The server dropped `channel` (in a cluster: its slot moved to another node), or
    /// confirmed an `UNSUBSCRIBE` of ours that a new waiter overtook; true when the
    /// reconciler has work. A confirmed channel is forgotten and its waiters try again
    /// and ask anew, which reaches the slot's new owner; one being subscribed is
    /// subscribed again, as the reply may predate the drop.
    fn dropped(&mut self, channel: &str) -> bool {
        let stamp = self.next_stamp();
        let Some(entry) = self.channels.get_mut(channel) else {
            return false;
        };
        entry.stamp = stamp;
        match entry.state {
            Subscription::Confirmed => {
                entry.state = Subscription::Idle;
                entry.wake_all();
                false
            }
            Subscription::Wanted => {
                self.pending.insert(channel.to_owned());
                true
            }
            Subscription::Idle => false,
        }
    }

    /// The connection dropped: every subscription is gone, and messages may have been
    /// missed. Every waiter checks again, and the reconciler subscribes again whatever
    /// still has waiters (the connection manager's one reconnection attempt may fail with
    /// the server still down; a failed subscription is tried again when a waiter asks).
    fn disconnected(&mut self) {
        for entry in self.channels.values_mut() {
            self.last_stamp += 1;
            entry.stamp = self.last_stamp;
            entry.state = Subscription::Wanted;
            entry.wake_all();
        }
        self.resync = true;
    }

    /// The client is gone: the waiters still asking get an error instead of hanging.
    fn close(&mut self) {
        self.closed = true;
        let outcome = Err(closed());
        for entry in self.channels.values_mut() {
            entry.answer(&outcome);
        }
    }
}

fn closed() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "the lock client was dropped; its release subscriptions are closed",
    ))
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// Handles one push from the subscription connection.
fn dispatch(shared: &WakeupsShared, push: PushInfo) {
    let reconcile = match push.kind {
        PushKind::Message | PushKind::SMessage => {
            if let [channel, payload] = push.data.as_slice()
                && let (Some(channel), Some(payload)) = (text(channel), text(payload))
            {
                shared.registry().deliver(channel, payload);
            }
            false
        }
        PushKind::Unsubscribe | PushKind::SUnsubscribe => push
            .data
            .first()
            .and_then(text)
            .is_some_and(|channel| shared.registry().dropped(channel)),
        PushKind::Disconnection => {
            shared.registry().disconnected();
            true
        }
        _ => false,
    };
    if reconcile {
        shared.wake.notify_one();
    }
}

/// The push handler: runs on the connection's reader, so it only dispatches. It holds the
/// registry weakly: the connection lives in the reconciler, which outlives the client by
/// a moment.
fn handler(
    shared: Weak<WakeupsShared>,
) -> impl Fn(PushInfo) -> Result<(), redis::aio::SendError> + Send + Sync + 'static {
    move |push: PushInfo| {
        if let Some(shared) = shared.upgrade() {
            dispatch(&shared, push);
        }
        Ok(())
    }
}

impl Wakeups {
    /// Sets up the (lazily connected) subscription connection to a single server, and its
    /// reconciler on the current Tokio runtime (the client's own). It speaks RESP3, or RESP2 pub/sub on a
    /// connection of its own once the server refuses `HELLO 3`.
    pub(crate) fn single(
        client: redis::Client,
        config: ConnectionManagerConfig,
        timeouts: Timeouts,
    ) -> redis::RedisResult<Self> {
        let shared = WakeupsShared::new();
        let subscriber = SingleSubscriber::new(&shared, client, config, timeouts)?;
        Ok(Wakeups::start(
            shared,
            Subscriber::Single(Box::new(subscriber)),
        ))
    }

    /// Sets up a (lazily connected, RESP3) cluster connection of its own for sharded
    /// subscriptions, with this registry as its push handler, and its reconciler. Commands
    /// go over another connection, so a subscription being moved between nodes never holds
    /// them up.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(builder: ClusterClientBuilder) -> redis::RedisResult<Self> {
        let shared = WakeupsShared::new();
        let client = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(handler(Arc::downgrade(&shared)))
            .build()?;
        Ok(Wakeups::start(
            shared,
            Subscriber::Cluster(LazyCluster::new(client)),
        ))
    }

    fn start(shared: Arc<WakeupsShared>, subscriber: Subscriber) -> Self {
        tokio::spawn(reconciler::run(
            Arc::downgrade(&shared),
            shared.wake.clone(),
            subscriber,
        ));
        Wakeups { shared }
    }

    /// Registers this process's waiter on `channel` (one per key: the tasks of the process
    /// wait for it in the key's local queue), under the token of its place in the queue.
    pub(crate) fn register(&self, channel: &str, token: &str) -> WaitTicket {
        register_on(&self.shared, channel, token, false)
    }

    /// A handle that registers a standing waiter later (a channel the client keeps while it
    /// lives, not counted among the waits' channels), for a task that must not keep the
    /// registry alive (see `renewal/notices.rs`).
    pub(crate) fn registrar(&self) -> Registrar {
        Registrar(Arc::downgrade(&self.shared))
    }

    /// A handle that moves the subscriptions to another server (a new primary), for the
    /// task that follows the sentinels; it does not keep the registry alive.
    #[cfg(feature = "sentinel")]
    pub(crate) fn follower(&self) -> Follower {
        Follower(Arc::downgrade(&self.shared))
    }

    /// How many channels have local waiters (each subscribed, or being subscribed, once
    /// one of its waiters asked); the client's standing notice channel is not one.
    pub(crate) fn channels(&self) -> usize {
        let registry = self.shared.registry();
        registry
            .channels
            .values()
            .filter(|entry| !entry.standing)
            .count()
    }
}

impl Drop for Wakeups {
    /// Stops the reconciler, which closes the subscription connection (and with it every
    /// subscription on the server).
    fn drop(&mut self) {
        self.shared.registry().close();
        self.shared.wake.notify_one();
    }
}

/// Registers a waiter on `channel` under `token` in `shared`'s registry (`standing`: a
/// channel the client keeps while it lives, not a wait's).
fn register_on(
    shared: &Arc<WakeupsShared>,
    channel: &str,
    token: &str,
    standing: bool,
) -> WaitTicket {
    let wake = Arc::new(Wake::default());
    let mut registry = shared.registry();
    let stamp = registry.next_stamp();
    let entry = registry
        .channels
        .entry(channel.to_owned())
        .or_insert_with(|| ChannelWaiters {
            waiters: Vec::new(),
            state: Subscription::Idle,
            stamp,
            asking: Vec::new(),
            standing,
        });
    entry.waiters.push((token.to_owned(), wake.clone()));
    WaitTicket {
        shared: shared.clone(),
        channel: channel.to_owned(),
        wake,
    }
}

/// Registers waiters while the registry lives (see [`Wakeups::registrar`]).
pub(crate) struct Registrar(Weak<WakeupsShared>);

impl Registrar {
    /// A waiter on `channel` under `token`, or `None` once the client is gone.
    pub(crate) fn register(&self, channel: &str, token: &str) -> Option<WaitTicket> {
        let shared = self.0.upgrade()?;
        if shared.registry().closed {
            return None;
        }
        Some(register_on(&shared, channel, token, true))
    }
}

/// Moves a single server's subscriptions to a new primary (see [`Wakeups::follower`]).
#[cfg(feature = "sentinel")]
#[derive(Clone)]
pub(crate) struct Follower(Weak<WakeupsShared>);

#[cfg(feature = "sentinel")]
impl Follower {
    /// Asks the reconciler to move the subscriptions to `primary`: if it is another server,
    /// the old connection closes and every channel with waiters is subscribed there (its
    /// waiters check the lock again meanwhile, as after a disconnection).
    pub(crate) fn move_to(&self, primary: &redis::Client) {
        if let Some(shared) = self.0.upgrade() {
            shared.registry().moved = Some(primary.clone());
            shared.wake.notify_one();
        }
    }
}

/// A local waiter's place: it is woken through [`WaitTicket::wait`] and leaves the
/// registry when dropped (the channel is unsubscribed when it was the last waiter).
pub(crate) struct WaitTicket {
    shared: Arc<WakeupsShared>,
    channel: String,
    wake: Arc<Wake>,
}

impl WaitTicket {
    /// The process waits under a new token (its next place in the queue): grants name it.
    pub(crate) fn retoken(&self, token: &str) {
        let mut registry = self.shared.registry();
        let Some(entry) = registry.channels.get_mut(&self.channel) else {
            return;
        };
        if let Some((waiting_as, _)) = entry
            .waiters
            .iter_mut()
            .find(|(_, wake)| Arc::ptr_eq(wake, &self.wake))
            && waiting_as != token
        {
            token.clone_into(waiting_as);
        }
    }

    /// Whether the client is gone (no subscription will be made any more).
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.registry().closed
    }

    /// The notices delivered since the last call (see [`Registry::notices`]).
    pub(crate) fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.registry().notices)
    }

    /// Whether the channel's subscription is confirmed on the current connection.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.shared
            .registry()
            .channels
            .get(&self.channel)
            .is_some_and(|entry| entry.state == Subscription::Confirmed)
    }

    /// Asks the reconciler to subscribe the channel (once for all local waiters) and waits
    /// for the server's answer; an error leaves the channel unsubscribed until a waiter
    /// asks again.
    pub(crate) async fn subscribe(&self) -> RedisResult<()> {
        let answer = {
            let mut registry = self.shared.registry();
            if registry.closed {
                return Err(closed());
            }
            let Some(entry) = registry.channels.get_mut(&self.channel) else {
                return Ok(());
            };
            if entry.state == Subscription::Confirmed {
                return Ok(());
            }
            entry.state = Subscription::Wanted;
            let (asking, answer) = oneshot::channel();
            entry.asking.push(asking);
            registry.pending.insert(self.channel.clone());
            answer
        };
        self.shared.wake.notify_one();
        answer.await.unwrap_or_else(|_| Err(closed()))
    }

    /// Waits until woken or `max` passes, and says why it woke.
    pub(crate) async fn wait(&self, max: Duration) -> Woken {
        if tokio::time::timeout(max, self.wake.notify.notified())
            .await
            .is_err()
        {
            return Woken::Timeout;
        }
        if self.wake.later.swap(false, Ordering::SeqCst) {
            Woken::LookLater
        } else {
            Woken::TryNow
        }
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let mut registry = self.shared.registry();
        let Some(entry) = registry.channels.get_mut(&self.channel) else {
            return;
        };
        entry
            .waiters
            .retain(|(_, wake)| !Arc::ptr_eq(wake, &self.wake));
        if !entry.waiters.is_empty() {
            return;
        }
        // The last waiter: the reconciler unsubscribes the channel if it may be on the
        // server, whatever this waiter saw (it may leave mid-SUBSCRIBE).
        registry.channels.remove(&self.channel);
        registry.pending.insert(std::mem::take(&mut self.channel));
        drop(registry);
        self.shared.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with(token: &str) -> (Registry, Arc<Wake>) {
        let wake = Arc::new(Wake::default());
        let mut registry = Registry::default();
        registry.channels.insert(
            "released".to_owned(),
            ChannelWaiters {
                waiters: vec![(token.to_owned(), wake.clone())],
                state: Subscription::Confirmed,
                stamp: 1,
                asking: Vec::new(),
                standing: false,
            },
        );
        (registry, wake)
    }

    /// `=token` (no key) wakes the waiter to look later; a grant `=token key`, a hand-over
    /// `token` or an empty message to try now, also after a look-later one not yet read.
    #[test]
    fn a_message_without_a_key_says_look_later_and_any_other_says_try_now() {
        let (mut registry, wake) = registry_with("abc");
        registry.deliver("released", "=abc");
        assert!(wake.later.load(Ordering::SeqCst));
        registry.deliver("released", "=abc some:key");
        assert!(!wake.later.load(Ordering::SeqCst));
        registry.deliver("released", "=abc");
        registry.deliver("released", "abc");
        assert!(!wake.later.load(Ordering::SeqCst));
        registry.deliver("released", "=other");
        assert!(
            !wake.later.load(Ordering::SeqCst),
            "another waiter's message"
        );
    }
}
