//! Where the examples keep their data (stock, counters, gifts): a plain Redis connection, or
//! a cluster connection in cluster mode. The data operations are deliberately separate
//! commands, not atomic scripts: only the lock keeps them right.

use redis::aio::{ConnectionLike as _, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult};

use crate::servers::{Mode, Servers};

/// A connection to the examples' data.
#[derive(Clone)]
pub enum Store {
    /// One server (in Redlock mode, the first master holds the data).
    Node(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Store {
    /// Connects to where `servers` keep data.
    pub async fn connect(servers: &Servers) -> RedisResult<Store> {
        Store::connect_urls(servers.mode, &servers.urls).await
    }

    /// Connects to `urls` in `mode` (for worker processes that were handed the URLs).
    pub async fn connect_urls(mode: Mode, urls: &[String]) -> RedisResult<Store> {
        match mode {
            Mode::Cluster => {
                let client = redis::cluster::ClusterClient::new(urls.to_vec())?;
                Ok(Store::Cluster(client.get_async_connection().await?))
            }
            Mode::Single | Mode::Redlock => {
                let url = urls
                    .first()
                    .map_or(lock_runtime::DEFAULT_REDIS_URL, String::as_str);
                let client = redis::Client::open(url)?;
                Ok(Store::Node(
                    client.get_multiplexed_async_connection().await?,
                ))
            }
        }
    }

    /// Runs one command.
    pub async fn query<T: FromRedisValue>(&self, command: &Cmd) -> RedisResult<T> {
        let value = match self {
            Store::Node(connection) => connection.clone().req_packed_command(command).await?,
            Store::Cluster(connection) => connection.clone().req_packed_command(command).await?,
        };
        redis::from_redis_value(value).map_err(Into::into)
    }

    /// `GET key` as a number; `None` when the key does not exist.
    pub async fn get(&self, key: &str) -> RedisResult<Option<i64>> {
        self.query(redis::cmd("GET").arg(key)).await
    }

    /// `SET key value`.
    pub async fn set(&self, key: &str, value: i64) -> RedisResult<()> {
        self.query(redis::cmd("SET").arg(key).arg(value)).await
    }

    /// `INCR key`, the new value.
    pub async fn incr(&self, key: &str) -> RedisResult<i64> {
        self.query(redis::cmd("INCR").arg(key)).await
    }

    /// `DEL key...`.
    pub async fn del(&self, keys: &[&str]) -> RedisResult<()> {
        for key in keys {
            // One key per command: in a cluster the keys may sit in different slots.
            self.query::<i64>(redis::cmd("DEL").arg(*key)).await?;
        }
        Ok(())
    }
}
