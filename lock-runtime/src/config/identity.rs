//! The name a client's processes go by ([`Config::service_name`]).

use crate::config::Config;

impl Config {
    /// The service this client's locks name as their holder (default: the running
    /// binary's name). Every token names its process's host, process id, service and the
    /// guarded function (or the builder's `file:line`) that asked for the key, so
    /// [`inspect`](crate::inspect), `lockctl` and a waiter's
    /// [`Timeout`](crate::LockError::Timeout) say who holds a key
    /// ([`Identity`](crate::Identity)); the client's Redis connections carry the same in
    /// their client name. Characters other than letters, digits and `._-:<>+` become `_`;
    /// at most 64 are kept.
    ///
    /// ```
    /// let config = lock_runtime::Config::single("redis://127.0.0.1:6379").service_name("shop");
    /// # let _ = config;
    /// ```
    pub fn service_name(mut self, service: impl Into<String>) -> Self {
        self.service_name = Some(service.into());
        self
    }
}
