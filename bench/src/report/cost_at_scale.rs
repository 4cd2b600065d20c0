//! The goals of cost at scale: what waiting costs Redis (section 11), a key shared with
//! foreign clients (section 12), the hot key across processes against the two-level
//! queue's bound (section 3b) and, added by the report, the watchdog of a cluster holder.

use super::goal::{Goal, goal_table};
use super::results::Results;
use super::summaries::{HotSummary, find};
use crate::contenders::Contender;
use crate::figures::{median, ms};
use crate::processes::QueueSettings;
use crate::tenures::{Tenures, cohort_worst_wait_us, holds_per_tenure};

/// Every goal of cost at scale this run measured, in the table's order.
pub(super) fn scale_goals(results: &Results, spread: &[HotSummary]) -> Vec<Goal> {
    let mut rows = waiting_goals(results);
    rows.extend(foreign_goals(results));
    rows.extend(cross_process_goals(results, spread));
    rows
}

/// A key shared with foreign clients (section 12).
pub(super) fn foreign_goals(results: &Results) -> Vec<Goal> {
    crate::foreign::goal_rows(&results.foreign)
        .into_iter()
        .map(|(goal, met, detail)| Goal {
            goal,
            met,
            inconclusive: false,
            detail,
        })
        .collect()
}

/// What waiting costs (section 11).
pub(super) fn waiting_goals(results: &Results) -> Vec<Goal> {
    crate::waiting::goal_rows(&results.waiting)
        .into_iter()
        .map(|row| Goal {
            goal: row.goal,
            met: row.met,
            inconclusive: false,
            detail: row.detail,
        })
        .collect()
}

/// The table "Goals: cost at scale".
pub(super) fn scale_goals_table(out: &mut String, goals: &[Goal]) {
    if goals.is_empty() {
        return;
    }
    goal_table(out, "Goals: cost at scale", goals);
}

/// The medians over `results`' runs of ours in scenario 3b of what its tenures show.
fn tenure_medians(results: &Results) -> Option<Tenures> {
    let all: Vec<&Tenures> = results
        .hot_key_processes
        .iter()
        .filter(|r| r.contender == Contender::Api)
        .filter_map(|r| r.tenures.as_ref())
        .collect();
    if all.is_empty() {
        return None;
    }
    let of = |pick: fn(&Tenures) -> f64| median(all.iter().map(|t| pick(t)));
    Some(Tenures {
        count: of(|t| t.count as f64) as u64,
        mean_holds: of(|t| t.mean_holds),
        mean_span_us: of(|t| t.mean_span_us),
        mean_handover_us: of(|t| t.mean_handover_us),
        mean_pass_us: of(|t| t.mean_pass_us),
        longest_idle_us: of(|t| t.longest_idle_us as f64) as u64,
        longest_idle_at_us: of(|t| t.longest_idle_at_us as f64) as u64,
    })
}

/// Why the two-level queue's waits are what they are, from the run's tenures: the
/// model's longest wait for the measured hold, pass and hand-over, against the measured
/// waits.
fn two_level_queue_wait(results: &Results, ours: &HotSummary, t: &Tenures) -> String {
    let s = &results.settings;
    let q = s.hot_processes_queue;
    let (processes, local) = (s.hot_processes, s.hot_tasks_per_process);
    let hold = ours.mean_hold_us;
    let step = hold + t.mean_pass_us;
    let pass_time_us = q.local_pass_time_ms as f64 * 1e3;
    let per_tenure = holds_per_tenure(step, u64::from(q.local_passes), pass_time_us);
    let queue = cohort_worst_wait_us(
        (processes, local),
        hold,
        (u64::from(q.local_passes), pass_time_us),
        (t.mean_handover_us, t.mean_pass_us),
    );
    let next_tenure = (local - 1) as f64 * step
        + (processes - 1) as f64 * (per_tenure as f64 * step + t.mean_handover_us);
    let acquisitions = ours.per_s * s.hot_processes_window_s;
    let tenure = tenure_rule(q, (processes, local), per_tenure);
    let share = ours.tasks as f64 / acquisitions.max(1.0);
    let p99_among = if share > 0.01 {
        "more than 1 %, so the p99 is one of them"
    } else {
        "less than 1 %, so the p99 is not one of them"
    };
    format!(
        "Why: {tenure}. The longest wait the queue promises is (L − 1) × (hold + pass) + \
         (1 + ⌊(L − 1) / T⌋) × (P − 1) × (T × (hold + pass) + hand-over) = {} with the \
         measured hold {}, local pass {} and hand-over between processes {} (medians over the \
         runs: {:.1} holds per tenure, one every {}); a task served in its process's next \
         tenure waits {} (p50 {}). When T ≤ L that is less than 2 × contenders × hold \
         (without the hand-overs at most 2N − L − P holds): the first-come bound covers the \
         queue. What it never covered is the foreign window: the longest time nobody held \
         the key was {}, {:.1} s into the window (once a key has been contended for 1 s, a \
         release leaves it free for clients that do not queue), and it lengthens one wait of \
         every task: {} of the {:.0} acquisitions of a run, {p99_among}; {} + {} = {} at \
         the worst. The single-process hot key meets the old bound only because its waits \
         are one turn ({} × hold) plus the window.",
        ms(queue),
        ms(hold),
        ms(t.mean_pass_us),
        ms(t.mean_handover_us),
        t.mean_holds,
        ms(t.mean_span_us),
        ms(next_tenure),
        ms(ours.p50_us),
        ms(t.longest_idle_us as f64),
        t.longest_idle_at_us as f64 / 1e6,
        ours.tasks,
        acquisitions,
        ms(queue),
        ms(t.longest_idle_us as f64),
        ms(queue + t.longest_idle_us as f64),
        s.hot_tasks.saturating_sub(1),
    )
}

/// How a tenure of the two-level queue ends and what that makes a task wait for, with
/// this run's queue settings `q` when they are not the defaults.
fn tenure_rule(q: QueueSettings, (processes, local): (u64, u64), per_tenure: u64) -> String {
    let ends = 1 + local.saturating_sub(1) / per_tenure.max(1);
    let settings = if q == QueueSettings::defaults() {
        String::new()
    } else {
        format!(
            " (this run's settings, not the defaults: local_passes {}, local_pass_time {} ms, \
             foreign_window {} ms)",
            q.local_passes, q.local_pass_time_ms, q.foreign_window_ms
        )
    };
    if per_tenure < local {
        format!(
            "a tenure ends at the first release {} ms or more after it began, or after {} \
             passes{settings}, so it serves T = {per_tenure} holds while L = {local} tasks of \
             its process queue: a task that held late in a tenure skips its process's next one \
             and waits for {ends} turns of the other P − 1 = {} processes, where a \
             first-come-first-served queue waits for one",
            q.local_pass_time_ms,
            q.local_passes,
            processes - 1
        )
    } else {
        format!(
            "a tenure serves T = {per_tenure} holds{settings}, at least the L = {local} tasks \
             of its process, so every task waits for one turn of the other P − 1 = {} processes",
            processes - 1
        )
    }
}

/// Four processes on a hot key. The first-come bound (2 × contenders × mean hold, the
/// bound of a queue that serves every task once per turn of all) stays visible; beside it,
/// the wait the two-level queue promises for the run's shape and settings.
fn cross_process_goals(results: &Results, spread: &[HotSummary]) -> Vec<Goal> {
    let s = &results.settings;
    let Some(ours) = find(spread, Contender::Api, |h| h.contender) else {
        return Vec::new();
    };
    let (processes, local) = (s.hot_processes, s.hot_tasks_per_process);
    let shape = format!("{processes} processes × {local} tasks");
    let first_come = 2.0 * ours.tasks as f64 * ours.mean_hold_us;
    let mut rows = vec![Goal {
        goal: format!(
            "Hot key, {shape}: p99 wait at most 2 × (contenders × mean hold), the first-come \
             bound (kept for comparison: the bound of a queue that serves every task once per \
             turn of all)"
        ),
        met: Some(ours.p99_us <= first_come),
        inconclusive: false,
        detail: format!(
            "p99 {} vs {} (2 × {} × {}); max {}. The single-process hot key (section 3) meets \
             it: first come first served.",
            ms(ours.p99_us),
            ms(first_come),
            ours.tasks,
            ms(ours.mean_hold_us),
            ms(ours.max_us)
        ),
    }];
    let q = s.hot_processes_queue;
    let window_us = q.foreign_window_ms as f64 * 1e3;
    let corrected = first_come + window_us;
    let mut detail = format!(
        "p99 {}, max {} vs {} = 2 × {} × {} + {} foreign window.",
        ms(ours.p99_us),
        ms(ours.max_us),
        ms(corrected),
        ours.tasks,
        ms(ours.mean_hold_us),
        ms(window_us)
    );
    if let Some(t) = tenure_medians(results) {
        detail.push(' ');
        detail.push_str(&two_level_queue_wait(results, ours, &t));
    }
    rows.push(Goal {
        goal: format!(
            "Hot key, {shape}: p99 wait at most 2 × (contenders × mean hold) + one \
             foreign window (the corrected bound for the two-level queue)"
        ),
        met: Some(ours.p99_us <= corrected),
        inconclusive: false,
        detail,
    });
    rows
}
