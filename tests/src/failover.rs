//! What the three failover trials share (one server and its replica behind proxies,
//! Sentinel, a cluster shard): the tally of their outcomes and the helpers that report and
//! wait.

use std::time::Duration;

use lock_runtime::{LockError, LostCause};

use crate::RedisServer;

/// What the failovers of one trial came to.
#[derive(Debug, Default)]
pub struct Tally {
    /// Failovers run.
    pub failovers: usize,
    /// The kill until the deployment named the new primary, per failover.
    pub took: Vec<Duration>,
    /// The first client was told it holds the key.
    pub first_granted: usize,
    /// The second client was granted the key while the first still believed it held it.
    pub double_grants: usize,
    /// The first holder had been told of the loss before the second's grant (no overlap).
    pub told_before_the_second: usize,
    /// How the first holder learned of the loss, and how long after the second's grant
    /// (just after it, for those told before).
    pub lost: Vec<(LostCause, Duration)>,
    /// The first holder was never told.
    pub never_told: usize,
    /// What refused the first client (not granted).
    pub first_refused: Vec<String>,
    /// What the second client got when it was not granted.
    pub second_refused: Vec<String>,
    /// After the old primary rejoined, the second client took and released the key.
    pub after_rejoin: usize,
    /// Times a sentinel had pointed the replica past the link and it was put back.
    pub relinked: usize,
}

/// An error's kind, as the tallies count it.
pub fn kind(err: &LockError) -> String {
    match err {
        LockError::NotReplicated {
            confirmed, needed, ..
        } => format!("NotReplicated ({confirmed} of {needed})"),
        LockError::Backend { .. } => format!(
            "Backend ({})",
            std::error::Error::source(err).map_or(String::new(), ToString::to_string)
        ),
        other => format!("{other:?}")
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The items counted: "3x A; 1x B".
pub fn summary(mut items: Vec<String>) -> String {
    items.sort();
    let mut counted: Vec<(String, usize)> = Vec::new();
    for item in items {
        match counted.last_mut() {
            Some((last, count)) if *last == item => *count += 1,
            _ => counted.push((item, 1)),
        }
    }
    counted
        .iter()
        .map(|(item, count)| format!("{count}x {item}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `INFO section` of `server` (empty when it does not answer).
pub fn info(server: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut server.conn())
        .unwrap_or_default()
}
