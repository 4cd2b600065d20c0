//! The script calls that give back, pass on, re-date or leave a lock, and the retrying
//! they share.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::lease::Token;
use crate::renewal::shutdown::Shutdown;
use crate::scripts::renew_call;
use crate::scripts::{KeyNames, LEAVE, invoke, invoke_granting, queue_call};
use crate::topology::one_node::{Waiters, after_lost_reply};
use crate::topology::reach::Reach;

/// Compare-and-delete that wakes the next waiter; 1 released, 0 gone, -1 another owner.
///
/// A release that fails on a transient or connection error is tried again: compare-and-
/// delete makes a repeat harmless, and a lock left to its ttl would stall every waiter.
/// It gives up at the lease's validity point `valid_until` (after it the key expires by
/// itself) and after [`RELEASE_BUDGET`] at most, whichever comes first.
pub(crate) async fn release_script(
    reach: &Reach,
    names: &KeyNames,
    token: &str,
    valid_until: Instant,
) -> Result<i64, LockError> {
    release_contended(reach, names, token, valid_until, Waiters::Unknown).await
}

/// [`release_script`] by a holder that knows what `waiters` says.
pub(crate) async fn release_contended(
    reach: &Reach,
    names: &KeyNames,
    token: &str,
    valid_until: Instant,
    waiters: Waiters,
) -> Result<i64, LockError> {
    let (reply, reply_lost) = retrying(
        names,
        "release",
        (valid_until, reach.keeps_deadlines()),
        |until, now| reach.release(names, (token, waiters), (until, now)),
    )
    .await?;
    Ok(after_lost_reply(names, reply, reply_lost))
}

/// Makes `call` again after a transient or connection error, for the calls whose repeat is
/// harmless (a release, a waiter leaving the queue), until `valid_until` and for
/// [`RELEASE_BUDGET`] at most; one try at least.
/// Returns the reply and whether an earlier try lost its reply (it may have run: the
/// reply then answers a repeat).
/// Each try is given the time it must end by and the clock's reading:
/// with `bounded`, the call's requests end by then themselves
/// ([`crate::connection::Connection::until`]), so no timer of its own is set for it.
pub(super) async fn retrying<T, F, Fut>(
    names: &KeyNames,
    what: &str,
    (valid_until, bounded): (Instant, bool),
    mut call: F,
) -> Result<(T, bool), LockError>
where
    F: FnMut(Instant, Instant) -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let mut now = Instant::now();
    let give_up = valid_until
        .min(now + RELEASE_BUDGET)
        .max(now + MIN_RELEASE_TRY);
    let mut pause = Duration::from_millis(25);
    let mut last = None;
    let mut reply_lost = false;
    for _ in 0..RELEASE_TRIES {
        let outcome = if bounded {
            call(give_up, now).await
        } else {
            match tokio::time::timeout_at(give_up, call(give_up, now)).await {
                Ok(outcome) => outcome,
                Err(_) => break,
            }
        };
        match outcome {
            Err(err) if err.is_transient() || err.is_connection() => {
                tracing::debug!(key = %names.lock(), error = %err.cause(), "{what} failed; trying again");
                reply_lost |= err.reply_lost();
                last = Some(err);
                if Instant::now() + pause >= give_up {
                    break;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(400));
                now = Instant::now();
            }
            outcome => return outcome.map(|reply| (reply, reply_lost)),
        }
    }
    Err(gave_up(names, what, last))
}

/// The one outcome of a release or leave that ran out of time, whatever transient error it
/// met last (kept as the source): the lease (or the queue place) then ends by itself.
pub(super) fn gave_up(names: &KeyNames, what: &str, last: Option<LockError>) -> LockError {
    let source = match last {
        Some(LockError::Backend { source, .. } | LockError::ReleaseGaveUp { source, .. }) => source,
        _ => Arc::new(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what}: Redis did not answer before the lease could end by itself"),
        ))),
    };
    LockError::ReleaseGaveUp {
        key: names.lock().to_owned(),
        source,
    }
}

/// The longest a release (a dropped waiter's leave, a reader's share) keeps trying.
pub(crate) const RELEASE_BUDGET: Duration = Duration::from_secs(2);

/// A release past its lease's validity point is still tried once, this long at most: the
/// key may outlive the local validity by the drift margin.
pub(super) const MIN_RELEASE_TRY: Duration = Duration::from_millis(50);

/// How many times a release (a dropped waiter's leave, a reader's share) is tried at most.
pub(crate) const RELEASE_TRIES: u32 = 8;

pub(crate) async fn leave_queue(
    reach: &Reach,
    names: &KeyNames,
    token: &str,
) -> Result<(), LockError> {
    invoke::<i64>(
        &queue_call(&LEAVE, names, token, reach.publish_command()),
        &mut reach.connection(),
    )
    .await
    .map(|_| ())
    .map_err(|err| LockError::backend(names.lock(), err))
}

/// Best-effort release of a token we should not keep (a late acquire reply).
pub(super) async fn release_token(reach: &Reach, names: &KeyNames, token: &str) {
    let give_up = Instant::now() + RELEASE_BUDGET;
    if let Err(err) = release_script(reach, names, token, give_up).await {
        tracing::warn!(key = %names.lock(), error = %err.cause(), "releasing a late acquisition failed; it expires by its ttl");
    }
}

/// Whether an owner-checked `PEXPIRE` may shorten the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Only lengthen it ([`GROW_ONLY`](crate::scripts::GROW_ONLY)): an extension, which a
    /// renewal in flight may reach the server after.
    Grow,
    /// Set it as asked: the give-back of a lock with a minimum hold ahead, which leaves the
    /// key only for what is left of the hold.
    Set,
}

/// An owner-checked `PEXPIRE` of the key to `ttl`: on the one server, or on every Redlock
/// master (true when a majority still held the token). When grants wait for replicas, an
/// extension too few replicas confirmed is [`LockError::NotReplicated`].
pub(crate) async fn extend_lease(
    reach: &Reach,
    names: &KeyNames,
    token: &str,
    (ttl, expiry): (Duration, Expiry),
) -> Result<bool, LockError> {
    let call = renew_call(names, token, ttl, expiry == Expiry::Grow);
    if reach.replicas().is_some() {
        // Never with Redlock (refused when the client is built): one primary.
        let replicas = (reach.replicas(), names.lock());
        let (renewed, shortfall): (i64, _) =
            invoke_granting(&call, replicas, &mut reach.connection()).await?;
        if let Some(shortfall) = shortfall.filter(|_| renewed == 1) {
            return Err(shortfall);
        }
        return Ok(renewed == 1);
    }
    let (mut nodes, quorum) = reach.step_nodes();
    let replies =
        futures_util::future::join_all(nodes.iter_mut().map(|node| invoke::<i64>(&call, node)))
            .await;
    let extended = replies
        .iter()
        .filter(|reply| matches!(reply, Ok(1)))
        .count();
    if extended >= quorum {
        return Ok(true);
    }
    match replies.into_iter().find_map(Result::err) {
        Some(err) if extended == 0 && quorum == 1 => Err(LockError::backend(names.lock(), err)),
        _ => Ok(false),
    }
}

/// Ends a hold that must keep the key until `until` (its minimum hold): instead of deleting
/// the key, an owner-checked `PEXPIRE` to what is left of the hold ([`extend_lease`]), so
/// that other owners find it held until then. Tried again like a release, until
/// `valid_until` (within the release budget). When the token is gone, the release script
/// says whether the key is free or another owner's (it never deletes theirs). Replies as
/// the release script does: 1 kept, 0 already expired, -1 another owner's.
pub(crate) async fn keep_until(
    reach: &Reach,
    names: &KeyNames,
    token: &str,
    until: Instant,
    valid_until: Instant,
) -> Result<i64, LockError> {
    let (kept, _) = retrying(
        names,
        "keeping the key for its minimum hold",
        (valid_until, false),
        |_, _| {
            let left = until
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            extend_lease(reach, names, token, (left, Expiry::Set))
        },
    )
    .await?;
    if kept {
        return Ok(1);
    }
    release_contended(reach, names, token, valid_until, Waiters::Unknown).await
}

/// Gives back through `reach`, in the background of `shutdown`, a lock `token` may still
/// hold: a lease the watchdog gave up on (renewals failing past its validity), which may
/// still be in Redis.
pub(crate) fn give_back(
    (reach, shutdown): (&Arc<Reach>, &Arc<Shutdown>),
    names: &KeyNames,
    token: &str,
) {
    let (reach, names, token) = (reach.clone(), Arc::new(names.clone()), Token::from(token));
    let leftover = crate::renewal::shutdown::Leftover::lock(&names, &token);
    shutdown.give_back_in_background(leftover, async move {
        release_token(&reach, &names, &token).await;
    });
}
