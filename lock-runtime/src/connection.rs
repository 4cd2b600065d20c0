//! One connection type for every topology: a single server's multiplexed connection (opened
//! on first use, opened afresh after it was dropped or a request timed out on it), or
//! a Redis Cluster connection (opened lazily on first use, routing by key, following
//! MOVED/ASK itself).

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use redis::aio::{ConnectionLike, ConnectionManagerConfig, MultiplexedConnection};
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClient;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, Pipeline, RedisFuture, Value};

use crate::error::LockError;
#[cfg(feature = "cluster")]
use cluster_nodes::{ClusterNodes, cmd_slot, pipeline_slot};
#[cfg(feature = "cluster")]
use lazy_cluster::LazyCluster;
use outage::Health;
#[cfg(feature = "sentinel")]
use sentinel::{is_auth_failure, name_auth_failure};

#[cfg(feature = "cluster")]
pub(crate) mod cluster_nodes;
#[cfg(feature = "cluster")]
pub(crate) mod lazy_cluster;
mod named_errors;
pub(crate) mod outage;
mod per_runtime;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
mod server_functions;
pub(crate) mod tls_client;
#[cfg(feature = "sentinel")]
pub(crate) use sentinel::Sentinel;

/// A connection to a single server or to a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(SingleServer),
    #[cfg(feature = "cluster")]
    Cluster(LazyCluster),
}

/// A single server's multiplexed connection, opened on first use and opened afresh after it
/// was dropped or a request timed out on it, and (behind Sentinel) moved to the new primary
/// after a failover.
///
/// Behavior:
/// - nothing is opened before the first request; requests that find it opening wait for
///   that one attempt (bounded by the connect timeout), and a failed attempt is made again
///   by the next request;
/// - a request that finds the connection dropped (reset, closed by the server) fails, and
///   the next request opens a new one (redis-rs's `ConnectionManager` does the same);
/// - a request that times out replaces the connection too: a path that only stops
///   answering (a blackhole, a stalled proxy) would otherwise keep every later request
///   timing out on the dead socket, so the client recovers within one response timeout of
///   the path coming back.
///
/// Requests go straight to the multiplexed connection: no reconnecting wrapper between
/// (it cost a boxed future, a shared future and a copy of the connection per request).
#[derive(Clone)]
pub(crate) struct SingleServer {
    inner: Arc<SingleInner>,
    /// The caller's deadline for the requests sent through this handle, and when the
    /// caller read the clock last (see [`Connection::until`]).
    deadline: Option<tokio::time::Instant>,
    now: Option<tokio::time::Instant>,
}

struct SingleInner {
    /// The connect timeout of each connection opened (with no response timeout of its
    /// own: [`SingleServer::send_once`] times each request, with the caller's deadline).
    config: AsyncConnectionConfig,
    /// How long a request may wait for its reply before the connection is deemed dead.
    response_timeout: Option<std::time::Duration>,
    /// The connection in use, its client and its generation (bumped on each replacement,
    /// so that many requests timing out on one dead connection replace it once).
    current: std::sync::RwLock<Arc<Current>>,
    /// Where to ask for the primary, when it is found through Sentinel.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    sentinel: Option<Arc<Sentinel>>,
    /// Where its requests' outcomes go (see `outage.rs`), once the client set it.
    health: std::sync::OnceLock<Health>,
    /// The name each connection opened gives itself (`CLIENT SETNAME`), once set.
    name: std::sync::OnceLock<Arc<str>>,
    /// Whether the server runs Functions.
    functions: server_functions::ServerFunctions,
}

struct Current {
    generation: u64,
    client: redis::Client,
    /// Opened by the first request that needs it, on that request's runtime (see
    /// `per_runtime.rs`).
    connection: per_runtime::RuntimeConnection,
}

impl Current {
    fn new(generation: u64, client: redis::Client) -> Self {
        Current {
            generation,
            client,
            connection: per_runtime::RuntimeConnection::default(),
        }
    }
}

impl SingleServer {
    /// A lazily connected server connection (nothing is opened before the first request);
    /// with `sentinel`, to the primary `client` found through it, which is asked again when
    /// a request finds the primary gone.
    pub(crate) fn with_sentinel(
        client: redis::Client,
        config: ConnectionManagerConfig,
        sentinel: Option<Arc<Sentinel>>,
    ) -> redis::RedisResult<Self> {
        let response_timeout = config.response_timeout();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(config.connection_timeout())
            .set_response_timeout(None);
        Ok(SingleServer {
            deadline: None,
            now: None,
            inner: Arc::new(SingleInner {
                config,
                response_timeout,
                current: std::sync::RwLock::new(Arc::new(Current::new(0, client))),
                sentinel,
                health: std::sync::OnceLock::new(),
                name: std::sync::OnceLock::new(),
                functions: Default::default(),
            }),
        })
    }

    /// Names every connection it opens `name` (`CLIENT SETNAME`: the client's identity,
    /// for an operator's `CLIENT LIST`).
    pub(crate) fn named(self, name: Arc<str>) -> Self {
        let _ = self.inner.name.set(name);
        self
    }

    /// Reports this connection's requests to `health` (shared by the connections to one
    /// server).
    pub(crate) fn watched(self, health: Health) -> Self {
        let _ = self.inner.health.set(health);
        self
    }

    /// The connection in use (a reference count, not a copy: this runs on every request).
    fn current(&self) -> Arc<Current> {
        let current = self.inner.current.read();
        current.unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Opens a fresh connection to `client` in place of connection `generation` (unless
    /// another request replaced it already). Returns whether it replaced it.
    fn replace(&self, generation: u64, client: redis::Client) -> bool {
        let current = self.inner.current.write();
        let mut current = current.unwrap_or_else(PoisonError::into_inner);
        if current.generation != generation {
            return false;
        }
        *current = Arc::new(Current::new(generation + 1, client));
        true
    }

    /// After a failed request on connection `used`, sent at `sent`: behind Sentinel, asks
    /// for the primary when the error says it may have moved, and connects to the new one;
    /// otherwise replaces the connection after a timeout. Returns whether the request may
    /// be sent again on the new primary: only when the old server refused it unexecuted
    /// (a refused connection, `READONLY` from a demoted primary).
    #[cfg_attr(not(feature = "sentinel"), allow(clippy::unused_async))]
    async fn recover<T>(
        &self,
        used: &Current,
        #[cfg_attr(not(feature = "sentinel"), allow(unused_variables))] sent: Instant,
        result: &redis::RedisResult<T>,
    ) -> bool {
        let Err(err) = result else { return false };
        #[cfg(feature = "sentinel")]
        if let Some(sentinel) = &self.inner.sentinel
            && primary_may_have_moved(err)
            && let Some(primary) = sentinel.primary_after(sent).await
            && primary.get_connection_info().addr() != used.client.get_connection_info().addr()
        {
            if self.replace(used.generation, primary.clone()) {
                tracing::warn!(
                    master = %sentinel.master,
                    from = %used.client.get_connection_info().addr(),
                    to = %primary.get_connection_info().addr(),
                    error = %err,
                    "the Redis primary moved (Sentinel failover); connecting to the new one"
                );
            }
            return err.is_connection_refusal() || is_read_only(err);
        }
        if err.is_timeout() && self.replace(used.generation, used.client.clone()) {
            tracing::warn!(error = %err, "Redis request timed out; opening a new connection");
        } else if err.is_unrecoverable_error() {
            // Dropped (reset, closed by the server) or unreadable: the next request opens
            // a new connection.
            self.replace(used.generation, used.client.clone());
        }
        false
    }

    /// The address of the server in use, for error messages.
    fn address(&self) -> String {
        self.current()
            .client
            .get_connection_info()
            .addr()
            .to_string()
    }

    /// Sends one request; on a primary that moved, once more on the new primary.
    /// `Err(Overdue)` when the caller's deadline passed first.
    async fn request<T, F, Fut>(&self, send: F) -> Result<redis::RedisResult<T>, Overdue>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let mut used = self.current();
        if used.connection.is_orphaned() {
            // Its runtime ended (and its reader with it): a new one, on this runtime.
            self.replace(used.generation, used.client.clone());
            used = self.current();
        }
        // The caller's clock reading when it gave one (a call's first request: one read of
        // the clock fewer on the uncontended path).
        let sent = self.now.unwrap_or_else(tokio::time::Instant::now);
        let result = self.send_once(&used, sent, &send).await?;
        if result.is_err() {
            // Boxed: the recovery's state would otherwise make every request's future large.
            let recover = Box::pin(self.recover(&used, sent.into_std(), &result));
            if self.by_deadline(recover).await? {
                let again = self.current();
                let result = self
                    .send_once(&again, tokio::time::Instant::now(), &send)
                    .await?;
                return Ok(result.map_err(|err| self.name_error(err, &self.address())));
            }
        }
        Ok(result.map_err(|err| {
            self.name_error(err, &used.client.get_connection_info().addr().to_string())
        }))
    }

    /// One try of a request on connection `used` (opened first if it is not yet), timed
    /// from `now`: one timer, at the response timeout or the caller's deadline, whichever
    /// comes first. No reply within the response timeout is a timeout error (after which
    /// the caller replaces the connection); the caller's deadline passing first is
    /// `Overdue` (the connection may be fine: the caller was in a hurry).
    async fn send_once<T, F, Fut>(
        &self,
        used: &Current,
        now: tokio::time::Instant,
        send: &F,
    ) -> Result<redis::RedisResult<T>, Overdue>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let (connection, now) = match used.connection.get() {
            Some(connection) => (connection.clone(), now),
            None => {
                // Bounded by the connect timeout, and by the caller's deadline.
                let limit = self.inner.response_timeout.unwrap_or(NAME_LIMIT);
                let name = self.inner.name.get().map(|name| (&**name, limit));
                let open = used.connection.open(&used.client, &self.inner.config, name);
                match self.by_deadline(open).await? {
                    Ok(connection) => (connection, tokio::time::Instant::now()),
                    Err(err) => return Ok(Err(err)),
                }
            }
        };
        let timeout = self.inner.response_timeout.map(|timeout| now + timeout);
        // A deadline within a few timer ticks of the response timeout is as good as it: a
        // request that went unanswered that long says the connection is dead (a try-once
        // acquire's deadline is its start plus one response timeout).
        let (limit, overdue) = match (timeout, self.deadline) {
            (Some(timeout), Some(deadline)) if deadline + TIMER_SLACK < timeout => {
                (Some(deadline), true)
            }
            (Some(timeout), Some(deadline)) => (Some(deadline.min(timeout)), false),
            (None, Some(deadline)) => (Some(deadline), true),
            (timeout, None) => (timeout, false),
        };
        let Some(limit) = limit else {
            return Ok(send(connection).await);
        };
        match tokio::time::timeout_at(limit, send(connection)).await {
            Ok(result) => Ok(result),
            Err(_) if overdue => Err(Overdue),
            Err(_) => Ok(Err(
                std::io::Error::from(std::io::ErrorKind::TimedOut).into()
            )),
        }
    }

    /// `work`, cut short at the caller's deadline if it gave one.
    async fn by_deadline<T>(&self, work: impl Future<Output = T>) -> Result<T, Overdue> {
        match self.deadline {
            Some(deadline) => (tokio::time::timeout_at(deadline, work).await).map_err(|_| Overdue),
            None => Ok(work.await),
        }
    }

    /// Sends one command and reports its outcome to the server's health.
    async fn send(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let outcome = self
            .request(|mut connection| async move { connection.send_packed_command(cmd).await })
            .await;
        self.observed(outcome)
    }

    /// A request's outcome, reported to the server's health; the caller's deadline passing
    /// first is a timeout error, which says nothing of the server's health.
    fn observed<T>(
        &self,
        outcome: Result<redis::RedisResult<T>, Overdue>,
    ) -> redis::RedisResult<T> {
        match outcome {
            Ok(result) => {
                if let Some(health) = self.inner.health.get() {
                    health.observe(&result);
                }
                result
            }
            Err(Overdue) => Err(self.name_error(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply before the call's deadline",
                )
                .into(),
                &self.address(),
            )),
        }
    }

    /// `err` from `server` with the server named (and, behind Sentinel, a refused
    /// authentication with the master and the fix).
    fn name_error(&self, err: redis::RedisError, server: &str) -> redis::RedisError {
        #[cfg(feature = "sentinel")]
        if let Some(sentinel) = &self.inner.sentinel
            && is_auth_failure(&err)
        {
            return name_auth_failure(err, &sentinel.master, server);
        }
        named_errors::name_server(err, server)
    }
}

/// A single server's connection as the Sentinel follower holds it: weakly, so that
/// following ends with the connection.
#[cfg(feature = "sentinel")]
impl sentinel::Follows for std::sync::Weak<SingleInner> {
    fn alive(&self) -> bool {
        self.strong_count() > 0
    }

    fn move_to(&self, primary: &redis::Client) {
        if let Some(inner) = self.upgrade() {
            let server = SingleServer {
                inner,
                deadline: None,
                now: None,
            };
            server.move_to(primary);
        }
    }
}

#[cfg(feature = "sentinel")]
impl SingleServer {
    /// Has `sentinel` move these connections (and, through `wakeups`, the release
    /// subscriptions) to the primary it names, across failovers.
    pub(crate) fn follow_primary(
        servers: &[SingleServer],
        sentinel: &Arc<Sentinel>,
        wakeups: sentinel::OnMove,
    ) {
        let servers: Vec<std::sync::Weak<SingleInner>> = servers
            .iter()
            .map(|server| Arc::downgrade(&server.inner))
            .collect();
        tokio::spawn(sentinel::follow(sentinel.clone(), servers, wakeups));
    }

    /// Moves this connection to `primary` unless it is there already.
    fn move_to(&self, primary: &redis::Client) {
        let used = self.current();
        let from = used.client.get_connection_info().addr().clone();
        if &from != primary.get_connection_info().addr()
            && self.replace(used.generation, primary.clone())
        {
            tracing::warn!(
                %from,
                to = %primary.get_connection_info().addr(),
                "the Redis primary moved (Sentinel +switch-master); connecting to the new one"
            );
        }
    }
}

/// Errors after which a Sentinel-managed primary may be elsewhere: the server refused or
/// dropped the connection (sentinels disconnect every client when they switch the
/// primary), did not answer, or is a replica now.
#[cfg(feature = "sentinel")]
fn primary_may_have_moved(err: &redis::RedisError) -> bool {
    err.is_connection_refusal()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.is_io_error()
        || is_read_only(err)
        || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
}

#[cfg(feature = "sentinel")]
fn is_read_only(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || err.code() == Some("READONLY")
}

/// Without the `sentinel` feature no primary is found through Sentinel: the type has no
/// values, so `SingleInner::sentinel` is always `None`.
#[cfg(not(feature = "sentinel"))]
pub(crate) enum Sentinel {}

/// The caller's deadline passed before a request was answered.
struct Overdue;

/// How much sooner than the response timeout a caller's deadline must end a request for
/// the request to count as cut short by the caller rather than unanswered by the server.
const TIMER_SLACK: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a new connection's `CLIENT SETNAME` may take when requests have no response
/// timeout.
const NAME_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Connection {
    /// This connection with every request sent through it bounded by `deadline` (one
    /// timer per request, at the response timeout or the deadline, whichever comes
    /// first): a call whose requests must end by then needs no timer of its own. `now` is
    /// the caller's last reading of the clock, taken as the send time of the requests
    /// (a later request through this handle has its response timeout come sooner, never
    /// later).
    /// Only a single server's connection keeps it ([`Connection::keeps_deadlines`]).
    pub(crate) fn until(
        mut self,
        deadline: tokio::time::Instant,
        now: tokio::time::Instant,
    ) -> Self {
        match &mut self {
            Connection::Single(single) => {
                single.deadline = Some(deadline);
                single.now = Some(now);
            }
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => {}
        }
        self
    }

    /// Whether [`Connection::until`] bounds this connection's requests (a single server's;
    /// not a cluster's).
    pub(crate) fn keeps_deadlines(&self) -> bool {
        matches!(self, Connection::Single(_))
    }

    /// Whether this is a cluster connection (sharded pub/sub, one slot per pipeline).
    pub(crate) fn is_cluster(&self) -> bool {
        !matches!(self, Connection::Single(_))
    }

    /// The masters of a cluster connection's cluster, when it reports to them.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_nodes(&self) -> Option<&ClusterNodes> {
        match self {
            Connection::Cluster(cluster) => cluster.nodes.as_ref(),
            _ => None,
        }
    }

    /// Nothing without the `cluster` feature.
    #[cfg(not(feature = "cluster"))]
    pub(crate) fn cluster_nodes(&self) -> Option<&()> {
        None
    }

    /// The outage error for `key` when the server it needs (this connection's server, or
    /// the cluster master that serves its slot) is declared down; `None` otherwise, or
    /// when the client does not watch this connection.
    pub(crate) fn down(&self, key: &str) -> Option<LockError> {
        match self {
            Connection::Single(single) => single.inner.health.get()?.down(key),
            #[cfg(feature = "cluster")]
            Connection::Cluster(lazy) => lazy.nodes.as_ref()?.down(key),
        }
    }

    /// In a cluster, the indices of `keys` grouped by the master that serves them, each
    /// group with the slot to send its pipeline by ([`Connection::query_pipeline`]; see
    /// [`ClusterNodes::by_master`]); `None` on a single server, where one pipeline takes
    /// them all.
    pub(crate) fn by_master<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
    ) -> Option<Vec<(Option<u16>, Vec<usize>)>> {
        match self {
            Connection::Single(_) => {
                drop(keys);
                None
            }
            #[cfg(feature = "cluster")]
            Connection::Cluster(lazy) => Some(match &lazy.nodes {
                Some(nodes) => nodes.by_master(keys),
                None => keys
                    .enumerate()
                    .map(|(index, _)| (None, vec![index]))
                    .collect(),
            }),
        }
    }

    /// Sends `pipeline` and returns its replies one by one (the pipeline ignores errors);
    /// in a cluster with `on` a slot, to the master that serves that slot.
    pub(crate) async fn query_pipeline(
        &mut self,
        pipeline: Pipeline,
        on: Option<u16>,
    ) -> redis::RedisResult<Vec<redis::RedisResult<Value>>> {
        #[cfg(feature = "cluster")]
        if let (Connection::Cluster(lazy), Some(slot)) = (&*self, on) {
            return lazy.pipeline_to(pipeline, slot).await;
        }
        let _ = on;
        pipeline.query_async(self).await
    }

    /// Where a connection of its own can be opened, for the release at shutdown (when the
    /// runtime these connections live on is gone).
    pub(crate) fn fresh(&self) -> OwnConnection {
        match self {
            Connection::Single(single) => {
                OwnConnection::Server(Box::new(single.current().client.clone()))
            }
            #[cfg(feature = "cluster")]
            Connection::Cluster(lazy) => OwnConnection::Cluster(lazy.client.clone()),
        }
    }
}

/// Where to open a connection of one's own: a server, or a cluster.
#[derive(Clone)]
pub(crate) enum OwnConnection {
    Server(Box<redis::Client>),
    #[cfg(feature = "cluster")]
    Cluster(Arc<ClusterClient>),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(single) => Box::pin(async move { single.send(cmd).await }),
            #[cfg(feature = "cluster")]
            Connection::Cluster(lazy) => Box::pin(async move {
                let result = match lazy.get().await {
                    Ok(mut connection) => {
                        lazy.check(connection.req_packed_command(cmd).await).await
                    }
                    Err(err) => Err(err),
                };
                if let Some(nodes) = &lazy.nodes {
                    nodes.observe(cmd_slot(cmd), &result);
                }
                result
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(single) => Box::pin(async move {
                let outcome = single
                    .request(|mut connection| async move {
                        connection
                            .send_packed_commands(pipeline, offset, count)
                            .await
                    })
                    .await;
                single.observed(outcome)
            }),
            #[cfg(feature = "cluster")]
            Connection::Cluster(lazy) => Box::pin(async move {
                let result = match lazy.get().await {
                    Ok(mut connection) => {
                        connection
                            .req_packed_commands(pipeline, offset, count)
                            .await
                    }
                    Err(err) => Err(err),
                };
                if let Some(nodes) = &lazy.nodes {
                    nodes.observe(pipeline_slot(pipeline), &result);
                }
                result
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(single) => single
                .current()
                .client
                .get_connection_info()
                .redis_settings()
                .db(),
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => 0,
        }
    }
}

/// Sends one command and reads its reply: what `Cmd::query_async` does, without the boxed
/// future of `ConnectionLike` where the connection can do without (a single server's).
pub(crate) trait Query: ConnectionLike + Send + Sized {
    fn query<T: FromRedisValue>(
        &mut self,
        cmd: &Cmd,
    ) -> impl std::future::Future<Output = redis::RedisResult<T>> + Send {
        cmd.query_async(self)
    }

    /// Whether scripts are called by `FCALL` on this connection (else `EVALSHA`).
    fn has_functions(&self) -> bool {
        false
    }

    /// The server does not know `FCALL`: scripts go by `EVALSHA` from now on.
    fn lacks_functions(&self) {}

    /// The library's loads on this connection's server, where they are kept.
    fn library_loads(&self) -> Option<&Arc<server_functions::LibraryLoads>> {
        None
    }
}

impl Query for Connection {
    async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> redis::RedisResult<T> {
        let value = match self {
            Connection::Single(single) => single.send(cmd).await?,
            #[cfg(feature = "cluster")]
            Connection::Cluster(_) => self.req_packed_command(cmd).await?,
        };
        Ok(redis::from_redis_value(value.extract_error()?)?)
    }

    fn has_functions(&self) -> bool {
        self.server_functions().available()
    }

    fn lacks_functions(&self) {
        self.server_functions().lacking();
    }

    fn library_loads(&self) -> Option<&Arc<server_functions::LibraryLoads>> {
        Some(self.server_functions().loads())
    }
}

impl Connection {
    /// What is known of this connection's server's Functions (a cluster's: one for all its
    /// masters, which run one version).
    fn server_functions(&self) -> &server_functions::ServerFunctions {
        match self {
            Connection::Single(single) => &single.inner.functions,
            #[cfg(feature = "cluster")]
            Connection::Cluster(lazy) => &lazy.functions,
        }
    }
}

impl Query for MultiplexedConnection {}

#[cfg(feature = "cluster")]
impl Query for ClusterConnection {}
