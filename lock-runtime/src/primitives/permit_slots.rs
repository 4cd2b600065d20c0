//! A semaphore's permit on a quorum of independent masters (Redlock). On one node the
//! permits are members of the semaphore's key, taken in the key's queue. Across
//! independent masters no single order of holders exists, and a majority's count of
//! members would not bound them (2 permits on 3 masters: three holders, each counted by
//! two masters, fill every master's 2). There each permit is one of `permits` numbered
//! slots, and a slot is a Redlock lock of its own: a holder holds a slot on a majority, two
//! majorities share a master, which grants a slot to one holder only, so never more than
//! `permits` hold at once. A try asks for the slots in turn (from a random one) and takes
//! the first a majority grants; the slots' releases are announced on the semaphore's
//! channel, where its waiters listen.

use std::sync::Arc;

use tokio::time::Instant;

use crate::client::LockClient;
use crate::error::LockError;
use crate::lease::Token;
use crate::primitives::builder::LockSpec;
use crate::queue::quorum_wait;
use crate::scripts::KeyNames;
use crate::topology::redlock::{Masters, Redlock};

/// Takes one of the `permits` slots of the semaphore `names` on a majority of the masters
/// within `window`: the slot's names, the token and when its round was sent.
pub(crate) async fn take_slot(
    client: &LockClient,
    (names, permits): (&KeyNames, u32),
    spec: &LockSpec,
    redlock: &Redlock,
    window: (Instant, Instant),
) -> Result<(Arc<KeyNames>, Token, Instant), LockError> {
    let options = &spec.options;
    let mut slots: Vec<KeyNames> = (0..permits).map(|index| names.slot(index)).collect();
    let masters = Masters {
        nodes: client.reach().nodes(),
        shutdown: client.shutdown_state(),
        interrupt: client.interrupt(),
        long_wait: client.telemetry().long_wait(),
        tokens: (client.parts().tokens(), &spec.order.site),
        telemetry: client.telemetry(),
    };
    let keys = (names, &slots[..]);
    let (index, token, taken) =
        quorum_wait::acquire_any(masters, redlock, keys, options, window).await?;
    Ok((Arc::new(slots.swap_remove(index)), token, taken.sent))
}
