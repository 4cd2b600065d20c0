//! Whether a server runs Redis Functions (`FCALL`): assumed until it answers that it does
//! not know the command (before Redis 7, or renamed away), then remembered for the
//! connection's life, so that a server without them costs one round trip once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether the server behind one connection lacks Functions, and the library's loads there.
#[derive(Debug, Default)]
pub(crate) struct ServerFunctions {
    lacking: AtomicBool,
    loads: Arc<LibraryLoads>,
}

/// The library's loads on one server by this client: one at a time, counted. A server that
/// lost the library (a restart, `FUNCTION FLUSH`, a promoted replica without it) answers
/// every waiting task's call "not found" at once, and each `FUNCTION LOAD` compiles the
/// whole library while the server serves nobody else: a call loads it only when no load
/// finished since the call was sent.
#[derive(Debug, Default)]
pub(crate) struct LibraryLoads {
    /// Loads finished.
    pub(crate) done: AtomicU64,
    /// The server was found to have the library (before a call that a `WAIT` rides with,
    /// see `scripts::call::have_library`).
    pub(crate) found: AtomicBool,
    /// Held while one loads.
    pub(crate) one_at_a_time: tokio::sync::Mutex<()>,
}

impl ServerFunctions {
    /// Whether calls go by `FCALL` (else `EVALSHA`).
    pub(crate) fn available(&self) -> bool {
        !self.lacking.load(Ordering::Relaxed)
    }

    /// The server answered that it does not know `FCALL` or `FUNCTION`.
    pub(crate) fn lacking(&self) {
        self.lacking.store(true, Ordering::Relaxed);
    }

    /// The library's loads on this server.
    pub(crate) fn loads(&self) -> &Arc<LibraryLoads> {
        &self.loads
    }
}
