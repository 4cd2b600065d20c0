//! `LockError` as an HTTP response, for axum handlers (feature `axum`): `LockError`
//! implements `IntoResponse`.
//!
//! Which status each error answers with is the column "with `axum`" of the table on
//! [`LockError`]: 429 for `Busy`, 503 (most with `Retry-After: 1`) for what a retry may
//! cure, 400 for a bad key, 500 for a misconfiguration. A test holds that column to
//! [`LockError::status_code`].
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
    /// The HTTP status this error maps to (the column "with `axum`" of the table on
    /// [`LockError`]).
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
            | LockError::Deadlock { .. }
            | LockError::Shutdown { .. } => StatusCode::SERVICE_UNAVAILABLE,
            LockError::InvalidKey { .. } => StatusCode::BAD_REQUEST,
            LockError::Config { .. }
            | LockError::InvalidUrl { .. }
            | LockError::OrderInversion { .. } => StatusCode::INTERNAL_SERVER_ERROR,
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
            LockError::OrderInversion { .. } => "the request takes its locks in a wrong order",
            LockError::Deadlock { .. } => {
                "the request met another in a deadlock and gave way; retry"
            }
        }
    }
}

impl IntoResponse for LockError {
    fn into_response(self) -> Response {
        // As the table on `LockError` says: every 503 but `Lost` and `Shutdown`.
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
            holder: None,
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

    /// One error of each variant, by name.
    fn one_of_each() -> Vec<(&'static str, LockError)> {
        let redis_err = || {
            std::sync::Arc::new(redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))
        };
        let key = || "k".to_owned();
        let second = std::time::Duration::from_secs(1);
        vec![
            ("Busy", LockError::Busy { key: key() }),
            (
                "Timeout",
                LockError::Timeout {
                    key: key(),
                    waited: second,
                    holder: None,
                },
            ),
            (
                "Lost",
                LockError::Lost {
                    key: key(),
                    cause: crate::error::LostCause::TokenGone,
                },
            ),
            (
                "Backend",
                LockError::Backend {
                    key: key(),
                    source: redis_err(),
                },
            ),
            (
                "ReleaseGaveUp",
                LockError::ReleaseGaveUp {
                    key: key(),
                    source: redis_err(),
                },
            ),
            (
                "NoQuorum",
                LockError::NoQuorum {
                    key: key(),
                    answered: 1,
                    needed: 2,
                    nodes: 3,
                    failures: String::new(),
                },
            ),
            (
                "NotReplicated",
                LockError::NotReplicated {
                    key: key(),
                    confirmed: 0,
                    needed: 1,
                    timeout: second,
                },
            ),
            (
                "NotDurable",
                LockError::NotDurable {
                    key: key(),
                    local: false,
                    replicas: 0,
                    needed_local: true,
                    needed_replicas: 0,
                    timeout: second,
                },
            ),
            (
                "InvalidKey",
                LockError::InvalidKey {
                    key: key(),
                    reason: "empty".into(),
                },
            ),
            ("Config", LockError::config("twice")),
            (
                "OrderInversion",
                LockError::OrderInversion {
                    key: key(),
                    inversion: "b while holding a, after a while holding b".into(),
                },
            ),
            (
                "Deadlock",
                LockError::Deadlock {
                    key: key(),
                    cycle: "a held by x, waiting for b; b held by y, waiting for a".into(),
                },
            ),
            ("Shutdown", LockError::Shutdown { key: key() }),
            (
                "InvalidUrl",
                LockError::invalid_url(
                    "redis//nope",
                    redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "bad")),
                ),
            ),
        ]
    }

    /// The column "with `axum`" of the table on `LockError`, by variant.
    fn documented() -> std::collections::BTreeMap<String, String> {
        let source = include_str!("error.rs");
        let header = "| variant | when | what to do | with `axum` |";
        let lines: Vec<&str> = source
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("///"))
            .map(str::trim)
            .collect();
        let start = lines
            .iter()
            .position(|line| *line == header)
            .expect("the errors table");
        lines[start + 2..]
            .iter()
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
                let name = cells[0].trim().trim_start_matches("[`");
                let name = &name[..name.find('`').expect("a variant's name")];
                (name.to_owned(), cells[cells.len() - 1].trim().to_owned())
            })
            .collect()
    }

    /// The one source of the HTTP mapping is the table on `LockError`: every variant's
    /// status and `Retry-After` are what its row says.
    #[test]
    fn every_response_is_what_the_errors_table_says() {
        let documented = documented();
        let errors = one_of_each();
        assert_eq!(documented.len(), errors.len(), "{documented:?}");
        for (name, err) in errors {
            let row = documented
                .get(name)
                .unwrap_or_else(|| panic!("no row for {name}"));
            let response = err.into_response();
            let mut said = response.status().as_u16().to_string();
            if response.headers().contains_key(header::RETRY_AFTER) {
                said.push_str(", `Retry-After: 1`");
            }
            assert_eq!(
                &said, row,
                "{name}: the response and the table's row differ"
            );
        }
    }
}
