//! The contenders: ours (through the attribute and the API), the raw limit, and the peers.
//!
//! Every contender locks the same layout (a plain string key holding a random token with a
//! PX expiry) on the same server, so the figures compare clients, not data models.

use std::time::Duration;

use lock_runtime::{LockClient, LockError, LockGuard, distributed_lock};
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::time::Instant;

use crate::error::BenchResult;

/// The lease every cycle takes (long enough never to expire during a measurement).
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// One of the measured lock clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Contender {
    /// `#[distributed_lock]` on an async fn.
    Attribute,
    /// `Lock::new(key).acquire()` and `guard.release()`.
    Api,
    /// `SET NX PX` plus an `EVALSHA` compare-and-delete: two round trips, nothing else.
    Raw,
    /// The `rslock` crate (Redlock on one server).
    Rslock,
    /// The `async-redis-lock` crate.
    AsyncRedisLock,
    /// redis-py's `Lock`, run by a Python subprocess.
    RedisPy,
}

impl Contender {
    /// The short id used in file names and JSON.
    pub(crate) fn id(self) -> &'static str {
        match self {
            Contender::Attribute => "attribute",
            Contender::Api => "api",
            Contender::Raw => "raw",
            Contender::Rslock => "rslock",
            Contender::AsyncRedisLock => "async-redis-lock",
            Contender::RedisPy => "redis-py",
        }
    }

    /// The contender of a short id (the reverse of [`Contender::id`]).
    pub(crate) fn from_id(id: &str) -> Option<Self> {
        [
            Contender::Attribute,
            Contender::Api,
            Contender::Raw,
            Contender::Rslock,
            Contender::AsyncRedisLock,
            Contender::RedisPy,
        ]
        .into_iter()
        .find(|c| c.id() == id)
    }

    /// The name shown in tables and plots.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Contender::Attribute => "ours, #[distributed_lock]",
            Contender::Api => "ours, Lock API",
            Contender::Raw => "raw limit (SET NX PX + EVALSHA)",
            Contender::Rslock => "rslock 0.10",
            Contender::AsyncRedisLock => "async-redis-lock 0.4",
            Contender::RedisPy => "redis-py Lock",
        }
    }

    /// A distinct range of numeric key ids per contender, so no contender ever meets
    /// another's keys.
    pub(crate) fn key_base(self) -> u64 {
        1_000_000
            * match self {
                Contender::Attribute => 1,
                Contender::Api => 2,
                Contender::Raw => 3,
                Contender::Rslock => 4,
                Contender::AsyncRedisLock => 5,
                Contender::RedisPy => 6,
            }
    }

    /// The size of this contender's guard value (what a caller keeps per held lock beside
    /// the heap the lock takes); 0 for those without a guard here.
    pub(crate) fn guard_size(self) -> usize {
        match self {
            Contender::Attribute | Contender::Api => std::mem::size_of::<LockGuard>(),
            Contender::Rslock => std::mem::size_of::<rslock::LockGuard>(),
            Contender::AsyncRedisLock => std::mem::size_of::<async_redis_lock::Lock>(),
            Contender::Raw | Contender::RedisPy => 0,
        }
    }
}

/// The key of lock number `id` (the attribute renders `bench:<id>` the same way).
pub(crate) fn key_of(id: u64) -> String {
    format!("bench:{id}")
}

/// The uncontended cycle through the attribute: acquire, run an empty body, release.
#[distributed_lock(key = "bench:<id>", ttl = "10s", wait = "0s")]
pub(crate) async fn attribute_cycle(id: u64) -> Result<(), LockError> {
    Ok(())
}

/// The raw limit: one multiplexed connection, `SET NX PX`, then an `EVALSHA`
/// compare-and-delete.
#[derive(Clone)]
pub(crate) struct Raw {
    connection: MultiplexedConnection,
    release: redis::Script,
    /// With `Some(rule)`, the `SET` goes out pipelined with `WAIT` or `WAITAOF` (section
    /// 8): the physical limit of grants that wait for replicas, or for append-only files.
    wait: Option<Durability>,
}

/// What a grant waits for after its write, in section 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// `WAIT replicas timeout`: that many replicas have the write.
    Replicas(u32, Duration),
    /// `WAITAOF local replicas timeout`: the write is in the primary's own append-only
    /// file (with `local`) and in those of that many replicas.
    Aof(bool, u32, Duration),
}

impl Durability {
    /// The command pipelined after the write, its arguments included.
    fn command(self) -> redis::Cmd {
        match self {
            Durability::Replicas(replicas, timeout) => {
                let mut cmd = redis::cmd("WAIT");
                cmd.arg(replicas).arg(timeout.as_millis() as u64);
                cmd
            }
            Durability::Aof(local, replicas, timeout) => {
                let mut cmd = redis::cmd("WAITAOF");
                cmd.arg(u32::from(local))
                    .arg(replicas)
                    .arg(timeout.as_millis() as u64);
                cmd
            }
        }
    }

    /// Whether the command's answer confirms the write: `WAIT` answers a count, `WAITAOF`
    /// a pair (the primary's own fsync, then the replicas).
    fn confirmed(self, answer: &redis::Value) -> bool {
        let number = |value: &redis::Value| match value {
            redis::Value::Int(n) => *n,
            _ => -1,
        };
        match (self, answer) {
            (Durability::Replicas(replicas, _), value) => number(value) >= i64::from(replicas),
            (Durability::Aof(local, replicas, _), redis::Value::Array(pair)) => {
                pair.len() == 2
                    && number(&pair[0]) >= i64::from(local)
                    && number(&pair[1]) >= i64::from(replicas)
            }
            (Durability::Aof(..), _) => false,
        }
    }

    /// The option's setter on our client's configuration.
    pub(crate) fn configure(self, config: lock_runtime::Config) -> lock_runtime::Config {
        match self {
            Durability::Replicas(replicas, timeout) => config.wait_for_replicas(replicas, timeout),
            Durability::Aof(local, replicas, timeout) => {
                config.wait_for_aof(local, replicas, timeout)
            }
        }
    }
}

/// Compare-and-delete, as every token lock releases.
const RAW_RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

impl Raw {
    async fn connect(url: &str) -> BenchResult<Self> {
        let client = redis::Client::open(url)?;
        let connection = client.get_multiplexed_async_connection().await?;
        Ok(Raw {
            connection,
            release: redis::Script::new(RAW_RELEASE),
            wait: None,
        })
    }

    /// Tries once; true when the lock was taken and given back.
    async fn cycle(&self, key: &str) -> BenchResult<bool> {
        let mut connection = self.connection.clone();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64);
        let (reply, replicated) = match self.wait {
            None => (set.query_async(&mut connection).await?, true),
            Some(rule) => {
                // One pipeline, so the WAIT follows the SET on this connection and counts it.
                let answered: Result<(redis::Value, redis::Value), _> = redis::pipe()
                    .add_command(set)
                    .add_command(rule.command())
                    .query_async(&mut connection)
                    .await;
                match answered {
                    Ok((reply, answer)) => (reply, rule.confirmed(&answer)),
                    // Answered too late (behind other WAITs on this connection): a failed
                    // try. The key, if it was set, is deleted (best effort: else its ttl).
                    Err(err) if err.is_timeout() => {
                        let mut undo = self.release.key(key);
                        undo.arg(&token);
                        let _: Result<i64, _> = undo.invoke_async(&mut connection).await;
                        return Ok(false);
                    }
                    Err(err) => return Err(err.into()),
                }
            }
        };
        if !matches!(reply, redis::Value::Okay) {
            return Ok(false);
        }
        // A release is not waited for: a delete the replica misses leaves the key to its
        // ttl, which is safe (ours does not wait for it either).
        let released: Result<i64, _> = self
            .release
            .key(key)
            .arg(&token)
            .invoke_async(&mut connection)
            .await;
        let deleted = match released {
            Ok(deleted) => deleted,
            // Answered too late, behind a WAIT on this connection: a failed try.
            Err(err) if err.is_timeout() && self.wait.is_some() => return Ok(false),
            Err(err) => return Err(err.into()),
        };
        // A grant too few replicas confirmed counts as a failed try (undone above).
        Ok(deleted == 1 && replicated)
    }
}

/// Every contender's client, connected to the one server under test.
pub(crate) struct Clients {
    /// The global client (what the attribute uses); the API contender uses it too, so the
    /// two differ only in the code path.
    pub(crate) ours: LockClient,
    raw: Raw,
    rslock: rslock::LockManager,
    arl: async_redis_lock::Locker,
}

/// A lock held by one contender in the hot-key scenario.
pub(crate) enum Held {
    /// Ours.
    Ours(LockGuard),
    /// rslock's guard.
    Rslock(rslock::LockGuard),
    /// async-redis-lock's guard.
    Arl(async_redis_lock::Lock),
}

impl Clients {
    /// Connects every contender (ours through the global client, set up by the caller).
    pub(crate) async fn connect(url: &str) -> BenchResult<Self> {
        let ours = lock_runtime::client()?.clone();
        Ok(Clients {
            ours,
            raw: Raw::connect(url).await?,
            rslock: rslock::LockManager::new(vec![url.to_owned()]),
            arl: async_redis_lock::Locker::from_redis_url(url).await?,
        })
    }

    /// The clients of the Redlock hot key (section 5): ours through
    /// `LockClient::new(Config::redlock(urls))`, rslock's `LockManager` over the same
    /// masters. Raw and async-redis-lock have no Redlock mode; their clients here point at
    /// the first master and are never used.
    pub(crate) async fn redlock(urls: &[String]) -> BenchResult<Self> {
        let first = urls.first().ok_or("no Redlock masters")?;
        Ok(Clients {
            ours: LockClient::new(lock_runtime::Config::redlock(urls.iter().cloned()))?,
            raw: Raw::connect(first).await?,
            rslock: rslock::LockManager::new(urls.to_vec()),
            arl: async_redis_lock::Locker::from_redis_url(first).await?,
        })
    }

    /// The clients of section 8 on a primary with one replica: ours through
    /// `LockClient::new(Config::single(primary))`, with `.wait_for_replicas(n, timeout)` or
    /// `.wait_for_aof(local, n, timeout)` when `wait` is given, and raw, whose `SET` then
    /// goes out with a pipelined `WAIT` or `WAITAOF`. rslock and async-redis-lock point at
    /// the primary and are never used.
    pub(crate) async fn replicated(primary: &str, wait: Option<Durability>) -> BenchResult<Self> {
        let mut config = lock_runtime::Config::single(primary);
        if let Some(rule) = wait {
            config = rule.configure(config);
        }
        let mut raw = Raw::connect(primary).await?;
        raw.wait = wait;
        Ok(Clients {
            ours: LockClient::new(config)?,
            raw,
            rslock: rslock::LockManager::new(vec![primary.to_owned()]),
            arl: async_redis_lock::Locker::from_redis_url(primary).await?,
        })
    }

    /// One uncontended cycle on lock `id`: acquire without waiting, release. Returns false
    /// when the lock was busy (never expected: every key has one user).
    pub(crate) async fn cycle(&self, contender: Contender, id: u64) -> BenchResult<bool> {
        match contender {
            Contender::Attribute => match attribute_cycle(id).await {
                Ok(()) => Ok(true),
                Err(LockError::Busy { .. }) => Ok(false),
                Err(err) => Err(err.into()),
            },
            Contender::Api => {
                let lock = lock_runtime::Lock::new(key_of(id))
                    .ttl(TTL)
                    .wait(Duration::ZERO)
                    .client(&self.ours);
                match lock.acquire().await {
                    // Section 8: a release that waited too long behind a WAIT on the same
                    // connection gave up (the key expires by its ttl): not a cycle.
                    Ok(guard) if self.raw.wait.is_some() => Ok(guard.release().await.is_ok()),
                    Ok(guard) => {
                        guard.release().await?;
                        Ok(true)
                    }
                    Err(LockError::Busy { .. }) => Ok(false),
                    // Section 8: a grant the replicas or the append-only files did not
                    // confirm in time (undone), or a try whose answer waited too long
                    // behind a WAIT on the same connection, is a failed try.
                    Err(
                        LockError::NotReplicated { .. }
                        | LockError::NotDurable { .. }
                        | LockError::Timeout { .. },
                    ) if self.raw.wait.is_some() => Ok(false),
                    Err(err) => Err(err.into()),
                }
            }
            Contender::Raw => self.raw.cycle(&key_of(id)).await,
            Contender::Rslock => {
                let key = key_of(id);
                match self.rslock.lock(key.as_str(), TTL).await {
                    Ok(lock) => {
                        self.rslock.unlock(&lock).await;
                        Ok(true)
                    }
                    Err(rslock::LockError::Unavailable) => Ok(false),
                    Err(err) => Err(err.into()),
                }
            }
            Contender::AsyncRedisLock => {
                let options = async_redis_lock::Options::new()
                    .ttl(TTL)
                    .timeout(Some(Duration::ZERO));
                match self.arl.acquire_with_options(&options, key_of(id)).await {
                    Ok(lock) => {
                        lock.release().await?;
                        Ok(true)
                    }
                    Err(async_redis_lock::Error::Timeout) => Ok(false),
                    Err(err) => Err(err.into()),
                }
            }
            Contender::RedisPy => Err("redis-py runs in its own process".into()),
        }
    }

    /// Waits for the hot `key` until `until` (each contender's own waiting: ours parks on
    /// release notifications, the peers poll with their default intervals). `None` when the
    /// window closed first.
    pub(crate) async fn acquire_hot(
        &self,
        contender: Contender,
        key: &str,
        until: Instant,
    ) -> BenchResult<Option<Held>> {
        let remaining = until.saturating_duration_since(Instant::now());
        let held = match contender {
            Contender::Api => {
                let lock = lock_runtime::Lock::new(key)
                    .ttl(TTL)
                    .wait(remaining + Duration::from_secs(5))
                    .client(&self.ours);
                match tokio::time::timeout_at(until, lock.acquire()).await {
                    Ok(guard) => Some(Held::Ours(guard?)),
                    Err(_) => None,
                }
            }
            Contender::Rslock => {
                // `acquire` polls until it wins (3 tries 0-200 ms apart, then again).
                match tokio::time::timeout_at(until, self.rslock.acquire(key, TTL)).await {
                    Ok(guard) => Some(Held::Rslock(guard?)),
                    Err(_) => None,
                }
            }
            Contender::AsyncRedisLock => {
                // Polls every 100 ms (its default) until the timeout.
                let options = async_redis_lock::Options::new()
                    .ttl(TTL)
                    .timeout(Some(remaining));
                match self.arl.acquire_with_options(&options, key).await {
                    Ok(lock) => Some(Held::Arl(lock)),
                    Err(async_redis_lock::Error::Timeout) => None,
                    Err(err) => return Err(err.into()),
                }
            }
            other => return Err(format!("{} has no hot-key waiter", other.id()).into()),
        };
        Ok(held)
    }

    /// Acquires lock `id` for the watchdog scenario (ttl 3 s, renewed every second).
    pub(crate) async fn acquire_renewed(
        &self,
        contender: Contender,
        client: &LockClient,
        id: u64,
        ttl: Duration,
    ) -> BenchResult<Held> {
        match contender {
            Contender::Api => {
                let guard = lock_runtime::Lock::new(key_of(id))
                    .ttl(ttl)
                    .wait(Duration::ZERO)
                    .client(client)
                    .acquire()
                    .await?;
                Ok(Held::Ours(guard))
            }
            Contender::AsyncRedisLock => {
                let options = async_redis_lock::Options::new()
                    .ttl(ttl)
                    .extend(ttl / 3)
                    .timeout(Some(Duration::ZERO));
                Ok(Held::Arl(
                    self.arl.acquire_with_options(&options, key_of(id)).await?,
                ))
            }
            other => Err(format!("{} has no watchdog", other.id()).into()),
        }
    }
}

impl Held {
    /// Releases the lock (owner-checked for every contender).
    pub(crate) async fn release(self) -> BenchResult<()> {
        match self {
            Held::Ours(guard) => {
                guard.release().await?;
            }
            Held::Rslock(guard) => guard.release().await,
            Held::Arl(lock) => lock.release().await?,
        }
        Ok(())
    }

    /// Whether the holder was told its lease was lost.
    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Held::Ours(guard) => guard.is_lost(),
            Held::Rslock(_) => false,
            Held::Arl(lock) => lock.is_lost(),
        }
    }
}
