//! The holder a waiter sees when its wait runs out: one look at the key, so that the
//! [`LockError::Timeout`] names who held it, for how long, and what to do.

use std::time::Duration;

use crate::error::LockError;
use crate::identity::SeenHolder;
use crate::ops::inspect::LockState;
use crate::ops::inspect_names;
use crate::scripts::KeyNames;
use crate::topology::reach::Reach;

/// How long the look may take: past it the error goes without the holder.
const LOOK_BOUND: Duration = Duration::from_millis(250);

/// `err`, with the holder of `names` when it is a [`LockError::Timeout`] that names none
/// (one read-only look at the key through `reach`, at most [`LOOK_BOUND`]; the error stays
/// as it is when the look fails or the key is free by then).
pub(crate) async fn with_holder(reach: &Reach, names: &KeyNames, err: LockError) -> LockError {
    let LockError::Timeout {
        key,
        waited,
        holder: None,
    } = err
    else {
        return err;
    };
    LockError::Timeout {
        key,
        waited,
        holder: seen_holder(reach, names).await.map(Box::new),
    }
}

/// The holder of `names` that has held longest, as one read-only look at the key through
/// `reach` sees it (at most [`LOOK_BOUND`]); `None` when the look fails or the key is free.
pub(crate) async fn seen_holder(reach: &Reach, names: &KeyNames) -> Option<SeenHolder> {
    let look = tokio::time::timeout(LOOK_BOUND, inspect_names(reach, names)).await;
    look.ok()
        .and_then(Result::ok)
        .as_ref()
        .and_then(oldest_holder)
}

/// The holder of `state` that has held longest (a semaphore's or a read lock's oldest;
/// a mutex's only one).
fn oldest_holder(state: &LockState) -> Option<SeenHolder> {
    let seen = state.holders.iter().map(|holder| {
        let identity = holder.identity();
        SeenHolder {
            token: holder.token.clone(),
            held_for: identity
                .process()
                .map(|process| process.age(state.server_time)),
            since_renewal: holder.since_renewal(),
            identity,
        }
    });
    seen.max_by_key(|holder| holder.held_for)
}
