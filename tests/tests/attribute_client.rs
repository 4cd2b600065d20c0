//! `#[distributed_lock]` with a client of the application's own (`client = ...`) and the
//! client's default ttl and wait (`Config::default_ttl`, `Config::default_wait`), against a
//! real redis-server. Every client here has a key prefix, so a key found under it proves
//! the call went through that client and not the global one (which no test here sets up).
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lock_runtime::{Config, Lock, LockClient, LockError, distributed_lock};
use lock_tests::RedisServer;

fn client(server: &RedisServer, config: impl FnOnce(Config) -> Config) -> LockClient {
    LockClient::new(config(Config::single(server.url()).key_prefix("own:"))).unwrap()
}

/// The prefixed keys the server holds now, sorted.
fn own_keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("own:*")
        .query(&mut server.conn())
        .unwrap();
    keys.sort();
    keys
}

/// How many keys, auxiliary ones included, name the prefixed `key`.
fn keys_naming(server: &RedisServer, key: &str) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*own:{key}*"))
        .query(&mut server.conn())
        .unwrap();
    keys.len()
}

/// A web service's state, as an axum handler receives it.
pub struct AppState {
    pub locks: LockClient,
    pub server: RedisServer,
}

#[distributed_lock(key = "order:<id>", client = state.locks)]
async fn handler(state: &AppState, id: u64) -> Result<Vec<String>, LockError> {
    // `state` is still usable: the client expression borrowed it.
    Ok(own_keys(&state.server))
}

#[distributed_lock(key = "{app}:job:<id>", client = state.locks)]
async fn hash_tagged(state: Arc<AppState>, id: u64) -> Result<Vec<String>, LockError> {
    Ok(own_keys(&state.server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_and_a_method_lock_through_the_injected_client() {
    let server = RedisServer::start();
    let state = Arc::new(AppState {
        locks: client(&server, |config| config),
        server,
    });
    assert_eq!(handler(&state, 7).await.unwrap(), ["own:order:7"]);
    assert_eq!(own_keys(&state.server), Vec::<String>::new(), "released");
    // Braces that name no argument stay literal: a cluster hash tag.
    assert_eq!(
        hash_tagged(state.clone(), 8).await.unwrap(),
        ["own:{app}:job:8"]
    );
    assert_eq!(state.service().work().await.unwrap(), ["own:svc:shop"]);
}

/// A method whose lock goes through a client field of `self`.
pub struct Service<'a> {
    name: &'static str,
    locks: &'a LockClient,
    state: &'a AppState,
}

impl AppState {
    fn service(&self) -> Service<'_> {
        Service {
            name: "shop",
            locks: &self.locks,
            state: self,
        }
    }
}

impl Service<'_> {
    #[distributed_lock(key = "svc:<self.name>", client = self.locks)]
    async fn work(&self) -> Result<Vec<String>, LockError> {
        Ok(own_keys(&self.state.server))
    }
}

static LOCKS: OnceLock<LockClient> = OnceLock::new();

#[distributed_lock(key = "late:<id>", client = LOCKS.get())]
async fn late(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_is_not_set_fails_the_call_with_config() {
    let err = late(1).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("late:1"), "{message}");
    assert!(message.contains("not set"), "{message}");
    let server = RedisServer::start();
    LOCKS.set(client(&server, |config| config)).unwrap();
    assert_eq!(late(2).await.unwrap(), 2);
}

#[distributed_lock(key = ["acct:<from>", "acct:<to>"], client = locks)]
async fn transfer(
    locks: &LockClient,
    server: &RedisServer,
    from: u64,
    to: u64,
) -> Result<Vec<String>, LockError> {
    Ok(own_keys(server))
}

#[distributed_lock(key = "export:<tenant>", permits = 2, client = locks)]
async fn export(
    locks: Arc<LockClient>,
    server: &RedisServer,
    tenant: &str,
) -> Result<usize, LockError> {
    Ok(keys_naming(server, &format!("export:{tenant}")))
}

#[distributed_lock(key = "doc:<id>", mode = "read", client = locks)]
async fn read_doc(
    locks: &Arc<LockClient>,
    server: &RedisServer,
    id: u64,
) -> Result<usize, LockError> {
    Ok(keys_naming(server, &format!("doc:{id}")))
}

#[distributed_lock(key = "doc:<id>", mode = "write", client = Some(locks))]
async fn write_doc(
    locks: &LockClient,
    server: &RedisServer,
    id: u64,
) -> Result<Vec<String>, LockError> {
    Ok(own_keys(server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_goes_through_the_named_client() {
    let server = RedisServer::start();
    let locks = client(&server, |config| config);
    assert_eq!(
        transfer(&locks, &server, 2, 1).await.unwrap(),
        ["own:acct:1", "own:acct:2"]
    );
    let shared = Arc::new(locks.clone());
    assert!(export(shared.clone(), &server, "t1").await.unwrap() > 0);
    assert!(read_doc(&shared, &server, 3).await.unwrap() > 0);
    assert_eq!(write_doc(&locks, &server, 3).await.unwrap(), ["own:doc:3"]);
    let released = lock_tests::until(Duration::from_secs(5), Duration::from_millis(20), || {
        own_keys(&server).is_empty()
    });
    assert!(released.await.is_some(), "{:?}", own_keys(&server));
}

#[distributed_lock(key = "ttl:<tag>", client = locks)]
async fn default_lease(
    locks: &LockClient,
    server: &RedisServer,
    tag: &str,
) -> Result<i64, LockError> {
    Ok(server.pttl(&format!("own:ttl:{tag}")))
}

#[distributed_lock(key = "ttl:<tag>", ttl = "5s", client = locks)]
async fn written_lease(
    locks: &LockClient,
    server: &RedisServer,
    tag: &str,
) -> Result<i64, LockError> {
    Ok(server.pttl(&format!("own:ttl:{tag}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_default_ttl_applies_where_none_is_written() {
    let server = RedisServer::start();
    let locks = client(&server, |config| config.default_ttl(Duration::from_secs(2)));
    let pttl = default_lease(&locks, &server, "a").await.unwrap();
    assert!(
        (1..=2_000).contains(&pttl),
        "PTTL {pttl} under a 2 s default ttl"
    );
    let pttl = written_lease(&locks, &server, "b").await.unwrap();
    assert!(
        pttl > 2_000 && pttl <= 5_000,
        "PTTL {pttl} under ttl = \"5s\""
    );
    // The programmatic API: the same defaults, and an explicit value wins.
    let guard = locks.lock("ttl:c").acquire().await.unwrap();
    let pttl = server.pttl("own:ttl:c");
    assert!(
        (1..=2_000).contains(&pttl),
        "PTTL {pttl} of Lock without ttl"
    );
    guard.release().await.unwrap();
    let guard = locks
        .lock("ttl:d")
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let pttl = server.pttl("own:ttl:d");
    assert!(pttl > 2_000, "PTTL {pttl} of Lock::ttl(5s)");
    guard.release().await.unwrap();
}

#[distributed_lock(key = "wait:<tag>", client = locks)]
async fn default_wait(locks: &LockClient, tag: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "wait:<tag>", wait = "200ms", client = locks)]
async fn written_wait(locks: &LockClient, tag: &str) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_default_wait_applies_where_none_is_written() {
    let server = RedisServer::start();
    let locks = client(&server, |config| config.default_wait(Duration::ZERO));
    let holder = client(&server, |config| config);
    let held = holder.lock("wait:a").acquire().await.unwrap();
    // The default wait of zero tries once: Busy.
    let err = default_wait(&locks, "a").await.unwrap_err();
    assert!(matches!(err, LockError::Busy { .. }), "{err:?}");
    // A written wait wins: the call waited, and ran out.
    let err = written_wait(&locks, "a").await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let err = locks
        .lock("wait:a")
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    held.release().await.unwrap();
}

#[distributed_lock(key = "hold:<tag>", wait = "0s", hold_at_least = "5s", client = locks)]
async fn held_five_seconds(locks: &LockClient, tag: &str) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_at_least_is_checked_against_the_ttl_in_force() {
    let server = RedisServer::start();
    let short = client(&server, |config| config.default_ttl(Duration::from_secs(2)));
    let err = held_five_seconds(&short, "a").await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("hold_at_least"), "{err}");
    // Under the runtime's 30 s default lease, 5 s is kept.
    let plain = client(&server, |config| config);
    held_five_seconds(&plain, "b").await.unwrap();
    assert!(server.pttl("own:hold:b") > 2_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_ttl_out_of_range_fails_each_call_with_config() {
    let server = RedisServer::start();
    let zero = client(&server, |config| config.default_ttl(Duration::ZERO));
    let err = default_lease(&zero, &server, "z").await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("ttl:z"), "{err}");
    let err = Lock::new("ttl:y")
        .client(&zero)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err:?}");
}

#[distributed_lock(key = "claim:<id>", wait = "0s", client = locks)]
async fn claim_once(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// What counts for reentrancy: a lock held by an enclosing guarded body of the same task
/// (an attribute's body, `Lock::run`), not a guard the task keeps from `acquire()`. With such
/// a guard held, a guarded call on the same key is another acquisition: `Busy` with
/// `wait = "0s"`; inside `run` on that key it is reentrant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_guard_is_not_reentrant_but_an_enclosing_body_is() {
    let server = RedisServer::start();
    let locks = client(&server, |config| config);
    let guard = locks.lock("claim:7").acquire().await.unwrap();
    let nested = claim_once(&locks, 7).await;
    assert!(matches!(nested, Err(LockError::Busy { .. })), "{nested:?}");
    guard.release().await.unwrap();

    let inside = locks
        .lock("claim:7")
        .run(async { claim_once(&locks, 7).await })
        .await;
    assert_eq!(inside.unwrap(), 7);
}

/// A handler's error: a lock failure converts into it, and it is a response.
#[derive(Debug)]
pub struct HandlerError(LockError);

impl From<LockError> for HandlerError {
    fn from(err: LockError) -> Self {
        HandlerError(err)
    }
}

impl axum::response::IntoResponse for HandlerError {
    fn into_response(self) -> axum::response::Response {
        (
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            self.0.to_string(),
        )
            .into_response()
    }
}

/// The attribute directly on an axum handler: the names an extractor pattern binds
/// (`state`, `user`) can be named in the key and as the client.
#[derive(Clone)]
pub struct HandlerState {
    locks: LockClient,
}

#[distributed_lock(key = "claim:<user>", wait = "0s", client = state.locks)]
async fn claim_handler(
    axum::extract::State(state): axum::extract::State<HandlerState>,
    axum::extract::Path(user): axum::extract::Path<u64>,
) -> Result<String, HandlerError> {
    Ok(format!("claimed {user}"))
}

/// The attribute on the handler itself compiles as an axum handler and locks the key its
/// extracted argument names, through the client its extracted state holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_works_directly_on_an_axum_handler() {
    let server = RedisServer::start();
    let state = HandlerState {
        locks: client(&server, |config| config),
    };
    let _router: axum::Router = axum::Router::new()
        .route("/claim/{user}", axum::routing::post(claim_handler))
        .with_state(state.clone());
    let held = state.locks.lock("claim:7").acquire().await.unwrap();
    let busy = claim_handler(axum::extract::State(state.clone()), axum::extract::Path(7)).await;
    assert!(
        matches!(busy, Err(HandlerError(LockError::Busy { .. }))),
        "{busy:?}"
    );
    held.release().await.unwrap();
    let claimed = claim_handler(axum::extract::State(state), axum::extract::Path(7)).await;
    assert_eq!(claimed.unwrap(), "claimed 7");
}
