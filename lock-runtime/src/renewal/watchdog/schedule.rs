//! The scheduler: one task per client that sleeps until the next lease or place falls
//! due, then sends what is due (renewals in batches, keep-alives of queue places, the
//! liveness key) and ends the leases found lost.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::hold_clock::LongHold;
use super::lease::Lease;
use super::places::{KEEPALIVE_EVERY, KeepAlive, group_places, keep_places};
use super::renewals::{Nodes, Renewal, renew_batch};
use super::state::{WatchdogShared, WatchdogState};
use crate::error::LostCause;
use crate::renewal::liveness::Liveness;
use crate::telemetry::Telemetry;

/// The longest the scheduler sleeps when nothing is scheduled (a registration that needs it
/// sooner wakes it).
pub(super) const IDLE: Duration = Duration::from_secs(3600);

/// The shortest idle look-again period, so that a tiny ttl cannot make the scheduler spin.
pub(super) const MIN_IDLE: Duration = Duration::from_millis(1);

/// The scheduler loop: renew what is due, expire what ran out, sleep until the next event.
pub(super) async fn schedule(shared: Weak<WatchdogShared>, wake: Arc<Notify>, nodes: Nodes) {
    loop {
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let next_wake = {
            let Some(shared_now) = shared.upgrade() else {
                return;
            };
            if shared_now.stopped.load(Ordering::Acquire) {
                return;
            }
            let due = collect_due(&mut shared_now.state(), Instant::now());
            for (lease, cause) in due.lapsed {
                lease.end(cause, &due.telemetry);
            }
            due.long.iter().for_each(LongHold::log);
            if !due.places.is_empty() {
                tokio::spawn(keep_places(nodes.connections[0].clone(), due.places));
            }
            if let Some(liveness) = due.refresh {
                let connection = nodes.connections[0].clone();
                tokio::spawn(async move { liveness.refresh(connection).await });
            }
            if !due.batch.is_empty() {
                tokio::spawn(renew_batch(
                    shared.clone(),
                    wake.clone(),
                    nodes.clone(),
                    due.batch,
                ));
            }
            due.next_wake
        };
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(next_wake) => {}
        }
    }
}

/// What the scheduler does after a look at the schedule, once it let go of the state.
pub(super) struct Due {
    /// Renewals to send now.
    pub(super) batch: Vec<Renewal>,
    /// When to look again.
    pub(super) next_wake: Instant,
    /// Queue places to keep alive now.
    pub(super) places: Vec<KeepAlive>,
    /// The liveness key to refresh now.
    pub(super) refresh: Option<Arc<Liveness>>,
    /// Leases past their validity, taken off the schedule, to [`end`](Lease::end).
    pub(super) lapsed: Vec<(Lease, LostCause)>,
    /// Where their losses are counted.
    pub(super) telemetry: Telemetry,
    /// Holds that passed the long-hold threshold, to log.
    pub(super) long: Vec<LongHold>,
}

/// Takes leases past their validity off the schedule (to be ended by the caller, outside
/// the state's lock) and takes out the renewals that are due, and the queue places to keep
/// alive when their time has come.
pub(super) fn collect_due(state: &mut WatchdogState, now: Instant) -> Due {
    let DueLeases {
        batch,
        lapsed,
        long,
        mut next_wake,
    } = due_leases(state, now);
    let (places, refresh) = due_keepalives(state, now);
    if let Some(keepalive) = state.next_keepalive {
        next_wake = next_wake.min(keepalive);
    }
    let recent_period = state.recent_period.take();
    if batch.is_empty()
        && state.leases.is_empty()
        && state.queued.is_empty()
        && state.next_keepalive.is_none()
    {
        // Nothing to watch. While locks keep coming and going (each held for less than its
        // first renewal interval), look again after that interval: a new lease is then due
        // no sooner than this look and need not wake the scheduler (a thread switch per
        // acquire). Once they stop, back off towards IDLE.
        let idle = recent_period
            .unwrap_or_else(|| match state.idle_period {
                Duration::ZERO => IDLE,
                last => last.saturating_mul(2),
            })
            .clamp(MIN_IDLE, IDLE);
        state.idle_period = idle;
        next_wake = now + idle;
    }
    state.scheduled_wake = Some(next_wake);
    Due {
        batch,
        next_wake,
        places,
        refresh,
        lapsed,
        telemetry: state.telemetry.clone(),
        long,
    }
}

/// What a look found of the leases (see [`due_leases`]).
struct DueLeases {
    batch: Vec<Renewal>,
    lapsed: Vec<(Lease, LostCause)>,
    long: Vec<LongHold>,
    next_wake: Instant,
}

/// The renewals due (sent a little early, so that neighbours share a pipeline, see
/// [`Lease::early`]), the leases past their validity or their `max_hold` taken off the
/// schedule with the cause of their loss, the holds that just passed the long-hold
/// threshold, and when the next lease must be looked at. Only the leases whose time has
/// come are visited (see `timeline.rs`).
fn due_leases(state: &mut WatchdogState, now: Instant) -> DueLeases {
    let mut batch = Vec::new();
    let mut lapsed = Vec::new();
    let mut long = Vec::new();
    for id in state.take_due(now) {
        let Some(lease) = state.leases.get_mut(&id) else {
            continue;
        };
        if lease
            .hold
            .deadline()
            .is_some_and(|deadline| now >= deadline)
        {
            lapsed.extend(
                state
                    .take_lease(id)
                    .map(|lease| (lease, LostCause::MaxHold)),
            );
            continue;
        }
        if lease.hold.long_at.is_some_and(|at| now >= at) {
            lease.hold.long_at = None;
            long.push(lease.long_hold(now));
        }
        if now >= lease.valid_until {
            let cause = if lease.renew {
                LostCause::RenewalFailed
            } else {
                LostCause::Expired
            };
            lapsed.extend(state.take_lease(id).map(|lease| (lease, cause)));
            continue;
        }
        if lease.renew && !lease.in_flight && lease.next_renewal <= now + lease.early() {
            lease.in_flight = true;
            batch.push(Renewal {
                id,
                names: lease.names.clone(),
                token: lease.token.clone(),
                ttl: lease.ttl,
                progress_ago: (lease.lost.last_progress())
                    .map(|at| now.saturating_duration_since(at)),
                contended: lease.contended,
            });
        }
        state.reschedule(id);
    }
    let next_wake = state.next_look().unwrap_or(now + IDLE);
    DueLeases {
        batch,
        lapsed,
        long,
        next_wake,
    }
}

/// The queue places to keep alive and the liveness key to refresh, when their time has come.
fn due_keepalives(
    state: &mut WatchdogState,
    now: Instant,
) -> (Vec<KeepAlive>, Option<Arc<Liveness>>) {
    let Some(liveness) = state.liveness.clone() else {
        return (due_places(state, now), None);
    };
    let refresh = due_refresh(state, liveness, now);
    // Places whose entries name no liveness key (cluster mode before the slot map was
    // read) go by their deadlines: kept per key, with the refresh.
    let places = match refresh {
        Some(_) => group_places(state.queued.values().filter(|place| place.per_key)),
        None => Vec::new(),
    };
    (places, refresh)
}

/// The queue places to keep alive now, one call per key, when their time has come.
pub(super) fn due_places(state: &mut WatchdogState, now: Instant) -> Vec<KeepAlive> {
    if state.queued.is_empty() {
        state.next_keepalive = None;
        return Vec::new();
    }
    if state.next_keepalive.is_some_and(|due| due > now) {
        return Vec::new();
    }
    state.next_keepalive = Some(now + KEEPALIVE_EVERY);
    group_places(state.queued.values())
}

/// The liveness key, when its refresh is due: every [`KEEPALIVE_EVERY`] while the client
/// keeps a queue place, watches another process, or renews a lease that waiters queue
/// behind (a renewal notes its holder's liveness key for them; a lease without renewal
/// never does). A client that only takes uncontended locks never writes it.
pub(super) fn due_refresh(
    state: &mut WatchdogState,
    liveness: Arc<Liveness>,
    now: Instant,
) -> Option<Arc<Liveness>> {
    if state.queued.is_empty()
        && !liveness.is_watching()
        && (state.contended == 0
            || !state
                .leases
                .values()
                .any(|lease| lease.renew && lease.contended))
    {
        state.next_keepalive = None;
        return None;
    }
    if state.next_keepalive.is_some_and(|due| due > now) {
        return None;
    }
    state.next_keepalive = Some(now + KEEPALIVE_EVERY);
    Some(liveness)
}

#[cfg(test)]
mod tests {
    use super::super::lease::for_test as lease;
    use super::super::places::QueuePlace;
    use super::*;
    use crate::lease::Token;
    use crate::scripts::KeyNames;

    /// A queue place of `token` in the queue of `names` (`per_key` false).
    fn place(names: &Arc<KeyNames>, token: &str) -> QueuePlace {
        QueuePlace {
            names: names.clone(),
            token: Token::from(token),
            per_key: false,
        }
    }

    #[test]
    fn an_idle_scheduler_looks_again_after_the_recent_renewal_interval_then_backs_off() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        // Never used: the long idle sleep.
        assert_eq!(collect_due(&mut state, now).next_wake, now + IDLE);
        // A 3 s lease came and went before the scheduler looked: it looks again after 1 s,
        // so the next such lease (due no sooner) need not wake it.
        state.recent_period = Some(Duration::from_secs(1));
        assert_eq!(
            collect_due(&mut state, now).next_wake,
            now + Duration::from_secs(1)
        );
        // No lease since: the look-again period doubles.
        assert_eq!(
            collect_due(&mut state, now).next_wake,
            now + Duration::from_secs(2)
        );
        assert_eq!(
            collect_due(&mut state, now).next_wake,
            now + Duration::from_secs(4)
        );
    }

    #[test]
    fn queue_places_are_kept_alive_a_third_of_a_queue_lease_apart() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        let names = Arc::new(KeyNames::prefixed("", "k").unwrap());
        for token in ["a", "b"] {
            state.next_id += 1;
            let id = state.next_id;
            state.queued.insert(id, place(&names, token));
        }
        // Due at once (never kept yet): one call for the key, with both places.
        let due = collect_due(&mut state, now);
        let (next, places) = (due.next_wake, due.places);
        assert_eq!(places.len(), 1);
        assert_eq!(places[0].tokens.len(), 2);
        assert_eq!(next, now + KEEPALIVE_EVERY);
        // Not again before its time; then again.
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY / 2)
                .places
                .is_empty()
        );
        assert_eq!(
            collect_due(&mut state, now + KEEPALIVE_EVERY).places.len(),
            1
        );
        // No place left: nothing to keep, and the scheduler may idle.
        state.queued.clear();
        let due = collect_due(&mut state, now + KEEPALIVE_EVERY * 2);
        let (next, places) = (due.next_wake, due.places);
        assert!(places.is_empty());
        assert!(next > now + KEEPALIVE_EVERY * 3);
    }

    #[test]
    fn with_a_liveness_key_places_cost_one_refresh_per_period_and_uncontended_leases_none() {
        let now = Instant::now();
        let liveness = Liveness::new();
        let mut state = WatchdogState {
            liveness: Some(liveness.clone()),
            ..WatchdogState::default()
        };
        // An uncontended lease renewed by the watchdog: nothing to refresh.
        state.insert_lease(1, lease(Duration::from_secs(3), now));
        let due = collect_due(&mut state, now);
        assert!(due.refresh.is_none() && due.places.is_empty());
        // A thousand places on a thousand keys: one refresh, no per-key keep-alive.
        for index in 0..1_000u64 {
            let names = Arc::new(KeyNames::prefixed("", &format!("k{index}")).unwrap());
            state
                .queued
                .insert(100 + index, place(&names, &format!("t{index}")));
        }
        let due = collect_due(&mut state, now);
        assert!(due.refresh.is_some());
        assert!(due.places.is_empty());
        assert!(due.next_wake <= now + KEEPALIVE_EVERY);
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY / 2)
                .refresh
                .is_none()
        );
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY)
                .refresh
                .is_some()
        );
        // The places gone, a lease that waiters queue behind still keeps the key.
        state.queued.clear();
        state.note_contended(1);
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY * 2)
                .refresh
                .is_some()
        );
        state.leases.clear();
        assert!(
            collect_due(&mut state, now + KEEPALIVE_EVERY * 3)
                .refresh
                .is_none()
        );
    }

    #[test]
    fn a_held_lease_sets_the_next_look_at_its_renewal() {
        let now = Instant::now();
        let mut state = WatchdogState::default();
        state.insert_lease(1, lease(Duration::from_secs(3), now));
        let due = collect_due(&mut state, now);
        let (batch, next) = (due.batch, due.next_wake);
        assert!(batch.is_empty());
        assert_eq!(next, now + Duration::from_secs(1));
    }
}
