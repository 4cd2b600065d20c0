//! A measurement that failed is noted (for "Not measured in this run") and the bench carries
//! on with the others.

use crate::contenders::Contender;

/// Notes a scenario that failed as a whole (and carries on with the others).
pub(crate) fn skip(skipped: &mut Vec<String>, scenario: &str, err: &dyn std::fmt::Display) {
    let note = format!("{scenario}: failed: {err}");
    eprintln!("{note}");
    skipped.push(note);
}

/// Notes a failed measurement (and carries on with the others).
pub(crate) fn failed(
    skipped: &mut Vec<String>,
    run: usize,
    scenario: &str,
    contender: Contender,
    err: &dyn std::fmt::Display,
) {
    let note = format!(
        "run {run}, {scenario}, {}: failed: {err}",
        contender.label()
    );
    eprintln!("{note}");
    skipped.push(note);
}
