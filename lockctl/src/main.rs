//! `lockctl`: an operator's command line for the locks in a Redis: who holds a lock and who
//! waits for it, which locks exist, and taking a stuck lock away.
//!
//! Install it with `cargo install --locked --path lockctl` (from a checkout of the
//! repository), then:
//!
//! ```text
//! lockctl inspect stock:42
//! lockctl list 'stock:*'
//! lockctl release stock:42
//! lockctl --help            # and `lockctl inspect --help`, ...
//! ```
//!
//! Commands:
//! - `inspect KEY`: the holder's token and remaining ttl (or a hand-over in progress), the
//!   fence counter, and the processes waiting in the key's queue, first come first, with how
//!   long each has waited ([`LockClient::inspect`]).
//! - `list PATTERN`: the lock keys that match a Redis glob pattern, one line each, by
//!   `SCAN MATCH PATTERN COUNT 1000` (on every master of a cluster); bounded by `--limit N`
//!   locks (100) and by 10 000 SCAN calls. The queues' and fence counters' keys are not listed, nor keys that are no lock
//!   (another type, or a string without expiry: every lock has one).
//! - `release KEY`: takes the lock away from whoever holds it and wakes its queue; the old
//!   holder learns at its next renewal that its lease is lost ([`LockClient::force_release`]).
//!
//! Options, before or after the command: `--url URL` (else `REDIS_URL`, else
//! `redis://127.0.0.1:6379`), `--prefix P` (the applications' `Config::key_prefix`, if
//! any), `--cluster` (the URLs, comma-separated, are seeds of a Redis Cluster). One server
//! (or a primary) or a cluster; for Redlock, run it against each master.
//!
//! Exit status: 0 done (or `--help`, `--version`), 1 Redis or the key refused it (the message
//! says why), 2 a usage error (the message says what is wrong, then the usage line).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lock_runtime::{Config, DEFAULT_REDIS_URL, LockClient, LockError, LockState, REDIS_URL_ENV};

/// At most this many SCAN calls for one `list`.
const MAX_SCAN_CALLS: usize = 10_000;
/// Keys asked for per SCAN call.
const SCAN_COUNT: usize = 1000;

/// The operator's command line for lock-runtime's locks: who holds a lock and who waits for
/// it, which locks exist, taking a stuck lock away.
///
/// Exit status: 0 done, 1 Redis or the key refused it (the message says why), 2 a usage
/// error.
#[derive(Parser)]
#[command(name = "lockctl", version)]
struct Args {
    /// The Redis server (or the primary) that holds the locks; for Redlock, run lockctl
    /// against each master in turn. An empty `REDIS_URL` counts as unset.
    #[arg(long, global = true, value_name = "URL", env = REDIS_URL_ENV, default_value = DEFAULT_REDIS_URL)]
    url: String,
    /// The URL names the seeds of a Redis Cluster (comma-separated): keys are read where
    /// their slots live, and `list` scans every master.
    #[arg(long, global = true)]
    cluster: bool,
    /// The applications' key prefix (their `Config::key_prefix`), if they set one: keys are
    /// named and listed without it.
    #[arg(
        long,
        global = true,
        value_name = "P",
        default_value = "",
        hide_default_value = true
    )]
    prefix: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Shows the holder of KEY and its remaining ttl (or a hand-over in progress), the fence
    /// counter, and the processes waiting in the key's queue, first come first.
    Inspect {
        /// The lock's key, as the application names it.
        key: String,
    },
    /// Lists the lock keys that match a Redis glob pattern, one line each (by SCAN; the
    /// queues' and fence counters' keys and keys that are no lock are not listed).
    List {
        /// A Redis glob pattern (`*`, `?`, `[...]`), without the prefix.
        pattern: String,
        /// Stop after this many locks.
        #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
    },
    /// Takes the lock KEY away from whoever holds it and wakes its queue; the old holder
    /// learns at its next renewal that its lease is lost.
    Release {
        /// The lock's key, as the application names it.
        key: String,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // A usage error exits with 2 here, `--help` and `--version` with 0.
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lockctl: {err}");
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

impl Args {
    /// `--url`, else `REDIS_URL`, else the default; blank counts as unset, as for
    /// `Config::from_env`.
    fn url(&self) -> &str {
        match self.url.trim() {
            "" => DEFAULT_REDIS_URL,
            url => url,
        }
    }
}

async fn run(args: &Args) -> Result<(), LockError> {
    let config = if args.cluster {
        Config::cluster(args.url().split(',').map(str::trim))
    } else {
        Config::single(args.url())
    };
    let client = LockClient::new(config.key_prefix(args.prefix.clone()))?;
    match &args.command {
        Command::Inspect { key } => println!("{}", client.inspect(key).await?),
        Command::Release { key } => println!("{}", client.force_release(key).await?),
        Command::List { pattern, limit } => list(&client, args, pattern, *limit).await?,
    }
    Ok(())
}

/// Prints the lock keys that match `pattern`, one line each, then a count: from the one
/// server, or from every master of a cluster in turn.
async fn list(
    client: &LockClient,
    args: &Args,
    pattern: &str,
    limit: u64,
) -> Result<(), LockError> {
    let servers = if args.cluster {
        masters(args.url()).await?
    } else {
        vec![args.url().to_owned()]
    };
    let full_pattern = format!("{}{pattern}", glob_escape(&args.prefix));
    let mut listing = Listing {
        client,
        prefix: &args.prefix,
        limit,
        calls: 0,
        locks: 0,
        skipped: 0,
    };
    for url in &servers {
        if let Some(stopped) = listing.scan(url, &full_pattern).await? {
            println!("{} ({stopped}; more may match)", locks_n(listing.locks));
            return Ok(());
        }
    }
    let skipped = listing.skipped;
    println!("{} ({skipped} other keys matched)", locks_n(listing.locks));
    Ok(())
}

/// A `list` in progress: what it printed and passed over so far, within its bounds.
struct Listing<'a> {
    client: &'a LockClient,
    prefix: &'a str,
    limit: u64,
    calls: usize,
    locks: u64,
    skipped: u64,
}

impl Listing<'_> {
    /// Scans the server at `url` for `pattern`, printing each lock; `Some(why)` when a
    /// bound stopped the listing.
    async fn scan(&mut self, url: &str, pattern: &str) -> Result<Option<String>, LockError> {
        let mut connection = connect(url).await?;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut connection)
                .await
                .map_err(backend)?;
            self.calls += 1;
            for key in keys {
                if self.show(key).await? && self.locks == self.limit {
                    return Ok(Some(format!("stopped at --limit {}", self.limit)));
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok(None);
            }
            if self.calls == MAX_SCAN_CALLS {
                return Ok(Some(format!("stopped after {} SCAN calls", self.calls)));
            }
        }
    }

    /// Prints `key` when it is a lock (true), else counts it as passed over.
    async fn show(&mut self, key: Vec<u8>) -> Result<bool, LockError> {
        let Some(key) = String::from_utf8(key)
            .ok()
            .and_then(|key| key.strip_prefix(self.prefix).map(str::to_owned))
        else {
            self.skipped += 1;
            return Ok(false);
        };
        match self.client.inspect(&key).await {
            Ok(state) if is_lock(&state) => {
                self.locks += 1;
                println!("{}", summary(&key, &state));
                Ok(true)
            }
            // Another type, an auxiliary key, a string without expiry: not a lock.
            Ok(_) | Err(LockError::InvalidKey { .. }) => {
                self.skipped += 1;
                Ok(false)
            }
            Err(err) => Err(err),
        }
    }
}

/// A connection of its own to the server at `url` (for SCAN and CLUSTER NODES).
async fn connect(url: &str) -> Result<redis::aio::MultiplexedConnection, LockError> {
    let redis = redis::Client::open(url).map_err(|err| LockError::Config {
        reason: format!("the URL `{url}`: {err}"),
    })?;
    redis
        .get_multiplexed_async_connection()
        .await
        .map_err(backend)
}

/// A Redis failure, named for the operator.
fn backend(err: redis::RedisError) -> LockError {
    LockError::Backend {
        key: String::new(),
        source: std::sync::Arc::new(err),
    }
}

/// The URLs of a cluster's masters, from `CLUSTER NODES` on the first seed of `seeds`
/// that answers (each with the seed's scheme and credentials).
async fn masters(seeds: &str) -> Result<Vec<String>, LockError> {
    let mut last = None;
    for seed in seeds.split(',').map(str::trim) {
        let nodes: Result<String, LockError> = match connect(seed).await {
            Ok(mut connection) => redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut connection)
                .await
                .map_err(backend),
            Err(err) => Err(err),
        };
        match nodes {
            Ok(nodes) => return Ok(master_urls(seed, &nodes)),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| LockError::Config {
        reason: "--cluster needs at least one seed URL".to_owned(),
    }))
}

/// The masters `CLUSTER NODES` lists (not failed, with an address), as URLs like `seed`.
fn master_urls(seed: &str, nodes: &str) -> Vec<String> {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let credentials = rest
        .split_once('/')
        .map_or(rest, |(authority, _)| authority)
        .rsplit_once('@')
        .map_or(String::new(), |(credentials, _)| format!("{credentials}@"));
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let listed = flags.split(',').any(|flag| flag == "master")
                && !flags.contains("fail")
                && !flags.contains("noaddr");
            let address = fields.get(1)?.split(['@', ',']).next()?;
            (listed && !address.starts_with(':'))
                .then(|| format!("{scheme}://{credentials}{address}"))
        })
        .collect()
}

/// `1 lock`, `2 locks`.
fn locks_n(count: u64) -> String {
    format!("{count} lock{}", if count == 1 { "" } else { "s" })
}

/// Whether a key this client read is a lock: held with an expiry, or being handed over.
fn is_lock(state: &LockState) -> bool {
    state.handover.is_some() || state.holders.iter().any(|holder| holder.ttl.is_some())
}

/// One line of `list`: `KEY  held by TOKEN  ttl 9.874s  fence F  waiting N`.
fn summary(key: &str, state: &LockState) -> String {
    let mut line = key.to_owned();
    match state.holder() {
        Some(holder) => {
            line.push_str(&format!("  held by {}", holder.token));
            if let Some(ttl) = holder.ttl {
                line.push_str(&format!(
                    "  ttl {}.{:03}s",
                    ttl.as_secs(),
                    ttl.subsec_millis()
                ));
            }
        }
        None => line.push_str("  hand-over"),
    }
    if let Some(fence) = state.fence {
        line.push_str(&format!("  fence {fence}"));
    }
    line.push_str(&format!("  waiting {}", state.queued));
    line
}

/// `text` as a glob that matches only itself (SCAN MATCH's `*`, `?`, `[`, `]`, `\`).
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Args, Command, DEFAULT_REDIS_URL, master_urls};

    #[test]
    fn a_clusters_masters_are_read_from_cluster_nodes_with_the_seeds_scheme_and_credentials() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7002@17002 slave b2 0 0 2 connected
d4 127.0.0.1:7003@17003 master,fail - 0 0 3 disconnected
e5 :0@0 master,noaddr - 0 0 4 disconnected
";
        assert_eq!(
            master_urls("rediss://user:pw@10.0.0.1:7000/0", nodes),
            [
                "rediss://user:pw@127.0.0.1:7000",
                "rediss://user:pw@127.0.0.1:7001"
            ]
        );
        assert_eq!(
            master_urls("redis://127.0.0.1:7000", nodes),
            ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn options_go_before_or_after_the_command_and_a_blank_url_is_the_default() {
        let args = Args::try_parse_from(["lockctl", "list", "a*", "--url", " ", "--prefix", "p:"])
            .unwrap();
        assert_eq!(args.url(), DEFAULT_REDIS_URL);
        assert_eq!(args.prefix, "p:");
        assert!(matches!(args.command, Command::List { limit: 100, .. }));
        let args =
            Args::try_parse_from(["lockctl", "--url", "redis://h:1", "release", "k"]).unwrap();
        assert_eq!(args.url(), "redis://h:1");
        assert!(matches!(args.command, Command::Release { key } if key == "k"));
    }
}
