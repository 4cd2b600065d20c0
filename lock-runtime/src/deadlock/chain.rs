//! The wait-for chain in Redis: what a holding task's wait records beside each key it
//! holds, and the walk along the chain.
//!
//! A record lives in the hash `~lock/waits{KEY}` (in the key's slot), under the token
//! that holds `KEY`: `WAITED-FOR KEY`, a tab, when the wait began (ms since the epoch,
//! the waiter's clock), a tab, the wait's id (hexadecimal). A step of the walk reads a
//! key's holder and that hash in one pipeline on the key's node.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::identity::Identity;
use crate::lease::{Token, millis};
use crate::scripts::KeyNames;

/// At most this many steps along a chain (a longer one is not followed to its end).
const MAX_STEPS: usize = 32;

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

/// A wait's records, written beside each key its task holds; removed when dropped.
pub(crate) struct Records {
    client: LockClient,
    /// Each hash and the field written there.
    written: Vec<(String, Token)>,
    /// The record.
    value: String,
    /// How long a write lives.
    lives: Duration,
}

impl Records {
    /// Writes `record` beside each of `held` (its key's names and the token there), to
    /// live three delays ([`refresh`](Self::refresh) writes it again after each look). A
    /// failed write is skipped: a walk then stops at that key, and the wait ends at its
    /// `wait` unless a later write succeeds.
    pub(crate) async fn write(
        client: &LockClient,
        held: &[(Arc<KeyNames>, Token)],
        record: &Record,
        delay: Duration,
    ) -> Records {
        let records = Records {
            client: client.clone(),
            written: held
                .iter()
                .map(|(names, token)| (names.waits(), token.clone()))
                .collect(),
            value: record.encode(),
            lives: delay * 3,
        };
        records.refresh().await;
        records
    }

    /// Writes the records again, each to live three delays from now.
    pub(crate) async fn refresh(&self) {
        let lives = i64::try_from(millis(self.lives)).unwrap_or(i64::MAX);
        for (name, token) in &self.written {
            let mut pipe = redis::pipe();
            pipe.hset(name, &**token, &self.value).ignore();
            pipe.pexpire(name, lives).ignore();
            if let Err(err) = pipe.query_async::<()>(&mut self.client.connection()).await {
                tracing::debug!(key = %name, error = %err, "recording a wait for the deadlock detection failed; trying again");
            }
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
        let mut connection = self.client.connection();
        self.client.runtime().spawn(async move {
            for (name, token) in written {
                let mut remove = redis::cmd("HDEL");
                remove.arg(&name).arg(&*token);
                if let Err(err) = remove.query_async::<()>(&mut connection).await {
                    tracing::debug!(key = %name, error = %err, "removing a wait's deadlock record failed; it expires");
                }
            }
        });
    }
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

/// The holder of `key` and the records beside it, in one pipeline on its node.
async fn step_on(client: &LockClient, key: &str) -> Option<(String, HashMap<String, String>)> {
    let names = KeyNames::prefixed("", key).ok()?;
    let mut pipe = redis::pipe();
    pipe.get(names.lock()).hgetall(names.waits());
    let (holder, records): (Option<String>, HashMap<String, String>) =
        pipe.query_async(&mut client.connection()).await.ok()?;
    Some((holder?, records))
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
