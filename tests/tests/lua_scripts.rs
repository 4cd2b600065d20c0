//! The queue scripts on their own: each test sets up a key's queue state directly on a real
//! redis-server, runs one script as the runtime sends it (the shared prelude, then the
//! script), and checks what it left.
#![allow(clippy::unwrap_used, missing_docs)]

use lock_tests::RedisServer;

const PRELUDE: &str = include_str!("../../lock-runtime/src/lua/prelude.lua");
/// The semaphore's functions, which release.lua, leave.lua and renew.lua turn to on a
/// semaphore's key (scripts.rs prepends them to those three).
const PERMITS: &str = include_str!("../../lock-runtime/src/lua/semaphore_permits.lua");

fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{PERMITS}{body}"))
}

fn acquire() -> redis::Script {
    script(include_str!("../../lock-runtime/src/lua/acquire.lua"))
}

/// The release as scripts.rs builds it: the uncontended release first, then the prelude.
fn release() -> redis::Script {
    redis::Script::new(&format!(
        "{}{PRELUDE}{PERMITS}{}",
        include_str!("../../lock-runtime/src/lua/release_uncontended.lua"),
        include_str!("../../lock-runtime/src/lua/release.lua")
    ))
}

fn keepalive() -> redis::Script {
    script(include_str!("../../lock-runtime/src/lua/keepalive.lua"))
}

// The names of the key `k` (no hash tag), as `KeyNames` builds them.
const LOCK: &str = "k";
const FENCE: &str = "~lock/fence{k}";
const QUEUE: &str = "~lock/queue{k}";
const DEADLINES: &str = "~lock/deadlines{k}";
const TTLS: &str = "~lock/ttls{k}";
const CHANNEL: &str = "~lock/released{k}";

/// The server's clock in milliseconds.
fn server_ms(conn: &mut redis::Connection) -> i64 {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    seconds * 1000 + micros / 1000
}

/// Queues `waiter` at `arrival` (µs) with a deadline `deadline_in` ms from now and, unless
/// fenced, its ttl.
fn queue(
    conn: &mut redis::Connection,
    waiter: &str,
    arrival: i64,
    deadline_in: i64,
    ttl: Option<u64>,
) {
    let now = server_ms(conn);
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(QUEUE)
        .arg(arrival)
        .arg(waiter)
        .ignore()
        .cmd("ZADD")
        .arg(DEADLINES)
        .arg(now + deadline_in)
        .arg(waiter)
        .ignore()
        .query(conn)
        .unwrap();
    if let Some(ttl) = ttl {
        let _: () = redis::cmd("HSET")
            .arg(TTLS)
            .arg(waiter)
            .arg(ttl)
            .query(conn)
            .unwrap();
    }
}

/// The key held by `token` for 30 s, as a holder's acquire leaves it.
fn hold(conn: &mut redis::Connection, token: &str) {
    let _: () = redis::cmd("SET")
        .arg(LOCK)
        .arg(token)
        .arg("PX")
        .arg(30_000)
        .query(conn)
        .unwrap();
}

fn queued(conn: &mut redis::Connection) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

/// acquire.lua as a waiting caller sends it: `{acquired, fence or wait_ms}`.
fn try_acquire(conn: &mut redis::Connection, token: &str, ttl: u64) -> (i64, i64) {
    acquire()
        .key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg(token)
        .arg(ttl)
        .arg(0)
        .arg(1)
        .arg(1000)
        .arg(25)
        .invoke(conn)
        .unwrap()
}

fn retake() -> redis::Script {
    script(include_str!("../../lock-runtime/src/lua/retake.lua"))
}

/// release.lua as a holder with more local waiters sends it: with its process's next
/// entry `requeue` (ttl 30 s), and a foreign window of `window` ms (0: none).
fn release_requeue(conn: &mut redis::Connection, token: &str, requeue: &str, window: u64) -> i64 {
    release()
        .key(LOCK)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg(token)
        .arg(CHANNEL)
        .arg("PUBLISH")
        .arg(500)
        .arg(requeue)
        .arg(30_000)
        .arg(1000)
        .arg(window)
        .invoke(conn)
        .unwrap()
}

/// Dates the foreign side's first sighting in an open window one of our tenures (25 ms) and
/// more back: its minimum turn is over.
fn foreign_tenure_over(conn: &mut redis::Connection) {
    let since = hash_field(conn, "~gap-used").expect("no window in use");
    let _: () = redis::cmd("HSET")
        .arg(TTLS)
        .arg("~gap-used")
        .arg(since - 30)
        .query(conn)
        .unwrap();
}

fn hash_field(conn: &mut redis::Connection, field: &str) -> Option<i64> {
    redis::cmd("HGET").arg(TTLS).arg(field).query(conn).unwrap()
}

fn release_as(conn: &mut redis::Connection, token: &str, window: u64) -> i64 {
    release()
        .key(LOCK)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg(token)
        .arg(CHANNEL)
        .arg("PUBLISH")
        .arg(window)
        .invoke(conn)
        .unwrap()
}

#[test]
fn acquire_drops_waiters_whose_place_lapsed_and_takes_a_key_they_blocked() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // Two waiters ahead of us whose processes stopped keeping their places.
    queue(&mut conn, "dead-1", 1, -5, Some(30_000));
    queue(&mut conn, "dead-2", 2, -1, Some(30_000));
    let (acquired, _) = try_acquire(&mut conn, "me", 10_000);
    assert_eq!(acquired, 1, "the free key was left to lapsed waiters");
    assert_eq!(server.get(LOCK).as_deref(), Some("me"));
    assert!(
        queued(&mut conn).is_empty(),
        "lapsed places stayed: {:?}",
        queued(&mut conn)
    );
}

#[test]
fn acquire_behind_a_live_waiter_queues_with_one_queue_lease_and_waits_its_turn() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    queue(&mut conn, "ahead", 1, 800, Some(30_000));
    let (acquired, wait_ms) = try_acquire(&mut conn, "me", 10_000);
    assert_eq!(acquired, 0);
    assert!(
        (0..=800).contains(&wait_ms),
        "wait {wait_ms} ms, at most the head's deadline"
    );
    assert_eq!(queued(&mut conn), ["ahead", "me"]);
    let deadline: f64 = redis::cmd("ZSCORE")
        .arg(DEADLINES)
        .arg("me")
        .query(&mut conn)
        .unwrap();
    let lease = deadline as i64 - server_ms(&mut conn);
    assert!(
        (900..=1000).contains(&lease),
        "our place lasts one queue lease: {lease} ms"
    );
    assert_eq!(
        server.get(LOCK),
        None,
        "a queued waiter took the key out of turn"
    );
}

#[test]
fn keepalive_renews_only_places_still_queued() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    queue(&mut conn, "alive", 1, 100, Some(30_000));
    let kept: i64 = keepalive()
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg(1000)
        .arg("alive")
        .arg("gone")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(kept, 1);
    let deadline: f64 = redis::cmd("ZSCORE")
        .arg(DEADLINES)
        .arg("alive")
        .query(&mut conn)
        .unwrap();
    assert!(
        deadline as i64 - server_ms(&mut conn) > 900,
        "the place was not renewed"
    );
    let gone: Option<f64> = redis::cmd("ZSCORE")
        .arg(DEADLINES)
        .arg("gone")
        .query(&mut conn)
        .unwrap();
    assert_eq!(gone, None, "a place that was not queued was created");
    assert!(
        server.pttl(QUEUE) > 900,
        "the queue would vanish before its places"
    );
}

#[test]
fn release_grants_the_head_for_the_confirmation_window_and_names_key_and_token() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let mut subscriber = server.redis().get_connection().unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();
    hold(&mut conn, "holder");
    queue(&mut conn, "lapsed", 1, -1, Some(30_000));
    queue(&mut conn, "head", 2, 1000, Some(30_000));
    queue(&mut conn, "next", 3, 1000, Some(30_000));
    assert_eq!(release_as(&mut conn, "holder", 500), 1);
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some("head"),
        "the live head is granted"
    );
    let pttl = server.pttl(LOCK);
    assert!(
        (0..=500).contains(&pttl),
        "the grant outlasts its window: {pttl} ms"
    );
    assert_eq!(
        queued(&mut conn),
        ["next"],
        "the head and the lapsed waiter left the queue"
    );
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let message: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(message, "=head k");
    // The grantee confirms with its next try: the key is its for its whole ttl.
    drop(pubsub);
    let (acquired, _) = try_acquire(&mut conn, "head", 10_000);
    assert_eq!(acquired, 1);
    assert!(server.pttl(LOCK) > 9_000);
}

#[test]
fn a_grant_that_is_not_confirmed_lapses_and_the_next_waiter_gets_the_key() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "holder");
    queue(&mut conn, "dead", 1, 1000, Some(30_000));
    queue(&mut conn, "live", 2, 1000, Some(30_000));
    assert_eq!(release_as(&mut conn, "holder", 50), 1);
    assert_eq!(server.get(LOCK).as_deref(), Some("dead"));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let (acquired, _) = try_acquire(&mut conn, "live", 10_000);
    assert_eq!(
        acquired, 1,
        "the dead grantee's lapsed grant still blocks the key"
    );
    assert_eq!(server.get(LOCK).as_deref(), Some("live"));
}

#[test]
fn a_release_with_the_next_entry_keeps_the_key_when_no_other_process_waits() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "me");
    assert_eq!(release_requeue(&mut conn, "me", "me-next", 0), 2);
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some("me"),
        "the key was not kept"
    );
    assert!(queued(&mut conn).is_empty(), "the next entry was queued");
}

#[test]
fn a_release_with_the_next_entry_grants_the_head_and_queues_the_process_behind_it() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "me");
    queue(&mut conn, "other", 1, 1000, Some(30_000));
    assert_eq!(release_requeue(&mut conn, "me", "me-next", 0), 1);
    assert_eq!(server.get(LOCK).as_deref(), Some("other"));
    assert_eq!(queued(&mut conn), ["me-next"]);
}

#[test]
fn a_due_foreign_window_leaves_the_key_free_and_keeps_our_waiters_out() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "me");
    queue(&mut conn, "other", 1, 5000, Some(30_000));
    let now = server_ms(&mut conn);
    let _: () = redis::cmd("HSET")
        .arg(TTLS)
        .arg("~gap-due")
        .arg(now - 1)
        .arg("~gap-every")
        .arg(1000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(release_requeue(&mut conn, "me", "me-next", 5000), 3);
    assert_eq!(server.get(LOCK), None, "the window left the key held");
    assert_eq!(queued(&mut conn), ["other", "me-next"]);
    // Our head may not take the free key in the window; it asks again within 20 ms.
    let (acquired, wait) = try_acquire(&mut conn, "other", 30_000);
    assert_eq!((acquired, server.get(LOCK)), (0, None));
    assert!((1..=20).contains(&wait), "wait {wait}");
    // A foreign client takes it, and releases it: the window was used and ends.
    let taken: Option<String> = redis::cmd("SET")
        .arg(LOCK)
        .arg("py")
        .arg("NX")
        .arg("PX")
        .arg(5000)
        .query(&mut conn)
        .unwrap();
    assert!(taken.is_some());
    let (acquired, wait) = try_acquire(&mut conn, "other", 30_000);
    assert_eq!(acquired, 0);
    assert!(
        wait <= 20,
        "a foreign holder is polled, not waited out: {wait}"
    );
    let _: () = redis::cmd("DEL").arg(LOCK).query(&mut conn).unwrap();
    // Freed within the foreign side's first tenure (25 ms from its sighting): still theirs.
    let (acquired, wait) = try_acquire(&mut conn, "other", 30_000);
    assert_eq!(
        (acquired, wait),
        (0, 1),
        "taken back within the foreign tenure"
    );
    foreign_tenure_over(&mut conn);
    let (acquired, _) = try_acquire(&mut conn, "other", 30_000);
    assert_eq!(
        acquired, 1,
        "a used window kept our head out after the foreign release"
    );
    assert_eq!(hash_field(&mut conn, "~gap"), None);
    // Used: the next window after as long as the foreign side held the key (here dated 30
    // ms back), at least one tenure of ours (acquire's ARGV[6], 25 ms).
    let every = hash_field(&mut conn, "~gap-every").expect("no schedule");
    assert!((25..=100).contains(&every), "next window after {every} ms");
}

/// Issue 27 item 3: while a foreign holder holds the key in a window, the head of our queue
/// (its process's one asker) asks again within a millisecond, the others every 20 ms; and
/// when our head takes the key back, the next window comes after as long as the foreign side
/// held it, so each side holds the key about as long (before: after one tenure of ours,
/// 25 ms, however long the foreign side had kept it).
#[test]
fn a_used_window_gives_our_side_as_long_as_the_foreign_side_held_the_key() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    queue(&mut conn, "head", 1, 5000, Some(30_000));
    queue(&mut conn, "second", 2, 5000, Some(30_000));
    let now = server_ms(&mut conn);
    // A window open since 400 ms ago, whose foreign holder was first seen 300 ms ago.
    let _: () = redis::cmd("HSET")
        .arg(TTLS)
        .arg("~gap")
        .arg(now + 5_000)
        .arg("~gap-used")
        .arg(now - 300)
        .arg("~gap-every")
        .arg(25)
        .query(&mut conn)
        .unwrap();
    hold(&mut conn, "py");
    let (acquired, wait) = try_acquire(&mut conn, "head", 30_000);
    assert_eq!(
        (acquired, wait),
        (0, 1),
        "the head waits out a foreign holder"
    );
    let (acquired, wait) = try_acquire(&mut conn, "second", 30_000);
    assert_eq!((acquired, wait), (0, 20), "a waiter behind the head");
    let _: () = redis::cmd("DEL").arg(LOCK).query(&mut conn).unwrap();
    let (acquired, _) = try_acquire(&mut conn, "head", 30_000);
    assert_eq!(acquired, 1, "the head did not take the key back");
    let every = hash_field(&mut conn, "~gap-every").expect("no schedule");
    assert!(
        (300..=1_000).contains(&every),
        "the next window after {every} ms, not as long as the foreign side held the key"
    );
    let due = hash_field(&mut conn, "~gap-due").expect("no next window");
    assert!(
        due >= now + 250,
        "the next window due {} ms from now",
        due - now
    );
}

/// Issue 27 item 3, the cold start: a foreign client in a loop holds the key before any
/// window exists (nobody of ours has released it yet), taking it back with a new token each
/// time. Our head looks again 50 ms after it first sees a holder that does not note itself,
/// and when the key has changed hands between two such holders it opens a window in use and
/// asks every millisecond. Before, it asked once a second at most and almost never found
/// the key free (our side got 0 acquisitions in one 8 s run of the interop test).
#[test]
fn a_key_that_changes_hands_between_foreign_holders_opens_a_window() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let alive = "~lock/alive/me";
    hold(&mut conn, "py-1");
    let (acquired, wait, watch) = try_acquire_kept(&mut conn, "me", alive, true);
    assert_eq!((acquired, watch.as_str()), (0, ""));
    assert!(
        (1..=50).contains(&wait),
        "first look at an unnoted holder: {wait}"
    );
    assert_eq!(
        hash_field(&mut conn, "~gap"),
        None,
        "a window on one sighting"
    );
    // The same holder again: a long hold, waited out as before (its ttl, at most 1 s).
    let (_, wait, _) = try_acquire_kept(&mut conn, "me", alive, true);
    assert!(wait > 50, "a long foreign hold polled: {wait}");
    // It changed hands: a window in use, polled every millisecond by the head.
    hold(&mut conn, "py-2");
    let (acquired, wait, _) = try_acquire_kept(&mut conn, "me", alive, true);
    assert_eq!((acquired, wait), (0, 1));
    assert!(
        hash_field(&mut conn, "~gap-used").is_some(),
        "no window in use"
    );
    let _: () = redis::cmd("DEL").arg(LOCK).query(&mut conn).unwrap();
    foreign_tenure_over(&mut conn);
    let (acquired, _, _) = try_acquire_kept(&mut conn, "me", alive, true);
    assert_eq!(acquired, 1, "the head did not take the free key");
    assert_eq!(
        hash_field(&mut conn, "~gap"),
        None,
        "the window stayed open"
    );
    assert!(
        hash_field(&mut conn, "~gap-due").is_some(),
        "no schedule after it"
    );
}

/// Our own holders that note nothing (a task alone on its key takes it with a plain
/// `SET NX`) are told from a foreign client's by their tokens (`lr-`, lease.rs): the key
/// changing hands between two of them opens no window, and one seen in a window does not
/// make it a used one. Before, a head that saw two such holders in turn opened a window
/// in use and asked every millisecond, and each later window was marked used by our own
/// takes: four processes on one hot key, beside two busy loops, sent 28 script calls per
/// hand-over instead of 2.3 (3 runs in 12).
#[test]
fn a_key_that_changes_hands_between_our_unnoted_holders_opens_no_window() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let alive = "~lock/alive/me";
    hold(&mut conn, "lr-1");
    let (acquired, wait, watch) = try_acquire_kept(&mut conn, "me", alive, true);
    assert_eq!((acquired, watch.as_str()), (0, ""));
    assert!(wait > 50, "a holder of ours looked at again soon: {wait}");
    hold(&mut conn, "lr-2");
    let (acquired, wait, _) = try_acquire_kept(&mut conn, "me", alive, true);
    assert_eq!(acquired, 0);
    assert!(wait > 50, "a hand-over between ours polled: {wait}");
    assert_eq!(hash_field(&mut conn, "~gap-used"), None, "a window in use");
    // A window left open (due, unused): a take of ours in it does not use it.
    let now = server_ms(&mut conn);
    let _: () = redis::cmd("HSET")
        .arg(TTLS)
        .arg("~gap")
        .arg(now + 5_000)
        .query(&mut conn)
        .unwrap();
    hold(&mut conn, "lr-3");
    let (acquired, wait, _) = try_acquire_kept(&mut conn, "me", alive, true);
    assert_eq!(acquired, 0);
    assert!(wait > 50, "a holder of ours in a window polled: {wait}");
    assert_eq!(
        hash_field(&mut conn, "~gap-used"),
        None,
        "our own take used the window"
    );
}

#[test]
fn contention_starts_the_window_schedule_and_its_end_clears_it() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "me");
    queue(&mut conn, "other", 1, 5000, Some(30_000));
    let now = server_ms(&mut conn);
    assert_eq!(release_requeue(&mut conn, "me", "", 100), 1);
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some("other"),
        "granted, no window yet"
    );
    let due = hash_field(&mut conn, "~gap-due").expect("no schedule");
    assert!(
        (now + 900..=now + 1100).contains(&due),
        "first window due at {due}"
    );
    // The last holder releases with nobody waiting: the schedule ends, nothing is left.
    assert_eq!(release_requeue(&mut conn, "other", "", 100), 1);
    assert_eq!(server.dbsize(), 0, "left behind");
}

#[test]
fn retake_re_dates_only_the_owners_key_and_issues_a_greater_fence() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "me");
    let call = |conn: &mut redis::Connection, token: &str, lifetime: u64| -> (i64, i64) {
        retake()
            .key(LOCK)
            .key(FENCE)
            .arg(token)
            .arg(1500)
            .arg(lifetime)
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(call(&mut conn, "me", 0), (1, 0));
    assert!((1..=1500).contains(&server.pttl(LOCK)));
    let (_, first) = call(&mut conn, "me", 60_000);
    let (_, second) = call(&mut conn, "me", 60_000);
    assert!(second > first && first > 0, "{first} then {second}");
    assert_eq!(call(&mut conn, "other", 60_000), (0, 0));
    assert_eq!(server.get(LOCK).as_deref(), Some("me"));
}

/// renew.lua on a key that another owner's token holds: nothing renewed, the other owner's
/// expiry untouched (an `EXISTS` check alone would extend it and report success).
#[test]
fn renew_extends_only_the_owners_key() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let renew = renew();
    let call = |conn: &mut redis::Connection, token: &str| -> i64 {
        renew.key(LOCK).arg(token).arg(1500).invoke(conn).unwrap()
    };
    hold(&mut conn, "other");
    assert_eq!(call(&mut conn, "me"), 0, "renewed another owner's key");
    assert!(
        server.pttl(LOCK) > 29_000,
        "the other owner's expiry changed: {} ms",
        server.pttl(LOCK)
    );
    assert_eq!(server.get(LOCK).as_deref(), Some("other"));
    assert_eq!(call(&mut conn, "other"), 1);
    assert!((1..=1500).contains(&server.pttl(LOCK)));
    let _: () = redis::cmd("DEL").arg(LOCK).query(&mut conn).unwrap();
    assert_eq!(call(&mut conn, "other"), 0, "renewed a missing key");
}

/// One lease's renewal, which renew.lua and renew_many.lua are built on (scripts.rs
/// prepends it to both).
const RENEW_LEASE: &str = include_str!("../../lock-runtime/src/lua/renew_lease.lua");

fn renew() -> redis::Script {
    let body = include_str!("../../lock-runtime/src/lua/renew.lua");
    script(&format!("{RENEW_LEASE}{body}"))
}

fn renew_many() -> redis::Script {
    let body = include_str!("../../lock-runtime/src/lua/renew_many.lua");
    script(&format!("{RENEW_LEASE}{body}"))
}

/// renew_many.lua as the watchdog sends it: many leases in one call, each with renew.lua's
/// rules and reply. Here an owned key (renewed), another owner's key (0, its expiry
/// untouched), a missing key (0), a contended key with its queue keys (renewed and noted
/// for the waiter, 2) and a semaphore's permit (renewed), in order.
#[test]
fn renew_many_renews_each_lease_as_renew_does_in_one_call() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let set = |conn: &mut redis::Connection, key: &str, token: &str| {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("PX")
            .arg(30_000)
            .query(conn)
            .unwrap();
    };
    set(&mut conn, "mine", "t1");
    set(&mut conn, "theirs", "other");
    hold(&mut conn, "holder");
    let _ = try_acquire_kept(&mut conn, "waiter", "~lock/alive/w", true);
    let now = server_ms(&mut conn);
    let _: () = redis::cmd("ZADD")
        .arg("sem")
        .arg(0)
        .arg("~permits=2")
        .arg(now + 1_000)
        .arg("permit:p")
        .query(&mut conn)
        .unwrap();
    let replies: Vec<i64> = renew_many()
        .key("mine")
        .key("~lock/hold{mine}")
        .key("theirs")
        .key("~lock/hold{theirs}")
        .key("gone")
        .key(LOCK)
        .key(QUEUE)
        .key(TTLS)
        .key("~lock/hold{k}")
        .key("sem")
        .arg("1")
        .arg("~lock/alive/h")
        .arg("t1")
        .arg(60_000)
        .arg(2)
        .arg(250)
        .arg("t2")
        .arg(60_000)
        .arg(2)
        .arg("")
        .arg("t3")
        .arg(60_000)
        .arg(1)
        .arg("")
        .arg("holder")
        .arg(60_000)
        .arg(4)
        .arg("")
        .arg("permit:p")
        .arg(60_000)
        .arg(1)
        .arg("")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(replies, [1, 0, 0, 2, 1]);
    // A renewed lease that names its hold record records the renewal and the progress
    // (250 ms before it); a lease not renewed records nothing.
    let record: String = redis::cmd("GET")
        .arg("~lock/hold{mine}")
        .query(&mut conn)
        .unwrap();
    let fields: Vec<&str> = record.split(' ').collect();
    let renewed: i64 = fields[1].parse().unwrap();
    let progress: i64 = fields[2].parse().unwrap();
    assert_eq!((fields[0], renewed - progress), ("t1", 250), "{record}");
    assert!(
        server.pttl("~lock/hold{mine}") > 30_000,
        "kept as long as the lease"
    );
    let contended: String = redis::cmd("GET")
        .arg("~lock/hold{k}")
        .query(&mut conn)
        .unwrap();
    assert!(
        contended.starts_with("holder ") && contended.ends_with(" -"),
        "{contended}"
    );
    let theirs: Option<String> = redis::cmd("GET")
        .arg("~lock/hold{theirs}")
        .query(&mut conn)
        .unwrap();
    assert_eq!(theirs, None, "another owner's lease records nothing");
    assert!(server.pttl("mine") > 30_000, "the owned key renewed");
    assert!(
        server.pttl("theirs") <= 30_000,
        "another owner's key untouched"
    );
    assert!(server.pttl(LOCK) > 30_000, "the contended key renewed");
    let (acquired, _, watch) = try_acquire_kept(&mut conn, "waiter", "~lock/alive/w", true);
    assert_eq!((acquired, watch.as_str()), (0, "~lock/alive/h"), "noted");
    let ends: f64 = redis::cmd("ZSCORE")
        .arg("sem")
        .arg("permit:p")
        .query(&mut conn)
        .unwrap();
    assert!(ends as i64 > now + 30_000, "the permit renewed");
}

/// acquire.lua as a waiting caller of a process with the liveness key `alive` sends it
/// (an argument, not a declared key: in cluster mode it is in another slot of the
/// master): `{acquired, fence or wait_ms, liveness key to watch}`.
fn try_acquire_kept(
    conn: &mut redis::Connection,
    token: &str,
    alive: &str,
    renews: bool,
) -> (i64, i64, String) {
    acquire()
        .key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg(token)
        .arg(30_000)
        .arg(0)
        .arg(1)
        .arg(1000)
        .arg(25)
        .arg(CHANNEL)
        .arg("PUBLISH")
        .arg(u8::from(renews))
        .arg(alive)
        .invoke(conn)
        .unwrap()
}

/// A kept entry (it names its process's liveness key) lives while that key does, however
/// old its join: a release grants it while the key exists, and drops it for the next
/// waiter once the key is gone. Entries of the other kind (deadlines) are judged as before.
#[test]
fn a_kept_entry_lives_while_its_process_key_does() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "holder");
    let (acquired, _, watch) = try_acquire_kept(&mut conn, "kept", "~lock/alive/p1", true);
    assert_eq!(acquired, 0);
    assert_eq!(watch, "", "the holder renews nothing yet: nothing to watch");
    queue(
        &mut conn,
        "old-kind",
        9_999_999_999_999_999,
        60_000,
        Some(30_000),
    );
    assert_eq!(queued(&mut conn), ["kept", "old-kind"]);
    assert!(
        server.pttl("~lock/alive/p1") > 0,
        "joining creates the process's liveness key"
    );
    assert!(
        server.pttl(QUEUE) > 3_000_000,
        "queue keys live as long as a kept entry"
    );
    // Its process's key gone (the process died or stopped): the release skips it.
    let _: () = redis::cmd("DEL")
        .arg("~lock/alive/p1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(release_as(&mut conn, "holder", 500), 1);
    assert_eq!(server.get(LOCK).as_deref(), Some("old-kind"));
    assert!(queued(&mut conn).is_empty());
    let fields: Vec<String> = redis::cmd("HKEYS").arg(TTLS).query(&mut conn).unwrap();
    assert!(fields.is_empty(), "left in the ttls hash: {fields:?}");
}

/// A holder whose watchdog renews it is noted for the kept waiters behind it: their try
/// names its process's liveness key to watch (no more asking again every second), but only
/// while that key exists and the holder still holds the lock key.
#[test]
fn a_renewing_holder_is_noted_for_the_waiters_behind_it() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "holder");
    let (_, _, watch) = try_acquire_kept(&mut conn, "waiter", "~lock/alive/w", true);
    assert_eq!(watch, "");
    let renewed: i64 = renew()
        .key(LOCK)
        .key(QUEUE)
        .key(TTLS)
        .arg("holder")
        .arg(30_000)
        .arg("~lock/alive/h")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(renewed, 2, "renewed and noted for the queued waiter");
    let (acquired, _, watch) = try_acquire_kept(&mut conn, "waiter", "~lock/alive/w", true);
    assert_eq!((acquired, watch.as_str()), (0, "~lock/alive/h"));
    // The holder's process gone: nothing to watch, the waiter asks again as before.
    let _: () = redis::cmd("DEL")
        .arg("~lock/alive/h")
        .query(&mut conn)
        .unwrap();
    let (_, _, watch) = try_acquire_kept(&mut conn, "waiter", "~lock/alive/w", true);
    assert_eq!(watch, "");
    // Another holder (a foreign one) on the key: the note is not its.
    let _: i64 = renew()
        .key(LOCK)
        .key(QUEUE)
        .key(TTLS)
        .arg("holder")
        .arg(30_000)
        .arg("~lock/alive/h")
        .invoke(&mut conn)
        .unwrap();
    hold(&mut conn, "foreign");
    let (_, _, watch) = try_acquire_kept(&mut conn, "waiter", "~lock/alive/w", true);
    assert_eq!(watch, "");
    // Without waiters, a renewal notes nothing.
    let _: () = redis::cmd("DEL").arg(QUEUE).query(&mut conn).unwrap();
    let renewed: i64 = renew()
        .key(LOCK)
        .key(QUEUE)
        .key(TTLS)
        .arg("foreign")
        .arg(30_000)
        .arg("~lock/alive/h")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(renewed, 1);
}

/// Cluster mode after a reshard (or with a stale slot map): a liveness key the scripts
/// cannot read, as another master serves it. A renewal that names one still renews (and
/// notes nothing); an entry that names one is kept, as if alive, and a release grants it
/// only for the confirmation window, after which the live waiter behind it takes the key;
/// a refresh that watches one reports it gone (its waiters ask again).
#[test]
fn a_liveness_key_another_master_serves_neither_fails_a_script_nor_drops_a_waiter() {
    let cluster = lock_tests::cluster::RedisCluster::start(3);
    let master = cluster.owner(cluster.slot(LOCK));
    let other = (master + 1) % cluster.nodes.len();
    let remote = cluster.key_on("~lock/alive/dead", other);
    let local = cluster.key_on("~lock/alive/live", master);
    let mut conn = cluster.nodes[master].conn();
    hold(&mut conn, "holder");
    // A holder's renewal names a key this master cannot read: renewed, not noted.
    let _: () = redis::cmd("ZADD")
        .arg(QUEUE)
        .arg(1)
        .arg("someone")
        .query(&mut conn)
        .unwrap();
    let renewed: redis::RedisResult<i64> = renew()
        .key(LOCK)
        .key(QUEUE)
        .key(TTLS)
        .arg("holder")
        .arg(30_000)
        .arg(&remote)
        .invoke(&mut conn);
    assert_eq!(
        renewed,
        Ok(1),
        "a renewal naming {remote} (another master's key)"
    );
    let _: () = redis::cmd("DEL").arg(QUEUE).query(&mut conn).unwrap();
    // A waiter whose process's key this master cannot read joins as a kept entry, and a
    // live one (its key on this master) behind it.
    let (acquired, _, _) = try_acquire_kept(&mut conn, "dead", &remote, true);
    assert_eq!(acquired, 0);
    let (acquired, _, _) = try_acquire_kept(&mut conn, "live", &local, true);
    assert_eq!(acquired, 0);
    let order: Vec<String> = redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(order, ["dead", "live"]);
    // The release: the unreadable entry is not dropped; it is granted for the
    // confirmation window only.
    let released: i64 = release()
        .key(LOCK)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg("holder")
        .arg(CHANNEL)
        .arg("PUBLISH")
        .arg(500)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(released, 1);
    let holder: Option<String> = redis::cmd("GET").arg(LOCK).query(&mut conn).unwrap();
    assert_eq!(holder.as_deref(), Some("dead"));
    let pttl: i64 = redis::cmd("PTTL").arg(LOCK).query(&mut conn).unwrap();
    assert!((0..=500).contains(&pttl), "the grant lasts {pttl} ms");
    // Its process never confirms: the grant lapses, and the live waiter takes the key.
    let lapsed = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(10));
        redis::cmd("EXISTS")
            .arg(LOCK)
            .query::<i64>(&mut conn)
            .unwrap()
            == 0
    });
    assert!(
        lapsed,
        "the grant to the unconfirmed waiter did not lapse within 3 s"
    );
    let (acquired, _, _) = try_acquire_kept(&mut conn, "live", &local, true);
    assert_eq!(acquired, 1);
    // A process's refresh that watches a key this master cannot read reports it gone.
    let alive = redis::Script::new(include_str!("../../lock-runtime/src/lua/alive.lua"));
    let (kept, gone): (i64, Vec<String>) = alive
        .key(&local)
        .arg(1000)
        .arg(&remote)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!((kept, gone), (1, vec![remote.clone()]));
}

/// A release that finds nobody queued ends the key's contention, and the schedule of its
/// foreign windows with it: the next contention starts a new one (its first window a while
/// after it begins), not at a window that fell due during the quiet time.
#[test]
fn an_uncontended_release_ends_the_foreign_window_schedule() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "me");
    let _: () = redis::cmd("HSET")
        .arg(TTLS)
        .arg("~gap-due")
        .arg(1)
        .arg("~gap-every")
        .arg(1000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(release_requeue(&mut conn, "me", "", 100), 1);
    let lock: Option<String> = redis::cmd("GET").arg(LOCK).query(&mut conn).unwrap();
    assert_eq!(lock, None, "the key was not released");
    assert_eq!(hash_field(&mut conn, "~gap-due"), None);
    assert_eq!(hash_field(&mut conn, "~gap-every"), None);
    // Another owner's release leaves the key and the schedule alone.
    hold(&mut conn, "other");
    let _: () = redis::cmd("HSET")
        .arg(TTLS)
        .arg("~gap-due")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(release_requeue(&mut conn, "me", "", 100), -1);
    assert_eq!(hash_field(&mut conn, "~gap-due"), Some(1));
}

/// The release's short form (the lock key, the queue, the token), which a holder that knew
/// of no waiter sends: it releases an uncontended key, refuses another owner's, and asks
/// for the full form (-2) in every other case, leaving everything as it was.
#[test]
fn the_short_release_releases_an_uncontended_key_and_asks_for_the_full_form_otherwise() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let short = |conn: &mut redis::Connection, token: &str| -> i64 {
        release()
            .key(LOCK)
            .key(QUEUE)
            .arg(token)
            .invoke(conn)
            .unwrap()
    };
    let lock = |conn: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(LOCK).query(conn).unwrap()
    };
    hold(&mut conn, "me");
    assert_eq!(short(&mut conn, "me"), 1);
    assert_eq!(
        lock(&mut conn),
        None,
        "the uncontended key was not released"
    );
    // Gone: the full form wakes the head, so it is asked for.
    assert_eq!(short(&mut conn, "me"), -2);
    // Another owner's key: refused, untouched.
    hold(&mut conn, "other");
    assert_eq!(short(&mut conn, "me"), -1);
    assert_eq!(lock(&mut conn).as_deref(), Some("other"));
    // Ours, with a waiter queued: the full form hands it over.
    hold(&mut conn, "me");
    queue(&mut conn, "waiter", 1, 30_000, Some(30_000));
    assert_eq!(short(&mut conn, "me"), -2);
    assert_eq!(lock(&mut conn).as_deref(), Some("me"));
    assert_eq!(queued(&mut conn), vec!["waiter".to_owned()]);
    // A semaphore permit's token goes to the full form, which knows permits.
    assert_eq!(short(&mut conn, "permit:x"), -2);
}

/// force_release.lua as the runtime sends it (no read-write lock's readers here).
fn force_release(conn: &mut redis::Connection) -> (Option<String>, i64, Option<String>, i64) {
    let (removed, pttl, woken, granted, _others, _verdict): (
        Option<String>,
        i64,
        Option<String>,
        i64,
        Vec<redis::Value>,
        i64,
    ) = script(include_str!("../../lock-runtime/src/lua/force_release.lua"))
        .key(LOCK)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .key("~lock/readers{k}")
        .arg(CHANNEL)
        .arg("PUBLISH")
        .arg(1000)
        .arg("~lock/read{k}:")
        .arg("")
        // Whoever holds it, whatever it holds (the test's tokens are not ours).
        .arg("")
        .arg(1)
        .invoke(conn)
        .unwrap();
    (removed, pttl, woken, granted)
}

/// An operator's forced release hands the key to a fenced head as a release does: for a
/// kept entry (its process's liveness key keeps its place, for up to an hour) the
/// hand-over lasts the short kept bound, not the entry's hour-long deadline, so a head
/// whose process died meanwhile blocks the key about a second, not an hour.
#[test]
fn a_forced_release_hands_a_kept_fenced_head_the_key_for_the_short_bound() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    hold(&mut conn, "holder");
    let fenced = acquire()
        .key(LOCK)
        .key(FENCE)
        .key(QUEUE)
        .key(DEADLINES)
        .key(TTLS)
        .arg("fenced")
        .arg(30_000)
        .arg(60_000)
        .arg(1)
        .arg(1000)
        .arg(25)
        .arg(CHANNEL)
        .arg("PUBLISH")
        .arg(1)
        .arg("~lock/alive/p1")
        .invoke::<(i64, i64, String)>(&mut conn)
        .unwrap();
    assert_eq!(fenced.0, 0, "queued behind the holder");
    assert_eq!(queued(&mut conn), ["fenced"]);
    let (removed, _, woken, granted) = force_release(&mut conn);
    assert_eq!(removed.as_deref(), Some("holder"));
    assert_eq!((woken.as_deref(), granted), (Some("fenced"), 0));
    assert_eq!(server.get(LOCK).as_deref(), Some("~handover"));
    let pttl = server.pttl(LOCK);
    assert!(
        (1..=1000).contains(&pttl),
        "the hand-over holds the key {pttl} ms for a kept head"
    );
}

/// forget_wait.lua removes a wait's deadlock record only while the field still holds it:
/// a later wait of the same task (the same token, another record) may have written the
/// field before the earlier wait's removal reached the server.
#[test]
fn forgetting_a_wait_leaves_a_later_wait_s_record_of_the_same_token() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let forget = redis::Script::new(include_str!("../../lock-runtime/src/lua/forget_wait.lua"));
    let waits = "~lock/waits{k}";
    let (earlier, later) = ("b\t1795000000000\tff", "c\t1795000001000\t1");
    let _: () = redis::cmd("HSET")
        .arg(waits)
        .arg("lr-x")
        .arg(later)
        .query(&mut conn)
        .unwrap();
    let removed: i64 = forget
        .key(waits)
        .arg("lr-x")
        .arg(earlier)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(removed, 0, "removed another wait's record");
    let kept: Option<String> = redis::cmd("HGET")
        .arg(waits)
        .arg("lr-x")
        .query(&mut conn)
        .unwrap();
    assert_eq!(kept.as_deref(), Some(later));
    let removed: i64 = forget
        .key(waits)
        .arg("lr-x")
        .arg(later)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(removed, 1, "its own record stays");
    let left: u64 = redis::cmd("EXISTS").arg(waits).query(&mut conn).unwrap();
    assert_eq!(left, 0, "the record was not removed");
}
