//! A process's wait for a lock held on a majority of independent masters (Redlock), through
//! the one wait loop ([`wait::wait`]): each try is a round on every master
//! (`topology/redlock.rs`), the subscription is one per master, and a park lasts until
//! the first release message of any master, the holder's lease, or the wait's end. A
//! round lost to a split vote (waiters woken together took a master each), or read late by
//! a starved process, is followed by a random pause instead, which breaks the symmetry as
//! the reference algorithm does: there is no queue across independent masters.
//!
//! A semaphore's permit waits the same way over its numbered slots, each a Redlock mutex
//! announced on the semaphore's channel: a try takes the first slot a majority grants.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::lease::{Taken, Token, jitter};
use crate::options::LockOptions;
use crate::queue::wait::{self, Step, Waiting};
use crate::scripts::KeyNames;
use crate::topology::redlock::{
    MAX_PARK, Masters, Redlock, Round, acquire_round, give_back, give_back_lost, short_of_quorum,
    subscribe, take_won, won,
};
use crate::wakeups::WaitTicket;

/// Takes the lock `names` on a majority of the masters within the wait `window` (its
/// start and end), as the process's leading task (its other tasks wait in the local
/// queue). Returns the token and when its round was sent.
pub(crate) async fn acquire(
    masters: Masters<'_>,
    redlock: &Redlock,
    names: &KeyNames,
    options: &LockOptions,
    window: (Instant, Instant),
) -> Result<(Token, Taken), LockError> {
    let keys = (names, std::slice::from_ref(names));
    let (_, token, taken) = acquire_any(masters, redlock, keys, options, window).await?;
    Ok((token, taken))
}

/// Takes one of the locks `slots` on a majority of the masters within the wait `window`:
/// each try asks for them in turn, from `first` on, and ends with the first one won.
/// `home` names the wait (its errors' key, and the channel every slot's release is
/// announced on). Returns which slot was won, the token and when its round was sent.
pub(crate) async fn acquire_any(
    masters: Masters<'_>,
    redlock: &Redlock,
    (home, slots): (&KeyNames, &[KeyNames]),
    options: &LockOptions,
    window: (Instant, Instant),
) -> Result<(usize, Token, Taken), LockError> {
    let mut waiter = QuorumWait {
        masters,
        redlock,
        names: home,
        slots,
        options,
        window,
        tickets: Vec::new(),
        short_before: false,
        pause: Pause::Park,
    };
    let long_wait = waiter.masters.long_wait;
    wait::wait(&mut waiter, long_wait).await
}

/// How a waiter pauses after a lost round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// Until a release message of any master (or the park's bound).
    Park,
    /// A random pause, deaf to messages: after a split vote, or a round read late.
    Scatter,
}

/// One waiter's wait on the masters.
struct QuorumWait<'a> {
    masters: Masters<'a>,
    redlock: &'a Redlock,
    /// What the wait is for: its key in errors, the channel of its release messages.
    names: &'a KeyNames,
    /// The locks a try asks for, in turn (the one lock, or a semaphore's slots).
    slots: &'a [KeyNames],
    options: &'a LockOptions,
    /// When the wait started, and when it ends.
    window: (Instant, Instant),
    /// One release-message ticket per master, made after the first lost round.
    tickets: Vec<WaitTicket>,
    /// The last round was short of a majority of answers.
    short_before: bool,
    /// How the next pause goes.
    pause: Pause,
}

/// What one slot's round came to.
enum SlotRound {
    /// Won: the token and the lease.
    Won(Token, Taken),
    /// A round short of a majority of answers, the first in a row: the try starts again.
    Short,
    /// Lost, its grants given back.
    Lost(Round),
}

impl QuorumWait<'_> {
    /// The error that ends a try-once caller's wait after a lost try that a majority
    /// answered: `Busy` when another owner holds a slot (`held`), else `Timeout` (a split
    /// vote, a late round). (A round without a majority of answers failed with
    /// `NoQuorum`.)
    fn once_lost(&self, held: bool) -> LockError {
        let key = self.names.lock();
        if held {
            return LockError::Busy {
                key: key.to_owned(),
            };
        }
        LockError::timeout(key, self.window.0.elapsed())
    }

    /// One round on every master for the lock `slot`: won when a majority granted it in
    /// time; else its grants given back.
    async fn round(&mut self, slot: &KeyNames) -> Result<SlotRound, LockError> {
        let (redlock, options) = (self.redlock, self.options);
        let (started, deadline) = self.window;
        let nodes = self.masters.nodes;
        let (maker, site) = self.masters.tokens;
        let token = maker.token(options.ttl, site);
        let round = acquire_round(nodes, redlock, slot, &token, options).await?;
        // A round short of a majority of answers says little of the masters: a process
        // stalled past the node timeout (a busy machine, a starved thread) reads no reply,
        // and every master seems silent at once; a master starved for a moment misses the
        // node timeout while another is down. It is tried again at once (after giving back
        // what the silent masters may have granted); two in a row are a verdict.
        let short = round.answered.iter().all(|answered| !answered)
            || short_of_quorum(&round.failures, redlock);
        if short && !self.short_before && !options.wait.is_zero() && Instant::now() < deadline {
            self.short_before = true;
            give_back(nodes, redlock, slot, &token, &round.answered).await;
            return Ok(SlotRound::Short);
        }
        self.short_before = short;
        if won(&round, redlock, options.ttl)
            && let Some(taken) =
                take_won(&self.masters, redlock, slot, options, (&token, &round)).await?
        {
            tracing::debug!(
                key = %slot.lock(),
                granted = round.granted,
                waited_ms = started.elapsed().as_millis() as u64,
                "lock acquired on a quorum"
            );
            return Ok(SlotRound::Won(token, taken));
        }
        if let Some(err) = give_back_lost(nodes, redlock, slot, &token, &round).await {
            return Err(err);
        }
        Ok(SlotRound::Lost(round))
    }
}

impl Waiting for QuorumWait<'_> {
    type Taken = (usize, Token, Taken);

    /// One round on every master per slot, in turn from a random one: the first slot a
    /// majority granted in time; else every grant given back, and how long to pause
    /// before the next try.
    async fn attempt(&mut self) -> Result<Step<Self::Taken>, LockError> {
        self.masters.shutdown.check_open(self.names.lock())?;
        let slots = self.slots;
        let first = fastrand::usize(0..slots.len().max(1));
        let (mut held_for, mut scatter) = (None::<Duration>, false);
        for turn in 0..slots.len() {
            let index = (first + turn) % slots.len();
            match self.round(&slots[index]).await? {
                SlotRound::Won(token, taken) => return Ok(Step::Done((index, token, taken))),
                SlotRound::Short => return Ok(Step::Again),
                SlotRound::Lost(round) => {
                    scatter |= round.granted > 0 || round.late;
                    if let Some(held) = round.held_for {
                        held_for = Some(held_for.map_or(held, |least| least.min(held)));
                    }
                }
            }
        }
        if self.options.wait.is_zero() {
            return Err(self.once_lost(held_for.is_some()));
        }
        let left = self.window.1.saturating_duration_since(Instant::now());
        if scatter {
            self.pause = Pause::Scatter;
            return Ok(Step::Park(jitter().min(left)));
        }
        self.pause = Pause::Park;
        let park = (held_for.unwrap_or(MAX_PARK))
            .clamp(Duration::from_millis(1), MAX_PARK)
            .saturating_add(jitter())
            .min(left);
        Ok(Step::Park(park))
    }

    fn bounds(&self) -> (&str, bool, Instant, Instant) {
        let (started, deadline) = self.window;
        (
            self.names.lock(),
            self.options.wait.is_zero(),
            started,
            deadline,
        )
    }

    fn ticket(&self) -> Option<&WaitTicket> {
        self.tickets.first()
    }

    fn telemetry(&self) -> &crate::telemetry::Telemetry {
        self.masters.telemetry
    }

    /// Registers on every master's release channel, once (a master whose subscription
    /// failed is not asked again: the others' messages and the park's bound still wake
    /// us); true the first time, so that the next round follows at once.
    async fn subscribe(&mut self) -> bool {
        if !self.tickets.is_empty() {
            return false;
        }
        self.tickets = subscribe(self.redlock, self.names, self.window.1).await;
        true
    }

    /// The pause `retry_in` long at most: a random one deaf to messages after a split vote
    /// or a late round, else a park until the first release message of any master. A
    /// shutdown ends either (the next round's check fails).
    async fn park(&mut self, retry_in: Duration) {
        let interrupted = self.masters.interrupt.notified();
        tokio::pin!(interrupted);
        interrupted.as_mut().enable();
        if self.masters.shutdown.check_open(self.names.lock()).is_err() {
            return;
        }
        if self.pause == Pause::Scatter || self.tickets.is_empty() {
            tokio::select! {
                () = tokio::time::sleep(retry_in) => {}
                () = &mut interrupted => {}
            }
            return;
        }
        let woken = self
            .tickets
            .iter()
            .map(|ticket| Box::pin(ticket.wait(retry_in)));
        tokio::select! {
            _ = futures_util::future::select_all(woken) => {}
            () = &mut interrupted => {}
        }
    }
}
