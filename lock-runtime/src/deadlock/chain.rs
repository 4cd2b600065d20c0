//! The wait-for chain in Redis: what a holding task's wait records beside each key it
//! holds, and the walk along the chain.
//!
//! A record lives in the hash `~lock/waits{KEY}` (in the key's slot), under the token
//! that holds `KEY`: `WAITED-FOR KEY`, a tab, when the wait began (ms since the epoch,
//! the waiter's clock), a tab, the wait's id (hexadecimal). A step of the walk reads a
//! key's holder and that hash in one pipeline on the key's node. Beside the key the task
//! waits for, the hash `~lock/waiters-hold{KEY}` says what it holds (a field
//! `<client id>.<wait id>.<n>` per held key, the key as its value), so that `inspect`
//! shows it under the waiter of that client.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::connection::Connection;
use crate::error::LockError;
use crate::identity::Identity;
use crate::lease::{Token, millis};
use crate::scripts::KeyNames;
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
    /// Each hash and the fields written there, with their values.
    written: Vec<(String, Vec<(String, String)>)>,
    /// How long a write lives.
    lives: Duration,
}

impl Records {
    /// Writes `record` beside each of `held` (its key's names and the token there), and
    /// the held keys beside `waited` (the key the wait is for) under the client's id, to
    /// live `lives` (see [`lives`]; [`refresh`](Self::refresh) writes them again). A
    /// failed write is skipped: a walk then stops at that key, and the wait ends at its
    /// `wait` unless a later write succeeds.
    pub(crate) async fn write(
        client: &LockClient,
        waited: &KeyNames,
        held: &[(Arc<KeyNames>, Token)],
        record: &Record,
        lives: Duration,
    ) -> Records {
        let value = record.encode();
        let mut written: Vec<_> = held
            .iter()
            .map(|(names, token)| (names.waits(), vec![(token.to_string(), value.clone())]))
            .collect();
        let client_id = client.tokens().client_id();
        let holds = held.iter().enumerate().map(|(index, (names, _))| {
            let field = format!("{client_id}.{:x}.{index}", record.id);
            (field, names.lock().to_owned())
        });
        written.push((waited.waiters_hold(), holds.collect()));
        let records = Records {
            client: client.clone(),
            written,
            lives,
        };
        records.refresh().await;
        records
    }

    /// Writes the records again, each to live its `lives` from now (a hash another
    /// wait keeps longer keeps its expiry): one pipeline per hash, each on its key's node
    /// (on every master under Redlock).
    pub(crate) async fn refresh(&self) {
        let lives = i64::try_from(millis(self.lives)).unwrap_or(i64::MAX);
        for (name, fields) in &self.written {
            let mut pipe = redis::pipe();
            pipe.hset_multiple(name, fields).ignore();
            pipe.cmd("PEXPIRE").arg(name).arg(lives).arg("NX").ignore();
            pipe.cmd("PEXPIRE").arg(name).arg(lives).arg("GT").ignore();
            send(&self.client, name, &pipe).await;
        }
    }
}

impl Drop for Records {
    /// Removes the records, in the background on the client's runtime.
    fn drop(&mut self) {
        let written = std::mem::take(&mut self.written);
        if written.is_empty() {
            return;
        }
        let client = self.client.clone();
        self.client.runtime().spawn(async move {
            for (name, fields) in written {
                let mut pipe = redis::pipe();
                let remove = pipe.cmd("HDEL").arg(&name);
                for (field, _) in &fields {
                    remove.arg(field);
                }
                send(&client, &name, pipe.ignore()).await;
            }
        });
    }
}

/// Sends `pipe` (writes to the hash `name`) to the node of `name`'s slot, or to every
/// master under Redlock; a failure is logged and left (the records expire).
async fn send(client: &LockClient, name: &str, pipe: &redis::Pipeline) {
    let ask = |mut connection: Connection| async move {
        let sent = pipe.query_async::<()>(&mut connection).await;
        sent.map_err(|err| LockError::backend(name, err))
    };
    let deployment = client.deployment();
    let sent = deployment.answers(client.nodes(), || client.connection(), name, ask);
    if let Err(err) = sent.await {
        tracing::debug!(key = %name, error = %err, "writing or removing a wait's deadlock record failed; it expires");
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
struct Step {
    key: String,
    holder: String,
    record: Option<Record>,
}

/// A closed cycle, from the walker's wait on.
#[derive(Debug, Clone)]
pub(crate) struct Cycle {
    steps: Vec<Step>,
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

/// Follows the chain from `key` (which the walker waits for): each key's holder, and what
/// that holder's task waits for, until a holder is one of `mine` (the tokens the walker
/// holds): the cycle. `None` when the chain ends (a free key, a holder that does not
/// wait, a key of another kind, a failed read) or loops without the walker (that cycle's
/// own tasks find it).
pub(crate) async fn walk(client: &LockClient, key: &str, mine: &[&str]) -> Option<Cycle> {
    let mut steps: Vec<Step> = Vec::new();
    let mut key = key.to_owned();
    for _ in 0..MAX_STEPS {
        if steps.iter().any(|step| step.key == key) {
            return None;
        }
        let (holder, records) = step_on(client, &key).await?;
        if mine.contains(&holder.as_str()) {
            steps.push(Step {
                key,
                holder,
                record: None,
            });
            return Some(Cycle { steps });
        }
        let record = Record::decode(records.get(&holder)?)?;
        let next = record.waits_for.clone();
        steps.push(Step {
            key,
            holder,
            record: Some(record),
        });
        key = next;
    }
    None
}

/// The holder of `key` and the records beside it, in one pipeline on its node (under
/// Redlock, on every master: the holder a majority has, and its record where a majority
/// has it).
async fn step_on(client: &LockClient, key: &str) -> Option<(String, HashMap<String, String>)> {
    let names = KeyNames::prefixed("", key).ok()?;
    let ask = |mut connection: Connection| {
        let names = &names;
        async move {
            let mut pipe = redis::pipe();
            pipe.get(names.lock()).hgetall(names.waits());
            let read = pipe.query_async(&mut connection).await;
            let (holder, records) = read.map_err(|err| LockError::backend(names.lock(), err))?;
            Ok(StepAnswer { holder, records })
        }
    };
    let deployment = client.deployment();
    let answer = deployment.ask_each(client.nodes(), || client.connection(), key, ask);
    let StepAnswer { holder, records } = answer.await.ok()?;
    Some((holder?, records))
}

/// A node's answer to a step: the key's holder, and the records beside the key.
struct StepAnswer {
    holder: Option<String>,
    records: HashMap<String, String>,
}

impl Majority for StepAnswer {
    /// The holder `quorum` masters name, with its record where `quorum` of them have it.
    fn verdict(_key: &str, answers: Vec<Option<Self>>, quorum: usize) -> Self {
        let answers: Vec<StepAnswer> = answers.into_iter().flatten().collect();
        let holders = answers.iter().filter_map(|answer| answer.holder.as_deref());
        let Some(holder) = most_named(holders, quorum) else {
            return StepAnswer {
                holder: None,
                records: HashMap::new(),
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
                Step {
                    key: "b".into(),
                    holder: "lr-1".into(),
                    record: Some(record("a", 100, 1)),
                },
                Step {
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
