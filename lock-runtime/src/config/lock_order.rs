//! The lock-order check's switch ([`Config::lock_order_check`]).

use crate::config::Config;
use crate::lock_order::LockOrderCheck;

impl Config {
    /// Checks the order in which tasks take nested locks, as the Linux kernel's lockdep
    /// does (default [`LockOrderCheck::Off`]): meant for tests and debug builds, where it
    /// reports an order that could deadlock before it ever does.
    ///
    /// Behavior:
    /// - A task that holds a lock (inside a guarded body: the attribute or a `run`) and
    ///   takes another through this client records the order of their *classes*: the key
    ///   template of the attribute (`stock:<id>` for every id, each template of an array
    ///   key), or the key of a builder unless it names one
    ///   ([`Lock::order_class`](crate::Lock::order_class)). The orders are kept per client,
    ///   in memory; the check sends nothing to Redis.
    /// - The first acquisition whose order closes a cycle (`user` while holding `stock`,
    ///   after `stock` while holding `user`; or `A → B`, `B → C`, `C → A`) is reported once,
    ///   before it waits: a WARN event `lock-order inversion` naming the classes and the
    ///   call sites of both orders; with [`LockOrderCheck::Fail`] the acquisition fails
    ///   with [`LockError::OrderInversion`](crate::LockError::OrderInversion), with
    ///   [`LockOrderCheck::Panic`] it panics.
    /// - Taking a key the task already holds (reentrancy) adds no order, nor do the keys of
    ///   one multi-key lock among themselves (the library takes them in one order); two
    ///   locks of one class nested in each other are not checked.
    /// - Off, it costs one branch per acquisition.
    ///
    /// ```
    /// use lock_runtime::{Config, LockOrderCheck};
    ///
    /// let config = Config::for_tests("redis://127.0.0.1:6379").lock_order_check(LockOrderCheck::Fail);
    /// # let _ = config;
    /// ```
    pub fn lock_order_check(mut self, check: LockOrderCheck) -> Self {
        self.lock_order = check;
        self
    }
}
