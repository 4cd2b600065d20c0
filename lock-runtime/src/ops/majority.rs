//! The operator's view where a deployment asks several masters (Redlock): what their
//! answers come to. [`LockClient::inspect`](crate::LockClient::inspect) keeps every
//! master's own state beside the majority's verdict; a
//! [`LockClient::force_release`](crate::LockClient::force_release) on every master lists
//! the holders it removed anywhere, once each.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::ops::force_release::ForcedRelease;
use crate::ops::inspect::{Holder, LockState};
use crate::topology::deployment::Majority;

impl Majority for ForcedRelease {
    /// The holders removed anywhere, once each.
    fn verdict(key: &str, answers: Vec<Option<Self>>, _quorum: usize) -> Self {
        let mut merged = ForcedRelease {
            key: key.to_owned(),
            removed: Vec::new(),
            handover_restarted: false,
            woken: None,
            granted: false,
        };
        for release in answers.into_iter().flatten() {
            for holder in release.removed {
                if !merged.removed.iter().any(|seen| seen.token == holder.token) {
                    merged.removed.push(holder);
                }
            }
            merged.handover_restarted |= release.handover_restarted;
        }
        merged
    }
}

impl Majority for LockState {
    fn verdict(key: &str, masters: Vec<Option<Self>>, quorum: usize) -> Self {
        verdict(key, masters, quorum)
    }
}

/// The majority's view of the masters' states: the token at least `quorum` masters hold
/// (its ttl, how long that many still hold it), and the fence that many counters reached.
/// Redlock has no queue across masters: no waiters.
fn verdict(key: &str, masters: Vec<Option<LockState>>, quorum: usize) -> LockState {
    let answered: Vec<&LockState> = masters.iter().flatten().collect();
    let mut ttls: HashMap<&str, Vec<Duration>> = HashMap::new();
    for holder in answered.iter().filter_map(|state| state.holder()) {
        if let Some(ttl) = holder.ttl {
            ttls.entry(&holder.token).or_default().push(ttl);
        }
    }
    let holder = ttls
        .into_iter()
        .find_map(|(token, ttls)| Some((token, nth_largest(ttls, quorum)?)))
        .map(|(token, ttl)| Holder::exclusive(token.to_owned(), Some(ttl)));
    let fences = answered.iter().filter_map(|state| state.fence).collect();
    LockState {
        key: key.to_owned(),
        holders: holder.into_iter().collect(),
        permits: None,
        handover: None,
        fence: nth_largest(fences, quorum),
        waiters: Vec::new(),
        queued: 0,
        server_time: answered
            .first()
            .map_or_else(SystemTime::now, |state| state.server_time),
        masters,
    }
}

/// The `n`th largest of `values` (1: the largest), if there are that many.
fn nth_largest<T: Ord + Copy>(mut values: Vec<T>, n: usize) -> Option<T> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(n.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::nth_largest;

    #[test]
    fn the_nth_largest_value_is_what_a_majority_reached() {
        assert_eq!(nth_largest(vec![3, 9, 5], 2), Some(5));
        assert_eq!(nth_largest(vec![3], 2), None);
        assert_eq!(nth_largest(Vec::<u8>::new(), 0), None);
    }
}
