//! Whether a server runs Redis Functions (`FCALL`): assumed until it answers that it does
//! not know the command (before Redis 7, or renamed away), then remembered for the
//! connection's life, so that a server without them costs one round trip once.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the server behind one connection lacks Functions.
#[derive(Debug, Default)]
pub(crate) struct ServerFunctions {
    lacking: AtomicBool,
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
}
