//! The Lua scripts, each kept once as a `.lua` file and run as a function of one library
//! (`FCALL`, see `library.rs`) or by `EVALSHA`, and the names of
//! the auxiliary keys and channel they use.

use std::sync::OnceLock;

use crate::error::LockError;

mod call;
mod calls;
mod catalog;
pub(crate) mod library;

pub(crate) use call::{Call, invoke, invoke_granting, invoke_noting_repeat};
#[cfg(feature = "redlock")]
pub(crate) use calls::raise_fence_call;
pub(crate) use calls::{
    ASK_FULL_RELEASE, KeptAlive, PermitTry, RenewedLease, Requeue, acquire_call, alive_call,
    announced_release_call, force_release_call, forget_wait_call, full_release_call, inspect_call,
    keepalive_call, queue_call, read_call, read_release_call, release_call, renew_call,
    renew_many_command, retake_call, semaphore_acquire_call, short_release_call, write_ready_call,
};
pub(crate) use catalog::{LEAVE, RELEASE, RENEW, RENEW_MANY};

/// `RENEW`'s fourth argument for a renewal or an extension: the key's expiry only grows
/// (see renew.lua), whichever of two in flight the server runs last.
pub(crate) const GROW_ONLY: &str = "1";

/// How long a queued waiter keeps its place unless its process keeps it: each try and each
/// keep-alive of the watchdog (every third of this) start a new one. A waiting process that
/// dies or stops loses its places within this long.
pub(crate) const QUEUE_LEASE: std::time::Duration = std::time::Duration::from_millis(1000);

/// How long a direct grant lasts before its grantee confirms it (extending the key to its
/// ttl): a grantee whose process died or stopped blocks the key no longer than this.
pub(crate) const GRANT_CONFIRM_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

/// What a released lock key holds while it is handed to the head of its queue (never a
/// token: tokens start with `lr-`). The scripts spell it out too.
pub(crate) const HANDOVER: &str = "~handover";

/// The names around a read-write lock key: its set of readers, and each share key's name
/// around its token.
pub(crate) struct ShareNames {
    pub(crate) readers: String,
    pub(crate) head: String,
    pub(crate) tail: String,
}

impl ShareNames {
    /// The names around the read-write lock key `names`.
    pub(crate) fn of(names: &KeyNames) -> Self {
        let (readers_head, readers_tail) = names.aux_parts("readers");
        let (head, tail) = names.aux_parts("share/");
        ShareNames {
            readers: readers_head + &readers_tail,
            head,
            tail,
        }
    }

    /// The names of the share key of the reader `token`.
    pub(crate) fn share(&self, token: &str) -> KeyNames {
        KeyNames::owned(&format!("{}{token}{}", self.head, self.tail))
    }
}

/// The names that travel with one lock key: its auxiliary keys and its release channel,
/// all hashing to the lock key's cluster slot.
///
/// Every auxiliary name starts with [`AUX_PREFIX`], which no lock key may start with, and
/// spells the whole lock key out, so two different lock keys never share a name: not `x`
/// and `{x}`, not `a` and `{a}:queue`, whatever prefix or braces they carry.
#[derive(Debug, Clone)]
pub(crate) struct KeyNames {
    /// The lock key, then its queue's name: what every acquire and release names, written
    /// on every acquire without `format!`, in one allocation.
    text: String,
    /// Where the lock key ends in `text`.
    lock_end: usize,
    /// Whether the lock key hashes by its hash tag (else whole).
    tagged: bool,
    /// The other auxiliary names in [`AUX_KINDS`] order (from the fence counter on), one
    /// after another, and where each ends: written the first time one is asked for (an
    /// uncontended lock without a fence never asks).
    rest: OnceLock<(String, [usize; AUX_KINDS.len() - 1])>,
}

/// The kinds of auxiliary names: the queue (written with the lock key), then those
/// written when first asked for: the fence counter, the queue's deadlines, the queued
/// waiters' ttls (so that a release can grant the head the lock directly), and the release
/// channel.
const AUX_KINDS: [&str; 5] = ["queue", "fence", "deadlines", "ttls", "released"];

/// What each auxiliary name of [`AUX_KINDS`] puts before the lock key: [`AUX_PREFIX`], the
/// kind, and `{` for a key without a hash tag (index 0), `/` for one with (index 1).
const AUX_HEADS: [[&str; AUX_KINDS.len()]; 2] = [
    [
        "~lock/queue{",
        "~lock/fence{",
        "~lock/deadlines{",
        "~lock/ttls{",
        "~lock/released{",
    ],
    [
        "~lock/queue/",
        "~lock/fence/",
        "~lock/deadlines/",
        "~lock/ttls/",
        "~lock/released/",
    ],
];

/// What every auxiliary key and channel name starts with; a lock key that starts with it
/// is refused, so no lock key can name another lock's queue, fence or channel.
pub(crate) const AUX_PREFIX: &str = "~lock/";

impl KeyNames {
    /// The names of the lock key `LOCK` = `prefix` + `key` (the caller checked its
    /// length), or why it cannot have auxiliary names in its slot.
    ///
    /// Each auxiliary name of kind `KIND` is `~lock/KIND/LOCK` for a key with a hash tag
    /// (the prefix has no braces, so the name's first tag is the key's), `~lock/KIND{LOCK}`
    /// for one without (the braces make the whole key the tag). The character after the
    /// kind, `/` or `{`, tells the two forms apart, so the name is distinct for every lock
    /// key.
    pub(crate) fn prefixed(prefix: &str, key: &str) -> Result<Self, LockError> {
        let lock_len = prefix.len() + key.len();
        // The lock key, then the queue's name: its head, the lock key again, a `}`.
        let mut text = String::with_capacity(2 * lock_len + AUX_HEADS[0][0].len() + 1);
        text.push_str(prefix);
        text.push_str(key);
        let tagged = hashes_by_tag(&text)?;
        Ok(Self::named(text, tagged))
    }

    /// The hash of what the holders of this lock wait for, by holder token, in its slot
    /// (`~lock/waits{LOCK}`): the deadlock detection's records (`deadlock/chain.rs`).
    pub(crate) fn waits(&self) -> String {
        let (kind, around) = self.aux_parts("waits");
        format!("{kind}{around}")
    }

    /// The hash of what this lock's holding waiters hold, in its slot
    /// (`~lock/waiters-hold{LOCK}`): a field per key a waiting task holds, by its client's
    /// id, written beside the deadlock detection's records (`deadlock/chain.rs`).
    pub(crate) fn waiters_hold(&self) -> String {
        let (kind, around) = self.aux_parts("waiters-hold");
        format!("{kind}{around}")
    }

    /// The names of a key this crate names itself in another lock key's slot (a reader's
    /// share of a read-write lock, [`KeyNames::aux_parts`]): it carries a hash tag, and is
    /// not refused for starting with [`AUX_PREFIX`].
    pub(crate) fn owned(name: &str) -> Self {
        Self::named(name.to_owned(), true)
    }

    /// The names of this semaphore key's permit slot `index`, where a quorum of
    /// independent masters holds each permit as a lock of its own
    /// (`~lock/permit/INDEX{KEY}`): its release is announced on this key's channel, where
    /// the semaphore's waiters listen.
    #[cfg(feature = "redlock")]
    pub(crate) fn slot(&self, index: u32) -> Self {
        let (kind, around) = self.aux_parts("permit/");
        let mut slot = Self::owned(&format!("{kind}{index}{around}"));
        let (mut rest, mut ends) = slot.write_rest();
        let channel = ends.len() - 1;
        rest.truncate(ends[channel - 1]);
        rest.push_str(self.channel());
        ends[channel] = rest.len();
        slot.rest = OnceLock::from((rest, ends));
        slot
    }

    /// The name of another kind of auxiliary key of this lock (a read-write lock's set of
    /// readers), in its slot and spelled as the names above are, split around where a
    /// token goes (`kind` ending in `/`: one key per token) or with nothing between.
    pub(crate) fn aux_parts(&self, kind: &str) -> (String, String) {
        let lock = self.lock();
        let (open, close) = around(self.tagged);
        (
            format!("{AUX_PREFIX}{kind}"),
            format!("{open}{lock}{close}"),
        )
    }

    /// The names of the lock key `text`, which has a hash tag or not (`tagged`): the
    /// queue's written now, the others when first asked for.
    fn named(mut text: String, tagged: bool) -> Self {
        let lock_end = text.len();
        text.push_str(AUX_HEADS[usize::from(tagged)][0]);
        text.extend_from_within(..lock_end);
        if !tagged {
            text.push('}');
        }
        KeyNames {
            text,
            lock_end,
            tagged,
            rest: OnceLock::new(),
        }
    }

    /// The auxiliary names after the queue's, one after another, and where each ends.
    fn write_rest(&self) -> (String, [usize; AUX_KINDS.len() - 1]) {
        let (lock, tagged) = (self.lock(), self.tagged);
        let mut ends = [0; AUX_KINDS.len() - 1];
        let heads = &AUX_HEADS[usize::from(tagged)][1..];
        let mut text =
            String::with_capacity(heads.iter().map(|head| head.len() + lock.len() + 1).sum());
        for (head, end) in heads.iter().zip(&mut ends) {
            text.push_str(head);
            text.push_str(lock);
            if !tagged {
                text.push('}');
            }
            *end = text.len();
        }
        (text, ends)
    }

    /// The `index`th of the names after the queue's (0: the fence counter).
    fn rest(&self, index: usize) -> &str {
        let (text, ends) = self.rest.get_or_init(|| self.write_rest());
        let start = index.checked_sub(1).map_or(0, |before| ends[before]);
        &text[start..ends[index]]
    }

    /// The lock key (the client's prefix included).
    pub(crate) fn lock(&self) -> &str {
        &self.text[..self.lock_end]
    }

    /// The fence counter.
    pub(crate) fn fence(&self) -> &str {
        self.rest(0)
    }

    /// The queue of waiting tokens (a sorted set by arrival).
    pub(crate) fn queue(&self) -> &str {
        &self.text[self.lock_end..]
    }

    /// The queued tokens' place deadlines.
    pub(crate) fn deadlines(&self) -> &str {
        self.rest(1)
    }

    /// Each queued waiter's ttl, so that a release can grant it the lock directly.
    pub(crate) fn ttls(&self) -> &str {
        self.rest(2)
    }

    /// The channel a release is announced on.
    pub(crate) fn channel(&self) -> &str {
        self.rest(3)
    }

    /// The lock's hold record: what its renewals record of its holder (the token, when it
    /// was renewed, when it last reported progress) for an operator's inspect.lua; `None`
    /// for a key this crate names itself (a reader's share, a Redlock permit slot), whose
    /// holder inspect.lua reads elsewhere.
    pub(crate) fn hold(&self) -> Option<String> {
        if self.lock().starts_with(AUX_PREFIX) {
            return None;
        }
        let (kind, around) = self.aux_parts("hold");
        Some(kind + &around)
    }

    /// The lock and its queue's keys, as release.lua, leave.lua and a semaphore take them.
    pub(crate) fn queue_keys(&self) -> [&str; 4] {
        [self.lock(), self.queue(), self.deadlines(), self.ttls()]
    }
}

/// What an auxiliary name puts around the lock key: `/LOCK` after the kind for a key with a
/// hash tag (`tagged`: its slot is its first `{…}` tag's), `{LOCK}` for one without (hashed
/// whole).
fn around(tagged: bool) -> (&'static str, &'static str) {
    if tagged { ("/", "") } else { ("{", "}") }
}

/// Whether `key` hashes by its hash tag (else whole), or why it cannot have auxiliary names
/// in its slot.
///
/// A key without a hash tag is hashed whole; wrapping it in braces keeps that slot unless
/// it contains a `}` (the tag would end there), so such a key is refused. So is a key that
/// starts with [`AUX_PREFIX`]: it could be another lock's auxiliary name.
fn hashes_by_tag(key: &str) -> Result<bool, LockError> {
    if key.starts_with(AUX_PREFIX) {
        return Err(LockError::InvalidKey {
            key: key.to_owned(),
            reason: format!(
                "keys starting with `{AUX_PREFIX}` are reserved for the queues, fence counters \
                 and channels of other locks; rename the key (or its prefix)"
            ),
        });
    }
    if has_hash_tag(key) {
        return Ok(true);
    }
    if key.as_bytes().contains(&b'}') {
        return Err(LockError::InvalidKey {
            key: key.to_owned(),
            reason: "a `}` without a `{…}` hash tag keeps the lock's queue and fence counter \
                     out of its cluster slot; remove the `}` or add a hash tag"
                .into(),
        });
    }
    Ok(false)
}

/// Whether Redis Cluster would hash only part of `key` (a non-empty `{…}` section).
fn has_hash_tag(key: &str) -> bool {
    // Byte by byte: a key is short, and `{` and `}` are ASCII.
    let bytes = key.as_bytes();
    let Some(open) = bytes.iter().position(|&byte| byte == b'{') else {
        return false;
    };
    let tag = &bytes[open + 1..];
    tag.first().is_some_and(|&first| first != b'}') && tag[1..].contains(&b'}')
}

impl crate::telemetry::LockKey for KeyNames {
    fn lock_key(&self) -> &str {
        self.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_auxiliary_head_is_the_prefix_the_kind_and_the_opening() {
        for (tagged, open) in [(false, "{"), (true, "/")] {
            for (kind, head) in AUX_KINDS.iter().zip(AUX_HEADS[usize::from(tagged)]) {
                assert_eq!(head, format!("{AUX_PREFIX}{kind}{open}"));
            }
        }
    }

    #[test]
    fn a_hash_tag_is_a_non_empty_section_in_the_first_braces() {
        for (key, tagged) in [
            ("a{b}c", true),
            ("{b}", true),
            ("a{}b}", false),
            ("a{}{b}", false),
            ("a{", false),
            ("a}{b", false),
            ("a{{b}", true),
            ("plain", false),
            ("{", false),
            ("{}", false),
        ] {
            assert_eq!(has_hash_tag(key), tagged, "{key}");
        }
    }

    /// Redis Cluster's slot of a key (CRC16/XMODEM of its hash tag, or of the whole key).
    fn slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let hashed = key
            .find('{')
            .and_then(|open| {
                let close = key[open + 1..].find('}')?;
                (close > 0).then(|| &bytes[open + 1..open + 1 + close])
            })
            .unwrap_or(bytes);
        let mut crc: u16 = 0;
        for &byte in hashed {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc % 16384
    }

    fn all(names: &KeyNames) -> [&str; 6] {
        [
            names.lock(),
            names.fence(),
            names.queue(),
            names.deadlines(),
            names.ttls(),
            names.channel(),
        ]
    }

    /// A semaphore's permit slots are keys of their own, distinct from each other, from
    /// the semaphore key and its names, and from any lock key a user can name; each
    /// announces its release on the semaphore's channel.
    #[cfg(feature = "redlock")]
    #[test]
    fn permit_slots_are_keys_of_their_own_announced_on_the_semaphores_channel() {
        for key in ODD_KEYS {
            let names = KeyNames::prefixed("", key).unwrap();
            let slots = [names.slot(0), names.slot(1), names.slot(10)];
            for (index, slot) in slots.iter().enumerate() {
                assert_eq!(slot.channel(), names.channel(), "{key}");
                assert!(
                    slot.lock().starts_with(AUX_PREFIX),
                    "{key}: {}",
                    slot.lock()
                );
                assert!(!all(&names).contains(&slot.lock()), "{key}");
                for other in &slots[index + 1..] {
                    assert!(
                        all(slot)[..5].iter().all(|name| !all(other).contains(name)),
                        "{key}: {} and {}",
                        slot.lock(),
                        other.lock()
                    );
                }
            }
        }
    }

    /// Keys a user can write that look like each other's or like auxiliary names.
    const ODD_KEYS: &[&str] = &[
        "x",
        "{x}",
        "{x}:queue",
        "{x}:fence",
        "{x}:released",
        "x:queue",
        "{{x}}",
        "{x}{y}",
        "a{b",
        "{",
        "{app}:k",
        "{app}:k:queue",
        "{app}:{k}",
        "lock/queue/x",
        "~lock",
        "~lockx",
        "{~lock/queue/x}",
        "stock:1",
        "{stock:1}",
        "{shop}:1",
    ];

    #[test]
    fn auxiliary_names_share_the_slot() {
        for key in ODD_KEYS {
            let names = KeyNames::prefixed("", key).unwrap();
            for name in all(&names) {
                assert_eq!(slot(name), slot(key), "{name} is not in the slot of {key}");
            }
        }
        assert_eq!(slot("{shop}:1"), slot("shop"));
        assert_eq!(
            KeyNames::prefixed("", "stock:1").unwrap().fence(),
            "~lock/fence{stock:1}"
        );
        assert_eq!(
            KeyNames::prefixed("", "{shop}:1").unwrap().queue(),
            "~lock/queue/{shop}:1"
        );
    }

    #[test]
    fn no_two_lock_keys_share_a_name() {
        let mut seen = std::collections::HashMap::new();
        for key in ODD_KEYS {
            let names = KeyNames::prefixed("", key).unwrap();
            for name in all(&names) {
                if let Some(other) = seen.insert(name.to_owned(), *key) {
                    panic!("`{name}` belongs to both `{other}` and `{key}`");
                }
            }
        }
    }

    #[test]
    fn keys_that_could_be_auxiliary_names_or_leave_the_slot_are_refused() {
        for key in [
            "~lock/queue{x}",
            "~lock/fence/{x}",
            "a}b",
            "a{}b}",
            "}",
            "{}",
            "{}x",
        ] {
            let err = KeyNames::prefixed("", key).unwrap_err();
            assert!(err.to_string().contains(key), "{err}");
        }
    }
}
