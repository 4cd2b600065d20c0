//! The files a run leaves: for a full run, bench/results, the plots and BENCHMARKS.md; for
//! a `BENCH_ONLY` run, bench/results only (with the sections it measured, to paste by hand).

use std::path::{Path, PathBuf};

use crate::error::BenchResult;
use crate::host::relative_link;
use crate::report::{self, Results};
use crate::setup::env_path;
use crate::{cluster, plot, rwlock, semaphore};

/// Where the files go.
pub(crate) struct Paths {
    /// bench/results (`BENCH_RESULTS`).
    pub(crate) results_dir: PathBuf,
    /// BENCHMARKS.md (`BENCH_REPORT`).
    pub(crate) report: PathBuf,
    /// The hot key's wait distributions (`BENCH_PLOT`).
    pub(crate) plot: PathBuf,
}

impl Paths {
    /// The paths bench/run gives, or the defaults.
    pub(crate) fn from_env() -> Self {
        Paths {
            results_dir: env_path("BENCH_RESULTS", "results"),
            report: env_path("BENCH_REPORT", "../BENCHMARKS.md"),
            plot: env_path("BENCH_PLOT", "results/hot-key-waits.svg"),
        }
    }
}

/// A `BENCH_ONLY=waiting` run: waiting.json and its section in waiting.md.
pub(crate) fn write_waiting(results: &Results, results_dir: &Path) -> BenchResult<()> {
    std::fs::create_dir_all(results_dir)?;
    std::fs::write(
        results_dir.join("waiting.json"),
        serde_json::to_string_pretty(results)?,
    )?;
    let section = report::waiting_markdown(results);
    std::fs::write(results_dir.join("waiting.md"), &section)?;
    eprintln!(
        "bench: BENCH_ONLY=waiting run in {:.0} s; BENCHMARKS.md left as it was, the section is in {}",
        results.wall_s,
        results_dir.join("waiting.md").display()
    );
    Ok(())
}

/// Any other `BENCH_ONLY` run: only.json, and the sections it measured; `replicated` when
/// it measured section 8.
pub(crate) fn write_only(
    results: &Results,
    results_dir: &Path,
    replicated: bool,
) -> BenchResult<()> {
    std::fs::create_dir_all(results_dir)?;
    std::fs::write(
        results_dir.join("only.json"),
        serde_json::to_string_pretty(results)?,
    )?;
    if !results.semaphore.is_empty() {
        std::fs::write(
            results_dir.join("semaphore.json"),
            serde_json::to_string_pretty(&results.semaphore)?,
        )?;
    }
    for (records, name) in [
        (!results.semaphore.is_empty(), semaphore::NAME),
        (!results.rwlock.is_empty(), rwlock::NAME),
    ] {
        if records {
            let path = results_dir.join(format!("{name}.md"));
            std::fs::write(&path, report::primitives_markdown(results))?;
            eprintln!("bench: its section written to {}", path.display());
        }
    }
    if !results.foreign.is_empty() {
        let path = results_dir.join("foreign.md");
        std::fs::write(&path, report::foreign_markdown(results))?;
        eprintln!("bench: section 12 written to {}", path.display());
    }
    if !results.cluster_watchdog.is_empty() {
        let path = results_dir.join(format!("{}.md", cluster::NAME));
        std::fs::write(&path, report::cluster_watchdog_markdown(results))?;
        eprintln!("bench: section 4b written to {}", path.display());
    }
    if replicated {
        let section = report::replicas_markdown(results);
        std::fs::write(results_dir.join("replicas.md"), section)?;
        eprintln!(
            "bench: section 8 written to {}",
            results_dir.join("replicas.md").display()
        );
    }
    eprintln!("bench: BENCH_ONLY run; BENCHMARKS.md left as it was");
    Ok(())
}

/// A full run: the plots, bench/results and BENCHMARKS.md.
pub(crate) fn write_full(results: &Results, paths: &Paths) -> BenchResult<()> {
    if !results.hot_key.is_empty() {
        plot::hot_key_cdf(&results.hot_key, results.settings.hot_tasks, &paths.plot)?;
    }
    let plot_link = relative_link(&paths.report, &paths.plot);
    let scaling_link = if results.scaling.cycles.is_empty() {
        None
    } else {
        let path = env_path("BENCH_SCALING_PLOT", "results/scaling.svg");
        plot::scaling(&results.scaling.cycles, &path)?;
        relative_link(&paths.report, &path)
    };
    report::write_all(
        results,
        &paths.results_dir,
        &paths.report,
        (plot_link.as_deref(), scaling_link.as_deref()),
    )?;
    eprintln!(
        "bench: wrote {} and {}/ in {:.0} s",
        paths.report.display(),
        paths.results_dir.display(),
        results.wall_s
    );
    Ok(())
}
