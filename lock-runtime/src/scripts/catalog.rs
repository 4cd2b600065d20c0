//! Every script: its function's name in the library, and its text as parts of `lua/` (see
//! `library.rs` for how they become one Functions library, and an `EVALSHA` text each).

use once_cell::sync::OnceCell;
use redis::Script;

/// The files every function may turn to, in order, at the library's top level: the
/// queue's prelude, the semaphore's permits, one lease's renewal, the read-write lock's
/// readers. They only define helpers (no `redis.call` runs when the library loads).
pub(super) const SHARED: [&str; 4] = [
    include_str!("../lua/prelude.lua"),
    include_str!("../lua/semaphore_permits.lua"),
    include_str!("../lua/renew_lease.lua"),
    include_str!("../lua/rw_prelude.lua"),
];

/// One script: its function's name in the library, and its text as parts of `lua/`.
pub(crate) struct LuaScript {
    /// The function's name after the library's (letters, digits and `_`).
    pub(super) name: &'static str,
    /// Lines that run before the shared helpers are defined (the uncontended release).
    pub(super) head: &'static str,
    /// The shared files the `EVALSHA` text defines after `head`.
    shared: &'static [&'static str],
    /// The script's own part.
    pub(super) own: &'static str,
    /// The `EVALSHA` text and its hash.
    eval: OnceCell<Script>,
    /// The function's full name, `<library>_<name>`.
    function: OnceCell<String>,
}

impl LuaScript {
    /// A script named `name` whose `EVALSHA` text is `head`, then `shared`, then `own`;
    /// its function's body is `head` then `own`.
    pub(crate) const fn new(
        name: &'static str,
        head: &'static str,
        shared: &'static [&'static str],
        own: &'static str,
    ) -> Self {
        LuaScript {
            name,
            head,
            shared,
            own,
            eval: OnceCell::new(),
            function: OnceCell::new(),
        }
    }

    /// The script as `EVALSHA` runs it.
    pub(crate) fn script(&self) -> &Script {
        self.eval.get_or_init(|| {
            let mut text = String::from(self.head);
            for part in self.shared {
                text.push_str(part);
            }
            text.push_str(self.own);
            Script::new(&text)
        })
    }

    /// The function's full name in the library named `library` (its hash included).
    pub(crate) fn function(&self, library: &str) -> &str {
        self.function
            .get_or_init(|| format!("{library}_{}", self.name))
    }
}

/// The shared prelude (see [`SHARED`]).
pub(crate) const PRELUDE: &[&str] = &[SHARED[0]];
/// The prelude and the semaphore's permits.
pub(crate) const PERMITS: &[&str] = &[SHARED[0], SHARED[1]];
/// The prelude, the permits and one lease's renewal.
pub(crate) const RENEWAL: &[&str] = &[SHARED[0], SHARED[1], SHARED[2]];
/// The read-write lock's readers.
pub(crate) const READERS: &[&str] = &[SHARED[3]];

// Each script is a function of one library (`library.rs`), called by `FCALL` where the
// server has Functions, and a text of its own for `EVALSHA` elsewhere: the shared files it
// turns to (most the prelude: server time, fence counter, queue book-keeping; the scripts
// that serve locks and semaphores alike the semaphore's permits, whose helpers they turn
// to for a permit's token, `permit:…`, see `semaphore.rs`; the renewals one lease's
// renewal; the read-write lock's scripts the set of readers), then its own part.

/// Fair `SET NX PX` with a token (and a fence): `{1, fence}` or `{0, wait_ms}`.
pub(crate) static ACQUIRE: LuaScript =
    LuaScript::new("acquire", "", PRELUDE, include_str!("../lua/acquire.lua"));

/// Compare-and-delete that wakes the next waiter; 1 released, 0 gone, -1 another owner.
/// For a permit's token: gives the permit back (1, or 0 when its lease had ended). The
/// uncontended release (`release_uncontended.lua`) comes first, before the prelude's
/// definitions, which it does not need.
pub(crate) static RELEASE: LuaScript = LuaScript::new(
    "release",
    include_str!("../lua/release_uncontended.lua"),
    PERMITS,
    include_str!("../lua/release.lua"),
);

/// Compare-and-PEXPIRE; 1 renewed, 0 token gone. Also confirms a direct grant. For a
/// permit's token: renews the permit.
pub(crate) static RENEW: LuaScript =
    LuaScript::new("renew", "", RENEWAL, include_str!("../lua/renew.lua"));

/// `RENEW` for many leases in one call (the watchdog's batches): one reply per lease.
pub(crate) static RENEW_MANY: LuaScript = LuaScript::new(
    "renew_many",
    "",
    RENEWAL,
    include_str!("../lua/renew_many.lua"),
);

/// A task takes over its process's lock with a new expiry and, with fencing, a fresh fence.
pub(crate) static RETAKE: LuaScript =
    LuaScript::new("retake", "", PRELUDE, include_str!("../lua/retake.lua"));

/// Redlock with fencing: raises a master's fence counter to the holder's token, owner-checked;
/// 1 raised, 0 token gone.
#[cfg_attr(not(feature = "redlock"), allow(dead_code))]
pub(crate) static RAISE_FENCE: LuaScript = LuaScript::new(
    "raise_fence",
    "",
    &[],
    include_str!("../lua/raise_fence.lua"),
);

/// A reader takes its share: 1 taken, 0 the quick path is closed, -1 the gate is gone.
pub(crate) static READ: LuaScript =
    LuaScript::new("read", "", READERS, include_str!("../lua/rw_read.lua"));

/// A reader gives its share back, waking a writer that waits for the last reader.
pub(crate) static READ_RELEASE: LuaScript = LuaScript::new(
    "read_release",
    "",
    READERS,
    include_str!("../lua/rw_read_release.lua"),
);

/// A writer holding the lock key asks whether the readers have left.
pub(crate) static WRITE_READY: LuaScript = LuaScript::new(
    "write_ready",
    "",
    READERS,
    include_str!("../lua/rw_write_ready.lua"),
);

/// Reads a lock key and its auxiliary keys; writes nothing.
pub(crate) static INSPECT: LuaScript =
    LuaScript::new("inspect", "", &[], include_str!("../lua/inspect.lua"));

/// Refreshes a process's liveness key and says which watched ones are gone.
pub(crate) static ALIVE: LuaScript =
    LuaScript::new("alive", "", &[], include_str!("../lua/alive.lua"));

/// A waiter leaves the queue (of a lock or a semaphore).
pub(crate) static LEAVE: LuaScript =
    LuaScript::new("leave", "", PERMITS, include_str!("../lua/leave.lua"));

/// Takes one of a semaphore's permits, fairly: `{1, 0}`, `{0, wait_ms}`, `{-1, recorded
/// permits}` on a permit count other than the holders', `{-2, 0}` on a key that is not a
/// semaphore's.
pub(crate) static SEMAPHORE_ACQUIRE: LuaScript = LuaScript::new(
    "semaphore_acquire",
    "",
    PERMITS,
    include_str!("../lua/semaphore_acquire.lua"),
);

/// An operator takes a lock away from its holder and wakes the queue (`force_release.rs`).
pub(crate) static FORCE_RELEASE: LuaScript = LuaScript::new(
    "force_release",
    "",
    PERMITS,
    include_str!("../lua/force_release.lua"),
);

/// A process keeps its waiters' places in a queue.
pub(crate) static KEEPALIVE: LuaScript = LuaScript::new(
    "keepalive",
    "",
    PRELUDE,
    include_str!("../lua/keepalive.lua"),
);

/// Removes a wait's deadlock record while it is still that wait's (deadlock/chain.rs).
pub(crate) static FORGET_WAIT: LuaScript = LuaScript::new(
    "forget_wait",
    "",
    &[],
    include_str!("../lua/forget_wait.lua"),
);

/// Every script, in the library's order.
pub(super) static ALL: [&LuaScript; 16] = [
    &ACQUIRE,
    &RELEASE,
    &RENEW,
    &RENEW_MANY,
    &RETAKE,
    &RAISE_FENCE,
    &READ,
    &READ_RELEASE,
    &WRITE_READY,
    &INSPECT,
    &ALIVE,
    &LEAVE,
    &SEMAPHORE_ACQUIRE,
    &FORCE_RELEASE,
    &KEEPALIVE,
    &FORGET_WAIT,
];
