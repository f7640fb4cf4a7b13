//! The scenario's corridor (docs/design.md, "Inside `scenarios/`"):
//! follow the parsed scenario from `scenarios/src/run.rs::run` through
//! every call that passes it on (a call with the caller's `&Scenario`
//! parameter among its arguments, into a function that takes one), depth
//! first in source order, each function once, down the branch one kind of
//! run takes; count the *returns*, the moves into a file the walk had
//! already left. A scenario that wanders from file to file and back (as
//! it did before issue 66: 22 returns for an RDMA run in the simulated
//! fabric) fails this test. Method calls on the scenario (`sc.error_at`,
//! `sc.host`: locating an error or a host name in the file) are not
//! followed. Comments and `#[cfg(test)]` code are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A function that takes the scenario: its file, its body, the name of
/// its `&Scenario` parameter, and the modules its file imports names
/// from (`use crate::plan::resolved::{plan, Plan};`: `plan` → `resolved`).
struct TakesScenario {
    file: String,
    body: String,
    param: String,
    imports: BTreeMap<String, String>,
}

/// The names a file's `use` lines import, each with the module it comes
/// from (the last segment of its path).
fn imports(code: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for u in code.split("use ").skip(1) {
        let Some(stmt) = u.split(';').next() else {
            continue;
        };
        let stmt: String = stmt.split_whitespace().collect();
        let (path, names) = match stmt.split_once("::{") {
            Some((p, rest)) => (p.to_string(), rest.trim_end_matches('}').to_string()),
            None => match stmt.rsplit_once("::") {
                Some((p, n)) => (p.to_string(), n.to_string()),
                None => continue,
            },
        };
        let module = path.rsplit("::").next().unwrap_or("").to_string();
        for n in names.split(',') {
            let n = n.rsplit(" as ").next().unwrap_or(n).trim();
            if !n.is_empty() && !n.contains(':') {
                out.insert(n.to_string(), module.clone());
            }
        }
    }
    out
}

/// Index just past the bracket that closes the one opened before `i`.
fn closing(text: &[u8], mut i: usize, open: u8, close: u8) -> usize {
    let mut depth = 1;
    while depth > 0 && i < text.len() {
        if text[i] == open {
            depth += 1;
        } else if text[i] == close {
            depth -= 1;
        }
        i += 1;
    }
    i
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The `&Scenario` parameter's name in a parameter list, if any.
fn scenario_param(params: &str) -> Option<String> {
    params.split(',').find_map(|p| {
        let (name, ty) = p.split_once(':')?;
        let ty = ty.trim().trim_start_matches('&').trim_start_matches("mut ");
        let ty = ty.trim().rsplit("::").next().unwrap_or("");
        (ty == "Scenario").then(|| name.trim().trim_start_matches("mut ").to_string())
    })
}

/// Every function of `src` that takes the scenario, by name.
fn functions(src: &Path) -> BTreeMap<String, Vec<TakesScenario>> {
    let mut out: BTreeMap<String, Vec<TakesScenario>> = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    let mut files = Vec::new();
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    for f in files {
        let all = std::fs::read_to_string(&f).unwrap();
        let code: String = all
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let b = code.as_bytes();
        let rel = f.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        let imported = imports(&code);
        let mut at = 0;
        while let Some(k) = code[at..].find("fn ") {
            let start = at + k;
            at = start + 3;
            if start > 0 && is_ident(b[start - 1]) {
                continue;
            }
            let name: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let Some(open) = code[at..].find('(').map(|o| at + o) else {
                continue;
            };
            let between = code[at + name.len()..open].trim();
            if name.is_empty() || !(between.is_empty() || between.starts_with('<')) {
                continue;
            }
            let close = closing(b, open + 1, b'(', b')');
            let Some(param) = scenario_param(&code[open + 1..close - 1]) else {
                continue;
            };
            let Some(brace) = code[close..].find('{').map(|o| close + o) else {
                continue;
            };
            let end = closing(b, brace + 1, b'{', b'}');
            out.entry(name).or_default().push(TakesScenario {
                file: rel.clone(),
                body: code[brace..end].to_string(),
                param,
                imports: imported.clone(),
            });
        }
    }
    out
}

/// The walk of one kind of run: the files in the order the walk is in
/// them, leaving out the functions in `skip` (`file::name`: the branches
/// of other kinds of run).
fn walk(fns: &BTreeMap<String, Vec<TakesScenario>>, skip: &[&str]) -> Vec<String> {
    fn go(
        fns: &BTreeMap<String, Vec<TakesScenario>>,
        skip: &[&str],
        f: &TakesScenario,
        seen: &mut BTreeSet<String>,
        seq: &mut Vec<String>,
    ) {
        seq.push(f.file.clone());
        let b = f.body.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if !is_ident(b[i]) || (i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b'.')) {
                i += 1;
                continue;
            }
            let name: String = f.body[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let after = i + name.len();
            i = after;
            // `module::name(` or `name(`: the last segment is the callee.
            if f.body[after..].starts_with("::") || !f.body[after..].starts_with('(') {
                continue;
            }
            let Some(cands) = fns.get(&name) else {
                continue;
            };
            let close = closing(b, after + 1, b'(', b')');
            let args = &f.body[after + 1..close - 1];
            let passes = args
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
                .any(|w| w == f.param);
            if !passes {
                continue;
            }
            // The path before the name picks among same-named functions.
            let path: String = f.body[..i - name.len()]
                .chars()
                .rev()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let module = match path.trim_end_matches("::").rsplit("::").next() {
                Some(m) if !m.is_empty() => m.to_string(),
                // A bare name: the module its file imports it from, if any.
                _ => f.imports.get(&name).cloned().unwrap_or_default(),
            };
            let callee = cands
                .iter()
                .find(|c| {
                    !module.is_empty()
                        && c.file
                            .trim_end_matches(".rs")
                            .split('/')
                            .any(|s| s == module)
                })
                .or_else(|| cands.iter().find(|c| module.is_empty() && c.file == f.file))
                .unwrap_or(&cands[0]);
            let key = format!("{}::{name}", callee.file);
            if skip.contains(&key.as_str()) || !seen.insert(key) {
                continue;
            }
            go(fns, skip, callee, seen, seq);
            seq.push(f.file.clone());
        }
    }
    let run = fns["run"].iter().find(|f| f.file == "run.rs").unwrap();
    let mut seen = BTreeSet::from(["run.rs::run".to_string()]);
    let mut seq = Vec::new();
    go(fns, skip, run, &mut seen, &mut seq);
    seq.dedup();
    seq
}

/// Moves into a file the walk had already left, by file.
fn returns(seq: &[String]) -> BTreeMap<String, usize> {
    let mut left = BTreeSet::new();
    let mut out = BTreeMap::new();
    for w in seq.windows(2) {
        left.insert(w[0].clone());
        if left.contains(&w[1]) {
            *out.entry(w[1].clone()).or_default() += 1;
        }
    }
    out
}

/// Each workload family's planner: a walk follows its own family's and
/// skips the others' (a scenario's workloads are of one family).
const FAMILIES: [(&str, &str); 5] = [
    ("rdma", "plan/rdma.rs::plan"),
    ("messaging", "plan/messaging.rs::workloads"),
    ("noncontig", "plan/ncplan.rs::plan"),
    ("collective", "plan/collplan.rs::plan"),
    ("scheduled", "plan/schedplan.rs::plan"),
];

#[test]
fn a_scenario_goes_down_a_corridor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/src");
    let fns = functions(&src);
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    // (Family, most returns: the walk as it is on 2026-12-03, once the
    // runners took the plan and `resolve` handed each builder only its
    // own tables: back to `plan/resolved.rs` after the family's planner,
    // back to `run.rs` after planning, and for RDMA back to
    // `plan/rdma.rs` after the flows; a collective by one of MPI's
    // algorithms, 2026-12-04, back to `plan/schedplan.rs` after the sizes
    // it reads as the `msg-*` planner does.)
    for (family, most) in [
        ("rdma", 3),
        ("messaging", 2),
        ("noncontig", 2),
        ("collective", 2),
        ("scheduled", 3),
    ] {
        let mut skip = vec![];
        skip.extend(FAMILIES.iter().filter(|f| f.0 != family).map(|f| f.1));
        let seq = walk(&fns, &skip);
        let back = returns(&seq);
        let total: usize = back.values().sum();
        report.push(format!(
            "{family}: {total} returns {back:?}\n  {}",
            seq.join(" -> ")
        ));
        if total > most {
            wrong.push(format!("{family}: {total} returns, more than {most}"));
        }
        // Each file is entered once, or twice (one return) at most.
        for (file, n) in back.iter().filter(|(_, n)| **n > 1) {
            wrong.push(format!("{family}: entered {file} {} times", n + 1));
        }
    }
    println!("{}", report.join("\n"));
    assert!(
        wrong.is_empty(),
        "the scenario wanders again:\n{}\n\n{}",
        wrong.join("\n"),
        report.join("\n")
    );
}

/// The walk reads calls as written: through a module path, by a short
/// name in the same file, with the scenario among other arguments; and
/// not a method on the scenario, nor a call that does not pass it.
#[test]
fn the_walk_reads_calls_as_written() {
    let dir = std::env::temp_dir().join(format!("udrma-corridor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plan")).unwrap();
    std::fs::write(
        dir.join("run.rs"),
        "pub fn run(sc: &Scenario, x: u32) -> u32 {\n    let r = crate::plan::build::world(&sc, 1)?;\n    sc.host(\"h0\", 2, \"w\");\n    other(x);\n    local(sc);\n    // build::world(sc) in a comment\n    r\n}\nfn local(s: &Scenario) { crate::plan::build::world(s, 2); }\nfn other(x: u32) {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("plan/build.rs"),
        "pub fn world(sc: &Scenario, n: u32) -> u32 { faults(sc) }\nfn faults(sc: &Scenario) {}\n#[cfg(test)]\nfn world(sc: &Scenario) {}\n",
    )
    .unwrap();
    let fns = functions(&dir);
    assert_eq!(fns.len(), 4, "{:?}", fns.keys().collect::<Vec<_>>());
    let seq = walk(&fns, &[]);
    // run -> build (world, then its faults in the same file) -> run ->
    // (local, in run.rs; world already walked).
    assert_eq!(seq, ["run.rs", "plan/build.rs", "run.rs"]);
    assert_eq!(returns(&seq).values().sum::<usize>(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Past the plan, nothing reads the file: no function of the runners,
/// the reports or the backends takes the scenario, but the two entries
/// that plan it (`run`, and `run_host` for `udrma host`).
#[test]
fn runners_take_the_plan_not_the_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/src");
    let fns = functions(&src);
    let past_the_plan: Vec<String> = fns
        .iter()
        .flat_map(|(name, fs)| fs.iter().map(move |f| format!("{}::{name}", f.file)))
        .filter(|k| !k.starts_with("file/") && !k.starts_with("plan/") && !k.starts_with("plan.rs"))
        .filter(|k| !k.starts_with("file.rs"))
        .filter(|k| k != "run.rs::run" && k != "run.rs::run_host")
        .collect();
    assert!(
        past_the_plan.is_empty(),
        "these take the scenario after it was planned: {past_the_plan:?}"
    );
}
