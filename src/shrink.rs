//! `udrma shrink`: reduce a failing case to a smaller scenario that still
//! fails the same check.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use toml::{Table, Value};
use udrma_scenarios::file::edit::{render, set};
use udrma_scenarios::file::units::parse_size;
use udrma_scenarios::{RunOptions, Scenario};

use crate::sweep::{read_doc, run_one};
use crate::BadInput;

fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
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
                Some(Value::String(t)) => udrma_scenarios::file::units::parse_time(t)
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
