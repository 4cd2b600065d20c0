//! `lockctl`: an operator's command line for the locks in a Redis: who holds a lock and who
//! waits for it, which locks exist, watching a lock, and taking a stuck lock away safely.
//!
//! Install it with `cargo install --locked --path lockctl` (from a checkout of the
//! repository), then:
//!
//! ```text
//! lockctl inspect stock:42
//! lockctl list 'stock:*'
//! lockctl watch stock:42 --count 10
//! lockctl graph stock:42 user:7
//! lockctl release stock:42 --if-holder lr-6f1d0c3e9a7b4c2d.11/1a2b3c4d5e6/ea60/4711@host-a/shop/shop::buy --dry-run
//! lockctl --help            # and `lockctl release --help`, ...
//! ```
//!
//! Commands:
//! - `inspect KEY`: the holders (a lock's holder, a read-write lock's readers, a
//!   semaphore's permits) and their remaining ttls, or a hand-over in progress, the fence
//!   counter, and the processes waiting in the key's queue, first come first
//!   ([`LockClient::inspect`]).
//! - `list PATTERN`: our locks whose keys match a Redis glob pattern, one line each, by
//!   `SCAN MATCH PATTERN COUNT 1000` (on every master of a cluster, on Sentinel's
//!   primary); bounded by `--limit N` locks (100) and by 10 000 SCAN calls. Not listed:
//!   the queues' and fence counters' keys, keys of another type, strings without expiry,
//!   strings whose value is no token of lock-runtime's (`lr-…`).
//! - `watch KEY`: `inspect` again every `--interval` (1s; `500ms`, `2m`), for at most
//!   `--count N` rounds (3600) or until Ctrl-C.
//! - `graph KEY...`: the wait-for graph from the given keys: each key's holder and the
//!   key that holder's task waits for meanwhile (recorded by the deadlock detection once
//!   that wait has gone on past its delay), followed key by key; `cycle: A -> B -> A` for
//!   a chain that closes (a deadlock).
//! - `release KEY`: takes the lock away from whoever holds it and wakes its queue; the
//!   old holder is told at once once it has renewed its lease, else it learns at its next
//!   renewal that its lease is lost
//!   ([`LockClient::force_release_checked`]). `--if-holder TOKEN`: only while TOKEN (as
//!   `inspect` showed it: the holder, a reader or a permit) holds it, checked in the same
//!   script call. `--dry-run`: says what it would remove and whom it would wake, changes
//!   nothing. A key that is not one of our locks (a string whose value is no token of
//!   ours: another client's lock, or no lock) is refused unless `--force`.
//!
//! Options, before or after the command: `[--url URL]` (else `REDIS_URL`, else
//! `redis://127.0.0.1:6379`; `rediss://` for TLS), `--prefix P` (the applications'
//! `Config::key_prefix`), `--cluster` (the URLs, comma-separated, are seeds of a Redis
//! Cluster), `--sentinel MASTER` (the URLs are sentinels watching MASTER, as
//! `Config::sentinel`; `--primary-password PASSWORD` and `--primary-tls-ca-cert FILE` for
//! data nodes with settings of their own, as `Config::primary_password` and
//! `Config::primary_tls_ca_cert`), `--tls-ca-cert FILE`, `--tls-client-cert FILE` with
//! `--tls-client-key FILE` (`Config::tls_ca_cert`, `Config::tls_client_cert`). Each of
//! these is also read from `LOCKCTL_` and its name (`LOCKCTL_SENTINEL`,
//! `LOCKCTL_TLS_CA_CERT`, `LOCKCTL_PRIMARY_PASSWORD`, ...); `--json` (one JSON object per line, fields named as `LockState`'s,
//! durations in milliseconds, times in milliseconds since the Unix epoch). For Redlock,
//! run it against each master.
//!
//! Exit status: 0 done (or `--help`, `--version`); 1 Redis failed or the key was refused
//! (another type, or not one of our locks without `--force`: the message says why); 2 a
//! usage error (the message says what is wrong, then the usage line); 3 the key is unknown
//! (no lock, no hand-over, nobody queued, no reader's share, no permit, no fence counter);
//! 4 `--if-holder TOKEN` holds no part of the key (nothing changed).

mod graph;
mod json;
mod list;
mod output;
mod release;
mod target;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lock_runtime::{Holder, LockClient, LockError};

use output::{Exit, Output};
use release::Release;
use target::Target;

/// The usage line: every option but the command and its arguments is optional.
const USAGE: &str =
    "lockctl [--url URL] [--cluster | --sentinel MASTER] [--prefix P] [--json] <COMMAND>";

/// The exit statuses, under every command's help.
const EXIT_STATUS: &str = "Exit status: 0 done; 1 Redis failed or the key was refused \
(another type, or not one of our locks without --force; the message says why); 2 a usage \
error; 3 the key is unknown (no lock, hand-over, waiter, reader's share, permit or fence \
counter); 4 --if-holder TOKEN holds no part of the key (nothing changed).";

/// The operator's command line for lock-runtime's locks: who holds a lock and who waits for
/// it, which locks exist, watching a lock, taking a stuck lock away.
#[derive(Parser, Debug)]
#[command(name = "lockctl", version, override_usage = USAGE, after_help = EXIT_STATUS)]
struct Args {
    #[command(flatten)]
    target: Target,
    /// Print one JSON object per line (fields named as `LockState`'s; durations in ms,
    /// times in ms since the Unix epoch).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Shows the holders of KEY and their remaining ttls (or a hand-over in progress), the
    /// fence counter, and the processes waiting in the key's queue, first come first.
    #[command(override_usage = "lockctl inspect [--url URL] [OPTIONS] <KEY>", after_help = EXIT_STATUS)]
    Inspect {
        /// The lock's key, as the application names it.
        key: String,
    },
    /// Lists our locks whose keys match a Redis glob pattern, one line each (by SCAN; the
    /// queues' and fence counters' keys and keys that are not our locks are not listed).
    #[command(override_usage = "lockctl list [--url URL] [OPTIONS] <PATTERN>", after_help = EXIT_STATUS)]
    List {
        /// A Redis glob pattern (`*`, `?`, `[...]`), without the prefix.
        pattern: String,
        /// Stop after this many locks.
        #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
    },
    /// Shows KEY as `inspect` does, again every interval, for at most N rounds or until
    /// Ctrl-C.
    #[command(override_usage = "lockctl watch [--url URL] [OPTIONS] <KEY>", after_help = EXIT_STATUS)]
    Watch {
        /// The lock's key, as the application names it.
        key: String,
        /// How long between rounds: `500ms`, `1s`, `2m` (10ms to 60m).
        #[arg(long, value_name = "TIME", default_value = "1s", value_parser = watch::parse_interval)]
        interval: Duration,
        /// At most this many rounds.
        #[arg(long, value_name = "N", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
    },
    /// Shows the wait-for graph from the given keys: each key's holder and the key that
    /// holder waits for meanwhile, followed key by key; a chain that closes is a deadlock.
    #[command(override_usage = "lockctl graph [--url URL] [OPTIONS] <KEY>...", after_help = EXIT_STATUS)]
    Graph {
        /// The locks' keys, as the application names them.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Takes the lock KEY away from whoever holds it and wakes its queue; the old holder
    /// is told at once (once it has renewed its lease), else at its next renewal.
    #[command(override_usage = "lockctl release [--url URL] [OPTIONS] <KEY>", after_help = EXIT_STATUS)]
    Release {
        /// The lock's key, as the application names it.
        key: String,
        /// Only while TOKEN holds it (the holder, a reader or a permit, as `inspect`
        /// showed it); else nothing changes and the holders now are shown (exit 4).
        #[arg(long, value_name = "TOKEN")]
        if_holder: Option<String>,
        /// Say what would be removed and who would be woken; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Take the key even if it is not one of our locks (a string whose value is no
        /// token of lock-runtime's: another client's lock, or no lock at all).
        #[arg(long)]
        force: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    // A usage error exits with 2 here, `--help` and `--version` with 0.
    let args = Args::parse();
    let exit = match run(&args).await {
        Ok(exit) => exit,
        Err(err) => {
            eprintln!("lockctl: {err}");
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            Exit::Failed
        }
    };
    exit.code()
}

async fn run(args: &Args) -> Result<Exit, LockError> {
    let client = LockClient::new(args.target.config()?)?;
    let out = Output { json: args.json };
    match &args.command {
        Command::Inspect { key } => inspect(&client, key, out).await,
        Command::List { pattern, limit } => {
            list::list(&client, &args.target, (pattern, *limit), out).await?;
            Ok(Exit::Done)
        }
        Command::Watch {
            key,
            interval,
            count,
        } => watch::watch(&client, key, (*interval, *count), out).await,
        Command::Graph { keys } => graph::graph(&client, (keys, &args.target.prefix), out).await,
        Command::Release {
            key,
            if_holder,
            dry_run,
            force,
        } => {
            let release = Release {
                key,
                if_holder: if_holder.as_deref(),
                dry_run: *dry_run,
                force: *force,
            };
            release.run(&client, out).await
        }
    }
}

/// `inspect KEY`: the state, a note when it is not one of our locks, or "unknown".
async fn inspect(client: &LockClient, key: &str, out: Output) -> Result<Exit, LockError> {
    let state = client.inspect(key).await?;
    if state.is_empty() {
        return Ok(out.unknown(key));
    }
    let mut text = state.to_string();
    if !state.holders.iter().all(Holder::is_ours) {
        text.push_str("\nnote     not one of lock-runtime's locks: its value is no token of ours");
    }
    out.say(text, || json::state(&state));
    Ok(Exit::Done)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::{CommandFactory, Parser};

    use lock_runtime::DEFAULT_REDIS_URL;

    use super::target::master_urls;
    use super::{Args, Command};

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

    /// The exit statuses have one list (`output::EXIT_STATUSES`); the help, the crate
    /// docs and the guide say each the same way.
    #[test]
    fn every_exit_status_is_documented_as_listed() {
        let flat = |text: &str| {
            let text = text.replace("//!", " ").replace('`', "");
            text.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        let documents = [
            ("--help", flat(super::EXIT_STATUS)),
            ("main.rs", flat(include_str!("main.rs"))),
            (
                "operations.md",
                flat(include_str!("../../lock-runtime/src/guide/operations.md")),
            ),
        ];
        for (code, meaning) in super::output::EXIT_STATUSES {
            for (name, text) in &documents {
                let line = format!("{code} {meaning}");
                assert!(text.contains(&line), "{name} does not say `{line}`");
            }
        }
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn options_go_before_or_after_the_command_and_a_blank_url_is_the_default() {
        let args = Args::try_parse_from(["lockctl", "list", "a*", "--url", " ", "--prefix", "p:"])
            .unwrap();
        assert_eq!(args.target.url(), DEFAULT_REDIS_URL);
        assert_eq!(args.target.prefix, "p:");
        assert!(matches!(args.command, Command::List { limit: 100, .. }));
        let args =
            Args::try_parse_from(["lockctl", "--url", "redis://h:1", "release", "k"]).unwrap();
        assert_eq!(args.target.url(), "redis://h:1");
        assert!(
            matches!(args.command, Command::Release { key, dry_run: false, force: false, if_holder: None } if key == "k")
        );
        let args = Args::try_parse_from([
            "lockctl",
            "release",
            "k",
            "--if-holder",
            "lr-1",
            "--dry-run",
            "--json",
        ])
        .unwrap();
        assert!(args.json);
        assert!(
            matches!(args.command, Command::Release { dry_run: true, if_holder: Some(token), .. } if token == "lr-1")
        );
        let args = Args::try_parse_from(["lockctl", "watch", "k", "--interval", "250ms"]).unwrap();
        assert!(
            matches!(args.command, Command::Watch { interval, count: 3600, .. } if interval == std::time::Duration::from_millis(250))
        );
    }
}
