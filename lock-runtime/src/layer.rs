//! A tower [`Layer`] that runs each request under a lock whose key a closure derives from
//! the request (feature `tower`): per-user dedup or per-resource serialization on whole
//! routes, without touching the handlers.
//!
//! ```no_run
//! use std::time::Duration;
//! use axum_core::extract::Request;
//! use lock_runtime::layer::LockLayer;
//!
//! /// The signed-in user, from a header your authentication layer sets.
//! fn user_id(req: &Request) -> Option<u64> {
//!     req.headers().get("x-user-id")?.to_str().ok()?.parse().ok()
//! }
//!
//! // One gift claim per user at a time; a concurrent duplicate is refused at once (429).
//! let layer = LockLayer::new(|req: &Request| Some(format!("sign-in:{}", user_id(req)?)))
//!     .ttl(Duration::from_secs(5))
//!     .wait(Duration::ZERO);
//! // axum: Router::new().route("/gift", post(claim)).layer(layer)
//! # let _ = layer;
//! ```
//!
//! Behaviour:
//! - The closure runs first, on the request as it arrives. `None` means "no lock for this
//!   request": it is passed on unlocked (say, a request without a signed-in user, which a
//!   later layer refuses anyway).
//! - The lock is acquired (waiting up to `wait`) before the inner service is called, and
//!   released when the inner service has produced its response. A streamed response body
//!   is sent after the release: lock what the handler does, not the transfer.
//! - A lock failure is answered by the layer with `LockError`'s response (see
//!   [`crate::http`]): `Busy` 429, `Timeout` and `Backend` 503 with `Retry-After`, `Lost` 503
//!   (the handler's future is dropped at its next await point, as with the attribute),
//!   `InvalidKey` 400. The inner service never sees the request then, except for a `Lost`
//!   that only the release found (another owner held the key by then, say after a
//!   failover): the handler ran to its end, and its response is replaced by the 503.
//! - Keys are used as given, as with [`Lock::new`]: build them from trusted values, or
//!   escape request data with [`crate::escape_into`].

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum_core::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use http::Request;
use tower_layer::Layer;
use tower_service::Service;

use crate::primitives::builder::{LockBuilder, LockSpec};
use crate::primitives::kind::PerRequest;
use crate::{error::LockError, primitives::lock::Lock};

/// A [`Layer`] that runs each request under the lock named by `key(&request)`.
///
/// Options default as for [`Lock`] (ttl 30 s, wait 10 s, watchdog on, cancel on loss) and
/// are set with [`LockBuilder`]'s setters; for an HTTP route, set `wait` to what the
/// route's latency budget allows.
pub type LockLayer<K> = LockBuilder<PerRequest<K>>;

impl<K> LockLayer<K> {
    /// A layer that locks the key `key` returns for each request (`None`: no lock).
    pub fn new(key: K) -> Self {
        LockBuilder {
            kind: PerRequest { key: Arc::new(key) },
            spec: LockSpec::default(),
        }
    }
}

impl<S, K> Layer<S> for LockLayer<K> {
    type Service = LockService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`LockLayer`] wraps around an inner service.
pub struct LockService<S, K> {
    inner: S,
    layer: LockLayer<K>,
}

impl<S: Clone, K> Clone for LockService<S, K> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, K> fmt::Debug for LockService<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockService")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

/// A lock failure, kept apart from the inner service's own errors.
struct Refused(LockError);

impl From<LockError> for Refused {
    fn from(err: LockError) -> Self {
        Refused(err)
    }
}

impl<S, K, B> Service<Request<B>> for LockService<S, K>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Response: IntoResponse + Send + 'static,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
    K: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let key = (self.layer.kind.key)(&request);
        // The service that was polled ready serves this request; its clone stays for the
        // next one (tower's usual swap).
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let Some(key) = key else {
            let call = inner.call(request);
            return Box::pin(async move { call.await.map(IntoResponse::into_response) });
        };
        let spec = &self.layer.spec;
        let mut lock = Lock::new(key).with_explicit_options(spec.options.clone(), spec.explicit);
        if let Some(client) = &spec.client {
            lock = lock.client(client);
        }
        Box::pin(async move {
            let outcome = lock
                .run(async move { Ok::<_, Refused>(inner.call(request).await) })
                .await;
            match outcome {
                Ok(Ok(response)) => Ok(response.into_response()),
                Ok(Err(err)) => Err(err),
                Err(Refused(err)) => {
                    tracing::debug!(error = %err, "request refused by its lock");
                    Ok(err.into_response())
                }
            }
        })
    }
}
