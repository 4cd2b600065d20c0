//! The machine the bench runs on, for the report's first table, and where files lie.

use std::path::Path;

use crate::admin::Admin;
use crate::error::BenchResult;
use crate::python::Python;
use crate::report::Machine;

/// The plot's path as a link relative to the report's directory, when it lies beneath it.
pub(crate) fn relative_link(report: &Path, plot: &Path) -> Option<String> {
    let report = std::fs::canonicalize(report.parent()?).ok()?;
    let plot = std::fs::canonicalize(plot).ok()?;
    plot.strip_prefix(&report)
        .ok()
        .map(|path| path.to_string_lossy().into_owned())
}

pub(crate) async fn machine(admin: &Admin, python: Option<&Python>) -> BenchResult<Machine> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("BENCH_RUSTC").unwrap_or_else(|_| {
        std::process::Command::new("rustc")
            .arg("--version")
            .output()
            .ok()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".into())
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| format!("Linux {}", release.trim()))
        .unwrap_or_else(|_| "unknown".into());
    Ok(Machine {
        nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        redis_version: admin.info_text("server", "redis_version").await?,
        rustc,
        kernel,
        python: python.map(|python| python.versions.clone()),
        load: (load_average(), String::new()),
        code: std::env::var("BENCH_CODE").unwrap_or_else(|_| "unknown".into()),
    })
}

/// The first three fields of `/proc/loadavg`.
pub(crate) fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".into())
}
