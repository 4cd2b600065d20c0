//! How a lock behaves: its options and their limits.

use std::time::Duration;

use crate::error::LockError;

/// What happens when the lease is lost while a guarded body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body at its next await point and return [`LockError::Lost`];
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
pub(crate) fn check_max_hold(options: &LockOptions, key: &str) -> Result<(), LockError> {
    match options.max_hold {
        Some(max_hold) if max_hold < Duration::from_millis(1) => Err(LockError::config(format!(
            "lock `{key}` has a max_hold of {max_hold:?}, which ends the hold before its \
                 body runs; give at least 1ms, e.g. max_hold = \"5m\", or leave it out"
        ))),
        _ => Ok(()),
    }
}

/// What takes a [`LockOptions`]: the options each primitive takes differ, and
/// [`LockOptions::check_for`] holds the one list of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taker {
    /// A [`Lock`](crate::Lock) (a mutex, a scheduled job's lock).
    Lock,
    /// A [`RwLock`](crate::RwLock)'s reader or writer.
    ReadWrite,
    /// A [`Semaphore`](crate::Semaphore)'s permit.
    Semaphore,
    /// A [`MultiLock`](crate::MultiLock)'s keys, together.
    Several,
}

/// Who takes a fence: a lock, a writer, each of several keys.
const FENCE_TAKERS: &[Taker] = &[Taker::Lock, Taker::ReadWrite, Taker::Several];
/// Who takes a minimum hold: a scheduled job's `Lock`.
const HOLD_TAKERS: &[Taker] = &[Taker::Lock];

impl LockOptions {
    /// Refuses, before any traffic, what `taker` cannot do with these options on `key`
    /// (its keys, for several): an option it does not take, a lease Redis or the watchdog
    /// cannot keep, a minimum hold over the lease. The error names the key; nothing is
    /// written when all is well (this runs on every acquire).
    pub(crate) fn check_for(&self, taker: Taker, key: &str) -> Result<(), LockError> {
        let refuse = |why: String| {
            let what = match taker {
                Taker::Several => format!("{} ({key})", taker.name()),
                _ => format!("{} `{key}`", taker.name()),
            };
            Err(LockError::config(format!("{what} {why}")))
        };
        // The options only some takers take, and who takes each.
        let only_for = [
            ("fencing", self.fencing, FENCE_TAKERS),
            ("hold_at_least", !self.hold_at_least.is_zero(), HOLD_TAKERS),
        ];
        for (option, asked, takers) in only_for {
            if asked && !takers.contains(&taker) {
                return refuse(format!(
                    "asks for {option}, which a {} does not take ({}); turn it off",
                    taker.name(),
                    takers
                        .iter()
                        .map(|t| t.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                ));
            }
        }
        let (ttl, hold) = (self.ttl, self.hold_at_least);
        if ttl < Duration::from_millis(1) || ttl > MAX_TTL {
            return refuse(format!(
                "has a ttl of {ttl:?}; give it a lease from 1ms to 365 days (the watchdog \
                 renews it for as long as it is held)"
            ));
        }
        if hold > ttl {
            return refuse(format!(
                "has hold_at_least {hold:?} over its ttl {ttl:?}; the ttl is the longest the \
                 key is kept, so give a ttl of at least {hold:?} or a shorter hold_at_least"
            ));
        }
        Ok(())
    }
}

impl Taker {
    fn name(self) -> &'static str {
        match self {
            Taker::Lock => "lock",
            Taker::ReadWrite => "read-write lock",
            Taker::Semaphore => "semaphore",
            Taker::Several => "multi-key lock",
        }
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
/// [`LockError::Config`] before any Redis traffic.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(options: &LockOptions, taker: Taker) -> Option<String> {
        match options.check_for(taker, "it") {
            Err(LockError::Config { reason }) => Some(reason),
            Err(other) => panic!("{other:?}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn each_taker_refuses_the_options_it_does_not_take_and_names_them() {
        let fenced = LockOptions {
            fencing: true,
            ..LockOptions::default()
        };
        let held = LockOptions {
            hold_at_least: Duration::from_secs(1),
            ..LockOptions::default()
        };
        for taker in [Taker::Lock, Taker::ReadWrite, Taker::Several] {
            assert_eq!(refused(&fenced, taker), None, "{taker:?}");
        }
        let why = refused(&fenced, Taker::Semaphore).unwrap();
        assert!(why.starts_with("semaphore `it` asks for fencing"), "{why}");
        assert_eq!(refused(&held, Taker::Lock), None);
        for taker in [Taker::ReadWrite, Taker::Semaphore, Taker::Several] {
            let why = refused(&held, taker).unwrap();
            assert!(
                why.contains("hold_at_least") && why.contains("(lock)"),
                "{why}"
            );
        }
        let over = LockOptions {
            hold_at_least: Duration::from_secs(40),
            ..LockOptions::default()
        };
        assert!(
            refused(&over, Taker::Lock)
                .unwrap()
                .contains("over its ttl")
        );
        for ttl in [Duration::ZERO, MAX_TTL + Duration::from_secs(1)] {
            let bad = LockOptions {
                ttl,
                ..LockOptions::default()
            };
            assert!(
                refused(&bad, Taker::Semaphore)
                    .unwrap()
                    .contains("has a ttl of")
            );
        }
    }
}
