//! Section 11's report: its goal rows and its section of BENCHMARKS.md.

use std::time::Duration;

use super::case::holder_ttl;
use super::driver::PEER_TAP;
use super::record::WaitRecord;
use crate::contenders::Contender;

/// The goal of waiting at scale: 10,000 waiting keys in one process cost at most this many
/// requests per second in all ...
const GOAL_REQUESTS_PER_S: f64 = 10.0;

/// ... and at most this share of a server core.
const GOAL_SERVER_CORE: f64 = 0.05;

/// The waiting keys at which the goal is judged.
const GOAL_KEYS: u64 = 10_000;

/// One row of the goal table, as the report writes it.
pub(crate) struct GoalRow {
    /// The goal.
    pub(crate) goal: String,
    /// Met, missed, or not measured (`None`).
    pub(crate) met: Option<bool>,
    /// What was measured.
    pub(crate) detail: String,
}

fn find(
    records: &[WaitRecord],
    contender: Contender,
    keys: u64,
    processes: u64,
) -> Option<&WaitRecord> {
    records.iter().find(|r| {
        r.contender() == Some(contender)
            && !r.semaphore
            && r.keys == keys
            && r.processes == processes
    })
}

/// The goals of waiting at scale: 10,000 waiting keys in one process cost at most 10
/// requests per second and at most 5 % of a server core.
pub(crate) fn goal_rows(records: &[WaitRecord]) -> Vec<GoalRow> {
    let ours = find(records, Contender::Api, GOAL_KEYS, 1);
    let peers = peer_rates(records);
    let Some(ours) = ours else {
        return ["requests", "server CPU"]
            .into_iter()
            .map(|what| GoalRow {
                goal: format!("10,000 waiting keys in one process: {what}"),
                met: None,
                detail: "not measured in this run".to_owned(),
            })
            .collect();
    };
    vec![
        GoalRow {
            goal: format!(
                "10,000 waiting keys in one process cost at most {GOAL_REQUESTS_PER_S} requests per second"
            ),
            met: Some(ours.requests_per_s() <= GOAL_REQUESTS_PER_S),
            detail: format!(
                "{:.1} requests/s in all ({:.4} per waiter; MONITOR over {:.1} s, the holders' process's liveness refresh included); {:.1} commands/s counting those run inside scripts ({:.1} script calls/s). Section 11.{peers}",
                ours.requests_per_s(),
                ours.requests_per_s() / ours.keys as f64,
                ours.tap_s,
                ours.commands_per_s(),
                ours.script_calls_per_s()
            ),
        },
        GoalRow {
            goal: format!(
                "10,000 waiting keys in one process cost at most {:.0} % of a server core",
                GOAL_SERVER_CORE * 100.0
            ),
            met: Some(ours.server_core() <= GOAL_SERVER_CORE),
            detail: format!(
                "redis-server {:.1} % of a core (`INFO cpu` user + system over {:.1} s); the waiting process {:.1} %. Section 11.",
                ours.server_core() * 100.0,
                ours.window_s,
                ours.client_core() * 100.0
            ),
        },
    ]
}

/// The polling peers' requests per waiter per second at their most keys in one process, as
/// a sentence for the goal's detail (empty when no peer was measured).
fn peer_rates(records: &[WaitRecord]) -> String {
    let rates = [Contender::RedisPy, Contender::Rslock]
        .into_iter()
        .filter_map(|peer| {
            records
                .iter()
                .filter(|r| r.contender() == Some(peer) && r.processes == 1)
                .max_by_key(|r| r.keys)
                .map(|r| {
                    format!(
                        "{} at {}: {:.2} requests per waiter per second",
                        peer.label(),
                        crate::figures::thousands(r.keys as f64),
                        r.requests_per_s() / r.keys as f64
                    )
                })
        })
        .collect::<Vec<_>>();
    if rates.is_empty() {
        String::new()
    } else {
        format!(" The polling peers: {}.", rates.join("; "))
    }
}

/// Section 11 of BENCHMARKS.md.
pub(crate) fn section(out: &mut String, records: &[WaitRecord], window_s: f64) {
    use std::fmt::Write as _;
    if records.is_empty() {
        return;
    }
    let ttl = holder_ttl(Duration::from_secs_f64(window_s)).as_secs_f64();
    let _ = writeln!(out, "## 11. What waiting costs\n");
    let _ = writeln!(
        out,
        "N keys held by our lock (a client of the bench's own process, ttl {ttl:.0} s, its \
         watchdog renewing them; for a peer, whose waiters do not queue, without renewals), one waiter on each key in a child process (or spread over 4), \
         waiting as a user would: ours `client.lock(key).wait(600s).acquire()` (our semaphore's \
         rows: each key a semaphore of one permit, held by the bench's client, and \
         `client.semaphore(key, 1).wait(600s).acquire()`), rslock's \
         `LockManager::acquire` (it polls: 3 tries 0–200 ms apart, then again), redis-py's \
         `redis.asyncio` `Lock.acquire(blocking=True)` (it polls every 0.1 s, one connection \
         per waiter). The polling peers wait on 1,000 keys: at 10,000 the poller's own \
         process is the limit, not the library (rslock measured 1.6 requests per waiter per \
         second there against 27 at 1,000, its process at 67 % of a core of the 2; one Python \
         process cannot poll 10,000 locks ten times a second). The counters are read over a \
         window of up to {window_s:.0} s once every waiter has queued; for ours the window lies \
         between the holders' first renewal (which notes them for the waiters, so that they \
         park) and their second, so the renewals fall outside it and what is counted is the \
         processes' liveness refreshes (the waiters' and the holders').\n"
    );
    table(out, records);
    let _ = writeln!(
        out,
        "\nRequests sent are counted by a `MONITOR` tap (commands run inside Lua not counted): \
         for ours over the window itself (a few commands a second cost the tap nothing); for a \
         peer the tap listens over a {:.0} s pass after its window (it slows the server, so \
         the window whose CPU is counted runs without it) and gives the share of the window's \
         commands that were sent rather than run inside Lua. Commands come from `INFO commandstats` \
         (commands run inside scripts counted, as the goal counts them); CPU is `INFO cpu` \
         (`used_cpu_sys + used_cpu_user`) and the children's `getrusage`, over the window. \
         \"acquired\": waiters that got their key while it was held (must be 0).\n",
        PEER_TAP.as_secs_f64()
    );
}

/// Section 11's table: one row a case.
fn table(out: &mut String, records: &[WaitRecord]) {
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "| waiters | keys | processes | requests sent/s | per waiter per s | commands/s, Lua included | script calls/s | redis-server, % of a core | waiting clients, % of a core | window | acquired |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in records {
        let label = r.label();
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {:.1} | {:.4} | {} | {} | {:.1} % | {:.1} % | {:.1} s | {} |",
            crate::figures::thousands(r.keys as f64),
            r.processes,
            r.requests_per_s(),
            r.requests_per_s() / r.keys as f64,
            crate::figures::thousands(r.commands_per_s()),
            crate::figures::thousands(r.script_calls_per_s()),
            r.server_core() * 100.0,
            r.client_core() * 100.0,
            r.window_s,
            r.acquired
        );
    }
}
