//! The deadlock detection's delay ([`Config::deadlock_detection`]).

use std::time::Duration;

use crate::config::Config;

impl Config {
    /// How long a wait goes before it looks for a deadlock (default
    /// [`DEFAULT_DEADLOCK_DELAY`](crate::DEFAULT_DEADLOCK_DELAY), 1 s, as PostgreSQL's
    /// `deadlock_timeout`; zero turns detection off).
    ///
    /// Only a task that holds locks (inside a guarded body: the attribute, or a `run`) and
    /// waits for another can close a cycle, so only such a wait pays. Past the delay it
    /// records, beside each key it holds and beside the key it waits for, what it waits for
    /// and what it holds: one pipeline per key, written once (the walk's first step also
    /// reads whether they are still there, so that records a restart took are written
    /// again within a delay). Then it follows the chain once per delay: one pipeline per
    /// step, key →
    /// its holder → what that holder waits for → ...; in Redlock mode each step reads every
    /// master and follows what a majority of them says. When the chain comes back to a key
    /// it holds, the task of the cycle whose wait began last fails with
    /// [`LockError::Deadlock`](crate::LockError::Deadlock), naming the cycle; the others go
    /// on as soon as it lets go. A wait of a task that holds nothing costs nothing.
    ///
    /// Limits: the chain goes through mutexes (a [`Lock`](crate::Lock), the attribute, a
    /// multi-key lock's keys, a read-write lock's writer key); a read-write lock's readers
    /// and a semaphore's permits are not followed. A task's locks count on the client they
    /// were taken through: a wait through one client, of a task that holds locks only
    /// through another, is not watched (the attribute uses the global client unless its
    /// `client = ...` names another).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let config = lock_runtime::Config::single("redis://127.0.0.1:6379")
    ///     .deadlock_detection(Duration::from_millis(500));
    /// # let _ = config;
    /// ```
    pub fn deadlock_detection(mut self, delay: Duration) -> Self {
        self.deadlock_delay = delay;
        self
    }
}
