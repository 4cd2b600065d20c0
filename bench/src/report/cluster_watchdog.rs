//! Section 4b of BENCHMARKS.md: the watchdog of one holder of 10,000 leases on a
//! three-master Redis Cluster, per master and for the holder.

use std::fmt::Write as _;

use super::goal::Goal;
use super::results::Results;
use crate::cluster::{self, ClusterWatchdogRecord};
use crate::figures::{median, thousands};

/// The section, for BENCHMARKS.md (and, after a `BENCH_ONLY=cluster-watchdog` run,
/// `bench/results/cluster-watchdog.md`).
pub(crate) fn section(out: &mut String, results: &Results) {
    let records = &results.cluster_watchdog;
    let masters = records.first().map_or(3, |r| r.masters.len());
    let _ = writeln!(
        out,
        "## 4b. Watchdog of a cluster holder, {masters} masters\n"
    );
    let _ = writeln!(
        out,
        "`bench/run` starts {masters} more throwaway redis-servers (loopback, no persistence) with \
         `cluster-enabled yes` and joins them with `redis-cli --cluster create \
         --cluster-replicas 0`. One client, `LockClient::new(Config::cluster(urls))`, acquires \
         {} keys `bench:held:{{n}}` (their hash tags spread them over every master) with ttl \
         {:.0} s, so its watchdog renews them every ttl/3 = {:.0} s; one renewal round passes, \
         then a window of {:.0} s is measured, once per run (each with a client of its own). \
         Per master, over the window: *read events/s* is `INFO stats` \
         `total_reads_processed` (one per request the server reads, or per chunk of a \
         pipeline: what sending one pipeline per master per round saves against one request \
         per lease), *commands/s* is `total_commands_processed` (commands inside Lua \
         included), *redis-server CPU* is `INFO cpu` `used_cpu_user + used_cpu_sys` as a \
         share of one core. The holder's CPU is this process's (`getrusage`) over the same \
         window; *lost* counts the guards whose `is_lost()` was true at its end. Medians over \
         the runs (alone: `BENCH_ONLY={} bench/run`, which writes \
         `bench/results/{}.md`).\n",
        thousands(cluster::LOCKS as f64),
        cluster::TTL.as_secs_f64(),
        cluster::TTL.as_secs_f64() / 3.0,
        cluster::WINDOW.as_secs_f64(),
        cluster::NAME,
        cluster::NAME,
    );
    if records.is_empty() {
        let _ = writeln!(out, "Not measured in this run.\n");
        return;
    }
    table(out, records, masters);
}

fn table(out: &mut String, records: &[ClusterWatchdogRecord], masters: usize) {
    let _ = writeln!(
        out,
        "| master | keys held | read events/s | commands/s | redis-server CPU (share of a core) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    let of = |i: usize, value: fn(&cluster::MasterRecord) -> f64| {
        median(records.iter().filter_map(|r| r.masters.get(i)).map(value))
    };
    for i in 0..masters {
        let _ = writeln!(
            out,
            "| master {} | {} | {:.1} | {} | {:.1} % |",
            i + 1,
            thousands(of(i, |m| m.keys as f64)),
            of(i, |m| m.reads_per_s),
            thousands(of(i, |m| m.commands_per_s)),
            100.0 * of(i, |m| m.cpu_share)
        );
    }
    let total = |value: fn(&cluster::MasterRecord) -> f64| {
        median(records.iter().map(|r| r.masters.iter().map(value).sum()))
    };
    let _ = writeln!(
        out,
        "| all {masters} masters | {} | {:.1} | {} | {:.1} % |\n",
        thousands(total(|m| m.keys as f64)),
        total(|m| m.reads_per_s),
        thousands(total(|m| m.commands_per_s)),
        100.0 * total(|m| m.cpu_share)
    );
    let lost: u64 = records.iter().map(|r| r.lost).sum();
    let _ = writeln!(
        out,
        "The holder: {:.1} % of a core over the window (median; range {:.1}–{:.1} %), all \
         {} leases acquired in {:.2} s (median), {lost} leases lost over {} runs.\n",
        100.0 * median(records.iter().map(|r| r.client_cpu_share)),
        100.0
            * records
                .iter()
                .map(|r| r.client_cpu_share)
                .fold(f64::INFINITY, f64::min),
        100.0
            * records
                .iter()
                .map(|r| r.client_cpu_share)
                .fold(0.0, f64::max),
        thousands(cluster::LOCKS as f64),
        median(records.iter().map(|r| r.acquire_s)),
        records.len()
    );
}

/// The rows of "Goals: cost at scale" for section 4b: no lease lost, and each master's
/// CPU for the renewals bounded.
pub(super) fn goals(results: &Results) -> Vec<Goal> {
    let records = &results.cluster_watchdog;
    let Some(first) = records.first() else {
        return Vec::new();
    };
    let masters = first.masters.len();
    let held = format!(
        "{} leases held by one process on a {masters}-master cluster",
        thousands(cluster::LOCKS as f64)
    );
    let lost: u64 = records.iter().map(|r| r.lost).sum();
    let busiest = (0..masters)
        .map(|i| {
            median(
                records
                    .iter()
                    .filter_map(|r| r.masters.get(i))
                    .map(|m| m.cpu_share),
            )
        })
        .fold(0.0, f64::max);
    vec![
        Goal {
            goal: format!("{held}: none lost"),
            met: Some(lost == 0),
            inconclusive: false,
            detail: format!(
                "{lost} lost over {} runs (`is_lost()` after {:.0} s of renewals, one round \
                 every {:.0} s). Section 4b.",
                records.len(),
                cluster::WINDOW.as_secs_f64(),
                cluster::TTL.as_secs_f64() / 3.0
            ),
        },
        Goal {
            goal: format!("{held}: their renewals cost each master at most 5 % of a core"),
            met: Some(busiest <= 0.05),
            inconclusive: false,
            detail: format!(
                "the busiest master {:.1} % of a core (`INFO cpu` user + system over {:.0} s, \
                 median over the runs), {:.0} read events/s; the holder {:.1} %. Section 4b.",
                100.0 * busiest,
                cluster::WINDOW.as_secs_f64(),
                median(
                    records.iter().map(|r| r
                        .masters
                        .iter()
                        .map(|m| m.reads_per_s)
                        .fold(0.0, f64::max))
                ),
                100.0 * median(records.iter().map(|r| r.client_cpu_share))
            ),
        },
    ]
}

#[cfg(test)]
mod tests {
    use crate::report::document::tests::report;
    use crate::report::results::Results;

    /// A cluster holder's run: 10,000 leases over 3 masters, one pipeline per master and
    /// round, none lost.
    fn cluster_results() -> Results {
        let mut results = Results::empty();
        let master = |port: u16, keys: u64| crate::cluster::MasterRecord {
            address: format!("127.0.0.1:{port}"),
            keys,
            reads_per_s: 2.0,
            commands_per_s: 6_700.0,
            cpu_share: 0.05,
        };
        results
            .cluster_watchdog
            .push(crate::cluster::ClusterWatchdogRecord {
                run: 0,
                locks: 10_000,
                ttl_ms: 3_000,
                acquire_s: 0.4,
                window_s: 6.0,
                masters: vec![
                    master(7000, 3_300),
                    master(7001, 3_400),
                    master(7002, 3_300),
                ],
                client_cpu_share: 0.02,
                lost: 0,
            });
        results
    }

    #[test]
    fn a_full_report_writes_the_cluster_watchdog_after_section_4() {
        let text = report(&cluster_results());
        let heading = "## 4b. Watchdog of a cluster holder, 3 masters";
        let at = text
            .find(heading)
            .unwrap_or_else(|| panic!("no {heading:?}:\n{text}"));
        assert!(at > text.find("## 4. Watchdog at scale").unwrap_or(usize::MAX));
        assert!(at < text.find("## 5. ").unwrap_or(0));
        assert!(
            text.contains("| all 3 masters | 10,000 | 6.0 | 20,100 | 15.0 % |"),
            "no total row:\n{text}"
        );
        assert!(text.contains("BENCH_ONLY=cluster-watchdog"));
        let goals = super::goals(&cluster_results());
        let verdicts: Vec<(&str, Option<bool>)> =
            goals.iter().map(|g| (g.goal.as_str(), g.met)).collect();
        assert_eq!(
            verdicts,
            [
                (
                    "10,000 leases held by one process on a 3-master cluster: none lost",
                    Some(true)
                ),
                (
                    "10,000 leases held by one process on a 3-master cluster: their renewals cost each master at most 5 % of a core",
                    Some(true)
                ),
            ]
        );
    }
}
