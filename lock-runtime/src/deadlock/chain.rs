//! The wait-for chain in Redis: what a holding task's wait records beside each key it
//! holds, and the walk along the chain.
//!
//! A record lives in the hash `~lock/waits{KEY}` (in the key's slot), under the token
//! that holds `KEY`: `WAITED-FOR KEY`, a tab, when the wait began (ms since the epoch,
//! the waiter's clock), a tab, the wait's id (hexadecimal). A step of the walk reads a
//! key's holder and that hash in one pipeline on the key's node. Beside the key the task
//! waits for, the hash `~lock/waiters-hold{KEY}` says what it holds (a field
//! `<client id>.<wait id>.<n>` per held key, the key as its value), so that `inspect`
//! shows it under the waiter of that client. The records are written once; the walk's
//! first step reads whether the first of those fields is still there (a node that lost
//! them), and they are written again only then. When the wait ends they are removed, each
//! record only while it is still that wait's (`forget_wait.lua`): the next wait of the
//! same task writes the same field, and the removal, sent in the background, may come
//! after it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::connection::Connection;
use crate::error::LockError;
use crate::identity::Identity;
use crate::lease::{Token, millis};
use crate::scripts::{KeyNames, forget_wait_call, invoke};
use crate::topology::deployment::Majority;

/// At most this many steps along a chain (a longer one is not followed to its end).
const MAX_STEPS: usize = 32;

/// The longest a wait's records live unless written again.
const MAX_LIFE: Duration = Duration::from_secs(3600);

/// How long the records of a wait that may last `wait_left` more live: that long and two
/// delays more, at least three delays and at most [`MAX_LIFE`]. A process that dies
/// leaves them that long at most, inert once its tokens have left the keys (a walk reads
/// a record only under the token that holds the key).
pub(crate) fn lives(delay: Duration, wait_left: Duration) -> Duration {
    (wait_left + delay * 2).clamp(delay * 3, MAX_LIFE.max(delay * 3))
}

/// What a holding task's wait records: the key it waits for, when the wait began, and an
/// id that tells two waits begun in the same millisecond apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) waits_for: String,
    pub(crate) began: u64,
    pub(crate) id: u64,
}

impl Record {
    fn encode(&self) -> String {
        format!("{}\t{}\t{:x}", self.waits_for, self.began, self.id)
    }

    /// A record as the hash holds it.
    pub(crate) fn decode(text: &str) -> Option<Record> {
        let mut fields = text.rsplitn(3, '\t');
        let id = u64::from_str_radix(fields.next()?, 16).ok()?;
        let began = fields.next()?.parse().ok()?;
        let waits_for = fields.next()?.to_owned();
        Some(Record {
            waits_for,
            began,
            id,
        })
    }

    /// The victim's rule: the wait that began last, the higher id on a tie.
    fn order(&self) -> (u64, u64) {
        (self.began, self.id)
    }
}

/// A wait's records, written beside each key its task holds, and beside the key it waits
/// for (what it holds, for `inspect`); removed when dropped.
pub(crate) struct Records {
    client: LockClient,
    /// The record, as each `waits` hash holds it.
    value: String,
    /// Beside each held key: its `waits` hash, and the token there (the record's field).
    beside_held: Vec<(String, Token)>,
    /// Beside the key waited for: its `waiters-hold` hash, and a field per held key (the
    /// held key its value). The first field is the walk's mark ([`Records::mark`]).
    beside_waited: (String, Vec<(String, String)>),
    /// How long a write lives.
    lives: Duration,
}

impl Records {
    /// Writes `record` beside each of `held` (its key's names and the token there), and
    /// the held keys beside `waited` (the key the wait is for) under the client's id, to
    /// live `lives` (see [`lives`]). Written once: a walk checks the mark and
    /// [`refresh`](Self::refresh) writes them again when a node lost them. A failed write
    /// is skipped: the next walk then finds the mark missing.
    pub(crate) async fn write(
        client: &LockClient,
        waited: &KeyNames,
        held: &[(Arc<KeyNames>, Token)],
        record: &Record,
        lives: Duration,
    ) -> Records {
        let beside_held = held
            .iter()
            .map(|(names, token)| (names.waits(), token.clone()))
            .collect();
        let client_id = client.parts().tokens().client_id();
        let holds = held.iter().enumerate().map(|(index, (names, _))| {
            let field = format!("{client_id}.{:x}.{index:04}", record.id);
            (field, names.lock().to_owned())
        });
        let records = Records {
            client: client.clone(),
            value: record.encode(),
            beside_held,
            beside_waited: (waited.waiters_hold(), holds.collect()),
            lives,
        };
        records.refresh().await;
        records
    }

    /// Where a walk checks that the records are still written: the hash beside the key
    /// waited for, and this wait's first field there.
    pub(crate) fn mark(&self) -> (&str, &str) {
        let (hash, fields) = &self.beside_waited;
        let field = fields.first().map_or("", |(field, _)| field.as_str());
        (hash, field)
    }

    /// Writes the records (again), each to live its `lives` from now (a hash another
    /// wait keeps longer keeps its expiry): one pipeline per hash, each on its key's node
    /// (on every master under Redlock). What the wait holds, beside the key waited for, goes
    /// last and only when every record was written: the walk's mark is among it, so a mark
    /// it finds says that the records were written (a failed write is tried again at the
    /// next look).
    pub(crate) async fn refresh(&self) {
        let beside_held = self.beside_held.iter().map(|(hash, token)| {
            let fields = vec![(token.to_string(), self.value.clone())];
            (hash, fields)
        });
        for (name, fields) in beside_held {
            if !self.write_hash(name, &fields).await {
                return;
            }
        }
        let (hash, holds) = &self.beside_waited;
        self.write_hash(hash, holds).await;
    }

    /// Writes `fields` into the hash `name`, to live `lives` from now: whether enough
    /// nodes took it (the one node, or a majority of Redlock masters).
    async fn write_hash(&self, name: &str, fields: &[(String, String)]) -> bool {
        let lives = i64::try_from(millis(self.lives)).unwrap_or(i64::MAX);
        let mut pipe = redis::pipe();
        pipe.hset_multiple(name, fields).ignore();
        pipe.cmd("PEXPIRE").arg(name).arg(lives).arg("NX").ignore();
        pipe.cmd("PEXPIRE").arg(name).arg(lives).arg("GT").ignore();
        let pipe = &pipe;
        send(&self.client, name, |mut connection| async move {
            pipe.query_async::<()>(&mut connection).await
        })
        .await
    }
}

impl Drop for Records {
    /// Removes the records, in the background on the client's runtime: each record only
    /// while it is still this wait's (forget_wait.lua), as a later wait of the same task
    /// writes the same field and this removal may reach the server after that write.
    fn drop(&mut self) {
        let beside_held = std::mem::take(&mut self.beside_held);
        let (hash, holds) = std::mem::take(&mut self.beside_waited);
        let (client, value) = (self.client.clone(), std::mem::take(&mut self.value));
        self.client.parts().runtime().spawn(async move {
            for (name, token) in &beside_held {
                let call = &forget_wait_call(name, token, &value);
                send(&client, name, |mut connection| async move {
                    invoke::<()>(call, &mut connection).await
                })
                .await;
            }
            let mut pipe = redis::pipe();
            let remove = pipe.cmd("HDEL").arg(&hash);
            for (field, _) in &holds {
                remove.arg(field);
            }
            let pipe = &*pipe.ignore();
            send(&client, &hash, |mut connection| async move {
                pipe.query_async::<()>(&mut connection).await
            })
            .await;
        });
    }
}

/// Sends what `write` sends (writes to the hash `name`) to the node of `name`'s slot, or
/// to every master under Redlock: whether it reached that node (or a majority of the
/// masters). A failure is logged and left (the records expire).
async fn send<F, Fut>(client: &LockClient, name: &str, write: F) -> bool
where
    F: Fn(Connection) -> Fut,
    Fut: Future<Output = redis::RedisResult<()>>,
{
    let write = &write;
    let ask = |connection: Connection| async move {
        let sent = write(connection).await;
        sent.map_err(|err| LockError::backend(name, err))
    };
    let sent = client.reach().answers(name, ask);
    match sent.await {
        Ok((answers, quorum)) => answers.iter().flatten().count() >= quorum,
        Err(err) => {
            tracing::debug!(key = %name, error = %err, "writing or removing a wait's deadlock record failed; it expires");
            false
        }
    }
}

/// What the waiters of a key hold, read off its `waiters-hold` hash (a flat list of
/// fields and values, as `HGETALL` gives it): the held keys by client id, in the order
/// their tasks wrote them.
pub(crate) fn holds_by_client(fields: &[String]) -> HashMap<&str, Vec<String>> {
    let mut holds: HashMap<&str, Vec<(&str, String)>> = HashMap::new();
    for pair in fields.chunks_exact(2) {
        let Some((client, rest)) = pair[0].split_once('.') else {
            continue;
        };
        holds
            .entry(client)
            .or_default()
            .push((rest, pair[1].clone()));
    }
    holds
        .into_iter()
        .map(|(client, mut keys)| {
            keys.sort();
            let mut keys: Vec<String> = keys.into_iter().map(|(_, key)| key).collect();
            keys.dedup();
            (client, keys)
        })
        .collect()
}

/// One step of a cycle: a key, the token that holds it, and what that holder's task waits
/// for (none for the step that comes back to the walker).
#[derive(Debug, Clone, PartialEq, Eq)]
struct CycleStep {
    key: String,
    holder: String,
    record: Option<Record>,
}

/// A closed cycle, from the walker's wait on.
#[derive(Debug, Clone)]
pub(crate) struct Cycle {
    steps: Vec<CycleStep>,
}

impl Cycle {
    /// Whether `mine` (the walker's wait) is the cycle's victim: no other wait of the
    /// cycle began later.
    pub(crate) fn victim_is(&self, mine: &Record) -> bool {
        let others = self.steps.iter().filter_map(|step| step.record.as_ref());
        others.map(Record::order).all(|other| other < mine.order())
    }

    /// Whether `other` is the same cycle (the same keys, holders and waits).
    pub(crate) fn same_as(&self, other: &Cycle) -> bool {
        self.steps == other.steps
    }
}

impl fmt::Display for Cycle {
    /// `` `stock:42` held by host-a pid 1 shop `shop::buy`, waiting for `user:7`; ... ``
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, step) in self.steps.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            let holder = Identity::of_token(&step.holder);
            write!(f, "`{}` held by {holder}", step.key)?;
            match &step.record {
                Some(record) => write!(f, ", waiting for `{}`", record.waits_for)?,
                None => f.write_str(" (this wait's task)")?,
            }
        }
        Ok(())
    }
}

/// What a walk found: the cycle it closed, if any, and whether the walker's own records
/// were where its first step read (beside the key it waits for): `false` when that node
/// lost them (a restart without persistence, a failover to a replica that never had them,
/// their expiry), and the walker must write them again.
pub(crate) struct Walk {
    pub(crate) cycle: Option<Cycle>,
    pub(crate) records_kept: bool,
}

/// Follows the chain from `key` (which the walker waits for): each key's holder, and what
/// that holder's task waits for, until a holder is one of `mine` (the tokens the walker
/// holds): the cycle. No cycle when the chain ends (a free key, a holder that does not
/// wait, a key of another kind, a failed read) or loops without the walker (that cycle's
/// own tasks find it). The first step also asks whether `mark` (a hash and the walker's
/// field there, beside `key`) is still written.
pub(crate) async fn walk(
    client: &LockClient,
    key: &str,
    mine: &[&str],
    mark: (&str, &str),
) -> Walk {
    let Some(first) = step_on(client, key, Some(mark)).await else {
        // Nothing read: no verdict on the records either.
        return Walk {
            cycle: None,
            records_kept: true,
        };
    };
    Walk {
        records_kept: first.marked,
        cycle: follow(client, key, first, mine).await,
    }
}

/// [`walk`]'s steps from `key`, whose holder and records `answer` read.
async fn follow(
    client: &LockClient,
    key: &str,
    mut answer: StepAnswer,
    mine: &[&str],
) -> Option<Cycle> {
    let mut steps: Vec<CycleStep> = Vec::new();
    let mut key = key.to_owned();
    for taken in 1..=MAX_STEPS {
        let (holder, records) = (answer.holder?, answer.records);
        if mine.contains(&holder.as_str()) {
            steps.push(CycleStep {
                key,
                holder,
                record: None,
            });
            return Some(Cycle { steps });
        }
        let record = Record::decode(records.get(&holder)?)?;
        let next = record.waits_for.clone();
        steps.push(CycleStep {
            key,
            holder,
            record: Some(record),
        });
        if taken == MAX_STEPS || steps.iter().any(|step| step.key == next) {
            return None;
        }
        answer = step_on(client, &next, None).await?;
        key = next;
    }
    None
}

/// The holder of `key` and the records beside it, and whether `mark` is written there,
/// in one pipeline on its node (under Redlock, on every master: the holder a majority
/// has, its record where a majority has it, the mark where a majority has it).
async fn step_on(client: &LockClient, key: &str, mark: Option<(&str, &str)>) -> Option<StepAnswer> {
    let names = KeyNames::prefixed("", key).ok()?;
    let ask = |mut connection: Connection| {
        let names = &names;
        async move {
            let mut pipe = redis::pipe();
            pipe.get(names.lock()).hgetall(names.waits());
            let failed = |err| LockError::backend(names.lock(), err);
            // The mark is in the key's slot (a hash beside it); only the first step asks.
            let Some((hash, field)) = mark else {
                let (holder, records) = pipe.query_async(&mut connection).await.map_err(failed)?;
                return Ok(StepAnswer {
                    holder,
                    records,
                    marked: true,
                });
            };
            pipe.hexists(hash, field);
            let (holder, records, marked) =
                pipe.query_async(&mut connection).await.map_err(failed)?;
            Ok(StepAnswer {
                holder,
                records,
                marked,
            })
        }
    };
    let answer = client.reach().ask_each(key, ask);
    answer.await.ok()
}

/// A node's answer to a step: the key's holder, the records beside the key, and whether
/// the walker's mark is written there (true when it asked for none).
struct StepAnswer {
    holder: Option<String>,
    records: HashMap<String, String>,
    marked: bool,
}

impl Majority for StepAnswer {
    /// The holder `quorum` masters name, with its record where `quorum` of them have it,
    /// and the mark where `quorum` of them have it.
    fn verdict(_key: &str, answers: Vec<Option<Self>>, quorum: usize) -> Self {
        let answers: Vec<StepAnswer> = answers.into_iter().flatten().collect();
        let marked = answers.iter().filter(|answer| answer.marked).count() >= quorum;
        let holders = answers.iter().filter_map(|answer| answer.holder.as_deref());
        let Some(holder) = most_named(holders, quorum) else {
            return StepAnswer {
                holder: None,
                records: HashMap::new(),
                marked,
            };
        };
        let records = answers
            .iter()
            .filter_map(|answer| answer.records.get(holder));
        let record = most_named(records.map(String::as_str), quorum);
        StepAnswer {
            records: record
                .map(|record| (holder.to_owned(), record.to_owned()))
                .into_iter()
                .collect(),
            holder: Some(holder.to_owned()),
            marked,
        }
    }
}

/// The value at least `quorum` of `values` are, if any.
fn most_named<'a>(values: impl Iterator<Item = &'a str>, quorum: usize) -> Option<&'a str> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    counts
        .into_iter()
        .find(|&(_, count)| count >= quorum)
        .map(|(value, _)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(waits_for: &str, began: u64, id: u64) -> Record {
        Record {
            waits_for: waits_for.to_owned(),
            began,
            id,
        }
    }

    #[test]
    fn a_record_reads_back_even_with_tabs_in_the_key() {
        let written = record("a\tkey", 1_795_000_000_000, 0xfeed);
        assert_eq!(Record::decode(&written.encode()), Some(written));
        assert_eq!(Record::decode("no tabs"), None);
    }

    #[test]
    fn a_step_under_redlock_follows_what_a_majority_of_masters_says() {
        let answer = |holder: Option<&str>, record: Option<&str>| {
            Some(StepAnswer {
                holder: holder.map(String::from),
                records: (holder.zip(record))
                    .map(|(h, r)| (h.to_owned(), r.to_owned()))
                    .into_iter()
                    .collect(),
                marked: true,
            })
        };
        let two_of_three = vec![
            answer(Some("t"), Some("r")),
            answer(Some("u"), None),
            answer(Some("t"), Some("r")),
        ];
        let verdict = StepAnswer::verdict("k", two_of_three, 2);
        assert_eq!(verdict.holder.as_deref(), Some("t"));
        assert_eq!(verdict.records.get("t").map(String::as_str), Some("r"));
        let one_record = vec![answer(Some("t"), Some("r")), answer(Some("t"), None), None];
        let verdict = StepAnswer::verdict("k", one_record, 2);
        assert_eq!(verdict.holder.as_deref(), Some("t"));
        assert!(
            verdict.records.is_empty(),
            "a record one master has is no step"
        );
        let split = vec![
            answer(Some("t"), None),
            answer(Some("u"), None),
            answer(None, None),
        ];
        assert_eq!(StepAnswer::verdict("k", split, 2).holder, None);
    }

    #[test]
    fn records_live_as_long_as_the_wait_can_within_bounds() {
        let (delay, second) = (Duration::from_secs(1), Duration::from_secs(1));
        assert_eq!(lives(delay, second * 10), second * 12);
        assert_eq!(lives(delay, Duration::ZERO), second * 3);
        assert_eq!(lives(delay, second * 100_000), MAX_LIFE);
        assert_eq!(lives(second * 7200, second), second * 21_600);
    }

    #[test]
    fn what_waiters_hold_reads_back_by_client() {
        let fields: Vec<String> = ["c1.ff.1", "b", "c1.ff.0", "a", "c2.1.0", "x", "odd", "y"]
            .into_iter()
            .map(String::from)
            .collect();
        let holds = holds_by_client(&fields);
        assert_eq!(holds["c1"], ["a", "b"]);
        assert_eq!(holds["c2"], ["x"]);
        assert_eq!(holds.len(), 2, "a field without a client id is skipped");
    }

    #[test]
    fn the_victim_is_the_wait_that_began_last() {
        let cycle = Cycle {
            steps: vec![
                CycleStep {
                    key: "b".into(),
                    holder: "lr-1".into(),
                    record: Some(record("a", 100, 1)),
                },
                CycleStep {
                    key: "a".into(),
                    holder: "lr-2".into(),
                    record: None,
                },
            ],
        };
        assert!(cycle.victim_is(&record("b", 200, 0)));
        assert!(!cycle.victim_is(&record("b", 50, 9)));
        assert!(cycle.victim_is(&record("b", 100, 2)));
        assert!(!cycle.victim_is(&record("b", 100, 0)));
        assert!(cycle.to_string().contains("`b` held by"), "{cycle}");
    }
}
