//! Cluster mode's outage rule, per master: which master serves which slots (the slot
//! map, from `CLUSTER SLOTS`) and one [`Health`] per master. A request is reported to the
//! master that serves its key's slot, and a try checks that master: one dead master
//! without a replica fails its own keys at once once past the grace (see `outage.rs`),
//! while the keys of the other masters are still taken.
//!
//! The map is read on a connection of its own: first when a request needs it, again when
//! a reply shows it stale (a redirection to a master the map does not name for the slot,
//! a reply for a master declared down), and by every probe of a failing or down master.
//! So a master whose slots fail over to its replica is checked no longer (its keys are
//! the new master's; it is *retired*: neither announced nor probed), and a master that
//! is back is seen back within a probe period.
//!
//! A request whose master is not known (no key, or no map yet) is reported to the
//! cluster as a whole, as before the map was read.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Arg, Cmd, Pipeline, Value};
use tokio::sync::Notify;

use crate::connection::outage::{Health, Probe, Role};
use crate::error::LockError;
use crate::error::is_connection_error;

/// The slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// The health of each master of a cluster, found through the slot map.
#[derive(Clone)]
pub(crate) struct ClusterNodes {
    inner: Arc<NodesInner>,
}

struct NodesInner {
    /// How long a master's failures may last before it is declared down.
    grace: Duration,
    /// Wakes the client's parked waiters when a master is declared down.
    interrupt: Arc<Notify>,
    /// Opens the connections of the map reads and the probes (without retries: a probe
    /// answers for one moment).
    probes: Arc<ClusterClient>,
    /// How long a map read or a probe may take.
    limit: Duration,
    /// The masters, by slot range.
    map: RwLock<Arc<SlotMap>>,
    /// Whether a map read is under way (one at a time).
    reading: AtomicBool,
    /// The cluster as a whole, for requests whose master is not known.
    whole: Health,
    /// Where the map is read: the client's own runtime (see `client_thread.rs`).
    runtime: Option<tokio::runtime::Handle>,
}

/// Which master serves which slots: ranges in slot order.
#[derive(Default)]
struct SlotMap {
    ranges: Vec<Range>,
}

struct Range {
    first: u16,
    last: u16,
    master: Health,
    /// The hash tag of the master's liveness keys (see [`ClusterNodes::liveness_tag`]).
    tag: Arc<str>,
}

/// How many hash tags are tried for a master's liveness keys: a master that serves even
/// one slot has one among the first few hundred thousand decimal numbers.
const TAG_TRIES: u32 = 4_000_000;

/// The hash tag of a master's liveness keys: the smallest decimal number whose slot the
/// master serves (one of `ranges`), so that every process that reads the same map names
/// that master's liveness keys in the same slot. `None` only if no number up to
/// [`TAG_TRIES`] hashes to those slots.
fn liveness_tag(ranges: &[(u16, u16)]) -> Option<Arc<str>> {
    (0..TAG_TRIES).find_map(|number| {
        let tag = number.to_string();
        let slot = crc16(tag.as_bytes()) % SLOTS;
        serves(ranges, slot).then(|| Arc::from(tag))
    })
}

/// Whether one of `ranges` holds `slot`.
fn serves(ranges: &[(u16, u16)], slot: u16) -> bool {
    ranges
        .iter()
        .any(|(first, last)| (*first..=*last).contains(&slot))
}

impl SlotMap {
    fn master(&self, slot: u16) -> Option<&Health> {
        self.range(slot).map(|range| &range.master)
    }

    fn range(&self, slot: u16) -> Option<&Range> {
        let index = self.ranges.partition_point(|range| range.last < slot);
        self.ranges.get(index).filter(|range| range.first <= slot)
    }

    fn find(&self, address: &str) -> Option<&Range> {
        self.ranges
            .iter()
            .find(|range| range.master.server() == address)
    }

    /// The liveness tag of each master of the ranges `read` (see [`liveness_tag`]).
    fn tags(&self, read: &[(u16, u16, String)]) -> HashMap<String, Option<Arc<str>>> {
        let mut served: HashMap<String, Vec<(u16, u16)>> = HashMap::new();
        for (first, last, address) in read {
            served
                .entry(address.clone())
                .or_default()
                .push((*first, *last));
        }
        // A master keeps its tag while it still serves the tag's slot: the liveness keys
        // its queue entries name stay the ones their processes refresh.
        served
            .into_iter()
            .map(|(address, ranges)| {
                let kept = self
                    .find(&address)
                    .map(|range| range.tag.clone())
                    .filter(|tag| serves(&ranges, key_slot(tag.as_bytes())));
                let tag = kept.or_else(|| liveness_tag(&ranges));
                (address, tag)
            })
            .collect()
    }

    /// Retires the masters of this map that `fresh` no longer names.
    fn retire_absent_from(&self, fresh: &SlotMap) {
        let mut gone = HashSet::new();
        for range in &self.ranges {
            let address = range.master.server();
            if fresh.find(address).is_none() && gone.insert(address) {
                let was_failing = range.master.retire();
                if was_failing {
                    tracing::info!(
                        server = %address,
                        "the Redis Cluster master serves no slot any more (its slots failed \
                         over or moved): its keys are checked on their new master"
                    );
                }
            }
        }
    }
}

impl ClusterNodes {
    /// The masters of the cluster `probes` connects to; `whole` stands for the cluster
    /// until the map is read.
    pub(crate) fn new(
        grace: Duration,
        interrupt: Arc<Notify>,
        probes: ClusterClient,
        limit: Duration,
        whole: Health,
    ) -> Self {
        ClusterNodes {
            inner: Arc::new(NodesInner {
                grace,
                interrupt,
                probes: Arc::new(probes),
                limit,
                map: RwLock::new(Arc::default()),
                reading: AtomicBool::new(false),
                whole,
                runtime: crate::client_thread::captured(),
            }),
        }
    }

    fn map(&self) -> Arc<SlotMap> {
        let map = self.inner.map.read();
        map.unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Takes note of what a request for `slot` came to.
    pub(crate) fn observe<T>(&self, slot: Option<u16>, result: &redis::RedisResult<T>) {
        let map = self.map();
        let Some(master) = slot.and_then(|slot| map.master(slot)) else {
            self.inner.whole.observe(result);
            if slot.is_some() {
                // A keyed request and no master for it: the map is not read yet, or
                // the slot was just assigned.
                self.read_map_soon();
            }
            return;
        };
        match result {
            Err(err) if is_connection_error(err) => master.failed_to_reach(err),
            Err(err) if could_not_follow(err, master.server()) => {
                let said = std::io::Error::other(format!(
                    "the cluster sends the slot's requests to it and no connection to it \
                     could be opened ({err})"
                ));
                master.failed_to_reach(&said.into());
            }
            Err(err) if err.redirect_node().is_some() => {
                // Redirected elsewhere: the slot moved, and redis-rs follows it.
                self.read_map_soon();
            }
            _ => {
                if !master.answered_unless_down() {
                    self.read_map_soon();
                }
            }
        }
    }

    /// The outage error for `key` when the master that serves its slot (or, before the
    /// map is read, the cluster) is declared down.
    pub(crate) fn down(&self, key: &str) -> Option<LockError> {
        let map = self.map();
        match map.master(key_slot(key.as_bytes())) {
            Some(master) => master.down(key),
            None => self.inner.whole.down(key),
        }
    }

    /// The hash tag of the liveness keys (see [`crate::renewal::liveness`]) on the master that
    /// serves `key`'s slot: a key named with it (`…{tag}…`) is served by that master, so
    /// the scripts run there for `key` may read it. `None` before the map is read (a read
    /// is then started) or when no master serves the slot.
    pub(crate) fn liveness_tag(&self, key: &str) -> Option<Arc<str>> {
        let map = self.map();
        let tag = map
            .range(key_slot(key.as_bytes()))
            .map(|range| range.tag.clone());
        if tag.is_none() {
            self.read_map_soon();
        }
        tag
    }

    /// The indices of `keys` grouped by the master that serves them, each group with a slot
    /// of that master to send it by (a pipeline sent there may name any key the master
    /// serves). A key whose master the map does not name (no map yet) is a group of its
    /// own, sent by its own key.
    pub(crate) fn by_master<'k>(
        &self,
        keys: impl Iterator<Item = &'k str>,
    ) -> Vec<(Option<u16>, Vec<usize>)> {
        let map = self.map();
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        let mut group_of: HashMap<&str, usize> = HashMap::new();
        for (index, key) in keys.enumerate() {
            let slot = key_slot(key.as_bytes());
            let Some(master) = map.master(slot) else {
                groups.push((None, vec![index]));
                continue;
            };
            let group = *group_of.entry(master.server()).or_insert_with(|| {
                groups.push((Some(slot), Vec::new()));
                groups.len() - 1
            });
            groups[group].1.push(index);
        }
        groups
    }

    /// The hash tags of the liveness keys on every master of the map, one per master.
    pub(crate) fn liveness_tags(&self) -> Vec<Arc<str>> {
        let map = self.map();
        let mut tags: Vec<Arc<str>> = map.ranges.iter().map(|range| range.tag.clone()).collect();
        tags.sort_unstable();
        tags.dedup();
        tags
    }

    /// Reads the map in the background, unless a read is under way.
    pub(crate) fn read_map_soon(&self) {
        let Some(runtime) = self
            .inner
            .runtime
            .clone()
            .or_else(crate::client_thread::captured)
        else {
            return;
        };
        if self.inner.reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let nodes = self.clone();
        runtime.spawn(async move {
            let limit = nodes.inner.limit;
            let read = async {
                let mut connection = nodes.inner.probes.get_async_connection().await.ok()?;
                nodes.read_map(&mut connection).await;
                Some(())
            };
            let _ = tokio::time::timeout(limit, read).await;
            // Not more than one read per probe period, whatever asks.
            tokio::time::sleep(Duration::from_millis(100)).await;
            nodes.inner.reading.store(false, Ordering::Release);
        });
    }

    /// Reads the map on `connection` (`CLUSTER SLOTS`) and puts it in place: the masters
    /// it names keep their health (a new one starts up), and the masters it no longer
    /// names are retired.
    async fn read_map(&self, connection: &mut ClusterConnection) {
        let mut slots = redis::cmd("CLUSTER");
        slots.arg("SLOTS");
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        if let Ok(reply) = connection.route_command(slots, routing).await {
            let read = parse_slots(reply);
            if !read.is_empty() {
                self.install(read);
            }
        }
    }

    /// Puts the masters' ranges `read` in place of the map.
    fn install(&self, read: Vec<(u16, u16, String)>) {
        let map = self.inner.map.write();
        let mut map = map.unwrap_or_else(PoisonError::into_inner);
        let old = map.clone();
        let fresh = self.fresh_map(&old, read);
        old.retire_absent_from(&fresh);
        *map = Arc::new(fresh);
    }

    /// The map of the ranges `read`, where the masters of `old` keep their health.
    fn fresh_map(&self, old: &SlotMap, read: Vec<(u16, u16, String)>) -> SlotMap {
        let tags = old.tags(&read);
        // One health per master, also for a master new to the map with several ranges.
        let mut masters: HashMap<String, Health> = HashMap::new();
        let ranges = read
            .into_iter()
            .filter_map(|(first, last, address)| {
                let tag = tags.get(&address).cloned().flatten()?;
                let master = masters
                    .entry(address.clone())
                    .or_insert_with(|| {
                        old.find(&address)
                            .map(|range| range.master.clone())
                            .unwrap_or_else(|| self.master(address))
                    })
                    .clone();
                Some(Range {
                    first,
                    last,
                    master,
                    tag,
                })
            })
            .collect();
        SlotMap { ranges }
    }

    /// A new master's health, with its probe.
    fn master(&self, address: String) -> Health {
        Health::new(
            address.clone(),
            Role::ClusterMaster,
            self.inner.grace,
            self.inner.interrupt.clone(),
            Some(probe_master(
                Arc::downgrade(&self.inner),
                address,
                self.inner.limit,
            )),
        )
    }
}

/// A probe of one master: a connection of its own to the cluster, on which the map is
/// read (a failover shows there first) and the master is sent a `PING`.
fn probe_master(nodes: Weak<NodesInner>, address: String, limit: Duration) -> Probe {
    let target = address
        .rsplit_once(':')
        .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)));
    Arc::new(move || {
        let (nodes, target) = (nodes.clone(), target.clone());
        Box::pin(async move {
            let (Some(inner), Some((host, port))) = (nodes.upgrade(), target) else {
                return false;
            };
            let nodes = ClusterNodes { inner };
            let probe = async {
                let mut connection = nodes.inner.probes.get_async_connection().await.ok()?;
                nodes.read_map(&mut connection).await;
                let routing =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
                connection
                    .route_command(redis::cmd("PING"), routing)
                    .await
                    .ok()
            };
            matches!(tokio::time::timeout(limit, probe).await, Ok(Some(_)))
        })
    })
}

/// Whether `err` is a redirection to `master` itself that redis-rs could not follow: the
/// cluster still names it for the slot, and no connection to it could be had.
fn could_not_follow(err: &redis::RedisError, master: &str) -> bool {
    err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || err
            .redirect_node()
            .is_some_and(|(address, _)| address == master)
}

/// The masters' slot ranges in a `CLUSTER SLOTS` reply, in slot order: (first, last,
/// `host:port`). Ranges whose master has no usable address (an unknown endpoint) are left
/// out: their keys count for the cluster as a whole.
fn parse_slots(reply: Value) -> Vec<(u16, u16, String)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let mut parsed: Vec<(u16, u16, String)> = ranges
        .into_iter()
        .filter_map(|range| {
            let Value::Array(range) = range else {
                return None;
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (range.first(), range.get(1), range.get(2))
            else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(host) => String::from_utf8(host.clone()).ok()?,
                Value::SimpleString(host) => host.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            if host.is_empty() || host == "?" {
                return None;
            }
            Some((
                u16::try_from(*first).ok()?,
                u16::try_from(*last).ok()?,
                format!("{host}:{port}"),
            ))
        })
        .collect();
    parsed.sort_by_key(|(first, _, _)| *first);
    parsed
}

/// The slot of a request: that of the key of its command (of its first keyed command for
/// a pipeline), or `None` for a request without a key.
pub(crate) fn cmd_slot(cmd: &Cmd) -> Option<u16> {
    cmd_key(cmd).map(key_slot)
}

/// The same for a pipeline.
pub(crate) fn pipeline_slot(pipeline: &Pipeline) -> Option<u16> {
    pipeline.cmd_iter().find_map(cmd_slot)
}

/// The key a command names: after the script and the key count for scripts, the first
/// argument for the key commands the runtime sends, none for the commands without one.
fn cmd_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        Arg::Simple(arg) => Some(arg),
        _ => None,
    });
    let name = args.next()?;
    let is = |command: &[u8]| name.eq_ignore_ascii_case(command);
    if is(b"EVALSHA") || is(b"EVAL") || is(b"EVALSHA_RO") || is(b"EVAL_RO") || is(b"FCALL") {
        let _script = args.next()?;
        let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
        return if keys == 0 { None } else { args.next() };
    }
    const KEYLESS: [&[u8]; 12] = [
        b"PING", b"WAIT", b"WAITAOF", b"SCRIPT", b"CLUSTER", b"CONFIG", b"INFO", b"TIME",
        b"CLIENT", b"HELLO", b"AUTH", b"SELECT",
    ];
    if KEYLESS.iter().any(|command| is(command)) {
        return None;
    }
    args.next()
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|byte| *byte == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|byte| *byte == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::outage::tests::refused;

    #[test]
    fn a_masters_liveness_tag_hashes_to_a_slot_it_serves() {
        let masters: [&[(u16, u16)]; 5] = [
            &[(0, 5460)],
            &[(5461, 10922)],
            &[(10923, 16383)],
            &[(7000, 7000)],
            &[(0, 10), (16000, 16383)],
        ];
        for ranges in masters {
            let tag = liveness_tag(ranges).expect("a tag");
            let slot = key_slot(format!("~lock/alive/1234{{{tag}}}").as_bytes());
            assert!(
                serves(ranges, slot),
                "tag {tag} (slot {slot}) for {ranges:?}"
            );
        }
    }

    #[test]
    fn slots_are_those_of_redis_cluster() {
        // CRC16 XMODEM's check value, and `CLUSTER KEYSLOT` answers.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn the_key_of_a_request_is_found() {
        let mut script = redis::cmd("EVALSHA");
        script.arg("abc").arg(2).arg("stock:{7}").arg("fence");
        assert_eq!(cmd_slot(&script), Some(key_slot(b"stock:{7}")));
        let mut keyless = redis::cmd("EVALSHA");
        keyless.arg("abc").arg(0);
        assert_eq!(cmd_slot(&keyless), None);
        assert_eq!(cmd_slot(&redis::cmd("PING")), None);
        let mut get = redis::cmd("GET");
        get.arg("stock:7");
        assert_eq!(cmd_slot(&get), Some(key_slot(b"stock:7")));
        let mut pipe = redis::pipe();
        pipe.cmd("PING").cmd("PTTL").arg("stock:7");
        assert_eq!(pipeline_slot(&pipe), Some(key_slot(b"stock:7")));
    }

    fn moved_to(address: &str) -> redis::RedisResult<()> {
        Err(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved),
            "An error was signalled by the server",
            format!("9842 {address}"),
        )))
    }

    /// Two masters, A (slots 0-8191) and B (8192-16383), watched with a 50 ms grace and
    /// no runtime (a master past the grace is declared down without confirming probes).
    fn two_masters() -> (ClusterNodes, String, String) {
        let interrupt = Arc::new(Notify::new());
        let grace = Duration::from_millis(50);
        let whole = Health::new("seeds", Role::Server, grace, interrupt.clone(), None);
        let probes = ClusterClient::new(vec!["redis://127.0.0.1:1"]).unwrap();
        let nodes = ClusterNodes::new(grace, interrupt, probes, Duration::from_secs(1), whole);
        nodes.install(vec![
            (0, 8191, "10.0.0.1:7000".to_owned()),
            (8192, 16383, "10.0.0.2:7000".to_owned()),
        ]);
        let on = |address: &str| {
            (0..100_000)
                .map(|n| format!("k{n}"))
                .find(|key| {
                    let slot = key_slot(key.as_bytes());
                    (slot < 8192) == (address == "A")
                })
                .unwrap()
        };
        (nodes, on("A"), on("B"))
    }

    fn fail_past_the_grace(nodes: &ClusterNodes, key: &str, result: &redis::RedisResult<()>) {
        let slot = Some(key_slot(key.as_bytes()));
        nodes.observe(slot, result);
        std::thread::sleep(Duration::from_millis(60));
        nodes.observe(slot, result);
    }

    #[test]
    fn a_master_that_fails_past_the_grace_fails_its_own_keys_only() {
        let (nodes, on_a, on_b) = two_masters();
        fail_past_the_grace(&nodes, &on_a, &refused());
        let err = nodes.down(&on_a).expect("A is down");
        let text = err.to_string();
        assert!(
            text.contains("Redis Cluster master 10.0.0.1:7000"),
            "{text}"
        );
        assert!(text.contains(&on_a), "{text}");
        assert!(nodes.down(&on_b).is_none(), "B's keys are still taken");
        // A reply for A's slot while it is down came from elsewhere: A stays down.
        nodes.observe(Some(key_slot(on_a.as_bytes())), &Ok::<(), _>(()));
        assert!(nodes.down(&on_a).is_some());
    }

    #[test]
    fn a_redirection_to_the_master_itself_is_a_failure_to_reach_it() {
        let (nodes, on_a, on_b) = two_masters();
        // Redirected elsewhere: the slot moved, nothing failed.
        fail_past_the_grace(&nodes, &on_b, &moved_to("10.0.0.3:7000"));
        assert!(nodes.down(&on_b).is_none());
        // Redirected to the master the map names, which redis-rs could not reach.
        fail_past_the_grace(&nodes, &on_a, &moved_to("10.0.0.1:7000"));
        assert!(nodes.down(&on_a).is_some());
        assert!(nodes.down(&on_b).is_none());
    }

    #[test]
    fn a_master_that_leaves_the_map_holds_nothing_down() {
        let (nodes, on_a, _) = two_masters();
        fail_past_the_grace(&nodes, &on_a, &refused());
        assert!(nodes.down(&on_a).is_some());
        // A's replica took over its slots.
        nodes.install(vec![
            (0, 8191, "10.0.0.4:7000".to_owned()),
            (8192, 16383, "10.0.0.2:7000".to_owned()),
        ]);
        assert!(nodes.down(&on_a).is_none());
        // A master new to the map with two ranges has one health for both.
        nodes.install(vec![
            (0, 99, "10.0.0.5:7000".to_owned()),
            (100, 8191, "10.0.0.4:7000".to_owned()),
            (8192, 8291, "10.0.0.5:7000".to_owned()),
            (8292, 16383, "10.0.0.2:7000".to_owned()),
        ]);
        let map = nodes.map();
        let (low, high) = (map.master(0).unwrap(), map.master(8192).unwrap());
        assert!(low.same(high), "two healths for one master");
    }

    #[test]
    fn a_slot_map_is_read_from_cluster_slots() {
        let node = |host: &str, port| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
            ]),
            Value::Array(vec![Value::Int(10923), Value::Int(16383), node("?", 7002)]),
        ]);
        assert_eq!(
            parse_slots(reply),
            vec![
                (0, 5460, "127.0.0.1:7000".to_owned()),
                (5461, 10922, "127.0.0.1:7001".to_owned()),
            ]
        );
    }
}
