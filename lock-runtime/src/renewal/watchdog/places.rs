//! Queue places: a waiter's place in a key's queue, which its process keeps alive while
//! the waiter waits (one keep-alive call per key, or the client's liveness key), so that a
//! process that dies or stops loses its places within one queue lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::connection::Connection;
use crate::lease::Token;
use crate::scripts::{KeyNames, QUEUE_LEASE, invoke, keepalive_call};

/// A waiter's place in a key's queue, kept alive while the waiter waits.
pub(super) struct QueuePlace {
    pub(super) names: Arc<KeyNames>,
    pub(super) token: Token,
    /// Kept by a keep-alive of its key even where the client has a liveness key: its entry
    /// names none and lives by its deadline (cluster mode before the slot map was read,
    /// see [`crate::renewal::liveness::Liveness::key_for`]).
    pub(super) per_key: bool,
}

/// One keep-alive call: a key's queue and the places this process keeps in it.
pub(super) struct KeepAlive {
    pub(super) names: Arc<KeyNames>,
    pub(super) tokens: Vec<Token>,
}

/// How often queue places are kept alive: three times per queue lease, so that one lost
/// or late keep-alive does not cost a live waiter its place.
pub(super) const KEEPALIVE_EVERY: Duration =
    Duration::from_millis(QUEUE_LEASE.as_millis() as u64 / 3);

/// The places, one keep-alive call per key.
pub(super) fn group_places<'a>(places: impl Iterator<Item = &'a QueuePlace>) -> Vec<KeepAlive> {
    let mut by_key: HashMap<&str, KeepAlive> = HashMap::new();
    for place in places {
        by_key
            .entry(place.names.lock())
            .or_insert_with(|| KeepAlive {
                names: place.names.clone(),
                tokens: Vec::new(),
            })
            .tokens
            .push(place.token.clone());
    }
    by_key.into_values().collect()
}

/// Keeps queue places alive: one script call per key, all in flight at once on the
/// multiplexed connection. A failure is only logged: the next keep-alive comes a third of
/// a queue lease later, and a place that lapses costs its waiter its turn, never safety.
pub(super) async fn keep_places(connection: Connection, places: Vec<KeepAlive>) {
    join_all(places.iter().map(|place| {
        let mut connection = connection.clone();
        async move {
            let names = &place.names;
            let call = keepalive_call(names, place.tokens.iter().map(|token| &**token));
            if let Err(err) = invoke::<i64>(&call, &mut connection).await {
                tracing::debug!(key = %place.names.lock(), error = %err, "keeping queue places alive failed");
            }
        }
    }))
    .await;
}
