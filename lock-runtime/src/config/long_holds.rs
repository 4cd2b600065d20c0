//! Bounds and reports on how long locks are held and waited for: the default
//! [`max_hold`](Config::default_max_hold) and the INFO thresholds
//! ([`Config::log_long_holds`], [`Config::log_long_waits`]), as PostgreSQL's
//! `statement_timeout` and `log_lock_waits`.

use std::time::Duration;

use crate::config::Config;

impl Config {
    /// The longest a hold may last, for every lock taken through this client that sets no
    /// `max_hold` (attribute or builder); default `None`: unbounded. A hold that reaches
    /// it is ended as lost with [`LostCause::MaxHold`](crate::LostCause::MaxHold), its
    /// guarded body stopped and its lock released (see
    /// [`LockOptions::max_hold`](crate::LockOptions::max_hold)). An explicit `max_hold`
    /// wins. Checked when a lock is taken: under 1 ms fails the call with
    /// `LockError::Config`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let config = lock_runtime::Config::single("redis://127.0.0.1:6379")
    ///     .default_max_hold(Duration::from_secs(600))
    ///     .log_long_holds(Duration::from_secs(60));
    /// # let _ = config;
    /// ```
    pub fn default_max_hold(mut self, max_hold: Duration) -> Self {
        self.lock_defaults.max_hold = Some(max_hold);
        self
    }

    /// Logs one INFO event, `lock held long`, when a hold passes `threshold` (with its key,
    /// token, how long it has been held and how long ago its holder last reported
    /// progress, see [`LockGuard::progress`](crate::LockGuard::progress)). Default off
    /// (zero): many services hold a job's lock for minutes by design, so only they know
    /// what is long. The watchdog looks at the hold when it passes the threshold, at no
    /// Redis cost.
    pub fn log_long_holds(mut self, threshold: Duration) -> Self {
        self.long.hold = (!threshold.is_zero()).then_some(threshold);
        self
    }

    /// Logs one INFO event, `lock wait long`, when an acquire has waited `threshold` for a
    /// held key (with its key, how long it has waited, and who holds the key then, from
    /// one read-only look at it bounded to 250 ms), as PostgreSQL's `log_lock_waits`
    /// does; default [`DEFAULT_LOG_LONG_WAITS`](crate::DEFAULT_LOG_LONG_WAITS) (10 s), zero turns it off.
    /// A wait that ends sooner logs nothing here (a `Timeout` has its own event).
    pub fn log_long_waits(mut self, threshold: Duration) -> Self {
        self.long.wait = (!threshold.is_zero()).then_some(threshold);
        self
    }
}
