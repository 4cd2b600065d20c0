//! How long a hold has lasted, as the watchdog watches it: the end of its `max_hold`
//! ([`LostCause::MaxHold`](crate::error::LostCause::MaxHold)) and the one INFO event of a
//! long hold ([`Config::log_long_holds`](crate::Config::log_long_holds)). Both are events
//! on the schedule's timeline, so a hold costs nothing more until one falls due, and a hung
//! body (one that awaits forever) is ended on time, since the watchdog never waits on it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::{Token, millis};
use crate::scripts::KeyNames;

/// A hold's clock: when its holder got it, its bound, and when it counts as long.
#[derive(Debug, Clone, Copy)]
pub(super) struct HoldClock {
    /// When the holder got the lease (registered, or handed over in this process).
    pub(super) since: Instant,
    /// The longest the hold may last (`None`: unbounded).
    pub(super) max_hold: Option<Duration>,
    /// When the long-hold event is due (`None`: off, or logged already).
    pub(super) long_at: Option<Instant>,
}

impl HoldClock {
    /// The clock of a hold that begins at `since` with `max_hold`, logged as long past
    /// `long_hold`.
    pub(super) fn new(
        since: Instant,
        max_hold: Option<Duration>,
        long_hold: Option<Duration>,
    ) -> Self {
        HoldClock {
            since,
            max_hold,
            long_at: long_hold.and_then(|after| since.checked_add(after)),
        }
    }

    /// When the hold must end (`None`: never, or beyond what the clock can count).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.since.checked_add(self.max_hold?)
    }

    /// The sooner of its events still ahead, if any.
    pub(super) fn next_event(&self) -> Option<Instant> {
        match (self.deadline(), self.long_at) {
            (Some(deadline), Some(long)) => Some(deadline.min(long)),
            (deadline, long) => deadline.or(long),
        }
    }

    /// `look` (a lease's next renewal or validity point), or the hold's next event when
    /// that comes sooner.
    pub(super) fn sooner(&self, look: Instant) -> Instant {
        self.next_event().map_or(look, |event| event.min(look))
    }
}

/// A hold that passed the long-hold threshold, to be logged once the scheduler let go of
/// the state.
pub(super) struct LongHold {
    pub(super) names: Arc<KeyNames>,
    pub(super) token: Token,
    /// How long it has been held.
    pub(super) held: Duration,
    /// When its holder last reported progress (`None`: never during this hold).
    pub(super) last_progress: Option<Instant>,
}

impl LongHold {
    /// The INFO event: the key, the token, how long it has been held, and how long ago its
    /// holder last reported progress (`progress_ago_ms` absent: never during this hold).
    pub(super) fn log(&self) {
        let key = self.names.lock();
        let held_ms = millis(self.held);
        let progress_ago_ms = self.last_progress.map(|at| millis(at.elapsed()));
        tracing::info!(
            key,
            token = %self.token,
            held_ms,
            progress_ago_ms,
            "lock held long: past the log_long_holds threshold"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_names_its_sooner_event_and_none_when_unbounded() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let unbounded = HoldClock::new(now, None, None);
        assert_eq!(unbounded.next_event(), None);
        assert_eq!(unbounded.sooner(now + secs(5)), now + secs(5));
        let both = HoldClock::new(now, Some(secs(60)), Some(secs(10)));
        assert_eq!(both.deadline(), Some(now + secs(60)));
        assert_eq!(both.next_event(), Some(now + secs(10)));
        assert_eq!(both.sooner(now + secs(5)), now + secs(5));
        assert_eq!(both.sooner(now + secs(20)), now + secs(10));
        // A bound the clock cannot count is no bound (no overflow, no panic).
        let huge = HoldClock::new(now, Some(Duration::MAX), Some(Duration::MAX));
        assert_eq!(huge.next_event(), None);
    }
}
