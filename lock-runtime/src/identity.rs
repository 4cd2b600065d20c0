//! Who holds a key: the identity every token of this crate carries.
//!
//! A token is the lock key's value (and a waiter's id in the key's queue), so whoever can
//! read the key can read who holds it, with no lookup and no extra command: another
//! process's [`inspect`](crate::inspect), `lockctl`, a waiter whose wait ran out, `MONITOR`.
//! It reads, field by field:
//!
//! ```text
//! lr-6f1d0c3e9a7b4c2d.11/1a2b3c4d5e6/ea60/4711@host-a/shop/shop::buy
//! │  │                │  │           │    │    │      │    └ the guarded function, or a builder's file:line
//! │  │                │  │           │    │    │      └ the service (Config::service_name)
//! │  │                │  │           │    │    └ the host
//! │  │                │  │           │    └ the process id
//! │  │                │  │           └ the lease asked for, in ms (hexadecimal)
//! │  │                │  └ when the process asked for the key (ms since the epoch by its clock, hexadecimal)
//! │  │                └ a counter of the client's tokens (hexadecimal)
//! │  └ a random id of the client (64 bits), so tokens are never reused across processes
//! └ what every token of this crate starts with
//! ```
//!
//! The per-client part is written once, when the client is built; a new token costs the
//! counter, the clock, and one allocation, as the random token before it did. Numbers are
//! hexadecimal, which takes a few instructions per digit where decimal takes a division.

use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::call_site::CallSite;
use crate::lease::{OUR_TOKEN, Token, millis};

/// The longest host, service and function names a token carries (longer ones are cut).
const MAX_PART: usize = 64;

/// Makes a client's tokens: its random id, process, host and service written once.
#[derive(Debug)]
pub(crate) struct TokenMaker {
    /// The client's random id.
    id: u64,
    /// `lr-<random id>.`
    head: String,
    /// `/<pid>@<host>/<service>/`
    process: String,
    /// `lr-<random id>/<pid>@<host>/<service>`: the name of the client's connections.
    connection_name: std::sync::Arc<str>,
    /// `<host> pid <pid> <service>`
    releaser: String,
    made: AtomicU64,
}

impl TokenMaker {
    /// The token maker of a client of `service` (none: the binary's name) in this process.
    pub(crate) fn new(service: Option<&str>) -> Self {
        let id = uuid::Uuid::new_v4().as_u64_pair().0;
        let service = clean(&service.map_or_else(binary_name, str::to_owned));
        let (pid, host) = (std::process::id(), clean(&host_name()));
        TokenMaker {
            id,
            head: format!("{OUR_TOKEN}{id:016x}."),
            process: format!("/{pid}@{host}/{service}/"),
            connection_name: format!("{OUR_TOKEN}{id:016x}/{pid}@{host}/{service}").into(),
            releaser: format!("{host} pid {pid} {service}"),
            made: AtomicU64::new(0),
        }
    }

    /// Who this client is, as a releaser names itself to the holder it tells: `host pid
    /// service`.
    pub(crate) fn releaser(&self) -> &str {
        &self.releaser
    }

    /// The name the client's connections give themselves (`CLIENT SETNAME`), as `CLIENT
    /// LIST` shows it: `lr-<client id>/<pid>@<host>/<service>`, the start of its tokens
    /// (no space: every part is cleaned as the token's are).
    pub(crate) fn connection_name(&self) -> std::sync::Arc<str> {
        self.connection_name.clone()
    }

    /// The client's id, as its tokens carry it (hexadecimal, after `lr-`).
    pub(crate) fn client_id(&self) -> &str {
        self.head
            .strip_prefix(OUR_TOKEN)
            .unwrap_or("")
            .trim_end_matches('.')
    }

    /// A fresh token for a lease of `ttl`, asked for at `site` (the guarded function, or
    /// a builder's call), never made before.
    pub(crate) fn token(&self, ttl: Duration, site: &CallSite) -> Token {
        let numbers = self.numbers();
        WRITING.with_borrow_mut(|writing| {
            let Writing { of, tail, text } = writing;
            // The head and the tail are written again only when the client, the lease or
            // the site changes: a task that takes the same lock again reuses them.
            let same_client = of.is_some_and(|(id, ..)| id == self.id);
            let same_tail = same_client
                && of.is_some_and(|(_, was_ttl, was_site)| was_ttl == ttl && was_site.same(site));
            if !same_tail {
                tail.clear();
                self.write_tail(tail, ttl, |tail| push_site(tail, site));
                *of = Some((self.id, ttl, *site));
            }
            if same_client {
                // The last token, this client's, begins with its head.
                text.truncate(self.head.len());
            } else {
                text.clear();
                text.push_str(&self.head);
            }
            text.push_str(numbers.as_str());
            text.push_str(tail);
            Token::from(text.as_str())
        })
    }

    /// A fresh token for a lease of `ttl` that names the function `previous` names: the
    /// process's next tenure of the same lock.
    pub(crate) fn successor(&self, ttl: Duration, previous: &str) -> Token {
        // The last field, read off as it is: `lr-<id>.<n>/<since>/<ttl>/<pid>@<host>/<service>/`.
        let function = previous.splitn(6, '/').nth(5).unwrap_or_default();
        let mut text = self.head.clone();
        text.push_str(self.numbers().as_str());
        self.write_tail(&mut text, ttl, |text| push_label(text, function));
        Token::from(text)
    }

    /// A new token's counter and clock: `<n>/<since>`.
    fn numbers(&self) -> Numbers {
        let made = self.made.fetch_add(1, Ordering::Relaxed);
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, millis);
        let mut numbers = Numbers::default();
        numbers.push_hex(made);
        numbers.push(b'/');
        numbers.push_hex(since);
        numbers
    }

    /// A token's fields after its clock: `/<ttl>/<pid>@<host>/<service>/`, then what
    /// `function` writes.
    fn write_tail(&self, text: &mut String, ttl: Duration, function: impl FnOnce(&mut String)) {
        text.push('/');
        let mut numbers = Numbers::default();
        numbers.push_hex(millis(ttl));
        text.push_str(numbers.as_str());
        text.push_str(&self.process);
        function(text);
    }
}

/// What a thread writes its tokens with, kept between tokens: a token then costs its one
/// allocation, and the part that names the process and function is written once for as
/// long as the thread's tokens share it.
struct Writing {
    /// The client's id, the lease and the site `tail` was written for.
    of: Option<(u64, Duration, CallSite)>,
    /// `/<ttl>/<pid>@<host>/<service>/<function>`.
    tail: String,
    /// The token being written; between tokens, the last one written.
    text: String,
}

thread_local! {
    static WRITING: std::cell::RefCell<Writing> = const {
        std::cell::RefCell::new(Writing {
            of: None,
            tail: String::new(),
            text: String::new(),
        })
    };
}

/// Hexadecimal numbers and `/`, written on the stack (two numbers and a `/` fit).
struct Numbers {
    bytes: [u8; 33],
    len: usize,
}

impl Default for Numbers {
    fn default() -> Self {
        Numbers {
            bytes: [0; 33],
            len: 0,
        }
    }
}

impl Numbers {
    /// Appends `byte` (ASCII), or nothing when it does not fit (never: two numbers and a
    /// separator fit).
    fn push(&mut self, byte: u8) {
        if let Some(room) = self.bytes.get_mut(self.len) {
            *room = byte;
            self.len += 1;
        }
    }

    /// Appends `n` in hexadecimal (lower case, no leading zeros): a few instructions per
    /// digit, where decimal takes a division each.
    fn push_hex(&mut self, mut n: u64) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digits = ((u64::BITS - (n | 1).leading_zeros()).div_ceil(4)) as usize;
        let end = self.len + digits;
        let Some(room) = self.bytes.get_mut(self.len..end) else {
            return;
        };
        for digit in room.iter_mut().rev() {
            *digit = HEX[(n & 0xf) as usize];
            n >>= 4;
        }
        self.len = end;
    }

    /// What was written (only ASCII is).
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// Appends the site's label: the guarded function's path, or a builder's `file:line`.
fn push_site(text: &mut String, site: &CallSite) {
    match site.function_path() {
        Some(function) => push_label(text, function),
        None => {
            let (file, line) = site.file_line();
            let name = file.rfind(['/', '\\']).map_or(file, |at| &file[at + 1..]);
            push_label(text, name);
            // Written once per site and lease (the tail is kept), so plain formatting.
            let _ = write!(text, ":{line}");
        }
    }
}

/// Appends at most [`MAX_PART`] bytes of the function's name (cut at a character's
/// boundary) as it is: the last field, which may hold any character but a control one (a
/// guarded function's path is letters, digits, `_` and `::`; a file name is what `file!()`
/// says), so its check stays off the acquire path. A control character becomes `_`.
fn push_label(text: &mut String, part: &str) {
    let mut end = part.len().min(MAX_PART);
    while !part.is_char_boundary(end) {
        end -= 1;
    }
    let head = &part[..end];
    if !head.bytes().any(|byte| byte.is_ascii_control()) {
        text.push_str(head);
        return;
    }
    text.extend(
        head.chars()
            .map(|c| if c.is_ascii_control() { '_' } else { c }),
    );
}

/// Whether a token may carry `c` as it is: what a host, a Rust path and a file name use,
/// and never the `/` that parts the fields, a space or a control character.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '<' | '>' | '+')
}

/// `part`, at most [`MAX_PART`] characters, each that is not [`plain`] as `_`.
fn clean(part: &str) -> String {
    let cleaned = part.chars().take(MAX_PART);
    cleaned.map(|c| if plain(c) { c } else { '_' }).collect()
}

/// The host's name (the kernel's, else `/etc/hostname`, else `HOSTNAME` or `COMPUTERNAME`),
/// or `unknown`.
fn host_name() -> String {
    let from_file = |path: &str| std::fs::read_to_string(path).ok();
    let from_env = |name: &str| std::env::var(name).ok();
    [
        from_file("/proc/sys/kernel/hostname"),
        from_file("/etc/hostname"),
        from_env("HOSTNAME"),
        from_env("COMPUTERNAME"),
    ]
    .into_iter()
    .flatten()
    .map(|name| name.trim().to_owned())
    .find(|name| !name.is_empty())
    .unwrap_or_else(|| "unknown".to_owned())
}

/// The running binary's name, or `unknown`.
fn binary_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| Some(path.file_stem()?.to_string_lossy().into_owned()))
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Who holds (or waits for) a key, read off its token: what [`Holder::identity`] and
/// [`Waiter::identity`] give, and what a [`LockError::Timeout`] names.
///
/// [`Holder::identity`]: crate::Holder::identity
/// [`Waiter::identity`]: crate::Waiter::identity
/// [`LockError::Timeout`]: crate::LockError::Timeout
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Identity {
    /// A process of this crate.
    Process(ProcessIdentity),
    /// A token of this crate made by a version that wrote no identity into it.
    Unnamed,
    /// Not a token of this crate: another client's lock, or a string that is no lock.
    Foreign,
}

/// A process of this crate that holds or waits for a key, as its token names it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessIdentity {
    /// The host the process runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its service ([`Config::service_name`](crate::Config::service_name), by default the
    /// binary's name).
    pub service: String,
    /// The guarded function that asked for the key (`shop::buy`), or the `file:line` of
    /// the builder's call.
    pub function: String,
    /// Since when: for a holder that waited in the key's queue, when it took the key (the
    /// server's clock, recorded beside the key at the take, [`Holder::took`]); otherwise
    /// when the process asked for the key with this token, by its own clock: for a holder
    /// that took the key at its first ask, the start of the hold; over Redlock masters,
    /// where each round of a wait asks with a token of its own, the round that took the
    /// key; for a waiter, the start of its wait. A semaphore's permit that waited shows
    /// since its process asked (a permit's take is not recorded). A process that passes the
    /// lock between its own tasks keeps the token, and this, for the whole tenure.
    ///
    /// [`Holder::took`]: crate::Holder::took
    pub since: SystemTime,
    /// The lease it asked for (the watchdog renews to this).
    pub ttl: Duration,
}

impl Identity {
    /// Reads the identity off `token` (a permit's `permit:` prefix is skipped).
    pub fn of_token(token: &str) -> Identity {
        let token = token.strip_prefix("permit:").unwrap_or(token);
        let Some(rest) = token.strip_prefix(OUR_TOKEN) else {
            return Identity::Foreign;
        };
        parse(rest).map_or(Identity::Unnamed, Identity::Process)
    }

    /// The process, when this names one.
    pub fn process(&self) -> Option<&ProcessIdentity> {
        match self {
            Identity::Process(process) => Some(process),
            Identity::Unnamed | Identity::Foreign => None,
        }
    }
}

/// The id of the client that made `token` (hexadecimal, as its tokens carry it after
/// `lr-`; what [`TokenMaker::client_id`] gives), or `None` for a token not of this crate.
pub(crate) fn client_id_of(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(OUR_TOKEN)?;
    rest.split_once('.').map(|(id, _)| id)
}

/// The fields after `lr-`: `<id>.<n>/<since>/<ttl>/<pid>@<host>/<service>/<function>`.
fn parse(rest: &str) -> Option<ProcessIdentity> {
    let mut fields = rest.splitn(6, '/');
    let _id = fields.next()?;
    let since = u64::from_str_radix(fields.next()?, 16).ok()?;
    let ttl = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (pid, host) = fields.next()?.split_once('@')?;
    let service = fields.next()?;
    let function = fields.next()?;
    Some(ProcessIdentity {
        host: host.to_owned(),
        pid: pid.parse().ok()?,
        service: service.to_owned(),
        function: function.to_owned(),
        since: UNIX_EPOCH + Duration::from_millis(since),
        ttl: Duration::from_millis(ttl),
    })
}

impl fmt::Display for ProcessIdentity {
    /// `host-a pid 4711 shop `shop::buy``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pid {} {} `{}`",
            self.host, self.pid, self.service, self.function
        )
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Process(process) => process.fmt(f),
            Identity::Unnamed => f.write_str("a process of this crate (unnamed)"),
            Identity::Foreign => f.write_str("a foreign client"),
        }
    }
}

/// The holder a waiter saw when its wait ran out ([`LockError::Timeout`]).
///
/// `Display` says who and how long: `held for 41.020s by host-a pid 4711 shop `shop::buy``.
///
/// [`LockError::Timeout`]: crate::LockError::Timeout
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeenHolder {
    /// Its token (the key's value; a permit's or a reader's for a semaphore or a read lock).
    pub token: String,
    /// Who it is, as the token names it.
    pub identity: Identity,
    /// How long it had held the key (asked for it, see [`ProcessIdentity::since`]), by the
    /// server's clock; `None` for a holder whose token says nothing of it.
    pub held_for: Option<Duration>,
    /// How long ago it last renewed its lease (see
    /// [`Holder::since_renewal`](crate::Holder::since_renewal)).
    pub since_renewal: Option<Duration>,
}

impl SeenHolder {
    /// What to do about a wait for `key` of `waited` that ran out behind this holder: a
    /// holder that held the key through the whole wait may be stuck (more `wait` would not
    /// help); one that took it during the wait is contention.
    pub(crate) fn advice(
        &self,
        key: &str,
        waited: Duration,
        f: &mut fmt::Formatter<'_>,
    ) -> fmt::Result {
        match (&self.identity, self.held_for) {
            (Identity::Foreign, _) => write!(
                f,
                "it is not a lock of this crate: check which client writes `{key}`"
            ),
            (_, Some(held)) if held >= waited => write!(
                f,
                "it held the key through the whole wait: check whether it is stuck or slow \
                 (`lockctl inspect {key}`) before raising `wait`"
            ),
            _ => f.write_str(
                "the key changed hands meanwhile: raise `wait` or shorten the work under the lock",
            ),
        }
    }
}

impl fmt::Display for SeenHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.held_for {
            Some(held) => write!(f, "held for {} by {}", Seconds(held), self.identity)?,
            None => write!(f, "held by {}", self.identity)?,
        }
        if let Identity::Foreign = self.identity {
            write!(f, " (`{}`)", self.token)?;
        }
        match self.since_renewal {
            Some(renewed) => write!(f, ", renewed {} ago", Seconds(renewed)),
            None => Ok(()),
        }
    }
}

/// A duration as seconds with milliseconds: `1.203s`.
pub(crate) struct Seconds(pub(crate) Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0.as_secs(), self.0.subsec_millis())
    }
}

impl ProcessIdentity {
    /// How long ago [`since`](Self::since) was, by `now` (zero if `since` is ahead).
    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.since).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_process_and_function() {
        let maker = TokenMaker::new(Some("shop api"));
        let token = maker.token(
            Duration::from_secs(60),
            &CallSite::function("shop::buy", "src/lib.rs", 1),
        );
        assert!(token.starts_with(OUR_TOKEN));
        let Identity::Process(process) = Identity::of_token(&token) else {
            panic!("not ours: {token}");
        };
        assert_eq!(process.pid, std::process::id());
        assert_eq!(process.service, "shop_api");
        assert_eq!(process.function, "shop::buy");
        assert_eq!(process.ttl, Duration::from_secs(60));
        assert!(process.age(SystemTime::now()) < Duration::from_secs(60));
        assert!(!process.host.is_empty());
        let permit = format!("permit:{token}");
        assert_eq!(Identity::of_token(&permit), Identity::Process(process));
    }

    #[test]
    fn tokens_are_never_reused_and_odd_names_are_cleaned() {
        let maker = TokenMaker::new(None);
        let site = CallSite::at("src/bin/shop.rs", 42);
        let second = Duration::from_secs(1);
        let (a, b) = (maker.token(second, &site), maker.token(second, &site));
        assert_ne!(a, b);
        assert_ne!(TokenMaker::new(None).token(second, &site), a);
        let named = Identity::of_token(&a).process().cloned().expect("ours");
        assert_eq!(named.function, "shop.rs:42");
        let odd = maker.token(second, &CallSite::function("a/b c\nd", "x.rs", 1));
        assert!(!odd.contains('\n'));
        let process = Identity::of_token(&odd).process().cloned().expect("ours");
        assert_eq!(process.function, "a/b c_d");
    }

    #[test]
    fn a_thread_that_alternates_clients_leases_and_sites_names_each_rightly() {
        let (shop, mail) = (TokenMaker::new(Some("shop")), TokenMaker::new(Some("mail")));
        let buy = CallSite::function("shop::buy", "src/lib.rs", 1);
        let (line_7, line_8) = (CallSite::at("src/a.rs", 7), CallSite::at("src/a.rs", 8));
        let (second, minute) = (Duration::from_secs(1), Duration::from_secs(60));
        let cases = [
            (&shop, second, &buy, "shop", "shop::buy"),
            (&shop, second, &buy, "shop", "shop::buy"),
            (&shop, minute, &buy, "shop", "shop::buy"),
            (&mail, minute, &buy, "mail", "shop::buy"),
            (&mail, minute, &line_7, "mail", "a.rs:7"),
            (&mail, minute, &line_8, "mail", "a.rs:8"),
            (&shop, minute, &line_8, "shop", "a.rs:8"),
        ];
        let mut seen = std::collections::HashSet::new();
        for _round in 0..2 {
            for (maker, ttl, site, service, function) in cases {
                let token = maker.token(ttl, site);
                assert!(seen.insert(token.clone()), "made twice: {token}");
                let named = Identity::of_token(&token).process().cloned().expect("ours");
                assert_eq!(
                    (named.service.as_str(), named.ttl),
                    (service, ttl),
                    "{token}"
                );
                assert_eq!(named.function, function, "{token}");
                assert!(token.starts_with(&maker.head), "{token}");
            }
        }
    }

    #[test]
    fn a_name_cut_to_its_limit_keeps_whole_characters() {
        let long = format!("{}é", "a".repeat(MAX_PART - 1));
        let site = CallSite::function(Box::leak(long.into_boxed_str()), "x.rs", 1);
        let token = TokenMaker::new(None).token(Duration::from_secs(1), &site);
        let named = Identity::of_token(&token).process().cloned().expect("ours");
        assert_eq!(named.function, "a".repeat(MAX_PART - 1));
    }

    #[test]
    fn a_successor_names_the_same_function_with_its_own_lease() {
        let maker = TokenMaker::new(Some("shop"));
        let site = CallSite::function("a/b::c", "x.rs", 1);
        let first = maker.token(Duration::from_secs(1), &site);
        let next = maker.successor(Duration::from_secs(2), &first);
        assert_ne!(next, first);
        let named = Identity::of_token(&next).process().cloned().expect("ours");
        assert_eq!(named.function, "a/b::c");
        assert_eq!(named.ttl, Duration::from_secs(2));
        let foreign = maker.successor(Duration::from_secs(2), "not ours");
        assert_eq!(
            Identity::of_token(&foreign)
                .process()
                .expect("ours")
                .function,
            ""
        );
    }

    #[test]
    fn numbers_are_written_in_hexadecimal_without_leading_zeros() {
        for (n, hex) in [
            (0, "0"),
            (1, "1"),
            (0xf, "f"),
            (0x10, "10"),
            (0xea60, "ea60"),
        ] {
            let mut numbers = Numbers::default();
            numbers.push_hex(n);
            assert_eq!(numbers.as_str(), hex);
        }
        let mut numbers = Numbers::default();
        numbers.push_hex(u64::MAX);
        numbers.push(b'/');
        numbers.push_hex(u64::MAX);
        assert_eq!(numbers.as_str(), "ffffffffffffffff/ffffffffffffffff");
    }

    #[test]
    fn other_values_are_foreign_or_unnamed() {
        assert_eq!(Identity::of_token("{\"user\":7}"), Identity::Foreign);
        assert_eq!(
            Identity::of_token("lr-018e9b94d5914525b89f8fc6d8a28444"),
            Identity::Unnamed
        );
    }
}
