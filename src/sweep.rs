//! `udrma sweep` and `udrma shrink`: many runs of one scenario file.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use toml::{Table, Value};
use udrma_scenarios::edit::{render, set, value};
use udrma_scenarios::svg::{sweep_plot, Panel, XAxis};
use udrma_scenarios::units::parse_size;
use udrma_scenarios::{Report, RunOptions, Scenario};

use crate::BadInput;

fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
}

/// An error in the case `assign` of a sweep, located at the key's line in
/// the original file (not in the edited document, which the user never
/// sees). When several settings apply, the first that fails on its own is
/// blamed; if only their combination fails, all are named.
fn case_error(file: &Path, text: &str, doc: &Table, assign: &[(String, String)]) -> anyhow::Error {
    let name = file.display().to_string();
    let try_parse = |pairs: &[(String, String)]| -> Result<(), String> {
        let mut d = doc.clone();
        for (k, v) in pairs {
            set(&mut d, k, value(v))?;
        }
        Scenario::parse(&name, &render(&d))
            .map(|_| ())
            .map_err(|e| e.message)
    };
    let blamed: Vec<&(String, String)> = assign
        .iter()
        .filter(|a| try_parse(std::slice::from_ref(*a)).is_err())
        .collect();
    let (culprits, message) = match blamed.first() {
        Some(one) => (
            vec![*one],
            try_parse(std::slice::from_ref(*one)).unwrap_err(),
        ),
        None => (
            assign.iter().collect(),
            try_parse(assign).err().unwrap_or_default(),
        ),
    };
    let settings = culprits
        .iter()
        .map(|(k, v)| format!("--set {k}={v}"))
        .collect::<Vec<_>>()
        .join(" with ");
    let at = culprits
        .first()
        .and_then(|(k, _)| udrma_scenarios::edit::locate(text, k))
        .map(|(l, c)| format!(":{l}:{c}"))
        .unwrap_or_default();
    bad(format!("{name}{at}: {settings}: {message}"))
}

fn read_doc(file: &Path) -> anyhow::Result<(String, Table)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    // Parse once as a scenario for located errors, then as a table to edit.
    Scenario::parse(&file.display().to_string(), &text).map_err(|e| bad(e.to_string()))?;
    let doc: Table = text
        .parse()
        .map_err(|e| bad(format!("{}: {e}", file.display())))?;
    Ok((text, doc))
}

fn run_one(name: &str, text: &str, seed: u64) -> anyhow::Result<Report> {
    let sc = Scenario::parse(name, text).map_err(|e| bad(e.to_string()))?;
    udrma_scenarios::run(
        &sc,
        RunOptions {
            seed: Some(seed),
            ..RunOptions::default()
        },
    )
    .map_err(|e| bad(e.to_string()))
}

/// What a sweep keeps of a run until the end: every report is held for
/// the CSV, the table and the plot, so what they do not read goes at once
/// (a passed check's entry, notes, names, message sizes after the first),
/// which makes a held report about a third as large.
fn slim(mut r: Report) -> Report {
    r.checks.retain(|_, ok| !*ok);
    r.notes = Vec::new();
    r.scenario = String::new();
    r.backend = String::new();
    r.cc = String::new();
    r.noncontig = None;
    if let Some(m) = r.messaging.as_mut() {
        m.sizes.truncate(1);
    }
    r
}

/// Runs the cross product of `sets` × `seeds` seeds in parallel.
pub fn sweep(
    file: &Path,
    sets: &[String],
    seeds: u32,
    csv_path: Option<&Path>,
    plot: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let (original, doc) = read_doc(file)?;
    let base_seed = doc.get("seed").and_then(Value::as_integer).unwrap_or(1) as u64;
    let mut axes: Vec<(String, Vec<String>)> = Vec::new();
    for s in sets {
        let (k, vs) = s
            .split_once('=')
            .ok_or_else(|| bad(format!("--set {s:?}: expected KEY=V1,V2,...")))?;
        let values: Vec<String> = vs
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            return Err(bad(format!("--set {s:?}: no values")));
        }
        axes.push((k.trim().to_string(), values));
    }
    // The cross product, each case checked before anything runs.
    let mut cases: Vec<(Vec<(String, String)>, String)> = vec![(Vec::new(), String::new())];
    for (key, values) in &axes {
        let mut next = Vec::new();
        for (assign, _) in &cases {
            for v in values {
                let mut a = assign.clone();
                a.push((key.clone(), v.clone()));
                next.push((a, String::new()));
            }
        }
        cases = next;
    }
    for (assign, text) in &mut cases {
        let mut d = doc.clone();
        for (k, v) in assign.iter() {
            set(&mut d, k, value(v)).map_err(|e| bad(format!("--set {e}")))?;
        }
        *text = render(&d);
        if Scenario::parse(&file.display().to_string(), text).is_err() {
            return Err(case_error(file, &original, &doc, assign));
        }
    }
    let jobs: Vec<(usize, u64)> = (0..cases.len())
        .flat_map(|c| (0..seeds as u64).map(move |s| (c, base_seed + s)))
        .collect();
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} runs ({eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let name = file.display().to_string();
    let results: Vec<anyhow::Result<Report>> = jobs
        .par_iter()
        .map(|(c, seed)| {
            let r = run_one(&name, &cases[*c].1, *seed).map(slim);
            bar.inc(1);
            r
        })
        .collect();
    bar.finish_and_clear();
    let reports: Vec<Report> = results.into_iter().collect::<anyhow::Result<_>>()?;

    if let Some(path) = csv_path {
        let mut w = csv::Writer::from_path(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut header: Vec<String> = axes.iter().map(|(k, _)| k.clone()).collect();
        header.extend(
            [
                "seed",
                "passed",
                "failed_checks",
                "trace_hash",
                "sim_time_ns",
                "goodput_gbps",
                "completion_p50_ns",
                "completion_p99_ns",
                "completion_max_ns",
                "ops_completed",
                "ops_failed",
                "retransmits",
                "dropped",
                "duplicated",
                "reordered",
                "dup_dropped",
                "escape_buffered",
                "nacks",
            ]
            .map(String::from),
        );
        w.write_record(&header)?;
        for ((c, seed), r) in jobs.iter().zip(&reports) {
            let mut row: Vec<String> = cases[*c].0.iter().map(|(_, v)| v.clone()).collect();
            let failed: Vec<&str> = r
                .checks
                .iter()
                .filter(|(_, ok)| !**ok)
                .map(|(k, _)| k.as_str())
                .collect();
            row.extend([
                seed.to_string(),
                r.passed().to_string(),
                failed.join(" "),
                r.trace_hash.clone(),
                r.sim_time_ns.to_string(),
                r.goodput_gbps.to_string(),
                r.completion_ns.p50.to_string(),
                r.completion_ns.p99.to_string(),
                r.completion_ns.max.to_string(),
                r.ops.completed.to_string(),
                r.ops.failed.to_string(),
                r.retransmits.to_string(),
                r.packets.dropped.to_string(),
                r.packets.duplicated.to_string(),
                r.packets.reordered.to_string(),
                r.dup_dropped.to_string(),
                r.escape.buffered.to_string(),
                r.nacks.to_string(),
            ]);
            w.write_record(&row)?;
        }
        w.flush()?;
    }

    // Per value of the first setting: mean over seeds (and other settings).
    let first = &axes[0];
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
        let rs: Vec<&Report> = jobs
            .iter()
            .zip(&reports)
            .filter(|((c, _), _)| cases[*c].0[0].1 == *v)
            .map(|(_, r)| r)
            .collect();
        goodput.push((
            xs[vi],
            rs.iter().map(|r| r.goodput_gbps).collect::<Vec<_>>(),
        ));
        p99.push((
            xs[vi],
            rs.iter()
                .map(|r| r.completion_ns.p99 as f64 / 1e3)
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
            rs.iter().map(|r| r.ops.failed).sum::<u64>(),
            rs.iter().filter(|r| r.ops.failed > 0).count(),
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
    let messaging = reports
        .iter()
        .all(|r| r.messaging.as_ref().is_some_and(|m| !m.sizes.is_empty()));
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
            let rows: Vec<&udrma_scenarios::report::SizeRow> = jobs
                .iter()
                .zip(&reports)
                .filter(|((c, _), _)| cases[*c].0[0].1 == *v)
                .filter_map(|(_, r)| r.messaging.as_ref().map(|m| &m.sizes[0]))
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
    let collective = reports.iter().all(|r| r.collective.is_some());
    if collective {
        let svg = collective_lines(&first.0, &first.1, &xs, &jobs, &cases, &reports);
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
                doc.get("name").and_then(Value::as_str).unwrap_or("sweep"),
                reports.len(),
                seeds
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
    Ok(if reports.iter().all(Report::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Collective sweeps: a table of the host and NIC completion times (mean
/// over seeds of each run's median) per value of the first setting, and
/// the plot: one line for each, against that setting.
fn collective_lines(
    name: &str,
    values: &[String],
    xs: &[f64],
    jobs: &[(usize, u64)],
    cases: &[(Vec<(String, String)>, String)],
    reports: &[Report],
) -> String {
    use udrma_scenarios::svg::{lines_plot, Series};
    let mut host = Vec::new();
    let mut nic = Vec::new();
    println!(
        "{:<24} {:>14} {:>14} {:>9}",
        name, "host us", "nic us", "speedup"
    );
    for (vi, v) in values.iter().enumerate() {
        let cs: Vec<&udrma_scenarios::report::CollectiveReport> = jobs
            .iter()
            .zip(reports)
            .filter(|((c, _), _)| cases[*c].0[0].1 == *v)
            .filter_map(|(_, r)| r.collective.as_ref())
            .collect();
        let mean = |f: &dyn Fn(&udrma_scenarios::report::CollectiveReport) -> Option<f64>| {
            let got: Vec<f64> = cs.iter().filter_map(|c| f(c)).collect();
            (!got.is_empty()).then(|| got.iter().sum::<f64>() / got.len() as f64)
        };
        let h = mean(&|c| c.host.as_ref().map(|s| s.completion_us.p50));
        let n = mean(&|c| c.nic.as_ref().map(|s| s.completion_us.p50));
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

/// Candidate simplifications of `doc`, smallest steps last.
fn candidates(doc: &Table) -> Vec<(String, Table)> {
    let mut out = Vec::new();
    for list in ["fault", "workload", "pause"] {
        if let Some(Value::Array(items)) = doc.get(list) {
            for i in 0..items.len() {
                let mut d = doc.clone();
                if let Some(Value::Array(v)) = d.get_mut(list) {
                    v.remove(i);
                }
                out.push((format!("drop {list} {i}"), d));
            }
        }
    }
    if let Some(Value::Array(ws)) = doc.get("workload") {
        for (i, w) in ws.iter().enumerate() {
            if let Some(c) = w
                .get("count")
                .and_then(Value::as_integer)
                .filter(|c| *c > 1)
            {
                let mut d = doc.clone();
                let _ = set(
                    &mut d,
                    &format!("workload.{i}.count"),
                    Value::Integer(c / 2),
                );
                out.push((format!("halve workload {i} count"), d));
            }
            let size = match w.get("size") {
                Some(Value::Integer(n)) => Some(*n as u64),
                Some(Value::String(s)) => parse_size(s).ok(),
                _ => None,
            };
            if let Some(sz) = size.filter(|s| *s > 1) {
                let mut d = doc.clone();
                let _ = set(
                    &mut d,
                    &format!("workload.{i}.size"),
                    Value::Integer((sz / 2) as i64),
                );
                out.push((format!("halve workload {i} size"), d));
            }
        }
    }
    if let Some(Value::Array(fs)) = doc.get("fault") {
        for (i, f) in fs.iter().enumerate() {
            // Narrow a time window: keep its first half.
            let us = |k: &str| match f.get(k) {
                Some(Value::String(t)) => udrma_scenarios::units::parse_time(t)
                    .ok()
                    .map(|d| d.as_ps()),
                _ => None,
            };
            if let (Some(from), Some(until)) = (us("from"), us("until")) {
                if until > from + 2_000 {
                    let mid = from + (until - from) / 2;
                    let mut d = doc.clone();
                    let _ = set(
                        &mut d,
                        &format!("fault.{i}.until"),
                        Value::String(format!("{}ns", mid / 1000)),
                    );
                    out.push((format!("narrow fault {i} window"), d));
                }
            }
            if let Some(p) = f.get("p").and_then(Value::as_float).filter(|p| *p > 0.001) {
                let mut d = doc.clone();
                let _ = set(&mut d, &format!("fault.{i}.p"), Value::Float(p / 2.0));
                out.push((format!("halve fault {i} p"), d));
            }
        }
    }
    if let Some(Value::Table(t)) = doc.get("topology") {
        if let Some(h) = t
            .get("hosts")
            .and_then(Value::as_integer)
            .filter(|h| *h > 2)
        {
            let mut d = doc.clone();
            let _ = set(&mut d, "topology.hosts", Value::Integer(h - 1));
            out.push(("one host fewer".into(), d));
        }
        if let Some(k) = t.get("k").and_then(Value::as_integer).filter(|k| *k > 2) {
            let mut d = doc.clone();
            let _ = set(&mut d, "topology.k", Value::Integer(k - 2));
            out.push(("smaller fat tree".into(), d));
        }
    }
    out
}

/// `a, a, a, b` → `a ×3, b`.
fn grouped(steps: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        let run = steps[i..].iter().take_while(|s| **s == steps[i]).count();
        out.push(if run > 1 {
            format!("{} ×{run}", steps[i])
        } else {
            steps[i].clone()
        });
        i += run;
    }
    out.join(", ")
}

/// Reduces a failing case while it keeps failing one of its checks.
pub fn shrink(file: &Path, seed: u64, output: &Path) -> anyhow::Result<ExitCode> {
    let (_, mut doc) = read_doc(file)?;
    let name = file.display().to_string();
    let original = run_one(&name, &render(&doc), seed)?;
    let failing: Vec<String> = original
        .checks
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(k, _)| k.clone())
        .collect();
    if failing.is_empty() {
        return Err(bad(format!(
            "{name} with seed {seed} passes every check: nothing to shrink"
        )));
    }
    let still_fails = |d: &Table| -> bool {
        let text = render(d);
        match Scenario::parse(&name, &text) {
            Ok(sc) => udrma_scenarios::run(
                &sc,
                RunOptions {
                    seed: Some(seed),
                    ..RunOptions::default()
                },
            )
            .map(|r| failing.iter().any(|c| r.checks.get(c) == Some(&false)))
            .unwrap_or(false),
            Err(_) => false,
        }
    };
    let mut steps = Vec::new();
    let mut runs = 0usize;
    'outer: loop {
        for (what, d) in candidates(&doc) {
            runs += 1;
            if runs > 300 {
                break 'outer;
            }
            if still_fails(&d) {
                steps.push(what);
                doc = d;
                continue 'outer;
            }
        }
        break;
    }
    let text = format!(
        "# Shrunk by `udrma shrink {name} --seed {seed}` in {runs} runs: still fails {}.\n# Steps: {}.\n{}",
        failing.join(", "),
        if steps.is_empty() { "none".to_string() } else { grouped(&steps) },
        render(&doc)
    );
    std::fs::write(output, &text).with_context(|| format!("cannot write {}", output.display()))?;
    println!(
        "{} steps in {runs} runs; still fails {}; wrote {}",
        steps.len(),
        failing.join(", "),
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}
