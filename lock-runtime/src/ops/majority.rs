//! The operator's view where a deployment asks several masters (Redlock): what their
//! answers come to. [`LockClient::inspect`](crate::LockClient::inspect) keeps every
//! master's own state beside the majority's verdict; a
//! [`LockClient::force_release`](crate::LockClient::force_release) on every master lists
//! the holders it removed anywhere, once each (and says who holds it when an expected
//! token held it nowhere).

use std::time::{Duration, SystemTime};

use crate::ops::force_release::{CheckedRelease, ForcedRelease};
use crate::ops::inspect::{Holder, LockState};
use crate::topology::deployment::Majority;

impl Majority for CheckedRelease {
    /// Released where any master released it (the holders removed anywhere, once each);
    /// else the holders the masters named, once each.
    fn verdict(key: &str, answers: Vec<Option<Self>>, quorum: usize) -> Self {
        let mut released = Vec::new();
        let mut expected = String::new();
        let mut holders: Vec<Holder> = Vec::new();
        for answer in answers.into_iter().flatten() {
            match answer {
                CheckedRelease::Released(release) => released.push(Some(release)),
                CheckedRelease::NotHolder {
                    token,
                    holders: now,
                    ..
                } => {
                    expected = token;
                    for holder in now {
                        if !holders.iter().any(|seen| seen.token == holder.token) {
                            holders.push(holder);
                        }
                    }
                }
            }
        }
        if released.is_empty() {
            let key = key.to_owned();
            CheckedRelease::NotHolder {
                key,
                token: expected,
                holders,
            }
        } else {
            CheckedRelease::Released(ForcedRelease::verdict(key, released, quorum))
        }
    }
}

impl ForcedRelease {
    /// The holders removed anywhere, once each.
    fn verdict(key: &str, answers: Vec<Option<Self>>, _quorum: usize) -> Self {
        let mut merged = ForcedRelease::nothing(key.to_owned());
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
        majority_state(key, masters, quorum)
    }
}

/// The majority's view of the masters' states: every holder (the writer or lock holder, a
/// reader's share, a permit) that at least `quorum` masters list (its ttl, how long that
/// many still list it), and the fence that many counters reached. Redlock has no queue
/// across masters: no waiters.
fn majority_state(key: &str, masters: Vec<Option<LockState>>, quorum: usize) -> LockState {
    let answered: Vec<&LockState> = masters.iter().flatten().collect();
    let mut ttls: Vec<(&Holder, Vec<Duration>)> = Vec::new();
    for holder in answered.iter().flat_map(|state| &state.holders) {
        let Some(ttl) = holder.ttl else { continue };
        let same = |(seen, _): &&mut (&Holder, Vec<Duration>)| {
            seen.token == holder.token && seen.kind == holder.kind
        };
        match ttls.iter_mut().find(same) {
            Some((_, seen)) => seen.push(ttl),
            None => ttls.push((holder, vec![ttl])),
        }
    }
    let holders = ttls
        .into_iter()
        .filter_map(|(holder, ttls)| {
            let ttl = nth_largest(ttls, quorum)?;
            Some(Holder {
                ttl: Some(ttl),
                ..holder.clone()
            })
        })
        .collect();
    let fences = answered.iter().filter_map(|state| state.fence).collect();
    LockState {
        key: key.to_owned(),
        holders,
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
