//! A Redis Cluster connection opened on first use, and afresh after a request timed out
//! on it.

use std::sync::Arc;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{FromRedisValue, Pipeline, Value};
use tokio::sync::RwLock;

use crate::connection::cluster_nodes::ClusterNodes;

/// A cluster connection that opens on first use (so a client can be built synchronously)
/// and is opened afresh after a request timed out on it.
///
/// Seen here: a cluster connection that lived through a slot migration under load kept
/// timing out on the moved slot while a new connection worked at once; rebuilding on a
/// timeout turns that stall into one response timeout.
#[derive(Clone)]
pub(crate) struct LazyCluster {
    pub(super) client: Arc<ClusterClient>,
    /// Where the connection is opened (see [`super::SingleServer`]'s).
    runtime: Option<tokio::runtime::Handle>,
    connection: Arc<RwLock<Option<ClusterConnection>>>,
    /// Where its requests' outcomes go: the master that serves each request's slot (see
    /// `cluster_nodes.rs`).
    pub(super) nodes: Option<ClusterNodes>,
    /// Whether the cluster's masters run Functions.
    pub(super) functions: Arc<super::server_functions::ServerFunctions>,
}

impl LazyCluster {
    pub(crate) fn new(client: ClusterClient) -> Self {
        LazyCluster {
            client: Arc::new(client),
            runtime: crate::client_thread::captured(),
            connection: Arc::new(RwLock::new(None)),
            nodes: None,
            functions: Arc::default(),
        }
    }

    /// Reports this connection's requests to the masters of `nodes`.
    pub(crate) fn watched(mut self, nodes: ClusterNodes) -> Self {
        self.nodes = Some(nodes);
        self
    }

    pub(crate) async fn get(&self) -> redis::RedisResult<ClusterConnection> {
        if let Some(connection) = self.connection.read().await.as_ref() {
            return Ok(connection.clone());
        }
        let mut slot = self.connection.write().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let client = self.client.clone();
        let open = async move { client.get_async_connection().await };
        let connection = crate::client_thread::run_on(self.runtime.as_ref(), open)
            .await
            .unwrap_or_else(|| Err(client_gone()))?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Sends `pipeline` to the master that serves `slot`, whatever slots its commands' keys
    /// hash to (a cluster connection's own routing refuses a pipeline across slots); its
    /// replies one by one. A key that master does not serve answers with a redirection.
    pub(super) async fn pipeline_to(
        &self,
        pipeline: Pipeline,
        slot: u16,
    ) -> redis::RedisResult<Vec<redis::RedisResult<Value>>> {
        let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        let count = pipeline.len();
        let result = match self.get().await {
            Ok(mut connection) => connection.route_pipeline(pipeline, 0, count, route).await,
            Err(err) => Err(err),
        };
        let result = self.check(result).await;
        if let Some(nodes) = &self.nodes {
            match &result {
                // redis-rs fails the whole pipeline with the first redirection it meets,
                // which may point back at the master itself (a pipeline of keys of several
                // slots): the slot map is stale, no master failed.
                Err(err) if err.redirect_node().is_some() => nodes.read_map_soon(),
                _ => nodes.observe(Some(slot), &result),
            }
        }
        Ok(FromRedisValue::from_redis_value(Value::Array(result?))?)
    }

    /// Drops the connection after `result` timed out, so the next request opens a new one.
    pub(super) async fn check<T>(&self, result: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(err) = &result
            && err.is_timeout()
        {
            tracing::warn!(error = %err, "cluster request timed out; reconnecting");
            *self.connection.write().await = None;
        }
        result
    }
}

/// The error of a request whose client was dropped while it opened a connection.
fn client_gone() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "the lock client was dropped while it opened a connection",
    ))
}
