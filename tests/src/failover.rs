//! What the three failover trials share (one server and its replica behind proxies,
//! Sentinel, a cluster shard): the tally of their outcomes and the helpers that report and
//! wait.

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient, LockError, LockGuard, LostCause};

use crate::RedisServer;

/// What the failovers of one trial came to.
#[derive(Debug, Default)]
pub struct Tally {
    /// Failovers run.
    pub failovers: usize,
    /// The kill until the deployment named the new primary, per failover.
    pub took: Vec<Duration>,
    /// The first client was told it holds the key.
    pub first_granted: usize,
    /// The second client was granted the key while the first still believed it held it.
    pub double_grants: usize,
    /// The first holder had been told of the loss before the second's grant (no overlap).
    pub told_before_the_second: usize,
    /// How the first holder learned of the loss, and how long after the second's grant
    /// (just after it, for those told before).
    pub lost: Vec<(LostCause, Duration)>,
    /// The first holder was never told.
    pub never_told: usize,
    /// What refused the first client (not granted).
    pub first_refused: Vec<String>,
    /// What the second client got when it was not granted.
    pub second_refused: Vec<String>,
    /// After the old primary rejoined, the second client took and released the key.
    pub after_rejoin: usize,
    /// Times a sentinel had pointed the replica past the link and it was put back.
    pub relinked: usize,
    /// Failovers the deployment made on its own (a sentinel that found the new primary
    /// slow to answer for its down-after period, on a busy machine): the trial swapped the
    /// roles and put the replica back on the link.
    pub unplanned: usize,
}

/// An error's kind, as the tallies count it.
pub fn kind(err: &LockError) -> String {
    match err {
        LockError::NotReplicated {
            confirmed, needed, ..
        } => format!("NotReplicated ({confirmed} of {needed})"),
        LockError::Backend { .. } => format!(
            "Backend ({})",
            std::error::Error::source(err).map_or(String::new(), ToString::to_string)
        ),
        other => format!("{other:?}")
            .split([' ', '{'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The items counted: "3x A; 1x B".
pub fn summary(mut items: Vec<String>) -> String {
    items.sort();
    let mut counted: Vec<(String, usize)> = Vec::new();
    for item in items {
        match counted.last_mut() {
            Some((last, count)) if *last == item => *count += 1,
            _ => counted.push((item, 1)),
        }
    }
    counted
        .iter()
        .map(|(item, count)| format!("{count}x {item}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `INFO section` of `server` (empty when it does not answer).
pub fn info(server: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut server.conn())
        .unwrap_or_default()
}

/// What every data node of a trial adds to its arguments: a replica syncs at once (no
/// delay before a diskless transfer), and the server records what took it 100 ms or more
/// (`LATENCY LATEST`, printed when a trial goes wrong).
pub const SERVER_ARGS: [&str; 6] = [
    "--repl-diskless-sync",
    "yes",
    "--repl-diskless-sync-delay",
    "0",
    "--latency-monitor-threshold",
    "100",
];

/// How long a trial's clients with the option wait for the replica.
pub const REPLICA_WAIT: Duration = Duration::from_millis(100);

/// A trial's client on `config`: short timeouts, and with `replicas` grants that wait for
/// one replica ([`REPLICA_WAIT`]).
pub fn trial_client(config: Config, replicas: bool) -> LockClient {
    let config = config
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1));
    let config = if replicas {
        config.wait_for_replicas(1, REPLICA_WAIT)
    } else {
        config
    };
    LockClient::new(config).expect("a trial's client")
}

/// The two data nodes of a trial: the primary and its replica, whose roles a failover
/// swaps.
pub struct Nodes {
    /// Both nodes; `servers[primary]` is the primary.
    pub servers: [RedisServer; 2],
    /// Which of the two is the primary.
    pub primary: usize,
}

impl Nodes {
    /// Two fresh servers with [`SERVER_ARGS`]; the first is the primary.
    pub fn start() -> Nodes {
        Nodes::of([
            RedisServer::start_with(&SERVER_ARGS),
            RedisServer::start_with(&SERVER_ARGS),
        ])
    }

    /// `servers`, the first the primary.
    pub fn of(servers: [RedisServer; 2]) -> Nodes {
        Nodes {
            servers,
            primary: 0,
        }
    }

    /// The primary.
    pub fn primary(&self) -> &RedisServer {
        &self.servers[self.primary]
    }

    /// The replica.
    pub fn replica(&self) -> &RedisServer {
        &self.servers[1 - self.primary]
    }

    /// Kills the primary (`kill -9`).
    pub fn kill_primary(&mut self) {
        self.servers[self.primary].kill9();
    }

    /// The replica is the primary now.
    pub fn swap(&mut self) {
        self.primary = 1 - self.primary;
    }

    /// Starts the old primary (the replica since [`Nodes::swap`]) again, empty.
    pub fn restart_replica(&mut self) {
        self.servers[1 - self.primary].restart();
    }

    /// Makes the replica replicate from `127.0.0.1:port` (the primary, or a link to it)
    /// and waits until it has the primary's data ([`until_replica_synced`]).
    pub fn attach_replica(&self, port: u16) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(port)
            .query(&mut self.replica().conn())
            .expect("REPLICAOF");
        until_replica_synced(self.primary());
    }
}

/// Waits (5 s at most) until `primary`'s replica has its data: a write on the primary,
/// then `WAIT 1` on the same connection. Panics when it does not.
pub fn until_replica_synced(primary: &RedisServer) {
    let mut primary = primary.conn();
    let _: () = redis::cmd("SET")
        .arg("~sync")
        .arg(1)
        .query(&mut primary)
        .expect("SET ~sync");
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut primary)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica did not sync within 5 s");
}

/// A deployment a failover trial runs on (Sentinel, a cluster shard): its clients, its
/// replication link, the failover and the old primary's return. Each step blocks (the
/// trial runs it in `block_in_place`).
pub trait Trial {
    /// Before each failover: puts right what the last one left (nothing by default).
    fn prepare(&mut self, _tally: &mut Tally) {}

    /// A fresh client on the deployment, with `wait_for_replicas` when `replicas`.
    fn client(&self, replicas: bool) -> LockClient;

    /// Holds the replication stream back: the replica misses what the primary grants now.
    fn hold_replication(&self);

    /// Panics, saying what the deployment looks like, unless the primary holds `key`
    /// (the first client was just granted it there).
    fn check_granted(&self, key: &str, tally: &Tally);

    /// Kills the primary and waits until the deployment names the replica; how long that
    /// took.
    fn fail_over(&mut self) -> Duration;

    /// Starts the old primary again, as the new primary's replica; counts in `tally` what
    /// the deployment did meanwhile.
    fn rejoin(&mut self, tally: &mut Tally);
}

/// The lease and first wait of a trial's clients.
pub struct Timings {
    /// The lease of every grant.
    pub ttl: Duration,
    /// How long the first client waits for its grant.
    pub first_wait: Duration,
}

/// One failover on `trial`: a first client takes `key` while the replica misses it, the
/// primary is killed, a second client tries the key on the promoted replica, and the
/// tally counts what each was told; then the old primary rejoins and the key is taken once
/// more.
pub async fn one_failover<T: Trial>(
    trial: &mut T,
    (key, replicas): (&str, bool),
    timings: &Timings,
    tally: &mut Tally,
) {
    tokio::task::block_in_place(|| trial.prepare(tally));
    let first = tokio::task::block_in_place(|| trial.client(replicas));
    trial.hold_replication();
    let first_result = tokio::time::timeout(
        timings.first_wait + Duration::from_secs(3),
        first
            .lock(key)
            .ttl(timings.ttl)
            .wait(timings.first_wait)
            .acquire(),
    )
    .await
    .expect("the first client never answered");
    if first_result.is_ok() {
        trial.check_granted(key, tally);
    }
    let took = tokio::task::block_in_place(|| trial.fail_over());
    tally.took.push(took);
    // A client that asks the deployment now: it finds the promoted replica.
    let second = tokio::task::block_in_place(|| trial.client(replicas));
    let second_result = second.lock(key).ttl(timings.ttl).try_acquire().await;
    let second_at = Instant::now();
    judge(&first_result, &second_result, tally);
    // The first holder's loss is awaited beside the rejoin (which takes a second or more),
    // so that the time it was told is its own.
    let watcher = first_result.ok().map(|guard| {
        let bound = timings.ttl.saturating_sub(second_at.elapsed());
        tokio::spawn(async move {
            let cause = tokio::time::timeout(bound, guard.lost()).await.ok();
            (cause, second_at.elapsed(), guard)
        })
    });
    tokio::task::block_in_place(|| trial.rejoin(tally));
    if let Some(watcher) = watcher {
        let (cause, after, guard) = watcher.await.unwrap();
        match cause {
            Some(cause) => tally.lost.push((cause, after)),
            None => tally.never_told += 1,
        }
        drop(guard);
    }
    if let Ok(guard) = second_result {
        let _ = guard.release().await;
    }
    taken_after_rejoin(&second, key, timings.ttl, tally).await;
    tally.failovers += 1;
}

/// Counts what the two clients of a failover were told: a double grant is two holders
/// neither of which had been told of a loss.
pub fn judge(
    first: &Result<LockGuard, LockError>,
    second: &Result<LockGuard, LockError>,
    tally: &mut Tally,
) {
    match first {
        Ok(_) => tally.first_granted += 1,
        Err(err) => tally.first_refused.push(kind(err)),
    }
    match (first, second) {
        (Ok(first_guard), Ok(second_guard)) => {
            if first_guard.is_lost() {
                tally.told_before_the_second += 1;
            } else if !second_guard.is_lost() {
                tally.double_grants += 1;
            }
        }
        (_, Err(err)) => tally.second_refused.push(kind(err)),
        (Err(_), Ok(_)) => {}
    }
}

/// The option goes on working after the failover: once the old primary rejoined (the new
/// primary has a replica again), `client` takes and releases `key`; panics when it cannot.
///
/// It waits up to the ttl and a second: a grant the replicas did not confirm is undone
/// when the undo reaches the server in time, and otherwise expires by its ttl (seen once
/// beside busy loops in a cluster, whose slots were still moving). A take that needed
/// more than 2 s is printed.
pub async fn taken_after_rejoin(client: &LockClient, key: &str, ttl: Duration, tally: &mut Tally) {
    let started = Instant::now();
    let again = client
        .lock(key)
        .ttl(ttl)
        .wait(ttl + Duration::from_secs(1))
        .acquire()
        .await;
    match again {
        Ok(guard) => {
            if started.elapsed() > Duration::from_secs(2) {
                eprintln!(
                    "after the old primary rejoined, `{key}` was taken after {:?} (a grant \
                     left to expire)",
                    started.elapsed()
                );
            }
            guard.release().await.unwrap();
            tally.after_rejoin += 1;
        }
        Err(err) => panic!("after the old primary rejoined, `{key}` could not be taken: {err}"),
    }
}

/// What a trial is called in its figures, and how many failovers it runs.
pub struct Plan {
    /// The figures' label: lines start with `FIGURE {label}:`.
    pub label: &'static str,
    /// What one failover is called ("sentinel failovers").
    pub failovers: &'static str,
    /// What the time a failover took measures ("kill to promotion").
    pub took: &'static str,
    /// The keys' prefix (a hash tag in a cluster).
    pub key_prefix: &'static str,
    /// Failovers per mode at most.
    pub max: usize,
    /// The time a mode may start new failovers in.
    pub budget: Duration,
}

/// Runs failovers on the deployment `start` builds, with `wait_for_replicas` when
/// `replicas`, until the plan's count or budget; prints the figures and returns the tally.
pub async fn run<T: Trial>(
    start: impl FnOnce() -> T,
    replicas: bool,
    timings: &Timings,
    plan: &Plan,
) -> Tally {
    let mut trial = tokio::task::block_in_place(start);
    let mut tally = Tally::default();
    let started = Instant::now();
    while tally.failovers < plan.max && started.elapsed() < plan.budget {
        let key = format!("{}:{}", plan.key_prefix, uuid::Uuid::new_v4().simple());
        one_failover(&mut trial, (&key, replicas), timings, &mut tally).await;
    }
    let mode = if replicas {
        "with wait_for_replicas(1, 100 ms)"
    } else {
        "without the option"
    };
    report(plan, mode, &tally, (started.elapsed(), timings.ttl));
    tally
}

/// The median, the smallest and the largest of `durations` (none when empty).
fn spread(mut durations: Vec<Duration>) -> Option<(Duration, Duration, Duration)> {
    durations.sort();
    let (first, last) = (durations.first()?, durations.last()?);
    Some((*first, durations[durations.len() / 2], *last))
}

/// Prints a trial's figures.
fn report(plan: &Plan, mode: &str, tally: &Tally, (elapsed, ttl): (Duration, Duration)) {
    let figure = |text: String| println!("FIGURE {}: {mode}: {text}", plan.label);
    if let Some((min, median, max)) = spread(tally.took.clone()) {
        figure(format!(
            "{} {} in {:.1} s ({}: min {min:?}, median {median:?}, max {max:?}); first client \
             granted {}; double grants {} (the first holder told before the second's grant: {})",
            tally.failovers,
            plan.failovers,
            elapsed.as_secs_f64(),
            plan.took,
            tally.first_granted,
            tally.double_grants,
            tally.told_before_the_second,
        ));
    }
    let told = tally.lost.iter().map(|(_, after)| *after).collect();
    if let Some((min, median, max)) = spread(told) {
        let causes = tally.lost.iter().map(|(cause, _)| format!("{cause:?}"));
        figure(format!(
            "the first holder was told {} (never told within the ttl: {}), after the second's \
             grant: min {min:?}, median {median:?}, max {max:?} (ttl {ttl:?})",
            summary(causes.collect()),
            tally.never_told,
        ));
    }
    figure(format!(
        "the first client was refused: [{}]; the second: [{}]; the key taken again after the \
         old primary rejoined: {}; the replica put back on the link: {}; failovers the \
         deployment made on its own: {}",
        summary(tally.first_refused.clone()),
        summary(tally.second_refused.clone()),
        tally.after_rejoin,
        tally.relinked,
        tally.unplanned,
    ));
}

/// The verdict of a trial run without the option and with it: enough failovers in each,
/// double grants without the option (the trial still produces the failure), none with it.
pub fn assert_the_option_prevents_double_grants(without: &Tally, with: &Tally) {
    assert!(
        without.failovers >= 3 && with.failovers >= 3,
        "too few failovers fit in the budget: {without:?} {with:?}"
    );
    assert!(
        without.double_grants > 0,
        "no double grant without the option: the test no longer produces the failure: \
         {without:?}"
    );
    assert_eq!(
        with.double_grants, 0,
        "double grants with the option on: {with:?}"
    );
}
