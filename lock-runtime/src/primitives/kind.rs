//! What a [`LockBuilder`](crate::LockBuilder) locks, one kind per primitive, and which of
//! the options only some kinds take. [`Lock`](crate::Lock), [`RwLock`](crate::RwLock),
//! [`Semaphore`](crate::Semaphore), [`MultiLock`](crate::MultiLock) and
//! [`LockLayer`](crate::layer::LockLayer) are the builder over these kinds; an option a kind
//! does not take is not there to call.

#[cfg(feature = "tower")]
use std::fmt;
#[cfg(feature = "tower")]
use std::sync::Arc;

/// One key, held by one owner at a time: a [`Lock`](crate::Lock).
#[derive(Debug, Clone)]
pub struct Exclusive {
    pub(crate) key: String,
}

/// One key, shared by readers or held by one writer: an [`RwLock`](crate::RwLock).
#[derive(Debug, Clone)]
pub struct ReadWrite {
    pub(crate) key: String,
}

/// One key with a number of permits: a [`Semaphore`](crate::Semaphore).
#[derive(Debug, Clone)]
pub struct Permits {
    pub(crate) key: String,
    pub(crate) permits: u32,
}

/// Several keys, taken all or none in one order: a [`MultiLock`](crate::MultiLock).
#[derive(Debug, Clone)]
pub struct KeySet {
    /// Sorted, each once.
    pub(crate) keys: Vec<String>,
    /// The class of each key for the lock-order check, in the order of `keys` (none: each
    /// key is its class).
    pub(crate) classes: Vec<&'static str>,
}

/// The key a request names, locked while the request is served: a
/// [`LockLayer`](crate::layer::LockLayer).
#[cfg(feature = "tower")]
pub struct PerRequest<K> {
    /// Names the key of a request (`None`: no lock).
    pub(crate) key: Arc<K>,
}

#[cfg(feature = "tower")]
impl<K> Clone for PerRequest<K> {
    fn clone(&self) -> Self {
        PerRequest {
            key: Arc::clone(&self.key),
        }
    }
}

#[cfg(feature = "tower")]
impl<K> fmt::Debug for PerRequest<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerRequest").finish_non_exhaustive()
    }
}

/// The options an annotated function gives, before it is known which primitive takes
/// them (what `#[distributed_lock]` expands to; not a public API).
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct Attribute {
    /// The key templates as written: the lock-order check's classes.
    pub(crate) templates: &'static [&'static str],
    /// `client = ...` gave `None`: the call fails.
    pub(crate) client_unset: bool,
}

mod sealed {
    /// Implemented by the kinds of this module only.
    pub trait Sealed {}
}

/// A kind that locks one key, which [`LockBuilder::key`](crate::LockBuilder::key) returns.
pub trait OneKey: sealed::Sealed {
    /// The key as given (without the client's prefix).
    fn key(&self) -> &str;
}

/// A kind that takes a fencing token ([`LockBuilder::fencing`](crate::LockBuilder::fencing)):
/// every kind but a semaphore's permits, which have no fencing tokens.
pub trait TakesFence: sealed::Sealed {}

/// A kind whose key may be kept after its release, for a minimum hold that other replicas
/// of a scheduled job still find: a [`Lock`](crate::Lock).
pub trait TakesMinimumHold: sealed::Sealed {}

impl sealed::Sealed for Exclusive {}
impl sealed::Sealed for ReadWrite {}
impl sealed::Sealed for Permits {}
impl sealed::Sealed for KeySet {}
impl sealed::Sealed for Attribute {}
#[cfg(feature = "tower")]
impl<K> sealed::Sealed for PerRequest<K> {}

impl OneKey for Exclusive {
    fn key(&self) -> &str {
        &self.key
    }
}

impl OneKey for ReadWrite {
    fn key(&self) -> &str {
        &self.key
    }
}

impl OneKey for Permits {
    fn key(&self) -> &str {
        &self.key
    }
}

impl TakesFence for Exclusive {}
impl TakesFence for ReadWrite {}
impl TakesFence for KeySet {}
impl TakesFence for Attribute {}
#[cfg(feature = "tower")]
impl<K> TakesFence for PerRequest<K> {}

impl TakesMinimumHold for Exclusive {}
impl TakesMinimumHold for Attribute {}
