//! Distributed deadlock detection, as PostgreSQL's: a wait-for graph looked at only after
//! a delay, and one victim.
//!
//! Only a task that holds locks and waits for another can close a cycle, so only its wait
//! is watched ([`Watcher`]); a task that holds nothing pays one look at its task-local
//! holds. Once the wait has gone on for the client's delay
//! ([`Config::deadlock_detection`](crate::Config::deadlock_detection)), the task records,
//! beside each key it holds, what it waits for ([`chain::Record`]: the key, when the wait
//! began, an id of the wait), and follows the chain: the key it waits for → the token
//! that holds it → the key that holder's task waits for → ... ([`chain::walk`], one
//! command per step, in the step's key's slot; under Redlock, on every master, what a
//! majority of them says). When the chain comes back to a token this
//! task holds, the cycle is closed. Every task of the cycle finds the same cycle, and the
//! same victim by one rule: the wait that began last (its id breaks a tie). The victim
//! fails with [`LockError::Deadlock`], which names the cycle; its body ends and lets go of
//! what it holds, and the others go on. A cycle is followed twice before the victim gives
//! way, so a step read while another task was changing does not make one.

pub(crate) mod chain;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::LockClient;
use crate::context;
use crate::error::LockError;
use crate::lease::{Token, millis};
use crate::scripts::KeyNames;
use chain::{Cycle, Record, Records};

/// At most this many looks per wait (one per delay; the wait's own end comes first).
const MAX_LOOKS: u32 = 100_000;

/// What a holding task's wait is watched with: the locks it holds and the delay.
pub(crate) struct Watcher {
    held: Vec<(Arc<KeyNames>, Token)>,
    delay: Duration,
    /// How long the wait may last (its records live that long).
    wait: Duration,
}

impl Watcher {
    /// The watcher of the current task's next wait through `client`, of at most `wait`:
    /// `None` when the task holds no lock through it (its wait cannot close a cycle), or
    /// detection is off. Asked before the wait's future is made, so that a wait that is not
    /// watched is not moved into another future.
    pub(crate) fn for_task(client: &LockClient, wait: Duration) -> Option<Watcher> {
        let delay = client.deadlock_delay();
        if delay.is_zero() {
            return None;
        }
        let held = context::held_keys(client.id());
        (!held.is_empty()).then_some(Watcher { held, delay, wait })
    }

    /// `wait` (the task's wait for the lock `names`), watched: its own outcome, or
    /// [`LockError::Deadlock`] when this wait closes a cycle and is its victim.
    pub(crate) async fn watch<T>(
        self,
        client: &LockClient,
        names: &KeyNames,
        wait: impl Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        tokio::pin!(wait);
        tokio::select! {
            biased;
            taken = &mut wait => taken,
            deadlock = watch(client, names, self.held, (self.delay, self.wait)) => Err(deadlock),
        }
    }
}

/// Waits out the delay (a wait that ends sooner costs nothing more), then watches the
/// wait: resolves only with the deadlock this wait gives way in.
async fn watch(
    client: &LockClient,
    names: &KeyNames,
    held: Vec<(Arc<KeyNames>, Token)>,
    (delay, wait): (Duration, Duration),
) -> LockError {
    tokio::time::sleep(delay).await;
    let lives = chain::lives(delay, wait.saturating_sub(delay));
    Watch::new(client, names, held, delay)
        .run(delay, lives)
        .await
}

/// One holding task's watched wait.
struct Watch {
    client: LockClient,
    /// What it holds: each key and the token there.
    held: Vec<(Arc<KeyNames>, Token)>,
    /// Its record beside each held key.
    record: Record,
    /// The names of the key it waits for (the client's prefix included).
    names: KeyNames,
}

impl Watch {
    /// The watch of a wait for `names` that began `waited` ago.
    fn new(
        client: &LockClient,
        names: &KeyNames,
        held: Vec<(Arc<KeyNames>, Token)>,
        waited: Duration,
    ) -> Self {
        let began = SystemTime::now()
            .checked_sub(waited)
            .and_then(|began| began.duration_since(UNIX_EPOCH).ok())
            .map_or(0, millis);
        Watch {
            client: client.clone(),
            held,
            names: names.clone(),
            record: Record {
                waits_for: names.lock().to_owned(),
                began,
                id: fastrand::u64(..),
            },
        }
    }

    /// Records the wait, to live `lives` (as long as the wait can last), then follows the
    /// chain once per delay; resolves only with the deadlock this wait gives way in (its
    /// records are removed when it is dropped).
    ///
    /// Written once: a walk's first step also reads whether they are still there, and they
    /// are written again only when a node lost them (a restart without persistence, a
    /// failover) or they near the end of their `lives` (a wait longer than an hour).
    async fn run(&self, delay: Duration, lives: Duration) -> LockError {
        let records =
            Records::write(&self.client, &self.names, &self.held, &self.record, lives).await;
        let mut written = tokio::time::Instant::now();
        for _ in 0..MAX_LOOKS {
            let (found, records_kept) = self.look(records.mark()).await;
            if let Some(err) = found {
                return err;
            }
            if !records_kept || written.elapsed() + delay * 2 >= lives {
                records.refresh().await;
                written = tokio::time::Instant::now();
            }
            tokio::time::sleep(delay).await;
        }
        std::future::pending().await
    }

    /// One look along the chain: the error when this wait closes a cycle and is its
    /// victim, and whether its records were still where the walk's first step read
    /// (`mark`).
    async fn look(&self, mark: (&str, &str)) -> (Option<LockError>, bool) {
        let tokens: Vec<&str> = self.held.iter().map(|(_, token)| &**token).collect();
        let walked = chain::walk(&self.client, self.names.lock(), &tokens, mark).await;
        let Some(cycle) = walked.cycle else {
            return (None, walked.records_kept);
        };
        if !cycle.victim_is(&self.record) {
            tracing::debug!(key = %self.names.lock(), cycle = %cycle, "deadlock found; another wait of the cycle gives way");
            return (None, walked.records_kept);
        }
        // Followed again: a step read while its task was changing makes no cycle twice.
        let again = chain::walk(&self.client, self.names.lock(), &tokens, mark).await;
        match again.cycle {
            Some(again) if again.same_as(&cycle) => (Some(self.give_way(&cycle)), true),
            _ => (None, walked.records_kept),
        }
    }

    /// The victim's error, reported.
    fn give_way(&self, cycle: &Cycle) -> LockError {
        let cycle = cycle.to_string();
        tracing::warn!(key = %self.names.lock(), cycle = %cycle, "deadlock detected: this wait gives way");
        self.client.telemetry().deadlock(self.names.lock());
        LockError::Deadlock {
            key: self.names.lock().to_owned(),
            cycle,
        }
    }
}
