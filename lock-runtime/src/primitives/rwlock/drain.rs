//! A writer's wait for the readers to leave: the one wait loop ([`crate::queue::wait`])
//! over a look at the readers, which also renews the writer's hold of the lock key.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::LockError;
use crate::lease::jitter;
use crate::options::LockOptions;
use crate::primitives::guard::LockGuard;
use crate::queue::wait::{self, Backoff, Step, Waiting, ride_out};
use crate::queue::wait_context::WaitContext;
use crate::scripts::ShareNames;
use crate::scripts::write_ready_call;
use crate::scripts::{KeyNames, invoke};
use crate::topology::reach::Reach;
use crate::wakeups::WaitTicket;

/// What the last reader's release adds to the waiting writer's token in its message (the
/// scripts spell it out too).
const DRAINED: &str = "/drained";

/// A writer that holds the lock key, waiting for the readers to leave.
pub(super) struct Drain<'a> {
    pub(super) options: &'a LockOptions,
    pub(super) client: &'a LockClient,
    pub(super) names: &'a KeyNames,
    pub(super) guard: &'a mut LockGuard,
    pub(super) shares: ShareNames,
    /// The writer's lease on the lock key while it waits, renewed by each look.
    pub(super) waiting_lease: Duration,
    pub(super) ticket: Option<WaitTicket>,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    pub(super) backoff: Backoff,
}

impl Waiting for Drain<'_> {
    /// Whether the writer holds the key, the readers gone (false: it lost the key).
    type Taken = bool;

    async fn attempt(&mut self) -> Result<Step<bool>, LockError> {
        let (names, options) = (self.names, self.options);
        let call = write_ready_call(
            (names, &self.shares),
            self.guard.token(),
            self.waiting_lease,
            options.ttl,
        );
        let sent = Instant::now();
        let client = self.client;
        let ask = |mut connection| {
            let call = &call;
            async move {
                invoke::<(i64, u64)>(call, &mut connection)
                    .await
                    .map_err(|err| LockError::backend(names.lock(), err))
            }
        };
        let reply = (client.reach())
            .answers(names.lock(), ask)
            .await
            .map(|(answers, quorum)| readers_left(&answers, quorum));
        let (ready, wait_ms): (i64, u64) = match reply {
            Ok(reply) => reply,
            Err(err) => {
                ride_out(
                    &WaitContext::of(self.client),
                    names.lock(),
                    err,
                    self.deadline,
                    &mut self.backoff,
                )
                .await?;
                return Ok(Step::Again);
            }
        };
        Ok(match ready {
            1 => Step::Done(self.guard.redate(options.ttl, options.watchdog, sent)),
            -1 => Step::Done(false),
            _ if !self.guard.redate(self.waiting_lease, false, sent) => Step::Done(false),
            // At the latest when the waiting lease needs renewing, or when the soonest
            // share would lapse (its reader may have died).
            _ => Step::Park(Duration::from_millis(wait_ms).min(self.waiting_lease / 3)),
        })
    }

    fn bounds(&self) -> (&str, bool, Instant, Instant) {
        let once = self.options.wait.is_zero();
        (self.names.lock(), once, self.started, self.deadline)
    }

    fn ticket(&self) -> Option<&WaitTicket> {
        self.ticket.as_ref()
    }

    fn telemetry(&self) -> &crate::telemetry::Telemetry {
        self.client.telemetry()
    }

    fn looked_up(&self) -> Option<(&Arc<Reach>, &KeyNames)> {
        Some((self.client.reach(), self.names))
    }

    async fn subscribe(&mut self) -> bool {
        // The last reader's release names our token, marked, on the key's channel: the
        // process's waiter in the key's queue may still be registered under the bare
        // token (its place became the lock), and a message for the bare token would wake
        // it instead of us.
        let waiter = format!("{}{DRAINED}", self.guard.token());
        let channel = (self.names.lock(), self.names.channel(), waiter.as_str());
        wait::subscribe(
            self.client.wakeups(),
            channel,
            &mut self.ticket,
            self.deadline,
        )
        .await
    }

    async fn park(&mut self, retry_in: Duration) {
        let park = retry_in
            .saturating_add(jitter())
            .min(self.deadline.saturating_duration_since(Instant::now()));
        wait::park_on(
            &WaitContext::of(self.client),
            self.names.lock(),
            self.ticket.as_ref(),
            park,
        )
        .await;
    }
}

/// What the nodes' answers to write_ready.lua (`{1, 0}` ready, `{0, ms}` readers left,
/// `{-1, 0}` the key not ours) come to where `quorum` of them must agree: ready when a
/// majority is; the key lost when no majority can still hold it; else the readers' soonest
/// end among the nodes that wait.
fn readers_left(answers: &[Option<(i64, u64)>], quorum: usize) -> (i64, u64) {
    let count = |ready: i64| {
        answers
            .iter()
            .filter(|answer| matches!(answer, Some((reply, _)) if *reply == ready))
            .count()
    };
    if count(1) >= quorum {
        return (1, 0);
    }
    let holding = count(1) + count(0);
    if holding < quorum {
        return (-1, 0);
    }
    let soonest = answers
        .iter()
        .filter_map(|answer| match answer {
            Some((0, ms)) => Some(*ms),
            _ => None,
        })
        .min()
        .unwrap_or(0);
    (0, soonest)
}
