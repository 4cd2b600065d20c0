//! An operator takes a lock away from whoever holds it ([`LockClient::force_release`]):
//! the key is deleted and its queue woken as a release would, and the old holder learns
//! at its next renewal that its lease is lost.

use std::fmt;

use crate::connection::Connection;
use crate::ops::inspect::{Holder, Seconds, holders, not_a_lock};
use crate::scripts::ShareNames;
use crate::scripts::force_release_call;
use crate::scripts::{KeyNames, invoke};
use crate::{client::LockClient, error::LockError};

/// What [`LockClient::force_release`] removed, and whom it woke.
///
/// `Display` prints it for a person:
///
/// ```text
/// released stock:42: removed holder lr-5f1d0c3e9a7b4c2d8e6f0a1b2c3d4e5f (ttl 9.874s left); granted to waiter lr-a1b2c3d4e5f60718293a4b5c6d7e8f90
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ForcedRelease {
    /// The Redis key (the client's key prefix included).
    pub key: String,
    /// The holders whose hold was taken away (empty: the lock was free, or being handed
    /// over). Each learns at its next renewal that its lease is lost
    /// ([`LostCause::TokenGone`](crate::LostCause::TokenGone)).
    pub removed: Vec<Holder>,
    /// A hand-over to the first waiter was in progress and was started again.
    pub handover_restarted: bool,
    /// The waiter (its id in the queue) the lock went to, as a release gives it: granted
    /// outright, or handed over when it wants a fencing token.
    pub woken: Option<String>,
    /// The woken waiter was granted the lock outright (it confirms the grant at its next
    /// try); false for a hand-over.
    pub granted: bool,
}

impl ForcedRelease {
    /// Whether a hold was taken away.
    pub fn removed_any(&self) -> bool {
        !self.removed.is_empty()
    }
}

/// Takes the lock `names` away on the server behind `connection`.
pub(crate) async fn force_release_on(
    client: &LockClient,
    names: &KeyNames,
    mut connection: Connection,
) -> Result<ForcedRelease, LockError> {
    let shares = ShareNames::of(names);
    let call = force_release_call(names, &shares, client.publish_command());
    let (removed, pttl, woken, granted, others): ForceReply = invoke(&call, &mut connection)
        .await
        .map_err(|err| LockError::backend(names.lock(), err))?;
    if pttl == -3 {
        return Err(refuse_other_type(&mut connection, names.lock()).await);
    }
    let (removed, handover_restarted) = holders(removed, pttl, others);
    for holder in &removed {
        tracing::info!(
            key = %names.lock(),
            token = %holder.token,
            "lock force-released by an operator: its holder loses it at its next renewal"
        );
    }
    Ok(ForcedRelease {
        key: names.lock().to_owned(),
        removed,
        handover_restarted,
        woken,
        granted: granted == 1,
    })
}

/// The error for `key`, which a script found holding another type than a lock's: it
/// names the type (asked with `TYPE`).
async fn refuse_other_type(connection: &mut Connection, key: &str) -> LockError {
    let kind = redis::cmd("TYPE")
        .arg(key)
        .query_async::<String>(connection)
        .await;
    match kind {
        Ok(kind) => not_a_lock(key, &kind),
        Err(err) => LockError::backend(key, err),
    }
}

/// The script's reply: what the key held, its PTTL, the waiter woken, whether it was
/// granted outright, and the readers or permits removed.
type ForceReply = (
    Option<String>,
    i64,
    Option<String>,
    i64,
    Vec<(String, String, i64)>,
);

/// Takes the lock `key` away from whoever holds it, on the global client: see
/// [`LockClient::force_release`].
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// let released = lock_runtime::force_release("report:nightly").await?;
/// if !released.removed_any() {
///     println!("nobody held it");
/// }
/// # Ok(()) }
/// ```
pub async fn force_release(key: &str) -> Result<ForcedRelease, LockError> {
    crate::client::client()?.force_release(key).await
}

impl fmt::Display for ForcedRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "released {}: ", self.key)?;
        if self.removed.is_empty() {
            f.write_str(if self.handover_restarted {
                "nobody held it (a hand-over was in progress)"
            } else {
                "nobody held it"
            })?;
        }
        for (index, holder) in self.removed.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "removed {} {}", holder.kind.role(), holder.token)?;
            match holder.ttl {
                Some(ttl) => write!(f, " (ttl {} left)", Seconds(ttl))?,
                None => f.write_str(" (no expiry)")?,
            }
        }
        match (&self.woken, self.granted) {
            (Some(waiter), true) => write!(f, "; granted to waiter {waiter}"),
            (Some(waiter), false) => write!(f, "; handed over to waiter {waiter}"),
            (None, _) => f.write_str("; no waiter"),
        }
    }
}
