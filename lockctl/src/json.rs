//! `--json`: what each command prints, as one JSON object per line. The fields are named
//! as lock-runtime's types name them (`LockState`, `Holder`, `Waiter`, `ForcedRelease`);
//! durations are whole milliseconds, times milliseconds since the Unix epoch, and a
//! missing value is `null`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_runtime::{
    CheckedRelease, ForcedRelease, Holder, HolderKind, Identity, LockState, Waiter,
};
use serde_json::{Value, json};

/// A `LockState`, with `unknown` (nothing of a lock at the key, `LockState::is_empty`)
/// and `ours` (every holder's token is one of lock-runtime's).
pub(crate) fn state(state: &LockState) -> Value {
    json!({
        "key": state.key,
        "unknown": state.is_empty(),
        "ours": state.holders.iter().all(Holder::is_ours),
        "holders": state.holders.iter().map(holder).collect::<Vec<_>>(),
        "permits": state.permits,
        "handover": state.handover.map(millis),
        "fence": state.fence,
        "waiters": state.waiters.iter().map(waiter).collect::<Vec<_>>(),
        "queued": state.queued,
        "server_time": time(state.server_time),
        "masters": state.masters.iter().map(|master| master.as_ref().map(self::state)).collect::<Vec<_>>(),
    })
}

/// A `Holder`: `kind` is `exclusive`, `reader` or `permit`; `last_renewal` and
/// `last_progress` as `server_time` is (null when unknown).
pub(crate) fn holder(holder: &Holder) -> Value {
    let kind = match holder.kind {
        HolderKind::Reader => "reader",
        HolderKind::Permit => "permit",
        _ => "exclusive",
    };
    json!({
        "token": holder.token,
        "ttl": holder.ttl.map(millis),
        "kind": kind,
        "last_renewal": holder.last_renewal.map(time),
        "last_progress": holder.last_progress.map(time),
        "identity": identity(&holder.identity()),
        "since_renewal": holder.since_renewal().map(millis),
        "waits_for": holder.waits_for,
    })
}

/// An `Identity`: the process's fields (`since` in ms since the epoch, `ttl` in ms), or
/// `{"foreign": true}` for a value that is no token of lock-runtime's, or `null` for a
/// token that names no process.
fn identity(identity: &Identity) -> Value {
    match identity {
        Identity::Process(process) => json!({
            "host": process.host,
            "pid": process.pid,
            "service": process.service,
            "function": process.function,
            "since": time(process.since),
            "ttl": millis(process.ttl),
        }),
        Identity::Foreign => json!({ "foreign": true }),
        _ => Value::Null,
    }
}

/// A `Waiter`.
fn waiter(waiter: &Waiter) -> Value {
    json!({
        "id": waiter.id,
        "arrived": time(waiter.arrived),
        "waited": millis(waiter.waited),
        "place_until": waiter.place_until.map(time),
        "place_left": millis(waiter.place_left),
        "grant_ttl": waiter.grant_ttl.map(millis),
        "identity": identity(&waiter.identity()),
        "holds": waiter.holds,
    })
}

/// A `ForcedRelease`, with `released: true` (and `dry_run`).
pub(crate) fn released(release: &ForcedRelease, dry_run: bool) -> Value {
    json!({
        "key": release.key,
        "released": !dry_run,
        "dry_run": dry_run,
        "removed": release.removed.iter().map(holder).collect::<Vec<_>>(),
        "handover_restarted": release.handover_restarted,
        "woken": release.woken,
        "granted": release.granted,
    })
}

/// A `CheckedRelease`: a `ForcedRelease`'s object, or `released: false` with the token
/// that was expected and the holders now.
pub(crate) fn checked(outcome: &CheckedRelease, dry_run: bool) -> Value {
    match outcome {
        CheckedRelease::NotHolder {
            key,
            token,
            holders,
        } => json!({
            "key": key,
            "released": false,
            "dry_run": dry_run,
            "token": token,
            "holders": holders.iter().map(holder).collect::<Vec<_>>(),
        }),
        CheckedRelease::Released(release) => released(release, dry_run),
        _ => json!({ "key": null, "released": false }),
    }
}

/// What `release --dry-run` would remove (`removed`) and wake (`woken`), nothing done.
pub(crate) fn would_release(state: &LockState) -> Value {
    json!({
        "key": state.key,
        "released": false,
        "dry_run": true,
        "removed": state.holders.iter().map(holder).collect::<Vec<_>>(),
        "woken": state.waiters.first().map(|waiter| &waiter.id),
    })
}

/// A key with nothing of a lock at it.
pub(crate) fn unknown(key: &str) -> Value {
    json!({ "key": key, "unknown": true })
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn time(time: SystemTime) -> u64 {
    millis(time.duration_since(UNIX_EPOCH).unwrap_or_default())
}
