//! An operator's view of a lock: who holds it, for how long still, the fence, and which
//! processes wait in its Redis queue and since when ([`LockClient::inspect`](crate::LockClient::inspect)).
//!
//! One read-only script call (`lua/inspect.lua`) reads the lock key and its auxiliary keys
//! together, in the key's cluster slot, so the view is one instant of the server's.

mod text;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::connection::Connection;
use crate::deadlock::chain::{Record, holds_by_client};
use crate::error::LockError;
use crate::identity::{Identity, client_id_of};
use crate::scripts::ShareNames;
use crate::scripts::inspect_call;
use crate::scripts::{HANDOVER, KeyNames, invoke};

/// The most waiters [`LockState::waiters`] lists ([`LockState::queued`] counts them all).
pub const MAX_LISTED_WAITERS: usize = 100;

/// What a lock key holds at one instant of the server's clock: its holders, the fence
/// counter, and the processes waiting in its Redis queue. Made by [`LockClient::inspect`](crate::LockClient::inspect)
/// and [`inspect`]; `Display` prints it for a person:
///
/// ```text
/// key      stock:42
/// holder   lr-6f1d0c3e9a7b4c2d.11/1a2f3c71e92/ea60/4711@host-a/shop/shop::buy  ttl 50.874s
///          by host-a pid 4711 shop `shop::buy`  since 2026-11-24T18:29:20.234Z (41.891s ago)  renewed 9.126s ago
/// fence    none
/// waiting  2
///   1  lr-a1b2c3d4e5f60718.3/1a2f3c72290/ea60/5120@host-b/shop/shop::buy  waited 1.203s  since 2026-11-24T18:30:01.123Z  place 0.795s left
///      by host-b pid 5120 shop `shop::buy`
///   2  lr-0f1e2d3c4b5a6978.9/1a2f3c725a2/7530/802@host-c/billing/billing::charge  waited 0.412s  since 2026-11-24T18:30:01.914Z  place 0.801s left
///      by host-c pid 802 billing `billing::charge`
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The Redis key (the client's key prefix included).
    pub key: String,
    /// Who holds the lock: empty when it is free or being handed over; one entry for a
    /// mutex (and a scheduled-job lock, which is one) or a read-write lock's writer; one
    /// per reader of a read-write lock and per permit of a semaphore.
    pub holders: Vec<Holder>,
    /// A semaphore's permit count, as its holders recorded it (`None`: not a semaphore,
    /// or nobody holds a permit).
    pub permits: Option<u32>,
    /// The lock is being handed to the head of its queue (a release found a waiter that
    /// takes it through its next try): how long the hand-over may still take at most.
    pub handover: Option<Duration>,
    /// The fence counter: the last fencing token issued for this key (`None` when no
    /// fenced acquisition happened within [`FENCE_COUNTER_LIFETIME`](crate::FENCE_COUNTER_LIFETIME)).
    pub fence: Option<u64>,
    /// The processes waiting in the key's Redis queue, first come first: the first
    /// [`MAX_LISTED_WAITERS`].
    pub waiters: Vec<Waiter>,
    /// How many processes wait in the queue in all.
    pub queued: usize,
    /// The server's clock when it was read.
    pub server_time: SystemTime,
    /// In Redlock mode, each master's own state, in the order of the client's URLs (`None`
    /// for a master that did not answer); the fields above are then the majority's
    /// verdict. Empty in the other deployments.
    pub masters: Vec<Option<LockState>>,
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's token: the lock key's value (one per tenure of a process).
    pub token: String,
    /// How long the key lives unless renewed (`None`: the key has no expiry, so it was not
    /// set by this crate, which always sets one).
    pub ttl: Option<Duration>,
    /// What the holder holds.
    pub kind: HolderKind,
    /// The key the holder's task waits for while it holds this one, when that wait has
    /// gone on past the deadlock detection's delay
    /// ([`Config::deadlock_detection`](crate::Config::deadlock_detection)): an edge of the
    /// wait-for graph (`lockctl graph` follows them). `None`: it waits for nothing, or not
    /// that long.
    pub waits_for: Option<String>,
    /// When the holder last renewed its lease, or took it (the server's clock): from its
    /// hold record when it reported progress, else the server's time less
    /// [`since_renewal`](Self::since_renewal); `None` for a foreign holder, and for readers
    /// and permits. A holder whose renewals go on but whose
    /// [`last_progress`](Self::last_progress) stays behind is alive but stuck or slow; one
    /// whose renewals stopped is gone or paused.
    pub last_renewal: Option<SystemTime>,
    /// When the holder last reported progress
    /// ([`CurrentLock::progress`](crate::CurrentLock::progress),
    /// [`LockGuard::progress`](crate::LockGuard::progress)), as of its last renewal (the
    /// server's clock); `None` when it did not during this hold, or before a renewal
    /// carried it (the renewal after a report writes a small record beside the key, read
    /// here; a holder that never reports costs nothing more).
    pub last_progress: Option<SystemTime>,
    /// When the holder took the key after waiting in its queue (the server's clock, from
    /// the hold record its take wrote); `None` when it took the key at its first ask, and
    /// over Redlock masters (where each round of a wait asks with a token of its own, so
    /// the token's time is the round's). [`identity`](Self::identity)'s `since` is this
    /// when known.
    pub took: Option<SystemTime>,
}

/// What a [`Holder`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HolderKind {
    /// The lock itself, alone (a mutex, a scheduled-job lock, a read-write lock's writer).
    Exclusive,
    /// A share of a read-write lock ([`RwLock::read`](crate::RwLock::read)): its ttl is
    /// its share's.
    Reader,
    /// One of a semaphore's permits ([`Semaphore`](crate::Semaphore)): its ttl is the
    /// permit's lease.
    Permit,
}

impl Holder {
    /// Whether the token is one this crate makes (`lr-` and its process's identity; a permit's
    /// `permit:lr-…`): not another client's lock, nor a string key that is no lock.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let state = lock_runtime::inspect("session:abc").await?;
    /// if state.holders.iter().any(|holder| !holder.is_ours()) {
    ///     println!("not one of our locks");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_ours(&self) -> bool {
        let token = match self.kind {
            HolderKind::Permit => self.token.strip_prefix("permit:").unwrap_or(""),
            HolderKind::Exclusive | HolderKind::Reader => &self.token,
        };
        token.starts_with(crate::lease::OUR_TOKEN)
    }

    /// Who holds it, as its token names it: host, process id, service, the function that
    /// asked for the key and since when (for a holder that waited in the key's queue, since
    /// it [`took`](Self::took) the key); or a foreign client.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), lock_runtime::LockError> {
    /// let state = lock_runtime::inspect("stock:42").await?;
    /// if let Some(process) = state.holder().and_then(|h| h.identity().process().cloned()) {
    ///     println!("held by {process} for {:?}", process.age(state.server_time));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn identity(&self) -> Identity {
        let mut identity = Identity::of_token(&self.token);
        if let (Identity::Process(process), Some(took)) = (&mut identity, self.took) {
            process.since = took;
        }
        identity
    }

    /// How long ago the holder last renewed its lease (or took it): the lease its token
    /// asked for less what is left of it. `None` for a token that names no lease (a foreign
    /// holder's) or a key without expiry. A holder whose watchdog runs renews every third
    /// of its lease; a longer time since says its process stopped (or lost Redis).
    pub fn since_renewal(&self) -> Option<Duration> {
        let asked = self.identity().process()?.ttl;
        Some(asked.saturating_sub(self.ttl?))
    }

    /// The holder of the lock itself, alone.
    pub(crate) fn exclusive(token: String, ttl: Option<Duration>) -> Self {
        Holder {
            token,
            ttl,
            kind: HolderKind::Exclusive,
            last_renewal: None,
            last_progress: None,
            took: None,
            waits_for: None,
        }
    }

    /// This holder with its last renewal, when no hold record gave it: `now` less
    /// [`since_renewal`](Self::since_renewal).
    fn renewed_by(mut self, now: SystemTime) -> Self {
        if self.last_renewal.is_none() {
            self.last_renewal = self
                .since_renewal()
                .and_then(|since| now.checked_sub(since));
        }
        self
    }

    /// This holder with what its hold record says (`<token> <renewed ms> <progress ms or
    /// -> <took ms or ->`, written by its take after a wait and by its renewals; a record
    /// of an earlier version ends before `took`), when the record is this holder's.
    fn with_record(mut self, record: Option<&str>) -> Self {
        let record = record.unwrap_or_default();
        // Read from the end: the times have no space, whatever the token holds.
        let fields = |count: usize| {
            let mut parts = record.rsplitn(count + 1, ' ');
            let mut times = [None; 3];
            for time in times.iter_mut().take(count).rev() {
                *time = parts.next();
            }
            (parts.next() == Some(self.token.as_str())).then_some(times)
        };
        let Some([renewed, progress, took]) = fields(3).or_else(|| fields(2)) else {
            return self;
        };
        let time = |ms: Option<&str>| {
            let ms = ms?.parse::<u64>().ok()?;
            Some(UNIX_EPOCH + Duration::from_millis(ms))
        };
        self.last_renewal = time(renewed);
        self.last_progress = time(progress);
        self.took = time(took);
        self
    }
}

impl HolderKind {
    /// How an operator's view names it: `holder`, `reader` or `permit`.
    pub(crate) fn role(self) -> &'static str {
        match self {
            HolderKind::Exclusive => "holder",
            HolderKind::Reader => "reader",
            HolderKind::Permit => "permit",
        }
    }
}

/// One process waiting in a lock's Redis queue (one entry per process, however many of
/// its tasks wait).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Its id in the queue: the token it will hold the lock with.
    pub id: String,
    /// When it joined the queue (the server's clock).
    pub arrived: SystemTime,
    /// How long it has waited in the queue so far.
    pub waited: Duration,
    /// Until when its place is kept unless its process keeps it alive (a queue lease,
    /// renewed by the process's watchdog): a process that died loses its place then.
    pub place_until: Option<SystemTime>,
    /// How long its place lasts from now; zero when it has lapsed (its process stopped
    /// keeping it, and the next script call that tidies the queue drops it).
    pub place_left: Duration,
    /// The lease a release grants it outright (`None`: it takes the lock through a
    /// hand-over instead, as a waiter that wants a fencing token does).
    pub grant_ttl: Option<Duration>,
    /// The keys its process's waiting tasks hold while they wait for this one, once such a
    /// wait has gone on past the deadlock detection's delay
    /// ([`Config::deadlock_detection`](crate::Config::deadlock_detection)); empty when
    /// none does. With [`Holder::waits_for`] these are the wait-for graph's edges that
    /// `lockctl graph` follows. (A task that waits behind another task of its own process
    /// is not in the queue: the key's holder is its process.)
    pub holds: Vec<String>,
}

impl Waiter {
    /// Who waits, as its id (the token it will hold the lock with) names it.
    pub fn identity(&self) -> Identity {
        Identity::of_token(&self.id)
    }
}

impl LockState {
    /// The holder of a mutex, if any (the first holder).
    pub fn holder(&self) -> Option<&Holder> {
        self.holders.first()
    }

    /// Whether anyone holds the lock (a hand-over in progress is not a holder).
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// Whether nothing of a lock is at this key: no holder (nor reader's share, nor
    /// permit), no hand-over, nobody queued, no fence counter. A key nobody has used as a
    /// lock lately, or a mistyped one.
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
            && self.handover.is_none()
            && self.queued == 0
            && self.fence.is_none()
    }
}

/// What the lock `names` holds on the server behind `connection`: one read-only script call.
pub(crate) async fn inspect_on(
    names: &KeyNames,
    mut connection: Connection,
) -> Result<LockState, LockError> {
    let shares = ShareNames::of(names);
    let call = inspect_call(names, &shares, MAX_LISTED_WAITERS);
    let reply: InspectReply = invoke(&call, &mut connection)
        .await
        .map_err(|err| LockError::backend(names.lock(), err))?;
    into_state(reply, names.lock())
}

/// What `key` holds now, on the global client: see [`LockClient::inspect`](crate::LockClient::inspect).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// let state = lock_runtime::inspect("stock:42").await?;
/// println!("{state}");
/// for waiter in &state.waiters {
///     println!("{} has waited {:?}", waiter.id, waiter.waited);
/// }
/// # Ok(()) }
/// ```
pub async fn inspect(key: &str) -> Result<LockState, LockError> {
    crate::client::client()?.inspect(key).await
}

/// The script's reply: the key's type, value and PTTL, the fence counter, the server's
/// time (ms, µs), the listed waiters and how many are queued, the readers or permits, and
/// a semaphore's permit count, what the holder waits for (its deadlock record), and its
/// hold record.
type InspectReply = (
    String,
    Option<String>,
    i64,
    Option<String>,
    i64,
    i64,
    Vec<ListedWaiter>,
    i64,
    Vec<(String, String, i64)>,
    Option<String>,
    (Option<String>, Vec<String>),
    Option<String>,
);

/// A listed waiter: its id, arrival (µs), place deadline (ms) and grant ttl (ms).
type ListedWaiter = (String, String, Option<String>, Option<String>);

/// The state the script's reply describes.
fn into_state(reply: InspectReply, key: &str) -> Result<LockState, LockError> {
    let (kind, value, pttl, fence, now_ms, now_us, listed, queued, shared, permits, waits, record) =
        reply;
    let (waits, waiters_hold) = waits;
    let holds = holds_by_client(&waiters_hold);
    let permits = permits.as_deref().and_then(|n| n.parse::<u32>().ok());
    // A sorted set is a semaphore's key only with its permit count recorded.
    if kind != "string" && kind != "none" && !(kind == "zset" && permits.is_some()) {
        return Err(not_a_lock(key, &kind));
    }
    let now_us = u64::try_from(now_us).unwrap_or(0);
    let server_time = UNIX_EPOCH + Duration::from_micros(now_us);
    let (mut holders, handover) = holders(value, pttl, shared);
    if let Some(first) = holders
        .first_mut()
        .filter(|h| h.kind == HolderKind::Exclusive)
    {
        first.waits_for = waits
            .as_deref()
            .and_then(Record::decode)
            .map(|r| r.waits_for);
        *first = first
            .clone()
            .with_record(record.as_deref())
            .renewed_by(server_time);
    }
    let now_ms = u64::try_from(now_ms).unwrap_or(0);
    let waiters = listed
        .into_iter()
        .map(|listed| waiter(listed, now_us, now_ms))
        .map(|mut waiter| {
            let client = client_id_of(&waiter.id);
            waiter.holds = client
                .and_then(|id| holds.get(id))
                .cloned()
                .unwrap_or_default();
            waiter
        })
        .collect();
    Ok(LockState {
        key: key.to_owned(),
        holders,
        permits,
        handover: handover.then(|| pttl_to_ttl(pttl).unwrap_or_default()),
        fence: fence.as_deref().and_then(parse_number),
        waiters,
        queued: usize::try_from(queued).unwrap_or(0),
        server_time,
        masters: Vec::new(),
    })
}

/// A waiter as the script listed it (its id, arrival in µs, place deadline in ms and grant
/// ttl), at the server's time `now_us` (`now_ms`).
fn waiter(listed: ListedWaiter, now_us: u64, now_ms: u64) -> Waiter {
    let (id, arrived_us, deadline_ms, grant_ttl) = listed;
    let arrived_us = parse_number(&arrived_us).unwrap_or(now_us);
    let deadline_ms = deadline_ms.as_deref().and_then(parse_number);
    Waiter {
        id,
        arrived: UNIX_EPOCH + Duration::from_micros(arrived_us),
        waited: Duration::from_micros(now_us.saturating_sub(arrived_us)),
        place_until: deadline_ms.map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        place_left: Duration::from_millis(deadline_ms.map_or(0, |ms| ms.saturating_sub(now_ms))),
        grant_ttl: grant_ttl
            .as_deref()
            .and_then(parse_number)
            .map(Duration::from_millis),
        holds: Vec::new(),
    }
}

/// The holders a script found: the lock key's `value` with its `pttl` (none while the key
/// holds a hand-over), then the readers or permits it listed (token, `reader` or `permit`,
/// ms left); and whether the key held a hand-over.
pub(crate) fn holders(
    value: Option<String>,
    pttl: i64,
    shared: Vec<(String, String, i64)>,
) -> (Vec<Holder>, bool) {
    let handover = value.as_deref() == Some(HANDOVER);
    let holders = (value.filter(|_| !handover))
        .map(|token| Holder::exclusive(token, pttl_to_ttl(pttl)))
        .into_iter()
        .chain(shared.into_iter().map(|(token, kind, left_ms)| Holder {
            token,
            waits_for: None,
            ttl: pttl_to_ttl(left_ms),
            kind: if kind == "reader" {
                HolderKind::Reader
            } else {
                HolderKind::Permit
            },
            last_renewal: None,
            last_progress: None,
            took: None,
        }));
    (holders.collect(), handover)
}

/// The error for a key that holds another type than a lock's string.
pub(crate) fn not_a_lock(key: &str, kind: &str) -> LockError {
    LockError::InvalidKey {
        key: key.to_owned(),
        reason: format!(
            "the key holds a Redis {kind}, not a lock (a lock key is a string holding its \
             holder's token); check the key's name and the client's key prefix"
        ),
    }
}

/// A PTTL as a ttl: `None` for a key without expiry (or none at all).
fn pttl_to_ttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A whole number Redis wrote as text: an integer, or a sorted set's score (a double,
/// exact below 2^53, which covers microseconds since 1970).
fn parse_number(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().or_else(|| {
        let number = text.parse::<f64>().ok()?;
        (number.is_finite() && number >= 0.0).then_some(number as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::text::Utc;
    use super::*;

    #[test]
    fn times_print_as_utc() {
        let time = UNIX_EPOCH + Duration::from_millis(1_795_540_488_551);
        assert_eq!(Utc(time).to_string(), "2026-11-24T17:14:48.551Z");
        assert_eq!(Utc(UNIX_EPOCH).to_string(), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(Utc(leap).to_string(), "2000-02-29T00:00:00.000Z");
    }

    fn waiter(id: &str, left_ms: u64) -> Waiter {
        Waiter {
            id: id.to_owned(),
            arrived: UNIX_EPOCH + Duration::from_millis(1_795_540_488_551),
            waited: Duration::from_millis(1203),
            place_until: Some(UNIX_EPOCH),
            place_left: Duration::from_millis(left_ms),
            grant_ttl: None,
            holds: Vec::new(),
        }
    }

    #[test]
    fn a_hand_over_a_lapsed_place_and_a_long_queue_print_as_such() {
        let state = LockState {
            key: "stock:42".into(),
            holders: Vec::new(),
            permits: None,
            handover: Some(Duration::from_millis(640)),
            fence: Some(7),
            waiters: vec![waiter("a", 0), {
                let mut b = waiter("b", 795);
                b.holds = vec!["user:7".into(), "cart:7".into()];
                b
            }],
            queued: 5,
            server_time: UNIX_EPOCH,
            masters: Vec::new(),
        };
        assert_eq!(
            state.to_string(),
            "key      stock:42\n\
             holder   none: hand-over to the first waiter in progress (at most 0.640s more)\n\
             fence    7\n\
             waiting  5\n\
             \x20 1  a  waited 1.203s  since 2026-11-24T17:14:48.551Z  place lapsed\n\
             \x20 2  b  waited 1.203s  since 2026-11-24T17:14:48.551Z  place 0.795s left\n\
             \x20    holds user:7, cart:7 meanwhile\n\
             \x20 ... and 3 more"
        );
        let foreign = Holder::exclusive("t".into(), None);
        assert_eq!(foreign.to_string(), "holder   t  no expiry");
        let record = Some("t 1795540488551 1795540488000");
        let renewed = foreign.clone().with_record(record);
        let at = |ms| Some(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(renewed.last_renewal, at(1_795_540_488_551));
        assert_eq!(renewed.last_progress, at(1_795_540_488_000));
        let no_progress = foreign.clone().with_record(Some("t 1795540488551 -"));
        assert_eq!(no_progress.last_progress, None);
        assert!(no_progress.last_renewal.is_some());
        let spaced = Holder::exclusive("t with spaces".into(), None);
        let spaced = spaced.with_record(Some("t with spaces 1795540488551 -"));
        assert!(spaced.last_renewal.is_some());
        let took = foreign
            .clone()
            .with_record(Some("t 1795540488551 - 1795540480000"));
        assert_eq!(took.took, at(1_795_540_480_000));
        assert_eq!(took.last_renewal, at(1_795_540_488_551));
        assert_eq!(took.last_progress, None);
        let spaced_took = Holder::exclusive("t with spaces".into(), None)
            .with_record(Some("t with spaces 1795540488551 - 1795540480000"));
        assert_eq!(spaced_took.took, at(1_795_540_480_000));
        assert_eq!(
            no_progress.took, None,
            "a record of an earlier version names no take"
        );
        let stale = foreign.clone().with_record(Some("u 1795540488551 -"));
        assert_eq!(
            stale, foreign,
            "another token's record is not this holder's"
        );
    }

    #[test]
    fn scores_parse_as_whole_numbers() {
        assert_eq!(
            parse_number("1795540488551506"),
            Some(1_795_540_488_551_506)
        );
        assert_eq!(
            parse_number("1.795540488551506e+15"),
            Some(1_795_540_488_551_506)
        );
        assert_eq!(parse_number("-1"), None);
        assert_eq!(parse_number("nan"), None);
    }
}
