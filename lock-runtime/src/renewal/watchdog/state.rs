//! The watchdog's state: the schedule of leases and queue places that the watchdog's
//! handles change and its scheduler task reads, behind one mutex, and what a change of a
//! lease does to the schedule.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::lease::{Lease, Leases};
use super::places::QueuePlace;
use super::timeline::Timeline;
use crate::renewal::liveness::Liveness;
use crate::telemetry::Telemetry;

/// What the watchdog's handles and its scheduler task share.
pub(super) struct WatchdogShared {
    pub(super) state: Mutex<WatchdogState>,
    pub(super) stopped: AtomicBool,
    /// When a hold counts as long ([`Config::log_long_holds`](crate::Config::log_long_holds)).
    pub(super) long_hold: Option<Duration>,
    /// Set at the first lease renewed (see `taken_away.rs`), and its wake-up.
    pub(super) renewed: AtomicBool,
    pub(super) first_renewal: Notify,
}

impl WatchdogShared {
    /// The schedule, locked.
    pub(super) fn state(&self) -> MutexGuard<'_, WatchdogState> {
        // A panic while holding this lock cannot leave the map half-updated in a way that
        // matters (every update is a single insert, remove or field store), so poisoning
        // is ignored rather than turned into a panic of our own.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
/// The schedule: the leases and queue places, and when to look at them.
pub(super) struct WatchdogState {
    pub(super) next_id: u64,
    pub(super) leases: Leases,
    /// When each lease must be looked at next (see `timeline.rs`).
    pub(super) timeline: Timeline,
    /// How many leases on the schedule are [`Lease::contended`].
    pub(super) contended: usize,
    /// Queue places this process keeps alive (its waiters), by id.
    pub(super) queued: HashMap<u64, QueuePlace>,
    /// When the queue places are kept alive next (`None`: no place is kept).
    pub(super) next_keepalive: Option<Instant>,
    /// Where lost leases and failed renewals are reported.
    pub(super) telemetry: Telemetry,
    /// When the scheduler will look at the schedule next (`None`: it has not yet). A new
    /// lease wakes it only when it needs it sooner, so an acquire does not cost a wake-up
    /// of the scheduler task (a thread switch) in the common case.
    pub(super) scheduled_wake: Option<Instant>,
    /// The shortest time from an acquire to its lease's first event among the leases
    /// registered since the scheduler last looked.
    pub(super) recent_period: Option<Duration>,
    /// How long the scheduler last slept with nothing scheduled.
    pub(super) idle_period: Duration,
    /// The client's liveness key: kept alive by one request per period while the client
    /// holds or waits (instead of one keep-alive per key), see [`crate::renewal::liveness`].
    pub(super) liveness: Option<Arc<Liveness>>,
}

impl WatchdogState {
    /// Puts a lease on the schedule.
    pub(super) fn insert_lease(&mut self, id: u64, lease: Lease) {
        self.leases.insert(id, lease);
        self.reschedule(id);
    }

    /// Takes a lease off the schedule (its entry goes stale).
    pub(super) fn take_lease(&mut self, id: u64) -> Option<Lease> {
        let lease = self.leases.remove(&id)?;
        if lease.contended {
            self.contended = self.contended.saturating_sub(1);
        }
        Some(lease)
    }

    /// Takes every lease off the schedule.
    pub(super) fn take_all_leases(&mut self) -> Leases {
        self.timeline.clear();
        self.contended = 0;
        std::mem::take(&mut self.leases)
    }

    /// Marks the lease `id` as one that waiters queue behind (see [`Lease::contended`]).
    pub(super) fn note_contended(&mut self, id: u64) {
        if let Some(lease) = self.leases.get_mut(&id)
            && !lease.contended
        {
            lease.contended = true;
            self.contended += 1;
        }
    }

    /// After a change of the lease `id`: an entry at its next look, unless it has one as
    /// soon (when that one comes up, the lease is looked at and rescheduled).
    pub(super) fn reschedule(&mut self, id: u64) {
        self.timeline.reschedule(id, &mut self.leases);
    }

    /// The leases whose entries come up by `now` (see [`Timeline::take_due`]): each must
    /// be looked at and [rescheduled](Self::reschedule).
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<u64> {
        self.timeline.take_due(now, &mut self.leases)
    }

    /// When the next lease must be looked at.
    pub(super) fn next_look(&mut self) -> Option<Instant> {
        self.timeline.next_look(&self.leases)
    }
}

#[cfg(test)]
mod tests {
    use super::super::lease::for_test as lease;
    use super::super::timeline::STALE_SLACK;
    use super::*;

    /// A look visits the leases whose time has come, not the others; a lease taken off the
    /// schedule, or given a sooner entry, leaves a stale entry that no look returns.
    #[test]
    fn a_look_takes_only_the_leases_due_and_no_stale_entry() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        for id in 0..10_000 {
            state.insert_lease(id, lease(Duration::from_secs(30), now));
        }
        // One lease due in 1 s, the others in 10 s (a third of their ttl).
        state.insert_lease(10_000, lease(Duration::from_secs(3), now));
        let soon = now + Duration::from_secs(1);
        assert_eq!(state.next_look(), Some(soon));
        assert!(state.take_due(now).is_empty());
        assert_eq!(state.take_due(soon), [10_000]);
        state.reschedule(10_000);
        // Taken off the schedule: its entry is stale.
        assert!(state.take_lease(10_000).is_some());
        assert_eq!(state.next_look(), Some(now + Duration::from_secs(10)));
        // A sooner entry for lease 7: only that one comes up.
        if let Some(lease) = state.leases.get_mut(&7) {
            lease.next_renewal = soon;
        }
        state.reschedule(7);
        assert_eq!(state.take_due(soon), [7]);
        state.reschedule(7);
        let later = now + Duration::from_secs(10);
        assert_eq!(
            state.take_due(later).len(),
            10_000,
            "every lease held, once"
        );
    }

    /// Leases that come and go leave stale entries; the heap is rebuilt before they
    /// outnumber the leases held by more than the slack.
    #[test]
    fn stale_entries_stay_bounded() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        state.insert_lease(0, lease(Duration::from_secs(3), now));
        for id in 1..100_000 {
            state.insert_lease(id, lease(Duration::from_secs(3), now));
            state.take_lease(id);
        }
        assert!(state.timeline.len() <= 2 + STALE_SLACK);
        assert_eq!(state.take_due(now + Duration::from_secs(1)), [0]);
    }
}
