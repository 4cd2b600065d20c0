//! Renewals: one pipeline of renewals per node for the leases due together, and what
//! the replies mean for each lease (renewed, gone, or to be tried again soon).

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{FromRedisValue, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::state::WatchdogShared;
use crate::connection::Connection;
#[cfg(feature = "cluster")]
use crate::connection::cluster_nodes::key_slot;
use crate::error::LostCause;
use crate::lease::{Token, validity};
use crate::renewal::liveness::Liveness;
use crate::replicas::Answer;
use crate::replicas::Replicas;
use crate::scripts::KeyNames;
use crate::scripts::{RENEW_MANY, RenewedLease, renew_many_command};

/// A renewal that failed with an error is retried after this share of the ttl.
const RETRY_DIVISOR: u32 = 10;

/// Where renewals go: every node (one in single mode), and how many must confirm.
#[derive(Clone)]
pub(super) struct Nodes {
    pub(super) connections: Vec<Connection>,
    pub(super) quorum: usize,
    /// Per-node time limit on a renewal pipeline (Redlock mode).
    pub(super) timeout: Option<Duration>,
    /// How many replicas must confirm a renewal (its pipeline ends with their `WAIT`).
    pub(super) replicas: Option<Replicas>,
    /// The client's liveness key, named by renewals of contended keys (see
    /// [`crate::renewal::liveness`]); `None` where queue places are kept per key.
    pub(super) alive: Option<Arc<Liveness>>,
}

/// A lease's renewal, as the scheduler took it out of the schedule to send.
#[derive(Clone)]
pub(super) struct Renewal {
    pub(super) id: u64,
    pub(super) names: Arc<KeyNames>,
    pub(super) token: Token,
    pub(super) ttl: Duration,
    /// How long before the renewal was sent its holder last reported progress (`None`:
    /// not during this hold), recorded with it in Redis.
    pub(super) progress_ago: Option<Duration>,
    /// Waiters queue behind the lease (its take after a wait recorded when the hold
    /// began): its renewals keep the hold record.
    pub(super) contended: bool,
}

/// What the nodes said of one lease's renewal.
pub(super) enum Verdict {
    /// Renewed; `noted`: waiters are queued, and the renewal noted this holder for them.
    Renewed {
        noted: bool,
    },
    Gone,
    Failed,
}

/// Sends one pipeline of renewals to every node and applies the replies: a lease is renewed
/// when a quorum confirmed it, lost when so many found the token gone that no quorum is
/// left, and retried soon otherwise.
pub(super) async fn renew_batch(
    shared: Weak<WatchdogShared>,
    wake: Arc<Notify>,
    nodes: Nodes,
    batch: Vec<Renewal>,
) {
    let sent = Instant::now();
    let per_node = nodes.renew(&batch).await;
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let now = Instant::now();
    let mut state = shared.state();
    let telemetry = state.telemetry.clone();
    let mut gone = Vec::new();
    let mut renewed = false;
    for (index, renewal) in batch.iter().enumerate() {
        let Some(lease) = state.leases.get_mut(&renewal.id) else {
            continue; // released while the renewal was in flight
        };
        lease.in_flight = false;
        match nodes.verdict(&per_node, index) {
            Verdict::Renewed { noted } => {
                renewed = true;
                lease.set_valid_until(lease.valid_until.max(validity(sent, renewal.ttl)));
                lease.next_renewal = sent + renewal.ttl / 3;
                tracing::debug!(key = %renewal.names.lock(), "lease renewed");
                if noted {
                    // Waiters are queued behind this holder: its liveness key must live.
                    state.note_contended(renewal.id);
                }
            }
            Verdict::Gone => {
                gone.extend(state.take_lease(renewal.id));
                continue;
            }
            Verdict::Failed => {
                tracing::debug!(key = %renewal.names.lock(), "lease renewal failed; trying again soon");
                telemetry.renewal_failed(renewal.names.lock());
                let retry = (renewal.ttl / RETRY_DIVISOR).max(Duration::from_millis(10));
                lease.next_renewal = now + retry;
            }
        }
        state.reschedule(renewal.id);
    }
    drop(state);
    if renewed {
        shared.note_renewal();
    }
    for lease in gone {
        lease.end(LostCause::TokenGone, &telemetry);
    }
    wake.notify_one();
}

impl Nodes {
    /// Sends the batch to every node at once, each within the per-node time limit; per
    /// node, its replies in the batch's order (`Err(())`: it failed or did not answer).
    async fn renew(&self, batch: &[Renewal]) -> Vec<Result<Vec<RenewalReply>, ()>> {
        let renewals = Renewals {
            batch,
            route: None,
            replicas: self.replicas.as_ref(),
            alive: self.alive.as_deref(),
        };
        join_all(self.connections.iter().map(|connection| {
            let mut connection = connection.clone();
            async move {
                match self.timeout {
                    Some(limit) => tokio::time::timeout(limit, renewals.renew_on(&mut connection))
                        .await
                        .unwrap_or(Err(())),
                    None => renewals.renew_on(&mut connection).await,
                }
            }
        }))
        .await
    }

    /// What the nodes' replies say of the batch's `index`th lease.
    fn verdict(&self, per_node: &[Result<Vec<RenewalReply>, ()>], index: usize) -> Verdict {
        let (mut renewed, mut gone, mut noted) = (0, 0, false);
        for replies in per_node.iter().flatten() {
            match replies.get(index) {
                Some(Ok((true, holder_noted))) => {
                    renewed += 1;
                    noted |= *holder_noted;
                }
                Some(Ok((false, _))) => gone += 1,
                _ => {}
            }
        }
        if renewed >= self.quorum {
            Verdict::Renewed { noted }
        } else if gone > self.connections.len() - self.quorum {
            Verdict::Gone
        } else {
            Verdict::Failed
        }
    }
}

/// Leases renewed together on one node, with the replicas that must confirm their renewals
/// and the liveness key that renewals of contended keys note.
#[derive(Clone, Copy)]
struct Renewals<'a> {
    batch: &'a [Renewal],
    /// In a cluster, a slot of the master the batch's keys are on (see
    /// [`Connection::by_master`]).
    route: Option<u16>,
    replicas: Option<&'a Replicas>,
    alive: Option<&'a Liveness>,
}

impl Renewals<'_> {
    /// Renews a batch on one node: one pipeline, or in a cluster one pipeline per master
    /// (for the leases whose keys it serves), all in flight at once.
    async fn renew_on(self, connection: &mut Connection) -> Result<Vec<RenewalReply>, ()> {
        let keys = self.batch.iter().map(|renewal| renewal.names.lock());
        let Some(groups) = connection.by_master(keys) else {
            return self.send(connection).await;
        };
        let replies = join_all(groups.iter().map(|(route, members)| {
            let connection = connection.clone();
            async move { self.send_group(connection, *route, members).await }
        }))
        .await;
        let mut results = vec![Err(Unrenewed::Failed); self.batch.len()];
        for ((_, members), replies) in groups.iter().zip(replies) {
            for (index, reply) in members.iter().zip(replies) {
                results[*index] = reply;
            }
        }
        Ok(results)
    }

    /// Renews the leases `members` (indices in the batch) in one pipeline sent by `route`
    /// (a slot of the master that serves them). A renewal that finds its key's slot moved
    /// (a redirection: this client's slot map is stale) is sent again alone, by its key.
    async fn send_group(
        self,
        mut connection: Connection,
        route: Option<u16>,
        members: &[usize],
    ) -> Vec<RenewalReply> {
        let batch: Vec<Renewal> = members
            .iter()
            .map(|index| self.batch[*index].clone())
            .collect();
        let group = Renewals {
            batch: &batch,
            route,
            ..self
        };
        let mut replies = match group.send(&mut connection).await {
            Ok(replies) => replies,
            Err(()) => return vec![Err(Unrenewed::Failed); batch.len()],
        };
        // The moved ones go again together, each alone by its key (a reshard moves many
        // slots at once: one after another, they would add a round trip each).
        let moved: Vec<usize> = (0..replies.len())
            .filter(|index| replies[*index] == Err(Unrenewed::Moved))
            .collect();
        let again = join_all(moved.iter().map(|index| {
            let alone = Renewals {
                batch: std::slice::from_ref(&batch[*index]),
                route: None,
                ..self
            };
            let mut connection = connection.clone();
            async move { alone.send(&mut connection).await.ok() }
        }))
        .await;
        for (index, again) in moved.into_iter().zip(again) {
            replies[index] = again
                .and_then(|mut one| one.pop())
                .unwrap_or(Err(Unrenewed::Failed));
        }
        replies
    }

    /// Renews every lease of the batch in one pipeline; reloads the script once on NOSCRIPT.
    /// Returns, per lease, whether its token was still there; `Err(())` where the command
    /// failed (the failure is logged here). With `replicas`, the pipeline ends with their
    /// `WAIT`, and a renewal too few replicas confirmed counts as failed.
    async fn send(self, connection: &mut Connection) -> Result<Vec<RenewalReply>, ()> {
        let batch = self.batch;
        tracing::debug!(keys = %Keys(batch), leases = batch.len(), "lease renewals sent");
        let (pipeline, sizes) = self.pipeline(&|_| true);
        let sent = connection.query_pipeline(pipeline, self.route);
        let first = match sent.await {
            Ok(replies) => replies,
            Err(err) if self.route.is_some() && moved(&err) => {
                // redis-rs fails a whole pipeline on a redirection: each renewal goes again
                // alone, by its key.
                tracing::debug!(keys = %Keys(batch), leases = batch.len(), error = %err, "lease renewals redirected");
                return Ok(vec![Err(Unrenewed::Moved); batch.len()]);
            }
            Err(err) => {
                tracing::warn!(keys = %Keys(batch), leases = batch.len(), error = %err, "lease renewal failed");
                return Err(());
            }
        };
        let (first, first_confirmed) = self.read_replies(first, &sizes);
        let missing: Vec<bool> = first.iter().map(is_noscript).collect();
        let mut results: Vec<RenewalReply> = first
            .iter()
            .map(|reply| renewal_result(reply, first_confirmed))
            .collect();
        if missing.contains(&true) {
            self.resend_missing(connection, &missing, &mut results)
                .await;
        } else {
            log_errors(&first, batch);
        }
        Ok(results)
    }

    /// A renewal pipeline's replies (one per call, renewing `sizes` leases each) as the
    /// scripts' integers, one per lease, and whether enough replicas confirmed them: the
    /// answer of the rule's `WAIT` or `WAITAOF`, taken off the end (true without a rule; a
    /// shortfall is logged, naming the batch's keys). A call's error stands for each of its
    /// leases.
    fn read_replies(
        &self,
        mut replies: Vec<redis::RedisResult<Value>>,
        sizes: &[usize],
    ) -> (Vec<redis::RedisResult<i64>>, bool) {
        let answer = (self.replicas.is_some() && replies.len() > sizes.len())
            .then(|| replies.pop())
            .flatten()
            .map(|reply| reply.and_then(|value| Ok(Answer::from_redis_value(value)?)));
        let renewals = sizes.iter().sum();
        let mut per_lease = Vec::with_capacity(renewals);
        let mut replies = replies.into_iter();
        for &size in sizes {
            let reply = replies.next().unwrap_or_else(|| Err(malformed(size)));
            match reply.and_then(|value| Ok(Vec::<i64>::from_redis_value(value)?)) {
                Ok(values) if values.len() == size => per_lease.extend(values.into_iter().map(Ok)),
                Ok(_) => per_lease.extend((0..size).map(|_| Err(malformed(size)))),
                Err(err) => per_lease.extend((0..size).map(|_| Err(err.clone()))),
            }
        }
        let confirmed = match (self.replicas, answer) {
            (None, _) => true,
            (Some(replicas), Some(Ok(answer))) if replicas.confirmed(answer) => true,
            (Some(_), answer) => {
                tracing::warn!(
                    keys = %Keys(self.batch),
                    leases = renewals,
                    ?answer,
                    "lease renewals not confirmed by enough replicas; they do not count"
                );
                false
            }
        };
        (per_lease, confirmed)
    }

    /// The pipeline that renews the leases `only` picks (by index), up to
    /// [`LEASES_PER_CALL`] in one call (in a cluster, the keys of one slot), then waits for
    /// the replicas; with how many leases each call renews.
    fn pipeline(&self, only: &dyn Fn(usize) -> bool) -> (redis::Pipeline, Vec<usize>) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let picked: Vec<&Renewal> = (self.batch.iter().enumerate())
            .filter_map(|(index, renewal)| only(index).then_some(renewal))
            .collect();
        let mut sizes = Vec::new();
        for slot in picked.chunk_by(|a, b| self.same_slot(a, b)) {
            for call in slot.chunks(LEASES_PER_CALL) {
                pipe.add_command(self.renew_call(call));
                sizes.push(call.len());
            }
        }
        if let Some(replicas) = self.replicas {
            pipe.add_command(replicas.wait_command());
        }
        (pipe, sizes)
    }

    /// One call of `RENEW_MANY` for `leases`. With the client's liveness key, each names its
    /// queue keys too: renewing notes this holder for the key's waiters, while there are
    /// some. The renewal of a lock whose holder reported progress names its hold record
    /// too, where the renewal and that progress are recorded for `inspect` (one `SET` more
    /// in such a renewal; none for a holder that never reports, none per acquire or
    /// release).
    fn renew_call(&self, leases: &[&Renewal]) -> redis::Cmd {
        let alive =
            (self.alive).and_then(|liveness| liveness.key_for(leases.first()?.names.lock()));
        let renewed: Vec<RenewedLease<'_>> = leases
            .iter()
            .map(|lease| {
                // A holder that reports progress, or that waiters queue behind (one that
                // took the key after a wait recorded then when the hold began), has its
                // renewals recorded (a permit never).
                let record =
                    (lease.progress_ago.is_some() || lease.contended) && !is_permit(&lease.token);
                RenewedLease {
                    names: &lease.names,
                    token: &lease.token,
                    ttl: lease.ttl,
                    hold: record.then(|| lease.names.hold()).flatten(),
                    progress_ago: lease.progress_ago,
                }
            })
            .collect();
        renew_many_command(&renewed, alive.as_deref())
    }

    /// Whether two leases' keys may share a call: always on one server; in a cluster, when
    /// they are in one slot.
    fn same_slot(&self, a: &Renewal, b: &Renewal) -> bool {
        #[cfg(feature = "cluster")]
        if self.route.is_some() {
            let slot = |renewal: &Renewal| key_slot(renewal.names.lock().as_bytes());
            return slot(a) == slot(b);
        }
        let _ = (a, b);
        true
    }

    /// The server lost its script cache (restart, SCRIPT FLUSH): loads the script, resends
    /// the renewals that found it `missing` and puts their replies in `results`.
    async fn resend_missing(
        &self,
        connection: &mut Connection,
        missing: &[bool],
        results: &mut [RenewalReply],
    ) {
        let batch = self.batch;
        if let Err(err) = RENEW_MANY
            .script()
            .prepare_invoke()
            .load_async(connection)
            .await
        {
            tracing::warn!(keys = %Keys(batch), leases = batch.len(), error = %err, "reloading the renew script failed");
            return;
        }
        let (pipeline, sizes) = self.pipeline(&|index| missing[index]);
        let retry = match connection.query_pipeline(pipeline, self.route).await {
            Ok(replies) => replies,
            Err(err) => {
                tracing::warn!(keys = %Keys(batch), leases = batch.len(), error = %err, "lease renewal failed after reloading the script");
                return;
            }
        };
        let resent = missing
            .iter()
            .enumerate()
            .filter(|(_, noscript)| **noscript);
        let (retry, retry_confirmed) = self.read_replies(retry, &sizes);
        for ((index, _), reply) in resent.zip(retry) {
            results[index] = renewal_result(&reply, retry_confirmed);
        }
    }
}

/// Whether `token` is a semaphore permit's (`semaphore.rs`): its renewal renews the permit,
/// and records no hold (inspect reads a permit's lease from the semaphore's set).
fn is_permit(token: &str) -> bool {
    token.starts_with("permit:")
}

/// How many leases one renewal call takes at most: the server runs a call as one step, so
/// that a batch of 10,000 leases goes out as calls of this many, each a fraction of a
/// millisecond of the server's time.
const LEASES_PER_CALL: usize = 200;

/// The error standing for a renewal call's reply that is not one integer per lease.
fn malformed(leases: usize) -> redis::RedisError {
    let reply = format!("a renewal call of {leases} leases answered with another shape");
    redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "bad reply", reply))
}

/// How many keys an event about a whole batch of renewals lists (its `leases` field says
/// how many there were).
pub(super) const LISTED_KEYS: usize = 8;

/// The keys of a batch of renewals, for an event: the first [`LISTED_KEYS`], then how many
/// more, so that a line stays short with 10,000 leases held.
pub(super) struct Keys<'a>(pub(super) &'a [Renewal]);

impl std::fmt::Display for Keys<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, renewal) in self.0.iter().take(LISTED_KEYS).enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            f.write_str(renewal.names.lock())?;
        }
        match self.0.len().saturating_sub(LISTED_KEYS) {
            0 => Ok(()),
            more => write!(f, " and {more} more"),
        }
    }
}

/// One node's answer to one renewal: `(renewed, noted)`, `noted` when renew.lua found
/// waiters queued and noted the holder for them (reply 2); `(false, _)` the token was gone.
pub(super) type RenewalReply = Result<(bool, bool), Unrenewed>;

/// A renewal that did not come to an answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Unrenewed {
    Failed,
    /// Sent to a cluster master that does not serve the key's slot (any more).
    Moved,
}

/// What one renewal reply means: renewed (counted only when the replicas `confirmed` it),
/// the token gone, or failed.
pub(super) fn renewal_result(reply: &redis::RedisResult<i64>, confirmed: bool) -> RenewalReply {
    match reply {
        Ok(renewed @ (1 | 2)) if confirmed => Ok((true, *renewed == 2)),
        Ok(1 | 2) => Err(Unrenewed::Failed),
        Ok(_) => Ok((false, false)),
        Err(err) if moved(err) => Err(Unrenewed::Moved),
        Err(_) => Err(Unrenewed::Failed),
    }
}

/// Whether a renewal's key is on another cluster master (a redirection), or in the middle
/// of moving there (`TRYAGAIN`): sent again by its key, the cluster connection follows it.
fn moved(err: &redis::RedisError) -> bool {
    err.redirect_node().is_some()
        || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
}

pub(super) fn is_noscript(reply: &redis::RedisResult<i64>) -> bool {
    matches!(reply, Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}

pub(super) fn log_errors(replies: &[redis::RedisResult<i64>], batch: &[Renewal]) {
    for (reply, renewal) in replies.iter().zip(batch) {
        // A redirection is no failure: the renewal is sent again by its key.
        if let Err(err) = reply
            && !moved(err)
        {
            tracing::warn!(key = %renewal.names.lock(), error = %err, "lease renewal failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_names_its_first_keys_and_counts_the_rest() {
        let renewal = |key: &str| Renewal {
            id: 0,
            names: Arc::new(KeyNames::prefixed("", key).unwrap()),
            token: "t".into(),
            ttl: Duration::from_secs(3),
            progress_ago: None,
            contended: false,
        };
        assert_eq!(Keys(&[renewal("a")]).to_string(), "a");
        let many: Vec<Renewal> = (0..10).map(|i| renewal(&format!("k{i}"))).collect();
        assert_eq!(
            Keys(&many).to_string(),
            "k0, k1, k2, k3, k4, k5, k6, k7 and 2 more"
        );
    }
}
