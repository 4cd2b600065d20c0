//! How a hot key shared by several processes was held (section 3b): the *tenures*
//! (runs of consecutive holds by one process, the two-level queue's unit), the hand-overs
//! between them, and the longest time nobody held the key (a foreign window shows there).
//!
//! The wait a cohorting lock promises follows from these: a task that releases queues
//! behind the other `L − 1` tasks of its process, which get `T` holds per tenure, and
//! between two tenures of its process each of the other `P − 1` processes has one. See
//! [`cohort_worst_wait_us`].

use serde::{Deserialize, Serialize};

/// What the holds of one run show about tenures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Tenures {
    /// Tenures in the window (the first and the last may be cut by it).
    pub(crate) count: u64,
    /// Mean holds per tenure (the last, cut by the window, left out).
    pub(crate) mean_holds: f64,
    /// Mean time from a tenure's first acquisition to the next tenure's, in µs.
    pub(crate) mean_span_us: f64,
    /// Mean time from a tenure's last release to the next tenure's first acquisition
    /// (the hand-over between processes through Redis), in µs.
    pub(crate) mean_handover_us: f64,
    /// Mean time from a release to the next acquisition inside a tenure (a local pass).
    pub(crate) mean_pass_us: f64,
    /// The longest time nobody held the key, in µs.
    pub(crate) longest_idle_us: u64,
    /// When that began, in µs after the first acquisition.
    pub(crate) longest_idle_at_us: u64,
}

/// The tenures of `holds`: (acquired, released, process) in wall-clock µs, any order.
pub(crate) fn tenures(holds: &[(u64, u64, usize)]) -> Option<Tenures> {
    let mut holds = holds.to_vec();
    holds.sort_unstable();
    let first = holds.first()?.0;
    // Each tenure as (first acquisition, last release, holds).
    let mut runs: Vec<(u64, u64, u64)> = Vec::new();
    let (mut idle, mut idle_at) = (0, 0);
    let (mut passes, mut pass_sum) = (0u64, 0u64);
    for (i, &(start, end, process)) in holds.iter().enumerate() {
        let same = i > 0 && holds[i - 1].2 == process;
        if i > 0 {
            let gap = start.saturating_sub(holds[i - 1].1);
            if gap > idle {
                (idle, idle_at) = (gap, holds[i - 1].1 - first);
            }
            if same {
                passes += 1;
                pass_sum += gap;
            }
        }
        match runs.last_mut() {
            Some(run) if same => {
                run.1 = end;
                run.2 += 1;
            }
            _ => runs.push((start, end, 1)),
        }
    }
    let whole = &runs[..runs.len() - 1];
    let mean = |values: Vec<u64>| {
        let n = values.len().max(1) as f64;
        values.into_iter().sum::<u64>() as f64 / n
    };
    Some(Tenures {
        count: runs.len() as u64,
        mean_holds: mean(whole.iter().map(|run| run.2).collect()),
        mean_span_us: mean(runs.windows(2).map(|w| w[1].0 - w[0].0).collect()),
        mean_handover_us: mean(
            runs.windows(2)
                .map(|w| w[1].0.saturating_sub(w[0].1))
                .collect(),
        ),
        mean_pass_us: pass_sum as f64 / passes.max(1) as f64,
        longest_idle_us: idle,
        longest_idle_at_us: idle_at,
    })
}

/// The longest wait the two-level queue promises a task, in µs, without a foreign window:
/// `processes` processes of `tasks_each` tasks each hold for `hold_us`; a tenure is at most
/// `passes + 1` holds and ends at the first release `pass_time_us` or more after it began;
/// a hand-over between processes takes `handover_us`, a local pass `pass_us`.
///
/// A task that releases queues behind the other `L − 1` tasks of its process. With `T`
/// holds per tenure, serving them crosses at most `1 + ⌊(L − 1) / T⌋` ends of its
/// process's tenures, and behind each end the `P − 1` other processes hold one tenure
/// each. So the wait is at most
/// `(L − 1) × (hold + pass) + (1 + ⌊(L − 1) / T⌋) × (P − 1) × (tenure + hand-over)`,
/// where a tenure lasts at most `T` holds. When `T < L` some tasks wait for two rounds of
/// the other processes (a first-come-first-served queue never makes anyone wait for more
/// than one turn of everyone).
pub(crate) fn cohort_worst_wait_us(
    (processes, tasks_each): (u64, u64),
    hold_us: f64,
    (passes, pass_time_us): (u64, f64),
    (handover_us, pass_us): (f64, f64),
) -> f64 {
    let local = tasks_each.max(1);
    let per_tenure = holds_per_tenure(hold_us + pass_us, passes, pass_time_us);
    let ends = 1 + (local - 1) / per_tenure;
    let tenure = per_tenure as f64 * (hold_us + pass_us);
    (local - 1) as f64 * (hold_us + pass_us)
        + (ends * processes.saturating_sub(1)) as f64 * (tenure + handover_us)
}

/// Holds in one tenure while local tasks wait: the first, then passes while fewer than
/// `passes` were made and the tenure is younger than `pass_time_us` at the release.
pub(crate) fn holds_per_tenure(hold_us: f64, passes: u64, pass_time_us: f64) -> u64 {
    let by_time = if hold_us > 0.0 {
        (pass_time_us / hold_us).ceil() as u64
    } else {
        u64::MAX
    };
    by_time.min(passes + 1).max(1)
}

#[cfg(test)]
mod tests {
    use super::{cohort_worst_wait_us, holds_per_tenure, tenures};

    #[test]
    fn runs_of_one_process_are_tenures() {
        // Process 0 holds three times, process 1 twice, process 0 once more (cut).
        let holds = [
            (0, 10, 0),
            (11, 20, 0),
            (21, 30, 0),
            (35, 45, 1),
            (46, 55, 1),
            (160, 170, 0),
        ];
        let t = tenures(&holds).unwrap();
        assert_eq!(t.count, 3);
        assert_eq!(t.mean_holds, 2.5);
        assert_eq!(t.mean_span_us, (35.0 + 125.0) / 2.0);
        assert_eq!(t.mean_handover_us, (5.0 + 105.0) / 2.0);
        assert_eq!(t.mean_pass_us, 1.0);
        assert_eq!((t.longest_idle_us, t.longest_idle_at_us), (105, 55));
    }

    #[test]
    fn a_tenure_shorter_than_the_local_queue_costs_a_second_round() {
        // 25 ms with 2.1 ms holds: the release after the 12th hold finds the tenure 25.2 ms
        // old, so 12 holds; 16 local tasks then cross two ends of their process's tenures.
        assert_eq!(holds_per_tenure(2_100.0, 16, 25_000.0), 12);
        let short = cohort_worst_wait_us((4, 16), 2_100.0, (16, 25_000.0), (0.0, 0.0));
        assert_eq!(
            short.round(),
            (15.0 * 2_100.0 + 2.0 * 3.0 * 12.0 * 2_100.0_f64).round()
        );
        // A tenure that serves the whole local queue (17 holds: 16 passes): one round, about
        // what first come first served promises (63 holds).
        assert_eq!(holds_per_tenure(2_100.0, 16, 40_000.0), 17);
        let long = cohort_worst_wait_us((4, 16), 2_100.0, (16, 40_000.0), (0.0, 0.0));
        assert_eq!(long.round(), ((15.0 + 3.0 * 17.0) * 2_100.0_f64).round());
    }
}
