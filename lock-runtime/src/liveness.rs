//! A process's liveness in Redis: one key per client, so that waiting costs Redis per
//! process, not per key (issue 27).
//!
//! Every queue entry this client makes (on a single server or behind Sentinel) names the
//! client's liveness key (`~lock/alive/<random id>`), and the scripts that grant, purge or
//! hand over drop an entry whose key is gone. The watchdog keeps the key alive with one
//! request per third of a [`LIVENESS_LEASE`], whatever number of keys the client waits on
//! or holds, so a process that dies or stops loses all its places within one lease.
//!
//! The same request asks which of the processes this client's waiters wait for are gone:
//! a waiter whose try found the key held by a process that notes itself as the holder
//! (its watchdog renews the lease) parks until a release message wakes it or that
//! process's liveness key vanishes, instead of asking again every second. A holder's
//! release, or a head that takes the key, wakes the next waiter, which then looks again.
//! A waiter behind a foreign holder (or one not noted yet) asks again as before.
//!
//! In cluster mode a script may only read keys of its own slot, so entries there keep the
//! per-key deadline that `keepalive.lua` renews, and waiters ask again as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use once_cell::sync::Lazy;
use redis::Script;
use tokio::sync::Notify;

use crate::connection::Connection;
use crate::lease::{millis, new_token};
use crate::scripts::{AUX_PREFIX, Call, QUEUE_LEASE, invoke};

/// How long a process's liveness key lives unless the process refreshes it: a waiting
/// process that dies or stops loses its places within this long.
pub(crate) const LIVENESS_LEASE: Duration = QUEUE_LEASE;

/// Refreshes a process's liveness key and says which watched ones are gone.
static ALIVE: Lazy<Script> = Lazy::new(|| Script::new(include_str!("lua/alive.lua")));

/// One client's liveness key and the liveness keys its waiters watch.
pub(crate) struct Liveness {
    key: String,
    watched: Mutex<HashMap<String, Watched>>,
    /// Wakes every parked waiter: this client's key had lapsed (the process stopped, or the
    /// server lost it), so other processes may have dropped its entries.
    lapsed: Notify,
    /// How many times the key was found lapsed.
    lapses: AtomicU64,
}

struct Watched {
    gone: Arc<Notify>,
    watchers: usize,
}

/// A waiter's watch on another process's liveness key, until dropped.
pub(crate) struct Watch {
    liveness: Arc<Liveness>,
    key: String,
    gone: Arc<Notify>,
}

impl Watch {
    /// Resolves when the watched process's key is found gone (or, for a future enabled
    /// before, at the next refresh that finds it gone).
    pub(crate) fn gone(&self) -> &Notify {
        &self.gone
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = self.liveness.watched();
        if let Some(entry) = watched.get_mut(&self.key) {
            entry.watchers -= 1;
            if entry.watchers == 0 {
                watched.remove(&self.key);
            }
        }
    }
}

impl Liveness {
    /// A fresh liveness key for a new client.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Liveness {
            key: format!("{AUX_PREFIX}alive/{}", new_token()),
            watched: Mutex::default(),
            lapsed: Notify::new(),
            lapses: AtomicU64::new(0),
        })
    }

    fn watched(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        // Every update is a single insert, remove or counter change: a poisoned map is
        // still consistent.
        self.watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// This client's liveness key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Watches another process's liveness key `key` until the returned watch is dropped.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> Watch {
        let gone = {
            let mut watched = self.watched();
            let entry = watched.entry(key.to_owned()).or_insert_with(|| Watched {
                gone: Arc::new(Notify::new()),
                watchers: 0,
            });
            entry.watchers += 1;
            entry.gone.clone()
        };
        Watch {
            liveness: self.clone(),
            key: key.to_owned(),
            gone,
        }
    }

    /// Whether any waiter watches another process now.
    pub(crate) fn is_watching(&self) -> bool {
        !self.watched().is_empty()
    }

    /// Wakes every parked waiter when this client's key is found lapsed.
    pub(crate) fn lapsed(&self) -> &Notify {
        &self.lapsed
    }

    /// How many times this client's key was found lapsed: a waiter that saw a different
    /// count before its try looks again instead of parking.
    pub(crate) fn lapses(&self) -> u64 {
        self.lapses.load(Ordering::Acquire)
    }

    /// Refreshes this client's key and wakes the waiters of every watched process whose
    /// key is gone (all of them when this client's own key had lapsed). One request. A
    /// failure is only logged: the next refresh comes a third of a lease later.
    pub(crate) async fn refresh(&self, mut connection: Connection) {
        let watched: Vec<String> = self.watched().keys().cloned().collect();
        let reply = if watched.is_empty() {
            // Nobody to ask about: a plain `SET .. GET`, no script.
            redis::cmd("SET")
                .arg(&self.key)
                .arg(1)
                .arg("PX")
                .arg(millis(LIVENESS_LEASE))
                .arg("GET")
                .query_async::<Option<String>>(&mut connection)
                .await
                .map(|kept| (i64::from(kept.is_some()), Vec::new()))
        } else {
            let mut keys: Vec<&str> = Vec::with_capacity(1 + watched.len());
            keys.push(&self.key);
            keys.extend(watched.iter().map(String::as_str));
            let mut call = Call::new(&ALIVE, &keys);
            call.arg(millis(LIVENESS_LEASE));
            invoke::<(i64, Vec<String>)>(&call, &mut connection).await
        };
        let (kept, gone) = match reply {
            Ok(reply) => reply,
            Err(err) => {
                tracing::debug!(key = %self.key, error = %err, "refreshing the process's liveness key failed");
                return;
            }
        };
        if kept == 0 {
            self.lapses.fetch_add(1, Ordering::AcqRel);
            self.lapsed.notify_waiters();
        }
        let watched = self.watched();
        for key in gone {
            if let Some(entry) = watched.get(&key) {
                entry.gone.notify_waiters();
            }
        }
    }
}
