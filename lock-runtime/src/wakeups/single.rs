//! The subscription connection to one server: RESP3 pushes on an auto-reconnecting
//! connection, or, on a server that refuses `HELLO 3` (Redis 5, some proxies), a RESP2
//! pub/sub connection of its own; and behind Sentinel, moved to the new primary.
//!
//! Only the reconciler uses it, so every command for one channel stays in order whichever
//! protocol carries it. The RESP2 connection does not reconnect by itself: its reader
//! reports the end of the connection as a disconnection (every channel with waiters is
//! subscribed again, on a fresh connection opened for the next command), and dropping it
//! closes the connection, with every subscription on it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use redis::{RedisError, RedisResult};

use super::{WakeupsShared, handler};

/// How long the subscription connection may take to open, and to answer a command.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

/// Which of the two a [`SingleSubscriber::send`] is.
#[derive(Clone, Copy)]
pub(super) enum Command {
    Subscribe,
    Unsubscribe,
}

/// The subscription connection to one server.
pub(super) struct SingleSubscriber {
    shared: Weak<WakeupsShared>,
    /// The server, as the application configured it.
    client: redis::Client,
    /// The connection manager's settings, with the registry as push handler.
    config: ConnectionManagerConfig,
    timeouts: Timeouts,
    link: Link,
}

enum Link {
    /// Pushes on an auto-reconnecting RESP3 connection.
    Resp3(ConnectionManager),
    /// The server refused `HELLO 3`: a RESP2 pub/sub connection, opened when a command
    /// needs it (none: not open, or closed after a failure).
    Resp2(Option<Resp2>),
}

/// An open RESP2 pub/sub connection: its command half, and the task reading its messages.
struct Resp2 {
    sink: PubSubSink,
    reader: tokio::task::JoinHandle<()>,
    /// Set by the reader when the server closed the connection.
    ended: Arc<AtomicBool>,
}

impl Drop for Resp2 {
    /// Stopping the reader drops the message stream, which closes the connection.
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl SingleSubscriber {
    /// A lazily connected subscriber that tries RESP3 first.
    pub(super) fn new(
        shared: &Arc<WakeupsShared>,
        client: redis::Client,
        config: ConnectionManagerConfig,
        timeouts: Timeouts,
    ) -> RedisResult<Self> {
        // No automatic resubscription: the reconciler subscribes again what still has
        // waiters after a disconnection, and only that.
        let config = config.set_push_sender(handler(Arc::downgrade(shared)));
        let link = Link::Resp3(resp3_manager(&client, &config)?);
        Ok(SingleSubscriber {
            shared: Arc::downgrade(shared),
            client,
            config,
            timeouts,
            link,
        })
    }

    /// Moves the subscriptions to `client` (a new primary) unless they are there already:
    /// the old connection closes, with every subscription on it. True when it moved.
    pub(super) fn move_to(&mut self, client: redis::Client) -> bool {
        if client.get_connection_info().addr() == self.client.get_connection_info().addr() {
            return false;
        }
        let Ok(manager) = resp3_manager(&client, &self.config) else {
            return false;
        };
        tracing::warn!(
            from = %self.client.get_connection_info().addr(),
            to = %client.get_connection_info().addr(),
            "the Redis primary moved; moving the release subscriptions to the new one"
        );
        self.client = client;
        self.link = Link::Resp3(manager);
        true
    }

    /// Sends one (un)subscription of `channels` (none: sends nothing, as an `UNSUBSCRIBE`
    /// without channels drops them all). On RESP3, when it finds the connection down it is
    /// sent once more at once: the manager starts reconnecting only when a command finds
    /// its last reconnection failed (the server was still down after a restart), and
    /// without a second try the waiters would park until they ask again. A refusal of
    /// `HELLO 3` switches this server to RESP2 for good.
    pub(super) async fn send(&mut self, command: Command, channels: &[&str]) -> RedisResult<()> {
        if channels.is_empty() {
            return Ok(());
        }
        if let Link::Resp3(manager) = &self.link {
            match send_resp3(manager, command, channels).await {
                Err(err) if refuses_resp3(&err) => {
                    tracing::info!(
                        server = %self.client.get_connection_info().addr(),
                        error = %err,
                        "the Redis server refuses RESP3 (HELLO 3): release messages come \
                         over a RESP2 pub/sub connection"
                    );
                    self.link = Link::Resp2(None);
                }
                result => return result,
            }
        }
        self.send_resp2(command, channels).await
    }

    /// The same on the RESP2 connection, opened if needed; a failed command closes it,
    /// and when the connection had ended it is sent once more on a fresh one.
    async fn send_resp2(&mut self, command: Command, channels: &[&str]) -> RedisResult<()> {
        let mut tries = 0;
        loop {
            tries += 1;
            let link = self.resp2().await?;
            let ended = link.ended.load(Ordering::Acquire);
            let mut sink = link.sink.clone();
            let sent = async {
                match command {
                    Command::Subscribe => sink.subscribe(channels).await,
                    Command::Unsubscribe => sink.unsubscribe(channels).await,
                }
            };
            let result = match tokio::time::timeout(self.timeouts.response, sent).await {
                Ok(result) => result,
                Err(_) => Err(timeout("the release subscription did not answer")),
            };
            let Err(err) = result else { return Ok(()) };
            // A closed or silent connection is replaced; a server's refusal is not.
            let broken = ended || err.is_io_error() || err.is_timeout() || err.code().is_none();
            if !broken {
                return Err(err);
            }
            self.link = Link::Resp2(None);
            if tries >= 2 || err.is_timeout() {
                return Err(err);
            }
        }
    }

    /// The open RESP2 connection, opened within the connect timeout if there is none (or
    /// the server ended it).
    async fn resp2(&mut self) -> RedisResult<&Resp2> {
        if let Link::Resp2(Some(link)) = &self.link
            && link.ended.load(Ordering::Acquire)
        {
            self.link = Link::Resp2(None);
        }
        if let Link::Resp2(None) = &self.link {
            let client = with_protocol(&self.client, redis::ProtocolVersion::RESP2)?;
            let pubsub = tokio::time::timeout(self.timeouts.connect, client.get_async_pubsub())
                .await
                .map_err(|_| timeout("the release subscription could not connect"))??;
            let (sink, stream) = pubsub.split();
            let ended = Arc::new(AtomicBool::new(false));
            let reader = tokio::spawn(read(self.shared.clone(), stream, ended.clone()));
            self.link = Link::Resp2(Some(Resp2 {
                sink,
                reader,
                ended,
            }));
        }
        match &self.link {
            Link::Resp2(Some(link)) => Ok(link),
            _ => Err(RedisError::from((
                redis::ErrorKind::Client,
                "the release subscription is not on RESP2",
            ))),
        }
    }
}

/// Reads the RESP2 connection's messages into the registry until the server ends it, and
/// then reports a disconnection (messages may have been missed; every channel with waiters
/// is subscribed again).
async fn read(shared: Weak<WakeupsShared>, mut stream: PubSubStream, ended: Arc<AtomicBool>) {
    while let Some(message) = stream.next().await {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if let Ok(payload) = message.get_payload::<String>() {
            shared
                .registry()
                .deliver(message.get_channel_name(), &payload);
        }
    }
    ended.store(true, Ordering::Release);
    if let Some(shared) = shared.upgrade() {
        shared.registry().disconnected();
        shared.wake.notify_one();
    }
}

async fn send_resp3(
    connection: &ConnectionManager,
    command: Command,
    channels: &[&str],
) -> RedisResult<()> {
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

/// Whether the server refused to speak RESP3: `HELLO` unknown (Redis 5, a proxy, a renamed
/// command) or `NOPROTO`.
fn refuses_resp3(err: &RedisError) -> bool {
    if err.kind() == redis::ErrorKind::RESP3NotSupported || err.code() == Some("NOPROTO") {
        return true;
    }
    let text = err.to_string().to_ascii_lowercase();
    text.contains("unknown command") && text.contains("hello")
}

fn timeout(what: &'static str) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

fn resp3_manager(
    client: &redis::Client,
    config: &ConnectionManagerConfig,
) -> RedisResult<ConnectionManager> {
    ConnectionManager::new_lazy_with_config(
        with_protocol(client, redis::ProtocolVersion::RESP3)?,
        config.clone(),
    )
}

/// The same server, spoken to in `protocol` (RESP3 carries pub/sub pushes on a normal
/// connection).
fn with_protocol(
    client: &redis::Client,
    protocol: redis::ProtocolVersion,
) -> RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let settings = info.redis_settings().clone().set_protocol(protocol);
    redis::Client::open(info.set_redis_settings(settings))
}
