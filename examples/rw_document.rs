//! A read-write lock: a document kept as two fields that must agree. Readers read both
//! under `mode = "read"` (many at a time); a writer changes both under `mode = "write"` (alone,
//! and never starved by the readers). No reader ever sees a half-written document.
//!
//! Run it (it starts a Redis if none runs):
//!
//! ```text
//! cargo run -p lock-examples --example rw_document
//! ```
//!
//! Redis: `REDIS_URL`, else a server on 127.0.0.1:6379, else a throwaway one.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_examples::servers::{Mode, Servers};
use lock_examples::store::Store;

// README:start
use lock_runtime::{LockError, distributed_lock};

#[derive(Debug)]
enum DocError {
    Lock(LockError),
    Store(redis::RedisError),
}

impl From<LockError> for DocError {
    fn from(err: LockError) -> Self {
        DocError::Lock(err)
    }
}

// Many readers at a time; none while a writer writes.
#[distributed_lock(key = "doc:<id>", mode = "read", ttl = "5s")]
async fn read_doc(store: &Store, id: u64) -> Result<(i64, i64), DocError> {
    let title = store.get(&format!("doc:{id}:title")).await;
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    let body = store.get(&format!("doc:{id}:body")).await;
    match (title, body) {
        (Ok(title), Ok(body)) => Ok((title.unwrap_or(0), body.unwrap_or(0))),
        (Err(err), _) | (_, Err(err)) => Err(DocError::Store(err)),
    }
}

// One writer at a time, with no reader; readers that come after it wait behind it.
#[distributed_lock(key = "doc:<id>", mode = "write", ttl = "5s")]
async fn write_doc(store: &Store, id: u64, version: i64) -> Result<(), DocError> {
    store
        .set(&format!("doc:{id}:title"), version)
        .await
        .map_err(DocError::Store)?;
    tokio::time::sleep(std::time::Duration::from_millis(2)).await; // half-written here
    store
        .set(&format!("doc:{id}:body"), version)
        .await
        .map_err(DocError::Store)
}
// README:end

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::Lock(err) => write!(f, "{err}"),
            DocError::Store(err) => write!(f, "the document store failed: {err}"),
        }
    }
}

const READERS: u64 = 8;
const READS: u64 = 50;
const WRITES: i64 = 20;

fn main() -> Result<ExitCode, Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let servers = Servers::for_mode(Mode::Single)?;
        lock_runtime::init(servers.config())?;
        let store = Arc::new(Store::connect(&servers).await?);
        let id = u64::from(std::process::id());
        let torn = Arc::new(AtomicU64::new(0));
        let mut readers = Vec::new();
        for _ in 0..READERS {
            let (store, torn) = (store.clone(), torn.clone());
            readers.push(tokio::spawn(async move {
                for _ in 0..READS {
                    let (title, body) = read_doc(&store, id).await?;
                    if title != body {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Ok::<_, DocError>(())
            }));
        }
        for version in 1..=WRITES {
            write_doc(&store, id, version)
                .await
                .map_err(|err| err.to_string())?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for reader in readers {
            reader.await?.map_err(|err| err.to_string())?;
        }
        let (title, body) = read_doc(&store, id).await.map_err(|err| err.to_string())?;
        store
            .del(&[&format!("doc:{id}:title"), &format!("doc:{id}:body")])
            .await?;
        let torn = torn.load(Ordering::Relaxed);
        println!(
            "{READERS} readers read the document {} times while 1 writer wrote it {WRITES} \
             times: {torn} half-written reads; it ends at version {title}/{body}",
            READERS * READS
        );
        Ok(if torn == 0 && title == WRITES && body == WRITES {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}
