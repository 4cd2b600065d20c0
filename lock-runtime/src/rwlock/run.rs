//! The run path of a read-write lock's guarded bodies, reader's or writer's.

use super::*;

/// What [`run_held`] needs of a guard, reader's or writer's.
pub(super) trait Held {
    fn current(&self) -> CurrentLock;
    fn is_reentrant(&self) -> bool;
    fn key(&self) -> &str;
    fn lost(&self) -> impl Future<Output = LostCause>;
    fn release(self) -> impl Future<Output = Result<ReleaseOutcome, LockError>>;
}

impl Held for ReadGuard {
    fn current(&self) -> CurrentLock {
        ReadGuard::current(self)
    }
    fn is_reentrant(&self) -> bool {
        ReadGuard::is_reentrant(self)
    }
    fn key(&self) -> &str {
        ReadGuard::key(self)
    }
    fn lost(&self) -> impl Future<Output = LostCause> {
        ReadGuard::lost(self)
    }
    fn release(self) -> impl Future<Output = Result<ReleaseOutcome, LockError>> {
        ReadGuard::release(self)
    }
}

impl Held for LockGuard {
    fn current(&self) -> CurrentLock {
        LockGuard::current(self)
    }
    fn is_reentrant(&self) -> bool {
        LockGuard::is_reentrant(self)
    }
    fn key(&self) -> &str {
        LockGuard::key(self)
    }
    fn lost(&self) -> impl Future<Output = LostCause> {
        LockGuard::lost(self)
    }
    fn release(self) -> impl Future<Output = Result<ReleaseOutcome, LockError>> {
        LockGuard::release(self)
    }
}

/// Runs `body` under an acquired guard, as [`Lock::run`] does: the lock error instead of
/// the body, the body stopped on a loss (with [`OnLost::Cancel`]), the release after it, and
/// a loss the release found reported.
pub(super) async fn run_held<G, F, T, E>(
    acquired: Result<G, LockError>,
    on_lost: OnLost,
    body: F,
) -> Result<T, E>
where
    G: Held,
    F: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let guard = match acquired {
        Ok(guard) => guard,
        Err(err) => return Err(err.into()),
    };
    if guard.is_reentrant() {
        return body.await;
    }
    let current = guard.current();
    let outcome = match on_lost {
        OnLost::Continue => Ok(context::hold(current.clone(), body).await),
        _ => {
            // Pinned here: moved into `until_lost`, a nested body would double its size.
            let body = context::hold(current.clone(), body);
            tokio::pin!(body);
            crate::lost_signal::until_lost(body, || current.lost_cause(), guard.lost())
                .await
                .map_err(|cause| LockError::Lost {
                    key: guard.key().to_owned(),
                    cause,
                })
        }
    };
    if let Err(LockError::Lost { key, cause }) = &outcome {
        tracing::info!(key = %key, %cause, "the lease was lost: the guarded body was stopped");
    }
    if let Err(err) = guard.release().await {
        tracing::warn!(key = %err.key(), error = %err.cause(), "releasing the lock failed");
    }
    let outcome = match (outcome, current.lost_cause()) {
        (Ok(_), Some(cause)) if on_lost != OnLost::Continue => Err(LockError::Lost {
            key: current.key().to_owned(),
            cause,
        }),
        (outcome, _) => outcome,
    };
    outcome.unwrap_or_else(|err| Err(err.into()))
}
