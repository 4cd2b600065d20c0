//! The live gauges: what this process holds and waits for now, and since when (see the
//! metrics table of [`telemetry`](super)).
//!
//! Why a registry and a periodic publisher: a count could move with each hold, but the age
//! of the oldest hold cannot be kept cheaply as holds end in any order. So every hold and
//! every wait is an entry in a small process-wide table while it lasts (an index into a
//! vector behind a mutex, taken once when it starts and once when it ends: no allocation
//! once the vector has grown to the process's peak), and each client's own runtime scans
//! the table every `PUBLISH_EVERY` and sets the four gauges.
//!
//! The table is the process's, not the client's: a process with two clients (the global
//! one and one of its own) publishes the same values from both, never one client's view
//! over the other's. So is the record of which labelled series were last published above
//! zero: once a series' entries end, whichever client publishes next sets it to zero, also
//! when the client that published it is gone. An entry is removed by dropping its
//! [`Live`]: a guard dropped without a release, a wait whose future was dropped, a panic,
//! all end it the same way.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{HELD, KeyLabel, OLDEST_HOLD_SECONDS, OLDEST_WAIT_SECONDS, Telemetry, WAITING};
use crate::telemetry::LockKey;

/// How often each client publishes the gauges.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The holds of the process's guards (locks, read shares, permits), while they last.
static HOLDS: Mutex<Entries> = Mutex::new(Entries::new());
/// The waits of the process's tasks, while they last.
static WAITS: Mutex<Entries> = Mutex::new(Entries::new());
/// The labelled series some client last published with a count above zero, by table
/// (0: holds, 1: waits): the gauges are the process's, so whichever client publishes next
/// sets such a series back to zero once its entries are gone, also when the client that
/// published it is gone (or never sees it at zero). Taken for a whole publication, so that
/// two clients' publications never interleave.
static PUBLISHED: Mutex<BTreeSet<(usize, String)>> = Mutex::new(BTreeSet::new());

/// What a gauge series is labelled with.
#[derive(Clone)]
enum Series {
    /// No key label is configured: the one series without a `key` label.
    Unlabeled,
    /// The label a hold's key gets, derived when the gauges are published (so that a hold
    /// costs no allocation when it starts).
    Derived(KeyLabel, Arc<dyn LockKey>),
    /// The label of a wait's key, derived when the wait began.
    Given(String),
}

impl Series {
    /// The `key` label's value, `None` for the unlabeled series.
    fn label(&self) -> Option<String> {
        match self {
            Series::Unlabeled => None,
            Series::Derived(key_label, names) => Some(key_label(names.lock_key())),
            Series::Given(label) => Some(label.clone()),
        }
    }
}

/// One hold or wait: its series, and since when.
struct Entry {
    series: Series,
    since: Instant,
}

/// The entries of one table: a slot per entry, and the free slots to reuse.
struct Entries {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
}

impl Entries {
    const fn new() -> Self {
        Entries {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Puts `entry` in a free slot, and returns the slot.
    fn insert(&mut self, entry: Entry) -> usize {
        if let Some(slot) = self.free.pop()
            && let Some(free @ None) = self.slots.get_mut(slot)
        {
            *free = Some(entry);
            return slot;
        }
        self.slots.push(Some(entry));
        self.slots.len() - 1
    }

    /// Takes the entry out of `slot`, which is free from now on.
    fn remove(&mut self, slot: usize) -> Option<Entry> {
        let entry = self.slots.get_mut(slot).and_then(Option::take);
        if entry.is_some() {
            self.free.push(slot);
        }
        entry
    }
}

/// A table, also after a panic elsewhere while it was locked (its entries stay sound:
/// every change is one step).
fn locked(table: &'static Mutex<Entries>) -> MutexGuard<'static, Entries> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One hold or wait on the live gauges, counted until this is dropped.
///
/// Four bytes: its slot, with the top bit set for a wait. It sits in every guard, and a
/// guard that grows makes each move of the futures that hold it copy more.
pub(crate) struct Live(u32);

/// The bit of a [`Live`] that says its entry is a wait.
const WAIT_BIT: u32 = 1 << 31;

impl Live {
    /// Counts nothing (a reentrant guard's hold: its outer guard's counts).
    pub(crate) const fn none() -> Self {
        Live(u32::MAX)
    }

    fn start(table: &'static Mutex<Entries>, series: Series, since: Instant) -> Self {
        let slot = locked(table).insert(Entry { series, since });
        let wait = if std::ptr::eq(table, &WAITS) {
            WAIT_BIT
        } else {
            0
        };
        match u32::try_from(slot) {
            Ok(slot) if slot < WAIT_BIT - 1 => Live(slot | wait),
            // Two billion at once: the rest are not counted.
            _ => {
                let entry = locked(table).remove(slot);
                drop(entry);
                Live::none()
            }
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if self.0 == u32::MAX {
            return;
        }
        let table = if self.0 & WAIT_BIT == 0 {
            &HOLDS
        } else {
            &WAITS
        };
        // Dropped after the table's lock: the last `Arc` of the key's names may go with it.
        let entry = locked(table).remove((self.0 & !WAIT_BIT) as usize);
        drop(entry);
    }
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("counted", &(self.0 != u32::MAX))
            .finish()
    }
}

impl Telemetry {
    /// A hold of `names` that began at `since`, counted until the returned value drops.
    #[inline]
    pub(crate) fn hold_started<K: LockKey + 'static>(
        &self,
        names: &Arc<K>,
        since: Instant,
    ) -> Live {
        let series = match self.key_label {
            None => Series::Unlabeled,
            Some(key_label) => Series::Derived(key_label, names.clone() as Arc<dyn LockKey>),
        };
        Live::start(&HOLDS, series, since)
    }

    /// A wait for `key` that began at `since`, counted until the returned value drops.
    pub(crate) fn wait_started(&self, key: &str, since: Instant) -> Live {
        let series = match self.key_label {
            None => Series::Unlabeled,
            Some(key_label) => Series::Given(key_label(key)),
        };
        Live::start(&WAITS, series, since)
    }

    /// Publishes the gauges every [`PUBLISH_EVERY`] on the current runtime (the client's
    /// own), until that runtime ends.
    pub(crate) fn start_publishing(&self) {
        let telemetry = self.clone();
        tokio::spawn(async move {
            let publisher = Publisher {
                unlabeled: telemetry.key_label.is_none(),
            };
            let mut every = tokio::time::interval(PUBLISH_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                telemetry.describe();
                publisher.publish();
            }
        });
    }
}

/// What one series of a table shows now: how many entries, and the oldest one's start.
#[derive(Clone, Copy)]
struct Sample {
    count: usize,
    oldest: Instant,
}

/// The series of one table, by their `key` label (`None`: the unlabeled series).
fn sample(table: &'static Mutex<Entries>) -> HashMap<Option<String>, Sample> {
    // The entries' series and starts are copied out first, so that the labels (the
    // application's function) are derived outside the lock.
    let entries: Vec<(Series, Instant)> = locked(table)
        .slots
        .iter()
        .flatten()
        .map(|entry| (entry.series.clone(), entry.since))
        .collect();
    let mut series: HashMap<Option<String>, Sample> = HashMap::new();
    for (entry, since) in entries {
        let sample = series.entry(entry.label()).or_insert(Sample {
            count: 0,
            oldest: since,
        });
        sample.count += 1;
        sample.oldest = sample.oldest.min(since);
    }
    series
}

/// The two tables and the names of their gauges: how many, and the oldest one's age.
const TABLES: [(&Mutex<Entries>, &str, &str); 2] = [
    (&HOLDS, HELD, OLDEST_HOLD_SECONDS),
    (&WAITS, WAITING, OLDEST_WAIT_SECONDS),
];

/// A client's publisher of the gauges (its task stops when the client is dropped).
struct Publisher {
    /// The client has no key label: the series without labels is always published.
    unlabeled: bool,
}

impl Publisher {
    /// Sets every series in the tables, and to zero each labelled series some client
    /// published above zero whose entries are gone.
    fn publish(&self) {
        let mut published = PUBLISHED.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let mut above_zero = BTreeSet::new();
        for (index, (table, count_name, oldest_name)) in TABLES.into_iter().enumerate() {
            let mut series = sample(table);
            let none = Sample {
                count: 0,
                oldest: now,
            };
            if self.unlabeled {
                series.entry(None).or_insert(none);
            }
            for (_, label) in published.iter().filter(|(table, _)| *table == index) {
                series.entry(Some(label.clone())).or_insert(none);
            }
            for (label, sample) in series {
                let age = now.saturating_duration_since(sample.oldest);
                set(
                    (count_name, oldest_name),
                    label.as_deref(),
                    sample.count,
                    age,
                );
                if let (Some(label), true) = (label, sample.count > 0) {
                    above_zero.insert((index, label));
                }
            }
        }
        *published = above_zero;
    }
}

impl Drop for Publisher {
    /// The client is gone (its runtime dropped this task): the published series that no
    /// hold or wait of the process is in any more are set to zero now, as its next tick
    /// would have (the last client of the process has no other to do it). The others are
    /// left to the other clients: a zero here would be a false one until their next tick.
    fn drop(&mut self) {
        let mut published = PUBLISHED.lock().unwrap_or_else(PoisonError::into_inner);
        let unlabeled = self.unlabeled.then_some(None);
        let mut zeroed = Vec::new();
        for (index, (table, count_name, oldest_name)) in TABLES.into_iter().enumerate() {
            let present = sample(table);
            let labels = published.iter().filter(|(table, _)| *table == index);
            let labels = labels.map(|(_, label)| Some(label.clone()));
            for label in labels.chain(unlabeled.clone()) {
                if !present.contains_key(&label) {
                    set(
                        (count_name, oldest_name),
                        label.as_deref(),
                        0,
                        Duration::ZERO,
                    );
                    zeroed.extend(label.map(|label| (index, label)));
                }
            }
        }
        for series in zeroed {
            published.remove(&series);
        }
    }
}

/// Sets a series of the gauges `names` (how many, the oldest's age) labelled `label`.
fn set(
    (count_name, oldest_name): (&'static str, &'static str),
    label: Option<&str>,
    count: usize,
    age: Duration,
) {
    let labels: Vec<::metrics::Label> = label
        .iter()
        .map(|label| ::metrics::Label::new("key", (*label).to_owned()))
        .collect();
    ::metrics::gauge!(count_name, labels.clone()).set(count as f64);
    ::metrics::gauge!(oldest_name, labels).set(age.as_secs_f64());
}
