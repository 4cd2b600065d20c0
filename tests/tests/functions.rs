//! The scripts as one Redis Functions library, called by `FCALL`: loaded on the first
//! call that finds it missing (a fresh server, `FUNCTION FLUSH`, a restart without
//! persistence), and `EVALSHA` on a server that does not know `FCALL` or `FUNCTION`.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use lock_runtime::{LockClient, LockError};
use lock_tests::{RedisServer, command_stat_on};

/// The names of the libraries loaded on `server`.
fn libraries(server: &RedisServer) -> Vec<String> {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.iter()
        .filter_map(|library| match library {
            redis::Value::Array(fields) => fields.chunks(2).find_map(|pair| match pair {
                [
                    redis::Value::BulkString(name),
                    redis::Value::BulkString(value),
                ] if name == b"library_name" => Some(String::from_utf8_lossy(value).into_owned()),
                _ => None,
            }),
            _ => None,
        })
        .collect()
}

/// [`libraries`], or `None` on a server that does not know `FUNCTION`.
fn libraries_or_none(server: &RedisServer) -> Option<Vec<String>> {
    let known: redis::RedisResult<redis::Value> =
        redis::cmd("FUNCTION").arg("LIST").query(&mut server.conn());
    known.ok().map(|_| libraries(server))
}

/// How many errors of `code` (`ERR`, `NOSCRIPT`) the server answered, from `INFO errorstats`
/// read on `admin` (a connection of the harness's own: each new one meets errors of its own,
/// as Redis 7.0 does not know redis-rs's `CLIENT SETINFO`).
fn errors(admin: &mut redis::Connection, code: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(admin).unwrap();
    let prefix = format!("errorstat_{code}:count=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// A contended cycle on `key` by two clients: the first holds it while the second waits
/// (queued, an acquire that waits) and a third gives up (a leave); the release hands the
/// key to the waiter, which then releases it. Every script of the waiting path runs.
async fn contended_cycle(server: &RedisServer, clients: &[LockClient; 3], key: &str) {
    contended_cycle_on(&mut server.conn(), clients, key).await;
}

/// [`contended_cycle`], the harness's reads on `admin`.
async fn contended_cycle_on(admin: &mut redis::Connection, clients: &[LockClient; 3], key: &str) {
    let held = clients[0].lock(key).acquire().await.unwrap();
    let waiter = clients[1].clone();
    let waiting_key = key.to_owned();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock(&waiting_key)
            .wait(Duration::from_secs(10))
            .acquire()
            .await?;
        let token = guard.token().to_owned();
        guard.release().await?;
        Ok::<String, LockError>(token)
    });
    let queue = format!("~lock/queue{{{key}}}");
    let queued = lock_tests::until(Duration::from_secs(5), Duration::from_millis(2), || {
        redis::cmd("ZCARD").arg(&queue).query::<u64>(admin).unwrap() == 1
    })
    .await;
    assert!(queued.is_some(), "the waiter never queued");
    let gave_up = clients[2]
        .lock(key)
        .wait(Duration::from_millis(50))
        .acquire()
        .await;
    assert!(
        matches!(
            gave_up,
            Err(LockError::Timeout { .. } | LockError::Busy { .. })
        ),
        "{gave_up:?}"
    );
    held.release().await.unwrap();
    let token = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was never handed the key")
        .unwrap()
        .unwrap();
    assert!(!token.is_empty());
    let left: Option<String> = redis::cmd("GET").arg(key).query(admin).unwrap();
    assert_eq!(left, None, "the waiter's release left the key");
}

fn three_clients(server: &RedisServer) -> [LockClient; 3] {
    [
        server.lock_client(),
        server.lock_client(),
        server.lock_client(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_is_loaded_once_and_called_by_fcall() {
    let server = RedisServer::start();
    let clients = three_clients(&server);
    contended_cycle(&server, &clients, "fresh").await;
    let loaded = libraries(&server);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert!(loaded[0].starts_with("lock_runtime_"), "{loaded:?}");
    server.reset_stats();
    contended_cycle(&server, &clients, "again").await;
    assert!(server.calls("fcall") >= 5, "{}", server.calls("fcall"));
    assert_eq!(server.calls("evalsha"), 0, "a script went by EVALSHA");
    assert_eq!(server.failed_script_calls(), 0);
    assert_eq!(
        server.calls("function|load"),
        0,
        "the library was loaded again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_works_after_function_flush_and_the_library_is_back() {
    let server = RedisServer::start();
    let clients = three_clients(&server);
    contended_cycle(&server, &clients, "before").await;
    for round in 0..3 {
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query(&mut server.conn())
            .unwrap();
        assert!(libraries(&server).is_empty());
        contended_cycle(&server, &clients, &format!("flushed-{round}")).await;
        assert_eq!(libraries(&server).len(), 1, "the library is not back");
    }
    assert_eq!(server.calls("evalsha"), 0, "a script went by EVALSHA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_works_after_a_restart_without_persistence() {
    let mut server = RedisServer::start_with(&["--save", ""]);
    let clients = three_clients(&server);
    contended_cycle(&server, &clients, "before").await;
    tokio::task::block_in_place(|| server.restart());
    assert!(libraries(&server).is_empty());
    contended_cycle(&server, &clients, "after").await;
    assert_eq!(libraries(&server).len(), 1, "the library is not back");
    assert!(server.calls("fcall") >= 5);
}

/// After a first contended cycle, in which each client (made by `client`) learns that the
/// server will not run `FCALL`, three more go by `EVALSHA` alone: no `FCALL`, no error (each
/// client's connection remembers the answer), no library loaded.
fn later_cycles_go_by_evalsha(server: &RedisServer, client: impl Fn() -> LockClient) {
    let runtime = lock_tests::two_worker_runtime();
    runtime.block_on(async {
        let clients = [client(), client(), client()];
        let mut admin = server.conn();
        contended_cycle_on(&mut admin, &clients, "learn").await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut admin)
            .unwrap();
        for round in 0..3 {
            contended_cycle_on(&mut admin, &clients, &format!("later-{round}")).await;
        }
        let evalsha = command_stat_on(&mut admin, "evalsha", "calls");
        assert!(evalsha >= 15, "{evalsha}");
        assert_eq!(command_stat_on(&mut admin, "fcall", "calls"), 0);
        for code in ["ERR", "NOPERM"] {
            assert_eq!(errors(&mut admin, code), 0, "calls met {code} errors again");
        }
        assert!(libraries_or_none(server).is_none_or(|loaded| loaded.is_empty()));
    });
}

/// A server that does not know `FCALL` or `FUNCTION` (renamed away, as on Redis before 7).
fn falls_back_to_evalsha(renamed: &[&str]) {
    let mut args = Vec::new();
    for command in renamed {
        args.extend(["--rename-command", command, ""]);
    }
    let server = RedisServer::start_with(&args);
    later_cycles_go_by_evalsha(&server, || server.lock_client());
}

#[test]
fn a_server_without_fcall_or_function_gets_evalsha() {
    falls_back_to_evalsha(&["FCALL", "FUNCTION"]);
}

#[test]
fn a_server_without_function_load_gets_evalsha() {
    falls_back_to_evalsha(&["FUNCTION"]);
}

/// A user whose ACL grants the scripts by `EVALSHA` but not `FCALL` or `FUNCTION` (a
/// managed Redis, or an operator's least-privilege user written before Functions): the
/// calls go by `EVALSHA`, as on a server without Functions, instead of failing.
#[test]
fn a_user_not_allowed_fcall_or_function_gets_evalsha() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all"])
        .arg(&["-fcall", "-function"])
        .query(&mut server.conn())
        .unwrap();
    let url = format!("redis://locker:secret@127.0.0.1:{}", server.port());
    later_cycles_go_by_evalsha(&server, || {
        LockClient::new(lock_runtime::Config::single(url.clone())).unwrap()
    });
}

/// A server that lost the library (a restart, `FUNCTION FLUSH`, a promoted replica without
/// it) while many tasks call: one of them loads it, not every task whose call found it
/// missing. Each `FUNCTION LOAD` compiles the whole library while the server serves nobody
/// else, so dozens at once stall it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_that_find_the_library_missing_load_it_once() {
    let server = RedisServer::start();
    let client = server.lock_client();
    let warm = client.lock("warm").acquire().await.unwrap();
    warm.release().await.unwrap();
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut server.conn())
        .unwrap();
    server.reset_stats();
    let calls = (0..64).map(|n| {
        let client = client.clone();
        async move {
            let guard = client.lock(format!("herd-{n}")).acquire().await.unwrap();
            guard.release().await.unwrap();
        }
    });
    futures::future::join_all(calls).await;
    let loads = server.calls("function|load");
    assert_eq!(loads, 1, "{loads} FUNCTION LOADs for one lost library");
    assert_eq!(libraries(&server).len(), 1);
}
