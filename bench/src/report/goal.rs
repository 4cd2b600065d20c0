//! A goal, whether the run met it, and the table that lists goals with their verdicts.

use std::fmt::Write as _;

use serde::Serialize;

/// One goal and whether this run meets it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Goal {
    pub(super) goal: String,
    pub(super) met: Option<bool>,
    /// Measured, but the run-to-run noise was too wide to decide.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) inconclusive: bool,
    pub(super) detail: String,
}

/// A goal this run did not measure.
pub(super) fn not_measured(goal: &str) -> Goal {
    Goal {
        goal: goal.into(),
        met: None,
        inconclusive: false,
        detail: "not measured in this run".into(),
    }
}

/// A goals table: its heading, then one row per goal with its verdict.
pub(super) fn goal_table(out: &mut String, title: &str, goals: &[Goal]) {
    let _ = writeln!(out, "## {title}\n");
    let _ = writeln!(out, "| goal | verdict | measured |\n|---|---|---|");
    for goal in goals {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            goal.goal,
            verdict(goal),
            goal.detail
        );
    }
    let _ = writeln!(out);
}

fn verdict(goal: &Goal) -> &'static str {
    match goal.met {
        Some(true) => "**met**",
        Some(false) => "**missed**",
        None if goal.inconclusive => "**inconclusive**",
        None => "not measured",
    }
}
