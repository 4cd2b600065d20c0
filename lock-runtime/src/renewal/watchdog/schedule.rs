//! The scheduler: one task per client that sleeps until the next lease or place falls
//! due, then sends what is due (renewals in batches, keep-alives of queue places, the
//! liveness key) and ends the leases found lost.

use super::hold_clock::LongHold;
use super::renewals::renew_batch;
use super::*;
use crate::scripts::keepalive_call;

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
            long.push(LongHold::of(lease, now));
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

impl Lease {
    /// Moves the validity point, and tells the holder's signal, which judges the lease by
    /// the clock too (see `lost_signal.rs`).
    pub(super) fn set_valid_until(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.lost.valid_until(valid_until, self.renew);
    }

    /// Re-dates the lease from an owner-checked command sent at `sent` that set its expiry
    /// to `ttl`.
    pub(super) fn redate(&mut self, ttl: Duration, sent: Instant) {
        self.ttl = ttl;
        self.set_valid_until(validity(sent, ttl));
        self.next_renewal = sent + ttl / 3;
    }

    /// Ends a lease taken off the schedule because it is lost (or, watchdog off, reached
    /// its ttl): frees its holder's turn first, then reports the loss, and only then tells
    /// the holder. A task woken by the loss may try the key again at once, and must not
    /// find its own old turn still taken. Called outside the state's lock, so that the
    /// woken holder never waits on it.
    pub(super) fn end(mut self, cause: LostCause, telemetry: &Telemetry) {
        drop(self.attached.take());
        let (key, token) = (self.names.lock(), &*self.token);
        match cause {
            LostCause::Expired => tracing::debug!(key, token = %token, "lease reached its ttl"),
            LostCause::MaxHold => {
                self.warn_max_hold();
                telemetry.lost(key, cause);
            }
            LostCause::TokenGone => {
                tracing::warn!(key, token = %token, "lock lost: the token is gone from Redis");
                telemetry.lost(key, cause);
            }
            // Its WARN, naming who released it, went out already (`taken_away.rs`).
            LostCause::ForceReleased => telemetry.lost(key, cause),
            _ => {
                tracing::warn!(key, token = %token, %cause, "lock lost");
                telemetry.lost(key, cause);
            }
        }
        self.lost.set(cause);
    }
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

/// The places, one keep-alive call per key.
pub(super) fn group_places<'a>(places: impl Iterator<Item = &'a QueuePlace>) -> Vec<KeepAlive> {
    let mut by_key: HashMap<&str, KeepAlive> = HashMap::new();
    for place in places {
        by_key
            .entry(place.names.lock())
            .or_insert_with(|| KeepAlive {
                names: place.names.clone(),
                tokens: Vec::new(),
            })
            .tokens
            .push(place.token.clone());
    }
    by_key.into_values().collect()
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

/// Keeps queue places alive: one script call per key, all in flight at once on the
/// multiplexed connection. A failure is only logged: the next keep-alive comes a third of
/// a queue lease later, and a place that lapses costs its waiter its turn, never safety.
pub(super) async fn keep_places(connection: Connection, places: Vec<KeepAlive>) {
    join_all(places.iter().map(|place| {
        let mut connection = connection.clone();
        async move {
            let names = &place.names;
            let call = keepalive_call(names, place.tokens.iter().map(|token| &**token));
            if let Err(err) = invoke::<i64>(&call, &mut connection).await {
                tracing::debug!(key = %place.names.lock(), error = %err, "keeping queue places alive failed");
            }
        }
    }))
    .await;
}
