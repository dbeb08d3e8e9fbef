//! SVG line charts for the benchmark docs (plotters, SVG backend only).

use std::path::Path;

use anyhow::Context as _;
use plotters::prelude::*;

/// One line: a label and (x, y) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Draws `series` with a log-2 x axis (producer counts) into `path`.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).context("chart: fill")?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((1.0f64..x_max * 1.2).log_scale(), 0.0f64..y_max)
        .context("chart: axes")?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .context("chart: mesh")?;
    let colors = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    for (i, s) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), color))
            .context("chart: series")?
            .label(s.label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .context("chart: points")?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .context("chart: legend")?;
    root.present().context("chart: write")?;
    Ok(())
}
