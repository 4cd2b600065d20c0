//! One call of a script: the `FCALL` command built in place, and the retries that load the
//! library (or the script) a server lacks, or fall back to `EVALSHA`.

use std::sync::atomic::Ordering;

use redis::{Cmd, FromRedisValue, RedisResult, ToRedisArgs};

use super::catalog::LuaScript;
use super::library::{self, LIBRARY};
use crate::connection::{Connection, Query};
use crate::error::LockError;
use crate::replicas::{Replicas, Waited};

/// How many times a script call is made when it keeps finding the script (or the library)
/// missing.
const NOSCRIPT_TRIES: u32 = 4;

/// One call of a script: the `FCALL` command itself, built in place.
///
/// redis-rs's `ScriptInvocation` keeps every key and argument in a vector of its own and
/// copies them into a command when it is sent: a dozen allocations per call on the
/// acquire and release paths. A `Call` writes them into the command once. Every call
/// names its keys first, as `FCALL` and `EVALSHA` want them before the arguments.
pub(crate) struct Call<'s> {
    script: &'s LuaScript,
    cmd: Cmd,
}

impl<'s> Call<'s> {
    /// A call of `script` on `keys`; add its arguments with [`Call::arg`].
    pub(crate) fn new(script: &'s LuaScript, keys: &[&str]) -> Self {
        /// Room for the arguments of the biggest call here (release.lua takes 10).
        const ARGS: usize = 10;
        const ARG_BYTES: usize = 128;
        let key_bytes: usize = keys.iter().map(|key| key.len()).sum();
        let function = script.function(&LIBRARY.name);
        let mut cmd = Cmd::with_capacity(
            3 + keys.len() + ARGS,
            "EVALSHA".len() + function.len().max(40) + 2 + key_bytes + ARG_BYTES,
        );
        cmd.arg("FCALL").arg(function).arg(keys.len());
        for key in keys {
            cmd.arg(*key);
        }
        Call { script, cmd }
    }

    /// Adds an argument (`ARGV`).
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// The same call as `EVALSHA`, for a server without Functions (and a pipeline sent
    /// after loading the scripts, at shutdown).
    pub(crate) fn evalsha(&self) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.script().get_hash());
        for arg in self.cmd.args_iter().skip(2) {
            if let redis::Arg::Simple(arg) = arg {
                cmd.arg(arg);
            }
        }
        cmd
    }
}

/// What a failed try of a script call asks for next.
enum Retry {
    /// Load the script (`EVALSHA`'s cache is empty) and send again.
    LoadScript,
    /// Load the library (the server has no such function) and send again.
    LoadLibrary,
    /// Send again as `EVALSHA`: the server has no Functions.
    Evalsha,
    /// Send once more: the connection was dropped.
    Reconnect,
}

/// What `err`, met on a try of a call (by `EVALSHA` or not, `evalsha`), asks for, if
/// anything: each kind of retry is bounded by the caller.
fn retry_for(err: &redis::RedisError, evalsha: bool) -> Option<Retry> {
    if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) {
        Some(Retry::LoadScript)
    } else if !evalsha && library::is_functions_unknown(err) {
        Some(Retry::Evalsha)
    } else if !evalsha && library::is_function_missing(err) {
        Some(Retry::LoadLibrary)
    } else if err.is_connection_dropped() && !err.is_connection_refusal() {
        Some(Retry::Reconnect)
    } else {
        None
    }
}

/// Loads the library on `connection` (in a cluster, on every primary), unless this client
/// loaded it there after the call was sent (`seen`: its count of loads then; one load at a
/// time per server): `Ok(false)` when the server has no Functions (it is then remembered,
/// and calls go by `EVALSHA`).
async fn load_library(connection: &mut impl Query, seen: Option<u64>) -> RedisResult<bool> {
    let loads = connection.library_loads().cloned();
    let _one_at_a_time = match &loads {
        Some(loads) => Some(loads.one_at_a_time.lock().await),
        None => None,
    };
    if let (Some(loads), Some(seen)) = (&loads, seen)
        && loads.done.load(Ordering::Acquire) != seen
    {
        return Ok(true);
    }
    match connection.query::<()>(&LIBRARY.load_cmd()).await {
        Ok(()) => {
            if let Some(loads) = &loads {
                loads.done.fetch_add(1, Ordering::Release);
            }
            Ok(true)
        }
        Err(err) if library::is_functions_unknown(&err) => {
            connection.lacks_functions();
            Ok(false)
        }
        Err(err) => Err(err),
    }
}

/// The retry loop of [`invoke`] and [`invoke_replicated`] around `$send` (a command or a
/// pipeline of `$cmd` sent on `$connection`, evaluated again for each try): `$cmd` is the
/// `FCALL` of `$call` where the server has Functions, its `EVALSHA` elsewhere. On a missing
/// function loads the library, on NOSCRIPT the script, and sends again; on an unknown
/// `FCALL` sends as `EVALSHA` (and the connection remembers it); after a dropped connection
/// sends once more. A macro, not a generic function over the request: the futures must
/// stay `Send` for `tokio::spawn`.
macro_rules! send_retrying {
    ($call:expr, $connection:expr, |$cmd:ident| $send:expr) => {{
        let mut evalsha: Option<Cmd> = None;
        if !$connection.has_functions() {
            evalsha = Some($call.evalsha());
        }
        let mut tries = 1;
        let mut reconnected = false;
        loop {
            let $cmd: &Cmd = evalsha.as_ref().unwrap_or(&$call.cmd);
            let loads = $connection
                .library_loads()
                .map(|loads| loads.done.load(Ordering::Acquire));
            let result = $send.await;
            let retry = match &result {
                Err(err) => retry_for(err, evalsha.is_some()),
                Ok(_) => None,
            };
            match retry {
                Some(Retry::LoadScript) if tries < NOSCRIPT_TRIES => {
                    tries += 1;
                    $call.script.script().prepare_invoke().load_async($connection).await?;
                }
                Some(Retry::LoadLibrary) if tries < NOSCRIPT_TRIES => {
                    tries += 1;
                    if !load_library($connection, loads).await? {
                        evalsha = Some($call.evalsha());
                    }
                }
                Some(Retry::Evalsha) => {
                    $connection.lacks_functions();
                    evalsha = Some($call.evalsha());
                }
                Some(Retry::Reconnect) if !reconnected => {
                    if let Err(err) = &result {
                        tracing::debug!(error = %err, "connection dropped; trying once more");
                    }
                    reconnected = true;
                }
                _ => break (result, reconnected),
            }
        }
    }};
}

/// Runs a script call: `FCALL`, and when the server has no such function (a restart
/// without persistence, `FUNCTION FLUSH`, a new version of the library) loads the library
/// and sends again; on a server without Functions `EVALSHA`, and on NOSCRIPT (a restart,
/// `SCRIPT FLUSH`) loads the script and sends again. A flush between that load and the
/// call fails the call although the script never ran; such a call is made again, a few
/// times.
///
/// A call that meets a connection the server has dropped (an idle connection across a
/// restart, a reset) is made once more: the connection manager reconnects for it. Every
/// script here is safe to run twice with the same token (acquire grants its own token
/// again; release, renew and leave compare the token). A server that refuses connections
/// is reported at once.
pub(crate) async fn invoke<T: FromRedisValue>(
    call: &Call<'_>,
    connection: &mut impl Query,
) -> RedisResult<T> {
    send_retrying!(call, connection, |cmd| connection.query(cmd)).0
}

/// [`invoke`], and whether the call was made once more after a dropped connection: the
/// first may have run, and the reply then answers a repeat.
pub(crate) async fn invoke_noting_repeat<T: FromRedisValue>(
    call: &Call<'_>,
    connection: &mut impl Query,
) -> RedisResult<(T, bool)> {
    let (reply, repeated) = send_retrying!(call, connection, |cmd| connection.query(cmd));
    reply.map(|reply| (reply, repeated))
}

/// [`invoke`] with `replicas`' `WAIT` in the same pipeline, right after the call on the same
/// connection (see [`crate::replicas`]): the call's reply and how many replicas have it.
/// Retried as `invoke` is (a missing function or script, a dropped connection), the `WAIT`
/// with it.
pub(crate) async fn invoke_replicated<T: FromRedisValue>(
    call: &Call<'_>,
    replicas: &Replicas,
    connection: &mut Connection,
) -> RedisResult<(T, Waited)> {
    have_library(connection).await?;
    send_retrying!(call, connection, |cmd| replicas.send(cmd, connection)).0
}

/// Makes sure, once per server, that the library is there before a call that a `WAIT`
/// rides with: the `WAIT` runs whether the call does or not, so a call that found its
/// function missing, loaded the library and was sent again would wait twice (and a grant
/// waits once). Asked with `FUNCTION LIST` (a server that refuses it is not asked: the
/// call finds out), loaded when missing. Not where scripts go by `EVALSHA` (Redis before
/// 7), nor after the server lost the library again (a restart): there the first call
/// after the loss still waits twice.
async fn have_library(connection: &mut Connection) -> RedisResult<()> {
    if !connection.has_functions() {
        return Ok(());
    }
    let Some(loads) = connection.library_loads().cloned() else {
        return Ok(());
    };
    if loads.found.load(Ordering::Acquire) || loads.done.load(Ordering::Acquire) > 0 {
        return Ok(());
    }
    let listed: RedisResult<Vec<redis::Value>> = connection.query(&LIBRARY.list_cmd()).await;
    match listed {
        Ok(libraries) if libraries.is_empty() => {
            load_library(connection, Some(0)).await?;
        }
        Ok(_) => {}
        Err(err) => {
            tracing::debug!(error = %err, "FUNCTION LIST refused; the call finds out whether the library is there");
            return Ok(());
        }
    }
    loads.found.store(true, Ordering::Release);
    Ok(())
}

/// [`invoke`] of a call that may grant a lease: with a replica rule (`replicas`), `WAIT`
/// rides with it ([`invoke_replicated`]) and the reply comes with the error to give when
/// too few replicas have it, or when the server refused the `WAIT` (a
/// [`LockError::Config`]; whether the reply granted anything is the caller's to say).
/// A Redis error is `key`'s [`LockError::Backend`].
pub(crate) async fn invoke_granting<T: FromRedisValue>(
    call: &Call<'_>,
    (replicas, key): (Option<&Replicas>, &str),
    connection: &mut Connection,
) -> Result<(T, Option<LockError>), LockError> {
    let backend = |err| LockError::backend(key, err);
    let Some(replicas) = replicas else {
        return Ok((invoke(call, connection).await.map_err(backend)?, None));
    };
    let (reply, answer) = invoke_replicated(call, replicas, connection)
        .await
        .map_err(backend)?;
    Ok((reply, replicas.judge(key, answer)))
}
