//! The schedule's timeline: when the scheduler must look at each lease next (its renewal,
//! or the end of its validity), in time order, so that a look costs what falls due then,
//! not a visit of every lease held (100,000 held leases would make each look a long one).
//!
//! A min-heap of (time, lease id); each lease knows the time of its one live entry
//! ([`Lease::entry`]). An entry whose lease left the schedule, or got a sooner entry, is
//! stale: dropped when it comes up, and the heap is rebuilt from the leases when stale
//! entries outnumber them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;

/// The most a renewal is sent before it falls due (a twelfth of its ttl, at most this), so
/// that leases due close together share a pipeline.
const EARLY: Duration = Duration::from_millis(250);

/// Stale entries tolerated beyond twice the leases on the schedule before a rebuild.
const STALE_SLACK: usize = 1024;

/// The leases' next looks, soonest first.
#[derive(Default)]
pub(super) struct Timeline {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Lease {
    /// How early this lease's renewal may go with its neighbours'.
    pub(super) fn early(&self) -> Duration {
        (self.ttl / 12).min(EARLY)
    }

    /// Its first event once (re)dated: its renewal if it renews, and the end of its
    /// validity at the latest, or its hold's next event ([`HoldClock`](super::hold_clock::HoldClock))
    /// when sooner.
    pub(super) fn first_event(&self) -> Instant {
        let look = if self.renew {
            self.next_renewal.min(self.valid_until)
        } else {
            self.valid_until
        };
        self.hold.sooner(look)
    }

    /// When the scheduler must look at this lease next: its renewal, unless one is in
    /// flight or it is not renewed, and the end of its validity at the latest, or its
    /// hold's next event when sooner.
    fn next_look(&self) -> Instant {
        let look = if self.renew && !self.in_flight {
            self.next_renewal.min(self.valid_until)
        } else {
            self.valid_until
        };
        self.hold.sooner(look)
    }
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
        self.timeline.heap.clear();
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
        let Some(lease) = self.leases.get_mut(&id) else {
            return;
        };
        let at = lease.next_look();
        if lease.entry.is_some_and(|entry| entry <= at) {
            return;
        }
        lease.entry = Some(at);
        self.timeline.heap.push(Reverse((at, id)));
        if self.timeline.heap.len() > 2 * self.leases.len() + STALE_SLACK {
            self.timeline.heap = (self.leases.iter())
                .filter_map(|(id, lease)| lease.entry.map(|at| Reverse((at, *id))))
                .collect();
        }
    }

    /// The leases whose entries come up by `now` (or by `now` and the most a renewal goes
    /// early), their entries taken: each must be looked at and [rescheduled](Self::reschedule).
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = self.timeline.heap.peek() {
            if at > now + EARLY {
                break;
            }
            self.timeline.heap.pop();
            if let Some(lease) = self.leases.get_mut(&id)
                && lease.entry == Some(at)
            {
                lease.entry = None;
                due.push(id);
            }
        }
        due
    }

    /// When the next lease must be looked at (the stale entries before it dropped).
    pub(super) fn next_look(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, id))) = self.timeline.heap.peek() {
            if (self.leases.get(&id)).is_some_and(|lease| lease.entry == Some(at)) {
                return Some(at);
            }
            self.timeline.heap.pop();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::lease;
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
        assert!(state.timeline.heap.len() <= 2 + STALE_SLACK);
        assert_eq!(state.take_due(now + Duration::from_secs(1)), [0]);
    }
}
