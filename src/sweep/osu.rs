//! A sweep of a collective run by MPI's algorithms: per case (a value of
//! every swept key), the OSU table of every size (means over the seeds),
//! and a plot of OSU's average latency.

use udrma_scenarios::report::svg::{fmt_bytes, lines_plot, Series, XAxis};

use super::plan::Layout;
use super::record::{OsuFigures, RunRecord};

/// One size of one value, over its runs.
struct Row {
    size: u64,
    /// Every algorithm the runs used at this size, `/`-joined.
    algorithm: String,
    /// Means over the runs that measured them.
    avg_us: Option<f64>,
    busbw_gbs: Option<f64>,
    /// The smallest rank's mean in any run, the largest in any run.
    min_us: Option<f64>,
    max_us: Option<f64>,
    /// Runs in which every measured iteration at this size finished, of
    /// `runs` (the means are over whatever finished).
    complete: usize,
    runs: usize,
}

/// Rows of the runs `rs` (all of one value), by size in the order the
/// first run reported them.
fn rows_of(rs: &[&RunRecord]) -> Vec<Row> {
    let mut sizes: Vec<u64> = Vec::new();
    for r in rs {
        for o in &r.osu {
            if !sizes.contains(&o.size) {
                sizes.push(o.size);
            }
        }
    }
    sizes
        .into_iter()
        .map(|size| {
            let got: Vec<&OsuFigures> = rs
                .iter()
                .flat_map(|r| r.osu.iter().filter(move |o| o.size == size))
                .collect();
            // Means over the runs that measured a figure; a run whose
            // iterations all failed has none, and is not counted as 0.
            let mean = |f: fn(&OsuFigures) -> Option<f64>| {
                let xs: Vec<f64> = got.iter().filter_map(|o| f(o)).collect();
                (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
            };
            let mut algorithms: Vec<&str> = Vec::new();
            for o in &got {
                if !algorithms.contains(&o.algorithm.as_str()) {
                    algorithms.push(&o.algorithm);
                }
            }
            Row {
                size,
                algorithm: algorithms.join("/"),
                avg_us: mean(|o| o.avg_us),
                busbw_gbs: mean(|o| o.busbw_gbs),
                min_us: got.iter().filter_map(|o| o.min_us).reduce(f64::min),
                max_us: got.iter().filter_map(|o| o.max_us).reduce(f64::max),
                complete: got.iter().filter(|o| o.finished == o.wanted).count(),
                runs: got.len(),
            }
        })
        .collect()
}

/// Prints the table, one row per case (a value of every swept key) and
/// size, and returns the plot: OSU's average latency against the size
/// per rank, one line per case; with one swept key, when every run
/// measured one and the same size and the values are positive numbers,
/// against the values instead.
pub fn table_and_plot(layout: &Layout, records: &[RunRecord]) -> String {
    let jobs = layout.jobs();
    let cols = super::output::case_columns(layout);
    let label = |cells: &[String]| super::output::case_label(&cols, cells);
    let keys: Vec<String> = layout.axes.iter().map(|a| a.key.clone()).collect();
    outln!(
        "{} {:>10} {:<26} {:>12} {:>12} {:>12} {:>11} {:>5}",
        label(&keys),
        "size",
        "algorithm",
        "avg us",
        "min us",
        "max us",
        "busbw GB/s",
        "runs"
    );
    let cases: Vec<Vec<String>> = (0..layout.case_count())
        .map(|c| layout.case(c).into_iter().map(|(_, v)| v).collect())
        .collect();
    let by_case: Vec<Vec<Row>> = (0..cases.len())
        .map(|c| rows_of(&super::output::of_case(&jobs, records, c)))
        .collect();
    for (values, rows) in cases.iter().zip(&by_case) {
        for r in rows {
            let f = |x: Option<f64>, w: usize| {
                x.map_or(format!("{:>w$}", "-"), |x| format!("{x:>w$.2}"))
            };
            // "complete/runs" when some run did not finish every
            // iteration at this size (as a run's own table says PARTIAL).
            let runs = if r.complete == r.runs {
                r.runs.to_string()
            } else {
                format!("{}/{}", r.complete, r.runs)
            };
            outln!(
                "{} {:>10} {:<26} {} {} {} {} {:>5}",
                label(values),
                fmt_bytes(r.size as f64).replace(' ', ""),
                r.algorithm,
                f(r.avg_us, 12),
                f(r.min_us, 12),
                f(r.max_us, 12),
                f(r.busbw_gbs, 11),
                runs
            );
        }
    }
    plot(layout, &cases, &by_case)
}

/// The plot of [`table_and_plot`].
fn plot(layout: &Layout, cases: &[Vec<String>], by_case: &[Vec<Row>]) -> String {
    let sizes: Vec<u64> = by_case.iter().flatten().map(|r| r.size).collect();
    let one_size =
        by_case.iter().all(|rows| rows.len() == 1) && sizes.windows(2).all(|w| w[0] == w[1]);
    let xs: Vec<f64> = cases
        .iter()
        .filter_map(|c| c[0].parse::<f64>().ok())
        .collect();
    let numeric = layout.case_count() == layout.axes[0].values.len()
        && xs.len() == cases.len()
        && xs.iter().all(|x| *x > 0.0);
    let (axis, series) = if one_size && numeric {
        let mut points: Vec<(f64, f64)> = xs
            .iter()
            .zip(by_case)
            .filter_map(|(x, rows)| rows[0].avg_us.map(|y| (*x, y)))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let name = format!("{} per rank", fmt_bytes(sizes[0] as f64));
        (
            XAxis {
                label: layout.axes[0].key.clone(),
                log2: true,
                bytes: false,
                names: Vec::new(),
            },
            vec![Series { name, points }],
        )
    } else {
        let series = cases
            .iter()
            .zip(by_case)
            .map(|(values, rows)| {
                let mut points: Vec<(f64, f64)> = rows
                    .iter()
                    .filter_map(|r| r.avg_us.map(|y| (r.size as f64, y)))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                let name = super::output::case_columns(layout)
                    .iter()
                    .map(|(i, _)| {
                        let key = &layout.axes[*i].key;
                        format!("{}={}", key.rsplit('.').next().unwrap_or(key), values[*i])
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                Series { name, points }
            })
            .collect();
        (
            XAxis {
                label: "bytes per rank".into(),
                log2: true,
                bytes: true,
                names: Vec::new(),
            },
            series,
        )
    };
    lines_plot(
        "OSU average latency (mean over seeds)",
        &axis,
        "latency (µs)",
        &series,
        &[],
    )
}
