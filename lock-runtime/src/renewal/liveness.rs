//! A process's liveness in Redis: one key per client, so that waiting costs Redis per
//! process, not per key.
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
//! process's liveness key vanishes, instead of asking again every second. A head that takes
//! the key wakes the next waiter, which then looks again; a release that grants the key to
//! the head tells the next waiter to look later instead ([`crate::wakeups::Woken::LookLater`]):
//! it stops watching and parks at most the grant's confirmation window, as the grant is not
//! yet a holder to watch (the grantee's confirmation wakes nobody).
//! A waiter behind a foreign holder (or one not noted yet) asks again as before.
//!
//! In cluster mode a script reads only keys its node serves, so the client keeps one
//! liveness key per master (`~lock/alive/<random id>{<tag>}`, the tag a hash tag that
//! master serves, see [`crate::connection::cluster_nodes`]), refreshed with one request per master per
//! period, and an entry names the key of the master that serves its lock key. The scripts
//! read those keys undeclared (Redis 7 lets a script without flags read any key of its
//! node) and with `redis.pcall`: a key they cannot read (its slot moved with a reshard, or
//! this client's slot map was stale) counts as alive for an entry (which then ends by its
//! grant lapsing, as any entry of a process that does not come) and as gone for a watch
//! (the waiter asks again). Before the slot map is read, entries keep the per-key deadline
//! that `keepalive.lua` renews.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::connection::Connection;
#[cfg(feature = "cluster")]
use crate::connection::cluster_nodes::ClusterNodes;
use crate::lease::{millis, new_token};
use crate::scripts::alive_call;
use crate::scripts::{AUX_PREFIX, QUEUE_LEASE, invoke};

/// How long a process's liveness key lives unless the process refreshes it: a waiting
/// process that dies or stops loses its places within this long.
pub(crate) const LIVENESS_LEASE: Duration = QUEUE_LEASE;

/// One client's liveness key (one per master in cluster mode) and the liveness keys its
/// waiters watch.
pub(crate) struct Liveness {
    /// The key (single server, Sentinel), or in cluster mode the part before the tag.
    key: String,
    /// In cluster mode, the masters whose tags complete the keys.
    #[cfg(feature = "cluster")]
    cluster: Option<ClusterNodes>,
    /// In cluster mode, the tags of the keys entries or holder notes named: a refresh that
    /// finds one of those gone is a lapse (the others were only never made yet).
    #[cfg(feature = "cluster")]
    named: Mutex<std::collections::HashSet<Arc<str>>>,
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
pub(crate) struct LivenessWatch {
    liveness: Arc<Liveness>,
    key: String,
    gone: Arc<Notify>,
}

impl LivenessWatch {
    /// Resolves when the watched process's key is found gone (or, for a future enabled
    /// before, at the next refresh that finds it gone).
    pub(crate) fn gone(&self) -> &Notify {
        &self.gone
    }
}

impl Drop for LivenessWatch {
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
        Arc::new(Liveness::fresh())
    }

    /// OwnConnection liveness keys for a new cluster client: one per master of `nodes`.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(nodes: ClusterNodes) -> Arc<Self> {
        Arc::new(Liveness {
            cluster: Some(nodes),
            ..Liveness::fresh()
        })
    }

    fn fresh() -> Self {
        Liveness {
            key: format!("{AUX_PREFIX}alive/{}", new_token()),
            #[cfg(feature = "cluster")]
            cluster: None,
            #[cfg(feature = "cluster")]
            named: Mutex::default(),
            watched: Mutex::default(),
            lapsed: Notify::new(),
            lapses: AtomicU64::new(0),
        }
    }

    fn watched(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        // Every update is a single insert, remove or counter change: a poisoned map is
        // still consistent.
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tags of the keys that entries or holder notes named, under their lock.
    #[cfg(feature = "cluster")]
    fn named(&self) -> MutexGuard<'_, std::collections::HashSet<Arc<str>>> {
        self.named.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The liveness key that queue entries and holder notes for `lock` name: this client's
    /// key, or in cluster mode its key on the master that serves `lock`'s slot (`None`
    /// before the slot map is read: the entry then keeps a per-key deadline).
    pub(crate) fn key_for(&self, lock: &str) -> Option<Cow<'_, str>> {
        #[cfg(feature = "cluster")]
        if let Some(nodes) = &self.cluster {
            let tag = nodes.liveness_tag(lock)?;
            let key = self.tagged(&tag);
            self.named().insert(tag);
            return Some(Cow::Owned(key));
        }
        #[cfg(not(feature = "cluster"))]
        let _ = lock;
        Some(Cow::Borrowed(&self.key))
    }

    /// This client's liveness key on the master whose tag is `tag`.
    #[cfg(feature = "cluster")]
    fn tagged(&self, tag: &str) -> String {
        format!("{}{{{tag}}}", self.key)
    }

    /// Watches another process's liveness key `key` until the returned watch is dropped.
    pub(crate) fn watch(self: &Arc<Self>, key: &str) -> LivenessWatch {
        let gone = {
            let mut watched = self.watched();
            let entry = watched.entry(key.to_owned()).or_insert_with(|| Watched {
                gone: Arc::new(Notify::new()),
                watchers: 0,
            });
            entry.watchers += 1;
            entry.gone.clone()
        };
        LivenessWatch {
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

    /// Refreshes this client's key (each of them, one per master, in cluster mode) and wakes
    /// the waiters of every watched process whose key is gone (all of them when one of
    /// this client's keys had lapsed). One request per key. A failure is only logged: the
    /// next refresh comes a third of a lease later.
    pub(crate) async fn refresh(&self, connection: Connection) {
        let watched: Vec<String> = self.watched().keys().cloned().collect();
        #[cfg(feature = "cluster")]
        if let Some(nodes) = &self.cluster {
            // Each watched key goes with this client's key on the master that serves it
            // (the first one when the map does not say): a key the script cannot read there
            // counts as gone, and its waiters ask again.
            let tags = nodes.liveness_tags();
            let mut by_tag: HashMap<&str, Vec<&str>> =
                tags.iter().map(|tag| (&**tag, Vec::new())).collect();
            for key in &watched {
                let tag = nodes.liveness_tag(key);
                let group = tag
                    .as_deref()
                    .and_then(|tag| tags.iter().find(|known| &***known == tag))
                    .or_else(|| tags.first());
                if let Some(group) = group
                    && let Some(keys) = by_tag.get_mut(&**group)
                {
                    keys.push(key);
                }
            }
            let refreshes = by_tag.into_iter().map(|(tag, keys)| {
                let own = self.tagged(tag);
                let connection = connection.clone();
                async move {
                    let lapsed = self.refresh_one(&own, &keys, connection).await;
                    if lapsed && self.named().contains(tag) {
                        self.lapse();
                    }
                }
            });
            futures_util::future::join_all(refreshes).await;
            return;
        }
        let keys: Vec<&str> = watched.iter().map(String::as_str).collect();
        if self.refresh_one(&self.key, &keys, connection).await {
            self.lapse();
        }
    }

    /// One of this client's keys was found lapsed: other processes may have dropped its
    /// entries, so every parked waiter looks again.
    fn lapse(&self) {
        self.lapses.fetch_add(1, Ordering::AcqRel);
        self.lapsed.notify_waiters();
    }

    /// Refreshes the liveness key `own` and asks about `watched` on the server that serves
    /// it. Returns whether `own` had lapsed.
    async fn refresh_one(&self, own: &str, watched: &[&str], mut connection: Connection) -> bool {
        let reply = if watched.is_empty() {
            // Nobody to ask about: a plain `SET .. GET`, no script.
            redis::cmd("SET")
                .arg(own)
                .arg(1)
                .arg("PX")
                .arg(millis(LIVENESS_LEASE))
                .arg("GET")
                .query_async::<Option<String>>(&mut connection)
                .await
                .map(|kept| (i64::from(kept.is_some()), Vec::new()))
        } else {
            let call = alive_call(own, LIVENESS_LEASE, watched.iter().copied());
            invoke::<(i64, Vec<String>)>(&call, &mut connection).await
        };
        let (kept, gone) = match reply {
            Ok(reply) => reply,
            Err(err) => {
                tracing::debug!(key = %own, error = %err, "refreshing the process's liveness key failed");
                return false;
            }
        };
        let watched = self.watched();
        for key in gone {
            if let Some(entry) = watched.get(&key) {
                entry.gone.notify_waiters();
            }
        }
        kept == 0
    }
}
