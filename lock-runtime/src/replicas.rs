//! Grants that wait for replicas ([`crate::Config::wait_for_replicas`]): the rule that a
//! write granting or extending a lease counts only once `WAIT n timeout`, sent right after
//! it on the same connection, reports `n` replicas.
//!
//! Redis replicates asynchronously, so a grant the primary made just before it died can be
//! missing on the replica promoted in its place, and a second client then takes the lock.
//! `WAIT` counts the writes of the connection it is sent on (up to that connection's last
//! write), so it must follow the write on that connection, not travel on another one: a bare
//! `WAIT` on a separate connection answers at once whatever the lag. Here the write and the
//! `WAIT` go out as one pipeline, which a multiplexed connection writes in one piece, so the
//! two are adjacent on one socket and reach the same server (the one that took the write:
//! never a replica, which would have refused the write first). In a cluster, a pipeline goes
//! to the node of its first keyed command; `WAIT` has no key and rides along.
//!
//! Redlock masters have no replicas: the option is refused there. `WAITAOF` (Redis 7.2, the
//! local fsync count) is not offered: the servers this is tested against (Redis 7.0) do not
//! have it, and an option that was never run is not offered.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisResult};

use crate::error::LockError;

/// How many replicas must confirm a grant, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    count: u32,
    timeout: Duration,
}

impl Replicas {
    /// The rule, or `None` (off) for zero replicas.
    pub(crate) fn new(count: u32, timeout: Duration) -> Option<Self> {
        (count > 0).then_some(Replicas { count, timeout })
    }

    /// Refuses settings that cannot work, before any traffic: a zero timeout (`WAIT 0`
    /// blocks for ever), one the client's response timeout would cut short, and Redlock.
    pub(crate) fn check(&self, response_timeout: Duration, redlock: bool) -> Result<(), LockError> {
        let reason = if redlock {
            "wait_for_replicas does not apply to Redlock: its masters are independent and have \
             no replicas to wait for; leave it off (a majority of masters is the Redlock \
             answer to a lost master)"
                .to_owned()
        } else if self.timeout < Duration::from_millis(1) {
            "wait_for_replicas needs a timeout of at least 1 ms (WAIT with 0 blocks for ever)"
                .to_owned()
        } else if self.timeout >= response_timeout {
            format!(
                "wait_for_replicas waits up to {:?}, but a request may take only {:?} \
                 (response_timeout): give WAIT a shorter timeout or raise response_timeout",
                self.timeout, response_timeout
            )
        } else {
            return Ok(());
        };
        Err(LockError::Config { reason })
    }

    /// The `WAIT` that follows a write.
    pub(crate) fn wait_command(&self) -> Cmd {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.count).arg(crate::lease::millis(self.timeout));
        wait
    }

    /// Whether `WAIT`'s answer (the number of replicas that have the write) is enough.
    pub(crate) fn confirmed(&self, answer: i64) -> bool {
        answer >= i64::from(self.count)
    }

    /// The error of a grant that `answer` replicas confirmed, too few.
    pub(crate) fn shortfall(&self, key: &str, answer: i64) -> LockError {
        LockError::NotReplicated {
            key: key.to_owned(),
            confirmed: u32::try_from(answer.max(0)).unwrap_or(u32::MAX),
            needed: self.count,
            timeout: self.timeout,
        }
    }

    /// `write` followed by this rule's `WAIT`, as one pipeline: its reply reads as the
    /// write's reply and how many replicas have it, `(T, i64)`.
    pub(crate) fn pipeline(&self, write: &Cmd) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.add_command(write.clone())
            .add_command(self.wait_command());
        pipe
    }

    /// Sends `write` and this rule's `WAIT` as one pipeline on `connection`: the write's
    /// reply, and how many replicas have it.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        write: &Cmd,
        connection: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<(T, i64)> {
        self.pipeline(write).query_async(connection).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_replicas_is_off_and_the_answer_is_always_checked() {
        assert_eq!(Replicas::new(0, Duration::from_millis(50)), None);
        let rule = Replicas::new(2, Duration::from_millis(50)).unwrap();
        assert!(!rule.confirmed(0));
        assert!(!rule.confirmed(1));
        assert!(rule.confirmed(2));
        assert!(rule.confirmed(3));
        let err = rule.shortfall("k", 1);
        assert!(err.to_string().contains("1 of the 2 replicas"), "{err}");
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let second = Duration::from_secs(1);
        let rule = |ms| Replicas::new(1, Duration::from_millis(ms)).unwrap();
        assert!(rule(50).check(second, false).is_ok());
        assert!(rule(0).check(second, false).is_err());
        assert!(rule(1000).check(second, false).is_err());
        assert!(rule(50).check(second, true).is_err());
    }
}
