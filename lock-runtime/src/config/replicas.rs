//! Grants that wait for the primary's replicas or append-only files before they count
//! ([`Config::wait_for_replicas`], [`Config::wait_for_aof`]); the rule itself is
//! [`crate::replicas`].

use std::time::Duration;

use crate::config::Config;
use crate::replicas::Replicas;

impl Config {
    /// Grants that wait for replicas: every write that grants or extends a lease counts
    /// only once `replicas` replicas of the primary that took it have it, as `WAIT replicas
    /// timeout` reports (default: off, `replicas` 0).
    ///
    /// Redis replicates asynchronously: a lock the primary granted just before it died may
    /// be missing on the replica promoted in its place, and another client then takes it
    /// while the first still holds it (`tests/tests/failover.rs` counts those double
    /// grants; RELIABILITY.md, "Failover with a lagging replica"). With this option a grant
    /// is not reported until the replicas have it.
    ///
    /// Behavior:
    /// - `WAIT` rides in the same pipeline as the write, on the same connection (it counts
    ///   that connection's writes, and goes to the server that took the write, never to a
    ///   replica): an uncontended acquisition still costs one round trip, plus the time the
    ///   replicas take to acknowledge.
    /// - Written so: the quick `SET NX`, the acquire script (which also confirms a release's
    ///   hand-over to the next process: the grantee's lease counts from that confirming
    ///   try), a task taking over its process's lock with other options, every renewal
    ///   batch of the watchdog, a semaphore's permit, a reader's share, and every guard's
    ///   `extend`.
    /// - An acquisition whose grant too few replicas confirmed is undone (the owner-checked
    ///   release) and tried again within `wait`; when `wait` ends (or at once, for a
    ///   try-once call) it fails with [`LockError::NotReplicated`](crate::LockError::NotReplicated),
    ///   which says how many replicas confirmed.
    /// - A renewal too few replicas confirmed counts as a failed renewal: the lease stays
    ///   valid only until the last confirmed renewal's validity point, and is reported lost
    ///   then (`LostCause::RenewalFailed`) unless a later renewal is confirmed.
    /// - While a `WAIT` waits, requests pipelined behind it on the same multiplexed
    ///   connection wait too (Redis answers a connection in order): with healthy replicas
    ///   that is one replica round trip; with a replica down, up to `timeout` per write.
    ///   [`pool_size`](Self::pool_size) spreads it.
    /// - After a failover the option goes on working on the new primary (through Sentinel,
    ///   a cluster, or an address moved to it) once that primary has `replicas` replicas;
    ///   until then every grant fails with `NotReplicated`, and no key is left behind that
    ///   nobody can take (an undone grant is deleted, or expires by its ttl).
    ///
    /// `timeout` must be at least 1 ms (`WAIT 0` would block for ever) and shorter than
    /// [`response_timeout`](Self::response_timeout); Redlock masters have no replicas, so
    /// the option is refused there. [`LockClient::new`](crate::LockClient::new) checks both.
    ///
    /// This narrows the window, it does not close every one: a replica that acknowledged
    /// can still lose the write if it restarts without persistence, and `WAIT` does not
    /// make Redis strongly consistent. Fencing remains the remedy for what no lease
    /// prevents.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::Config;
    ///
    /// // A grant counts once one replica has it; give up on a replica after 50 ms.
    /// let config = Config::sentinel("mymaster", ["redis://10.0.0.1:26379"])
    ///     .wait_for_replicas(1, Duration::from_millis(50));
    /// # let _ = config;
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Replicas::new(replicas, timeout);
        self
    }

    /// Durable grants: every write that grants or extends a lease counts only once it is
    /// in the primary's own append-only file (`local`) and in those of `replicas` replicas,
    /// as `WAITAOF local replicas timeout` reports (Redis 7.2 and later, Valkey). A power
    /// loss right after a grant then cannot take it back on restart (with `appendfsync
    /// everysec` the last second of writes may otherwise be lost). Off by default.
    ///
    /// It follows [`wait_for_replicas`](Self::wait_for_replicas)'s rules in every respect
    /// (what is written so, the undo and the tries again within `wait`, the renewals, the
    /// checks), with [`LockError::NotDurable`](crate::LockError::NotDurable) for a write
    /// that fell short; the later of the two calls is the rule. The primary needs
    /// `appendonly yes` for `local`, and the replicas for `replicas`. A server without
    /// `WAITAOF` (Redis before 7.2), or with `appendonly no` when `local` is asked for, is
    /// refused with [`LockError::Config`](crate::LockError::Config) when the client is
    /// built, if it answers then (and allows `CONFIG GET`), else at the first grant: the
    /// server's error reply to `WAITAOF` (e.g. `ERR WAITAOF cannot be used when numlocal is
    /// set but appendonly is disabled`) is that error, naming the key, the reason and the
    /// fix, at once (not tried again within `wait`), and the grant is given back.
    /// With `replicas > 0` each grant waits about a second (a replica reports its
    /// append-only file's progress about once a second), so a shorter timeout confirms
    /// almost no grant, and one of 1.5 s confirms about one grant per second on a key
    /// (BENCHMARKS.md, "Durable grants"): keep it for locks taken rarely and held long.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_runtime::Config;
    ///
    /// // A grant counts once it is on the primary's disk; give up after 100 ms.
    /// let config = Config::single("redis://10.0.0.1:6379")
    ///     .wait_for_aof(true, 0, Duration::from_millis(100));
    /// # let _ = config;
    /// ```
    pub fn wait_for_aof(mut self, local: bool, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Replicas::aof(local, replicas, timeout);
        self
    }
}
