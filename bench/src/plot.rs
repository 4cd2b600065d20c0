//! The hot-key acquire-wait distributions as an SVG: one CDF per contender, log time axis.

use std::path::Path;

use plotters::prelude::*;

use crate::BenchResult;
use crate::contenders::Contender;
use crate::scenarios::HotRecord;

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
        let mut waits: Vec<f64> = records
            .iter()
            .filter(|r| r.contender == contender)
            .flat_map(|r| r.waits_us.iter().chain(&r.censored_us))
            .map(|&us| (us as f64 / 1e3).clamp(x_min, x_max))
            .collect();
        if waits.is_empty() {
            continue;
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
