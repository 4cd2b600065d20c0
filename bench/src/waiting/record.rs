//! What a case of section 11 measured.

use serde::{Deserialize, Serialize};

use crate::contenders::Contender;

/// What one case measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WaitRecord {
    /// The contender's id.
    pub(crate) contender: String,
    /// Waiting keys (one waiter each).
    pub(crate) keys: u64,
    /// Waiting processes.
    pub(crate) processes: u64,
    /// The keys were semaphores of one permit, not locks (ours only).
    #[serde(default)]
    pub(crate) semaphore: bool,
    /// The holders' ttl (ours renew at a third of it).
    pub(crate) holder_ttl_s: f64,
    /// The window the counters were read over.
    pub(crate) window_s: f64,
    /// Commands the server ran in the window (`INFO commandstats`, those run inside Lua
    /// scripts included; the bench's own INFO/ECHO excluded).
    pub(crate) commands: u64,
    /// Script calls in the window (EVAL, EVALSHA).
    pub(crate) script_calls: u64,
    /// The window's commands by name (Lua included), for telling what they were.
    pub(crate) by_command: std::collections::BTreeMap<String, u64>,
    /// Requests sent by clients (a MONITOR tap; commands inside Lua not counted).
    pub(crate) requests: u64,
    /// Commands run inside Lua scripts in the tap.
    pub(crate) tapped_in_lua: u64,
    /// How long the tap listened (the window itself for ours, a pass after it for peers).
    pub(crate) tap_s: f64,
    /// Whether the tap listened over the window itself (ours) or over a pass after it.
    pub(crate) tap_in_window: bool,
    /// Server CPU (user + system) in the window, seconds.
    pub(crate) server_cpu_s: f64,
    /// The waiting children's CPU in the window, seconds, summed.
    pub(crate) client_cpu_s: f64,
    /// Waiters that acquired while the keys were held (must be 0).
    pub(crate) acquired: u64,
    /// How long the holders took to acquire the keys.
    pub(crate) holders_s: f64,
    /// From the holders' last acquisition to every waiter queued.
    pub(crate) queued_s: f64,
    /// The whole case, holders, waiters and clean-up included.
    pub(crate) case_s: f64,
}

impl WaitRecord {
    pub(super) fn contender(&self) -> Option<Contender> {
        Contender::from_id(&self.contender)
    }

    /// The row's label: the contender's, or our semaphore's.
    pub(super) fn label(&self) -> &str {
        match self.contender() {
            Some(Contender::Api) if self.semaphore => "ours, Semaphore API (1 permit)",
            Some(contender) => contender.label(),
            None => &self.contender,
        }
    }

    /// Requests sent per second, all processes together: counted by the tap over the
    /// window, or (a peer, tapped after its window, when the tap slows it) the window's
    /// commands times the share of them the tap saw sent rather than run inside Lua.
    pub(crate) fn requests_per_s(&self) -> f64 {
        if self.tap_in_window {
            return self.requests as f64 / self.tap_s.max(1e-9);
        }
        let tapped = (self.requests + self.tapped_in_lua).max(1) as f64;
        self.commands_per_s() * self.requests as f64 / tapped
    }

    /// Commands (Lua included) per second.
    pub(crate) fn commands_per_s(&self) -> f64 {
        self.commands as f64 / self.window_s.max(1e-9)
    }

    /// Script calls per second.
    pub(crate) fn script_calls_per_s(&self) -> f64 {
        self.script_calls as f64 / self.window_s.max(1e-9)
    }

    /// The server's share of one core.
    pub(crate) fn server_core(&self) -> f64 {
        self.server_cpu_s / self.window_s.max(1e-9)
    }

    /// The waiting processes' share of one core, together.
    pub(crate) fn client_core(&self) -> f64 {
        self.client_cpu_s / self.window_s.max(1e-9)
    }
}
