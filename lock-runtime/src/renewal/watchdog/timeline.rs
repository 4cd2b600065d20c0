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

use tokio::time::Instant;

use super::lease::{EARLY, Lease, Leases};

/// Stale entries tolerated beyond twice the leases on the schedule before a rebuild.
pub(super) const STALE_SLACK: usize = 1024;

/// The leases' next looks, soonest first.
#[derive(Default)]
pub(super) struct Timeline {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl Timeline {
    /// Gives the lease `id` (one of `leases`) an entry at its next look, unless it has one
    /// as soon (when that one comes up, the lease is looked at and rescheduled).
    pub(super) fn reschedule(&mut self, id: u64, leases: &mut Leases) {
        let Some(lease) = leases.get_mut(&id) else {
            return;
        };
        let at = lease.next_look();
        if lease.entry.is_some_and(|entry| entry <= at) {
            return;
        }
        lease.entry = Some(at);
        self.heap.push(Reverse((at, id)));
        if self.heap.len() > 2 * leases.len() + STALE_SLACK {
            self.heap = (leases.iter())
                .filter_map(|(id, lease)| lease.entry.map(|at| Reverse((at, *id))))
                .collect();
        }
    }

    /// The leases whose entries come up by `now` (or by `now` and the most a renewal goes
    /// early), their entries taken: each must be looked at and rescheduled.
    pub(super) fn take_due(&mut self, now: Instant, leases: &mut Leases) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > now + EARLY {
                break;
            }
            self.heap.pop();
            if let Some(lease) = leases.get_mut(&id)
                && lease.entry == Some(at)
            {
                lease.entry = None;
                due.push(id);
            }
        }
        due
    }

    /// When the next lease must be looked at (the stale entries before it dropped).
    pub(super) fn next_look(&mut self, leases: &Leases) -> Option<Instant> {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if (leases.get(&id)).is_some_and(|lease: &Lease| lease.entry == Some(at)) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Drops every entry (no lease is left on the schedule).
    pub(super) fn clear(&mut self) {
        self.heap.clear();
    }

    /// How many entries the heap holds, stale ones included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }
}
