//! A single server's multiplexed connection, one per Tokio runtime that sends on it.
//!
//! A multiplexed connection's reader is a task of the runtime that opened it. Shared by
//! every runtime of the process, each request from another runtime would cross threads
//! twice (to the reader and back), and the end of the opener's runtime would cut every
//! other runtime's requests off. So each thread keeps the connections it opened, each
//! with a mark that lives as long as the runtime that drives it: a request takes its
//! thread's connection while that runtime lives, and opens one on its own runtime when it
//! ended (runtimes built one after another on one thread, one per `#[tokio::test]`).
//! A multi-thread runtime has one connection per worker that sends; tasks on one thread
//! wait for one opening.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

/// One runtime's connection to one server: opened once, by the first request that needs
/// it (the others on the thread wait for that attempt; a failed one is made again).
#[derive(Default)]
pub(super) struct RuntimeConnection {
    connection: tokio::sync::OnceCell<MultiplexedConnection>,
    /// Dropped with the runtime that opened the connection (see [`runtime_mark`]).
    runtime: std::sync::OnceLock<Weak<()>>,
}

impl RuntimeConnection {
    /// The connection, opened on the caller's runtime if it is not yet. Boxed: opening a
    /// connection is a large future, and rare.
    pub(super) async fn open(
        &self,
        client: &redis::Client,
        config: &AsyncConnectionConfig,
    ) -> redis::RedisResult<MultiplexedConnection> {
        Box::pin(self.connection.get_or_try_init(|| async {
            let connection = client
                .get_multiplexed_async_connection_with_config(config)
                .await?;
            let _ = self.runtime.set(runtime_mark());
            Ok(connection)
        }))
        .await
        .cloned()
    }

    /// The connection, when it is open and its runtime still runs.
    pub(super) fn get(&self) -> Option<&MultiplexedConnection> {
        self.connection.get().filter(|_| self.is_live())
    }

    /// Whether it is not opened yet, or opened on a runtime that still runs.
    fn is_live(&self) -> bool {
        self.runtime
            .get()
            .is_none_or(|runtime| runtime.strong_count() > 0)
    }
}

/// A mark held by a task of the current runtime: it is dropped when that runtime shuts
/// down (its tasks are dropped then).
fn runtime_mark() -> Weak<()> {
    let mark = Arc::new(());
    let weak = Arc::downgrade(&mark);
    tokio::spawn(async move {
        let _mark = mark;
        std::future::pending::<()>().await;
    });
    weak
}

thread_local! {
    /// The connections of this thread's runtime, by their server connection (`owner`).
    static OPENED: RefCell<Vec<(Weak<()>, Arc<RuntimeConnection>)>> =
        const { RefCell::new(Vec::new()) };
}

/// This thread's connection for `owner` (one server connection's generation): the one its
/// runtime opened, or a new one to open. Entries whose owner was dropped or whose runtime
/// ended are forgotten on the way.
pub(super) fn for_this_thread(owner: &Arc<()>) -> Arc<RuntimeConnection> {
    OPENED.with(|opened| {
        let mut opened = opened.borrow_mut();
        if let Some((_, found)) = opened
            .iter()
            .find(|(entry, _)| std::ptr::eq(entry.as_ptr(), Arc::as_ptr(owner)))
            && found.is_live()
        {
            return found.clone();
        }
        opened.retain(|(entry, connection)| {
            entry.strong_count() > 0
                && connection.is_live()
                && !std::ptr::eq(entry.as_ptr(), Arc::as_ptr(owner))
        });
        let fresh = Arc::new(RuntimeConnection::default());
        opened.push((Arc::downgrade(owner), fresh.clone()));
        fresh
    })
}
