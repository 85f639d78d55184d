//! Small PNG plotting helpers over `plotters` for reports and the CLI.
//!
//! The font (DejaVu Sans, `assets/fonts/`) is compiled into the binary and registered with
//! plotters as `sans-serif` on first use, so no system fonts are needed.
//!
//! - [`line_plot`]: one panel of line series, optional log axes.
//! - [`panels_plot`]: several such panels stacked vertically in one PNG.
//! - [`histogram`]: counts of values in equal-width bins.
//! - [`category_plot`]: markers and dashed reference levels over named categories.
//!
//! Points that cannot be shown (NaN, infinities, and values <= 0 on a log axis) are dropped,
//! never an error; a panel with nothing to show is drawn with a placeholder range.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

/// DejaVu Sans, bundled with the repository (licence: `assets/fonts/DejaVu-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
/// Family name under which the bundled font is registered.
const FAMILY: &str = "sans-serif";

/// Width of one panel in pixels.
pub const PANEL_WIDTH: u32 = 1000;
/// Height of one panel in pixels.
pub const PANEL_HEIGHT: u32 = 600;

/// Most decades shown on a log axis (values further below the top are clipped).
pub const MAX_DECADES: f64 = 40.0;

/// Line colours, in order: the "tab10" palette, then the light partners of its first six in
/// "tab20" (a ladder panel has 12 mixers; with 10 colours the 11th and 12th repeated the first
/// two, and two mixers read as one).
const PALETTE: [RGBColor; 16] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
];

/// Colours of reference levels ([`category_plot`]): dark, and none in [`PALETTE`], so a level
/// is never taken for a measured series.
const LEVEL_COLORS: [RGBColor; 6] = [
    RGBColor(0, 0, 0),
    RGBColor(120, 120, 120),
    RGBColor(0, 95, 95),
    RGBColor(110, 110, 0),
    RGBColor(0, 0, 120),
    RGBColor(120, 0, 60),
];

/// Why a plot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Drawing or encoding the PNG failed (typically: the file cannot be written).
    #[error("cannot write plot {path}: {message}")]
    Draw {
        /// The PNG that was being written.
        path: PathBuf,
        /// What plotters reported.
        message: String,
    },
    /// The arguments describe no plot (no panels, zero bins, ...).
    #[error("invalid plot request: {0}")]
    Invalid(String),
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SeriesStyle {
    /// Solid line through the points.
    #[default]
    Line,
    /// Dashed line through the points (reference values, bounds).
    Dashed,
    /// One marker per point, no line.
    Points,
}

/// One named curve: (x, y) points in drawing order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    /// Legend entry (empty: not shown in the legend).
    pub name: String,
    /// The points (x, y).
    pub points: Vec<(f64, f64)>,
    /// Line, dashed line or markers.
    pub style: SeriesStyle,
    /// Palette index of the colour (None: the series' position in its panel).
    pub color: Option<usize>,
    /// Error bars (x, lo, hi), drawn as vertical segments in the series' colour.
    pub bars: Vec<(f64, f64, f64)>,
}

impl Series {
    /// A solid line.
    pub fn line(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            style: SeriesStyle::Line,
            color: None,
            bars: Vec::new(),
        }
    }
    /// A dashed line.
    pub fn dashed(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            style: SeriesStyle::Dashed,
            color: None,
            bars: Vec::new(),
        }
    }
    /// The same series with error bars (x, lo, hi).
    pub fn with_bars(mut self, bars: Vec<(f64, f64, f64)>) -> Series {
        self.bars = bars;
        self
    }
    /// The same series drawn with palette colour `index` (series of one family share a colour).
    pub fn with_color(mut self, index: usize) -> Series {
        self.color = Some(index);
        self
    }
    /// Markers only.
    pub fn points(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            style: SeriesStyle::Points,
            color: None,
            bars: Vec::new(),
        }
    }
}

/// One panel: title, axis labels, scales and its series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Panel {
    /// Title drawn above the panel.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// Logarithmic x axis (non-positive x are dropped).
    pub log_x: bool,
    /// Logarithmic y axis (non-positive y are dropped).
    pub log_y: bool,
    /// The curves.
    pub series: Vec<Series>,
}

/// Registers the bundled font with plotters (idempotent, thread-safe).
pub fn ensure_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The bytes are a valid TrueType file checked in with the repository; a failure here
        // would only mean text is not drawn, so it is not worth an error path.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// Draws one panel of line series into a PNG of [`PANEL_WIDTH`] x [`PANEL_HEIGHT`] pixels.
pub fn line_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_x: bool,
    log_y: bool,
) -> Result<(), PlotError> {
    let panel = Panel {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        log_x,
        log_y,
        series: series.to_vec(),
    };
    panels_plot(path, &[panel])
}

/// Draws two panels, one above the other, into one PNG.
pub fn two_panel_plot(path: &Path, top: &Panel, bottom: &Panel) -> Result<(), PlotError> {
    panels_plot(path, &[top.clone(), bottom.clone()])
}

/// Refuses a plot path that does not end in `.png` (the only format drawn), before anything
/// is computed or written.
///
/// # Errors
/// [`PlotError::Invalid`] naming the path.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if png {
        Ok(())
    } else {
        Err(PlotError::Invalid(format!(
            "plot {}: the file name must end in .png (plots are PNG images)",
            path.display()
        )))
    }
}

/// Draws `panels` stacked vertically, each [`PANEL_WIDTH`] x [`PANEL_HEIGHT`] pixels.
pub fn panels_plot(path: &Path, panels: &[Panel]) -> Result<(), PlotError> {
    if panels.is_empty() {
        return Err(PlotError::Invalid("no panels to draw".into()));
    }
    write_png(path, |tmp| draw_panels(tmp, path, panels))
}

fn io_err(path: &Path, e: std::io::Error) -> PlotError {
    // the output rule's refusal (a FIFO, a device, a directory) is the user's path to fix
    if vort::fsio::is_refused(&e) {
        return PlotError::Invalid(e.to_string());
    }
    PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Checks `path`, then runs `draw` on a temporary file renamed over `path` only when
/// complete: a failed plot leaves an existing file as it was.
fn write_png(
    path: &Path,
    draw: impl FnOnce(&Path) -> Result<(), PlotError>,
) -> Result<(), PlotError> {
    check_path(path)?;
    ensure_font();
    vort::fsio::write_with(path, draw, |e| io_err(path, e))
}

/// A drawing failure, naming `path` (the file the user asked for).
fn draw_error(path: &Path, e: &dyn std::fmt::Display) -> PlotError {
    PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Draws `items` stacked vertically into `target`, each by `draw_one` in its own
/// [`PANEL_WIDTH`] x [`PANEL_HEIGHT`] area (errors name `path`).
fn draw_stacked<T>(
    target: &Path,
    path: &Path,
    items: &[T],
    draw_one: impl Fn(&DrawingArea<BitMapBackend, Shift>, &T) -> Result<(), PlotError>,
) -> Result<(), PlotError> {
    let height = PANEL_HEIGHT * items.len() as u32;
    let root = BitMapBackend::new(target, (PANEL_WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(path, &e))?;
    for (area, item) in root.split_evenly((items.len(), 1)).iter().zip(items) {
        draw_one(area, item)?;
    }
    root.present().map_err(|e| draw_error(path, &e))?;
    drop(root);
    // The bitmap backend reports some write failures only on drop; check the file is there.
    match std::fs::metadata(target) {
        Ok(m) if m.len() > 0 => Ok(()),
        Ok(_) => Err(draw_error(path, &"the file is empty")),
        Err(e) => Err(draw_error(path, &e)),
    }
}

/// Draws into `target` (errors name `path`, the file the user asked for).
fn draw_panels(target: &Path, path: &Path, panels: &[Panel]) -> Result<(), PlotError> {
    draw_stacked(target, path, panels, |area, panel| {
        draw_panel_dispatch(area, panel).map_err(|e| draw_error(path, &e))
    })
}

/// Histogram of `values` in `bins` equal-width bins over their range (non-finite values are
/// ignored), drawn as bars into a PNG of one panel.
pub fn histogram(
    path: &Path,
    title: &str,
    x_label: &str,
    values: &[f64],
    bins: usize,
) -> Result<(), PlotError> {
    if bins == 0 {
        return Err(PlotError::Invalid(
            "a histogram needs at least one bin".into(),
        ));
    }
    write_png(path, |tmp| {
        draw_histogram(tmp, path, title, x_label, values, bins)
    })
}

fn draw_histogram(
    target: &Path,
    path: &Path,
    title: &str,
    x_label: &str,
    values: &[f64],
    bins: usize,
) -> Result<(), PlotError> {
    let draw_err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    // pad = 0: exactly [min, max] when they differ, a placeholder range otherwise.
    let (lo, hi) = padded_range(finite.iter().copied(), false, 0.0);
    let width = (hi - lo) / bins as f64;
    let mut counts = vec![0usize; bins];
    for v in &finite {
        let b = (((v - lo) / width) as usize).min(bins - 1);
        counts[b] += 1;
    }
    let max_count = counts.iter().copied().max().unwrap_or(0).max(1) as f64;

    let root = BitMapBackend::new(target, (PANEL_WIDTH, PANEL_HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(lo..hi, 0.0..max_count * 1.05)
        .map_err(|e| draw_err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("count")
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_label_formatter(&|v| tick_label(*v))
        .y_label_formatter(&|v| tick_label(*v))
        .draw()
        .map_err(|e| draw_err(&e))?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &c)| {
            let x0 = lo + i as f64 * width;
            Rectangle::new(
                [(x0, 0.0), (x0 + width, c as f64)],
                PALETTE[0].mix(0.7).filled(),
            )
        }))
        .map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    drop(root);
    match std::fs::metadata(target) {
        Ok(m) if m.len() > 0 => Ok(()),
        Ok(_) => Err(draw_err(&"the file is empty")),
        Err(e) => Err(draw_err(&e)),
    }
}

/// A panel over named categories (test books, say): markers for measured values, and
/// reference levels drawn as a dashed horizontal segment across each category.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CategoryPanel {
    /// Title drawn above the panel.
    pub title: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The categories, left to right (tick labels; long ones are cut with an ellipsis).
    pub categories: Vec<String>,
    /// Named series of one value per category (NaN: none), drawn as markers side by side.
    pub markers: Vec<(String, Vec<f64>)>,
    /// Named reference levels, one value per category (NaN: none), drawn dashed.
    pub levels: Vec<(String, Vec<f64>)>,
}

/// Draws `panel` into a PNG of [`PANEL_WIDTH`] x [`PANEL_HEIGHT`] pixels, its legend in a strip
/// to the right (markers and levels fill the plot, so no corner is free).
///
/// # Errors
/// [`PlotError::Invalid`] without categories or with a series of another length,
/// [`PlotError::Draw`] when the file cannot be written.
pub fn category_plot(path: &Path, panel: &CategoryPanel) -> Result<(), PlotError> {
    let n = panel.categories.len();
    if n == 0 {
        return Err(PlotError::Invalid(
            "a category plot needs a category".into(),
        ));
    }
    if let Some((name, _)) = panel
        .markers
        .iter()
        .chain(&panel.levels)
        .find(|(_, v)| v.len() != n)
    {
        return Err(PlotError::Invalid(format!(
            "series {name:?} does not have one value per category ({n})"
        )));
    }
    write_png(path, |tmp| draw_categories(tmp, path, panel))
}

/// One heat map: values on a grid of columns (x, left to right) by rows (y, bottom to top),
/// on a fixed colour scale from `range.0` (dark) to `range.1` (bright); NaN cells stay white
/// and every cell with a value is labelled with it.
#[derive(Debug, Clone, PartialEq)]
pub struct HeatPanel {
    /// Title drawn above the panel.
    pub title: String,
    /// The columns' labels (x axis) and the x axis's name.
    pub columns: (String, Vec<String>),
    /// The rows' labels, bottom to top (y axis), and the y axis's name.
    pub rows: (String, Vec<String>),
    /// values[row][column].
    pub values: Vec<Vec<f64>>,
    /// The colour scale's ends.
    pub range: (f64, f64),
}

/// Draws `panels` stacked vertically, each [`PANEL_WIDTH`] x [`PANEL_HEIGHT`] pixels.
///
/// # Errors
/// [`PlotError::Invalid`] for a panel without cells or whose values do not fill its grid,
/// [`PlotError::Draw`] when the file cannot be written.
pub fn heat_maps(path: &Path, panels: &[HeatPanel]) -> Result<(), PlotError> {
    for p in panels {
        let (r, c) = (p.rows.1.len(), p.columns.1.len());
        if r == 0 || c == 0 || p.values.len() != r || p.values.iter().any(|v| v.len() != c) {
            return Err(PlotError::Invalid(format!(
                "heat map {:?}: values must be {r} rows of {c} columns",
                p.title
            )));
        }
    }
    if panels.is_empty() {
        return Err(PlotError::Invalid("no heat map to draw".into()));
    }
    write_png(path, |tmp| draw_heat_maps(tmp, path, panels))
}

/// A dark-blue (0) to yellow (1) scale.
fn heat_color(t: f64) -> RGBColor {
    let t = t.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    RGBColor(mix(40.0, 250.0), mix(30.0, 220.0), mix(110.0, 40.0))
}

fn draw_heat_maps(target: &Path, path: &Path, panels: &[HeatPanel]) -> Result<(), PlotError> {
    draw_stacked(target, path, panels, |area, p| draw_heat_map(area, p, path))
}

/// One heat map into `area` (errors name `path`).
fn draw_heat_map(
    area: &DrawingArea<BitMapBackend, Shift>,
    p: &HeatPanel,
    path: &Path,
) -> Result<(), PlotError> {
    let draw_err = |e: &dyn std::fmt::Display| draw_error(path, e);
    let (nr, nc) = (p.rows.1.len(), p.columns.1.len());
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, (FAMILY, 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5..nc as f64 - 0.5, -0.5..nr as f64 - 0.5)
        .map_err(|e| draw_err(&e))?;
    let at = |labels: &[String], v: f64| {
        let k = v.round();
        let ok = (v - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < labels.len();
        if ok {
            short_label(&labels[k as usize])
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc(p.columns.0.as_str())
        .y_desc(p.rows.0.as_str())
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_labels(nc)
        .y_labels(nr)
        .x_label_formatter(&|v| at(&p.columns.1, *v))
        .y_label_formatter(&|v| at(&p.rows.1, *v))
        .disable_mesh()
        .draw()
        .map_err(|e| draw_err(&e))?;
    let span = (p.range.1 - p.range.0).max(f64::MIN_POSITIVE);
    for (i, row) in p.values.iter().enumerate() {
        for (j, &v) in row.iter().enumerate().filter(|(_, v)| v.is_finite()) {
            let (x, y) = (j as f64, i as f64);
            let color = heat_color((v - p.range.0) / span);
            chart
                .draw_series([Rectangle::new(
                    [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
                    color.filled(),
                )])
                .map_err(|e| draw_err(&e))?;
            let ink = if (v - p.range.0) / span > 0.6 {
                BLACK
            } else {
                WHITE
            };
            chart
                .draw_series([Text::new(
                    format!("{v:.0}"),
                    (x - 0.15, y + 0.1),
                    (FAMILY, 14).into_font().color(&ink),
                )])
                .map_err(|e| draw_err(&e))?;
        }
    }
    Ok(())
}

/// A tick label of at most 24 characters.
fn short_label(s: &str) -> String {
    if s.chars().count() <= 24 {
        s.to_string()
    } else {
        s.chars().take(23).collect::<String>() + "…"
    }
}

fn draw_categories(target: &Path, path: &Path, panel: &CategoryPanel) -> Result<(), PlotError> {
    let draw_err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let n = panel.categories.len();
    let values = panel
        .markers
        .iter()
        .chain(&panel.levels)
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite());
    let (y0, y1) = padded_range(values, false, 0.05);
    let root = BitMapBackend::new(target, (PANEL_WIDTH, PANEL_HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let names = panel.markers.iter().chain(&panel.levels).map(|(s, _)| s);
    let legend_width = names.map(|s| s.chars().count() as u32).max().unwrap_or(0) * 8 + 50;
    let body = root
        .titled(&panel.title, (FAMILY, 22))
        .map_err(|e| draw_err(&e))?;
    let (w, _) = body.dim_in_pixel();
    let (plot, strip) = body.split_horizontally(w.saturating_sub(legend_width));
    let mut chart = ChartBuilder::on(&plot)
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, y0..y1)
        .map_err(|e| draw_err(&e))?;
    let label = |v: &f64| {
        let k = v.round();
        if (v - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < n {
            short_label(&panel.categories[k as usize])
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .y_desc(panel.y_label.as_str())
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_labels(n)
        .x_label_formatter(&label)
        .y_label_formatter(&|v| tick_label(*v))
        .disable_x_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(205, 205, 205))
        .draw()
        .map_err(|e| draw_err(&e))?;
    let mut entries: Vec<(&str, RGBColor, SeriesStyle)> = Vec::new();
    let m = panel.markers.len();
    for (j, (name, v)) in panel.levels.iter().enumerate() {
        let color = LEVEL_COLORS[j % LEVEL_COLORS.len()];
        for (i, &y) in v.iter().enumerate().filter(|(_, y)| y.is_finite()) {
            let x = i as f64;
            chart
                .draw_series(DashedLineSeries::new(
                    [(x - 0.45, y), (x + 0.45, y)],
                    8,
                    5,
                    color.stroke_width(2),
                ))
                .map_err(|e| draw_err(&e))?;
        }
        entries.push((name, color, SeriesStyle::Dashed));
    }
    for (j, (name, v)) in panel.markers.iter().enumerate() {
        let color = PALETTE[j % PALETTE.len()];
        // markers of one category side by side, centred on it
        let dx = 0.5 / m.max(1) as f64;
        let offset = (j as f64 - (m as f64 - 1.0) / 2.0) * dx;
        chart
            .draw_series(
                v.iter()
                    .enumerate()
                    .filter(|(_, y)| y.is_finite())
                    .map(|(i, &y)| Circle::new((i as f64 + offset, y), 5, color.filled())),
            )
            .map_err(|e| draw_err(&e))?;
        entries.push((name, color, SeriesStyle::Points));
    }
    for (i, &(name, color, style)) in entries.iter().enumerate() {
        let y = 40 + 22 * i as i32;
        let symbol = match style {
            SeriesStyle::Dashed => plotters::element::DashedPathElement::new(
                vec![(4, y), (24, y)],
                6,
                4,
                color.stroke_width(2),
            )
            .into_dyn(),
            _ => Circle::new((14, y), 5, color.filled()).into_dyn(),
        };
        strip.draw(&symbol).map_err(|e| draw_err(&e))?;
        strip
            .draw(&Text::new(
                name,
                (32, y - 8),
                (FAMILY, 15).into_font().color(&BLACK),
            ))
            .map_err(|e| draw_err(&e))?;
    }
    root.present().map_err(|e| draw_err(&e))?;
    drop(root);
    match std::fs::metadata(target) {
        Ok(m) if m.len() > 0 => Ok(()),
        Ok(_) => Err(draw_err(&"the file is empty")),
        Err(e) => Err(draw_err(&e)),
    }
}

/// Log-spaced integer lags 1 = j_0 < j_1 < ... <= `t`, about `per_decade` per decade (plus
/// every lag below `per_decade`, where log spacing would repeat integers).
pub fn log_lags(t: u64, per_decade: usize) -> Vec<u64> {
    let t = t.max(1);
    let n = ((t as f64).log10() * per_decade as f64).ceil().max(1.0) as usize;
    let mut lags: Vec<u64> = (0..=n)
        .map(|i| 10f64.powf((t as f64).log10() * i as f64 / n as f64).round() as u64)
        .collect();
    lags.push(t);
    lags.sort_unstable();
    lags.dedup();
    lags.retain(|&j| (1..=t).contains(&j));
    lags
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw_panel_dispatch<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let xs = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|v| v.is_finite() && (!panel.log_x || *v > 0.0));
    let ys = marks(panel)
        .filter(|p| p.0.is_finite() && (!panel.log_x || p.0 > 0.0))
        .map(|p| p.1)
        .filter(|v| v.is_finite() && (!panel.log_y || *v > 0.0));
    // Lines run edge to edge; markers get a margin so the outer ones are not cut in half.
    let has_points = panel
        .series
        .iter()
        .any(|s| s.style == SeriesStyle::Points || s.points.len() == 1);
    let (x0, x1) = padded_range(xs, panel.log_x, if has_points { 0.03 } else { 0.0 });
    let (y0, y1) = padded_range(ys, panel.log_y, 0.05);
    // Ticks closer to 0 than 1e-9 of a linear axis's span are 0 (not -1.4e-20).
    let snap = |log: bool, lo: f64, hi: f64| if log { 0.0 } else { 1e-9 * (hi - lo) };
    // a log axis over a decade or more labels only 1, 2 and 5 × 10^k (plotters ticks every
    // 10^k multiple, whose labels overlap at the top of each decade)
    let ticks = AxisTicks {
        zero: (snap(panel.log_x, x0, x1), snap(panel.log_y, y0, y1)),
        thin: (
            panel.log_x && x1 >= 10.0 * x0,
            panel.log_y && y1 >= 10.0 * y0,
        ),
        legend: legend_corner(panel, (x0, x1), (y0, y1)),
    };
    match (panel.log_x, panel.log_y) {
        (false, false) => draw_panel(area, panel, x0..x1, y0..y1, ticks),
        (true, false) => draw_panel(area, panel, (x0..x1).log_scale(), y0..y1, ticks),
        (false, true) => draw_panel(area, panel, x0..x1, (y0..y1).log_scale(), ticks),
        (true, true) => draw_panel(
            area,
            panel,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
            ticks,
        ),
    }
}

fn draw_panel<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x: X,
    y: Y,
    ticks: AxisTicks,
) -> DrawResult
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    // with every corner taken, the title spans the panel and the legend gets a strip to the
    // right of the plot, as wide as its longest entry
    let (chart_area, legend_area) = match ticks.legend {
        Some(_) => (area.clone(), None),
        None => {
            let legend_width = panel
                .series
                .iter()
                .map(|s| s.name.chars().count() as u32)
                .max()
                .map_or(0, |n| 8 * n + 50);
            let body = area.titled(&panel.title, (FAMILY, 22))?;
            let (w, _) = body.dim_in_pixel();
            let (plot, legend) = body.split_horizontally(w.saturating_sub(legend_width));
            (plot, Some(legend))
        }
    };
    let mut builder = ChartBuilder::on(&chart_area);
    if legend_area.is_none() {
        builder.caption(&panel.title, (FAMILY, 22));
    }
    let mut chart = builder
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .x_label_formatter(&|v| axis_label(*v, ticks.zero.0, ticks.thin.0))
        .y_label_formatter(&|v| axis_label(*v, ticks.zero.1, ticks.thin.1))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(205, 205, 205))
        .draw()?;
    let mut labelled = false;
    let mut entries: Vec<(&str, RGBColor, SeriesStyle)> = Vec::new();
    for (i, s) in panel.series.iter().enumerate() {
        let color = PALETTE[s.color.unwrap_or(i) % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|&(x, y)| {
                x.is_finite()
                    && y.is_finite()
                    && (!panel.log_x || x > 0.0)
                    && (!panel.log_y || y > 0.0)
            })
            .collect();
        let ok = |x: f64, y: f64| {
            x.is_finite() && y.is_finite() && (!panel.log_x || x > 0.0) && (!panel.log_y || y > 0.0)
        };
        chart.draw_series(
            s.bars
                .iter()
                .filter(|&&(x, lo, hi)| ok(x, lo) && ok(x, hi))
                .map(|&(x, lo, hi)| {
                    PathElement::new(vec![(x, lo), (x, hi)], color.stroke_width(1))
                }),
        )?;
        let style = color.stroke_width(2);
        // a line through one point draws nothing: that point gets a marker (a mixer swept at
        // one rate, a memory measured at one width)
        if s.style != SeriesStyle::Points && pts.len() == 1 {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        let anno = match s.style {
            SeriesStyle::Line => chart.draw_series(LineSeries::new(pts, style))?,
            SeriesStyle::Dashed => chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))?,
            SeriesStyle::Points => chart.draw_series(
                pts.into_iter()
                    .map(move |p| Circle::new(p, 3, color.filled())),
            )?,
        };
        if !s.name.is_empty() {
            labelled = true;
            entries.push((s.name.as_str(), color, s.style));
            let kind = s.style;
            anno.label(s.name.as_str())
                .legend(move |(x, y)| match kind {
                    SeriesStyle::Points => Circle::new((x + 10, y), 3, color.filled()).into_dyn(),
                    SeriesStyle::Dashed => plotters::element::DashedPathElement::new(
                        vec![(x, y), (x + 20, y)],
                        6,
                        4,
                        color.stroke_width(2),
                    )
                    .into_dyn(),
                    SeriesStyle::Line => {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                            .into_dyn()
                    }
                });
        }
    }
    if let Some(strip) = legend_area {
        for (i, &(name, color, style)) in entries.iter().enumerate() {
            let y = 40 + 22 * i as i32;
            let symbol = match style {
                SeriesStyle::Points => Circle::new((14, y), 3, color.filled()).into_dyn(),
                SeriesStyle::Dashed => plotters::element::DashedPathElement::new(
                    vec![(4, y), (24, y)],
                    6,
                    4,
                    color.stroke_width(2),
                )
                .into_dyn(),
                SeriesStyle::Line => {
                    PathElement::new(vec![(4, y), (24, y)], color.stroke_width(2)).into_dyn()
                }
            };
            strip.draw(&symbol)?;
            strip.draw(&Text::new(
                name,
                (32, y - 8),
                (FAMILY, 15).into_font().color(&BLACK),
            ))?;
        }
    } else if labelled {
        chart
            .configure_series_labels()
            .position(ticks.legend.unwrap_or(SeriesLabelPosition::UpperRight))
            .label_font((FAMILY, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .draw()?;
    }
    Ok(())
}

/// (lo, hi) covering the values, widened by `pad` of the span (linear) or by a factor
/// (log); a placeholder when empty or degenerate.
fn padded_range(values: impl Iterator<Item = f64>, log: bool, pad: f64) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !(lo.is_finite() && hi.is_finite()) {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        // plotters' log axis loops forever when hi / lo overflows (e.g. 1e-315 .. 1): show at
        // most MAX_DECADES decades, the top ones (lower values are clipped), clear of subnormals.
        let l1 = hi.log10().min(300.0);
        let l0 = lo.log10().max(l1 - MAX_DECADES).max(-300.0).min(l1);
        let p = if l1 - l0 < 1e-9 { 0.5 } else { pad * (l1 - l0) };
        (10f64.powf(l0 - p), 10f64.powf(l1 + p))
    } else if hi > lo {
        // Keep hi - lo finite (plotters divides by it).
        let (lo, hi) = (lo.max(-1e300), hi.min(1e300));
        let p = pad * (hi - lo);
        (lo - p, hi + p)
    } else {
        let half = if lo == 0.0 { 1.0 } else { 0.5 * lo.abs() };
        (lo - half, hi + half)
    }
}

/// How a panel labels its axes and where its legend goes: tick values closer to 0 than
/// `zero` are 0; `thin` keeps only the labels of 1, 2 and 5 × 10^k; `legend` is the corner
/// (None: every corner holds data, and the legend goes to the right of the plot).
struct AxisTicks {
    zero: (f64, f64),
    thin: (bool, bool),
    legend: Option<SeriesLabelPosition>,
}

/// Every drawn (x, y) of a panel: its points and both ends of its error bars.
fn marks(panel: &Panel) -> impl Iterator<Item = (f64, f64)> + '_ {
    panel.series.iter().flat_map(|s| {
        s.points
            .iter()
            .copied()
            .chain(s.bars.iter().flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]))
    })
}

/// The corner of the panel whose legend box (about a third of the width, 45% of the height)
/// covers no data point, bar end or line, upper right first; None when every corner holds data
/// (the legend then goes beside the plot): a legend drawn over a marker hides a result.
fn legend_corner(panel: &Panel, x: (f64, f64), y: (f64, f64)) -> Option<SeriesLabelPosition> {
    let unit = |(px, py): (f64, f64)| {
        let f = |v: f64, (lo, hi): (f64, f64), log: bool| {
            if log {
                (v.ln() - lo.ln()) / (hi.ln() - lo.ln())
            } else {
                (v - lo) / (hi - lo)
            }
        };
        (f(px, x, panel.log_x), f(py, y, panel.log_y))
    };
    let mut marks: Vec<(f64, f64)> = marks(panel).map(unit).collect();
    // a line covers the corners it passes through, not only those of its vertices
    for s in panel
        .series
        .iter()
        .filter(|s| s.style != SeriesStyle::Points)
    {
        for w in s.points.windows(2) {
            let (a, b) = (unit(w[0]), unit(w[1]));
            marks.extend((1..16).map(|i| {
                let t = f64::from(i) / 16.0;
                (a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1))
            }));
        }
    }
    marks.retain(|(u, v)| u.is_finite() && v.is_finite());
    let covered = |right: bool, upper: bool| {
        marks
            .iter()
            .filter(|&&(u, v)| {
                (if right { u > 0.62 } else { u < 0.38 })
                    && (if upper { v > 0.55 } else { v < 0.45 })
            })
            .count()
    };
    let (corner, n) = [
        (SeriesLabelPosition::UpperRight, covered(true, true)),
        (SeriesLabelPosition::LowerRight, covered(true, false)),
        (SeriesLabelPosition::UpperLeft, covered(false, true)),
        (SeriesLabelPosition::LowerLeft, covered(false, false)),
    ]
    .into_iter()
    .min_by_key(|&(_, n)| n)?;
    // every corner holds data: the legend goes beside the plot instead
    (n == 0).then_some(corner)
}

/// The label of tick `v` (see [`AxisTicks`]): empty for a thinned-out tick.
fn axis_label(v: f64, zero: f64, thin: bool) -> String {
    let v = if v.abs() < zero { 0.0 } else { v };
    if thin && v > 0.0 {
        let mantissa = v / 10f64.powf(v.log10().floor());
        if ![1.0, 2.0, 5.0, 10.0]
            .iter()
            .any(|m| (mantissa - m).abs() < 1e-6 * m)
        {
            return String::new();
        }
    }
    tick_label(v)
}

/// Short tick labels: 1e5 rather than 100000, 0.001 rather than 1.0000000000000002e-3.
pub fn tick_label(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        let s = format!("{v:.2e}");
        // 1.00e5 -> 1e5, 2.50e-4 -> 2.5e-4
        let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mant = mant.trim_end_matches('0').trim_end_matches('.');
        format!("{mant}e{exp}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(100000.0), "1e5");
        assert_eq!(tick_label(2.5e-4), "2.5e-4");
        assert_eq!(tick_label(0.5), "0.5");
        assert_eq!(tick_label(10.0), "10");
        assert_eq!(tick_label(0.0), "0");
        // a thinned log axis keeps 1, 2, 5 × 10^k only
        let labels: Vec<String> = [10000.0, 20000.0, 30000.0, 50000.0, 90000.0, 1e5]
            .iter()
            .map(|&v| axis_label(v, 0.0, true))
            .collect();
        assert_eq!(labels, ["10000", "20000", "", "50000", "", "1e5"]);
        assert_eq!(axis_label(30000.0, 0.0, false), "30000");
        assert_eq!(axis_label(1e-12, 1e-9, false), "0");
    }

    /// The legend goes to the emptiest corner: markers in the upper right push it away, and
    /// an empty panel keeps the upper right.
    #[test]
    fn legends_avoid_the_markers() {
        let panel = |points: Vec<(f64, f64)>| Panel {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            log_x: true,
            log_y: false,
            series: vec![Series::points("a", points)],
        };
        let top_right = panel(vec![(9e4, 0.95), (8e4, 0.9), (1e3, 0.1), (2e3, 0.9)]);
        assert!(matches!(
            legend_corner(&top_right, (1e3, 1e5), (0.0, 1.0)),
            Some(SeriesLabelPosition::LowerRight)
        ));
        assert!(matches!(
            legend_corner(&panel(Vec::new()), (1e3, 1e5), (0.0, 1.0)),
            Some(SeriesLabelPosition::UpperRight)
        ));
        // marks in every corner: beside the plot
        let full = panel(vec![(1e3, 0.0), (1e3, 1.0), (1e5, 0.0), (1e5, 1.0)]);
        assert!(legend_corner(&full, (1e3, 1e5), (0.0, 1.0)).is_none());
        // a line through a corner covers it though no vertex lies there
        let mut diagonal = panel(Vec::new());
        diagonal.series = vec![Series::line("a", vec![(1e3, 0.0), (1e5, 1.0)])];
        assert!(matches!(
            legend_corner(&diagonal, (1e3, 1e5), (0.0, 1.0)),
            Some(SeriesLabelPosition::UpperLeft | SeriesLabelPosition::LowerRight)
        ));
    }

    /// Pixels of `color` in `panel` drawn into a bitmap of one panel.
    fn pixels_of(panel: &Panel, color: RGBColor) -> usize {
        ensure_font();
        let (w, h) = (PANEL_WIDTH, PANEL_HEIGHT);
        let mut buf = vec![0u8; 3 * (w * h) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            root.fill(&WHITE).unwrap();
            draw_panel_dispatch(&root, panel).unwrap();
            root.present().unwrap();
        }
        buf.chunks(3)
            .filter(|p| p == &[color.0, color.1, color.2])
            .count()
    }

    /// A line through one point is drawn (as a marker), and the 11th and 12th series of a
    /// panel do not take the colours of the 1st and 2nd.
    #[test]
    fn a_single_point_line_shows_and_twelve_series_have_twelve_colours() {
        let mut panel = Panel {
            log_x: true,
            ..Panel::default()
        };
        // eleven two-point lines, then one single point in the 12th colour
        for i in 0..11 {
            let y = i as f64 / 12.0;
            panel
                .series
                .push(Series::line(format!("m{i}"), vec![(1e-3, y), (1e-1, y)]));
        }
        // nameless, so no legend entry paints its colour: only the marker can
        panel.series.push(Series::line("", vec![(1e-2, 0.97)]));
        let colors: std::collections::BTreeSet<_> = (0..12)
            .map(|i| {
                let c = PALETTE[i % PALETTE.len()];
                (c.0, c.1, c.2)
            })
            .collect();
        assert_eq!(colors.len(), 12);
        let twelfth = PALETTE[11];
        assert!(
            pixels_of(&panel, twelfth) > 20,
            "the single point is not drawn"
        );
        panel.series.pop();
        assert_eq!(pixels_of(&panel, twelfth), 0);
    }

    #[test]
    fn log_lags_cover_the_horizon() {
        let l = log_lags(100_000, 50);
        assert_eq!(l[0], 1);
        assert_eq!(*l.last().unwrap(), 100_000);
        assert!(l.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(log_lags(1, 10), vec![1]);
    }

    #[test]
    fn writes_png_files() {
        let dir = std::env::temp_dir().join(format!("vort-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pts: Vec<(f64, f64)> = (1..100)
            .map(|j| (j as f64, (j as f64).powf(-0.5)))
            .collect();
        let line = dir.join("line.png");
        line_plot(
            &line,
            "t",
            "x",
            "y",
            &[Series::line("a", pts.clone())],
            true,
            true,
        )
        .unwrap();
        let two = dir.join("two.png");
        let panel = Panel {
            title: "p".into(),
            series: vec![Series::dashed("d", pts.clone()), Series::points("", vec![])],
            ..Panel::default()
        };
        two_panel_plot(&two, &panel, &panel).unwrap();
        let hist = dir.join("hist.png");
        histogram(&hist, "h", "v", &[1.0, 2.0, 2.0, 3.0, f64::NAN], 3).unwrap();
        // A log axis over more decades than f64 can divide (1e-300 .. 1) must not hang.
        let wide = dir.join("wide.png");
        let pts = vec![(1.0, 1e-300), (10.0, 5e-324), (100.0, 1.0), (1e3, 1e300)];
        line_plot(
            &wide,
            "t",
            "x",
            "y",
            &[Series::line("w", pts.clone())],
            true,
            true,
        )
        .unwrap();
        let pts = vec![(-f64::MAX, -f64::MAX), (f64::MAX, f64::MAX)];
        line_plot(
            &wide,
            "t",
            "x",
            "y",
            &[Series::line("w", pts)],
            false,
            false,
        )
        .unwrap();
        for p in [&line, &two, &hist, &wide] {
            let bytes = std::fs::read(p).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{}", p.display());
        }
        let bad = dir.join("no-such-dir").join("x.png");
        assert!(matches!(
            line_plot(&bad, "t", "x", "y", &[], false, false),
            Err(PlotError::Draw { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn category_plots_write_png_and_refuse_ragged_series() {
        let dir = std::env::temp_dir().join(format!("vort-cat-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cat.png");
        let mut panel = CategoryPanel {
            title: "t".into(),
            y_label: "bits per byte".into(),
            categories: vec!["a book with a very long title indeed".into(), "b".into()],
            markers: vec![("m".into(), vec![2.5, f64::NAN])],
            levels: vec![("gzip -9".into(), vec![2.9, 2.8])],
        };
        category_plot(&path, &panel).unwrap();
        assert!(std::fs::read(&path)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(short_label(&panel.categories[0]).chars().count(), 24);
        panel.levels[0].1.pop();
        assert!(matches!(
            category_plot(&path, &panel),
            Err(PlotError::Invalid(_))
        ));
        panel.categories.clear();
        assert!(matches!(
            category_plot(&path, &panel),
            Err(PlotError::Invalid(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn heat_maps_write_png_and_refuse_a_grid_they_do_not_fill() {
        let dir = std::env::temp_dir().join(format!("vort-heat-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("heat.png");
        let mut panel = HeatPanel {
            title: "t".into(),
            columns: ("length".into(), vec!["1K".into(), "4K".into()]),
            rows: ("depth".into(), vec!["0-50%".into(), "50-100%".into()]),
            values: vec![vec![100.0, f64::NAN], vec![12.5, 0.0]],
            range: (0.0, 100.0),
        };
        heat_maps(&path, std::slice::from_ref(&panel)).unwrap();
        assert!(std::fs::read(&path)
            .unwrap()
            .starts_with(b"\x89PNG\r\n\x1a\n"));
        panel.values[1].pop();
        assert!(matches!(
            heat_maps(&path, &[panel]),
            Err(PlotError::Invalid(_))
        ));
        assert!(matches!(heat_maps(&path, &[]), Err(PlotError::Invalid(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
