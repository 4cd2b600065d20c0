//! The web shop: an axum service whose handlers are critical sections guarded by
//! `#[distributed_lock]`, safe to run as several replicas on one Redis.
//!
//! | route | lock | what the lock prevents |
//! |---|---|---|
//! | `POST /items/{id}/buy` | `stock:<id>`, waits up to 5 s | overselling: the stock is read, then written back one lower |
//! | `POST /gift` (header `x-user-id`) | `sign-in:<user.id>`, `wait = "0s"` | granting one user's daily gift twice; a concurrent claim gets 429 |
//! | `GET /ids/next` | `next-id` | handing out the same id twice |
//!
//! Every read-modify-write below is deliberately non-atomic (GET, some work, SET): the lock
//! alone keeps it correct across tasks and processes. The shop's data lives in Redis under
//! `web-shop:<run>:…`, so that several runs (and the tests) never see each other's stock.
//!
//! The example binary (`examples/web_shop.rs`) and the end-to-end test
//! (`tests/tests/web_shop.rs`) both serve [`router`].

use std::future::Future;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};

/// The request header that names the signed-in user (a stand-in for real authentication).
pub const USER_HEADER: &str = "x-user-id";

/// How long "taking payment" takes inside the stock lock: long enough that, without the
/// lock, concurrent buyers would read the same stock.
const PAYMENT_TIME: Duration = Duration::from_millis(5);

/// How long "issuing the gift" takes inside the sign-in lock: long enough that concurrent
/// claims of one user overlap and are refused with 429.
const GIFT_ISSUE_TIME: Duration = Duration::from_millis(100);

/// The shop's state: a Redis connection for its data and the names that scope it.
///
/// Cheap to clone (the connection is multiplexed); every replica of the service that
/// shares a `run` shares the same stock, gifts and id counter.
#[derive(Clone)]
pub struct Shop {
    redis: ConnectionManager,
    run: String,
    instance: String,
}

impl std::fmt::Debug for Shop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shop")
            .field("run", &self.run)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl Shop {
    /// Connects to the Redis at `redis_url` for the shop's data (the locks use
    /// `lock_runtime`'s global client, configured separately).
    ///
    /// `run` scopes the data (replicas of one shop share it); `instance` names this
    /// replica in responses and logs.
    pub async fn connect(
        redis_url: &str,
        run: impl Into<String>,
        instance: impl Into<String>,
    ) -> Result<Shop, redis::RedisError> {
        let redis = ConnectionManager::new(redis::Client::open(redis_url)?).await?;
        Ok(Shop {
            redis,
            run: run.into(),
            instance: instance.into(),
        })
    }

    /// The run this shop's data belongs to.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The name of this replica.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Puts `quantity` of `item` on sale unless the item is stocked already (another
    /// replica of the same run may have done it): `SET NX`, safe to call from every replica.
    pub async fn stock_if_new(&self, item: u64, quantity: u32) -> Result<(), redis::RedisError> {
        let _: bool = self
            .redis
            .clone()
            .set_nx(self.data_key(&format!("stock:{item}")), quantity)
            .await?;
        Ok(())
    }

    /// The Redis key of one piece of this run's data.
    pub fn data_key(&self, name: &str) -> String {
        format!("web-shop:{}:{name}", self.run)
    }

    async fn stock(&self, item: u64) -> Result<Option<u32>, redis::RedisError> {
        self.redis
            .clone()
            .get(self.data_key(&format!("stock:{item}")))
            .await
    }

    async fn set_stock(&self, item: u64, quantity: u32) -> Result<(), redis::RedisError> {
        self.redis
            .clone()
            .set(self.data_key(&format!("stock:{item}")), quantity)
            .await
    }

    async fn gift_of(&self, user: u64) -> Result<Option<String>, redis::RedisError> {
        self.redis
            .clone()
            .get(self.data_key(&format!("gift:{user}")))
            .await
    }

    async fn record_gift(&self, user: u64, gift: &str) -> Result<(), redis::RedisError> {
        self.redis
            .clone()
            .set(self.data_key(&format!("gift:{user}")), gift)
            .await
    }

    async fn last_id(&self) -> Result<u64, redis::RedisError> {
        let last: Option<u64> = self.redis.clone().get(self.data_key("last-id")).await?;
        Ok(last.unwrap_or(0))
    }

    async fn set_last_id(&self, id: u64) -> Result<(), redis::RedisError> {
        self.redis.clone().set(self.data_key("last-id"), id).await
    }

    /// Stands in for the slow part of a request (a payment, a call to another service).
    async fn work(&self, how_long: Duration) {
        tokio::time::sleep(how_long).await;
    }
}

/// A successful purchase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The item bought.
    pub item: u64,
    /// How many are left after this purchase.
    pub remaining: u32,
    /// The replica that sold it.
    pub instance: String,
}

/// A granted gift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gift {
    /// The user it was granted to.
    pub user: u64,
    /// What was granted.
    pub coupon: String,
    /// The replica that granted it.
    pub instance: String,
}

/// A freshly issued id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextId {
    /// The id: unique across every replica of the run.
    pub id: u64,
}

/// The signed-in user, taken from the `x-user-id` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// The user's id.
    pub id: u64,
}

impl<S: Send + Sync> FromRequestParts<S> for User {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get(USER_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse().ok())
            .map(|id| User { id })
            .ok_or((
                StatusCode::UNAUTHORIZED,
                "sign in: send your numeric user id in the x-user-id header",
            ))
    }
}

// README:start
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lock_runtime::{LockError, distributed_lock};

/// Everything a shop request can fail with; lock failures are one case among them.
#[derive(Debug)]
pub enum ShopError {
    /// The lock refused or lost the request (busy, timed out, Redis down, ...).
    Lock(LockError),
    /// The item is sold out.
    SoldOut,
    /// No such item is on sale.
    UnknownItem,
    /// This user's gift was granted already.
    AlreadyClaimed,
    /// The shop's own data could not be read or written.
    Store(redis::RedisError),
}

impl From<LockError> for ShopError {
    fn from(err: LockError) -> Self {
        ShopError::Lock(err)
    }
}

impl IntoResponse for ShopError {
    fn into_response(self) -> Response {
        match self {
            ShopError::SoldOut => (StatusCode::GONE, "sold out").into_response(),
            ShopError::UnknownItem => (StatusCode::NOT_FOUND, "no such item").into_response(),
            ShopError::AlreadyClaimed => (StatusCode::CONFLICT, "already claimed").into_response(),
            ShopError::Store(err) => {
                tracing::error!(error = %err, "shop data unavailable");
                (StatusCode::SERVICE_UNAVAILABLE, "try again later").into_response()
            }
            // Override one lock case: a buyer who waited out the whole `wait` is told why.
            ShopError::Lock(LockError::Timeout { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, "1")],
                "this item is in high demand: retry in a second",
            )
                .into_response(),
            // Every other lock error keeps the runtime's mapping: Busy => 429, ...
            ShopError::Lock(err) => {
                tracing::info!(error = %err, status = %err.status_code(), "lock refused");
                err.into_response()
            }
        }
    }
}

/// Sells one `item`. At most one buyer per item runs this at a time, across all replicas;
/// the others queue for up to 5 s.
#[distributed_lock(key = "stock:<id>", ttl = "10s", wait = "5s")]
pub async fn buy(shop: &Shop, id: u64) -> Result<Order, ShopError> {
    let stock = shop.stock(id).await?.ok_or(ShopError::UnknownItem)?;
    if stock == 0 {
        return Err(ShopError::SoldOut);
    }
    shop.work(PAYMENT_TIME).await; // not atomic on purpose: only the lock keeps it right
    shop.set_stock(id, stock - 1).await?;
    let instance = shop.instance().to_owned();
    Ok(Order {
        item: id,
        remaining: stock - 1,
        instance,
    })
}

/// Grants `user` one gift per run. A concurrent claim of the same user does not wait:
/// it fails with `LockError::Busy` (429); a claim after the grant gets 409.
#[distributed_lock(key = "sign-in:<user.id>", ttl = "5s", wait = "0s")]
pub async fn claim_gift(shop: &Shop, user: &User) -> Result<Gift, ShopError> {
    if shop.gift_of(user.id).await?.is_some() {
        return Err(ShopError::AlreadyClaimed);
    }
    shop.work(GIFT_ISSUE_TIME).await;
    let coupon = format!("coupon-{}", user.id);
    shop.record_gift(user.id, &coupon).await?;
    let instance = shop.instance().to_owned();
    Ok(Gift {
        user: user.id,
        coupon,
        instance,
    })
}

/// Issues the next id: read, increment, write, under one lock shared by every replica.
#[distributed_lock(key = "next-id", ttl = "5s", wait = "5s")]
pub async fn next_id(shop: &Shop) -> Result<NextId, ShopError> {
    let id = shop.last_id().await? + 1;
    shop.set_last_id(id).await?;
    Ok(NextId { id })
}

/// The shop's routes, serving `shop`.
pub fn router(shop: Shop) -> Router {
    Router::new()
        .route("/items/{id}/buy", post(buy_handler))
        .route("/gift", post(gift_handler))
        .route("/ids/next", get(next_id_handler))
        .with_state(shop)
}

async fn buy_handler(
    State(shop): State<Shop>,
    Path(id): Path<u64>,
) -> Result<Json<Order>, ShopError> {
    Ok(Json(buy(&shop, id).await?))
}

async fn gift_handler(State(shop): State<Shop>, user: User) -> Result<Json<Gift>, ShopError> {
    Ok(Json(claim_gift(&shop, &user).await?))
}

async fn next_id_handler(State(shop): State<Shop>) -> Result<Json<NextId>, ShopError> {
    Ok(Json(next_id(&shop).await?))
}
// README:end

impl From<redis::RedisError> for ShopError {
    fn from(err: redis::RedisError) -> Self {
        ShopError::Store(err)
    }
}

/// Serves [`router`] for `shop` on `listener` until `shutdown` completes, then finishes
/// the requests in flight (their locks are released as their handlers return).
pub async fn serve(
    listener: tokio::net::TcpListener,
    shop: Shop,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(shop))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Listens for Ctrl-C and, on Unix, SIGTERM (what `kill` and container runtimes send), and
/// completes on the first of them.
///
/// The handlers are installed when this is called, not when the future is first polled:
/// call it inside the runtime before announcing that the service is up, so that a signal
/// sent right after that announcement is not lost (or fatal).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};

        fn listen(kind: SignalKind, name: &str) -> Option<Signal> {
            signal(kind)
                .inspect_err(|err| tracing::warn!(error = %err, "cannot listen for {name}"))
                .ok()
        }
        async fn received(signal: Option<&mut Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let mut interrupt = listen(SignalKind::interrupt(), "Ctrl-C");
        let mut terminate = listen(SignalKind::terminate(), "SIGTERM");
        async move {
            tokio::select! {
                () = received(interrupt.as_mut()) => tracing::info!("Ctrl-C: shutting down"),
                () = received(terminate.as_mut()) => tracing::info!("SIGTERM: shutting down"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::info!("Ctrl-C: shutting down"),
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for Ctrl-C");
                std::future::pending().await
            }
        }
    }
}
