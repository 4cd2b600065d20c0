//! How the runtime reaches Redis.

use std::time::Duration;

/// The environment variable read when the global client is created without [`crate::init`].
pub const REDIS_URL_ENV: &str = "REDIS_URL";

/// The server used when neither [`crate::init`] nor `REDIS_URL` names one.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Where the locks live and how the connections behave.
///
/// ```
/// use std::time::Duration;
/// use lock_runtime::Config;
///
/// let config = Config::single("redis://127.0.0.1:6379")
///     .key_prefix("shop:")
///     .connect_timeout(Duration::from_secs(1));
/// # let _ = config;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    pub(crate) url: String,
    pub(crate) key_prefix: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

impl Config {
    /// One Redis server (or a primary), by URL: `redis://[user:pass@]host:port[/db]`.
    pub fn single(url: impl Into<String>) -> Self {
        Config {
            url: url.into(),
            key_prefix: String::new(),
            pool_size: 1,
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
        }
    }

    /// The server named by `REDIS_URL`, or [`DEFAULT_REDIS_URL`].
    pub fn from_env() -> Self {
        let url = std::env::var(REDIS_URL_ENV)
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned());
        Config::single(url)
    }

    /// Puts `prefix` in front of every lock key in Redis (none by default).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How many multiplexed connections to spread commands over (at least 1; default 1).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long one connection attempt may take before it fails (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its reply before it fails (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}
