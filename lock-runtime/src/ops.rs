//! What an operator does to locks from outside their holders: look at a key, end a hold.
//! The calls go to the deployment's server (`inspect`, `force_release`), or in Redlock
//! mode to every master (`majority`).

pub(crate) mod force_release;
pub(crate) mod inspect;
mod majority;
pub(crate) mod seen_holder;

use crate::client::LockClient;
use crate::error::LockError;
use crate::scripts::KeyNames;
use crate::topology::reach::Reach;
use force_release::{CheckedRelease, ForcedRelease, ReleaseCheck, force_release_on};
use inspect::{LockState, inspect_on};

impl LockClient {
    /// What `key` holds now: the holder's token and remaining ttl (or a hand-over in
    /// progress), the fence counter, and the processes waiting in the key's Redis queue,
    /// with when each arrived and until when its place is kept. One read-only script call
    /// in the key's cluster slot; nothing in Redis changes.
    ///
    /// In Redlock mode every master is read at once: [`LockState::masters`] has each
    /// master's own state, and the holder is the token a majority of them hold (its ttl,
    /// how long a majority still holds it); fewer masters answering than a majority is
    /// [`LockError::NoQuorum`]. It lists no waiters there: Redlock's waiters do not queue
    /// in Redis (each subscribes on the masters and tries again when woken), so no master
    /// knows of them, and a `force_release` wakes them by its message instead of granting
    /// the key to one.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Config, LockClient};
    ///
    /// let client = LockClient::new(Config::single("redis://127.0.0.1:6379"))?;
    /// let state = client.inspect("stock:42").await?;
    /// if let Some(holder) = state.holder() {
    ///     println!("held by {} for {:?} more; {} waiting", holder.token, holder.ttl, state.queued);
    /// }
    /// println!("{state}");
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<LockState, LockError> {
        inspect_names(self.reach(), &self.key_names(key)?).await
    }

    /// Takes the lock `key` away from whoever holds it, for an operator (a holder stuck in
    /// a long call, a forgotten key of another client): deletes the key, and wakes its
    /// queue as a release does, so the first waiting process gets the lock now instead of
    /// at its next look. Returns what it removed and whom it woke; a free key is left
    /// free (its queue is still woken).
    ///
    /// The old holder is told at once, once its process has renewed a lease (a hold older
    /// than a third of its ttl, as a stuck one is): the release publishes to its process,
    /// which ends the lease with
    /// [`LostCause::ForceReleased`](crate::LostCause::ForceReleased) and WARNs naming the
    /// releaser. A younger hold, or one in a cluster (whose sharded channels the release
    /// cannot reach), finds the token gone at its next renewal (within a third of its ttl:
    /// [`LostCause::TokenGone`](crate::LostCause::TokenGone)). A guarded body with
    /// [`OnLost::Cancel`](crate::OnLost::Cancel) then stops at its next await point and returns
    /// [`LockError::Lost`]. Until then it still believes it holds the lock: use
    /// [fencing](crate::Lock::fencing) where that matters. A key that holds another Redis
    /// type is refused ([`LockError::InvalidKey`]) and left alone.
    ///
    /// In Redlock mode it releases the lock on every master at once (the holders removed
    /// anywhere are listed once); fewer masters answering than a majority is
    /// [`LockError::NoQuorum`] (those that answered were cleared).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Config, LockClient};
    ///
    /// let client = LockClient::new(Config::single("redis://127.0.0.1:6379"))?;
    /// let released = client.force_release("report:nightly").await?;
    /// println!("{released}");
    /// # Ok(()) }
    /// ```
    ///
    /// It takes any string key (another client's lock too); [`force_release_checked`]
    /// refuses keys that are not this crate's locks unless told otherwise, and
    /// [`force_release_if`] takes a lock only from the holder an operator looked at.
    ///
    /// [`force_release_checked`]: Self::force_release_checked
    /// [`force_release_if`]: Self::force_release_if
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease, LockError> {
        let check = ReleaseCheck::new().foreign(true);
        match self.force_release_checked(key, &check).await? {
            CheckedRelease::Released(release) => Ok(release),
            // Without an expected token every check passes but the key's type.
            CheckedRelease::NotHolder { key, .. } => Ok(ForcedRelease::nothing(key)),
        }
    }

    /// Takes the lock `key` away as [`force_release`](Self::force_release) does, but only
    /// while `token` holds it (the lock's holder, a reader of a read-write lock or a
    /// permit of a semaphore: the token [`inspect`](Self::inspect) showed), checked in
    /// the same script call that takes it, so a lock that changed hands since is left to
    /// its new holder: [`CheckedRelease::NotHolder`] says who that is. A key that is not
    /// one of this crate's locks (a string whose value is no token of ours, such as
    /// another client's lock) is refused with [`LockError::InvalidKey`] and left alone;
    /// [`force_release_checked`](Self::force_release_checked) with
    /// [`ReleaseCheck::foreign`] takes it.
    ///
    /// In Redlock mode each master checks the token itself: the lock is taken on every
    /// master where `token` holds it, and the outcome is `Released` when any did.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{CheckedRelease, Config, LockClient};
    ///
    /// let client = LockClient::new(Config::single("redis://127.0.0.1:6379"))?;
    /// let state = client.inspect("report:nightly").await?;
    /// if let Some(stuck) = state.holder() {
    ///     match client.force_release_if("report:nightly", &stuck.token).await? {
    ///         CheckedRelease::Released(released) => println!("{released}"),
    ///         CheckedRelease::NotHolder { holders, .. } => {
    ///             println!("it changed hands: {} holder(s) now", holders.len())
    ///         }
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_release_if(
        &self,
        key: &str,
        token: &str,
    ) -> Result<CheckedRelease, LockError> {
        let check = ReleaseCheck::new().if_holder(token);
        self.force_release_checked(key, &check).await
    }

    /// Takes the lock `key` away as [`force_release`](Self::force_release) does, once
    /// `check` passes (in the same script call): by default the key must be one of this
    /// crate's locks ([`LockError::InvalidKey`] otherwise, nothing changed); with
    /// [`ReleaseCheck::if_holder`] a given token must hold it
    /// ([`CheckedRelease::NotHolder`] otherwise, nothing changed).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// use lock_runtime::{Config, LockClient, ReleaseCheck};
    ///
    /// let client = LockClient::new(Config::single("redis://127.0.0.1:6379"))?;
    /// // A lock a Python service took with redis-py: not one of ours, taken on purpose.
    /// let check = ReleaseCheck::new().foreign(true);
    /// println!("{}", client.force_release_checked("billing:run", &check).await?);
    /// # Ok(()) }
    /// ```
    pub async fn force_release_checked(
        &self,
        key: &str,
        check: &ReleaseCheck,
    ) -> Result<CheckedRelease, LockError> {
        let names = self.key_names(key)?;
        let ask = |connection| force_release_on(self, &names, check, connection);
        self.reach().ask_each(names.lock(), ask).await
    }
}

/// What the lock `names` holds now, as `reach` finds it (see [`LockClient::inspect`]).
pub(crate) async fn inspect_names(reach: &Reach, names: &KeyNames) -> Result<LockState, LockError> {
    let ask = |connection| inspect_on(names, connection);
    reach.ask_each(names.lock(), ask).await
}
