//! The steps of a deployment whose keys each live on one node (a single server, the
//! primary Sentinel names, the cluster node that serves the key's slot): a release and a
//! retake are one script call there, on a connection of the client's pool.

use std::time::Duration;

use crate::connection::Connection;
use crate::error::LockError;
use crate::lease::Token;
use crate::options::{LockOptions, fence_lifetime};
use crate::replicas::Replicas;
use crate::scripts::{
    ASK_FULL_RELEASE, KeyNames, Requeue, full_release_call, invoke_granting, invoke_noting_repeat,
    release_call, retake_call, short_release_call,
};

/// What a release knows of the key's waiters, which picks the form of its script call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiters {
    /// None: a lock's holder that took the key with nobody queued, and no task of its
    /// process behind it. The short form goes first; the full one follows only when the
    /// short one asks for it.
    NoneKnown,
    /// Perhaps some, or not a lock holder's token (a permit, a grant given back): the
    /// full form.
    Unknown,
    /// The key was contended during the hold: the full form, which may leave the key free
    /// for this foreign window when the key's schedule says one is due, and ends the
    /// schedule when nobody waits any more.
    Contended(Duration),
}

/// A release's (or a yield's) script reply, judged knowing whether an earlier send of it
/// lost its reply (`lost`: a dropped connection, a time-out). That send may have released
/// the key itself: a later one that finds it gone (0), or taken by the next holder already
/// (-1), cannot tell that release from a loss, and counts it as the release it most likely
/// was (1). A loss during the hold is the renewals' to find.
pub(crate) fn after_lost_reply(names: &KeyNames, reply: i64, lost: bool) -> i64 {
    if lost && reply <= 0 {
        tracing::debug!(key = %names.lock(), reply, "release sent again after a lost reply; counted as released");
        return 1;
    }
    reply
}

/// One send of the release of `token`'s lock on `connection`, in the form `waiters`
/// picks (`publish`: the command that announces it). 1 released, 0 gone, -1 another
/// owner's.
pub(crate) async fn release(
    mut connection: Connection,
    names: &KeyNames,
    (token, waiters): (&str, Waiters),
    publish: &'static str,
) -> Result<i64, LockError> {
    let mut lost = false;
    let call = match waiters {
        Waiters::Contended(window) => {
            let nobody = Requeue {
                token: Token::from(""),
                ttl: Duration::ZERO,
                window,
            };
            release_call(names, token, publish, &nobody, None)
        }
        Waiters::Unknown => full_release_call(names, token, publish),
        Waiters::NoneKnown => {
            // The short form, which an uncontended key's release needs; the full form
            // follows only when it asks for it.
            let (reply, repeated): (i64, bool) =
                invoke_noting_repeat(&short_release_call(names, token), &mut connection)
                    .await
                    .map_err(|err| LockError::backend(names.lock(), err))?;
            if reply != ASK_FULL_RELEASE {
                return Ok(after_lost_reply(names, reply, repeated));
            }
            lost = repeated;
            full_release_call(names, token, publish)
        }
    };
    let (reply, repeated): (i64, bool) = invoke_noting_repeat(&call, &mut connection)
        .await
        .map_err(|err| LockError::backend(names.lock(), err))?;
    // Left free for a foreign window: released. (A release without a requeue never keeps
    // the key: 1, 3, 0 or -1 only.)
    let reply = if reply == 3 { 1 } else { reply };
    Ok(after_lost_reply(names, reply, repeated || lost))
}

/// Re-dates the lock `token` holds on `connection` for a task of its process that takes
/// it over (see [`Reach::retake`](super::reach::Reach::retake)); when
/// grants wait for `replicas`, a re-dating too few of them confirmed is their error.
pub(crate) async fn retake(
    mut connection: Connection,
    replicas: Option<&Replicas>,
    names: &KeyNames,
    token: &str,
    options: &LockOptions,
) -> Result<Option<Option<u64>>, LockError> {
    let call = retake_call(names, token, options.ttl, fence_lifetime(options));
    let ((taken, fence), shortfall): ((i64, i64), _) =
        invoke_granting(&call, (replicas, names.lock()), &mut connection).await?;
    if let Some(shortfall) = shortfall.filter(|_| taken == 1) {
        return Err(shortfall);
    }
    Ok((taken == 1).then(|| options.fencing.then(|| u64::try_from(fence).unwrap_or(0))))
}
