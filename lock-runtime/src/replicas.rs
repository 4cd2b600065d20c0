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
//! Redlock masters have no replicas: the option is refused there.
//!
//! Durable grants ([`crate::Config::wait_for_aof`]) follow the same rule with `WAITAOF
//! numlocal numreplicas timeout` (Redis 7.2, Valkey 8) in place of `WAIT`: the write counts
//! once it is in the primary's own append-only file (when `numlocal` is 1) and in that of
//! `numreplicas` replicas.

use std::time::Duration;

use redis::{Cmd, FromRedisValue, ParsingError, RedisResult, ServerError, Value};

use crate::error::LockError;

/// What the rule's `WAIT` or `WAITAOF` after a write came to: its answer, or the server's
/// error reply to the command itself (the write went through). A server that refuses the
/// command cannot meet the rule: `WAITAOF` asking for the primary's own fsync under
/// `appendonly no`, a command the server lacks or an ACL denies.
pub(crate) type Waited = Result<Answer, ServerError>;

/// How many replicas must confirm a grant, and how long to wait for them; with `WAITAOF`,
/// whether the primary's own append-only file must have it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    count: u32,
    timeout: Duration,
    /// `WAITAOF` instead of `WAIT`, and whether it asks for the primary's own fsync.
    aof: Option<bool>,
}

/// What `WAIT` (replicas only) or `WAITAOF` (the primary's own fsync, then replicas)
/// answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Answer {
    /// 1 when the primary's own append-only file has the write (`WAITAOF`).
    pub(crate) local: i64,
    /// How many replicas have it (in their append-only file, for `WAITAOF`).
    pub(crate) replicas: i64,
}

impl FromRedisValue for Answer {
    fn from_redis_value(value: Value) -> Result<Self, ParsingError> {
        if let Value::Array(_) = value {
            let (local, replicas) = <(i64, i64)>::from_redis_value(value)?;
            return Ok(Answer { local, replicas });
        }
        let replicas = i64::from_redis_value(value)?;
        Ok(Answer { local: 0, replicas })
    }
}

impl Replicas {
    /// The rule, or `None` (off) for zero replicas.
    pub(crate) fn new(count: u32, timeout: Duration) -> Option<Self> {
        (count > 0).then_some(Replicas {
            count,
            timeout,
            aof: None,
        })
    }

    /// The `WAITAOF` rule, or `None` (off) when it asks for nothing.
    pub(crate) fn aof(local: bool, count: u32, timeout: Duration) -> Option<Self> {
        (local || count > 0).then_some(Replicas {
            count,
            timeout,
            aof: Some(local),
        })
    }

    /// The option's name, for errors, and the command that follows a write.
    fn names(&self) -> (&'static str, &'static str) {
        match self.aof {
            Some(_) => ("wait_for_aof", "WAITAOF"),
            None => ("wait_for_replicas", "WAIT"),
        }
    }

    /// The command that follows a write: `WAIT` or `WAITAOF`.
    pub(crate) fn command_name(&self) -> &'static str {
        self.names().1
    }

    /// Refuses settings that cannot work, before any traffic: a zero timeout (`WAIT 0`
    /// blocks for ever), one the client's response timeout would cut short, and Redlock.
    pub(crate) fn check(&self, response_timeout: Duration, redlock: bool) -> Result<(), LockError> {
        let (option, command) = self.names();
        let reason = if redlock {
            format!(
                "{option} does not apply to Redlock: its masters are independent and have \
                 no replicas to wait for; leave it off (a majority of masters is the Redlock \
                 answer to a lost master)"
            )
        } else if self.timeout < Duration::from_millis(1) {
            format!("{option} needs a timeout of at least 1 ms ({command} with 0 blocks for ever)")
        } else if self.timeout >= response_timeout {
            format!(
                "{option} waits up to {:?}, but a request may take only {:?} \
                 (response_timeout): give {command} a shorter timeout or raise response_timeout",
                self.timeout, response_timeout
            )
        } else {
            return Ok(());
        };
        Err(LockError::config(reason))
    }

    /// The `WAIT` or `WAITAOF` that follows a write.
    pub(crate) fn wait_command(&self) -> Cmd {
        let mut wait = redis::cmd(self.command_name());
        if let Some(local) = self.aof {
            wait.arg(u8::from(local));
        }
        wait.arg(self.count).arg(crate::lease::millis(self.timeout));
        wait
    }

    /// Whether the answer is enough: the replicas asked for, and with `WAITAOF` asking for
    /// it, the primary's own fsync.
    pub(crate) fn confirmed(&self, answer: Answer) -> bool {
        answer.replicas >= i64::from(self.count) && (self.aof != Some(true) || answer.local >= 1)
    }

    /// The error to give for a write on `key` whose `WAIT` falls short or was refused, if
    /// it does.
    pub(crate) fn judge(&self, key: &str, waited: Waited) -> Option<LockError> {
        match waited {
            Ok(answer) => (!self.confirmed(answer)).then(|| self.shortfall(key, answer)),
            Err(refusal) => Some(self.refusal(key, &refusal)),
        }
    }

    /// The error of a write on `key` after which the server refused the rule's command:
    /// [`LockError::Config`], since every later write would meet the same refusal (and a
    /// [`LockError::Backend`] would be retried for ever). It names the server's reason and
    /// the fix.
    pub(crate) fn refusal(&self, key: &str, refusal: &ServerError) -> LockError {
        let (option, command) = self.names();
        let reason = match refusal.details() {
            Some(details) => format!("{} {details}", refusal.code()),
            None => refusal.code().to_owned(),
        };
        let fix = if reason.contains("appendonly") {
            "turn appendonly on (appendonly yes in the server's configuration, or CONFIG SET \
             appendonly yes), or ask for replicas only (Config::wait_for_aof(false, ..))"
                .to_owned()
        } else if reason.contains("unknown command") {
            format!(
                "the server lacks {command} (WAITAOF needs Redis 7.2 or later, or Valkey): \
                 upgrade it, or turn {option} off"
            )
        } else if refusal.code() == "NOPERM" {
            format!("allow {command} to this client's user (ACL), or turn {option} off")
        } else {
            format!("make the server accept {command}, or turn {option} off")
        };
        LockError::config(format!(
            "lock `{key}`: {option}: the server refused {command} after the write that \
             granted or extended the lease ({reason}), so the write does not count (a grant \
             is given back); {fix}"
        ))
    }

    /// The error of a grant whose `answer` falls short.
    pub(crate) fn shortfall(&self, key: &str, answer: Answer) -> LockError {
        let count = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        match self.aof {
            None => LockError::NotReplicated {
                key: key.to_owned(),
                confirmed: count(answer.replicas),
                needed: self.count,
                timeout: self.timeout,
            },
            Some(local) => LockError::NotDurable {
                key: key.to_owned(),
                local: answer.local >= 1,
                replicas: count(answer.replicas),
                needed_local: local,
                needed_replicas: self.count,
                timeout: self.timeout,
            },
        }
    }

    /// Refuses a `WAITAOF` rule against a server that cannot answer it: one without the
    /// command (Redis before 7.2), or, when the rule asks for the primary's own fsync, one
    /// with `appendonly no` (`WAITAOF` then answers every write with an error). Asked on a
    /// connection of its own within `limit`; a server that does not answer then, or refuses
    /// `CONFIG` (a managed service), is not checked (its first grant is refused instead,
    /// see [`refusal`](Self::refusal)).
    pub(crate) fn check_server(
        &self,
        client: &redis::Client,
        limit: Duration,
    ) -> Result<(), LockError> {
        let Some(local) = self.aof else {
            return Ok(());
        };
        let server = client.get_connection_info().addr().to_string();
        let refused = client
            .get_connection_with_timeout(limit)
            .and_then(|mut connection| {
                connection.set_read_timeout(Some(limit))?;
                aof_refusal(&mut connection, local)
            });
        match refused {
            Ok(Some(why)) => Err(LockError::config(format!(
                "wait_for_aof: the server at {server} {why}"
            ))),
            Ok(None) => Ok(()),
            Err(err) => {
                tracing::debug!(%server, error = %err, "the server did not answer the WAITAOF check");
                Ok(())
            }
        }
    }

    /// Sends `write` followed by this rule's `WAIT`, as one pipeline: the write's reply
    /// (an error reply to the write is the call's error, as if sent alone) and what the
    /// `WAIT` came to, its refusal included (the write went through: the caller undoes it).
    pub(crate) async fn send<T: FromRedisValue>(
        &self,
        write: &Cmd,
        connection: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<(T, Waited)> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .add_command(write.clone())
            .add_command(self.wait_command());
        let replies: Vec<Value> = pipe.query_async(connection).await?;
        let mut replies = replies.into_iter();
        let (Some(reply), Some(waited), None) = (replies.next(), replies.next(), replies.next())
        else {
            return Err(ParsingError::from("a write and its WAIT: two replies expected").into());
        };
        let reply = T::from_redis_value(reply.extract_error()?)?;
        let waited = match waited {
            Value::ServerError(refusal) => Err(refusal),
            answer => Ok(Answer::from_redis_value(answer)?),
        };
        Ok((reply, waited))
    }
}

/// Why the server behind `connection` cannot answer `WAITAOF` (with `local`, for the
/// primary's own fsync), if it cannot.
fn aof_refusal(connection: &mut redis::Connection, local: bool) -> RedisResult<Option<String>> {
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query(connection)?;
    if let [Value::Nil] = info[..] {
        return Ok(Some(
            "does not know WAITAOF (Redis 7.2 and later and Valkey have it): upgrade the \
             server, or use wait_for_replicas"
                .to_owned(),
        ));
    }
    if !local {
        return Ok(None);
    }
    let Ok(config) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .query::<std::collections::HashMap<String, String>>(connection)
    else {
        return Ok(None);
    };
    Ok(
        (config.get("appendonly").map(String::as_str) == Some("no")).then(|| {
            "has appendonly no, so WAITAOF cannot wait for its own fsync: turn appendonly on, or \
         ask for replicas only (local = false)"
                .to_owned()
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(local: i64, replicas: i64) -> Answer {
        Answer { local, replicas }
    }

    #[test]
    fn zero_replicas_is_off_and_the_answer_is_always_checked() {
        assert_eq!(Replicas::new(0, Duration::from_millis(50)), None);
        let rule = Replicas::new(2, Duration::from_millis(50)).unwrap();
        assert!(!rule.confirmed(answer(0, 0)));
        assert!(!rule.confirmed(answer(0, 1)));
        assert!(rule.confirmed(answer(0, 2)));
        assert!(rule.confirmed(answer(0, 3)));
        let err = rule.shortfall("k", answer(0, 1));
        assert!(err.to_string().contains("1 of the 2 replicas"), "{err}");
    }

    #[test]
    fn waitaof_asks_for_the_primarys_own_fsync_and_the_replicas() {
        assert_eq!(Replicas::aof(false, 0, Duration::from_millis(50)), None);
        let local = Replicas::aof(true, 0, Duration::from_millis(50)).unwrap();
        let args = local.wait_command().args_iter().count();
        assert_eq!((local.command_name(), args), ("WAITAOF", 4));
        assert!(!local.confirmed(answer(0, 3)));
        assert!(local.confirmed(answer(1, 0)));
        let both = Replicas::aof(true, 1, Duration::from_millis(50)).unwrap();
        assert!(!both.confirmed(answer(1, 0)));
        let err = both.shortfall("k", answer(1, 0));
        assert!(err.to_string().contains("0 of the 1 replicas"), "{err}");
        let parsed = Answer::from_redis_value(Value::Array(vec![Value::Int(1), Value::Int(2)]));
        assert_eq!(parsed.unwrap(), answer(1, 2));
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
