//! Lease arithmetic: how long a lease taken or renewed at a given instant is ours, on the
//! local monotonic clock, and how much of it a local pass needs left.
//!
//! A lease is valid until `send_time + ttl − drift`: measured from when the command was
//! *sent* (not when the reply came), less a margin for the clocks of this process and
//! Redis running at different rates. A reply that arrives after that point acquires
//! nothing; the same rule holds for renewals.

use std::time::Duration;

use tokio::time::Instant;

/// The safety margin taken off every lease for clock drift between us and Redis
/// (1% of the ttl plus 2 ms, as in the Redlock algorithm).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The last instant at which a lease whose command was *sent* at `sent` is still ours.
pub(crate) fn validity(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
}

/// Whether a lease valid until `valid_until` still has enough left to be passed to another
/// task of this process without a round trip: a quarter of its ttl (the watchdog renews at
/// every third, so a lease it keeps has more), and never less than 5 ms.
pub(crate) fn passable(valid_until: Instant, ttl: Duration, now: Instant) -> bool {
    valid_until.saturating_duration_since(now) >= (ttl / 4).max(Duration::from_millis(5))
}

/// A lock token: shared, not copied, between the guard, the watchdog and the task's
/// [`crate::CurrentLock`].
pub(crate) type Token = std::sync::Arc<str>;

/// What every token this crate makes starts with: the scripts tell a holder of ours that
/// noted nothing (a plain `SET NX`) from a foreign client's by it (prelude.lua's
/// `OUR_TOKEN`), and wait for its release instead of polling as for a client that does not
/// queue.
pub(crate) const OUR_TOKEN: &str = "lr-";

/// A fresh random id in a token's form: [`OUR_TOKEN`] and a uuid v4 (122 random bits),
/// never reused. Lock tokens name their process instead ([`crate::identity`]); this one
/// names the client's liveness key.
pub(crate) fn new_token() -> Token {
    let uuid = uuid::Uuid::new_v4();
    let mut text = [0u8; OUR_TOKEN.len() + uuid::fmt::Simple::LENGTH];
    let (prefix, rest) = text.split_at_mut(OUR_TOKEN.len());
    prefix.copy_from_slice(OUR_TOKEN.as_bytes());
    uuid.simple().encode_lower(rest);
    // Both parts are ASCII; the fallback (never taken) allocates once more.
    std::str::from_utf8(&text).map_or_else(
        |_| Token::from(format!("{OUR_TOKEN}{}", uuid.simple())),
        Token::from,
    )
}

/// A duration in whole milliseconds for PX/PEXPIRE, at least 1.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A lock taken in Redis: when the command that took it was sent, and its fence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) sent: Instant,
    /// When its reply came: the hold begins then.
    pub(crate) answered: Instant,
    pub(crate) fence: Option<u64>,
    /// The process waited in the key's Redis queue for it.
    pub(crate) queued: bool,
}

impl Taken {
    /// A grant whose try was sent at `sent` and is answered now: the lock, its lease dated
    /// from the send (a lease dated from a late reply would outlast the key), or `None`
    /// when the reply came past the lease's validity point: it acquires nothing. Every
    /// acquire path reads its grant through this.
    pub(crate) fn if_in_time(
        sent: Instant,
        ttl: Duration,
        fence: Option<u64>,
        queued: bool,
    ) -> Option<Self> {
        let answered = Instant::now();
        let in_time = answered < validity(sent, ttl);
        in_time.then_some(Taken {
            sent,
            answered,
            fence,
            queued,
        })
    }
}

/// A timer's overshoot that counts as this process's own lateness (a runtime on time wakes
/// within a millisecond or two; a busy machine's scheduler within a few). Past it, the
/// process was starved (a busy machine, a stopped process, a blocked runtime), and what it
/// did not hear meanwhile says nothing of Redis: its replies may wait unread.
pub(crate) const LATE_SLACK: Duration = Duration::from_millis(20);

/// How late this process is for something due at `due`, when that is more than
/// [`LATE_SLACK`] (its own lateness, see there); `None` when on time.
pub(crate) fn lateness(due: Instant) -> Option<Duration> {
    Some(Instant::now().saturating_duration_since(due)).filter(|late| *late > LATE_SLACK)
}

/// A few random milliseconds added to a park, so waiters woken by time do not retry in
/// lockstep.
pub(crate) fn jitter() -> Duration {
    Duration::from_micros(fastrand::u64(0..=3_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_valid_from_its_send_time_less_the_drift() {
        let sent = Instant::now();
        let ttl = Duration::from_secs(10);
        assert_eq!(validity(sent, ttl), sent + Duration::from_millis(9_898));
        assert_eq!(validity(sent, Duration::from_millis(1)), sent);
    }

    #[test]
    fn tokens_start_with_the_prefix_the_scripts_know_as_ours() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert_eq!(a.len(), OUR_TOKEN.len() + 32);
        assert!(a.starts_with(OUR_TOKEN));
        assert!(a[OUR_TOKEN.len()..].bytes().all(|b| b.is_ascii_hexdigit()));
        let prelude = include_str!("lua/prelude.lua");
        assert!(prelude.contains(&format!("local OUR_TOKEN = '{OUR_TOKEN}'")));
    }

    #[test]
    fn a_lease_is_passed_only_with_a_quarter_of_its_ttl_left() {
        let now = Instant::now();
        let ttl = Duration::from_secs(30);
        assert!(passable(now + Duration::from_secs(20), ttl, now));
        assert!(!passable(now + Duration::from_secs(7), ttl, now));
        assert!(!passable(now, Duration::from_millis(4), now));
    }

    #[test]
    fn whole_milliseconds_at_least_one() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_millis(1500)), 1500);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
