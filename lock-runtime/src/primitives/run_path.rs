//! The one run path of guarded bodies (`Lock::run`, the attribute, `RwLock::run_read` and
//! `run_write`, `Semaphore::run`, `MultiLock::run`): the lock error instead of the body,
//! the body described by [`crate::current_lock`] while it runs and stopped at a loss (with
//! [`OnLost::Cancel`]), the release after it, and a loss the release found reported.

use std::future::Future;

use crate::error::{LockError, ReleaseOutcome};
use crate::options::OnLost;
use crate::primitives::held_lease::HeldLease;
use crate::renewal::lost_signal::until_lost;

/// What the run path needs of a hold: a lock's, a reader's, a permit's, or several locks'.
pub(crate) trait Held: Sized {
    /// What tells of the hold's loss, kept past its release.
    type LossWatch: LossWatch;

    /// An outer holder in this task owns the lock: the body runs as it is, and the loss
    /// is the outer holder's to report.
    fn is_reentrant(&self) -> bool;

    /// The watch over this hold's loss.
    fn watch(&self) -> Self::LossWatch;

    /// `body`, with [`crate::current_lock`] describing the hold `watch` watches inside it.
    fn hold<F: Future>(watch: &Self::LossWatch, body: F) -> impl Future<Output = F::Output>;

    /// Resolves when the hold is lost, with the error that says so.
    fn lost(&self) -> impl Future<Output = LockError>;

    /// What the release reports.
    type Released;

    /// Gives the hold back.
    fn release(self) -> impl Future<Output = Result<Self::Released, LockError>>;
}

/// Tells whether a hold is lost now (told, or past its validity point by the clock).
pub(crate) trait LossWatch {
    /// The loss as the error a stopped body returns, if the hold is lost.
    fn lost_now(&self) -> Option<LockError>;
}

/// Runs `body` in `span` under what `acquire()` takes (see the module's docs).
///
/// A front returns this future itself (it is no `async fn` of its own): each future that
/// holds a body as an argument holds it again, and nested guarded bodies would double their
/// size per level (`mutation_gaps`'s nested bodies overflowed their stack). The acquire is
/// made inside, so that its future is not kept beside the body's.
///
/// The span covers the body only, so that the application's events in it say which lock
/// they ran under; the lock's own events (acquired, released, lost) stay outside it and
/// name the key themselves: once per line.
pub(crate) async fn run_held<H, A, F, T, E>(
    acquire: impl FnOnce() -> A,
    on_lost: OnLost,
    body: F,
    span: tracing::Span,
) -> Result<T, E>
where
    H: Held,
    A: Future<Output = Result<H, LockError>>,
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let body = tracing::Instrument::instrument(body, span);
    let held = match acquire().await {
        Err(err) => return Err(err.into()),
        Ok(held) if held.is_reentrant() => return body.await,
        Ok(held) => held,
    };
    let watch = held.watch();
    // The body ends (is dropped) here, before the release: a body stopped by a loss takes
    // no step while its lock is given back.
    let outcome = {
        let body = H::hold(&watch, body);
        // Pinned here: moved into `until_lost`, a nested body would double its size.
        tokio::pin!(body);
        match on_lost {
            OnLost::Continue => Ok(body.await),
            _ => until_lost(body, || watch.lost_now(), held.lost()).await,
        }
    };
    if let Err(LockError::Lost { key, cause }) = &outcome {
        tracing::info!(key = %key, %cause, "the lease was lost: the guarded body was stopped");
    }
    if let Err(err) = held.release().await {
        // The body's outcome stands; the lease runs out by itself.
        tracing::warn!(key = %err.key(), error = %err.cause(), "giving the lock back failed");
    }
    // A loss the release found (or one reported after the body ended) is a loss like one
    // found while the body ran; the body's effects may have happened.
    match (outcome, watch.lost_now()) {
        (Ok(_), Some(lost)) if on_lost != OnLost::Continue => Err(lost.into()),
        (outcome, _) => outcome.unwrap_or_else(|err| Err(err.into())),
    }
}

impl LossWatch for crate::context::CurrentLock {
    fn lost_now(&self) -> Option<LockError> {
        let cause = self.lost_cause()?;
        Some(LockError::Lost {
            key: self.key().to_owned(),
            cause,
        })
    }
}

/// Several holds (a multi-lock's): every one, and those whose loss is this call's to report.
impl LossWatch
    for (
        Vec<crate::context::CurrentLock>,
        Vec<crate::context::CurrentLock>,
    )
{
    fn lost_now(&self) -> Option<LockError> {
        self.1.iter().find_map(LossWatch::lost_now)
    }
}

/// A guard of one lease (a lock's, a reader's share, a permit): what the run path needs of
/// it beyond its [`HeldLease`]. Each such guard is [`Held`] through it, with the
/// [`CurrentLock`](crate::context::CurrentLock) a body sees as its watch.
pub(crate) trait OneLease: Sized {
    /// The lease the guard holds.
    fn held_lease(&self) -> &HeldLease;

    /// What a guarded body sees of the hold through [`crate::current_lock`].
    fn current_lock(&self) -> crate::context::CurrentLock;

    /// Gives the hold back (the guard's `release`).
    fn give_back(self) -> impl Future<Output = Result<ReleaseOutcome, LockError>>;
}

impl<G: OneLease> Held for G {
    type LossWatch = crate::context::CurrentLock;

    fn is_reentrant(&self) -> bool {
        self.held_lease().reentrant
    }

    fn watch(&self) -> Self::LossWatch {
        self.current_lock()
    }

    fn hold<F: Future>(watch: &Self::LossWatch, body: F) -> impl Future<Output = F::Output> {
        crate::context::hold_all([watch.clone()], body)
    }

    async fn lost(&self) -> LockError {
        let lease = self.held_lease();
        let cause = lease.lost().await;
        LockError::Lost {
            key: lease.key().to_owned(),
            cause,
        }
    }

    type Released = ReleaseOutcome;

    fn release(self) -> impl Future<Output = Result<ReleaseOutcome, LockError>> {
        self.give_back()
    }
}
