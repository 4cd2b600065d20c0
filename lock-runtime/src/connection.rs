//! One connection type for every topology: a single server's auto-reconnecting manager
//! (replaced after a timeout), or
//! a Redis Cluster connection (opened lazily on first use, routing by key, following
//! MOVED/ASK itself).

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::RwLock;

/// A connection to a single server or to a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(SingleServer),
    Cluster(LazyCluster),
}

/// A single server's auto-reconnecting connection, replaced by a new one after a request
/// timed out on it.
///
/// The connection manager reconnects when the server closes the connection, but not when
/// the path only stops answering (a blackhole, a stalled proxy): every later request would
/// time out on the dead socket. Replacing it after a timeout lets the client recover within
/// one response timeout of the path coming back.
#[derive(Clone)]
pub(crate) struct SingleServer {
    inner: Arc<SingleInner>,
}

struct SingleInner {
    client: redis::Client,
    config: ConnectionManagerConfig,
    /// The connection in use and its generation (bumped on each replacement, so that many
    /// requests timing out on one dead connection replace it once).
    current: std::sync::RwLock<(u64, ConnectionManager)>,
}

impl SingleServer {
    /// A lazily connected server connection: nothing is opened before the first request.
    pub(crate) fn new(
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> redis::RedisResult<Self> {
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())?;
        Ok(SingleServer {
            inner: Arc::new(SingleInner {
                client,
                config,
                current: std::sync::RwLock::new((0, manager)),
            }),
        })
    }

    fn current(&self) -> (u64, ConnectionManager) {
        let current = self
            .inner
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        (current.0, current.1.clone())
    }

    /// Replaces connection `generation` after `result` timed out on it.
    fn check<T>(&self, generation: u64, result: &redis::RedisResult<T>) {
        let Err(err) = result else { return };
        if !err.is_timeout() {
            return;
        }
        let Ok(fresh) = ConnectionManager::new_lazy_with_config(
            self.inner.client.clone(),
            self.inner.config.clone(),
        ) else {
            return;
        };
        let mut current = self
            .inner
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.0 == generation {
            tracing::warn!(error = %err, "Redis request timed out; opening a new connection");
            *current = (generation + 1, fresh);
        }
    }
}

/// A cluster connection that opens on first use (so a client can be built synchronously)
/// and is opened afresh after a request timed out on it.
///
/// Seen here: a cluster connection that lived through a slot migration under load kept
/// timing out on the moved slot while a new connection worked at once; rebuilding on a
/// timeout turns that stall into one response timeout.
#[derive(Clone)]
pub(crate) struct LazyCluster {
    client: Arc<ClusterClient>,
    connection: Arc<RwLock<Option<ClusterConnection>>>,
}

impl LazyCluster {
    pub(crate) fn new(client: ClusterClient) -> Self {
        LazyCluster {
            client: Arc::new(client),
            connection: Arc::new(RwLock::new(None)),
        }
    }

    pub(crate) async fn get(&self) -> redis::RedisResult<ClusterConnection> {
        if let Some(connection) = self.connection.read().await.as_ref() {
            return Ok(connection.clone());
        }
        let mut slot = self.connection.write().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let connection = self.client.get_async_connection().await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Drops the connection after `result` timed out, so the next request opens a new one.
    async fn check<T>(&self, result: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(err) = &result
            && err.is_timeout()
        {
            tracing::warn!(error = %err, "cluster request timed out; reconnecting");
            *self.connection.write().await = None;
        }
        result
    }
}

impl Connection {
    /// Whether this is a cluster connection (sharded pub/sub, one slot per pipeline).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(single) => Box::pin(async move {
                let (generation, mut connection) = single.current();
                let result = connection.req_packed_command(cmd).await;
                single.check(generation, &result);
                result
            }),
            Connection::Cluster(lazy) => Box::pin(async move {
                let mut connection = lazy.get().await?;
                let result = connection.req_packed_command(cmd).await;
                lazy.check(result).await
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
                let (generation, mut connection) = single.current();
                let result = connection
                    .req_packed_commands(pipeline, offset, count)
                    .await;
                single.check(generation, &result);
                result
            }),
            Connection::Cluster(lazy) => Box::pin(async move {
                let mut connection = lazy.get().await?;
                connection
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(single) => single.current().1.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}
