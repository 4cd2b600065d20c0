//! The goals of speed against the raw limit and the peers: the uncontended cycle and many
//! keys against raw, the hot key against the best peer, the attribute against the API.

use std::fmt::Write as _;

use super::goal::Goal;
use super::results::Results;
use super::summaries::{CycleSummary, HotSummary, find};
use crate::contenders::Contender;
use crate::figures::{median, ms, thousands};
use crate::scenarios::CycleRecord;

/// Why a contender's cycle is slower than raw's, from the measured costs per cycle.
fn cycle_gap(ours: &CycleSummary, raw: &CycleSummary) -> String {
    let mut why = format!(
        " Both make two round trips per cycle, so the gap is work per cycle, which a loop \
         waiting on its own replies pays in full on 2 cores shared by client and server: \
         client CPU {:.1} µs vs {:.1} µs, server {:.1} µs vs {:.1} µs ({:.1} vs {:.1} server \
         commands, Lua included)",
        ours.client_cpu_us_per_cycle,
        raw.client_cpu_us_per_cycle,
        ours.server_us_per_cycle,
        raw.server_us_per_cycle,
        ours.server_cmds_per_cycle,
        raw.server_cmds_per_cycle,
    );
    if let (Some(a), Some(b)) = (
        ours.client_switches_per_cycle,
        raw.client_switches_per_cycle,
    ) {
        let _ = write!(why, ", {a:.1} vs {b:.1} thread switches");
    }
    why.push('.');
    if ours
        .client_switches_per_cycle
        .zip(raw.client_switches_per_cycle)
        .is_some_and(|(a, b)| a > b + 1.0)
    {
        why.push_str(
            " The extra thread switches come from a task woken on the other worker thread \
             for every cycle (see \"Findings\" below).",
        );
    }
    if ours.server_us_per_cycle > 1.5 * raw.server_us_per_cycle {
        why.push_str(
            " On the server, ours sends the same SET NX PX and one script, but its release \
             script also looks at the wait queue (EXISTS) for a waiter to hand the lock to.",
        );
    }
    why
}

pub(super) fn speed_goals(
    results: &Results,
    uncontended: &[CycleSummary],
    many: &[CycleSummary],
    hot: &[HotSummary],
) -> Vec<Goal> {
    let mut goals = against_raw_goals(uncontended, many);
    goals.extend(hot_key_goals(results, hot));
    goals.extend(attribute_goals(results));
    goals
}

/// The uncontended cycle and many keys, ours against raw.
fn against_raw_goals(uncontended: &[CycleSummary], many: &[CycleSummary]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let raw_of = |list: &[CycleSummary]| find(list, Contender::Raw, |s| s.contender).cloned();
    for (name, list, bound) in [
        ("Uncontended cycle", uncontended, 0.95),
        ("Many keys (256 tasks)", many, 0.90),
    ] {
        let raw = raw_of(list);
        for contender in [Contender::Attribute, Contender::Api] {
            let Some(ours) = find(list, contender, |s| s.contender) else {
                goals.push(Goal {
                    inconclusive: false,
                    goal: format!("{name}: {} at least {bound:.2}× raw", contender.label()),
                    met: None,
                    detail: "not measured in this run".into(),
                });
                continue;
            };
            let ratio = ours.ratio_to_raw.unwrap_or(0.0);
            let met = ratio >= bound;
            let mut detail = format!(
                "{:.2}× raw ({} vs {} cycles/s, medians; the median of the per-run ratios is \
                 {:.2}×).",
                ratio,
                thousands(ours.per_s),
                thousands(raw.as_ref().map_or(0.0, |r| r.per_s)),
                ours.paired_ratio.unwrap_or(0.0)
            );
            if let (false, Some(raw)) = (met, &raw) {
                detail.push_str(&cycle_gap(ours, raw));
            }
            goals.push(Goal {
                inconclusive: false,
                goal: format!("{name}: {} at least {bound:.2}× raw", contender.label()),
                met: Some(met),
                detail,
            });
        }
    }
    goals
}

/// The hot key: ours against the best peer, its waits against the fair bound and its
/// requests per acquisition.
fn hot_key_goals(results: &Results, hot: &[HotSummary]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let tasks = results.settings.hot_tasks as f64;
    let best_peer = hot
        .iter()
        .filter(|s| !matches!(s.contender, Contender::Api | Contender::Attribute))
        .max_by(|a, b| a.per_s.total_cmp(&b.per_s));
    if let Some(ours) = find(hot, Contender::Api, |s| s.contender) {
        let fair = tasks * ours.mean_hold_us;
        goals.push(best_peer_goal(ours, best_peer));
        goals.push(Goal {
            inconclusive: false,
            goal: "Hot key: p99 wait at most 2 × (contenders × mean hold)".into(),
            met: Some(ours.p99_us <= 2.0 * fair),
            detail: format!(
                "p99 {} vs bound {} (64 × {} mean hold × 2).",
                ms(ours.p99_us),
                ms(2.0 * fair),
                ms(ours.mean_hold_us)
            ),
        });
        goals.push(Goal {
            inconclusive: false,
            goal: "Hot key: max wait at most 3 × (contenders × mean hold)".into(),
            met: Some(ours.max_us <= 3.0 * fair),
            detail: format!("max {} vs bound {}.", ms(ours.max_us), ms(3.0 * fair)),
        });
        goals.push(requests_goal(ours));
    }
    goals
}

/// Hot key: ours against the best peer's acquisitions per second.
fn best_peer_goal(ours: &HotSummary, best_peer: Option<&HotSummary>) -> Goal {
    match best_peer {
        Some(peer) => Goal {
            inconclusive: false,
            goal: "Hot key: acquisitions/s at least the best peer's".into(),
            met: Some(ours.per_s >= peer.per_s),
            detail: format!(
                "ours {:.0}/s, best peer {} {:.0}/s ({:.2}×).{}",
                ours.per_s,
                peer.contender.label(),
                peer.per_s,
                ours.per_s / peer.per_s.max(1e-9),
                if ours.per_s >= peer.per_s {
                    String::new()
                } else {
                    format!(
                        " A fair hand-over passes the lock to another task: the release \
                         reaches Redis, the grant message reaches the waiter's process and \
                         wakes its task, which the peers skip when the releasing task \
                         takes the lock straight back ({:.0}% of their acquisitions); \
                         ours holds {:.2} ms per acquisition against their {:.2} ms \
                         (redis-py's sleep is closer to the 1 ms asked).",
                        peer.same_task_share * 100.0,
                        ours.mean_hold_us / 1e3,
                        peer.mean_hold_us / 1e3
                    )
                }
            ),
        },
        None => Goal {
            inconclusive: false,
            goal: "Hot key: acquisitions/s at least the best peer's".into(),
            met: None,
            detail: "no peer measured".into(),
        },
    }
}

/// Hot key: requests sent per acquisition (a MONITOR tap).
fn requests_goal(ours: &HotSummary) -> Goal {
    match ours.requests_per_acq {
        Some(requests) => Goal {
            inconclusive: false,
            goal: "Hot key: at most 3 requests sent per acquisition".into(),
            met: Some(requests <= 3.0),
            detail: format!(
                "{requests:.2} requests sent per acquisition (MONITOR, commands inside Lua \
                 not counted: {:.2} script calls (FCALL or EVALSHA) + {:.2} SUBSCRIBE/UNSUBSCRIBE per acquisition); \
                 commandstats counts {:.1} server commands per acquisition including \
                 those run inside the scripts.{}",
                ours.evalsha_per_acq,
                ours.subscribe_per_acq,
                ours.server_cmds_per_acq,
                if requests <= 3.0 {
                    ""
                } else {
                    " A hand-over takes 3 requests by design (the waiter's queueing \
                     try, its try when woken, the holder's release: see Findings); the \
                     rest is the 64 waiters' first tries, subscription and give-ups at \
                     the edges of the window."
                }
            ),
        },
        None => Goal {
            inconclusive: false,
            goal: "Hot key: at most 3 requests sent per acquisition".into(),
            met: None,
            detail: "no MONITOR tap (REDIS_URL with credentials)".into(),
        },
    }
}

/// Attribute against API: per-run ratios of neighbours in time (the two run one after the
/// other in every rotation but one), so machine-load drift cancels out.
fn attribute_goals(results: &Results) -> Vec<Goal> {
    [
        ("uncontended", &results.uncontended),
        ("256 keys", &results.many_keys),
    ]
    .into_iter()
    .map(|(name, records)| attribute_goal(name, &attribute_ratios(records, results.settings.runs)))
    .collect()
}

/// Attribute over API throughput, per run in which both were measured.
fn attribute_ratios(records: &[CycleRecord], runs: usize) -> Vec<f64> {
    (0..runs)
        .filter_map(|run| {
            let of = |c: Contender| {
                records
                    .iter()
                    .find(|r| r.run == run && r.contender == c)
                    .map(|r| r.per_s)
            };
            Some(of(Contender::Attribute)? / of(Contender::Api)?.max(1e-9))
        })
        .collect()
}

/// Whether the attribute costs nothing measurable over the API, from the per-run `ratios`.
fn attribute_goal(name: &str, ratios: &[f64]) -> Goal {
    let goal = format!("Attribute costs nothing measurable over the API ({name})");
    if ratios.is_empty() {
        return Goal {
            inconclusive: false,
            goal,
            met: None,
            detail: "the attribute was not measured".into(),
        };
    }
    let ratio = median(ratios.iter().copied());
    let spread = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        - ratios.iter().copied().fold(f64::INFINITY, f64::min);
    // Within noise: no more than 5% slower, or inside half the run-to-run spread; a
    // spread over ±10% cannot show a difference that small either way.
    let tolerance = 0.05f64.max(spread / 2.0);
    let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    let listed = format!(
        "attribute/API per run: {} (median {ratio:.2})",
        listed.join(", ")
    );
    if tolerance > 0.10 {
        return Goal {
            goal,
            met: None,
            inconclusive: true,
            detail: format!(
                "{listed}. The runs disagree by ±{:.0}%, too much to show or rule out a \
                 cost of a few percent: other work on the machine moved them (see the load \
                 average and the ranges below).",
                tolerance * 100.0
            ),
        };
    }
    let met = ratio >= 1.0 - tolerance;
    Goal {
        goal,
        met: Some(met),
        inconclusive: false,
        detail: format!(
            "{listed}; counted as noise: ±{:.0}%.{}",
            tolerance * 100.0,
            if met {
                ""
            } else {
                " The attribute adds a task-local scope, a tracing span and a select on \
                 the lost signal around the same acquire and release."
            }
        ),
    }
}
