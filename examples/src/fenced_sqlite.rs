//! Fencing checked by a real store: prices kept in SQLite, written only with a fence
//! greater than the last one the row accepted.
//!
//! A lease lock cannot stop a holder that was paused (GC, `SIGSTOP`, a VM migration) past
//! its lease from waking up and writing after another holder took over. The fence can: every
//! acquisition with `fencing = true` gets a token strictly greater than every earlier one for
//! the key, each row remembers the fence of the last write it accepted, and the only write
//! is
//!
//! ```sql
//! UPDATE records SET value = ?1, last_fence = ?2 WHERE id = ?3 AND last_fence < ?2
//! ```
//!
//! so a stale holder's write updates 0 rows, whatever it believes about its lease.
//! [`set_price`] is the service's write under `#[distributed_lock(.., fencing = true)]`;
//! [`PriceBook::write`] is the store's side, for holders that take the lock themselves.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_runtime::{LockError, distributed_lock};
use rusqlite::{Connection, OptionalExtension, params};

/// The table: one row per id, with the fence of the last write it accepted (0: none yet).
const CREATE: &str = "CREATE TABLE IF NOT EXISTS records (
    id         TEXT PRIMARY KEY,
    value      INTEGER NOT NULL,
    last_fence INTEGER NOT NULL
)";

/// The only write: taken when the fence is greater than the last one the row accepted.
pub const FENCED_UPDATE: &str =
    "UPDATE records SET value = ?1, last_fence = ?2 WHERE id = ?3 AND last_fence < ?2";

/// How long a write waits for another process's write to the file to end.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The lock key of an item's price.
pub fn lock_key(item: &str) -> String {
    format!("price:{item}")
}

/// What the store did with a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written: the fence was greater than the row's last one (1 row updated).
    Accepted,
    /// Refused, 0 rows updated: the row already accepted a write with `last_fence`, not
    /// smaller than this write's fence. The writer's lock was taken over meanwhile.
    Rejected {
        /// The fence of the last write the row accepted.
        last_fence: u64,
    },
    /// No row with that id (nothing written).
    Missing,
}

/// A row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The price.
    pub value: i64,
    /// The fence of the last write the row accepted (0: none yet).
    pub last_fence: u64,
}

/// Why a price was not written.
#[derive(Debug)]
pub enum PriceError {
    /// The lock could not be taken, or its lease was lost while writing.
    Lock(LockError),
    /// SQLite failed (or the blocking task that ran it did).
    Store(String),
    /// The write ran without a fence: the lock was not taken with `fencing = true`.
    NoFence,
}

impl From<LockError> for PriceError {
    fn from(err: LockError) -> Self {
        PriceError::Lock(err)
    }
}

impl From<rusqlite::Error> for PriceError {
    fn from(err: rusqlite::Error) -> Self {
        PriceError::Store(err.to_string())
    }
}

impl std::fmt::Display for PriceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PriceError::Lock(err) => write!(f, "{err}"),
            PriceError::Store(err) => write!(f, "price store: {err}"),
            PriceError::NoFence => write!(
                f,
                "a fenced write needs a fence: take the lock with `fencing = true`"
            ),
        }
    }
}

impl std::error::Error for PriceError {}

/// Prices in one SQLite file; several processes may open the same file.
#[derive(Clone)]
pub struct PriceBook {
    connection: Arc<Mutex<Connection>>,
}

impl PriceBook {
    /// Opens (creating if needed) the price book in the SQLite file at `path`.
    pub fn open(path: &Path) -> Result<PriceBook, PriceError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        connection.execute(CREATE, [])?;
        Ok(PriceBook {
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// Runs `work` on the connection on a blocking thread (SQLite calls block).
    async fn with_connection<T, F>(&self, work: F) -> Result<T, PriceError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, PriceError> + Send + 'static,
    {
        let connection = self.connection.clone();
        tokio::task::spawn_blocking(move || {
            let connection = connection
                .lock()
                .map_err(|_| PriceError::Store("a write panicked".into()))?;
            work(&connection)
        })
        .await
        .map_err(|err| PriceError::Store(err.to_string()))?
    }

    /// Adds `item` at `value`, with no write accepted yet (fence 0), unless it exists.
    pub async fn add(&self, item: &str, value: i64) -> Result<(), PriceError> {
        let item = item.to_owned();
        self.with_connection(move |connection| {
            connection.execute(
                "INSERT OR IGNORE INTO records (id, value, last_fence) VALUES (?1, ?2, 0)",
                params![item, value],
            )?;
            Ok(())
        })
        .await
    }

    /// Writes `value` for `item` with `fence`: accepted only when `fence` is greater than
    /// the last fence the row accepted ([`FENCED_UPDATE`]).
    pub async fn write(
        &self,
        item: &str,
        value: i64,
        fence: u64,
    ) -> Result<WriteOutcome, PriceError> {
        // SQLite's integers are i64; fences are microseconds since 1970 and up, far below.
        let fence = i64::try_from(fence)
            .map_err(|_| PriceError::Store(format!("fence {fence} is over i64::MAX")))?;
        let item = item.to_owned();
        self.with_connection(move |connection| {
            let updated = connection.execute(FENCED_UPDATE, params![value, fence, item])?;
            if updated == 1 {
                return Ok(WriteOutcome::Accepted);
            }
            // 0 rows: say why (read after the fact, for the report only).
            Ok(match read_record(connection, &item)? {
                Some(record) => WriteOutcome::Rejected {
                    last_fence: record.last_fence,
                },
                None => WriteOutcome::Missing,
            })
        })
        .await
    }

    /// The row of `item`, if any.
    pub async fn read(&self, item: &str) -> Result<Option<Record>, PriceError> {
        let item = item.to_owned();
        self.with_connection(move |connection| read_record(connection, &item))
            .await
    }
}

fn read_record(connection: &Connection, item: &str) -> Result<Option<Record>, PriceError> {
    let row = connection
        .query_row(
            "SELECT value, last_fence FROM records WHERE id = ?1",
            params![item],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
        )
        .optional()?;
    Ok(row.map(|(value, last_fence)| Record {
        value,
        last_fence: u64::try_from(last_fence).unwrap_or(0),
    }))
}

/// Sets the price of `item` under its lock, with the lock's fence: the service's only
/// write. A holder superseded meanwhile (its lease ran out while it was paused) gets
/// [`WriteOutcome::Rejected`] from the store, not a silent overwrite.
#[distributed_lock(key = "price:<item>", ttl = "1s", fencing = true)]
pub async fn set_price(
    book: &PriceBook,
    item: &str,
    value: i64,
) -> Result<WriteOutcome, PriceError> {
    let fence = lock_runtime::current_lock()
        .and_then(|lock| lock.fence())
        .ok_or(PriceError::NoFence)?;
    book.write(item, value, fence).await
}
