//! A single server's multiplexed connection, opened on the runtime of the request that
//! needs it, and opened afresh once that runtime has ended.
//!
//! A multiplexed connection's reader is a task of the runtime that opened it: when that
//! runtime ends (a `#[tokio::test]`'s, a runtime built by hand), the connection is dead for
//! every other runtime too. So the connection carries a mark held by a task of its runtime;
//! a request that finds the mark gone replaces the connection, and the new one is opened on
//! the requester's runtime. In a process with one runtime nothing changes: one connection,
//! opened by the first request, read on that runtime (no thread crossed). Other runtimes
//! send on it while its runtime lives.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

/// One connection to one server: opened once, by the first request that needs it (the
/// others wait for that attempt; a failed one is made again by the next request).
#[derive(Default)]
pub(super) struct RuntimeConnection {
    connection: tokio::sync::OnceCell<MultiplexedConnection>,
    /// Dropped with the runtime that opened the connection (see [`runtime_mark`]); the
    /// sender ends the mark's task when this connection goes first.
    runtime: std::sync::OnceLock<(Weak<()>, tokio::sync::oneshot::Sender<()>)>,
}

impl RuntimeConnection {
    /// The connection, opened on the caller's runtime if it is not yet. Boxed: opening a
    /// connection is a large future, and rare.
    ///
    /// With `name` (and how long its reply may take), the connection names itself (`CLIENT
    /// SETNAME`) before its first request: an operator's `CLIENT LIST` shows whose it is.
    /// A server that refuses or does not answer in time leaves it unnamed.
    pub(super) async fn open(
        &self,
        client: &redis::Client,
        config: &AsyncConnectionConfig,
        name: Option<(&str, Duration)>,
    ) -> redis::RedisResult<MultiplexedConnection> {
        Box::pin(self.connection.get_or_try_init(|| async {
            let mut connection = client
                .get_multiplexed_async_connection_with_config(config)
                .await?;
            if let Some((name, limit)) = name {
                let mut set_name = redis::cmd("CLIENT");
                set_name.arg("SETNAME").arg(name);
                let named = set_name.query_async::<()>(&mut connection);
                if let Ok(Err(err)) = tokio::time::timeout(limit, named).await {
                    tracing::debug!(name, error = %err, "the server did not take the connection's name");
                }
            }
            let _ = self.runtime.set(runtime_mark());
            Ok(connection)
        }))
        .await
        .cloned()
    }

    /// The connection, when it is open.
    pub(super) fn get(&self) -> Option<&MultiplexedConnection> {
        self.connection.get()
    }

    /// Whether it was opened on a runtime that has ended since (its reader is gone).
    pub(super) fn is_orphaned(&self) -> bool {
        self.runtime
            .get()
            .is_some_and(|(runtime, _)| runtime.strong_count() == 0)
    }
}

/// A mark held by a task of the current runtime: it is dropped when that runtime shuts
/// down (its tasks are dropped then), or when the sender is dropped (the connection went).
fn runtime_mark() -> (Weak<()>, tokio::sync::oneshot::Sender<()>) {
    let mark = Arc::new(());
    let weak = Arc::downgrade(&mark);
    let (gone, connection_gone) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _mark = mark;
        let _ = connection_gone.await;
    });
    (weak, gone)
}
