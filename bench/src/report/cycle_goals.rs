//! The goals of the common path in BENCHMARKS.md: the uncontended cycle and 256 tasks on
//! distinct keys against the raw limit and rslock, the client's CPU and instructions, and
//! the server's time and commands per cycle. A missed goal names what the profile showed
//! and what would close it.

use super::goal::{Goal, not_measured};
use super::summaries::{CycleSummary, InstructionSummary, find};
use crate::contenders::Contender;
use crate::figures::thousands;

/// The common path's goals, in the order BENCHMARKS.md lists them.
pub(super) fn cycle_goals(
    uncontended: &[CycleSummary],
    many: &[CycleSummary],
    counted: &[InstructionSummary],
) -> Vec<Goal> {
    let why = profile_note(counted);
    vec![
        one_task_goal(uncontended, &why),
        many_keys_goal(many, &why),
        client_cpu_goal(many, &why),
        instructions_goal(counted),
        server_time_goal(uncontended),
        server_commands_goal(uncontended),
    ]
}

/// One contender's summary.
fn cycle_of(of: &[CycleSummary], contender: Contender) -> Option<&CycleSummary> {
    find(of, contender, |c| c.contender)
}

/// What the profile shows of the uncontended cycle's client cost, for a missed goal.
fn profile_note(counted: &[InstructionSummary]) -> String {
    let instructions = |contender| {
        find(counted, contender, |c: &InstructionSummary| c.contender).map(|c| c.per_cycle)
    };
    match (instructions(Contender::Api), instructions(Contender::Raw)) {
        (Some(ours), Some(raw)) if raw > 0.0 => format!(
            " Profile: our cycle runs {} instructions on the client to raw's {} ({:.2}×, \
             section 6). A task alone on its key takes it with one SET NX PX, without the \
             local queue (bench/HISTORY.md, section 26). What is left over raw is the lock's \
             own work: the key's names (about 0.9k instructions), its lease on the watchdog \
             (about 0.7k to put it on, and its removal at the release), and the guard (about \
             0.9k with its drop). On the server the release is one call of the library's \
             release function (FCALL; section 25), short form (two keys, one argument), \
             which runs GET, EXISTS and DEL. Measured next steps: a lease that joins the \
             watchdog's schedule only when its first renewal comes due (most uncontended \
             holds end before), and the 4-command release below (0.44 µs of the server's \
             cycle, section 23).",
            thousands(ours),
            thousands(raw),
            ours / raw
        ),
        _ => String::new(),
    }
}

/// Ours (`contender`) against raw and rslock in `of`: (to raw, to rslock, cycles/s of ours,
/// of raw, of rslock, the median per-run ratio to raw).
fn ratios(of: &[CycleSummary], contender: Contender) -> Option<(f64, f64, String)> {
    let ours = cycle_of(of, contender)?;
    let raw = cycle_of(of, Contender::Raw)?;
    let theirs = cycle_of(of, Contender::Rslock)?;
    let to_raw = ours.per_s / raw.per_s.max(1e-9);
    let to_rslock = ours.per_s / theirs.per_s.max(1e-9);
    let detail = format!(
        "{to_raw:.2}× raw, {to_rslock:.2}× rslock ({:.0} vs {:.0} and {:.0} cycles/s, medians; \
         the median of the per-run ratios to raw is {})",
        ours.per_s,
        raw.per_s,
        theirs.per_s,
        ours.paired_ratio
            .map_or("–".to_owned(), |r| format!("{r:.2}×")),
    );
    Some((to_raw, to_rslock, detail))
}

/// The Lock API and the attribute both at least `to_raw` × raw and `to_rslock` × rslock.
fn both_at_least(
    goal: &str,
    of: &[CycleSummary],
    (to_raw, to_rslock): (f64, f64),
    why: &str,
) -> Goal {
    let (Some(api), Some(attribute)) =
        (ratios(of, Contender::Api), ratios(of, Contender::Attribute))
    else {
        return not_measured(goal);
    };
    let met = [&api, &attribute]
        .iter()
        .all(|(raw, rslock, _)| *raw >= to_raw && *rslock >= to_rslock);
    Goal {
        goal: goal.into(),
        met: Some(met),
        inconclusive: false,
        detail: format!(
            "Lock API {}; #[distributed_lock] {}.{}",
            api.2,
            attribute.2,
            if met { "" } else { why }
        ),
    }
}

fn one_task_goal(uncontended: &[CycleSummary], why: &str) -> Goal {
    let goal = "Uncontended cycle, 1 task: ours (Lock API and attribute) at least 0.95× raw \
                and at least rslock's";
    both_at_least(goal, uncontended, (0.95, 1.0), why)
}

fn many_keys_goal(many: &[CycleSummary], why: &str) -> Goal {
    let goal = "256 tasks on distinct keys: ours (Lock API and attribute) at least 0.90× raw \
                and 1.1× rslock";
    both_at_least(goal, many, (0.90, 1.1), why)
}

fn client_cpu_goal(many: &[CycleSummary], why: &str) -> Goal {
    let goal = "Client CPU per cycle, 256 keys: ours (Lock API) at most 1.25× raw's";
    let (Some(ours), Some(raw)) = (
        cycle_of(many, Contender::Api),
        cycle_of(many, Contender::Raw),
    ) else {
        return not_measured(goal);
    };
    if raw.client_cpu_us_per_cycle <= 0.0 {
        return not_measured(goal);
    }
    let ratio = ours.client_cpu_us_per_cycle / raw.client_cpu_us_per_cycle;
    Goal {
        goal: goal.into(),
        met: Some(ratio <= 1.25),
        inconclusive: false,
        detail: format!(
            "{:.1} µs vs {:.1} µs ({ratio:.2}×; user + system time of the process per cycle).{}",
            ours.client_cpu_us_per_cycle,
            raw.client_cpu_us_per_cycle,
            if ratio <= 1.25 { "" } else { why }
        ),
    }
}

fn instructions_goal(counted: &[InstructionSummary]) -> Goal {
    let goal = "Client instructions per uncontended cycle: ours (Lock API) at most 1.10× raw's";
    let of = |contender| find(counted, contender, |c: &InstructionSummary| c.contender);
    let (Some(ours), Some(raw)) = (of(Contender::Api), of(Contender::Raw)) else {
        return not_measured(goal);
    };
    let ratio = ours.per_cycle / raw.per_cycle.max(1.0);
    Goal {
        goal: goal.into(),
        met: Some(ratio <= 1.10),
        inconclusive: false,
        detail: format!(
            "{} vs {} ({ratio:.3}×; callgrind, section 6).{}",
            thousands(ours.per_cycle),
            thousands(raw.per_cycle),
            if ratio <= 1.10 {
                String::new()
            } else {
                profile_note(counted)
            }
        ),
    }
}

fn server_time_goal(uncontended: &[CycleSummary]) -> Goal {
    let goal = "Server time per uncontended cycle: ours (Lock API) at most 1.15× raw's";
    let (Some(ours), Some(raw)) = (
        cycle_of(uncontended, Contender::Api),
        cycle_of(uncontended, Contender::Raw),
    ) else {
        return not_measured(goal);
    };
    let ratio = ours.server_us_per_cycle / raw.server_us_per_cycle.max(1e-9);
    Goal {
        goal: goal.into(),
        met: Some(ratio <= 1.15),
        inconclusive: false,
        detail: format!(
            "{:.1} µs vs {:.1} µs ({ratio:.2}×; `INFO commandstats`, the commands inside the \
             scripts included).{}",
            ours.server_us_per_cycle,
            raw.server_us_per_cycle,
            if ratio <= 1.15 {
                ""
            } else {
                " Ours runs one command more (the release's EXISTS on the queue, 0.26 µs) \
                 and names two keys where raw's names one (0.18 µs); the rest is the \
                 release's own checks (0.32 µs; bench/HISTORY.md, section 23). See the next \
                 goal."
            }
        ),
    }
}

fn server_commands_goal(uncontended: &[CycleSummary]) -> Goal {
    let goal = "Server commands per uncontended cycle (Lua included): 4, as raw's";
    let Some(ours) = cycle_of(uncontended, Contender::Api) else {
        return not_measured(goal);
    };
    let met = ours.server_cmds_per_cycle <= 4.05;
    Goal {
        goal: goal.into(),
        met: Some(met),
        inconclusive: false,
        detail: format!(
            "{:.1} (`INFO commandstats`).{}",
            ours.server_cmds_per_cycle,
            if met {
                ""
            } else {
                " SET NX PX, then the release (FCALL, or EVALSHA on a server without \
                 Functions), which runs GET, EXISTS and DEL. The EXISTS looks for a queued \
                 waiter to hand the key to. What would close it: a waiter that queues behind \
                 one of our holders marks the lock key itself (its value becomes token + \
                 marker, KEEPTTL), so the GET tells and the common release is GET + DEL, \
                 0.44 µs less per cycle on the server (bench/HISTORY.md, section 23). Not \
                 built: the waiter must not mark a foreign holder's key, which our tokens' \
                 `lr-` prefix now tells apart; every \
                 script that compares a token (release, renew, retake, leave, force_release, \
                 inspect, multi-key, fencing, the read-write lock's writer) would accept the \
                 marked value; and during a rolling upgrade a waiter of an older version, \
                 which does not mark, would be missed by a newer holder's release: it would \
                 wait until its park ends (the holder's ttl at most) and could be overtaken \
                 (section 8)."
            }
        ),
    }
}
