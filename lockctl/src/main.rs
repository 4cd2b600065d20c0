//! `lockctl`: an operator's command line for the locks in a Redis: who holds a lock and who
//! waits for it, which locks exist, and taking a stuck lock away.
//!
//! ```text
//! lockctl inspect stock:42
//! lockctl list 'stock:*'
//! lockctl release stock:42
//! ```
//!
//! Commands:
//! - `inspect KEY`: the holder's token and remaining ttl (or a hand-over in progress), the
//!   fence counter, and the processes waiting in the key's queue, first come first, with how
//!   long each has waited ([`LockClient::inspect`]).
//! - `list PATTERN`: the lock keys that match a Redis glob pattern, one line each, by
//!   `SCAN MATCH PATTERN COUNT 1000`; bounded by `--limit N` locks (100) and by 10 000 SCAN
//!   calls. The queues' and fence counters' keys are not listed, nor keys that are no lock
//!   (another type, or a string without expiry: every lock has one).
//! - `release KEY`: takes the lock away from whoever holds it and wakes its queue; the old
//!   holder learns at its next renewal that its lease is lost ([`LockClient::force_release`]).
//!
//! Options, before the command: `--url URL` (else `REDIS_URL`, else
//! `redis://127.0.0.1:6379`), `--prefix P` (the applications' `Config::key_prefix`, if
//! any). One server (or a primary); for Redlock, run it against each master.
//!
//! Exit status: 0 done, 1 Redis or the key refused it (the message says why), 2 a usage
//! error.

use std::process::ExitCode;
use std::str::FromStr;

use lock_runtime::{Config, LockClient, LockError, LockState};

/// At most this many SCAN calls for one `list`.
const MAX_SCAN_CALLS: usize = 10_000;
/// Keys asked for per SCAN call.
const SCAN_COUNT: usize = 1000;

const USAGE: &str = "usage: lockctl [--url URL] [--prefix P] (inspect KEY | list PATTERN [--limit N] | release KEY)";

/// The command line.
struct Args {
    url: String,
    prefix: String,
    command: Command,
}

enum Command {
    Inspect(String),
    List { pattern: String, limit: usize },
    Release(String),
}

/// The words after the program name. (Not `lock_examples::cli`: the test package builds
/// this file as a binary of its own, which depends on `lock-runtime` alone.)
struct Words(std::iter::Skip<std::env::Args>);

impl Words {
    fn next_flag(&mut self) -> Option<String> {
        self.0.next()
    }

    /// The value that follows `flag`, parsed; the error names the flag and the value.
    fn value<T: FromStr>(&mut self, flag: &str) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let value = self
            .0
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        value
            .parse()
            .map_err(|err| format!("{flag} {value:?}: {err}"))
    }
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut words = Words(std::env::args().skip(1));
        let mut url = std::env::var(lock_runtime::REDIS_URL_ENV)
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| lock_runtime::DEFAULT_REDIS_URL.to_owned());
        let mut prefix = String::new();
        let mut command = None;
        let mut limit = 100;
        while let Some(word) = words.next_flag() {
            match word.as_str() {
                "--url" => url = words.value("--url")?,
                "--prefix" => prefix = words.value("--prefix")?,
                "--limit" => limit = words.value("--limit")?,
                "inspect" | "list" | "release" if command.is_none() => {
                    let what = if word == "list" { "PATTERN" } else { "KEY" };
                    let operand: String = words.value(&format!("{word} {what}"))?;
                    command = Some(match word.as_str() {
                        "inspect" => Command::Inspect(operand),
                        "list" => Command::List {
                            pattern: operand,
                            limit: 0,
                        },
                        _ => Command::Release(operand),
                    });
                }
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unexpected `{other}`")),
            }
        }
        let mut command = command.ok_or("no command given")?;
        if let Command::List { limit: slot, .. } = &mut command {
            *slot = limit.max(1);
        }
        Ok(Args {
            url,
            prefix,
            command,
        })
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(err) => {
            if !err.is_empty() {
                eprintln!("lockctl: {err}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
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

async fn run(args: &Args) -> Result<(), LockError> {
    let client = LockClient::new(Config::single(args.url.clone()).key_prefix(args.prefix.clone()))?;
    match &args.command {
        Command::Inspect(key) => println!("{}", client.inspect(key).await?),
        Command::Release(key) => println!("{}", client.force_release(key).await?),
        Command::List { pattern, limit } => list(&client, args, pattern, *limit).await?,
    }
    Ok(())
}

/// Prints the lock keys that match `pattern`, one line each, then a count.
async fn list(
    client: &LockClient,
    args: &Args,
    pattern: &str,
    limit: usize,
) -> Result<(), LockError> {
    let backend = |err| LockError::Backend {
        key: String::new(),
        source: std::sync::Arc::new(err),
    };
    let redis = redis::Client::open(args.url.as_str()).map_err(|err| LockError::Config {
        reason: format!("the URL `{}`: {err}", args.url),
    })?;
    let mut connection = redis
        .get_multiplexed_async_connection()
        .await
        .map_err(backend)?;
    let full_pattern = format!("{}{pattern}", glob_escape(&args.prefix));
    let (mut cursor, mut calls, mut locks, mut skipped) = (0u64, 0, 0, 0);
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&full_pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(&mut connection)
            .await
            .map_err(backend)?;
        calls += 1;
        for key in keys {
            let Some(key) = String::from_utf8(key)
                .ok()
                .and_then(|key| key.strip_prefix(&args.prefix).map(str::to_owned))
            else {
                skipped += 1;
                continue;
            };
            match client.inspect(&key).await {
                Ok(state) if is_lock(&state) => {
                    locks += 1;
                    println!("{}", summary(&key, &state));
                    if locks == limit {
                        println!(
                            "{} (stopped at --limit {limit}; more may match)",
                            locks_n(locks)
                        );
                        return Ok(());
                    }
                }
                // Another type, an auxiliary key, a string without expiry: not a lock.
                Ok(_) | Err(LockError::InvalidKey { .. }) => skipped += 1,
                Err(err) => return Err(err),
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
        if calls == MAX_SCAN_CALLS {
            println!(
                "{} (stopped after {calls} SCAN calls; more may match)",
                locks_n(locks)
            );
            return Ok(());
        }
    }
    println!("{} ({skipped} other keys matched)", locks_n(locks));
    Ok(())
}

/// `1 lock`, `2 locks`.
fn locks_n(count: usize) -> String {
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
