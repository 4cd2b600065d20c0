//! Extending a held lease by hand ([`LockGuard::extend`](crate::LockGuard::extend),
//! [`ReadGuard::extend`](crate::ReadGuard::extend),
//! [`SemaphoreGuard::extend`](crate::SemaphoreGuard::extend)): one path for the lock's
//! lease, a reader's share and a semaphore's permit.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::{LockError, LostCause};
use crate::lease::validity;
use crate::options::MAX_TTL;
use crate::queue::redis_queue::release::{Expiry, extend_lease};
use crate::renewal::watchdog::LeaseHandle;
use crate::scripts::KeyNames;

/// A guard's lease, as its extension needs it.
pub(crate) struct Held<'a> {
    pub(crate) client: &'a LockClient,
    /// The key the lease keeps: the lock's, the reader's share, the semaphore's.
    pub(crate) leased: &'a KeyNames,
    /// The key the application named, for errors and logs.
    pub(crate) key: &'a str,
    pub(crate) token: &'a str,
    pub(crate) lease: &'a LeaseHandle,
    /// Re-entered: its outer guard owns the lease.
    pub(crate) reentrant: bool,
}

/// [`extend`] for a guard (`$guard`) with the fields `client`, `names` (the key the
/// application named), `token`, `lease` and `valid_until`, whose lease keeps `$leased`.
macro_rules! extend_guard {
    ($guard:expr, $leased:expr, $reentrant:expr, $ttl:expr) => {
        $crate::primitives::extend::extend(
            $crate::primitives::extend::Held {
                client: &$guard.client,
                leased: $leased,
                key: $guard.names.lock(),
                token: &$guard.token,
                lease: &$guard.lease,
                reentrant: $reentrant,
            },
            $ttl,
            &mut $guard.valid_until,
        )
    };
}
pub(crate) use extend_guard;

/// Extends `held`'s lease to `ttl` from now (the key's expiry in Redis never shrinks) and
/// moves `valid_until` to the new validity point; see [`LockGuard::extend`] for the errors.
///
/// [`LockGuard::extend`]: crate::LockGuard::extend
pub(crate) async fn extend(
    held: Held<'_>,
    ttl: Duration,
    valid_until: &mut Instant,
) -> Result<(), LockError> {
    if held.reentrant || ttl < Duration::from_millis(1) || ttl > MAX_TTL {
        return Err(LockError::config(format!(
            "cannot extend lock `{}` to {ttl:?}: {}",
            held.key,
            if held.reentrant {
                "this guard re-entered a lock its task already holds; extend the outer guard"
            } else {
                "give a ttl from 1 ms to 365 days"
            }
        )));
    }
    let sent = Instant::now();
    let watchdog = held.client.watchdog();
    let grow = (ttl, Expiry::Grow);
    let extended = match extend_lease(held.client, held.leased, held.token, grow).await {
        Err(err @ (LockError::NotReplicated { .. } | LockError::NotDurable { .. })) => {
            // Not counted, but the primary took it: a shorter ttl holds from now on.
            watchdog.shorten(held.lease.id, ttl, sent);
            *valid_until = (*valid_until).min(validity(sent, ttl));
            return Err(err);
        }
        extended => extended?,
    };
    if !extended || !watchdog.extend(held.lease.id, ttl, sent) {
        found_lost(&held);
        return Err(LockError::Lost {
            key: held.key.to_owned(),
            cause: LostCause::TokenGone,
        });
    }
    *valid_until = validity(sent, ttl);
    Ok(())
}

/// Counts the loss an extension found, once: not when the watchdog reported this lease
/// lost already, and the lease leaves the watchdog's schedule so that its next renewal
/// does not report it again. The guard reads as lost from now on.
fn found_lost(held: &Held<'_>) {
    let on_schedule = held.client.watchdog().remove(held.lease.id).is_some();
    let reported = matches!(
        held.lease.lost.reported(),
        Some(LostCause::TokenGone | LostCause::RenewalFailed)
    );
    if on_schedule || !reported {
        tracing::warn!(key = %held.key, "lock lost: extending found the token gone");
        let cause = LostCause::TokenGone;
        held.client.telemetry().lost(held.key, cause);
        held.lease.lost.set(cause);
    }
}
