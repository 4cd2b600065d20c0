//! The programmatic API: a lock built from a key and options, acquired into a guard.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use crate::guard::LockGuard;
use crate::scripts::{ACQUIRE, RELEASE};
use crate::watchdog::{millis, validity};
use crate::{LockClient, LockError};

/// What happens when the lease is lost while a guarded body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Drop the body at its next await point and return [`LockError::Lost`].
    #[default]
    Cancel,
    /// Let the body finish; it can check `current_lock().is_lost()` or the guard.
    Continue,
}

/// How a lock behaves: lease, waiting, renewal, loss, fencing.
///
/// Defaults: `ttl` 30 s, `wait` 10 s, watchdog on, [`OnLost::Cancel`], no fencing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockOptions {
    /// The lease: how long Redis keeps the key without renewal.
    pub ttl: Duration,
    /// How long to wait for a held lock; zero tries once.
    pub wait: Duration,
    /// Renew the lease every `ttl/3` while held.
    pub watchdog: bool,
    /// What a guarded body does when the lease is lost.
    pub on_lost: OnLost,
    /// Issue a fencing token on every acquisition.
    pub fencing: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(10),
            watchdog: true,
            on_lost: OnLost::Cancel,
            fencing: false,
        }
    }
}

/// How long a fence counter outlives the last acquisition of its key.
///
/// Long enough that a stale holder's token is always compared against a newer counter;
/// after it, the counter is re-seeded from the server clock, which keeps tokens increasing.
pub const FENCE_COUNTER_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// The first pause between tries on a held lock; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// A distributed lock on one key: build it, then [`acquire`](Lock::acquire) a guard or
/// [`run`](Lock::run) a future under it.
///
/// This is what `#[distributed_lock]` expands to; use it directly for keys computed at run
/// time or for locks held across calls.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{Lock, LockError, ReleaseOutcome};
///
/// # async fn demo(order_id: u64) -> Result<(), LockError> {
/// let guard = Lock::new(format!("order:{order_id}"))
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// // ... the critical section ...
/// assert_eq!(guard.release().await?, ReleaseOutcome::Released);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Lock {
    key: String,
    options: LockOptions,
    client: Option<LockClient>,
}

enum Attempt {
    Acquired { fence: Option<u64> },
    Held { pttl: Duration },
}

impl Lock {
    /// A lock on `key` with default options, on the global client.
    pub fn new(key: impl Into<String>) -> Self {
        Lock {
            key: key.into(),
            options: LockOptions::default(),
            client: None,
        }
    }

    /// Sets the lease (default 30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    /// Sets how long to wait for a held lock (default 10 s; zero tries once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Turns renewal on or off (default on).
    pub fn watchdog(mut self, watchdog: bool) -> Self {
        self.options.watchdog = watchdog;
        self
    }

    /// Sets what [`run`](Lock::run) does when the lease is lost (default cancel).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.options.on_lost = on_lost;
        self
    }

    /// Issues a fencing token on every acquisition (default off).
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.options.fencing = fencing;
        self
    }

    /// Replaces all options at once.
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// Takes the lock through `client` instead of the global one.
    pub fn client(mut self, client: &LockClient) -> Self {
        self.client = Some(client.clone());
        self
    }

    /// The key as given (without the client's prefix).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    fn resolve_client(&self) -> Result<LockClient, LockError> {
        match &self.client {
            Some(client) => Ok(client.clone()),
            None => crate::client().cloned(),
        }
    }

    /// Acquires the lock, waiting up to `wait` while another owner holds it.
    ///
    /// Errors: [`LockError::Busy`] when held and `wait` is zero, [`LockError::Timeout`]
    /// when still held after `wait`, [`LockError::InvalidKey`] before any Redis traffic,
    /// [`LockError::Backend`] when Redis fails.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        let client = self.resolve_client()?;
        let key = client.redis_key(&self.key)?;
        let ttl = self.options.ttl;
        if ttl < Duration::from_millis(1) {
            return Err(LockError::Config {
                reason: format!(
                    "lock `{key}` has a ttl under 1 ms; give it a lease of at least 1ms"
                ),
            });
        }
        let fence_key = if self.options.fencing {
            Some(fence_key(&key)?)
        } else {
            None
        };
        let started = Instant::now();
        let deadline = started + self.options.wait;
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0u64;
        let mut late = false;
        loop {
            attempt += 1;
            let token = Uuid::new_v4().simple().to_string();
            let sent = Instant::now();
            let pttl = match try_acquire(&client, &key, fence_key.as_deref(), &token, ttl).await? {
                Attempt::Acquired { fence } if Instant::now() < validity(sent, ttl) => {
                    tracing::debug!(
                        key = %key,
                        waited_ms = started.elapsed().as_millis() as u64,
                        attempts = attempt,
                        "lock acquired"
                    );
                    return Ok(LockGuard::new(
                        client,
                        key,
                        token,
                        fence,
                        &self.options,
                        sent,
                    ));
                }
                Attempt::Acquired { .. } => {
                    // The reply came after the lease's validity point: it acquires nothing.
                    tracing::warn!(key = %key, "acquire reply arrived after the lease validity; retrying");
                    release_token(&client, &key, &token).await;
                    late = true;
                    Duration::ZERO
                }
                Attempt::Held { pttl } => pttl,
            };
            let now = Instant::now();
            if self.options.wait.is_zero() && !late {
                return Err(LockError::Busy { key });
            }
            if now >= deadline {
                return Err(LockError::Timeout {
                    key,
                    waited: now - started,
                });
            }
            let pause = jitter(backoff.min(pttl).max(Duration::from_millis(1))).min(deadline - now);
            tokio::time::sleep(pause).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Acquires the lock, runs `body`, and releases the lock, also when `body` returns an
    /// error, panics, or the returned future is dropped.
    ///
    /// On a lock error the body does not run and the error comes back as `E`. With
    /// [`OnLost::Cancel`], a lease lost while `body` runs drops `body` at its next await
    /// point and returns [`LockError::Lost`].
    pub async fn run<F, T, E>(&self, body: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let guard = match self.acquire().await {
            Ok(guard) => guard,
            Err(err) => return Err(err.into()),
        };
        let outcome = match self.options.on_lost {
            OnLost::Continue => Ok(body.await),
            _ => {
                tokio::pin!(body);
                tokio::select! {
                    biased;
                    result = &mut body => Ok(result),
                    cause = guard.lost() => Err(LockError::Lost { key: guard.key().to_owned(), cause }),
                }
            }
        };
        if let Err(err) = guard.release().await {
            // The body's outcome stands; the lease runs out by itself.
            tracing::warn!(key = %err.key(), error = %err, "releasing the lock failed");
        }
        outcome.unwrap_or_else(|err| Err(err.into()))
    }
}

/// One acquire round trip.
async fn try_acquire(
    client: &LockClient,
    key: &str,
    fence_key: Option<&str>,
    token: &str,
    ttl: Duration,
) -> Result<Attempt, LockError> {
    let mut invocation = ACQUIRE.key(key);
    if let Some(fence_key) = fence_key {
        invocation.key(fence_key);
    }
    invocation
        .arg(token)
        .arg(millis(ttl))
        .arg(millis(FENCE_COUNTER_LIFETIME.max(ttl * 2)));
    let (acquired, value): (i64, i64) = invocation
        .invoke_async(&mut client.connection())
        .await
        .map_err(|err| LockError::backend(key, err))?;
    let value = u64::try_from(value).unwrap_or(0);
    Ok(if acquired == 1 {
        Attempt::Acquired {
            fence: fence_key.map(|_| value),
        }
    } else {
        Attempt::Held {
            pttl: Duration::from_millis(value),
        }
    })
}

/// Compare-and-delete; 1 released, 0 gone, -1 another owner.
pub(crate) async fn release_script(
    client: &LockClient,
    key: &str,
    token: &str,
) -> Result<i64, LockError> {
    RELEASE
        .key(key)
        .arg(token)
        .invoke_async(&mut client.connection())
        .await
        .map_err(|err| LockError::backend(key, err))
}

/// Best-effort release of a token we should not keep (a late acquire reply).
async fn release_token(client: &LockClient, key: &str, token: &str) {
    if let Err(err) = release_script(client, key, token).await {
        tracing::warn!(key = %key, error = %err, "releasing a late acquisition failed; it expires by its ttl");
    }
}

/// The fence counter's key, in the lock key's cluster slot.
///
/// A key with a hash tag keeps it (the suffix does not change the slot); a key without one
/// is wrapped whole in braces, so its tag is the key itself. A key that contains `}` but no
/// valid tag cannot be wrapped and is refused for fencing.
pub(crate) fn fence_key(key: &str) -> Result<String, LockError> {
    if has_hash_tag(key) {
        return Ok(format!("{key}:fence"));
    }
    if key.contains('}') {
        return Err(LockError::InvalidKey {
            key: key.to_owned(),
            reason: "fencing needs the counter in the lock's cluster slot, which this key's \
                     `}` without a `{…}` hash tag prevents; remove the `}` or add a hash tag"
                .into(),
        });
    }
    Ok(format!("{{{key}}}:fence"))
}

/// Whether Redis Cluster would hash only part of `key` (a non-empty `{…}` section).
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

/// A pause between half and all of `pause`, so waiters do not retry in lockstep.
fn jitter(pause: Duration) -> Duration {
    pause.mul_f64(0.5 + fastrand::f64() * 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_key_shares_the_slot() {
        assert_eq!(fence_key("stock:1").unwrap(), "{stock:1}:fence");
        assert_eq!(fence_key("{shop}:1").unwrap(), "{shop}:1:fence");
        assert_eq!(fence_key("a{b").unwrap(), "{a{b}:fence");
        assert!(fence_key("a{}b}").is_err());
    }
}
