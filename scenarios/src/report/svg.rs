//! SVG drawings as plain text: sweep plots and ladder (sequence) diagrams.
//! No fonts or rendering libraries needed; any browser opens them.

use std::fmt::Write as _;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One panel of a sweep plot: y values (one per seed) at each x.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Y-axis title, with its unit.
    pub title: String,
    /// (x, values across seeds), sorted by x.
    pub points: Vec<(f64, Vec<f64>)>,
    /// A logarithmic y axis (for quantities that span decades, such as
    /// latency over message sizes from 1 B to 4 MiB).
    pub log_y: bool,
}

/// The shared x axis of a sweep plot.
#[derive(Debug, Clone, Default)]
pub struct XAxis {
    /// Title, with its unit.
    pub label: String,
    /// Place points by log2 of x (message sizes that double).
    pub log2: bool,
    /// Label ticks as byte sizes (`8 KiB`) instead of numbers.
    pub bytes: bool,
    /// Names of categorical values (`none`, `nscc`): point `i` sits at
    /// x = i and its tick shows `names[i]`.
    pub names: Vec<String>,
}

/// `8 KiB`, `1 MiB`, `1.5 KiB`, `512 B`.
pub fn fmt_bytes(v: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = v;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{} {}", fmt_num(v), UNITS[u])
}

/// Ticks for a log axis over [lo, hi] (both > 0): every power of ten, and
/// 2× and 5× steps when the range spans fewer than three decades.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let fine = b - a < 3;
    let mut out = Vec::new();
    for e in a..=b {
        let base = 10f64.powi(e);
        let steps: &[f64] = if fine { &[1.0, 2.0, 5.0] } else { &[1.0] };
        for m in steps {
            let v = base * m;
            if v >= lo * 0.999 && v <= hi * 1.001 {
                out.push(v);
            }
        }
    }
    out
}

fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(raw);
    let mut v = (lo / step).floor() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        out.push(v);
        v += step;
    }
    out
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        format!("{v:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// Stacked panels sharing one x axis: the mean across seeds as a line with
/// points, the min–max spread as a band.
pub fn sweep_plot(title: &str, x_axis: &XAxis, panels: &[Panel]) -> String {
    let (w, ph, left, right, top, gap) = (760.0, 260.0, 80.0, 30.0, 50.0, 70.0);
    let height = top + panels.len() as f64 * (ph + gap) + 20.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    let xs = Xs::new(x_axis, panels, left, w - left - right);
    for (i, p) in panels.iter().enumerate() {
        let ys = Ys::new(p, top + i as f64 * (ph + gap), ph);
        panel_frame(&mut s, p, &xs, &ys);
        panel_series(&mut s, p, &xs, &ys);
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{} (line: mean across seeds; band: min–max)</text></svg>"#,
        left + xs.width / 2.0,
        height - 8.0,
        esc(&x_axis.label)
    );
    s
}

/// A sweep plot's x axis, shared by its panels: the first panel's
/// points, placed (log2 if asked) between `left` and `left + width`.
struct Xs<'a> {
    axis: &'a XAxis,
    /// The points as swept, and as placed.
    raw: Vec<f64>,
    placed: Vec<f64>,
    min: f64,
    max: f64,
    left: f64,
    width: f64,
}

impl<'a> Xs<'a> {
    fn new(axis: &'a XAxis, panels: &[Panel], left: f64, width: f64) -> Xs<'a> {
        let raw: Vec<f64> = panels
            .first()
            .map(|p| p.points.iter().map(|(x, _)| *x).collect())
            .unwrap_or_default();
        let mut xs = Xs {
            axis,
            raw,
            placed: Vec::new(),
            min: 0.0,
            max: 0.0,
            left,
            width,
        };
        xs.placed = xs.raw.iter().map(|x| xs.pos(*x)).collect();
        let (min, max) = xs
            .placed
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
        (xs.min, xs.max) = if min >= max {
            (min - 1.0, max + 1.0)
        } else {
            (min, max)
        };
        xs
    }

    /// Where a swept value sits on the axis (log2 if asked).
    fn pos(&self, x: f64) -> f64 {
        if self.axis.log2 && x > 0.0 {
            x.log2()
        } else {
            x
        }
    }

    /// A placed value's pixel.
    fn sx(&self, x: f64) -> f64 {
        self.left + (x - self.min) / (self.max - self.min) * self.width
    }

    /// A swept value's label: its name, bytes, or number.
    fn text(&self, x: f64) -> String {
        let i = x as usize;
        if !self.axis.names.is_empty() && i as f64 == x && i < self.axis.names.len() {
            self.axis.names[i].clone()
        } else if self.axis.bytes {
            fmt_bytes(x)
        } else {
            fmt_num(x)
        }
    }
}

/// One panel's y axis: from its top `y0`, `height` tall, linear from 0
/// or logarithmic over its positive values.
struct Ys {
    y0: f64,
    height: f64,
    lo: f64,
    max: f64,
    log: bool,
}

impl Ys {
    fn new(p: &Panel, y0: f64, height: f64) -> Ys {
        let all: Vec<f64> = p
            .points
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        let positive: Vec<f64> = all.iter().copied().filter(|v| *v > 0.0).collect();
        let log = p.log_y && !positive.is_empty();
        let (lo, max) = if log {
            let lo = positive.iter().copied().fold(f64::MAX, f64::min) / 1.5;
            let hi = positive.iter().copied().fold(0.0, f64::max) * 1.5;
            (lo, hi.max(lo * 10.0))
        } else {
            let ymax = all.iter().copied().fold(0.0, f64::max) * 1.1;
            (0.0, if ymax <= 0.0 { 1.0 } else { ymax })
        };
        Ys {
            y0,
            height,
            lo,
            max,
            log,
        }
    }

    /// A value's pixel.
    fn sy(&self, y: f64) -> f64 {
        let (y0, ph) = (self.y0, self.height);
        if self.log {
            let y = y.max(self.lo);
            y0 + ph - (y / self.lo).log10() / (self.max / self.lo).log10() * ph
        } else {
            y0 + ph - y / self.max * ph
        }
    }
}

/// A panel's box, title, y ticks with grid lines, and x labels.
fn panel_frame(s: &mut String, p: &Panel, xs: &Xs, ys: &Ys) {
    let (left, pw, y0, ph) = (xs.left, xs.width, ys.y0, ys.height);
    let _ = write!(
        s,
        r##"<rect x="{left}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#444"/><text x="18" y="{}" transform="rotate(-90 18 {})" text-anchor="middle">{}</text>"##,
        y0 + ph / 2.0,
        y0 + ph / 2.0,
        esc(&p.title)
    );
    let ticks = if ys.log {
        log_ticks(ys.lo, ys.max)
    } else {
        nice_ticks(0.0, ys.max, 5)
    };
    for t in ticks {
        let y = ys.sy(t);
        let _ = write!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            y + 4.0,
            fmt_num(t)
        );
    }
    // Every label when they fit; else every second, third, ...
    let every = xs.placed.len().div_ceil(12).max(1);
    for (i, (x, raw)) in xs.placed.iter().zip(&xs.raw).enumerate() {
        if i % every != 0 {
            continue;
        }
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" text-anchor="middle">{}</text>"##,
            xs.sx(*x),
            y0 + ph + 16.0,
            xs.text(*raw)
        );
    }
}

/// A panel's data: the min–max band, the mean line, and each point with
/// its spread and a tooltip.
fn panel_series(s: &mut String, p: &Panel, xs: &Xs, ys: &Ys) {
    let stats: Vec<(f64, f64, f64, f64)> = p
        .points
        .iter()
        .map(|(x, v)| {
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            let lo = v.iter().copied().fold(f64::MAX, f64::min);
            let hi = v.iter().copied().fold(f64::MIN, f64::max);
            (*x, mean, lo, hi)
        })
        .collect();
    let at = |x: f64| xs.sx(xs.pos(x));
    if stats.len() > 1 {
        let mut band = String::new();
        for (x, _, _, hi) in &stats {
            let _ = write!(band, "{},{} ", at(*x), ys.sy(*hi));
        }
        for (x, _, lo, _) in stats.iter().rev() {
            let _ = write!(band, "{},{} ", at(*x), ys.sy(*lo));
        }
        let _ = write!(
            s,
            r##"<polygon points="{band}" fill="#4a7ebb" fill-opacity="0.2" stroke="none"/>"##
        );
        let line: String = stats
            .iter()
            .map(|(x, m, _, _)| format!("{},{} ", at(*x), ys.sy(*m)))
            .collect();
        let _ = write!(
            s,
            r##"<polyline points="{line}" fill="none" stroke="#1f4e8c" stroke-width="2"/>"##
        );
    }
    for (x, m, lo, hi) in &stats {
        let _ = write!(
            s,
            r##"<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#1f4e8c"/><circle cx="{0}" cy="{3}" r="3.5" fill="#1f4e8c"><title>{4}: mean {5}, min {6}, max {7}</title></circle>"##,
            at(*x),
            ys.sy(*lo),
            ys.sy(*hi),
            ys.sy(*m),
            xs.text(*x),
            fmt_num(*m),
            fmt_num(*lo),
            fmt_num(*hi)
        );
    }
}

/// How a ladder arrow is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Delivered.
    Normal,
    /// A retransmission, delivered.
    Retransmit,
    /// Lost in the fabric.
    Dropped,
    /// A fault's extra copy.
    Duplicate,
    /// Bits flipped (the receiver drops it at its ICRC check).
    Corrupted,
}

/// One arrow of a ladder diagram.
#[derive(Debug, Clone)]
pub struct Arrow {
    /// Left to right (else right to left).
    pub rightward: bool,
    /// Sent (ps).
    pub sent: u64,
    /// Arrived or dropped (ps).
    pub end: u64,
    /// Label (`WRITE_FIRST 0/4`).
    pub label: String,
    /// How to draw it.
    pub mark: Mark,
    /// Parked in the escape channel until this time (ps).
    pub held_until: Option<u64>,
    /// The message it belongs to (escape-channel holds of different
    /// messages get their own lanes).
    pub msg: u32,
}

/// A sequence diagram between two hosts: time downward (one row per
/// distinct event time, in order, with a time scale on the left that
/// gives the real times), one arrow per packet, losses as crosses, copies
/// dashed, corruptions in orange, retransmissions in purple,
/// escape-channel holds as red bars beside the receiver's line, one lane
/// per message.
pub fn ladder(left: &str, right: &str, arrows: &[Arrow], note: &str) -> String {
    let (w, xl, xr, top) = (1060.0, 360.0, 760.0, 70.0);
    let t0 = arrows.iter().map(|a| a.sent).min().unwrap_or(0);
    let rows = Rows::new(arrows, top);
    let t1 = rows.times.last().copied().unwrap_or(t0);
    let height = rows.y(t1) + 60.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="context-stroke"/></marker></defs><text x="{xl}" y="30" text-anchor="middle" font-size="14" font-weight="bold">{}</text><text x="{xr}" y="30" text-anchor="middle" font-size="14" font-weight="bold">{}</text><line x1="{xl}" x2="{xl}" y1="{top}" y2="{}" stroke="#333" stroke-width="2"/><line x1="{xr}" x2="{xr}" y1="{top}" y2="{}" stroke="#333" stroke-width="2"/>"##,
        esc(left),
        esc(right),
        height - 40.0,
        height - 40.0
    );
    time_scale(&mut s, &rows, t0, height);
    // One lane per message that has a hold.
    let mut lanes: Vec<u32> = arrows
        .iter()
        .filter(|a| a.held_until.is_some())
        .map(|a| a.msg)
        .collect();
    lanes.sort_unstable();
    lanes.dedup();
    let mut sides = Sides {
        xl,
        xr,
        t0,
        lanes,
        next_left: 0.0,
        next_right: 0.0,
    };
    for a in arrows {
        sides.arrow(&mut s, a, &rows);
    }
    let _ = write!(
        s,
        r##"<text x="10" y="{}" fill="#555">{} · blue delivered · purple retransmission · red ✗ dropped · green dashed copy · orange corrupted · red bar: held in the escape channel (one lane per message)</text></svg>"##,
        height - 12.0,
        esc(note)
    );
    s
}

/// A ladder's rows, by event order, not proportional time: every
/// distinct send, arrival or hold end gets its own row, so bursts stay
/// readable next to long gaps; labels carry the real times.
struct Rows {
    times: Vec<u64>,
    top: f64,
}

impl Rows {
    fn new(arrows: &[Arrow], top: f64) -> Rows {
        let mut times: Vec<u64> = arrows
            .iter()
            .flat_map(|a| [Some(a.sent), Some(a.end), a.held_until])
            .flatten()
            .collect();
        times.sort_unstable();
        times.dedup();
        Rows { times, top }
    }

    /// The row of time `t`.
    fn y(&self, t: u64) -> f64 {
        self.top + self.times.partition_point(|x| *x < t) as f64 * 16.0
    }
}

/// The time scale: a tick every few rows, labelled with the time since
/// the first packet (rows are in event order, so the spacing is not
/// proportional; the labels say where time jumps).
fn time_scale(s: &mut String, rows: &Rows, t0: u64, height: f64) {
    let _ = write!(
        s,
        r##"<line x1="70" x2="70" y1="{}" y2="{}" stroke="#999"/><text x="70" y="{}" text-anchor="middle" fill="#555">time since first packet</text>"##,
        rows.top,
        height - 40.0,
        rows.top - 12.0
    );
    let every = 5;
    for (i, t) in rows.times.iter().enumerate().step_by(every) {
        let yt = rows.y(*t);
        let _ = write!(
            s,
            r##"<line x1="66" x2="74" y1="{yt}" y2="{yt}" stroke="#999"/><text x="62" y="{}" text-anchor="end" fill="#555" font-size="10">{}</text>"##,
            yt + 3.0,
            if i == 0 {
                "0".to_string()
            } else {
                format!("{:.3}us", (*t - t0) as f64 / 1e6)
            }
        );
    }
}

/// The two hosts' lines, the escape-channel lanes beside them, and where
/// the next label on each side may start (labels of packets sent at the
/// same moment stack instead of overlapping).
struct Sides {
    xl: f64,
    xr: f64,
    t0: u64,
    lanes: Vec<u32>,
    next_left: f64,
    next_right: f64,
}

impl Sides {
    /// One packet: its arrow (cut short with a cross if dropped), its
    /// label, and its hold in the escape channel.
    fn arrow(&mut self, s: &mut String, a: &Arrow, rows: &Rows) {
        let (xl, xr, t0) = (self.xl, self.xr, self.t0);
        let (xa, xb) = if a.rightward { (xl, xr) } else { (xr, xl) };
        let (ya, yb) = (rows.y(a.sent), rows.y(a.end));
        let (color, dash) = match a.mark {
            Mark::Normal => ("#1f4e8c", ""),
            Mark::Retransmit => ("#7b2d9b", ""),
            Mark::Dropped => ("#c62828", "4,3"),
            Mark::Duplicate => ("#2e7d32", "6,3"),
            Mark::Corrupted => ("#ef6c00", ""),
        };
        let xend = if a.mark == Mark::Dropped {
            xa + (xb - xa) * 0.6
        } else {
            xb
        };
        let yend = if a.mark == Mark::Dropped {
            ya + (yb - ya).max(8.0) * 0.6
        } else {
            yb
        };
        let _ = write!(
            s,
            r#"<line x1="{xa}" y1="{ya}" x2="{xend}" y2="{yend}" stroke="{color}" stroke-width="1.3" stroke-dasharray="{dash}" marker-end="url(#a)"/>"#
        );
        if a.mark == Mark::Dropped {
            let _ = write!(
                s,
                r#"<path d="M{0},{1} l8,8 m0,-8 l-8,8" stroke="{color}" stroke-width="2" transform="translate(-4,-4)"/>"#,
                xend, yend
            );
        }
        let tag = match a.mark {
            Mark::Normal => "",
            Mark::Retransmit => " (retx)",
            Mark::Dropped => " ✗ dropped",
            Mark::Duplicate => " (copy)",
            Mark::Corrupted => " (corrupted)",
        };
        // Labels start beyond the escape-channel lanes.
        let lane_room = 8.0 * self.lanes.len() as f64;
        let lx = if a.rightward {
            xl - 8.0 - lane_room
        } else {
            xr + 8.0 + lane_room
        };
        let anchor = if a.rightward { "end" } else { "start" };
        let next = if a.rightward {
            &mut self.next_left
        } else {
            &mut self.next_right
        };
        let ly = (ya + 4.0).max(*next);
        *next = ly + 13.0;
        let _ = write!(
            s,
            r#"<text x="{lx}" y="{ly}" text-anchor="{anchor}" fill="{color}">{} {}{}</text>"#,
            format_args!("{:.3}us", (a.sent - t0) as f64 / 1e6),
            esc(&a.label),
            tag
        );
        if let Some(h) = a.held_until {
            // Lanes step away from the receiver's line, outward.
            let lane = self.lanes.partition_point(|m| *m < a.msg) as f64;
            let (xh, dir) = if a.rightward { (xr, 1.0) } else { (xl, -1.0) };
            let x = xh + dir * (6.0 + lane * 8.0) - 3.0;
            let _ = write!(
                s,
                r##"<rect x="{x}" y="{}" width="6" height="{}" fill="#c62828" fill-opacity="0.6"><title>held in the escape channel: msg {} until {:.3}us</title></rect>"##,
                yb,
                (rows.y(h) - yb).max(2.0),
                a.msg,
                (h - t0) as f64 / 1e6
            );
        }
    }
}

/// One line of a [`lines_plot`].
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, sorted by x.
    pub points: Vec<(f64, f64)>,
}

/// A point marked on a [`lines_plot`] (a crossover), with its label.
#[derive(Debug, Clone)]
pub struct Spot {
    /// Where.
    pub x: f64,
    /// Where.
    pub y: f64,
    /// What it says.
    pub label: String,
}

/// Several lines over one pair of axes (both logarithmic: x by log2, y by
/// log10), with a legend and marked points.
pub fn lines_plot(
    title: &str,
    x_axis: &XAxis,
    y_label: &str,
    series: &[Series],
    spots: &[Spot],
) -> String {
    let (w, h, left, right, top, bottom) = (820.0, 420.0, 80.0, 210.0, 50.0, 60.0);
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/><text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        (w - right + left) / 2.0,
        esc(title)
    );
    if all.is_empty() {
        s.push_str("</svg>\n");
        return s;
    }
    let frame = LogFrame::new(&all, left, top, w - left - right, h - top - bottom);
    frame.axes(&mut s, &all, x_axis, y_label, h);
    for (i, se) in series.iter().enumerate() {
        frame.series(&mut s, i, se);
    }
    frame.spots(&mut s, spots);
    s.push_str("</svg>\n");
    s
}

/// A lines plot's frame: log2 x and log10 y over the points' range,
/// `width` by `height` from (`left`, `top`).
struct LogFrame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    /// log2 of the x range.
    x0: f64,
    x1: f64,
    /// Whole decades around the y range.
    y0: f64,
    y1: f64,
}

impl LogFrame {
    fn new(all: &[(f64, f64)], left: f64, top: f64, width: f64, height: f64) -> LogFrame {
        let fold = |f: fn(&(f64, f64)) -> f64| {
            all.iter()
                .map(f)
                .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)))
        };
        let (x0, x1) = fold(|p| p.0.log2());
        let (ylo, yhi) = fold(|p| p.1);
        let (x0, x1) = if x0 >= x1 {
            (x0 - 1.0, x1 + 1.0)
        } else {
            (x0, x1)
        };
        LogFrame {
            left,
            top,
            width,
            height,
            x0,
            x1,
            y0: ylo.log10().floor(),
            y1: yhi.log10().ceil().max(ylo.log10().floor() + 1.0),
        }
    }

    fn sx(&self, x: f64) -> f64 {
        self.left + (x.log2() - self.x0) / (self.x1 - self.x0) * self.width
    }

    fn sy(&self, y: f64) -> f64 {
        self.top + self.height - (y.log10() - self.y0) / (self.y1 - self.y0) * self.height
    }

    /// The box, y ticks by decade, a grid line and label at every x of
    /// the points, and the axis labels (`h`: the picture's height).
    fn axes(&self, s: &mut String, all: &[(f64, f64)], x_axis: &XAxis, y_label: &str, h: f64) {
        let (left, top, pw, ph) = (self.left, self.top, self.width, self.height);
        let _ = write!(
            s,
            r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
        );
        for t in log_ticks(10f64.powf(self.y0), 10f64.powf(self.y1)) {
            let y = self.sy(t);
            let _ = write!(
                s,
                r##"<line x1="{left}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                left + pw,
                left - 6.0,
                y + 4.0,
                fmt_num(t)
            );
        }
        let mut xs: Vec<f64> = all.iter().map(|p| p.0).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        // A grid line at every x; a label only where it clears the last
        // one (twenty sizes would run their labels together).
        let mut last_label = f64::NEG_INFINITY;
        for x in xs {
            let px = self.sx(x);
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{}" stroke="#eee"/>"##,
                top + ph
            );
            if px - last_label < 44.0 {
                continue;
            }
            last_label = px;
            let text = if x_axis.bytes {
                fmt_bytes(x)
            } else {
                fmt_num(x)
            };
            let _ = write!(
                s,
                r##"<text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
                top + ph + 16.0,
                esc(&text)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">{}</text>"#,
            left + pw / 2.0,
            h - 16.0,
            esc(&x_axis.label),
            top + ph / 2.0,
            top + ph / 2.0,
            esc(y_label)
        );
    }

    /// Series `i`: its line, its points, and its entry in the legend.
    fn series(&self, s: &mut String, i: usize, se: &Series) {
        const COLORS: [&str; 6] = [
            "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
        ];
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<String> = se
            .points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|(x, y)| format!("{:.1},{:.1}", self.sx(*x), self.sy(*y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(s, r#"<circle cx="{px}" cy="{py}" r="3" fill="{c}"/>"#);
        }
        let ly = self.top + 10.0 + i as f64 * 18.0;
        let lx = self.left + self.width + 12.0;
        // The legend's column holds about 28 characters: a longer name is
        // cut, and whole in the entry's tooltip.
        const FITS: usize = 28;
        let shown = if se.name.chars().count() > FITS {
            format!("{}…", se.name.chars().take(FITS - 1).collect::<String>())
        } else {
            se.name.clone()
        };
        let _ = write!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}"><title>{}</title>{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            esc(&se.name),
            esc(&shown)
        );
    }

    /// The marked points (crossovers), circled and labelled; labels at
    /// the same x stack instead of overlapping.
    fn spots(&self, s: &mut String, spots: &[Spot]) {
        let mut labelled: Vec<f64> = Vec::new();
        for m in spots.iter().filter(|m| m.x > 0.0 && m.y > 0.0) {
            let (px, py) = (self.sx(m.x), self.sy(m.y));
            let above = labelled.iter().filter(|x| (**x - px).abs() < 1.0).count() as f64;
            labelled.push(px);
            let _ = write!(
                s,
                r##"<circle cx="{px:.1}" cy="{py:.1}" r="7" fill="none" stroke="#000" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"##,
                px + 9.0,
                py - 9.0 - 14.0 * above,
                esc(&m.label)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawings_are_well_formed_svg() {
        let p = sweep_plot(
            "t",
            &XAxis {
                label: "loss".into(),
                ..XAxis::default()
            },
            &[Panel {
                title: "goodput (Gb/s)".into(),
                points: vec![(0.0, vec![90.0, 92.0]), (0.01, vec![80.0, 85.0])],
                log_y: false,
            }],
        );
        assert!(p.starts_with("<svg") && p.ends_with("</svg>") && p.contains("polyline"));
        let l = ladder(
            "h0",
            "h1",
            &[Arrow {
                rightward: true,
                sent: 0,
                end: 1_000_000,
                label: "WRITE_FIRST 0/2".into(),
                mark: Mark::Dropped,
                held_until: None,
                msg: 0,
            }],
            "x",
        );
        assert!(l.contains("dropped") && l.ends_with("</svg>"));
    }

    #[test]
    fn size_sweeps_label_sizes_and_spread_latency_over_decades() {
        let points: Vec<(f64, Vec<f64>)> = (0..23)
            .map(|e| (2f64.powi(e), vec![1.0 + 2f64.powi(e) / 1e4]))
            .collect();
        let p = sweep_plot(
            "osu",
            &XAxis {
                label: "message size".into(),
                log2: true,
                bytes: true,
                names: Vec::new(),
            },
            &[Panel {
                title: "latency (us)".into(),
                points,
                log_y: true,
            }],
        );
        // Sizes, not exponents, on the x axis.
        assert!(
            p.contains(">4 KiB<") && p.contains(">1 B<") && p.contains(">4 MiB<"),
            "{p}"
        );
        assert!(!p.contains(">13<"));
        // Decade ticks on the y axis: 1, 10 and 100 us all labelled.
        for t in [">1<", ">10<", ">100<"] {
            assert!(p.contains(t), "{t} missing");
        }
        assert_eq!(fmt_bytes(1536.0), "1.5 KiB");
    }
}
