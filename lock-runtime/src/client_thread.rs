//! The client's own runtime: a thread of its own that runs the client's background work: its
//! watchdog, its wake-up subscriptions and the releases that dropped guards send.
//!
//! Why: a client serves every Tokio runtime of the process (one per `#[tokio::test]`, a
//! runtime built by hand after earlier ones were dropped, a web server's runtime and a
//! blocking thread's `block_on`). Were its background work spawned on the runtime of its
//! first caller, that runtime's end would take the client's connections and watchdog with
//! it, for every other runtime too. Here a runtime that ends takes only its own tasks: the
//! guards those tasks held are dropped, and their releases run on the client's thread.
//!
//! A request does not go through this thread: a single server's connections are opened
//! on the runtime of the task that sends (see `connection/per_runtime.rs`), so the
//! uncontended path crosses no thread.
//!
//! The thread ends when the client (its last clone, and the last guard, queue place or
//! cohort it handed out: see `lease_parts.rs`) is dropped; the tasks still on it are
//! dropped then, as a runtime's are when it shuts down (see `shutdown.rs`).

use std::future::Future;

use tokio::runtime::Handle;

/// A client's own runtime, running on a thread of its own until dropped.
pub(crate) struct ClientThread {
    handle: Handle,
    /// Ends the thread's `block_on` when sent to or dropped.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ClientThread {
    /// Starts the runtime on a thread named `lock-runtime`.
    pub(crate) fn start() -> std::io::Result<ClientThread> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The creator's subscriber (a scoped one in a test, else the global default) hears
        // the client's events: the watchdog's losses, the outage warnings.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::Builder::new()
            .name("lock-runtime".into())
            .spawn(move || {
                let _subscriber = tracing::dispatcher::set_default(&dispatch);
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // Dropped here, outside any async context: the tasks still on it are dropped
                // (a pending release then gives back synchronously, see `shutdown.rs`).
                drop(runtime);
            })?;
        Ok(ClientThread {
            handle,
            stop: Some(stop),
        })
    }

    /// The runtime's handle: spawn on it, or enter it while building what spawns.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for ClientThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The runtime to spawn background work on: the one that was current when a part of the
/// client was built (the client's own, see [`ClientThread`]), else the caller's.
pub(crate) fn captured() -> Option<Handle> {
    Handle::try_current().ok()
}

/// Runs `work` on `runtime` (the client's own) when there is one, else in place, and waits
/// for it: for work that spawns a task that must outlive the caller's runtime (a cluster
/// connection's reader). `None` when the runtime dropped it (the client is gone).
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) async fn run_on<F>(runtime: Option<&Handle>, work: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtime {
        Some(runtime) => runtime.spawn(work).await.ok(),
        None => Some(work.await),
    }
}
