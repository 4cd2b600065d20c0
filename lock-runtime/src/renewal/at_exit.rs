//! What the process holds in Redis is given back when it exits normally (`main` returns,
//! `std::process::exit`), not left to run out its ttl.
//!
//! A client's background work runs on its own thread (see `client_thread.rs`), which the process's
//! exit stops wherever it is: a release that a guard dropped by the ending runtime sent a
//! moment before would be cut off. So the first client registers an exit hook, and at
//! exit every client still alive gives back, synchronously and within
//! [`SHUTDOWN_BUDGET`](crate::renewal::shutdown::SHUTDOWN_BUDGET), what it holds and what its
//! background releases had not finished (see `shutdown.rs`). A process killed by a signal
//! runs no hook: its locks end by their ttl, its queue places within about a second.
//!
//! The same registry serves the process-wide [`crate::shutdown`], which shuts down every
//! live client, the injected ones too ([`live`]).

use std::sync::{Arc, Mutex, Once, Weak};

use crate::renewal::shutdown::Shutdown;

/// The shutdowns of the clients alive, weakly: a dropped client gave back already.
static LIVE: Mutex<Vec<Weak<Shutdown>>> = Mutex::new(Vec::new());

/// Gives back what `shutdown`'s client holds when the process exits, if it is alive then.
pub(crate) fn watch(shutdown: &Arc<Shutdown>) {
    static HOOK: Once = Once::new();
    HOOK.call_once(register_hook);
    let mut live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    live.retain(|weak| weak.strong_count() > 0);
    live.push(Arc::downgrade(shutdown));
}

/// The shutdowns of the clients alive now, in the order they were built.
pub(crate) fn live() -> Vec<Arc<Shutdown>> {
    let live = LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    live.iter().filter_map(Weak::upgrade).collect()
}

/// At exit: every client alive gives back what it holds.
fn give_back_all() {
    for shutdown in live() {
        shutdown.runtime_gone(None);
    }
}

#[cfg(unix)]
extern "C" fn at_exit() {
    // Never unwind into the C runtime: a panic here is dropped (the locks end by ttl).
    let _ = std::panic::catch_unwind(give_back_all);
}

#[cfg(unix)]
#[allow(unsafe_code)]
fn register_hook() {
    // SAFETY: `at_exit` is an `extern "C" fn()` with no arguments, as `atexit` requires; it
    // touches only this crate's statics, which live as long as the process, and it never
    // unwinds. A failed registration (the C library's table is full) only loses the
    // give-back at exit.
    let _ = unsafe { libc::atexit(at_exit) };
}

#[cfg(not(unix))]
fn register_hook() {}
