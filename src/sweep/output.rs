//! A sweep's outputs from its records: the CSV (one row per run), the
//! table on stdout and the plot. `udrma sweep` and `udrma merge` both end
//! here, so a merge of shards writes what one machine would have written.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use udrma_scenarios::file::units::parse_size;
use udrma_scenarios::report::svg::{sweep_plot, Panel, XAxis};

use super::plan::{Job, Layout};
use super::record::{Cell, CollectiveFigures, MessagingFigures, RunRecord};

/// The header and rows of the CSV and JSON outputs: the settings, the
/// seed, [`RunRecord::COLUMNS`] and `extra` (name, value) on every row.
/// `records` are in the layout's job order; a run of an MPI collective
/// gives one row per size.
fn table(
    layout: &Layout,
    records: &[(super::plan::Job, &RunRecord)],
    extra: &[(&str, String)],
) -> (Vec<String>, Vec<Vec<Cell>>) {
    let mut header: Vec<String> = layout.axes.iter().map(|a| a.key.clone()).collect();
    header.push("seed".into());
    header.extend(RunRecord::COLUMNS.iter().map(|c| c.to_string()));
    header.extend(extra.iter().map(|(k, _)| k.to_string()));
    let mut rows = Vec::new();
    for (job, r) in records {
        for cells in r.rows() {
            let mut row: Vec<Cell> = layout
                .case(job.case)
                .into_iter()
                .map(|(_, v)| Cell::Text(v))
                .collect();
            row.push(Cell::Int(job.seed));
            row.extend(cells);
            row.extend(extra.iter().map(|(_, v)| Cell::Text(v.clone())));
            rows.push(row);
        }
    }
    (header, rows)
}

/// Writes one CSV row per record (one per size for an MPI collective),
/// with `extra` columns (name, value) appended to every row.
pub fn write_csv(
    path: &Path,
    layout: &Layout,
    records: &[(super::plan::Job, &RunRecord)],
    extra: &[(&str, String)],
) -> anyhow::Result<()> {
    let (header, rows) = table(layout, records, extra);
    let mut w = csv::Writer::from_path(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    w.write_record(&header)?;
    for row in rows {
        w.write_record(row.iter().map(Cell::text))?;
    }
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Writes the CSV's rows as a JSON array of objects, one per line, keyed
/// by the CSV's header in its order: numbers as numbers, a column that does not apply as `null`,
/// the settings as the text given to `--set`.
pub fn write_json(
    path: &Path,
    layout: &Layout,
    records: &[(super::plan::Job, &RunRecord)],
) -> anyhow::Result<()> {
    let (header, rows) = table(layout, records, &[]);
    let lines = rows
        .iter()
        .map(|row| serde_json::to_string(&InOrder(&header, row)))
        .collect::<Result<Vec<_>, _>>()?;
    let text = format!("[\n  {}\n]\n", lines.join(",\n  "));
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// One row as a JSON object whose keys keep the CSV's order (a
/// `serde_json` map would sort them).
struct InOrder<'a>(&'a [String], &'a [Cell]);

impl serde::Serialize for InOrder<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, c) in self.0.iter().zip(self.1) {
            map.serialize_entry(k, &c.json())?;
        }
        map.end()
    }
}

/// Where a sweep's or a merge's outputs go (the table always goes to
/// stdout).
#[derive(Debug, Clone, Copy, Default)]
pub struct Outputs<'a> {
    /// `--csv`.
    pub csv: Option<&'a Path>,
    /// `--json`.
    pub json: Option<&'a Path>,
    /// `--plot`.
    pub plot: Option<&'a Path>,
}

/// The table, and the CSV, JSON and plot when asked; exit 1 if a run
/// failed a check. `records` holds every job of `layout`, in its job
/// order.
pub fn report(
    name: &str,
    layout: &Layout,
    records: &[RunRecord],
    out: Outputs,
) -> anyhow::Result<ExitCode> {
    let jobs = layout.jobs();
    debug_assert_eq!(jobs.len(), records.len());
    let rows: Vec<_> = jobs.iter().copied().zip(records).collect();
    if let Some(path) = out.csv {
        write_csv(path, layout, &rows, &[])?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = out.json {
        write_json(path, layout, &rows)?;
        eprintln!("wrote {}", path.display());
    }
    let plot = out.plot;
    // The runs whose first setting has its `vi`-th value.
    let first_len = layout.axes[0].values.len();
    let per_value = layout.case_count() / first_len;
    let of_value = |vi: usize| -> Vec<&RunRecord> {
        jobs.iter()
            .zip(records)
            .filter(|(j, _)| j.case / per_value == vi)
            .map(|(_, r)| r)
            .collect()
    };
    let first = &layout.axes[0];
    let first = (&first.key, &first.values);
    let xs = positions(first.1);
    let by = ByValue::of(&xs, &of_value);
    // MPI collectives: goodput and completion times mean nothing there;
    // OSU's table and latency plot take their place.
    let osu = records.iter().all(|r| !r.osu.is_empty());
    print_table(layout, records, osu);
    if osu {
        let svg = super::osu::table_and_plot(layout, records);
        if let Some(path) = plot {
            write_plot(path, &svg)?;
        }
        return Ok(exit_code(records));
    }
    // Messaging runs: latency and bandwidth of the first per-size row.
    let messaging = records.iter().all(|r| r.messaging.is_some());
    let (lat, bw) = if messaging {
        messaging_rows(first.1, &xs, &of_value)
    } else {
        (Vec::new(), Vec::new())
    };
    let collective = records.iter().all(|r| r.collective.is_some());
    if collective {
        let svg = collective_lines(first.0, first.1, &xs, &of_value);
        if let Some(path) = plot {
            write_plot(path, &svg)?;
        }
    } else if let Some(path) = plot {
        let panels = if messaging {
            vec![
                Panel {
                    title: "one-way latency or time per message (us)".into(),
                    points: lat,
                    log_y: true,
                },
                Panel {
                    title: "bandwidth (MB/s)".into(),
                    points: bw,
                    log_y: false,
                },
            ]
        } else {
            vec![
                Panel {
                    title: "goodput (Gb/s)".into(),
                    points: by.goodput,
                    log_y: false,
                },
                Panel {
                    title: "p99 completion (us)".into(),
                    points: by.p99,
                    log_y: false,
                },
                Panel {
                    title: "retransmits".into(),
                    points: by.retx,
                    log_y: false,
                },
            ]
        };
        let title = format!(
            "{} — {} runs ({} seeds per point)",
            name,
            records.len(),
            layout.seeds
        );
        let svg = sweep_plot(&title, &x_axis(first, &xs, messaging), &sorted(&xs, panels));
        write_plot(path, &svg)?;
    }
    Ok(exit_code(records))
}

/// Writes the plot, and names it on stderr.
fn write_plot(path: &Path, svg: &str) -> anyhow::Result<()> {
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// 0 when every run passed its checks, else 1.
fn exit_code(records: &[RunRecord]) -> ExitCode {
    if records.iter().all(RunRecord::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Where each value of the first setting sits on the x axis: the number,
/// else the size in bytes, else its place (`nic.cc=none,nscc`: 0, 1, ...).
fn positions(values: &[String]) -> Vec<f64> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.parse::<f64>()
                .ok()
                .or_else(|| parse_size(v).ok().map(|b| b as f64))
                .unwrap_or(i as f64)
        })
        .collect()
}

/// One plotted quantity: (x, that quantity of every run at x).
type Points = Vec<(f64, Vec<f64>)>;

/// Per value of the first setting, every run's figures (over seeds and
/// the other settings), for the plot.
struct ByValue {
    goodput: Points,
    p99: Points,
    retx: Points,
}

impl ByValue {
    /// `xs`: where each value of the first setting sits on the x axis.
    fn of<'r>(xs: &[f64], of_value: &dyn Fn(usize) -> Vec<&'r RunRecord>) -> ByValue {
        let mut by = ByValue {
            goodput: Vec::new(),
            p99: Vec::new(),
            retx: Vec::new(),
        };
        for (vi, x) in xs.iter().enumerate() {
            let rs = of_value(vi);
            let each = |f: &dyn Fn(&RunRecord) -> f64| rs.iter().map(|r| f(r)).collect::<Vec<_>>();
            by.goodput.push((*x, each(&|r| r.goodput_gbps)));
            by.p99
                .push((*x, each(&|r| r.completion_p99_ns as f64 / 1e3)));
            by.retx.push((*x, each(&|r| r.retransmits as f64)));
        }
        by
    }
}

/// The table on stdout: one row per case (a value of every swept key),
/// means over its seeds; without goodput and p99 when `osu` (an MPI
/// collective's table follows).
fn print_table(layout: &Layout, records: &[RunRecord], osu: bool) {
    let jobs = layout.jobs();
    let cols = case_columns(layout);
    let label = |cells: &[String]| case_label(&cols, cells);
    let keys: Vec<String> = layout.axes.iter().map(|a| a.key.clone()).collect();
    if osu {
        outln!(
            "{} {:>10} {:>12} {:>18}",
            label(&keys),
            "runs",
            "passed",
            "failed ops (runs)"
        );
    } else {
        outln!(
            "{} {:>10} {:>14} {:>14} {:>12} {:>18}",
            label(&keys),
            "runs",
            "goodput Gb/s",
            "p99 us",
            "passed",
            "failed ops (runs)"
        );
    }
    for case in 0..layout.case_count() {
        let rs = of_case(&jobs, records, case);
        let n = rs.len();
        let ok = rs.iter().filter(|r| r.passed()).count();
        let failed = format!(
            "{} ({})",
            rs.iter().map(|r| r.ops_failed).sum::<u64>(),
            rs.iter().filter(|r| r.ops_failed > 0).count()
        );
        let values: Vec<String> = layout.case(case).into_iter().map(|(_, v)| v).collect();
        let mean =
            |f: fn(&RunRecord) -> f64| rs.iter().map(|r| f(r)).sum::<f64>() / n.max(1) as f64;
        if osu {
            outln!(
                "{} {:>10} {:>12} {:>18}",
                label(&values),
                n,
                format!("{ok}/{n}"),
                failed
            );
        } else {
            outln!(
                "{} {:>10} {:>14.2} {:>14.2} {:>12} {:>18}",
                label(&values),
                n,
                mean(|r| r.goodput_gbps),
                mean(|r| r.completion_p99_ns as f64 / 1e3),
                format!("{ok}/{n}"),
                failed
            );
        }
    }
}

/// The runs of case `case` (`records` in `jobs`' order).
pub(crate) fn of_case<'r>(
    jobs: &[Job],
    records: &'r [RunRecord],
    case: usize,
) -> Vec<&'r RunRecord> {
    jobs.iter()
        .zip(records)
        .filter(|(j, _)| j.case == case)
        .map(|(_, r)| r)
        .collect()
}

/// The swept keys the tables show, each with its column's width: the
/// keys given more than one value (one given a single value is the same
/// on every row; the first key when every one is), each as wide as its
/// key or its longest value, at least 24 when there is one.
pub(crate) fn case_columns(layout: &Layout) -> Vec<(usize, usize)> {
    let mut shown: Vec<usize> = (0..layout.axes.len())
        .filter(|i| layout.axes[*i].values.len() > 1)
        .collect();
    if shown.is_empty() {
        shown.push(0);
    }
    let least = if shown.len() == 1 { 24 } else { 0 };
    shown
        .into_iter()
        .map(|i| {
            let a = &layout.axes[i];
            let w = a
                .values
                .iter()
                .map(String::len)
                .chain([a.key.len(), least])
                .max();
            (i, w.unwrap_or(least))
        })
        .collect()
}

/// A table row's leading cells: of `cells` (one per swept key), those
/// [`case_columns`] shows, each padded to its width.
pub(crate) fn case_label(cols: &[(usize, usize)], cells: &[String]) -> String {
    cols.iter()
        .map(|(i, w)| format!("{:<w$}", cells[*i]))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Messaging sweeps: each value's first per-size row printed, and the
/// latency and bandwidth of every run's.
fn messaging_rows<'r>(
    values: &[String],
    xs: &[f64],
    of_value: &dyn Fn(usize) -> Vec<&'r RunRecord>,
) -> (Points, Points) {
    let (mut lat, mut bw) = (Vec::new(), Vec::new());
    for (vi, v) in values.iter().enumerate() {
        let rows: Vec<&MessagingFigures> = of_value(vi)
            .into_iter()
            .filter_map(|r| r.messaging.as_ref())
            .collect();
        lat.push((
            xs[vi],
            rows.iter().map(|r| r.latency_us).collect::<Vec<_>>(),
        ));
        bw.push((
            xs[vi],
            rows.iter().map(|r| r.bandwidth_mbs).collect::<Vec<_>>(),
        ));
        if let Some(r) = rows.first() {
            outln!(
                "{:<24} {:>10} {:>12.3} us {:>12.1} MB/s",
                v,
                r.protocol,
                r.latency_us,
                r.bandwidth_mbs
            );
        }
    }
    (lat, bw)
}

/// The plot's x axis: messaging sweeps by log2 of the swept value
/// (message sizes span 22 octaves), sizes in bytes, names for values that
/// are neither numbers nor sizes.
fn x_axis(first: (&String, &Vec<String>), xs: &[f64], messaging: bool) -> XAxis {
    let bytes = first.0.ends_with("size")
        || first.0.ends_with("sizes")
        || first
            .1
            .iter()
            .all(|v| v.parse::<f64>().is_err() && parse_size(v).is_ok());
    let names = if first
        .1
        .iter()
        .any(|v| v.parse::<f64>().is_err() && parse_size(v).is_err())
    {
        first.1.clone()
    } else {
        Vec::new()
    };
    XAxis {
        label: first.0.clone(),
        log2: messaging && xs.iter().all(|x| *x > 0.0),
        bytes,
        names,
    }
}

/// `panels` with their points in x order.
fn sorted(xs: &[f64], panels: Vec<Panel>) -> Vec<Panel> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|a, b| xs[*a].total_cmp(&xs[*b]));
    panels
        .into_iter()
        .map(|p| Panel {
            points: order.iter().map(|i| p.points[*i].clone()).collect(),
            ..p
        })
        .collect()
}

/// Collective sweeps: a table of the host and NIC completion times (mean
/// over seeds of each run's median) per value of the first setting, and
/// the plot: one line for each, against that setting.
fn collective_lines<'r>(
    name: &str,
    values: &[String],
    xs: &[f64],
    of_value: &dyn Fn(usize) -> Vec<&'r RunRecord>,
) -> String {
    use udrma_scenarios::report::svg::{lines_plot, Series};
    let mut host = Vec::new();
    let mut nic = Vec::new();
    outln!(
        "{:<24} {:>14} {:>14} {:>9}",
        name,
        "host us",
        "nic us",
        "speedup"
    );
    for (vi, v) in values.iter().enumerate() {
        let cs: Vec<&CollectiveFigures> = of_value(vi)
            .into_iter()
            .filter_map(|r| r.collective.as_ref())
            .collect();
        let mean = |f: &dyn Fn(&CollectiveFigures) -> Option<f64>| {
            let got: Vec<f64> = cs.iter().filter_map(|c| f(c)).collect();
            (!got.is_empty()).then(|| got.iter().sum::<f64>() / got.len() as f64)
        };
        let h = mean(&|c| c.host_p50_us);
        let n = mean(&|c| c.nic_p50_us);
        let speedup = match (h, n) {
            (Some(h), Some(n)) if n > 0.0 => format!("{:.2}", h / n),
            _ => "-".into(),
        };
        let show = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        outln!("{:<24} {:>14} {:>14} {:>9}", v, show(h), show(n), speedup);
        if let Some(h) = h {
            host.push((xs[vi], h));
        }
        if let Some(n) = n {
            nic.push((xs[vi], n));
        }
    }
    let mut series = Vec::new();
    for (label, mut points) in [("host software", host), ("NIC offload", nic)] {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !points.is_empty() {
            series.push(Series {
                name: label.into(),
                points,
            });
        }
    }
    lines_plot(
        "Collective completion (median over iterations, mean over seeds)",
        &XAxis {
            label: name.into(),
            log2: xs.iter().all(|x| *x > 0.0),
            bytes: name.ends_with("size"),
            names: Vec::new(),
        },
        "completion (µs)",
        &series,
        &[],
    )
}
