//! What the current task holds: task-scoped reentrancy and [`current_lock`].
//!
//! Ownership belongs to the Tokio task, not the thread: a guarded body that moves between
//! worker threads keeps its locks, and a task it spawns is another owner.

use std::sync::Arc;

use crate::error::LostCause;
use crate::lease::Token;
use crate::lock_order::OrderHold;
use crate::renewal::lost_signal::LostSignal;
use crate::scripts::KeyNames;

tokio::task_local! {
    /// The innermost lock held by the guarded bodies running in this task; each lock links
    /// to the one around it, so entering a body allocates nothing more than its lock.
    static HELD: Option<CurrentLock>;
}

/// A lock held by the running guarded body (see [`current_lock`]).
#[derive(Debug, Clone)]
pub struct CurrentLock {
    inner: Arc<HeldLock>,
}

#[derive(Debug)]
struct HeldLock {
    client: usize,
    /// The lock's names, shared with its guard.
    names: Arc<KeyNames>,
    token: Token,
    fence: Option<u64>,
    lost: LostSignal,
    /// A reader's share of a read-write lock ([`crate::RwLock::read`]), not the key itself.
    read: bool,
    /// The lock held around this one in the same task, if any.
    outer: Option<CurrentLock>,
    /// Its class and call site, for the lock-order check (none: the check is off).
    order: Option<Arc<OrderHold>>,
}

impl CurrentLock {
    pub(crate) fn new(
        client: usize,
        names: Arc<KeyNames>,
        token: Token,
        fence: Option<u64>,
        lost: LostSignal,
        order: Option<Arc<OrderHold>>,
    ) -> Self {
        CurrentLock {
            inner: Arc::new(HeldLock {
                client,
                names,
                token,
                fence,
                lost,
                read: false,
                outer: None,
                order,
            }),
        }
    }

    /// This hold as a reader's share of its read-write lock (the token is the share's).
    pub(crate) fn read_share(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.read = true;
        }
        self
    }

    /// This lock, held inside `outer`.
    fn within(mut self, outer: Option<CurrentLock>) -> Self {
        // No lock around it, as this one was made (the common case): shared as it is.
        if outer.is_none() && self.inner.outer.is_none() {
            return self;
        }
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.outer = outer;
            return self;
        }
        let inner = &self.inner;
        CurrentLock {
            inner: Arc::new(HeldLock {
                client: inner.client,
                names: inner.names.clone(),
                token: inner.token.clone(),
                fence: inner.fence,
                lost: inner.lost.clone(),
                read: inner.read,
                outer,
                order: inner.order.clone(),
            }),
        }
    }

    /// The Redis key of the lock.
    pub fn key(&self) -> &str {
        self.inner.names.lock()
    }

    /// The fencing token of this acquisition, when the lock was taken with fencing.
    pub fn fence(&self) -> Option<u64> {
        self.inner.fence
    }

    /// Whether this is a reader's share of a read-write lock ([`crate::RwLock::read`]):
    /// other readers may hold the key at the same time, no writer does.
    pub fn is_read(&self) -> bool {
        self.inner.read
    }

    /// Whether the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.inner.lost.cause().is_some()
    }

    /// Why the lease was lost, if it was.
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.inner.lost.cause()
    }

    /// Resolves when the lease is lost; never, while it is held.
    pub async fn lost(&self) -> LostCause {
        self.inner.lost.lost().await
    }

    /// Reports that the guarded body is making progress: one atomic store, no Redis
    /// command. The watchdog's next renewal carries the time to Redis, where
    /// [`inspect`](crate::inspect) shows it ([`Holder::last_progress`](crate::Holder::last_progress)),
    /// and the `lock held long` event says how long ago it was: a body that reports as it
    /// goes is told from one that hangs. It does not extend the hold past its `max_hold`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// lock_runtime::Lock::new("import").run(async {
    ///     for batch in 0..100 {
    ///         // ... import `batch` ...
    ///         if let Some(lock) = lock_runtime::current_lock() {
    ///             lock.progress();
    ///         }
    ///     }
    ///     Ok::<(), lock_runtime::LockError>(())
    /// })
    /// .await
    /// # }
    /// ```
    pub fn progress(&self) {
        self.inner.lost.progress();
    }

    pub(crate) fn token(&self) -> &Token {
        &self.inner.token
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        self.inner.lost.clone()
    }
}

/// The innermost lock held by the guarded body running in this task, if any.
///
/// Inside a multi-key body (`key = ["..", ".."]`, [`MultiLock::run`](crate::MultiLock::run))
/// every key counts as held, taken one inside the other in the canonical order
/// ([`MultiLock::keys`](crate::MultiLock::keys)), so this is the *last* of those keys; its
/// `is_lost()` speaks for that key only. Use [`current_locks`] to see every key.
///
/// ```no_run
/// use lock_runtime::{current_lock, distributed_lock, LockError};
///
/// #[distributed_lock(key = "report:<day>", on_lost = "continue", fencing = true)]
/// async fn build_report(day: u32) -> Result<(), LockError> {
///     let lock = current_lock().expect("inside a guarded body");
///     // ... write with lock.fence() so the storage can reject a stale writer ...
///     if lock.is_lost() {
///         // the lease was lost meanwhile: do not publish the result
///     }
///     Ok(())
/// }
/// ```
pub fn current_lock() -> Option<CurrentLock> {
    HELD.try_with(Clone::clone).ok().flatten()
}

/// Every lock held by the guarded bodies running in this task, outermost first (the last
/// one is [`current_lock`]'s). Empty outside a guarded body.
///
/// Inside a multi-key body this holds each of its keys, so a body that let a lost lease
/// run on (`on_lost = "continue"`) can ask whether any of them was lost:
///
/// ```no_run
/// use lock_runtime::{current_locks, distributed_lock, LockError};
///
/// #[distributed_lock(key = ["account:<from>", "account:<to>"], on_lost = "continue")]
/// async fn transfer(from: u64, to: u64) -> Result<bool, LockError> {
///     // ... move the money ...
///     let intact = current_locks().iter().all(|lock| !lock.is_lost());
///     Ok(intact)
/// }
/// ```
pub fn current_locks() -> Vec<CurrentLock> {
    let mut all: Vec<CurrentLock> =
        std::iter::successors(current_lock(), |lock| lock.inner.outer.clone()).collect();
    all.reverse();
    all
}

/// The lock this task already holds on `key` through `client`, if any.
pub(crate) fn held_by_this_task(client: usize, key: &str) -> Option<CurrentLock> {
    HELD.try_with(|held| {
        let mut next = held.as_ref();
        while let Some(lock) = next {
            if lock.inner.client == client && lock.inner.names.lock() == key {
                return Some(lock.clone());
            }
            next = lock.inner.outer.as_ref();
        }
        None
    })
    .ok()
    .flatten()
}

/// The locks (not readers' shares) this task holds through `client`: each key's names and
/// the token its value holds, for the deadlock detection. Empty outside a guarded body.
pub(crate) fn held_keys(client: usize) -> Vec<(Arc<KeyNames>, Token)> {
    HELD.try_with(|held| {
        std::iter::successors(held.as_ref(), |lock| lock.inner.outer.as_ref())
            .filter(|lock| lock.inner.client == client && !lock.inner.read)
            .map(|lock| (lock.inner.names.clone(), lock.inner.token.clone()))
            .collect()
    })
    .unwrap_or_default()
}

/// The classes and call sites of the locks this task holds through `client`, for the
/// lock-order check (holds taken while the check was off have none).
pub(crate) fn held_orders(client: usize) -> Vec<Arc<OrderHold>> {
    HELD.try_with(|held| {
        std::iter::successors(held.as_ref(), |lock| lock.inner.outer.as_ref())
            .filter(|lock| lock.inner.client == client)
            .filter_map(|lock| lock.inner.order.clone())
            .collect()
    })
    .unwrap_or_default()
}

/// Runs `body` with `locks` added, in order (the last innermost), to this task's held
/// locks.
pub(crate) async fn hold_all<F: std::future::Future>(
    locks: impl IntoIterator<Item = CurrentLock>,
    body: F,
) -> F::Output {
    let mut innermost = current_lock();
    for lock in locks {
        innermost = Some(lock.within(innermost));
    }
    HELD.scope(innermost, body).await
}
