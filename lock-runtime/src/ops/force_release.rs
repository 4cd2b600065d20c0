//! An operator takes a lock away from whoever holds it ([`LockClient::force_release`]):
//! the key is deleted and its queue woken as a release would, and the old holder learns
//! at its next renewal that its lease is lost.

use std::fmt;

use crate::connection::Connection;
use crate::identity::Seconds;
use crate::ops::inspect::{Holder, holders, not_a_lock};
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
    /// Nothing was taken from `key`, nobody woken.
    pub(crate) fn nothing(key: String) -> Self {
        ForcedRelease {
            key,
            removed: Vec::new(),
            handover_restarted: false,
            woken: None,
            granted: false,
        }
    }

    /// Whether a hold was taken away.
    pub fn removed_any(&self) -> bool {
        !self.removed.is_empty()
    }
}

/// What an operator's release checks before it takes a lock away
/// ([`LockClient::force_release_checked`]): by default, that the key is one of this
/// crate's locks; optionally, that a given token still holds it.
///
/// ```
/// use lock_runtime::ReleaseCheck;
///
/// // Only while the holder the operator looked at still holds it.
/// let check = ReleaseCheck::new().if_holder("lr-5f1d0c3e9a7b4c2d8e6f0a1b2c3d4e5f");
/// // Another client's lock (redis-py, redsync): its token is not one of ours.
/// let foreign = ReleaseCheck::new().foreign(true);
/// # let _ = (check, foreign);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleaseCheck {
    if_holder: Option<String>,
    foreign: bool,
}

impl ReleaseCheck {
    /// Takes the lock away whoever holds it, if it is one of this crate's locks.
    pub fn new() -> Self {
        ReleaseCheck::default()
    }

    /// Takes the lock away only while `token` holds it: the lock's holder, a reader of a
    /// read-write lock or a permit of a semaphore (the token [`LockClient::inspect`]
    /// showed). Otherwise nothing changes and [`CheckedRelease::NotHolder`] says who
    /// holds it now.
    pub fn if_holder(mut self, token: impl Into<String>) -> Self {
        self.if_holder = Some(token.into());
        self
    }

    /// Takes the key away too when it is not one of this crate's locks: a string whose
    /// value is not a token of ours (`lr-…`; a permit's `permit:lr-…`), such as another
    /// client's lock, or a key that is no lock at all. Without it such a key is refused
    /// with [`LockError::InvalidKey`] and left alone. A key of another Redis type is
    /// always refused.
    pub fn foreign(mut self, foreign: bool) -> Self {
        self.foreign = foreign;
        self
    }
}

/// What [`LockClient::force_release_checked`] and [`LockClient::force_release_if`] did.
///
/// `Display` prints it for a person: a [`ForcedRelease`]'s line, or
///
/// ```text
/// not released stock:42: lr-5f1d0c3e9a7b4c2d8e6f0a1b2c3d4e5f holds no part of it; now holder lr-a1b2c3d4e5f60718293a4b5c6d7e8f90 (ttl 29.874s left)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckedRelease {
    /// The checks passed: the lock was taken away, as [`LockClient::force_release`] does.
    Released(ForcedRelease),
    /// The token of [`ReleaseCheck::if_holder`] holds no part of the key: nothing changed.
    NotHolder {
        /// The Redis key (the client's key prefix included).
        key: String,
        /// The token that was expected to hold it.
        token: String,
        /// Who holds it now (empty: nobody, or a hand-over is in progress).
        holders: Vec<Holder>,
    },
}

impl CheckedRelease {
    /// What was taken away, if the checks passed.
    pub fn released(&self) -> Option<&ForcedRelease> {
        match self {
            CheckedRelease::Released(release) => Some(release),
            CheckedRelease::NotHolder { .. } => None,
        }
    }
}

/// Takes the lock `names` away on the server behind `connection`, as `check` allows.
pub(crate) async fn force_release_on(
    client: &LockClient,
    names: &KeyNames,
    check: &ReleaseCheck,
    mut connection: Connection,
) -> Result<CheckedRelease, LockError> {
    let shares = ShareNames::of(names);
    let expected = check.if_holder.as_deref().unwrap_or("");
    let call = force_release_call(
        names,
        &shares,
        client.reach().publish_command(),
        (expected, check.foreign),
        client.parts().tokens().releaser(),
    );
    let (removed, pttl, woken, granted, others, verdict): ForceReply =
        invoke(&call, &mut connection)
            .await
            .map_err(|err| LockError::backend(names.lock(), err))?;
    let key = names.lock();
    match verdict {
        OTHER_TYPE => return Err(refuse_other_type(&mut connection, key).await),
        FOREIGN => return Err(refuse_foreign(key, removed.as_deref(), &others)),
        NOT_HOLDER => {
            let (holders, _) = holders(removed, pttl, others);
            let token = expected.to_owned();
            let key = key.to_owned();
            return Ok(CheckedRelease::NotHolder {
                key,
                token,
                holders,
            });
        }
        _ => {}
    }
    let (removed, handover_restarted) = holders(removed, pttl, others);
    for holder in &removed {
        tracing::info!(
            key = %key,
            token = %holder.token,
            "lock force-released by an operator: its holder loses it at its next renewal"
        );
    }
    Ok(CheckedRelease::Released(ForcedRelease {
        key: key.to_owned(),
        removed,
        handover_restarted,
        woken,
        granted: granted == 1,
    }))
}

/// force_release.lua's verdicts other than "taken away": the key holds another type, the
/// expected token holds no part of it, it is not one of our locks.
const OTHER_TYPE: i64 = 3;
const NOT_HOLDER: i64 = 4;
const FOREIGN: i64 = 5;

/// The error for `key`, which holds a string that is no token of ours (`value`), or
/// permits whose tokens are not ours.
fn refuse_foreign(key: &str, value: Option<&str>, others: &[(String, String, i64)]) -> LockError {
    let what = match value {
        Some(value) => format!("the key holds `{}`", shorten(value)),
        None => {
            let tokens: Vec<&str> = others.iter().map(|(token, ..)| token.as_str()).collect();
            format!("the key's holders are {}", tokens.join(", "))
        }
    };
    LockError::InvalidKey {
        key: key.to_owned(),
        reason: format!(
            "{what}, not a token of this crate's (`lr-…`): another client's lock, or no \
             lock at all; check the key's name and the client's key prefix, or force it \
             (`ReleaseCheck::foreign`, `lockctl release --force`)"
        ),
    }
}

/// At most 60 characters of a foreign value, for a message.
fn shorten(value: &str) -> String {
    match value.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &value[..at]),
        None => value.to_owned(),
    }
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
/// granted outright, the readers or permits removed, and the verdict.
type ForceReply = (
    Option<String>,
    i64,
    Option<String>,
    i64,
    Vec<(String, String, i64)>,
    i64,
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
            write!(f, "removed {}", Left(holder))?;
        }
        match (&self.woken, self.granted) {
            (Some(waiter), true) => write!(f, "; granted to waiter {waiter}"),
            (Some(waiter), false) => write!(f, "; handed over to waiter {waiter}"),
            (None, _) => f.write_str("; no waiter"),
        }
    }
}

impl fmt::Display for CheckedRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (key, token, holders) = match self {
            CheckedRelease::Released(release) => return release.fmt(f),
            CheckedRelease::NotHolder {
                key,
                token,
                holders,
            } => (key, token, holders),
        };
        write!(f, "not released {key}: {token} holds no part of it; now ")?;
        if holders.is_empty() {
            f.write_str("nobody holds it")?;
        }
        for (index, holder) in holders.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", Left(holder))?;
        }
        Ok(())
    }
}

/// A holder with its lease left: `holder lr-… (ttl 9.874s left)`.
struct Left<'a>(&'a Holder);

impl fmt::Display for Left<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Left(holder) = self;
        write!(f, "{} {}", holder.kind.role(), holder.token)?;
        match holder.ttl {
            Some(ttl) => write!(f, " (ttl {} left)", Seconds(ttl)),
            None => f.write_str(" (no expiry)"),
        }
    }
}
