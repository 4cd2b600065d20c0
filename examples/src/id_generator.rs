//! Unique ids from a counter in Redis, handed out by several processes at once.
//!
//! Each id is a read-increment-write of the counter: `GET`, a moment's work, `SET` one
//! higher; separate commands, so two generators that read the same value hand out the
//! same id. [`next_id`] runs it under `#[distributed_lock(key = "id-generator:<name>")]`,
//! so every id is unique and the counter ends at the number of ids handed out; a duplicate
//! id would mean two holders at once. [`next_id_without_lock`] is the same without the
//! lock and hands out duplicates.
//!
//! Redis keys: the counter `id-counter:<name>` and the lock `id-generator:<name>`.

use std::fmt;
use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};

use crate::store::Store;

/// How long a generator works between reading the counter and writing it back.
pub const WORK_TIME: Duration = Duration::from_millis(1);

/// The Redis key of the counter behind the ids of `name`.
pub fn counter_key(name: &str) -> String {
    format!("id-counter:{name}")
}

/// Why no id was handed out.
#[derive(Debug)]
pub enum IdError {
    /// The lock could not be taken (waited too long, Redis down, lease lost).
    Lock(LockError),
    /// Reading or writing the counter failed.
    Store(redis::RedisError),
    /// A generating task panicked or was cancelled.
    Task(tokio::task::JoinError),
}

impl From<LockError> for IdError {
    fn from(err: LockError) -> Self {
        IdError::Lock(err)
    }
}

impl From<redis::RedisError> for IdError {
    fn from(err: redis::RedisError) -> Self {
        IdError::Store(err)
    }
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdError::Lock(err) => write!(f, "{err}"),
            IdError::Store(err) => write!(f, "id counter: {err}"),
            IdError::Task(err) => write!(f, "id task: {err}"),
        }
    }
}

impl std::error::Error for IdError {}

/// The next id of `name` (1, 2, 3, ...): at most one generator of `name` runs this at a
/// time, in every process that shares the Redis.
#[distributed_lock(key = "id-generator:<name>", ttl = "5s", wait = "60s")]
pub async fn next_id(store: &Store, name: &str) -> Result<i64, IdError> {
    read_increment_write(store, name).await
}

/// The same with no lock: generators that read the counter at the same time hand out the
/// same id.
pub async fn next_id_without_lock(store: &Store, name: &str) -> Result<i64, IdError> {
    read_increment_write(store, name).await
}

/// Read, work, write back: correct only when no other generator of `name` runs meanwhile.
async fn read_increment_write(store: &Store, name: &str) -> Result<i64, IdError> {
    let key = counter_key(name);
    let id = store.get(&key).await?.unwrap_or(0) + 1;
    tokio::time::sleep(WORK_TIME).await;
    store.set(&key, id).await?;
    Ok(id)
}

/// Hands out `tasks × ids_per_task` ids of `name` from `tasks` concurrent tasks, with or
/// without the lock, and returns them in the order they were handed out per task (task 0
/// first). Stops at the first error.
pub async fn generate(
    store: &Store,
    name: &str,
    tasks: usize,
    ids_per_task: usize,
    locked: bool,
) -> Result<Vec<i64>, IdError> {
    let mut running = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let store = store.clone();
        let name = name.to_owned();
        running.spawn(async move {
            let mut ids = Vec::with_capacity(ids_per_task);
            for _ in 0..ids_per_task {
                let id = if locked {
                    next_id(&store, &name).await?
                } else {
                    next_id_without_lock(&store, &name).await?
                };
                ids.push(id);
            }
            Ok::<_, IdError>((task, ids))
        });
    }
    let mut per_task = vec![Vec::new(); tasks];
    while let Some(joined) = running.join_next().await {
        let (task, ids) = joined.map_err(IdError::Task)??;
        per_task[task] = ids;
    }
    Ok(per_task.into_iter().flatten().collect())
}

/// What a set of ids looks like: how many, how many distinct, which were repeated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Ids handed out.
    pub total: usize,
    /// Distinct ids among them.
    pub distinct: usize,
    /// Ids handed out more than once, with how often, smallest id first.
    pub duplicates: Vec<(i64, usize)>,
}

impl Report {
    /// Counts `ids`.
    pub fn of(ids: &[i64]) -> Report {
        let mut counts = std::collections::BTreeMap::new();
        for id in ids {
            *counts.entry(*id).or_insert(0usize) += 1;
        }
        Report {
            total: ids.len(),
            distinct: counts.len(),
            duplicates: counts.into_iter().filter(|(_, times)| *times > 1).collect(),
        }
    }

    /// Every id was handed out once.
    pub fn is_unique(&self) -> bool {
        self.duplicates.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ids, {} distinct, {} handed out more than once",
            self.total,
            self.distinct,
            self.duplicates.len()
        )
    }
}
