//! How a lock behaves: its options and their limits.

use std::time::Duration;

/// What happens when the lease is lost while a guarded body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body at its next await point and return [`LockError::Lost`](crate::LockError::Lost);
    /// a loss found only at the release returns `Lost` too, instead of the body's result.
    #[default]
    Cancel,
    /// Let the body finish and return its result; it can check `current_lock().is_lost()`
    /// or the guard.
    Continue,
}

/// How a lock behaves: lease, waiting, renewal, loss, fencing, minimum and maximum hold.
///
/// Defaults: `ttl` 30 s, `wait` 10 s, watchdog on, [`OnLost::Cancel`], no fencing, no
/// minimum hold, no maximum hold.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// The lease: how long Redis keeps the key without renewal (at most [`MAX_TTL`]).
    pub ttl: Duration,
    /// How long to wait for a held lock; zero tries once.
    pub wait: Duration,
    /// Renew the lease every `ttl/3` while held.
    pub watchdog: bool,
    /// What a guarded body does when the lease is lost.
    pub on_lost: OnLost,
    /// Issue a fencing token on every acquisition.
    pub fencing: bool,
    /// Keep the key at least this long after acquiring, however soon the holder releases
    /// (ShedLock's `lockAtLeastFor`; zero: release at once). For a job scheduled on every
    /// replica, with `wait` zero: a replica whose schedule fires a little late finds the key
    /// still held and skips that tick too. At most `ttl`.
    pub hold_at_least: Duration,
    /// The longest a hold may last (`None`: unbounded, the default). When a hold reaches
    /// it, the watchdog stops renewing the lease and its holder reads it lost with
    /// [`LostCause::MaxHold`](crate::LostCause::MaxHold): a guarded body is stopped at once
    /// (it may be hung on an await that never ends) and its lock released at once, since
    /// the token is still ours and releasing frees the waiters sooner than letting the ttl
    /// run out; a guard held by hand reads [`is_lost`](crate::LockGuard::is_lost) and keeps
    /// the key until it is released or the ttl ends. Each hold ends within `max_hold` and a
    /// look of the watchdog, and a WARN names the key, the token, how long it was held and
    /// the bound. The clock starts when the acquire returns (for a lock passed between
    /// tasks of one process: when this task got it).
    pub max_hold: Option<Duration>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            watchdog: true,
            on_lost: OnLost::Cancel,
            fencing: false,
            hold_at_least: Duration::ZERO,
            max_hold: None,
        }
    }
}

/// Refuses a `max_hold` under 1 ms (a hold that would end before its body ran), before
/// any traffic.
pub(crate) fn check_max_hold(
    options: &LockOptions,
    key: &str,
) -> Result<(), crate::error::LockError> {
    match options.max_hold {
        Some(max_hold) if max_hold < Duration::from_millis(1) => {
            Err(crate::error::LockError::config(format!(
                "lock `{key}` has a max_hold of {max_hold:?}, which ends the hold before its \
                 body runs; give at least 1ms, e.g. max_hold = \"5m\", or leave it out"
            )))
        }
        _ => Ok(()),
    }
}

/// How long a fence counter outlives the last acquisition of its key (twice the lock's
/// ttl instead, when that is longer).
///
/// Long enough that a stale holder's token is always compared against a newer counter;
/// after it, the counter is re-seeded from the server clock, which keeps tokens increasing.
pub const FENCE_COUNTER_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The fence counter's lifetime (ms) for an acquisition with `options`, or 0 for no fence.
pub(crate) fn fence_lifetime(options: &LockOptions) -> u64 {
    if options.fencing {
        crate::lease::millis(FENCE_COUNTER_LIFETIME.max(options.ttl * 2))
    } else {
        0
    }
}

/// The longest lease a lock takes (365 days); a longer `ttl` is refused with
/// [`LockError::Config`](crate::LockError::Config) before any Redis traffic.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// A client's lease, wait and maximum hold for the locks that set none
/// ([`Config::default_ttl`], [`Config::default_wait`](crate::Config::default_wait),
/// [`Config::default_max_hold`](crate::Config::default_max_hold)); `None` keeps
/// [`LockOptions::default`]'s.
///
/// [`Config::default_ttl`]: crate::Config::default_ttl
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LockDefaults {
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
}

/// Which of a builder's `ttl`, `wait` and `max_hold` were given: by a setter, or by
/// `with_options` with a value other than [`LockOptions::default`]'s. The others take the
/// client's [`LockDefaults`] when the lock is taken, so an explicit value always wins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Explicit {
    pub(crate) ttl: bool,
    pub(crate) wait: bool,
    pub(crate) max_hold: bool,
}

impl Explicit {
    /// All given: the client's defaults do not apply.
    pub(crate) const ALL: Explicit = Explicit {
        ttl: true,
        wait: true,
        max_hold: true,
    };

    /// What `options`, passed whole to `with_options`, gives: a value other than the
    /// default's counts as given.
    pub(crate) fn of(options: &LockOptions) -> Explicit {
        let default = LockOptions::default();
        Explicit {
            ttl: options.ttl != default.ttl,
            wait: options.wait != default.wait,
            max_hold: options.max_hold != default.max_hold,
        }
    }

    /// `options` with `defaults` in place of what was not given; `None` when nothing
    /// changes (the builder's options stand as they are).
    pub(crate) fn resolve(
        self,
        options: &LockOptions,
        defaults: LockDefaults,
    ) -> Option<LockOptions> {
        let ttl = defaults.ttl.filter(|_| !self.ttl);
        let wait = defaults.wait.filter(|_| !self.wait);
        let max_hold = defaults.max_hold.filter(|_| !self.max_hold);
        if ttl.is_none() && wait.is_none() && max_hold.is_none() {
            return None;
        }
        let mut resolved = options.clone();
        resolved.ttl = ttl.unwrap_or(resolved.ttl);
        resolved.wait = wait.unwrap_or(resolved.wait);
        resolved.max_hold = max_hold.or(resolved.max_hold);
        Some(resolved)
    }
}
