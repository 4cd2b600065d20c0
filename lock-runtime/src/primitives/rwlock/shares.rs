//! A reader's share of a read-write lock in Redis: its key's name, and the calls that take,
//! give back and release it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LockError, ReleaseOutcome};
use crate::lease::{Token, validity};
use crate::lease_parts::LeaseParts;
use crate::options::LockOptions;
use crate::primitives::guard::outcome_of;
use crate::queue::redis_queue::release::{RELEASE_BUDGET, RELEASE_TRIES};
use crate::scripts::{KeyNames, invoke_granting};
use crate::scripts::{ShareNames, read_call, read_release_call};

/// One call of rw_read.lua: 1 taken, 0 the quick path is closed, -1 `gate` no longer holds
/// the key; `NotReplicated` (the share given back) when grants wait for replicas and too
/// few confirmed it. On independent masters (Redlock) the call goes to every master, and
/// the share is taken when a majority took it within its lease's validity; else what some
/// took is given back, and the quick path counts as closed (or the gate as lost).
pub(super) async fn take_share(
    parts: &Arc<LeaseParts>,
    names: &KeyNames,
    shares: &ShareNames,
    share: &KeyNames,
    token: &str,
    options: &LockOptions,
    gate: &str,
) -> Result<i64, LockError> {
    let call = read_call((names, shares, share), token, options.ttl, gate);
    let replicas = (parts.reach().replicas(), names.lock());
    let sent = Instant::now();
    let ask = |mut connection| {
        let call = &call;
        async move { invoke_granting::<i64>(call, replicas, &mut connection).await }
    };
    let (mut answers, quorum) = (parts.reach()).answers(names.lock(), ask).await?;
    parts.reach().mark_answered();
    if quorum == 1
        && answers.len() == 1
        && let Some(Some((taken, shortfall))) = answers.pop()
    {
        if let Some(shortfall) = shortfall.filter(|_| taken == 1) {
            // Not counted: given back (the wait tries again), or left to expire by its ttl.
            if let Err(err) = give_share_back(parts, names, share, token).await {
                tracing::warn!(key = %names.lock(), error = %err, "undoing a share the replicas did not confirm failed; it expires by its ttl");
            }
            return Err(shortfall);
        }
        return Ok(taken);
    }
    let granted = answers
        .iter()
        .filter(|answer| matches!(answer, Some((1, _))))
        .count();
    if granted >= quorum && Instant::now() < validity(sent, options.ttl) {
        return Ok(1);
    }
    if (granted > 0 || answers.iter().any(Option::is_none))
        && let Err(err) = give_share_back(parts, names, share, token).await
    {
        tracing::debug!(key = %names.lock(), error = %err, "giving back a share no majority took failed; it expires by its ttl");
    }
    Ok(if gate.is_empty() { 0 } else { -1 })
}

/// One call of rw_read_release.lua: 1 released, 0 the share was gone, -1 another token's.
/// On independent masters, on every master: released when a majority released it (a
/// master that failed it for a passing reason is asked again in the background).
pub(super) async fn give_share_back(
    parts: &Arc<LeaseParts>,
    names: &KeyNames,
    share: &KeyNames,
    token: &str,
) -> Result<i64, LockError> {
    let shares = ShareNames::of(names);
    let call = || {
        read_release_call(
            (names, &shares, share),
            token,
            parts.reach().publish_command(),
        )
    };
    (parts.reach()).release_with(names.lock(), call).await
}

/// Gives a share back, trying again after transient errors like a release does, for at
/// most [`RELEASE_BUDGET`] (the share then ends by its ttl).
pub(super) async fn release_share(
    parts: &Arc<LeaseParts>,
    names: &KeyNames,
    share: &KeyNames,
    token: &str,
) -> Result<ReleaseOutcome, LockError> {
    let give_up = Instant::now() + RELEASE_BUDGET;
    let mut pause = Duration::from_millis(25);
    let mut last = None;
    for _ in 0..RELEASE_TRIES {
        match tokio::time::timeout_at(give_up, give_share_back(parts, names, share, token)).await {
            Ok(Ok(reply)) => return Ok(outcome_of(reply)),
            Ok(Err(err)) => last = Some(err),
            Err(_) => break,
        }
        if Instant::now() + pause >= give_up {
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(400));
    }
    Err(match last {
        Some(LockError::Backend { key, source }) => LockError::ReleaseGaveUp { key, source },
        Some(other) => other,
        None => LockError::ReleaseGaveUp {
            key: names.lock().to_owned(),
            source: Arc::new(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "giving a reader's share back: Redis did not answer in time",
            ))),
        },
    })
}

/// Gives a share back in the background, or synchronously when the runtime drops that
/// (shutting down): the share key is released like a lock key; its entry in the set of
/// readers is tidied by the next reader or writer. A failure is logged when `warn`.
pub(super) fn release_in_background(
    parts: &Arc<LeaseParts>,
    names: &Arc<KeyNames>,
    share: &Arc<KeyNames>,
    token: Token,
    warn: bool,
) {
    let (parts, names, share) = (parts.clone(), names.clone(), share.clone());
    let leftover = crate::renewal::shutdown::Leftover::lock(&share, &token);
    let shutdown = parts.shutdown_state().clone();
    shutdown.give_back_in_background(leftover, async move {
        let released = release_share(&parts, &names, &share, &token).await;
        if let (Err(err), true) = (released, warn) {
            tracing::warn!(key = %names.lock(), error = %err.cause(), "giving a read share back on drop failed; it expires by its ttl");
        }
    });
}
