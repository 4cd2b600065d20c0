//! The Lua scripts, each kept once as a `.lua` file and run by EVALSHA, and the names of
//! the auxiliary keys and channel they use.

use once_cell::sync::Lazy;
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation};

use crate::LockError;
use crate::connection::Connection;

/// Fair `SET NX PX` with a token (and a fence): `{1, fence}` or `{0, wait_ms}`.
pub(crate) static ACQUIRE: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("lua/acquire.lua")));

/// Compare-and-delete that wakes the next waiter; 1 released, 0 gone, -1 another owner.
pub(crate) static RELEASE: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("lua/release.lua")));

/// Compare-and-PEXPIRE; 1 renewed, 0 token gone.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| Script::new(include_str!("lua/renew.lua")));

/// A waiter leaves the queue.
pub(crate) static LEAVE: Lazy<Script> = Lazy::new(|| Script::new(include_str!("lua/leave.lua")));

/// What a released lock key holds while it is handed to the head of its queue (never a
/// token: tokens are hex). The scripts spell it out too.
pub(crate) const HANDOVER: &str = "~handover";

/// How many times a script call is made when it keeps finding the script cache empty.
const NOSCRIPT_TRIES: u32 = 4;

/// Runs a script call: EVALSHA, and on NOSCRIPT (a restart, `SCRIPT FLUSH`) redis-rs loads
/// the script and sends EVALSHA again. A flush between that load and that EVALSHA fails the
/// call with NOSCRIPT although the script never ran; such a call is made again, a few times.
///
/// A call that meets a connection the server has dropped (an idle connection across a
/// restart, a reset) is made once more: the connection manager reconnects for it. Every
/// script here is safe to run twice with the same token (acquire grants its own token
/// again; release, renew and leave compare the token). A server that refuses connections
/// is reported at once.
pub(crate) async fn invoke<T: FromRedisValue>(
    invocation: &ScriptInvocation<'_>,
    connection: &mut Connection,
) -> RedisResult<T> {
    let mut noscript_tries = 1;
    let mut reconnected = false;
    loop {
        match invocation.invoke_async(connection).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                    && noscript_tries < NOSCRIPT_TRIES =>
            {
                noscript_tries += 1;
            }
            Err(err)
                if !reconnected && err.is_connection_dropped() && !err.is_connection_refusal() =>
            {
                tracing::debug!(error = %err, "connection dropped; trying once more");
                reconnected = true;
            }
            result => return result,
        }
    }
}

/// A call of release.lua or leave.lua, which take the same keys and arguments: the lock
/// and its queue, the caller's token, and the channel to wake the next waiter on.
pub(crate) fn queue_call<'a>(
    script: &'a Script,
    names: &KeyNames,
    token: &str,
    publish: &str,
) -> ScriptInvocation<'a> {
    let mut invocation = script.key(&names.lock);
    invocation
        .key(&names.queue)
        .key(&names.deadlines)
        .key(&names.ttls)
        .arg(token)
        .arg(&names.channel)
        .arg(publish);
    invocation
}

/// The names that travel with one lock key: its auxiliary keys and its release channel,
/// all hashing to the lock key's cluster slot.
#[derive(Debug, Clone)]
pub(crate) struct KeyNames {
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) queue: String,
    pub(crate) deadlines: String,
    /// Each queued waiter's ttl, so that a release can grant it the lock directly.
    pub(crate) ttls: String,
    pub(crate) channel: String,
}

impl KeyNames {
    pub(crate) fn new(lock: String) -> Result<Self, LockError> {
        let base = slot_base(&lock)?;
        Ok(KeyNames {
            fence: format!("{base}:fence"),
            queue: format!("{base}:queue"),
            deadlines: format!("{base}:queue-deadlines"),
            ttls: format!("{base}:queue-ttls"),
            channel: format!("{base}:released"),
            lock,
        })
    }
}

/// A prefix for auxiliary names that keeps them in the lock key's cluster slot.
///
/// A key with a hash tag keeps it (a suffix does not change the slot); a key without one is
/// wrapped whole in braces, so its tag is the key itself. A key that contains `}` but no
/// valid tag cannot be wrapped and is refused.
fn slot_base(key: &str) -> Result<String, LockError> {
    if has_hash_tag(key) {
        return Ok(key.to_owned());
    }
    if key.contains('}') {
        return Err(LockError::InvalidKey {
            key: key.to_owned(),
            reason: "a `}` without a `{…}` hash tag keeps the lock's queue and fence counter \
                     out of its cluster slot; remove the `}` or add a hash tag"
                .into(),
        });
    }
    Ok(format!("{{{key}}}"))
}

/// Whether Redis Cluster would hash only part of `key` (a non-empty `{…}` section).
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|len| len > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auxiliary_names_share_the_slot() {
        let names = KeyNames::new("stock:1".into()).unwrap();
        assert_eq!(names.fence, "{stock:1}:fence");
        assert_eq!(names.channel, "{stock:1}:released");
        assert_eq!(
            KeyNames::new("{shop}:1".into()).unwrap().queue,
            "{shop}:1:queue"
        );
        assert_eq!(KeyNames::new("a{b".into()).unwrap().fence, "{a{b}:fence");
        assert!(KeyNames::new("a{}b}".into()).is_err());
    }
}
