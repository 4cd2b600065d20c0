//! The option × primitive × deployment matrix that the guide's table states
//! (lock-runtime/src/guide/patterns.md, "Which primitive takes what, where"), proved cell
//! by cell against real servers.
//!
//! [`MATRIX`] is the one list of expected cells: a row per primitive and option, with what
//! each deployment does with it (single server, Sentinel, Cluster, Redlock). A cell that
//! works is proved three ways, with the option on: (a) exclusion, four tasks of two clients
//! five rounds each, never two inside where one may be (readers beside each other, never
//! beside a writer; a semaphore's holders up to its permits); (b) a release frees the key at
//! once for another client that tries once; (c) a loss is reported: the key (a reader's
//! share, a permit) deleted behind the holder's back with a plain connection, then the
//! guard says lost, the release says so, or `run` with `on_lost = "cancel"` stops the body
//! with `LockError::Lost`. Each option adds its own check (the ttl in Redis, `Busy` and
//! `Timeout` and a woken waiter, the lease ending by itself without the watchdog, fences
//! that strictly increase, the key kept for `hold_at_least`, the expiry `extend` moves,
//! `WAIT`/`WAITAOF` following the grants, `inspect` and `force_release`). A refused cell
//! must fail with `LockError::Config` whose reason names why. [`the_guide_and_the_matrix_agree`]
//! parses the guide's table and fails, naming the cell, where the guide and [`MATRIX`]
//! say yes and no differently.
//!
//! Each deployment is started once and its cells run one after another on it (keys unique
//! per cell and phase); one test per deployment collects every broken cell into one
//! report. `wait_for_aof` runs on a Valkey server (Redis 7.0 has no `WAITAOF`), beside
//! the single-server section.
//!
//! ```text
//! cargo test -p lock-tests --test matrix -- --nocapture | grep MATRIX
//! ```
#![allow(clippy::unwrap_used, missing_docs)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{
    Config, HolderKind, LockClient, LockError, LockGuard, LockOptions, LostCause, MultiGuard,
    MultiLock, OnLost, ReadGuard, ReleaseOutcome, SemaphoreGuard, current_lock, current_locks,
};
use lock_tests::RedisServer;
use lock_tests::cluster::RedisCluster;
use lock_tests::sentinel::{MASTER, SentinelDeployment};

// ---------------------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------------------

/// A primitive, as the guide's columns name them; the read-write lock's two sides are
/// cells of their own (the guide's `RwLock` column speaks of both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prim {
    Lock,
    Reader,
    Writer,
    Semaphore,
    Multi,
}

/// An option (or an operation) of the guide's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opt {
    Ttl,
    Wait,
    WatchdogOff,
    OnLostContinue,
    OnLostCancel,
    Fencing,
    HoldAtLeast,
    MaxHold,
    Extend,
    WaitForReplicas,
    WaitForAof,
    Inspect,
}

/// A deployment, in the order of [`MATRIX`]'s columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dep {
    Single,
    Sentinel,
    Cluster,
    Redlock,
}

const DEPLOYMENTS: [Dep; 4] = [Dep::Single, Dep::Sentinel, Dep::Cluster, Dep::Redlock];

/// What a cell does.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Works: exclusion, release, loss and the option's own check.
    Works,
    /// Refused with `LockError::Config` whose reason contains every one of these words.
    Refused(&'static [&'static str]),
    /// Accepted and without effect on this primitive (a reader gets no fence).
    NoEffect,
    /// No method for it: a compile error, which this suite cannot run (e.g. `extend` on a
    /// `MultiGuard`). The guide says no.
    NoApi,
    /// This deployment lacks what the option needs: no replica to wait for (single server
    /// and cluster here), no `WAITAOF` (Redis 7.0). Not compared with the guide.
    NotHere,
    /// A known gap: the guide promises what the code does not do (or the other way), and
    /// why. The test asserts the code as it is, so that it fails when the gap is closed
    /// and this entry must be updated; the guide check takes the guide's word as the
    /// opposite of today's. No cell is a gap today: `MultiLock`'s `watchdog` and `fencing`
    /// setters, which the table promised before they existed, landed with their test.
    #[allow(dead_code)]
    Gap(Today, &'static str),
    /// The operation runs but does not cover this primitive on this deployment, and the
    /// guide says so (why): not run here; a test of its own shows what it does instead.
    Limited(&'static str),
}

/// What the code does today in a [`Expect::Gap`] cell.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
enum Today {
    /// Refused with `LockError::Config` naming these words, where the guide says yes.
    Refused(&'static [&'static str]),
    /// Accepted, where the guide says no.
    Accepted,
}

use Expect::{Limited, NoApi, NoEffect, NotHere, Works as W};

/// Why `inspect` of a semaphore key lists no permit in Redlock mode: each permit is a slot
/// key of its own there, which holds its holder's token (redlock.rs shows the slots).
const SLOT_KEYS: &str = "each Redlock permit is a slot key of its own";

const R_HOLD: Expect = Expect::Refused(&["hold_at_least"]);
const R_FENCING: Expect = Expect::Refused(&["fencing"]);
const R_REPLICAS: Expect = Expect::Refused(&["Redlock", "wait_for_replicas"]);
const R_AOF: Expect = Expect::Refused(&["Redlock", "wait_for_aof"]);

/// The one list of expected cells: (primitive, option, [single server, Sentinel, Cluster,
/// Redlock]). Single server × `wait_for_aof` runs on Valkey (Redis 7.0 has no `WAITAOF`);
/// `wait_for_replicas` runs where there is a replica (Sentinel).
#[rustfmt::skip]
const MATRIX: &[(Prim, Opt, [Expect; 4])] = &[
    (Prim::Lock, Opt::Ttl, [W, W, W, W]),
    (Prim::Lock, Opt::Wait, [W, W, W, W]),
    (Prim::Lock, Opt::WatchdogOff, [W, W, W, W]),
    (Prim::Lock, Opt::OnLostContinue, [W, W, W, W]),
    (Prim::Lock, Opt::OnLostCancel, [W, W, W, W]),
    (Prim::Lock, Opt::Fencing, [W, W, W, W]),
    (Prim::Lock, Opt::HoldAtLeast, [W, W, W, W]),
    (Prim::Lock, Opt::MaxHold, [W, W, W, W]),
    (Prim::Lock, Opt::Extend, [W, W, W, W]),
    (Prim::Lock, Opt::WaitForReplicas, [NotHere, W, NotHere, R_REPLICAS]),
    (Prim::Lock, Opt::WaitForAof, [W, NotHere, NotHere, R_AOF]),
    (Prim::Lock, Opt::Inspect, [W, W, W, W]),
    //
    (Prim::Reader, Opt::Ttl, [W, W, W, W]),
    (Prim::Reader, Opt::Wait, [W, W, W, W]),
    (Prim::Reader, Opt::WatchdogOff, [W, W, W, W]),
    (Prim::Reader, Opt::OnLostContinue, [W, W, W, W]),
    (Prim::Reader, Opt::OnLostCancel, [W, W, W, W]),
    (Prim::Reader, Opt::Fencing, [NoEffect, NoEffect, NoEffect, NoEffect]),
    (Prim::Reader, Opt::HoldAtLeast, [R_HOLD, R_HOLD, R_HOLD, R_HOLD]),
    (Prim::Reader, Opt::MaxHold, [W, W, W, W]),
    (Prim::Reader, Opt::Extend, [W, W, W, W]),
    (Prim::Reader, Opt::WaitForReplicas, [NotHere, W, NotHere, R_REPLICAS]),
    (Prim::Reader, Opt::WaitForAof, [W, NotHere, NotHere, R_AOF]),
    (Prim::Reader, Opt::Inspect, [W, W, W, W]),
    //
    (Prim::Writer, Opt::Ttl, [W, W, W, W]),
    (Prim::Writer, Opt::Wait, [W, W, W, W]),
    (Prim::Writer, Opt::WatchdogOff, [W, W, W, W]),
    (Prim::Writer, Opt::OnLostContinue, [W, W, W, W]),
    (Prim::Writer, Opt::OnLostCancel, [W, W, W, W]),
    (Prim::Writer, Opt::Fencing, [W, W, W, W]),
    (Prim::Writer, Opt::HoldAtLeast, [R_HOLD, R_HOLD, R_HOLD, R_HOLD]),
    (Prim::Writer, Opt::MaxHold, [W, W, W, W]),
    (Prim::Writer, Opt::Extend, [W, W, W, W]),
    (Prim::Writer, Opt::WaitForReplicas, [NotHere, W, NotHere, R_REPLICAS]),
    (Prim::Writer, Opt::WaitForAof, [W, NotHere, NotHere, R_AOF]),
    (Prim::Writer, Opt::Inspect, [W, W, W, W]),
    //
    (Prim::Semaphore, Opt::Ttl, [W, W, W, W]),
    (Prim::Semaphore, Opt::Wait, [W, W, W, W]),
    (Prim::Semaphore, Opt::WatchdogOff, [W, W, W, W]),
    (Prim::Semaphore, Opt::OnLostContinue, [W, W, W, W]),
    (Prim::Semaphore, Opt::OnLostCancel, [W, W, W, W]),
    // No `fencing` setter (a compile error); through `with_options` it is refused at
    // acquire, before the deployment is looked at.
    (Prim::Semaphore, Opt::Fencing, [R_FENCING, R_FENCING, R_FENCING, R_FENCING]),
    (Prim::Semaphore, Opt::HoldAtLeast, [R_HOLD, R_HOLD, R_HOLD, R_HOLD]),
    (Prim::Semaphore, Opt::MaxHold, [W, W, W, W]),
    (Prim::Semaphore, Opt::Extend, [W, W, W, W]),
    (Prim::Semaphore, Opt::WaitForReplicas, [NotHere, W, NotHere, R_REPLICAS]),
    (Prim::Semaphore, Opt::WaitForAof, [W, NotHere, NotHere, R_AOF]),
    (Prim::Semaphore, Opt::Inspect, [W, W, W, Limited(SLOT_KEYS)]),
    //
    (Prim::Multi, Opt::Ttl, [W, W, W, W]),
    (Prim::Multi, Opt::Wait, [W, W, W, W]),
    (Prim::Multi, Opt::WatchdogOff, [W, W, W, W]),
    (Prim::Multi, Opt::OnLostContinue, [W, W, W, W]),
    (Prim::Multi, Opt::OnLostCancel, [W, W, W, W]),
    (Prim::Multi, Opt::Fencing, [W, W, W, W]),
    (Prim::Multi, Opt::HoldAtLeast, [R_HOLD, R_HOLD, R_HOLD, R_HOLD]),
    (Prim::Multi, Opt::MaxHold, [W, W, W, W]),
    // `MultiGuard` has no `extend` (and `guards()` lends the guards only to read).
    (Prim::Multi, Opt::Extend, [NoApi, NoApi, NoApi, NoApi]),
    (Prim::Multi, Opt::WaitForReplicas, [NotHere, W, NotHere, R_REPLICAS]),
    (Prim::Multi, Opt::WaitForAof, [W, NotHere, NotHere, R_AOF]),
    (Prim::Multi, Opt::Inspect, [W, W, W, W]),
];

// ---------------------------------------------------------------------------------------
// Durations: one lease for the ordinary phases, a shorter one where the test waits for
// it to end or to be found lost. Every wait is bounded by a few of them.
// ---------------------------------------------------------------------------------------

/// The lease of the ordinary phases (watchdog on: renewed every 500 ms).
const TTL: Duration = Duration::from_millis(1500);
/// The lease of a loss phase: a loss is found within a third of it plus a round trip.
const LOSS_TTL: Duration = Duration::from_millis(900);
/// How long a loss may take to be reported: a few renewal periods of [`LOSS_TTL`], with
/// room for a busy machine.
const LOSS_BOUND: Duration = Duration::from_secs(5);
/// The lease that ends by itself without the watchdog.
const SHORT_TTL: Duration = Duration::from_millis(500);
/// `hold_at_least` in its own check, and in the exclusion phase (where the tasks try once
/// per tick, as replicas running a scheduled job do).
const HOLD: Duration = Duration::from_millis(400);
const HOLD_IN_ROUNDS: Duration = Duration::from_millis(30);
/// `max_hold` in its own check; in the other phases, a bound no hold reaches.
const MAX_HOLD: Duration = Duration::from_millis(400);
const MAX_HOLD_UNREACHED: Duration = Duration::from_secs(60);
/// What `extend` gives.
const EXTENDED: Duration = Duration::from_secs(6);
/// A wait that is never expected to run out.
const LONG_WAIT: Duration = Duration::from_secs(10);
/// The bound of one call that should answer at once.
const CALL: Duration = Duration::from_secs(5);
/// The semaphore's permits.
const PERMITS: u32 = 2;
/// The exclusion phase: tasks (half on each of two clients) × rounds.
const TASKS: usize = 4;
const ROUNDS: usize = 5;

// ---------------------------------------------------------------------------------------
// The servers of a deployment, the clients, and what a plain connection does to them
// ---------------------------------------------------------------------------------------

enum Servers<'a> {
    /// A single server, or Sentinel's primary (no failover happens here).
    One(&'a RedisServer),
    Cluster(&'a RedisCluster),
    /// Redlock's independent masters.
    Masters(&'a [RedisServer]),
}

impl Servers<'_> {
    /// The servers that hold `key` (every master for Redlock).
    fn owners(&self, key: &str) -> Vec<&RedisServer> {
        match self {
            Servers::One(server) => vec![*server],
            Servers::Cluster(cluster) => vec![&cluster.nodes[cluster.owner(cluster.slot(key))]],
            Servers::Masters(masters) => masters.iter().collect(),
        }
    }

    /// How many of the owners must agree (a majority for Redlock).
    fn quorum(&self) -> usize {
        match self {
            Servers::Masters(masters) => masters.len() / 2 + 1,
            _ => 1,
        }
    }
}

/// A deployment's cells' world: its servers, its base configuration and two clients
/// (two processes, as far as the locks can tell).
struct Ctx<'a> {
    dep: Dep,
    servers: Servers<'a>,
    config: Config,
    a: LockClient,
    b: LockClient,
    /// Sentinel: the replica, which a grant that waits for replicas must have reached.
    replica: Option<&'a RedisServer>,
    /// The server and the command an option adds to every grant (`wait`, `waitaof`).
    counted: Option<(&'a RedisServer, &'static str)>,
    /// The same deployment's configuration on loopback ports where nothing listens, where
    /// a client can be built without a server (single server, Redlock): a refusal "before
    /// any Redis traffic" must be the same `Config` error through it.
    dead: Option<LockClient>,
}

impl<'a> Ctx<'a> {
    fn new(dep: Dep, servers: Servers<'a>, config: Config) -> Self {
        let a = LockClient::new(config.clone()).unwrap();
        let b = LockClient::new(config.clone()).unwrap();
        Ctx {
            dep,
            servers,
            config,
            a,
            b,
            replica: None,
            counted: None,
            dead: None,
        }
    }

    /// The cell's target: its key (its keys for a `MultiLock`: on three different nodes
    /// in a cluster), unique per cell and phase.
    fn target(&self, prim: Prim, opt: Opt, phase: &str) -> Target {
        let name = format!("matrix:{:?}:{prim:?}:{opt:?}:{phase}", self.dep).to_lowercase();
        let keys = match (&self.servers, prim) {
            (Servers::Cluster(cluster), Prim::Multi) => (0..3)
                .map(|node| cluster.key_on(&format!("{name}:{node}"), node))
                .collect(),
            (_, Prim::Multi) => (0..3).map(|n| format!("{name}:{n}")).collect(),
            _ => vec![name],
        };
        Target { prim, keys }
    }

    /// Runs `command` on every owner of `key`; each owner's reply.
    fn on_owners<T: redis::FromRedisValue>(&self, key: &str, command: &redis::Cmd) -> Vec<T> {
        self.servers
            .owners(key)
            .into_iter()
            .map(|server| command.query(&mut server.conn()).unwrap())
            .collect()
    }

    /// The keys in `key`'s slot whose names contain `needle`, on each owner.
    fn keys_with(&self, key: &str, needle: &str) -> Vec<Vec<String>> {
        self.on_owners(key, redis::cmd("KEYS").arg(format!("*{needle}*")))
    }

    /// The permit slot key that holds `token` of the semaphore `key` (Redlock mode: each
    /// permit is a lock of its own, `~lock/permit/N{KEY}`), if a slot holds it.
    fn permit_slot(&self, key: &str, token: &str) -> Option<String> {
        self.permit_slots(key).into_iter().find(|slot| {
            self.on_owners::<Option<String>>(key, redis::cmd("GET").arg(slot))
                .iter()
                .any(|held| held.as_deref() == Some(token))
        })
    }

    /// Every permit slot key of the semaphore `key` that some owner has (Redlock mode).
    fn permit_slots(&self, key: &str) -> Vec<String> {
        let pattern = format!("~lock/permit/*{{{key}}}");
        let mut slots = self
            .on_owners::<Vec<String>>(key, redis::cmd("KEYS").arg(pattern))
            .concat();
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// Whether a client is subscribed to `key`'s release messages on a majority of its
    /// owners (a Redlock semaphore's waiter, which no queue shows).
    fn subscribed(&self, key: &str) -> bool {
        let channel = format!("~lock/released{{{key}}}");
        let counts: Vec<(String, i64)> =
            self.on_owners(key, redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel));
        counts.iter().filter(|(_, count)| *count > 0).count() >= self.servers.quorum()
    }

    /// Takes `what` away behind its holder's back with plain connections (on every
    /// Redlock master); an error when there was nothing to take.
    fn take_away(&self, what: &Taken) -> Result<(), String> {
        let (key, removed): (&str, Vec<i64>) = match what {
            Taken::Key(key) => {
                // A whole semaphore: in Redlock mode, its permits' slot keys.
                let mut removed: Vec<i64> = self.on_owners(key, redis::cmd("DEL").arg(key));
                for slot in self.permit_slots(key) {
                    let slot_removed: Vec<i64> = self.on_owners(key, redis::cmd("DEL").arg(slot));
                    for (count, more) in removed.iter_mut().zip(slot_removed) {
                        *count += more;
                    }
                }
                (key, removed)
            }
            Taken::Share { key, token } => {
                let mut removed = Vec::new();
                for (server, names) in self
                    .servers
                    .owners(key)
                    .into_iter()
                    .zip(self.keys_with(key, token))
                {
                    let mut deleted = 0;
                    for name in names {
                        deleted += redis::cmd("DEL")
                            .arg(&name)
                            .query::<i64>(&mut server.conn())
                            .unwrap();
                    }
                    removed.push(deleted);
                }
                (key, removed)
            }
            Taken::Shares { key } => {
                let mut removed = Vec::new();
                for server in self.servers.owners(key) {
                    let names: Vec<String> = redis::cmd("KEYS")
                        .arg("~lock/share/*")
                        .query(&mut server.conn())
                        .unwrap();
                    let mut deleted = 0;
                    for name in names.iter().filter(|name| name.contains(key.as_str())) {
                        deleted += redis::cmd("DEL")
                            .arg(name)
                            .query::<i64>(&mut server.conn())
                            .unwrap();
                    }
                    removed.push(deleted);
                }
                (key, removed)
            }
            Taken::Permit { key, token } => match self.permit_slot(key, token) {
                Some(slot) => (key, self.on_owners(key, redis::cmd("DEL").arg(slot))),
                None => (
                    key,
                    self.on_owners(key, redis::cmd("ZREM").arg(key).arg(token)),
                ),
            },
        };
        let hit = removed.iter().filter(|count| **count > 0).count();
        if hit >= self.servers.quorum() {
            Ok(())
        } else {
            Err(format!(
                "nothing to take away for {what:?} (removed per owner of `{key}`: {removed:?})"
            ))
        }
    }

    /// PTTL of the key(s) that hold `held`, on each owner (for a reader: its share key).
    fn pttls(&self, held: &Held) -> Vec<i64> {
        let mut pttls = Vec::new();
        for (key, token) in held.tokens() {
            let name = match held {
                Held::Read(_) => {
                    let found: Vec<String> = self.keys_with(&key, &token).concat();
                    match found.first() {
                        Some(name) => name.clone(),
                        None => return vec![-2],
                    }
                }
                Held::Permit(_) => self
                    .permit_slot(&key, &token)
                    .unwrap_or_else(|| key.clone()),
                _ => key.clone(),
            };
            pttls.extend(self.on_owners::<i64>(&key, redis::cmd("PTTL").arg(&name)));
        }
        pttls
    }

    /// Whether the replica has what `held` holds (Sentinel's wait_for_replicas).
    fn replica_has(&self, held: &Held) -> Result<(), String> {
        let Some(replica) = self.replica else {
            return Ok(());
        };
        let mut conn = replica.conn();
        for (key, token) in held.tokens() {
            let there = match held {
                Held::Read(_) => !redis::cmd("KEYS")
                    .arg(format!("*{token}*"))
                    .query::<Vec<String>>(&mut conn)
                    .unwrap()
                    .is_empty(),
                Held::Permit(_) => redis::cmd("ZSCORE")
                    .arg(&key)
                    .arg(&token)
                    .query::<Option<f64>>(&mut conn)
                    .unwrap()
                    .is_some(),
                _ => {
                    redis::cmd("GET")
                        .arg(&key)
                        .query::<Option<String>>(&mut conn)
                        .unwrap()
                        == Some(token.clone())
                }
            };
            if !there {
                return Err(format!(
                    "the grant of `{key}` was reported before the replica had it"
                ));
            }
        }
        Ok(())
    }

    /// How many times the counted server ran the counted command.
    fn counted_calls(&self) -> u64 {
        self.counted.map_or(0, |(server, command)| {
            lock_tests::command_stat_on(&mut server.conn(), command, "calls")
        })
    }
}

/// What a test takes away behind a holder's back.
#[derive(Debug)]
enum Taken {
    /// A lock key (a writer's, a `MultiLock`'s key), or a whole semaphore.
    Key(String),
    /// One reader's share.
    Share { key: String, token: String },
    /// Every reader's share of a key (from inside `run_read`, where the token is not
    /// public).
    Shares { key: String },
    /// One semaphore permit.
    Permit { key: String, token: String },
}

// ---------------------------------------------------------------------------------------
// One front over the five primitives
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Target {
    prim: Prim,
    /// One key; three for a `MultiLock`.
    keys: Vec<String>,
}

impl Target {
    fn key(&self) -> &str {
        &self.keys[0]
    }

    fn as_prim(&self, prim: Prim) -> Target {
        Target {
            prim,
            keys: self.keys.clone(),
        }
    }

    /// What a test takes away from this target's holder (from inside a `run` body, where
    /// only the key is known).
    fn taken_in_run(&self) -> Taken {
        match self.prim {
            Prim::Reader => Taken::Shares {
                key: self.key().to_owned(),
            },
            _ => Taken::Key(self.key().to_owned()),
        }
    }
}

/// The options a cell sets.
#[derive(Debug, Clone, Copy)]
struct Opts {
    ttl: Duration,
    wait: Duration,
    watchdog: bool,
    on_lost: OnLost,
    fencing: bool,
    hold: Duration,
    max_hold: Option<Duration>,
}

impl Opts {
    fn base() -> Opts {
        Opts {
            ttl: TTL,
            wait: LONG_WAIT,
            watchdog: true,
            on_lost: OnLost::Cancel,
            fencing: false,
            hold: Duration::ZERO,
            max_hold: None,
        }
    }

    /// The options of a cell's exclusion and release phases.
    fn of(opt: Opt) -> Opts {
        let base = Opts::base();
        match opt {
            Opt::WatchdogOff => Opts {
                watchdog: false,
                ..base
            },
            Opt::OnLostContinue => Opts {
                on_lost: OnLost::Continue,
                ..base
            },
            Opt::Fencing => Opts {
                fencing: true,
                ..base
            },
            // The scheduled job's form: every task tries once per tick, those that find the
            // key held skip the tick. (A waiter behind a hold is woken about a second after
            // the release, not when the hold ends: rounds that wait would take that long.)
            Opt::HoldAtLeast => Opts {
                hold: HOLD_IN_ROUNDS,
                wait: Duration::ZERO,
                ..base
            },
            Opt::MaxHold => Opts {
                max_hold: Some(MAX_HOLD_UNREACHED),
                ..base
            },
            _ => base,
        }
    }

    fn ttl(self, ttl: Duration) -> Opts {
        Opts { ttl, ..self }
    }

    fn wait(self, wait: Duration) -> Opts {
        Opts { wait, ..self }
    }

    fn options(&self) -> LockOptions {
        let mut options = LockOptions::default();
        options.ttl = self.ttl;
        options.wait = self.wait;
        options.watchdog = self.watchdog;
        options.on_lost = self.on_lost;
        options.fencing = self.fencing;
        options.hold_at_least = self.hold;
        options.max_hold = self.max_hold;
        options
    }
}

/// The builders, with the setters each has; an option without a setter goes through
/// `with_options` (the only way to ask for it at run time).
fn lock(key: &str, client: &LockClient, o: &Opts) -> lock_runtime::Lock {
    client
        .lock(key)
        .ttl(o.ttl)
        .wait(o.wait)
        .watchdog(o.watchdog)
        .on_lost(o.on_lost)
        .fencing(o.fencing)
        .hold_at_least(o.hold)
        .max_hold(o.max_hold.unwrap_or(Duration::MAX))
}

fn rw_lock(key: &str, client: &LockClient, o: &Opts) -> lock_runtime::RwLock {
    let mut rw = client.rw_lock(key);
    if !o.hold.is_zero() {
        rw = rw.with_options(o.options());
    }
    rw.ttl(o.ttl)
        .wait(o.wait)
        .watchdog(o.watchdog)
        .on_lost(o.on_lost)
        .fencing(o.fencing)
        .max_hold(o.max_hold.unwrap_or(Duration::MAX))
}

fn semaphore(key: &str, client: &LockClient, o: &Opts) -> lock_runtime::Semaphore {
    let mut semaphore = client.semaphore(key, PERMITS);
    if o.fencing || !o.hold.is_zero() {
        semaphore = semaphore.with_options(o.options());
    }
    semaphore
        .ttl(o.ttl)
        .wait(o.wait)
        .watchdog(o.watchdog)
        .on_lost(o.on_lost)
        .max_hold(o.max_hold.unwrap_or(Duration::MAX))
}

fn multi(keys: &[String], client: &LockClient, o: &Opts) -> MultiLock {
    let mut multi = MultiLock::new(keys.iter().cloned()).client(client);
    if !o.hold.is_zero() {
        multi = multi.with_options(o.options());
    }
    multi
        .ttl(o.ttl)
        .wait(o.wait)
        .watchdog(o.watchdog)
        .on_lost(o.on_lost)
        .fencing(o.fencing)
        .max_hold(o.max_hold.unwrap_or(Duration::MAX))
}

/// A held primitive.
enum Held {
    Lock(LockGuard),
    Read(ReadGuard),
    Permit(SemaphoreGuard),
    Multi(MultiGuard),
}

impl Held {
    fn lost_cause(&self) -> Option<LostCause> {
        match self {
            Held::Lock(guard) => guard.lost_cause(),
            Held::Read(guard) => guard.lost_cause(),
            Held::Permit(guard) => guard.lost_cause(),
            Held::Multi(guard) => guard.guards().iter().find_map(LockGuard::lost_cause),
        }
    }

    /// (key, token) of each lease.
    fn tokens(&self) -> Vec<(String, String)> {
        let pair = |key: &str, token: &str| (key.to_owned(), token.to_owned());
        match self {
            Held::Lock(guard) => vec![pair(guard.key(), guard.token())],
            Held::Read(guard) => vec![pair(guard.key(), guard.token())],
            Held::Permit(guard) => vec![pair(guard.key(), guard.token())],
            Held::Multi(guard) => guard
                .guards()
                .iter()
                .map(|guard| pair(guard.key(), guard.token()))
                .collect(),
        }
    }

    /// Each lease's fence.
    fn fences(&self) -> Vec<Option<u64>> {
        match self {
            Held::Lock(guard) => vec![guard.fence()],
            Held::Multi(guard) => guard.guards().iter().map(LockGuard::fence).collect(),
            Held::Read(_) | Held::Permit(_) => vec![None],
        }
    }

    /// What the test takes away to make this holder lose its lease (one key of several).
    fn taken(&self) -> Taken {
        let (key, token) = self.tokens().swap_remove(0);
        match self {
            Held::Read(_) => Taken::Share { key, token },
            Held::Permit(_) => Taken::Permit { key, token },
            Held::Lock(_) | Held::Multi(_) => Taken::Key(key),
        }
    }

    async fn release(self) -> Result<Vec<ReleaseOutcome>, LockError> {
        match self {
            Held::Lock(guard) => guard.release().await.map(|outcome| vec![outcome]),
            Held::Read(guard) => guard.release().await.map(|outcome| vec![outcome]),
            Held::Permit(guard) => guard.release().await.map(|outcome| vec![outcome]),
            Held::Multi(guard) => guard.release().await,
        }
    }

    /// `extend`, where the guard has it.
    async fn extend(&mut self, ttl: Duration) -> Option<Result<(), LockError>> {
        match self {
            Held::Lock(guard) => Some(guard.extend(ttl).await),
            Held::Read(guard) => Some(guard.extend(ttl).await),
            Held::Permit(guard) => Some(guard.extend(ttl).await),
            Held::Multi(_) => None,
        }
    }
}

async fn acquire(t: &Target, client: &LockClient, o: &Opts) -> Result<Held, LockError> {
    match t.prim {
        Prim::Lock => lock(t.key(), client, o).acquire().await.map(Held::Lock),
        Prim::Reader => rw_lock(t.key(), client, o).read().await.map(Held::Read),
        Prim::Writer => rw_lock(t.key(), client, o).write().await.map(Held::Lock),
        Prim::Semaphore => semaphore(t.key(), client, o)
            .acquire()
            .await
            .map(Held::Permit),
        Prim::Multi => multi(&t.keys, client, o).acquire().await.map(Held::Multi),
    }
}

async fn run<T, F>(t: &Target, client: &LockClient, o: &Opts, body: F) -> Result<T, LockError>
where
    F: Future<Output = Result<T, LockError>>,
{
    match t.prim {
        Prim::Lock => lock(t.key(), client, o).run(body).await,
        Prim::Reader => rw_lock(t.key(), client, o).run_read(body).await,
        Prim::Writer => rw_lock(t.key(), client, o).run_write(body).await,
        Prim::Semaphore => semaphore(t.key(), client, o).run(body).await,
        Prim::Multi => multi(&t.keys, client, o).run(body).await,
    }
}

/// Another client tries once to take what `t`'s holder would exclude it from: the same
/// lock, a writer where a reader or writer holds, a permit, every key of a `MultiLock`.
async fn try_other(t: &Target, client: &LockClient) -> Result<Held, LockError> {
    let o = Opts::base().wait(Duration::ZERO);
    let t = match t.prim {
        Prim::Reader => t.as_prim(Prim::Writer),
        _ => t.clone(),
    };
    acquire(&t, client, &o).await
}

/// One await, bounded: a hang is a broken cell, not a stuck suite.
async fn bounded<T>(
    what: &str,
    bound: Duration,
    future: impl Future<Output = T>,
) -> Result<T, String> {
    tokio::time::timeout(bound, future)
        .await
        .map_err(|_| format!("{what}: no answer within {bound:?}"))
}

/// A call that must succeed at once.
async fn must<T>(
    what: &str,
    future: impl Future<Output = Result<T, LockError>>,
) -> Result<T, String> {
    bounded(what, CALL, future)
        .await?
        .map_err(|err| format!("{what}: {err:?}"))
}

async fn release(what: &str, held: Held) -> Result<Vec<ReleaseOutcome>, String> {
    must(what, held.release()).await
}

/// Whether another client finds the key taken (`Busy`), releasing what it got otherwise.
async fn other_is_kept_out(t: &Target, client: &LockClient) -> Result<(), String> {
    match bounded("another client's try", CALL, try_other(t, client)).await? {
        Err(LockError::Busy { .. }) => Ok(()),
        Err(err) => Err(format!("another client's try: {err:?} instead of Busy")),
        Ok(held) => {
            release("the other client's release", held).await?;
            Err("another client took it while it was held".into())
        }
    }
}

/// Another client takes it at once.
async fn other_takes_it(t: &Target, client: &LockClient, after: &str) -> Result<(), String> {
    let held = must(
        &format!("another client's try {after}"),
        try_other(t, client),
    )
    .await?;
    release("the other client's release", held).await?;
    Ok(())
}

/// Waits (bounded) until `held` reports a loss; its cause.
async fn until_lost(held: &Held, bound: Duration) -> Result<LostCause, String> {
    let found = lock_tests::until(bound, Duration::from_millis(10), || held.is_lost_now()).await;
    match (found, held.lost_cause()) {
        (Some(_), Some(cause)) => Ok(cause),
        _ => Err(format!("the loss was not reported within {bound:?}")),
    }
}

impl Held {
    fn is_lost_now(&self) -> bool {
        self.lost_cause().is_some()
    }
}

// ---------------------------------------------------------------------------------------
// (a) exclusion
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A lock, a writer, a `MultiLock`: nobody else inside.
    Exclusive,
    /// A reader: other readers may be inside, never a writer.
    Reader,
    /// A semaphore's holder: at most this many inside.
    Permit(usize),
}

/// Who is inside, and what they saw.
#[derive(Debug, Default)]
struct Room {
    readers: AtomicUsize,
    writers: AtomicUsize,
    permits: AtomicUsize,
    /// Incremented without atomicity by the exclusive holders (read, yield, write): a lost
    /// update is an overlap.
    counter: AtomicU64,
    exclusive: AtomicU64,
    /// The exclusive holders' fences, in the order they entered.
    fences: std::sync::Mutex<Vec<Vec<Option<u64>>>>,
    faults: std::sync::Mutex<Vec<String>>,
}

/// Leaves the room when dropped (also when a body is cancelled).
struct Leaving<'a>(&'a AtomicUsize);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Room {
    fn fault(&self, fault: String) {
        self.faults.lock().unwrap().push(fault);
    }

    async fn occupy(&self, role: Role, fences: Vec<Option<u64>>) {
        let pause = || tokio::time::sleep(Duration::from_millis(1));
        match role {
            Role::Exclusive => {
                let writers = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
                let _leaving = Leaving(&self.writers);
                let readers = self.readers.load(Ordering::SeqCst);
                if writers > 1 || readers > 0 {
                    self.fault(format!(
                        "an exclusive holder entered beside {} writer(s) and {readers} reader(s)",
                        writers - 1
                    ));
                }
                self.fences.lock().unwrap().push(fences);
                let seen = self.counter.load(Ordering::SeqCst);
                pause().await;
                self.counter.store(seen + 1, Ordering::SeqCst);
                self.exclusive.fetch_add(1, Ordering::SeqCst);
            }
            Role::Reader => {
                self.readers.fetch_add(1, Ordering::SeqCst);
                let _leaving = Leaving(&self.readers);
                let writers = self.writers.load(Ordering::SeqCst);
                if writers > 0 {
                    self.fault(format!("a reader entered beside {writers} writer(s)"));
                }
                pause().await;
            }
            Role::Permit(limit) => {
                let inside = self.permits.fetch_add(1, Ordering::SeqCst) + 1;
                let _leaving = Leaving(&self.permits);
                if inside > limit {
                    self.fault(format!(
                        "{inside} semaphore holders inside, {limit} permits"
                    ));
                }
                pause().await;
            }
        }
    }
}

/// How the exclusion phase takes the primitive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Guard,
    Run,
}

/// (a): [`TASKS`] tasks on two clients, [`ROUNDS`] rounds each, with the cell's options
/// (a reader cell has a writer among them and a writer cell a reader, with the base
/// options).
async fn exclusion(
    ctx: &Ctx<'_>,
    t: &Target,
    o: Opts,
    mode: Mode,
    fenced: bool,
) -> Result<(), String> {
    let room = Arc::new(Room::default());
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let client = if task % 2 == 0 { &ctx.a } else { &ctx.b }.clone();
        let last = task == TASKS - 1;
        let (target, options, role) = match t.prim {
            Prim::Reader if last => (t.as_prim(Prim::Writer), Opts::base(), Role::Exclusive),
            Prim::Reader => (t.clone(), o, Role::Reader),
            Prim::Writer if last => (t.as_prim(Prim::Reader), Opts::base(), Role::Reader),
            Prim::Semaphore => (t.clone(), o, Role::Permit(PERMITS as usize)),
            _ => (t.clone(), o, Role::Exclusive),
        };
        let room = room.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let outcome = match mode {
                    Mode::Guard => match acquire(&target, &client, &options).await {
                        Ok(held) => {
                            room.occupy(role, held.fences()).await;
                            held.release().await.map(drop)
                        }
                        Err(err) => Err(err),
                    },
                    Mode::Run => {
                        let room = &room;
                        run(&target, &client, &options, async move {
                            let fences = current_locks().iter().map(|lock| lock.fence()).collect();
                            room.occupy(role, fences).await;
                            Ok(())
                        })
                        .await
                    }
                };
                if options.wait.is_zero() && matches!(outcome, Err(LockError::Busy { .. })) {
                    // A tick another task took: skipped, as a scheduled job does.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                if let Err(err) = outcome {
                    room.fault(format!(
                        "task {task} ({:?}) round {round}: {err:?}",
                        target.prim
                    ));
                    return;
                }
            }
        }));
    }
    for task in tasks {
        bounded("an exclusion task", Duration::from_secs(60), task)
            .await?
            .map_err(|err| format!("an exclusion task panicked: {err}"))?;
    }
    let mut faults = room.faults.lock().unwrap().clone();
    let (counter, exclusive) = (
        room.counter.load(Ordering::SeqCst),
        room.exclusive.load(Ordering::SeqCst),
    );
    if exclusive == 0 && matches!(t.prim, Prim::Lock | Prim::Writer | Prim::Multi) {
        faults.push("no task ever got in".into());
    }
    if counter != exclusive {
        faults.push(format!(
            "{exclusive} exclusive sections incremented the counter to {counter}"
        ));
    }
    if fenced {
        let fences = room.fences.lock().unwrap().clone();
        faults.extend(fences_increase(&fences));
    }
    if faults.is_empty() {
        Ok(())
    } else {
        faults.truncate(3);
        Err(format!("exclusion: {}", faults.join("; ")))
    }
}

/// Every entry has a fence per key, each strictly greater than the one before it.
fn fences_increase(entries: &[Vec<Option<u64>>]) -> Option<String> {
    let mut last: Vec<u64> = Vec::new();
    for entry in entries {
        let Some(fences) = entry.iter().copied().collect::<Option<Vec<u64>>>() else {
            return Some(format!("a fenced acquisition without a fence: {entry:?}"));
        };
        if !last.is_empty() && fences.iter().zip(&last).any(|(now, before)| now <= before) {
            return Some(format!("fences did not increase: {last:?} then {fences:?}"));
        }
        last = fences;
    }
    if entries.is_empty() {
        return Some("no fenced entry".into());
    }
    None
}

// ---------------------------------------------------------------------------------------
// (b) release and (c) loss
// ---------------------------------------------------------------------------------------

/// For a semaphore: the other permits, so that one more holder is kept out.
async fn fill(ctx: &Ctx<'_>, t: &Target) -> Result<Vec<Held>, String> {
    let mut fillers = Vec::new();
    if t.prim == Prim::Semaphore {
        for _ in 1..PERMITS {
            fillers.push(must("a filling permit", acquire(t, &ctx.a, &Opts::base())).await?);
        }
    }
    Ok(fillers)
}

/// (b): while held, another client is kept out; after the release it gets in at once.
async fn release_frees(ctx: &Ctx<'_>, t: &Target, o: Opts) -> Result<(), String> {
    let held = must("acquire", acquire(t, &ctx.a, &o.wait(CALL))).await?;
    let fillers = fill(ctx, t).await?;
    other_is_kept_out(t, &ctx.b).await?;
    let outcomes = release("release", held).await?;
    if outcomes
        .iter()
        .any(|outcome| *outcome != ReleaseOutcome::Released)
    {
        return Err(format!("release: {outcomes:?}"));
    }
    other_takes_it(t, &ctx.b, "after the release").await?;
    for filler in fillers {
        release("a filler's release", filler).await?;
    }
    Ok(())
}

/// (c), guard path: the lease taken away behind the holder's back is reported lost
/// (`TokenGone`, found by the watchdog's renewal).
async fn loss_found_by_renewal(ctx: &Ctx<'_>, t: &Target, o: Opts) -> Result<(), String> {
    let held = must("acquire", acquire(t, &ctx.a, &o.ttl(LOSS_TTL).wait(CALL))).await?;
    ctx.take_away(&held.taken())?;
    let cause = until_lost(&held, LOSS_BOUND).await?;
    if cause != LostCause::TokenGone {
        return Err(format!("lost with {cause:?}, not TokenGone"));
    }
    release("the lost guard's release", held).await?;
    Ok(())
}

/// The `run` of a loss phase, spawned: it says when the body is in, and the test then
/// takes the lease away (or, with `go`, lets the body finish after it did).
struct Running<T> {
    entered: tokio::sync::oneshot::Receiver<()>,
    go: Option<tokio::sync::oneshot::Sender<()>>,
    reached_end: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Result<T, LockError>>,
}

/// The body of a loss phase: in, then `until` (a loss, the test's go, or a long sleep).
#[derive(Debug, Clone, Copy)]
enum Until {
    /// Waits for any of its locks to be lost (bounded); returns whether one was.
    Loss,
    /// Waits for the test's go (after it took the lease away): the body finishes.
    Go,
    /// Sleeps long: a cancel stops it first.
    Sleep,
}

fn spawn_run(ctx: &Ctx<'_>, t: &Target, o: Opts, until: Until) -> Running<bool> {
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let reached_end = Arc::new(AtomicBool::new(false));
    let (t, client, end) = (t.clone(), ctx.a.clone(), reached_end.clone());
    let task = tokio::spawn(async move {
        run(&t, &client, &o, async move {
            let locks = current_locks();
            let _ = entered_tx.send(());
            let outcome = match until {
                Until::Loss => {
                    let any =
                        futures::future::select_all(locks.iter().map(|lock| Box::pin(lock.lost())));
                    tokio::time::timeout(LOSS_BOUND, any).await.is_ok()
                        && current_locks().iter().any(|lock| lock.is_lost())
                }
                Until::Go => go_rx.await.is_ok(),
                Until::Sleep => {
                    tokio::time::sleep(LOSS_BOUND * 2).await;
                    false
                }
            };
            end.store(true, Ordering::SeqCst);
            Ok(outcome)
        })
        .await
    });
    Running {
        entered,
        go: Some(go),
        reached_end,
        task,
    }
}

impl<T> Running<T> {
    async fn until_entered(&mut self) -> Result<(), String> {
        bounded("the body's start", CALL, &mut self.entered)
            .await?
            .map_err(|_| "the body never started (run failed first)".to_owned())
    }

    async fn outcome(self) -> Result<(Result<T, LockError>, bool), String> {
        let joined = bounded("run", LOSS_BOUND * 3, self.task)
            .await?
            .map_err(|err| format!("run panicked: {err}"))?;
        Ok((joined, self.reached_end.load(Ordering::SeqCst)))
    }
}

/// (c), `run` path, `on_lost` cancel or continue.
async fn loss_in_run(ctx: &Ctx<'_>, t: &Target, on_lost: OnLost) -> Result<(), String> {
    let o = Opts {
        on_lost,
        ..Opts::base().ttl(LOSS_TTL).wait(CALL)
    };
    let until = match on_lost {
        OnLost::Continue => Until::Loss,
        _ => Until::Sleep,
    };
    let mut running = spawn_run(ctx, t, o, until);
    running.until_entered().await?;
    let taken = t.taken_in_run();
    ctx.take_away(&taken)?;
    let (outcome, reached_end) = running.outcome().await?;
    match (on_lost, outcome) {
        (OnLost::Continue, Ok(true)) if reached_end => Ok(()),
        (OnLost::Continue, other) => Err(format!(
            "on_lost continue: the body should finish having seen the loss; run gave {other:?}"
        )),
        (_, Err(LockError::Lost { key, cause })) => {
            if reached_end {
                return Err("on_lost cancel: the body ran to its end".into());
            }
            if cause != LostCause::TokenGone {
                return Err(format!(
                    "on_lost cancel: lost with {cause:?}, not TokenGone"
                ));
            }
            if key != t.key() {
                return Err(format!(
                    "on_lost cancel: Lost names `{key}`, not `{}`",
                    t.key()
                ));
            }
            Ok(())
        }
        (_, other) => Err(format!("on_lost cancel: run gave {other:?}, not Lost")),
    }
}

// ---------------------------------------------------------------------------------------
// The options' own checks
// ---------------------------------------------------------------------------------------

/// `ttl`: the lease in Redis is the ttl asked for (the key's, the share's, the semaphore's).
async fn check_ttl(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let held = must("acquire", acquire(t, &ctx.a, &Opts::base().wait(CALL))).await?;
    let pttls = ctx.pttls(&held);
    release("release", held).await?;
    let ttl = TTL.as_millis() as i64;
    let right = pttls
        .iter()
        .filter(|pttl| (1..=ttl).contains(*pttl))
        .count();
    // Every key, on a majority of the Redlock masters.
    if right < ctx.servers.quorum() * t.keys.len() {
        return Err(format!(
            "PTTL in Redis {pttls:?}, expected within 1..={ttl} ms"
        ));
    }
    Ok(())
}

/// What holds a target's key so that the cell's primitive must wait: a lock for a lock, a
/// writer for a reader, a reader for a writer, every permit for a permit, a lock on one
/// of a `MultiLock`'s keys.
async fn block(ctx: &Ctx<'_>, t: &Target) -> Result<Vec<Held>, String> {
    let o = Opts::base().wait(CALL);
    let blockers = match t.prim {
        Prim::Reader => {
            vec![must("a writer", acquire(&t.as_prim(Prim::Writer), &ctx.a, &o)).await?]
        }
        Prim::Writer => {
            vec![must("a reader", acquire(&t.as_prim(Prim::Reader), &ctx.a, &o)).await?]
        }
        Prim::Multi => {
            let one = Target {
                prim: Prim::Lock,
                keys: vec![t.keys[1].clone()],
            };
            vec![must("a lock on one key", acquire(&one, &ctx.a, &o)).await?]
        }
        Prim::Semaphore => {
            let mut all = vec![must("a permit", acquire(t, &ctx.a, &o)).await?];
            all.extend(fill(ctx, t).await?);
            all
        }
        Prim::Lock => vec![must("a lock", acquire(t, &ctx.a, &o)).await?],
    };
    Ok(blockers)
}

/// `wait`: zero is `Busy`, a short one runs out (`Timeout`), a long one is woken by the
/// release.
async fn check_wait(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let mut blockers = block(ctx, t).await?;
    match bounded(
        "wait zero",
        CALL,
        acquire(t, &ctx.b, &Opts::base().wait(Duration::ZERO)),
    )
    .await?
    {
        Err(LockError::Busy { .. }) => {}
        other => {
            return Err(format!(
                "wait zero gave {:?}, not Busy",
                other.map(|_| "a guard")
            ));
        }
    }
    let short = Duration::from_millis(150);
    match bounded(
        "a short wait",
        CALL,
        acquire(t, &ctx.b, &Opts::base().wait(short)),
    )
    .await?
    {
        Err(LockError::Timeout { .. }) => {}
        other => {
            return Err(format!(
                "a wait of {short:?} gave {:?}, not Timeout",
                other.map(|_| "a guard")
            ));
        }
    }
    let (target, client) = (t.clone(), ctx.b.clone());
    let waiter =
        tokio::spawn(async move { acquire(&target, &client, &Opts::base().wait(LONG_WAIT)).await });
    // The event: the other client waits (a task in its queue, or its place in Redis).
    let mut waiting = false;
    for _ in 0..500 {
        let queued = bounded("inspect", CALL, ctx.b.inspect(t.key())).await?.ok();
        let queued = queued.map(|state| {
            // A writer waits for the readers holding the key (as `Exclusive`).
            let draining = t.prim == Prim::Writer
                && state
                    .holders
                    .iter()
                    .any(|holder| holder.kind == HolderKind::Exclusive);
            state.queued > 0 || draining
        });
        if ctx.b.waiting().0 > 0 || queued.unwrap_or(false) || ctx.subscribed(t.key()) {
            waiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !waiting {
        return Err("the waiter never showed as waiting".into());
    }
    release("the blocker's release", blockers.remove(0)).await?;
    let woken = bounded("the woken waiter", LONG_WAIT, waiter)
        .await?
        .map_err(|err| format!("the waiter panicked: {err}"))?
        .map_err(|err| format!("the waiter: {err:?}"))?;
    release("the waiter's release", woken).await?;
    for blocker in blockers {
        release("a blocker's release", blocker).await?;
    }
    Ok(())
}

/// `watchdog = false`: the lease ends by itself at its ttl (`Expired`, and another client
/// gets in), and a loss during the hold is found at the release (`FoundAtRelease`).
async fn check_watchdog_off(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let o = Opts {
        watchdog: false,
        ..Opts::base().ttl(SHORT_TTL).wait(CALL)
    };
    let held = must("acquire", acquire(t, &ctx.a, &o)).await?;
    let fillers = fill(ctx, t).await?;
    if let Err(err) = other_is_kept_out(t, &ctx.b).await {
        // Only a machine slower than the short lease lets another in while it is valid.
        if !held.is_lost_now() {
            return Err(err);
        }
    }
    let cause = until_lost(&held, SHORT_TTL + LOSS_BOUND).await?;
    if cause != LostCause::Expired {
        return Err(format!(
            "without the watchdog the lease ended with {cause:?}, not Expired"
        ));
    }
    // Gone from Redis too: another client gets in (the lease may outlive the local
    // clock's validity by the drift allowance).
    let mut taken = None;
    for _ in 0..200 {
        match bounded("another client's try", CALL, try_other(t, &ctx.b)).await? {
            Ok(held) => {
                taken = Some(held);
                break;
            }
            Err(LockError::Busy { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(err) => return Err(format!("another client's try after the ttl: {err:?}")),
        }
    }
    let Some(other) = taken else {
        return Err("the lease did not end in Redis after its ttl".into());
    };
    release("the other client's release", other).await?;
    release("the expired guard's release", held).await?;
    for filler in fillers {
        release("a filler's release", filler).await?;
    }
    // Taken away during a `run`: the release finds it (cancel: `Lost`, FoundAtRelease).
    let o = Opts {
        watchdog: false,
        ..Opts::base().wait(CALL)
    };
    let mut running = spawn_run(ctx, t, o, Until::Go);
    running.until_entered().await?;
    ctx.take_away(&t.taken_in_run())?;
    if let Some(go) = running.go.take() {
        let _ = go.send(());
    }
    match running.outcome().await?.0 {
        Err(LockError::Lost {
            cause: LostCause::FoundAtRelease,
            ..
        }) => Ok(()),
        other => Err(format!(
            "a loss without the watchdog: run gave {other:?}, not Lost (FoundAtRelease)"
        )),
    }
}

/// `fencing`: two holders in turn, on two clients, get strictly increasing fences (the
/// exclusion phase checked every round's too); a reader gets none.
async fn check_fencing(ctx: &Ctx<'_>, t: &Target, expect: Expect) -> Result<(), String> {
    let o = Opts {
        fencing: true,
        ..Opts::base().wait(CALL)
    };
    if matches!(expect, Expect::NoEffect) {
        let t2 = t.clone();
        let fences = must(
            "run_read with fencing",
            run(&t2, &ctx.a, &o, async {
                let lock = current_lock().expect("inside run_read");
                Ok((lock.is_read(), lock.fence()))
            }),
        )
        .await?;
        return match fences {
            (true, None) => Ok(()),
            other => Err(format!(
                "a reader with fencing: (is_read, fence) = {other:?}"
            )),
        };
    }
    let mut seen = Vec::new();
    for client in [&ctx.a, &ctx.b] {
        let held = must("acquire", acquire(t, client, &o)).await?;
        seen.push(held.fences());
        release("release", held).await?;
    }
    match fences_increase(&seen) {
        None => Ok(()),
        Some(fault) => Err(fault),
    }
}

/// `hold_at_least`: a release before the hold keeps the key until it ends.
async fn check_hold_at_least(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let o = Opts {
        hold: HOLD,
        ..Opts::base().wait(CALL)
    };
    let started = Instant::now();
    let held = must("acquire", acquire(t, &ctx.a, &o)).await?;
    release("release", held).await?;
    // Released well before the hold ends: kept.
    if started.elapsed() < HOLD / 2 {
        other_is_kept_out(t, &ctx.b)
            .await
            .map_err(|err| format!("released before hold_at_least: {err}"))?;
    }
    for _ in 0..500 {
        match bounded("another client's try", CALL, try_other(t, &ctx.b)).await? {
            Ok(other) => {
                let after = started.elapsed();
                release("the other client's release", other).await?;
                // The key's expiry counts from the grant in Redis, a little after `started`.
                return if after + Duration::from_millis(20) >= HOLD {
                    Ok(())
                } else {
                    Err(format!(
                        "taken {after:?} after the grant, before the hold of {HOLD:?}"
                    ))
                };
            }
            Err(LockError::Busy { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(err) => return Err(format!("another client's try: {err:?}")),
        }
    }
    Err("the key was never freed after hold_at_least".into())
}

/// `max_hold`: a hold that reaches it reads lost with `MaxHold`, no sooner; its release
/// then frees the key for another client at once.
async fn check_max_hold(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let o = Opts {
        max_hold: Some(MAX_HOLD),
        ..Opts::base().wait(CALL)
    };
    let started = Instant::now();
    let held = must("acquire", acquire(t, &ctx.a, &o)).await?;
    let cause = until_lost(&held, MAX_HOLD + LOSS_BOUND).await?;
    let after = started.elapsed();
    release("the ended hold's release", held).await?;
    if cause != LostCause::MaxHold || after < MAX_HOLD {
        return Err(format!(
            "ended with {cause:?} after {after:?}, not MaxHold after {MAX_HOLD:?}"
        ));
    }
    other_takes_it(t, &ctx.b, "after the max_hold").await
}

/// `extend`: the lease in Redis moves to the new ttl; after a loss, `extend` says `Lost`.
async fn check_extend(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let mut held = must("acquire", acquire(t, &ctx.a, &Opts::base().wait(CALL))).await?;
    let Some(extended) = bounded("extend", CALL, held.extend(EXTENDED)).await? else {
        return Err("no extend on this guard".into());
    };
    extended.map_err(|err| format!("extend: {err:?}"))?;
    let pttls = ctx.pttls(&held);
    let long = pttls
        .iter()
        .filter(|pttl| **pttl > TTL.as_millis() as i64 && **pttl <= EXTENDED.as_millis() as i64)
        .count();
    if long < ctx.servers.quorum() {
        return Err(format!(
            "after extend({EXTENDED:?}) PTTL in Redis is {pttls:?}"
        ));
    }
    ctx.take_away(&held.taken())?;
    match bounded("extend after a loss", CALL, held.extend(EXTENDED)).await? {
        Some(Err(LockError::Lost { .. })) => {}
        other => {
            return Err(format!(
                "extend after the lease was taken away: {other:?}, not Lost"
            ));
        }
    }
    release("the lost guard's release", held).await?;
    Ok(())
}

/// `wait_for_replicas` / `wait_for_aof`: the grant, the watchdog's renewals and `extend`
/// each add a `WAIT` / `WAITAOF`, and with replicas the replica has the grant when it is
/// reported.
async fn check_waits_for(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let (_, command) = ctx.counted.expect("a deployment that counts WAIT");
    let before = ctx.counted_calls();
    let o = Opts::base().ttl(LOSS_TTL).wait(CALL);
    let mut held = must("acquire", acquire(t, &ctx.a, &o)).await?;
    let granted = ctx.counted_calls();
    if granted <= before {
        return Err(format!("the grant sent no {command}"));
    }
    ctx.replica_has(&held)?;
    // A renewal (every ttl/3) with nothing else going on.
    let renewed = lock_tests::until(LOSS_BOUND, Duration::from_millis(20), || {
        ctx.counted_calls() > granted
    })
    .await;
    if renewed.is_none() || held.lost_cause().is_some() {
        return Err(format!(
            "no renewal with {command} within {LOSS_BOUND:?} (lost: {:?})",
            held.lost_cause()
        ));
    }
    let renewed = ctx.counted_calls();
    if let Some(extended) = bounded("extend", CALL, held.extend(EXTENDED)).await? {
        extended.map_err(|err| format!("extend: {err:?}"))?;
        if ctx.counted_calls() <= renewed {
            return Err(format!("extend sent no {command}"));
        }
    }
    release("release", held).await?;
    Ok(())
}

/// `inspect` shows the holder (its kind, its token; the semaphore's permits), and
/// `force_release` takes it away: the holder finds it lost, another client gets in.
async fn check_inspect(ctx: &Ctx<'_>, t: &Target) -> Result<(), String> {
    let held = must(
        "acquire",
        acquire(t, &ctx.a, &Opts::base().ttl(LOSS_TTL).wait(CALL)),
    )
    .await?;
    let kind = match t.prim {
        Prim::Reader => HolderKind::Reader,
        Prim::Semaphore => HolderKind::Permit,
        _ => HolderKind::Exclusive,
    };
    for (key, token) in held.tokens() {
        let state = must("inspect", ctx.b.inspect(&key)).await?;
        if !state
            .holders
            .iter()
            .any(|holder| holder.token == token && holder.kind == kind)
        {
            return Err(format!(
                "inspect of `{key}` does not show {kind:?} {token}: {state:?}"
            ));
        }
        if t.prim == Prim::Semaphore && state.permits != Some(PERMITS) {
            return Err(format!("inspect of `{key}`: permits {:?}", state.permits));
        }
    }
    let forced = must("force_release", ctx.b.force_release(t.key())).await?;
    if !forced.removed_any() {
        return Err(format!("force_release removed nothing: {forced:?}"));
    }
    // Told at once when the holder's client has renewed a lease (it listens then; not in
    // a cluster), else found at its next renewal.
    let cause = until_lost(&held, LOSS_BOUND).await?;
    if !matches!(cause, LostCause::ForceReleased | LostCause::TokenGone) {
        return Err(format!(
            "force-released: lost with {cause:?}, not ForceReleased or TokenGone"
        ));
    }
    let key = Target {
        prim: if t.prim == Prim::Multi {
            Prim::Lock
        } else {
            t.prim
        },
        keys: vec![t.key().to_owned()],
    };
    other_takes_it(&key, &ctx.b, "after force_release").await?;
    release("the lost guard's release", held).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// A cell
// ---------------------------------------------------------------------------------------

/// Runs one cell; what broke, if anything.
async fn cell(ctx: &Ctx<'_>, prim: Prim, opt: Opt, expect: Expect) -> Result<(), String> {
    match expect {
        Expect::Works | Expect::NoEffect => works(ctx, prim, opt, expect).await,
        Expect::Refused(words) => refused(ctx, prim, opt, words).await,
        Expect::Gap(Today::Refused(words), _) => refused(ctx, prim, opt, words).await,
        Expect::Gap(Today::Accepted, _) => works(ctx, prim, opt, expect).await,
        Expect::NoApi | Expect::NotHere | Expect::Limited(_) => Ok(()),
    }
}

async fn works(ctx: &Ctx<'_>, prim: Prim, opt: Opt, expect: Expect) -> Result<(), String> {
    let mode = match opt {
        Opt::Wait | Opt::WatchdogOff | Opt::OnLostContinue | Opt::OnLostCancel => Mode::Run,
        _ => Mode::Guard,
    };
    let fenced = opt == Opt::Fencing && matches!(expect, Expect::Works);
    exclusion(
        ctx,
        &ctx.target(prim, opt, "x"),
        Opts::of(opt),
        mode,
        fenced,
    )
    .await
    .map_err(|err| format!("(a) {err}"))?;
    let released = ctx.target(prim, opt, "r");
    match opt {
        Opt::HoldAtLeast => check_hold_at_least(ctx, &released).await,
        _ => release_frees(ctx, &released, Opts::of(opt)).await,
    }
    .map_err(|err| format!("(b) {err}"))?;
    let lost = ctx.target(prim, opt, "l");
    match opt {
        Opt::OnLostContinue => loss_in_run(ctx, &lost, OnLost::Continue).await,
        Opt::OnLostCancel => loss_in_run(ctx, &lost, OnLost::Cancel).await,
        Opt::WatchdogOff => check_watchdog_off(ctx, &lost).await,
        Opt::Extend => check_extend(ctx, &lost).await,
        Opt::Inspect => check_inspect(ctx, &lost).await,
        Opt::MaxHold => check_max_hold(ctx, &lost).await,
        _ => loss_found_by_renewal(ctx, &lost, Opts::of(opt)).await,
    }
    .map_err(|err| format!("(c) {err}"))?;
    let own = ctx.target(prim, opt, "o");
    match opt {
        Opt::Ttl => check_ttl(ctx, &own).await,
        Opt::Wait => check_wait(ctx, &own).await,
        Opt::Fencing => check_fencing(ctx, &own, expect).await,
        Opt::WaitForReplicas | Opt::WaitForAof => check_waits_for(ctx, &own).await,
        _ => Ok(()),
    }
    .map_err(|err| format!("(option) {err}"))
}

/// A refused cell: `LockError::Config` naming why, from `acquire` and from `run` (for the
/// client options, from building the client).
async fn refused(ctx: &Ctx<'_>, prim: Prim, opt: Opt, words: &[&str]) -> Result<(), String> {
    let check = |what: &str, err: LockError| match &err {
        LockError::Config { reason } if words.iter().all(|word| reason.contains(word)) => Ok(()),
        _ => Err(format!(
            "{what}: {err:?}, not a Config error naming {words:?}"
        )),
    };
    match opt {
        Opt::WaitForReplicas | Opt::WaitForAof => {
            let config = match opt {
                Opt::WaitForReplicas => ctx
                    .config
                    .clone()
                    .wait_for_replicas(1, Duration::from_millis(100)),
                _ => ctx
                    .config
                    .clone()
                    .wait_for_aof(true, 0, Duration::from_millis(100)),
            };
            return match LockClient::new(config) {
                Ok(_) => Err("the client was built".into()),
                Err(err) => check("LockClient::new", err),
            };
        }
        _ => {}
    }
    let t = ctx.target(prim, opt, "refused");
    let o = match opt {
        Opt::HoldAtLeast => Opts {
            hold: HOLD,
            ..Opts::base()
        },
        Opt::Fencing => Opts {
            fencing: true,
            ..Opts::base()
        },
        _ => Opts::of(opt),
    }
    .wait(CALL);
    match bounded("acquire", CALL, acquire(&t, &ctx.a, &o)).await? {
        Ok(held) => {
            release("release", held).await?;
            return Err("acquire: taken, not refused".into());
        }
        Err(err) => check("acquire", err)?,
    }
    if let Some(dead) = &ctx.dead {
        match bounded("acquire without a server", CALL, acquire(&t, dead, &o)).await? {
            Ok(_) => return Err("acquire without a server: taken".into()),
            Err(err) => check("acquire without a server (before any traffic)", err)?,
        }
    }
    let ran = Arc::new(AtomicBool::new(false));
    let body_ran = ran.clone();
    let outcome = bounded(
        "run",
        CALL,
        run(&t, &ctx.a, &o, async move {
            body_ran.store(true, Ordering::SeqCst);
            Ok(())
        }),
    )
    .await?;
    if ran.load(Ordering::SeqCst) {
        return Err("run: the body ran".into());
    }
    match outcome {
        Ok(()) => Err("run: not refused".into()),
        Err(err) => check("run", err),
    }
}

/// Runs every cell of `dep` (on `ctx`; `wait_for_replicas` on `replicas`, `wait_for_aof`
/// on `aof`, where given) and fails with the list of broken cells.
async fn run_deployment(ctx: &Ctx<'_>, replicas: Option<&Ctx<'_>>, aof: Option<&Ctx<'_>>) {
    let column = DEPLOYMENTS.iter().position(|dep| *dep == ctx.dep).unwrap();
    let started = Instant::now();
    let mut broken = Vec::new();
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for (prim, opt, expects) in MATRIX {
        let expect = expects[column];
        let on = match (opt, expect) {
            (Opt::WaitForReplicas, Expect::Works) => replicas,
            (Opt::WaitForAof, Expect::Works) => aof,
            _ => Some(ctx),
        };
        let Some(on) = on else {
            broken.push(format!(
                "{prim:?} × {opt:?} × {:?}: no deployment to run it on",
                ctx.dep
            ));
            continue;
        };
        let cell_started = Instant::now();
        let outcome = cell(on, *prim, *opt, expect).await;
        let kind = match expect {
            Expect::Works => "worked",
            Expect::Refused(_) => "refused",
            Expect::NoEffect => "no effect",
            Expect::NoApi => "no API (compile-time)",
            Expect::NotHere => "not here",
            Expect::Gap(..) => "known gaps",
            Expect::Limited(why) => {
                println!(
                    "MATRIX cell {prim:?} × {opt:?} × {:?}: limited: {why}",
                    ctx.dep
                );
                "limited (own test)"
            }
        };
        *counts.entry(kind).or_default() += 1;
        println!(
            "MATRIX cell {prim:?} × {opt:?} × {:?}: {kind} {} in {:?}",
            ctx.dep,
            if outcome.is_ok() { "ok" } else { "BROKEN" },
            cell_started.elapsed()
        );
        if let Err(err) = outcome {
            broken.push(format!(
                "{prim:?} × {opt:?} × {:?} ({expect:?}): {err}",
                ctx.dep
            ));
        }
    }
    println!(
        "MATRIX {:?}: {counts:?}, {} broken, in {:?}",
        ctx.dep,
        broken.len(),
        started.elapsed()
    );
    assert!(
        broken.is_empty(),
        "{} broken cell(s) on {:?}:\n{}",
        broken.len(),
        ctx.dep,
        broken.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// The deployments: each started once
// ---------------------------------------------------------------------------------------

/// A loopback URL where nothing listens.
fn nowhere() -> String {
    format!("redis://127.0.0.1:{}", lock_tests::free_port())
}

/// A client of servers that are not there (built without connecting).
fn dead_client(config: Config) -> LockClient {
    LockClient::new(config.connect_timeout(Duration::from_millis(200))).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_server() {
    let server = RedisServer::start();
    // Valkey, for `WAITAOF`: its own append-only file, fsynced on every write.
    let valkey = RedisServer::start_valkey(&["--appendonly", "yes", "--appendfsync", "always"]);
    let ctx = Ctx::new(
        Dep::Single,
        Servers::One(&server),
        Config::single(server.url()),
    );
    let mut aof = Ctx::new(
        Dep::Single,
        Servers::One(&valkey),
        Config::single(valkey.url()).wait_for_aof(true, 0, Duration::from_secs(1)),
    );
    aof.counted = Some((&valkey, "waitaof"));
    run_deployment(&ctx, None, Some(&aof)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel() {
    let deployment = tokio::task::block_in_place(SentinelDeployment::start);
    let (primary, replica) = (&deployment.servers[0], &deployment.servers[1]);
    let config = Config::sentinel(MASTER, deployment.sentinel_urls());
    let ctx = Ctx::new(Dep::Sentinel, Servers::One(primary), config.clone());
    let mut replicas = Ctx::new(
        Dep::Sentinel,
        Servers::One(primary),
        config.wait_for_replicas(1, Duration::from_millis(500)),
    );
    replicas.replica = Some(replica);
    replicas.counted = Some((primary, "wait"));
    run_deployment(&ctx, Some(&replicas), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start(3));
    let ctx = Ctx::new(
        Dep::Cluster,
        Servers::Cluster(&cluster),
        Config::cluster(cluster.urls()),
    );
    run_deployment(&ctx, None, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock() {
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let config = Config::redlock(masters.iter().map(RedisServer::url));
    let mut ctx = Ctx::new(Dep::Redlock, Servers::Masters(&masters), config);
    ctx.dead = Some(dead_client(Config::redlock((0..3).map(|_| nowhere()))));
    run_deployment(&ctx, None, None).await;
}

// ---------------------------------------------------------------------------------------
// The guide's table against MATRIX
// ---------------------------------------------------------------------------------------

const GUIDE: &str = "lock-runtime/src/guide/patterns.md";
const HEADER: &str = "| | `Lock` | `RwLock` | `Semaphore` | `MultiLock` |";

/// The guide's table: each row's label and its four cells, and the text after it.
struct GuideTable {
    rows: Vec<(String, Vec<String>)>,
    after: String,
}

fn guide_table() -> GuideTable {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join(GUIDE)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.trim() == HEADER)
        .unwrap_or_else(|| panic!("{GUIDE} has no table with the header {HEADER}"));
    let mut rows = Vec::new();
    let mut at = start + 2;
    while let Some(line) = lines
        .get(at)
        .filter(|line| line.trim_start().starts_with('|'))
    {
        let mut cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_owned())
            .collect();
        assert_eq!(
            cells.len(),
            5,
            "{GUIDE}: a row of the table without 5 cells: {line}"
        );
        let label = cells.remove(0);
        rows.push((label, cells));
        at += 1;
    }
    let after = lines[at..]
        .iter()
        .skip_while(|line| line.trim().is_empty())
        .take_while(|line| !line.trim().is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    GuideTable { rows, after }
}

/// `text` without its parenthesised asides, lower case.
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.to_lowercase().trim().to_owned()
}

/// What a cell of the guide says for `prim`: no when it starts with "no"; in the `RwLock`
/// column, a cell that names readers or writers says yes only for those it names.
fn says_yes(cell: &str, prim: Prim) -> bool {
    let plain = plain(cell);
    if matches!(prim, Prim::Reader | Prim::Writer)
        && (plain.contains("reader") || plain.contains("writer"))
    {
        return plain.contains(if prim == Prim::Reader {
            "reader"
        } else {
            "writer"
        });
    }
    !plain.starts_with("no")
}

/// The deployments a cell names: "every deployment", "the same" (as the cell before it),
/// "per key" (as a `Lock` on each key), or their names.
fn named_deployments(cells: &[String], column: usize) -> Vec<Dep> {
    let text = cells[column].to_lowercase();
    if text.starts_with("the same") && column > 0 {
        return named_deployments(cells, column - 1);
    }
    if text.starts_with("per key") && column > 0 {
        return named_deployments(cells, 0);
    }
    if text.starts_with("every deployment") {
        return DEPLOYMENTS.to_vec();
    }
    DEPLOYMENTS
        .iter()
        .copied()
        .filter(|dep| text.contains(guide_name(*dep)))
        .collect()
}

fn guide_name(dep: Dep) -> &'static str {
    match dep {
        Dep::Single => "single server",
        Dep::Sentinel => "sentinel",
        Dep::Cluster => "cluster",
        Dep::Redlock => "redlock",
    }
}

/// The text that starts the guide row of `opt`.
fn guide_row(opt: Opt) -> &'static str {
    match opt {
        Opt::Ttl | Opt::Wait | Opt::WatchdogOff | Opt::OnLostContinue | Opt::OnLostCancel => {
            "`ttl`, `wait`, `watchdog`, `on_lost`"
        }
        Opt::Fencing => "`fencing`",
        Opt::HoldAtLeast => "`hold_at_least`",
        Opt::MaxHold => "`max_hold`",
        Opt::Extend => "`extend` on the guard",
        Opt::WaitForReplicas | Opt::WaitForAof => "[`Config::wait_for_replicas`]",
        Opt::Inspect => "[`inspect`]",
    }
}

fn column(prim: Prim) -> usize {
    match prim {
        Prim::Lock => 0,
        Prim::Reader | Prim::Writer => 1,
        Prim::Semaphore => 2,
        Prim::Multi => 3,
    }
}

/// What the guide says of a cell: the option's row for the primitive, and the
/// deployment's row for the primitive (the deployment rows are the labels without code:
/// "single server, Sentinel, Cluster" and "Redlock"), and for the client options on
/// Redlock the sentence after the table that refuses them there.
fn guide_says(table: &GuideTable, prim: Prim, opt: Opt, dep: Dep) -> Result<bool, String> {
    let col = column(prim);
    let needle = guide_row(opt);
    let (_, cells) = table
        .rows
        .iter()
        .find(|(label, _)| label.starts_with(needle))
        .ok_or_else(|| format!("the guide's table has no row starting with {needle}"))?;
    let option = match opt {
        Opt::Inspect => named_deployments(cells, col).contains(&dep),
        _ => says_yes(&cells[col], prim),
    };
    let (_, deployment) = table
        .rows
        .iter()
        .find(|(label, _)| !label.contains('`') && label.to_lowercase().contains(guide_name(dep)))
        .ok_or_else(|| format!("the guide's table has no row for {dep:?}"))?;
    let deployed = says_yes(&deployment[col], prim);
    let client_option = match (opt, dep) {
        (Opt::WaitForReplicas | Opt::WaitForAof, Dep::Redlock) => {
            let name = if opt == Opt::WaitForAof {
                "`wait_for_aof`"
            } else {
                "`wait_for_replicas`"
            };
            !table.after.split(". ").any(|sentence| {
                sentence.contains("Redlock")
                    && sentence.contains(name)
                    && sentence.contains("refused")
            })
        }
        _ => true,
    };
    Ok(option && deployed && client_option)
}

/// What [`MATRIX`] says the guide says of a cell (`None`: the guide does not speak to it).
fn matrix_says(expect: Expect) -> Option<bool> {
    match expect {
        Expect::Works => Some(true),
        Expect::Refused(_) | Expect::NoEffect | Expect::NoApi | Expect::Limited(_) => Some(false),
        Expect::NotHere => None,
        // The guide claims the opposite of what the code does today.
        Expect::Gap(Today::Refused(_), _) => Some(true),
        Expect::Gap(Today::Accepted, _) => Some(false),
    }
}

/// The guide's table and [`MATRIX`] say yes and no alike, cell by cell; every primitive
/// and option has one row in [`MATRIX`].
#[test]
fn the_guide_and_the_matrix_agree() {
    let table = guide_table();
    let mut disagreements = Vec::new();
    let prims = [
        Prim::Lock,
        Prim::Reader,
        Prim::Writer,
        Prim::Semaphore,
        Prim::Multi,
    ];
    let opts = [
        Opt::Ttl,
        Opt::Wait,
        Opt::WatchdogOff,
        Opt::OnLostContinue,
        Opt::OnLostCancel,
        Opt::Fencing,
        Opt::HoldAtLeast,
        Opt::MaxHold,
        Opt::Extend,
        Opt::WaitForReplicas,
        Opt::WaitForAof,
        Opt::Inspect,
    ];
    for prim in prims {
        for opt in opts {
            let rows: Vec<_> = MATRIX
                .iter()
                .filter(|(p, o, _)| *p == prim && *o == opt)
                .collect();
            assert_eq!(
                rows.len(),
                1,
                "MATRIX must have one row for {prim:?} × {opt:?}"
            );
            for (dep, expect) in DEPLOYMENTS.iter().zip(rows[0].2) {
                let Some(matrix) = matrix_says(expect) else {
                    continue;
                };
                match guide_says(&table, prim, opt, *dep) {
                    Ok(guide) if guide == matrix => {}
                    Ok(guide) => disagreements.push(format!(
                        "{prim:?} × {opt:?} × {dep:?}: the guide says {}, MATRIX has {expect:?}",
                        if guide { "yes" } else { "no" }
                    )),
                    Err(err) => disagreements.push(format!("{prim:?} × {opt:?} × {dep:?}: {err}")),
                }
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "{GUIDE}'s table and this suite's MATRIX disagree:\n{}",
        disagreements.join("\n")
    );
}

/// The parser reads the wording it maps (so that a rewording fails here, not silently).
#[test]
fn the_guide_parser_reads_the_wording() {
    assert!(says_yes("yes (per key; `wait` for all)", Prim::Multi));
    assert!(!says_yes("no: permits are not ordered", Prim::Semaphore));
    assert!(!says_yes("no (`Config` error)", Prim::Reader));
    assert!(says_yes("writers (a reader gets no fence)", Prim::Writer));
    assert!(!says_yes("writers (a reader gets no fence)", Prim::Reader));
    assert!(says_yes("readers and writers", Prim::Reader));
    assert!(says_yes("the same, shares included", Prim::Reader));
    let cells: Vec<String> = [
        "every deployment (Redlock: x)",
        "single server, Sentinel, Cluster",
        "the same",
        "per key",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(named_deployments(&cells, 0), DEPLOYMENTS.to_vec());
    assert_eq!(
        named_deployments(&cells, 2),
        vec![Dep::Single, Dep::Sentinel, Dep::Cluster]
    );
    assert_eq!(named_deployments(&cells, 3), DEPLOYMENTS.to_vec());
    let table = guide_table();
    assert_eq!(
        table.rows.len(),
        9,
        "the guide's table has 9 rows: {:?}",
        table.rows
    );
}
