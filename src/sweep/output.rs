//! A sweep's outputs from its records: the CSV (one row per run), the
//! table on stdout and the plot. `udrma sweep` and `udrma merge` both end
//! here, so a merge of shards writes what one machine would have written.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use udrma_scenarios::svg::{sweep_plot, Panel, XAxis};
use udrma_scenarios::units::parse_size;

use super::plan::Layout;
use super::record::{CollectiveFigures, MessagingFigures, RunRecord};

/// Writes one CSV row per record (`records` in the layout's job order),
/// with `extra` columns (name, value) appended to every row.
pub fn write_csv(
    path: &Path,
    layout: &Layout,
    records: &[(super::plan::Job, &RunRecord)],
    extra: &[(&str, String)],
) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_path(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut header: Vec<&str> = layout.axes.iter().map(|a| a.key.as_str()).collect();
    header.push("seed");
    header.extend(RunRecord::COLUMNS);
    header.extend(extra.iter().map(|(k, _)| *k));
    w.write_record(&header)?;
    for (job, r) in records {
        let mut row: Vec<String> = layout.case(job.case).into_iter().map(|(_, v)| v).collect();
        row.push(job.seed.to_string());
        row.extend(r.row());
        row.extend(extra.iter().map(|(_, v)| v.clone()));
        w.write_record(&row)?;
    }
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The table, and the CSV and plot when asked; exit 1 if a run failed a
/// check. `records` holds every job of `layout`, in its job order.
pub fn report(
    name: &str,
    layout: &Layout,
    records: &[RunRecord],
    csv_path: Option<&Path>,
    plot: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let jobs = layout.jobs();
    debug_assert_eq!(jobs.len(), records.len());
    if let Some(path) = csv_path {
        let rows: Vec<_> = jobs.iter().copied().zip(records).collect();
        write_csv(path, layout, &rows, &[])?;
    }
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

    // Per value of the first setting: mean over seeds (and other settings).
    let first = &layout.axes[0];
    let first = (&first.key, &first.values);
    let xs: Vec<f64> = first
        .1
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.parse::<f64>()
                .ok()
                .or_else(|| parse_size(v).ok().map(|b| b as f64))
                .unwrap_or(i as f64)
        })
        .collect();
    let mut goodput = Vec::new();
    let mut p99 = Vec::new();
    let mut retx = Vec::new();
    let mut passes = Vec::new();
    for (vi, v) in first.1.iter().enumerate() {
        let rs = of_value(vi);
        goodput.push((
            xs[vi],
            rs.iter().map(|r| r.goodput_gbps).collect::<Vec<_>>(),
        ));
        p99.push((
            xs[vi],
            rs.iter()
                .map(|r| r.completion_p99_ns as f64 / 1e3)
                .collect::<Vec<_>>(),
        ));
        retx.push((
            xs[vi],
            rs.iter().map(|r| r.retransmits as f64).collect::<Vec<_>>(),
        ));
        passes.push((
            v.clone(),
            rs.iter().filter(|r| r.passed()).count(),
            rs.len(),
            rs.iter().map(|r| r.ops_failed).sum::<u64>(),
            rs.iter().filter(|r| r.ops_failed > 0).count(),
        ));
    }
    println!(
        "{:<24} {:>10} {:>14} {:>14} {:>12} {:>18}",
        first.0, "runs", "goodput Gb/s", "p99 us", "passed", "failed ops (runs)"
    );
    for (i, (v, ok, n, failed_ops, failed_runs)) in passes.iter().enumerate() {
        let mean =
            |p: &Vec<(f64, Vec<f64>)>| p[i].1.iter().sum::<f64>() / p[i].1.len().max(1) as f64;
        println!(
            "{:<24} {:>10} {:>14.2} {:>14.2} {:>12} {:>18}",
            v,
            n,
            mean(&goodput),
            mean(&p99),
            format!("{ok}/{n}"),
            format!("{failed_ops} ({failed_runs})")
        );
    }
    // Messaging runs: latency and bandwidth of the first per-size row,
    // placed by log2 of the swept value (message sizes span 22 octaves),
    // latency on a log axis (1 us and 1 ms on one plot).
    let messaging = records.iter().all(|r| r.messaging.is_some());
    let bytes = first.0.ends_with("size")
        || first.0.ends_with("sizes")
        || first
            .1
            .iter()
            .all(|v| v.parse::<f64>().is_err() && parse_size(v).is_ok());
    // Values that are neither numbers nor sizes (`nic.cc=none,nscc`) sit
    // at 0, 1, 2, ... under their names.
    let names = if first
        .1
        .iter()
        .any(|v| v.parse::<f64>().is_err() && parse_size(v).is_err())
    {
        first.1.clone()
    } else {
        Vec::new()
    };
    let x_axis = XAxis {
        label: first.0.clone(),
        log2: messaging && xs.iter().all(|x| *x > 0.0),
        bytes,
        names,
    };
    let (lat, bw) = (&mut Vec::new(), &mut Vec::new());
    if messaging {
        for (vi, v) in first.1.iter().enumerate() {
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
                println!(
                    "{:<24} {:>10} {:>12.3} us {:>12.1} MB/s",
                    v, r.protocol, r.latency_us, r.bandwidth_mbs
                );
            }
        }
    }
    let collective = records.iter().all(|r| r.collective.is_some());
    if collective {
        let svg = collective_lines(first.0, first.1, &xs, &of_value);
        if let Some(path) = plot {
            std::fs::write(path, svg)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    } else if let Some(path) = plot {
        let mut order: Vec<usize> = (0..xs.len()).collect();
        order.sort_by(|a, b| xs[*a].total_cmp(&xs[*b]));
        let sorted =
            |p: &Vec<(f64, Vec<f64>)>| order.iter().map(|i| p[*i].clone()).collect::<Vec<_>>();
        let svg = sweep_plot(
            &format!(
                "{} — {} runs ({} seeds per point)",
                name,
                records.len(),
                layout.seeds
            ),
            &x_axis,
            &if messaging {
                vec![
                    Panel {
                        title: "one-way latency or time per message (us)".into(),
                        points: sorted(lat),
                        log_y: true,
                    },
                    Panel {
                        title: "bandwidth (MB/s)".into(),
                        points: sorted(bw),
                        log_y: false,
                    },
                ]
            } else {
                vec![
                    Panel {
                        title: "goodput (Gb/s)".into(),
                        points: sorted(&goodput),
                        log_y: false,
                    },
                    Panel {
                        title: "p99 completion (us)".into(),
                        points: sorted(&p99),
                        log_y: false,
                    },
                    Panel {
                        title: "retransmits".into(),
                        points: sorted(&retx),
                        log_y: false,
                    },
                ]
            },
        );
        std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(if records.iter().all(RunRecord::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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
    use udrma_scenarios::svg::{lines_plot, Series};
    let mut host = Vec::new();
    let mut nic = Vec::new();
    println!(
        "{:<24} {:>14} {:>14} {:>9}",
        name, "host us", "nic us", "speedup"
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
        println!("{:<24} {:>14} {:>14} {:>9}", v, show(h), show(n), speedup);
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
