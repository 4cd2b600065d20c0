//! The plots: the hot-key acquire-wait distributions (one CDF per contender, log time
//! axis) and section 7's scaling (cycles/s and client CPU per cycle against tasks).

use std::ops::Range;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::contenders::Contender;
use crate::error::BenchResult;
use crate::figures::median;
use crate::scenarios::{CycleRecord, HotRecord};

/// The colour of each contender's line.
fn colour(contender: Contender) -> RGBColor {
    match contender {
        Contender::Api | Contender::Attribute => RGBColor(0x1f, 0x77, 0xb4),
        Contender::Raw => RGBColor(0x55, 0x55, 0x55),
        Contender::Rslock => RGBColor(0xd6, 0x27, 0x28),
        Contender::AsyncRedisLock => RGBColor(0xff, 0x7f, 0x0e),
        Contender::RedisPy => RGBColor(0x2c, 0xa0, 0x2c),
    }
}

/// Writes the CDF plot of every contender's waits (all runs pooled) to `path`.
pub(crate) fn hot_key_cdf(records: &[HotRecord], tasks: u64, path: &Path) -> BenchResult<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut contenders: Vec<Contender> = records.iter().map(|r| r.contender).collect();
    contenders.sort();
    contenders.dedup();

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (x_min, x_max) = (0.01f64, 20_000.0f64);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Hot key: acquire wait, {tasks} tasks, CDF (all runs)"),
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0f64..1.0f64)?;
    chart
        .configure_mesh()
        .x_desc("wait (ms, log scale)")
        .y_desc("share of acquisitions")
        .x_label_formatter(&|v| {
            if *v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            }
        })
        .draw()?;

    for contender in contenders {
        let Some(points) = cdf_points(records, contender, (x_min, x_max)) else {
            continue;
        };
        let style = colour(contender);
        chart
            .draw_series(LineSeries::new(points, style.stroke_width(2)))?
            .label(contender.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// One contender's CDF line: its waits in ms (open ones included, clamped to the axis),
/// at most ~2,000 points; `None` without waits.
fn cdf_points(
    records: &[HotRecord],
    contender: Contender,
    (x_min, x_max): (f64, f64),
) -> Option<Vec<(f64, f64)>> {
    let mut waits: Vec<f64> = records
        .iter()
        .filter(|r| r.contender == contender)
        .flat_map(|r| r.waits_us.iter().chain(&r.censored_us))
        .map(|&us| (us as f64 / 1e3).clamp(x_min, x_max))
        .collect();
    if waits.is_empty() {
        return None;
    }
    waits.sort_by(f64::total_cmp);
    let n = waits.len() as f64;
    // At most ~2,000 points per line: every k-th sample, and the last one.
    let step = (waits.len() / 2_000).max(1);
    let mut points: Vec<(f64, f64)> = waits
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0)
        .map(|(i, &w)| (w, (i + 1) as f64 / n))
        .collect();
    if let Some(&last) = waits.last() {
        points.push((last, 1.0));
    }
    Some(points)
}

/// One point of the scaling plot: (tasks, cycles/s, client CPU µs per cycle).
type Point = (f64, f64, f64);

/// Writes the scaling plot of section 7 to `path`: cycles/s (left) and client CPU per cycle
/// (right) against tasks on distinct keys, one line per contender, medians over runs.
pub(crate) fn scaling(records: &[CycleRecord], path: &Path) -> BenchResult<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut contenders: Vec<Contender> = records.iter().map(|r| r.contender).collect();
    contenders.sort();
    contenders.dedup();
    let mut tasks: Vec<u64> = records.iter().map(|r| r.tasks).collect();
    tasks.sort_unstable();
    tasks.dedup();
    let (Some(&fewest), Some(&most)) = (tasks.first(), tasks.last()) else {
        return Ok(());
    };
    let lines = median_lines(records, &contenders, &tasks);
    let top_rate = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(1.0, f64::max)
        * 1.15;
    let top_cpu = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.2))
        .fold(1.0, f64::max)
        * 1.15;
    let x_range = (fewest as f64 / 1.5)..(most as f64 * 1.5);

    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "How cost grows: tasks cycling on distinct keys (medians over runs)",
        ("sans-serif", 20),
    )?;
    let (left, right) = root.split_horizontally(500);
    for (area, panel) in [
        (
            &left,
            Panel {
                caption: "cycles/s",
                y_desc: "acquire + release cycles per second",
                top: top_rate,
                pick: |p: &Point| p.1,
            },
        ),
        (
            &right,
            Panel {
                caption: "client CPU per cycle",
                y_desc: "client CPU µs per cycle",
                top: top_cpu,
                pick: |p: &Point| p.2,
            },
        ),
    ] {
        draw_panel(area, panel, &x_range, &lines)?;
    }
    root.present()?;
    Ok(())
}

/// Medians per contender and task count: (tasks, cycles/s, CPU µs/cycle).
fn median_lines(
    records: &[CycleRecord],
    contenders: &[Contender],
    tasks: &[u64],
) -> Vec<(Contender, Vec<Point>)> {
    contenders
        .iter()
        .map(|&contender| {
            let points = tasks
                .iter()
                .filter_map(|&n| {
                    let mine: Vec<&CycleRecord> = records
                        .iter()
                        .filter(|r| r.contender == contender && r.tasks == n)
                        .collect();
                    (!mine.is_empty()).then(|| {
                        (
                            n as f64,
                            median(mine.iter().map(|r| r.per_s)),
                            median(mine.iter().map(|r| r.client_cpu_us_per_cycle)),
                        )
                    })
                })
                .collect();
            (contender, points)
        })
        .collect()
}

/// One panel of the scaling plot: its caption, its y axis and what it plots of a point.
struct Panel {
    caption: &'static str,
    y_desc: &'static str,
    /// The y axis's top.
    top: f64,
    pick: fn(&Point) -> f64,
}

/// Draws one panel of the scaling plot on `area`: a line per contender, with its points.
fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    Panel {
        caption,
        y_desc,
        top,
        pick,
    }: Panel,
    x_range: &Range<f64>,
    lines: &[(Contender, Vec<Point>)],
) -> BenchResult<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range.clone().log_scale(), 0.0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("tasks on distinct keys (log scale)")
        .y_desc(y_desc)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for (contender, points) in lines {
        let style = colour(*contender);
        let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.0, pick(p))).collect();
        chart
            .draw_series(LineSeries::new(xy.clone(), style.stroke_width(2)))?
            .label(contender.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], style.stroke_width(2))
            });
        chart.draw_series(
            xy.into_iter()
                .map(|point| Circle::new(point, 3, style.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
