//! A primary found through Redis Sentinel, and followed across failovers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::primary_settings::{PrimarySettings, PrimaryTls};
use crate::connection::tls_client::with_certificates;
use crate::error::LockError;

/// How to find a primary through Redis Sentinel.
pub(crate) struct Sentinel {
    /// The name the sentinels monitor the primary under.
    pub(crate) master: String,
    /// One client per sentinel, in the configured order.
    sentinels: Vec<redis::Client>,
    /// The primary's connection settings (TLS, credentials, database), for the address
    /// the sentinels name: the first sentinel's, or the primary's own.
    template: PrimaryTemplate,
    /// How long one sentinel may take to connect and answer.
    timeout: Duration,
    /// When the last lookup finished: requests that failed before it use its answer.
    last_lookup: tokio::sync::Mutex<Option<(Instant, redis::Client)>>,
}

impl Sentinel {
    pub(crate) fn new(
        master: String,
        sentinels: Vec<redis::Client>,
        template: PrimaryTemplate,
        timeout: Duration,
    ) -> Self {
        Sentinel {
            master,
            sentinels,
            template,
            timeout,
            last_lookup: tokio::sync::Mutex::new(None),
        }
    }

    /// The primary now: the answer of a lookup that finished after `sent` (one lookup
    /// at a time; requests that failed meanwhile wait for it), or a new lookup.
    pub(super) async fn primary_after(&self, sent: Instant) -> Option<redis::Client> {
        let mut last = self.last_lookup.lock().await;
        if let Some((at, primary)) = last.as_ref()
            && *at >= sent
        {
            return Some(primary.clone());
        }
        match self.lookup().await {
            Ok(primary) => {
                *last = Some((Instant::now(), primary.clone()));
                Some(primary)
            }
            Err(err) => {
                tracing::warn!(master = %self.master, error = %err, "no sentinel named the primary");
                None
            }
        }
    }

    /// Asks each sentinel in turn for the primary's address; the first answer wins.
    pub(crate) async fn lookup(&self) -> redis::RedisResult<redis::Client> {
        let mut failures = Vec::new();
        for sentinel in &self.sentinels {
            let asked = async {
                let mut connection = sentinel.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut connection)
                    .await
            };
            let address = sentinel.get_connection_info().addr().to_string();
            match tokio::time::timeout(self.timeout, asked).await {
                Ok(Ok(Some((host, port)))) => return self.template.client(host, port),
                Ok(Ok(None)) => {
                    failures.push(format!("{address}: does not know `{}`", self.master))
                }
                Ok(Err(err)) => failures.push(format!("{address}: {err}")),
                Err(_) => failures.push(format!("{address}: no answer within {:?}", self.timeout)),
            }
        }
        Err(sentinel_error(&self.master, &failures))
    }

    /// The same lookup with blocking connections, for a client being built outside async
    /// code (each sentinel bounded by the timeout).
    pub(crate) fn lookup_blocking(&self) -> redis::RedisResult<redis::Client> {
        let mut failures = Vec::new();
        for sentinel in &self.sentinels {
            let address = sentinel.get_connection_info().addr().to_string();
            let asked =
                sentinel
                    .get_connection_with_timeout(self.timeout)
                    .and_then(|mut connection| {
                        connection.set_read_timeout(Some(self.timeout))?;
                        connection.set_write_timeout(Some(self.timeout))?;
                        redis::cmd("SENTINEL")
                            .arg("get-master-addr-by-name")
                            .arg(&self.master)
                            .query::<Option<(String, u16)>>(&mut connection)
                    });
            match asked {
                Ok(Some((host, port))) => return self.template.client(host, port),
                Ok(None) => failures.push(format!("{address}: does not know `{}`", self.master)),
                Err(err) => failures.push(format!("{address}: {err}")),
            }
        }
        Err(sentinel_error(&self.master, &failures))
    }
}

/// What else follows the primary when it moves (the release subscriptions).
pub(crate) type OnMove = Arc<dyn Fn(&redis::Client) + Send + Sync>;

/// A connection that follows the primary the sentinels name.
pub(crate) trait Follows: Send + Sync + 'static {
    /// Whether the connection is still in use (following ends when none is).
    fn alive(&self) -> bool;
    /// Moves the connection to `primary` unless it is there already.
    fn move_to(&self, primary: &redis::Client);
}

/// The sentinel events after which the primary may have changed: the replica promoted
/// (from then on the sentinels name it), the other replicas being moved to it, and the
/// switch announced when that is done.
pub(super) const SENTINEL_EVENTS: [&str; 3] = [
    "+promoted-slave",
    "+failover-state-reconf-slaves",
    "+switch-master",
];

/// Follows the primary for `servers` (a background task), as Sentinel's client
/// guidelines ask: subscribed to the failover events ([`SENTINEL_EVENTS`]) on one
/// sentinel at a time (the next one when it goes away), asking for the primary after
/// each event and after each subscription (for a switch missed meanwhile). Without this, a forced failover leaves the old primary accepting writes
/// until the sentinels demote it (seconds later): our renewals would go there while
/// another client takes the lock on the new primary. The release subscriptions
/// (`wakeups`) move too: the new primary's releases publish there, and the old one may
/// be gone. Ends when the servers are dropped.
pub(crate) async fn follow<F: Follows>(sentinel: Arc<Sentinel>, servers: Vec<F>, wakeups: OnMove) {
    use futures_util::StreamExt as _;
    let alive = || servers.iter().any(Follows::alive);
    let move_all = |primary: &redis::Client| {
        for server in &servers {
            server.move_to(primary);
        }
        wakeups(primary);
    };
    let mut next = 0;
    while alive() && !sentinel.sentinels.is_empty() {
        let client = &sentinel.sentinels[next % sentinel.sentinels.len()];
        next += 1;
        let subscribe = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&SENTINEL_EVENTS[..]).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(sentinel.timeout, subscribe).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        if let Ok(primary) = sentinel.lookup().await {
            move_all(&primary);
        }
        let mut messages = pubsub.into_on_message();
        while alive() {
            let message = match tokio::time::timeout(Duration::from_secs(1), messages.next()).await
            {
                Err(_) => continue,
                Ok(None) => break,
                Ok(Some(message)) => message,
            };
            // Each event names the master ("+switch-master <name> ..." or
            // "... @ <name> <ip> <port>"); the sentinel's current answer is the new primary.
            let Ok(payload) = message.get_payload::<String>() else {
                continue;
            };
            if payload.split(' ').any(|field| field == sentinel.master)
                && let Ok(primary) = sentinel.lookup().await
            {
                move_all(&primary);
            }
        }
    }
}

pub(super) fn sentinel_error(master: &str, failures: &[String]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "no sentinel named the primary",
        format!("master `{master}`: {}", failures.join("; ")),
    ))
}

/// How to open a client for the primary at an address the sentinels name.
pub(crate) struct PrimaryTemplate {
    /// The first sentinel's settings (address replaced for each primary).
    first_sentinel: redis::ConnectionInfo,
    settings: PrimarySettings,
}

impl PrimaryTemplate {
    /// Checks the primary's own TLS files (a configuration error names them) and keeps
    /// what [`client`](Self::client) needs.
    pub(crate) fn new(
        first_sentinel: redis::ConnectionInfo,
        settings: PrimarySettings,
        master: &str,
    ) -> Result<Self, LockError> {
        #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
        if let Some(PrimaryTls::On(files)) = &settings.tls
            && files.is_set()
        {
            crate::tls::check(
                files,
                crate::tls::TlsSettings::Primary,
                &format!("the primary `{master}`"),
            )?;
        }
        let template = PrimaryTemplate {
            first_sentinel,
            settings,
        };
        // A first client, so that settings that can never work fail now, not at each
        // failover.
        template
            .client("127.0.0.1".to_owned(), 6379)
            .map_err(|err| {
                LockError::config(format!(
                    "the connection settings for the primary `{master}` cannot be used: {err}"
                ))
            })?;
        Ok(template)
    }

    /// A client for the primary at `host:port`.
    pub(crate) fn client(&self, host: String, port: u16) -> redis::RedisResult<redis::Client> {
        let mut redis = self.first_sentinel.redis_settings().clone();
        if let Some(auth) = &self.settings.auth {
            let fresh = redis::RedisConnectionInfo::default()
                .set_db(redis.db())
                .set_protocol(redis.protocol())
                .set_password(&auth.password);
            redis = match &auth.username {
                Some(username) => fresh.set_username(username),
                None => fresh,
            };
        }
        let info = self.first_sentinel.clone().set_redis_settings(redis);
        let addr = match (&self.settings.tls, self.first_sentinel.addr()) {
            (
                None,
                redis::ConnectionAddr::TcpTls {
                    insecure,
                    tls_params,
                    ..
                },
            ) => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            (None | Some(PrimaryTls::Off), _) => redis::ConnectionAddr::Tcp(host, port),
            (Some(PrimaryTls::On(files)), _) => {
                let addr = redis::ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    tls_params: None,
                };
                if files.is_set() {
                    let without_tls = "TLS certificates were configured for the primary, but \
                                       lock-runtime was built without TLS: turn on its feature \
                                       `tls-rustls` or `tls-native-tls`";
                    return with_certificates(info.set_addr(addr), files, without_tls);
                }
                addr
            }
        };
        redis::Client::open(info.set_addr(addr))
    }
}

/// Whether `err` says the server refused our credentials (a wrong password or user, or
/// none given where one is needed).
pub(crate) fn is_auth_failure(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// The fix for a primary that refused our credentials.
pub(crate) const AUTH_HINT: &str = "the sentinel URLs' credentials are the sentinels' own; \
     give the data nodes' with Config::primary_password(password) or \
     Config::primary_auth(user, password)";

/// `err` (a refused authentication on the primary of `master` at `server`) with the master,
/// the server and the fix named.
pub(crate) fn name_auth_failure(
    err: redis::RedisError,
    master: &str,
    server: &str,
) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        "the Redis primary refused the credentials",
        format!("primary `{master}` at {server}: {err} ({AUTH_HINT})"),
    ))
}

/// Connects once to the primary of `master` while the client is built, and turns a refused
/// authentication into a configuration error (it would fail every acquire). Any other
/// failure (the primary down for a moment) is left to the lazy connections.
pub(crate) fn check_primary_auth(
    primary: &redis::Client,
    master: &str,
    timeout: std::time::Duration,
) -> Result<(), LockError> {
    let server = primary.get_connection_info().addr().to_string();
    let checked = primary
        .get_connection_with_timeout(timeout)
        .and_then(|mut connection| {
            connection.set_read_timeout(Some(timeout))?;
            redis::cmd("PING").query::<String>(&mut connection)
        });
    match checked {
        Err(err) if is_auth_failure(&err) => Err(LockError::config(format!(
            "the primary `{master}` at {server} (named by the sentinels) refused the \
             credentials: {err}; {AUTH_HINT}"
        ))),
        Err(err) => {
            tracing::debug!(master, %server, error = %err, "the primary did not answer the start-up check");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}
