//! Several keys at once, all or none: a transfer between two accounts locks both.

use std::borrow::Cow;
use std::future::Future;

use tokio::time::Instant;

use crate::context::{self, CurrentLock};
use crate::lock_order::OrderSpec;
use crate::options::{Explicit, Taker};
use crate::primitives::builder::{LockBuilder, LockSpec, with_client};
use crate::primitives::kind::KeySet;
use crate::{
    error::LockError, error::ReleaseOutcome, primitives::guard::LockGuard, primitives::lock::Lock,
};

/// Locks on several keys, taken all or none (Redisson's `MultiLock`, node-redlock's
/// resource arrays).
///
/// The keys are taken one after another in a canonical order (sorted, duplicates once), so
/// two callers that name the same keys in different orders never wait for each other in a
/// cycle. The options ([`LockBuilder`]'s setters, but the minimum hold) apply to each key;
/// `wait` bounds the whole acquisition. When a key
/// cannot be had in time, the keys already taken are released before the error returns.
/// In a cluster the keys may live in different slots: each is a lock of its own.
///
/// The attribute takes several keys as an array of templates and expands to
/// [`run`](MultiLock::run); two templates that render the same key lock it once:
///
/// ```no_run
/// use lock_runtime::{distributed_lock, LockError};
///
/// #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "10s")]
/// async fn transfer(from: u64, to: u64, amount: u64) -> Result<(), LockError> {
///     // both accounts are locked here, whichever order other callers name them in
///     Ok(())
/// }
/// ```
///
/// Or by hand, with a guard:
///
/// ```no_run
/// use std::time::Duration;
/// use lock_runtime::{LockError, MultiLock};
///
/// # async fn demo(from: u64, to: u64) -> Result<(), LockError> {
/// let both = MultiLock::new([format!("account:{from}"), format!("account:{to}")])
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// // ... move money from one account to the other ...
/// both.release().await?;
/// # Ok(()) }
/// ```
pub type MultiLock = LockBuilder<KeySet>;

/// The guards of a [`MultiLock`]: releasing (or dropping) it releases every key.
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiLock {
    /// Locks on `keys` with default options, on the global client.
    ///
    /// The line that calls this is the locks' call site in the reports of the lock-order
    /// check ([`Config::lock_order_check`](crate::Config::lock_order_check)), where each
    /// key is its own class.
    #[track_caller]
    pub fn new<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        keys.sort();
        keys.dedup();
        LockBuilder::of(KeySet {
            keys,
            classes: Vec::new(),
        })
    }

    /// Locks on each key of `keys`, known to the lock-order check by the class beside it
    /// (the attribute's template); a key named twice is locked once, with its first class.
    pub(crate) fn classed(mut keys: Vec<(String, &'static str)>) -> Self {
        // Stable: of two equal keys the first named stays.
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys.dedup_by(|later, first| later.0 == first.0);
        let (keys, classes) = keys.into_iter().unzip();
        LockBuilder {
            kind: KeySet { keys, classes },
            spec: LockSpec::default(),
        }
    }

    /// The keys, in the order they are taken.
    pub fn keys(&self) -> &[String] {
        &self.kind.keys
    }

    /// Takes every key, in order, within `wait` in all. On an error the keys already
    /// taken are released first; the error names the key that could not be had.
    pub async fn acquire(&self) -> Result<MultiGuard, LockError> {
        (self.spec.options).check_for(Taker::Several, &self.kind.keys.join(", "))?;
        let (client, this) = with_client(self, &self.kind.keys.join(", "))?;
        let options = &this.spec.options;
        let deadline = Instant::now() + options.wait.min(crate::primitives::lock::MAX_WAIT);
        let mut guards = Vec::with_capacity(self.kind.keys.len());
        for (at, key) in self.kind.keys.iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut lock = Lock::new(key.clone())
                .with_explicit_options(options.clone(), Explicit::ALL)
                .wait(left)
                .client(&client);
            // The keys are not held in the task while they are taken: no order among them.
            lock.spec.order = OrderSpec {
                class: (self.kind.classes.get(at))
                    .filter(|class| !class.is_empty())
                    .map(|class| Cow::Borrowed(*class)),
                site: self.spec.order.site,
            };
            match lock.acquire().await {
                Ok(guard) => guards.push(guard),
                Err(err) => {
                    release_all(guards).await;
                    return Err(err);
                }
            }
        }
        Ok(MultiGuard { guards })
    }

    /// Acquires every key, runs `body`, and releases every key, also when `body` returns an
    /// error, panics, or the returned future is dropped: [`Lock::run`] for several keys.
    ///
    /// On a lock error the body does not run (the keys taken so far are released first)
    /// and the error comes back as `E`. With [`OnLost::Cancel`](crate::OnLost::Cancel), a lease lost on *any* key
    /// while `body` runs drops `body` at its next await point and returns
    /// [`LockError::Lost`] naming that key; with [`OnLost::Continue`](crate::OnLost::Continue) the body finishes.
    /// A key whose release finds it gone or held by another owner is lost too, as with
    /// [`Lock::run`]: `Lost` with [`LostCause::FoundAtRelease`](crate::LostCause::FoundAtRelease) under `Cancel` (the body's
    /// effects may have happened), the body's result under `Continue`.
    ///
    /// Inside `body`, every key counts as held by this task: a nested lock on any of them
    /// is reentrant. [`crate::current_lock`] describes the last key in the canonical order
    /// (the one taken last, as if the keys were nested locks), and
    /// [`crate::current_locks`] lists them all.
    ///
    /// ```no_run
    /// use lock_runtime::{LockError, MultiLock};
    ///
    /// # async fn demo(from: u64, to: u64) -> Result<(), LockError> {
    /// MultiLock::new([format!("account:{from}"), format!("account:{to}")])
    ///     .run(async {
    ///         // ... move money from one account to the other ...
    ///         Ok::<(), LockError>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn run<F, T, E>(&self, body: F) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let span = tracing::debug_span!("distributed_lock", keys = ?self.kind.keys);
        self.run_under(|| self.acquire(), body, span)
    }
}

impl MultiGuard {
    /// The guard of each key, in the order they were taken.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Reports that the holder is making progress, on every key (see
    /// [`LockGuard::progress`]).
    pub fn progress(&self) {
        self.guards.iter().for_each(LockGuard::progress);
    }

    /// Releases every key (in reverse order); the first error, if any, after trying all.
    pub async fn release(self) -> Result<Vec<ReleaseOutcome>, LockError> {
        let mut outcomes = Vec::with_capacity(self.guards.len());
        let mut first_error = None;
        for guard in self.guards.into_iter().rev() {
            match guard.release().await {
                Ok(outcome) => outcomes.push(outcome),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        first_error.map_or(Ok(outcomes), Err)
    }
}

/// Gives back the keys a failed acquisition took (a failed release leaves a key to its
/// ttl, and is logged by the guard).
async fn release_all(guards: Vec<LockGuard>) {
    for guard in guards.into_iter().rev() {
        if let Err(err) = guard.release().await {
            tracing::warn!(key = %err.key(), error = %err.cause(), "releasing a partial multi-lock failed");
        }
    }
}

impl crate::primitives::run_path::Held for MultiGuard {
    /// Every key's hold (as the body sees them), and those this call owns (a re-entered
    /// key's loss is its outer holder's to report).
    type LossWatch = (Vec<CurrentLock>, Vec<CurrentLock>);

    fn is_reentrant(&self) -> bool {
        false
    }

    fn watch(&self) -> Self::LossWatch {
        let owned = self
            .guards
            .iter()
            .filter(|guard| !guard.is_reentrant())
            .map(LockGuard::current)
            .collect();
        (self.guards.iter().map(LockGuard::current).collect(), owned)
    }

    fn hold<F: Future>(watch: &Self::LossWatch, body: F) -> impl Future<Output = F::Output> {
        context::hold_all(watch.0.clone(), body)
    }

    /// Resolves when the lease of any key this guard took is lost; never, while they are
    /// all held. Reentrant keys are watched by their outer holder.
    async fn lost(&self) -> LockError {
        let watched: Vec<_> = self
            .guards
            .iter()
            .filter(|guard| !guard.is_reentrant())
            .map(|guard| Box::pin(async move { (guard.key().to_owned(), guard.lost().await) }))
            .collect();
        if watched.is_empty() {
            return std::future::pending().await;
        }
        let ((key, cause), _, _) = futures_util::future::select_all(watched).await;
        LockError::Lost { key, cause }
    }

    type Released = Vec<ReleaseOutcome>;

    fn release(self) -> impl Future<Output = Result<Vec<ReleaseOutcome>, LockError>> {
        MultiGuard::release(self)
    }
}
