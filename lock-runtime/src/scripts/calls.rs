//! The typed call of every script: one builder per script names its keys and arguments,
//! in the order the script reads them, so that no caller writes a positional `.arg()` chain.
//! The watchdog's batched renewals are an `EVALSHA` command of their own
//! ([`renew_many_command`]), which goes into its pipeline as it is.

use std::time::Duration;

use super::call::Call;
#[cfg(feature = "redlock")]
use super::catalog::RAISE_FENCE;
use super::catalog::{
    ACQUIRE, ALIVE, FORCE_RELEASE, FORGET_WAIT, INSPECT, KEEPALIVE, LuaScript, READ, READ_RELEASE,
    RELEASE, RENEW, RENEW_MANY, RETAKE, SEMAPHORE_ACQUIRE, WRITE_READY,
};
use super::{GRANT_CONFIRM_WINDOW, GROW_ONLY, KeyNames, QUEUE_LEASE, ShareNames};
use crate::lease::millis;

/// A caller whose queue places its process's liveness key keeps (see
/// [`crate::renewal::liveness`]): acquire.lua then makes its entry a kept one and says whom to watch.
/// The key is an argument, not a declared key: in cluster mode it is in another slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeptAlive<'a> {
    /// The process's liveness key.
    pub(crate) alive: &'a str,
    /// `PUBLISH`, to wake the head waiter.
    pub(crate) publish: &'a str,
    /// Whether the caller's watchdog renews its lease (its waiters may then wait for it).
    pub(crate) renews: bool,
}

/// A call of acquire.lua by `token`: the lock and its auxiliary keys (and, for a caller
/// `queued` in the key's queue, its hold record), the lease, the fence counter's lifetime
/// (0: no fence), whether to join the queue when the lock cannot be taken now, the queue
/// lease, and the foreign windows' period while foreign clients use them; with `kept`, the
/// process's liveness key (the reply then has a third element).
pub(crate) fn acquire_call(
    names: &KeyNames,
    token: &str,
    ttl: Duration,
    fence_lifetime: u64,
    (may_wait, queued): (bool, bool),
    (foreign_every, kept): (Duration, Option<KeptAlive<'_>>),
) -> Call<'static> {
    // A caller that waits in the key's queue names the lock's hold record too: its take
    // records there when the hold began (and its release, a full one, deletes it).
    let hold = queued.then(|| names.hold()).flatten();
    let keys = [
        names.lock(),
        names.fence(),
        names.queue(),
        names.deadlines(),
        names.ttls(),
    ];
    let mut invocation = Call::new(&ACQUIRE, &and_hold(&keys, hold.as_deref()));
    invocation
        .arg(token)
        .arg(millis(ttl))
        .arg(fence_lifetime)
        .arg(u8::from(may_wait))
        .arg(millis(QUEUE_LEASE))
        .arg(millis(foreign_every));
    if let Some(kept) = kept {
        invocation
            .arg(names.channel())
            .arg(kept.publish)
            .arg(u8::from(kept.renews))
            .arg(kept.alive);
    }
    invocation
}

/// A call of release.lua or leave.lua, which take the same keys and arguments: the lock
/// and its queue, the caller's token, the channel to wake the next waiter on, and how long
/// a direct grant waits for its confirmation.
pub(crate) fn queue_call<'a>(
    script: &'a LuaScript,
    names: &KeyNames,
    token: &str,
    publish: &str,
) -> Call<'a> {
    queue_call_on(script, (names, &names.queue_keys()), token, publish)
}

/// [`queue_call`] on `keys` (the queue's, and perhaps more) of the lock `names`.
fn queue_call_on<'a>(
    script: &'a LuaScript,
    (names, keys): (&KeyNames, &[&str]),
    token: &str,
    publish: &str,
) -> Call<'a> {
    let mut invocation = Call::new(script, keys);
    invocation
        .arg(token)
        .arg(names.channel())
        .arg(publish)
        .arg(GRANT_CONFIRM_WINDOW.as_millis() as u64);
    invocation
}

/// A full release of `token` (release.lua): [`queue_call`]'s keys and arguments, and the
/// lock's hold record, which the release deletes when it is this holder's (a take after a
/// wait wrote it, or renewals kept it).
pub(crate) fn full_release_call(names: &KeyNames, token: &str, publish: &str) -> Call<'static> {
    let hold = names.hold();
    let keys = and_hold(&names.queue_keys(), hold.as_deref());
    queue_call_on(&RELEASE, (names, &keys), token, publish)
}

/// `keys` and, when the lock has one, its hold record: the names of a call that writes or
/// deletes the record (a take after a wait, a full release).
fn and_hold<'k>(keys: &[&'k str], hold: Option<&'k str>) -> Vec<&'k str> {
    keys.iter().copied().chain(hold).collect()
}

/// The reply of a short release ([`short_release_call`]) that did not release: the full form
/// must follow.
pub(crate) const ASK_FULL_RELEASE: i64 = -2;

/// The release's short form, for a hold that knew of no waiter: the lock key, the queue and
/// the token. It releases an uncontended key (1) and answers [`ASK_FULL_RELEASE`] to
/// everything else (see `release_uncontended.lua`).
pub(crate) fn short_release_call<'a>(names: &KeyNames, token: &str) -> Call<'a> {
    let mut call = Call::new(&RELEASE, &[names.lock(), names.queue()]);
    call.arg(token);
    call
}

/// The process's next place in the queue, given with a release when more of its tasks wait
/// for the key: it joins the tail in the same call (or, when no other process is queued,
/// the holder keeps the key).
#[derive(Debug, Clone)]
pub(crate) struct Requeue {
    /// The process's next token, and its entry in the queue.
    pub(crate) token: crate::lease::Token,
    /// The lease a direct grant to that entry would be confirmed with.
    pub(crate) ttl: Duration,
    /// A foreign window to leave the key free for, instead of passing it on or keeping it
    /// (zero: none).
    pub(crate) window: Duration,
}

/// A release by `token` that announces itself even when nobody is queued (Redlock mode,
/// whose waiters subscribe without queueing).
pub(crate) fn announced_release_call(
    names: &KeyNames,
    token: &str,
    publish: &str,
) -> Call<'static> {
    let mut invocation = full_release_call(names, token, publish);
    invocation.arg("").arg(1).arg(1).arg(0).arg(1);
    invocation
}

/// A release by `token` that puts `requeue` at the tail of the queue, or keeps the key, or
/// leaves it free for a foreign window.
/// With `alive` (the process's liveness key), the requeued entry is a kept one.
pub(crate) fn release_call(
    names: &KeyNames,
    token: &str,
    publish: &str,
    requeue: &Requeue,
    alive: Option<&str>,
) -> Call<'static> {
    let mut invocation = full_release_call(names, token, publish);
    invocation
        .arg(&*requeue.token)
        .arg(millis(requeue.ttl))
        .arg(millis(QUEUE_LEASE))
        .arg(requeue.window.as_millis() as u64);
    if let Some(alive) = alive {
        invocation.arg(0).arg(alive);
    }
    invocation
}

/// retake.lua: re-dates the key `token` holds to `ttl`, with a fresh fence when
/// `fence_lifetime` (the counter's lifetime, ms) is not zero. Replies `{taken, fence}`.
pub(crate) fn retake_call(
    names: &KeyNames,
    token: &str,
    ttl: Duration,
    fence_lifetime: u64,
) -> Call<'static> {
    let mut call = Call::new(&RETAKE, &[names.lock(), names.fence()]);
    call.arg(token).arg(millis(ttl)).arg(fence_lifetime);
    call
}

/// renew.lua: sets the expiry of the key `token` holds to `ttl` (with `grow_only`, only
/// lengthens it). Replies 1 renewed, 0 the token is gone.
pub(crate) fn renew_call(
    names: &KeyNames,
    token: &str,
    ttl: Duration,
    grow_only: bool,
) -> Call<'static> {
    let mut call = Call::new(&RENEW, &[names.lock()]);
    call.arg(token)
        .arg(millis(ttl))
        .arg("")
        .arg(if grow_only { GROW_ONLY } else { "" });
    call
}

/// raise_fence.lua: raises the fence counter of the key `token` holds to `fence` (for the
/// counter's lifetime, ms), owner-checked.
#[cfg(feature = "redlock")]
pub(crate) fn raise_fence_call(
    names: &KeyNames,
    token: &str,
    fence: u64,
    lifetime: u64,
) -> Call<'static> {
    let mut call = Call::new(&RAISE_FENCE, &[names.lock(), names.fence()]);
    call.arg(token).arg(fence).arg(lifetime);
    call
}

/// inspect.lua: the holder, the fence, up to `listed` waiters and a read-write lock's
/// readers of the key.
pub(crate) fn inspect_call(names: &KeyNames, shares: &ShareNames, listed: usize) -> Call<'static> {
    // A key this crate names itself has no record: a name in its slot that is never written.
    let hold = names.hold().unwrap_or_else(|| {
        let (kind, around) = names.aux_parts("hold");
        kind + &around
    });
    let (waits, waiters_hold) = (names.waits(), names.waiters_hold());
    let keys = [
        names.lock(),
        names.fence(),
        names.queue(),
        names.deadlines(),
        names.ttls(),
        &shares.readers,
        &waits,
        &hold,
        &waiters_hold,
    ];
    let mut call = Call::new(&INSPECT, &keys);
    call.arg(listed).arg(&shares.head).arg(&shares.tail);
    call
}

/// force_release.lua: takes the key from whoever holds it (a lock's holder, a read-write
/// lock's readers, a semaphore's permits) and wakes the queue as a release does; only while
/// `if_holder` (unless empty) is one of its holders, and only if it is one of our locks
/// unless `foreign`.
pub(crate) fn force_release_call(
    names: &KeyNames,
    shares: &ShareNames,
    publish: &str,
    (if_holder, foreign): (&str, bool),
    releaser: &str,
) -> Call<'static> {
    let keys = [
        names.lock(),
        names.queue(),
        names.deadlines(),
        names.ttls(),
        &shares.readers,
    ];
    let mut call = Call::new(&FORCE_RELEASE, &keys);
    call.arg(names.channel())
        .arg(publish)
        .arg(millis(GRANT_CONFIRM_WINDOW))
        .arg(&shares.head)
        .arg(&shares.tail)
        .arg(if_holder)
        .arg(u8::from(foreign))
        .arg(releaser.to_owned());
    call
}

/// What a semaphore's try asks for: the permit's token, its lease, how many permits the
/// key has, whether to queue when none is free, and (for a kept place) the process's
/// liveness key.
pub(crate) struct PermitTry<'a> {
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) permits: u32,
    pub(crate) may_wait: bool,
    pub(crate) publish: &'a str,
    pub(crate) alive: Option<&'a str>,
}

/// semaphore_acquire.lua: a permit of the semaphore `names`, as `permit` asks.
pub(crate) fn semaphore_acquire_call(names: &KeyNames, permit: &PermitTry<'_>) -> Call<'static> {
    let mut call = Call::new(&SEMAPHORE_ACQUIRE, &names.queue_keys());
    call.arg(permit.token)
        .arg(millis(permit.ttl))
        .arg(permit.permits)
        .arg(u8::from(permit.may_wait))
        .arg(millis(QUEUE_LEASE))
        .arg(names.channel())
        .arg(permit.publish);
    if let Some(alive) = permit.alive {
        call.arg(alive);
    }
    call
}

/// rw_read.lua: the reader `token`'s share `share` of the read-write lock `names`, with
/// the lease `ttl`, while `gate` (the reader's turn, or '') holds the lock key.
pub(crate) fn read_call(
    (names, shares, share): (&KeyNames, &ShareNames, &KeyNames),
    token: &str,
    ttl: Duration,
    gate: &str,
) -> Call<'static> {
    let keys = [names.lock(), names.queue(), &shares.readers, share.lock()];
    let mut call = Call::new(&READ, &keys);
    call.arg(token)
        .arg(millis(ttl))
        .arg(gate)
        .arg(&shares.head)
        .arg(&shares.tail);
    call
}

/// rw_read_release.lua: gives the reader `token`'s share `share` back, waking a writer
/// that waits for the last reader.
pub(crate) fn read_release_call(
    (names, shares, share): (&KeyNames, &ShareNames, &KeyNames),
    token: &str,
    publish: &str,
) -> Call<'static> {
    let keys = [names.lock(), &shares.readers, share.lock()];
    let mut call = Call::new(&READ_RELEASE, &keys);
    call.arg(token)
        .arg(names.channel())
        .arg(publish)
        .arg(&shares.head)
        .arg(&shares.tail);
    call
}

/// rw_write_ready.lua: whether the writer `token` holds the key with the readers gone;
/// meanwhile the key's lease is `waiting_lease`, and `ttl` once they are.
pub(crate) fn write_ready_call(
    (names, shares): (&KeyNames, &ShareNames),
    token: &str,
    waiting_lease: Duration,
    ttl: Duration,
) -> Call<'static> {
    let mut call = Call::new(&WRITE_READY, &[names.lock(), &shares.readers]);
    call.arg(token)
        .arg(&shares.head)
        .arg(&shares.tail)
        .arg(millis(waiting_lease))
        .arg(millis(ttl));
    call
}

/// alive.lua: keeps the process's liveness key `own` for `lease`, and says which of the
/// `watched` processes' keys are gone.
pub(crate) fn alive_call<'k>(
    own: &str,
    lease: Duration,
    watched: impl IntoIterator<Item = &'k str>,
) -> Call<'static> {
    let mut call = Call::new(&ALIVE, &[own]);
    call.arg(millis(lease));
    for key in watched {
        call.arg(key);
    }
    call
}

/// keepalive.lua: a new queue lease for each of `tokens`' places in the queue of `names`.
pub(crate) fn keepalive_call<'t>(
    names: &KeyNames,
    tokens: impl IntoIterator<Item = &'t str>,
) -> Call<'static> {
    let mut call = Call::new(
        &KEEPALIVE,
        &[names.queue(), names.deadlines(), names.ttls()],
    );
    call.arg(millis(QUEUE_LEASE));
    for token in tokens {
        call.arg(token);
    }
    call
}

/// forget_wait.lua: removes `record`, a wait's deadlock record under `field` in the hash
/// `waits`, unless another wait has written that field since.
pub(crate) fn forget_wait_call(waits: &str, field: &str, record: &str) -> Call<'static> {
    let mut call = Call::new(&FORGET_WAIT, &[waits]);
    call.arg(field).arg(record);
    call
}

/// One lease of a [`renew_many_command`]: its key's names, its token and lease, and, when
/// its holder reported progress, the hold record to note the renewal in with how long ago
/// that was.
pub(crate) struct RenewedLease<'a> {
    pub(crate) names: &'a KeyNames,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    /// The lock's hold record (`None`: the renewal records nothing).
    pub(crate) hold: Option<String>,
    /// How long before this renewal its holder last reported progress.
    pub(crate) progress_ago: Option<Duration>,
}

/// The watchdog's batched renewal: one `EVALSHA` of renew_many.lua for `leases` (on one
/// server; in a cluster, in one slot). With `alive`, the process's liveness key, each lease
/// names its queue keys too: renewing notes its holder for the key's waiters.
pub(crate) fn renew_many_command(leases: &[RenewedLease<'_>], alive: Option<&str>) -> redis::Cmd {
    let queue_keys = if alive.is_some() { 3 } else { 1 };
    let keys_of = |lease: &RenewedLease<'_>| queue_keys + usize::from(lease.hold.is_some());
    let mut command = redis::cmd("EVALSHA");
    command.arg(RENEW_MANY.script().get_hash());
    command.arg(leases.iter().map(keys_of).sum::<usize>());
    for lease in leases {
        command.arg(lease.names.lock());
        if alive.is_some() {
            command.arg(lease.names.queue()).arg(lease.names.ttls());
        }
        command.arg(lease.hold.as_deref());
    }
    command.arg(GROW_ONLY).arg(alive.unwrap_or(""));
    for lease in leases {
        (command.arg(lease.token))
            .arg(millis(lease.ttl))
            .arg(keys_of(lease));
        match lease.progress_ago {
            Some(ago) => command.arg(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)),
            None => command.arg(""),
        };
    }
    command
}
