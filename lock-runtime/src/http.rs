//! `LockError` as an HTTP response, for axum handlers (feature `axum`): `LockError`
//! implements `IntoResponse`.
//!
//! | error | status | why |
//! |---|---|---|
//! | `Busy` | 429 Too Many Requests | a concurrent request holds the resource (dedup: `wait = "0s"`) |
//! | `Timeout` | 503 Service Unavailable, `Retry-After: 1` | the resource stayed busy for the whole wait |
//! | `Backend`, `NoQuorum`, `NotReplicated` | 503 Service Unavailable, `Retry-After: 1` | Redis is down or failing (or its replicas are) |
//! | `Lost` | 503 Service Unavailable | the lease was lost mid-request; the work was cancelled |
//! | `Shutdown` | 503 Service Unavailable | the lock client was shut down (the service is stopping) |
//! | `InvalidKey` | 400 Bad Request | a request value rendered an empty or over-long key |
//! | `Config`, `InvalidUrl` | 500 Internal Server Error | the service is misconfigured |
//!
//! The body is a short plain-text message that does not reveal the key. To map differently,
//! wrap `LockError` in your own error type and implement `IntoResponse` for it, calling
//! `LockError::into_response` for the cases you keep:
//!
//! ```
//! use axum_core::response::{IntoResponse, Response};
//! use http::StatusCode;
//! use lock_runtime::LockError;
//!
//! enum ApiError { Lock(LockError), SoldOut }
//! impl From<LockError> for ApiError {
//!     fn from(err: LockError) -> Self { ApiError::Lock(err) }
//! }
//! impl IntoResponse for ApiError {
//!     fn into_response(self) -> Response {
//!         match self {
//!             // This service says 409 for a duplicate request instead of 429.
//!             ApiError::Lock(LockError::Busy { .. }) => StatusCode::CONFLICT.into_response(),
//!             ApiError::Lock(other) => other.into_response(),
//!             ApiError::SoldOut => (StatusCode::GONE, "sold out").into_response(),
//!         }
//!     }
//! }
//! ```

use axum_core::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

use crate::error::LockError;

impl LockError {
    /// The HTTP status this error maps to (see the module table).
    pub fn status_code(&self) -> StatusCode {
        match self {
            LockError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            LockError::Timeout { .. }
            | LockError::Backend { .. }
            | LockError::ReleaseGaveUp { .. }
            | LockError::NoQuorum { .. }
            | LockError::NotReplicated { .. }
            | LockError::NotDurable { .. }
            | LockError::Lost { .. }
            | LockError::Shutdown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            LockError::InvalidKey { .. } => StatusCode::BAD_REQUEST,
            LockError::Config { .. } | LockError::InvalidUrl { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    fn public_message(&self) -> &'static str {
        match self {
            LockError::Busy { .. } => "busy: the same request is already in progress; retry later",
            LockError::Timeout { .. } => "busy: the resource stayed locked; retry shortly",
            LockError::Backend { .. }
            | LockError::ReleaseGaveUp { .. }
            | LockError::NoQuorum { .. }
            | LockError::NotReplicated { .. }
            | LockError::NotDurable { .. } => "the lock service is unavailable; retry shortly",
            LockError::Lost { .. } => "the request lost its lock before it completed; retry",
            LockError::Shutdown { .. } => "the service is shutting down; retry on another replica",
            LockError::InvalidKey { .. } => "the request names an invalid resource",
            LockError::Config { .. } | LockError::InvalidUrl { .. } => {
                "the lock service is misconfigured"
            }
        }
    }
}

impl IntoResponse for LockError {
    fn into_response(self) -> Response {
        // As the module table says: every 503 but `Lost` and `Shutdown`.
        let retry_after = self.status_code() == StatusCode::SERVICE_UNAVAILABLE
            && !matches!(self, LockError::Lost { .. } | LockError::Shutdown { .. });
        let mut response = (self.status_code(), self.public_message()).into_response();
        if retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_429_and_timeout_is_503_with_retry_after() {
        let busy = LockError::Busy {
            key: "sign-in:7".into(),
        }
        .into_response();
        assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(busy.headers().get(header::RETRY_AFTER).is_none());
        let timeout = LockError::Timeout {
            key: "stock:1".into(),
            waited: std::time::Duration::from_secs(5),
        }
        .into_response();
        assert_eq!(timeout.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(timeout.headers()[header::RETRY_AFTER], "1");
        let invalid = LockError::InvalidKey {
            key: "gift:<user>".into(),
            reason: "empty".into(),
        };
        assert_eq!(invalid.into_response().status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn configuration_errors_are_500_without_retry_after() {
        let config = LockError::config("init called twice").into_response();
        assert_eq!(config.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(config.headers().get(header::RETRY_AFTER).is_none());
        let url = LockError::invalid_url(
            "redis//nope",
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad URL")),
        );
        assert_eq!(url.status_code(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
