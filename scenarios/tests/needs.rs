//! What each key of a workload kind or fault model needs: whether the
//! file must give it, and what is used when it does not. docs/scenarios.md
//! prints the table the code holds (`needs_of`, `model_needs`), and each
//! claim is tried: a stated default, written out, runs exactly as the
//! file without it, and a required key left out is refused by name.

use udrma_scenarios::file::applies::{keys_of, model_keys, model_needs, needs_of, Need};
use udrma_scenarios::file::schema::{ModelKind, WorkloadKind};
use udrma_scenarios::plan::resolved::{plan, BackendKind};
use udrma_scenarios::{run, RunOptions, Scenario};

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md");

#[derive(serde::Deserialize)]
struct Named<T> {
    k: T,
}

fn named<T: serde::de::DeserializeOwned>(name: &str) -> T {
    toml::from_str::<Named<T>>(&format!("k = \"{name}\""))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .k
}

/// The first cells of the rows of the table that follows `heading`.
fn first_cells(doc: &str, heading: &str) -> Vec<String> {
    let at = doc
        .find(heading)
        .unwrap_or_else(|| panic!("{heading:?} not in {DOC}"));
    doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect()
}

/// One row of the doc's table: the keys to give, and what the others
/// are when left out.
fn row(name: &str, needs: &[(&str, Need)]) -> String {
    let mut must = Vec::new();
    let mut left = Vec::new();
    for (key, need) in needs {
        match need {
            Need::Required => must.push(format!("`{key}`")),
            // Each pair once, at its first key.
            Need::Or(other)
                if !must
                    .iter()
                    .any(|m: &String| m.contains(&format!("`{other}`"))) =>
            {
                must.push(format!("`{key}` or `{other}`"))
            }
            Need::Or(_) => {}
            Need::Default(v) => left.push(format!("`{key} = {v}`")),
            Need::Else(words) => left.push(format!("`{key}`: {words}")),
        }
    }
    let or_none = |v: Vec<String>, sep: &str| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(sep)
        }
    };
    format!(
        "| `{name}` | {} | {} |",
        or_none(must, ", "),
        or_none(left, "; ")
    )
}

fn kinds(doc: &str) -> Vec<(String, WorkloadKind)> {
    let names = first_cells(doc, "**Keys each kind takes**");
    assert_eq!(names.len(), 16);
    names
        .into_iter()
        .map(|n| {
            let k = named(&n);
            (n, k)
        })
        .collect()
}

fn models(doc: &str) -> Vec<(String, ModelKind)> {
    let names = first_cells(doc, "| model | keys |");
    assert_eq!(names.len(), 10);
    names
        .into_iter()
        .map(|n| {
            let m = named(&n);
            (n, m)
        })
        .collect()
}

/// The doc's two tables are the code's, row for row, and name each key
/// the kind or model takes.
#[test]
fn the_reference_in_the_docs_is_the_codes() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    for (name, kind) in kinds(&doc) {
        let needs = needs_of(kind);
        let keys: Vec<&str> = needs.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, keys_of(kind), "{name}: every key it takes, in order");
        let want = row(&name, needs);
        assert!(
            doc.contains(&format!("{want}\n")),
            "docs/scenarios.md lacks the row\n{want}"
        );
    }
    for (name, model) in models(&doc) {
        let needs = model_needs(model);
        let keys: Vec<&str> = needs.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, model_keys(model), "{name}");
        let want = row(&name, needs);
        assert!(
            doc.contains(&format!("{want}\n")),
            "docs/scenarios.md lacks the row\n{want}"
        );
    }
}

const HEAD: &str =
    "name = \"needs\"\nseed = 5\ntime_limit = \"20ms\"\n[topology]\nkind = \"star\"\nhosts = 4\n";

/// A value for a key the file must give, small enough to run at once.
fn given(key: &str) -> &'static str {
    match key {
        "src" => "\"h0\"",
        "dst" => "\"h1\"",
        "size" => "\"1KiB\"",
        "sizes" => "[64]",
        "load" => "0.5",
        "cdf" => "[[1000, 1.0]]",
        "blocks" => "4",
        "p" | "r" => "0.5",
        "delay" => "\"1us\"",
        "rate" => "\"10Gbps\"",
        "a" => "[\"h0\"]",
        "b" => "[\"h1\"]",
        other => panic!("no value for required key {other}"),
    }
}

/// The keys a kind's smallest run gives: its required ones (the first of
/// each pair), and what a layout or algorithm needs besides.
fn base(needs: &[(&str, Need)], extra: &str) -> String {
    let mut s = String::new();
    for (key, need) in needs {
        let first_of_pair = matches!(need, Need::Or(o) if !s.contains(&format!("\n{o} = ")) && !s.starts_with(&format!("{o} = ")));
        if *need == Need::Required || first_of_pair {
            s += &format!("{key} = {}\n", given(key));
        }
    }
    s + extra
}

/// What a run reports, less its wall-clock figures.
/// What a run reports, less its wall-clock figures, and what it was
/// planned to be: everything but where the file's text is and the
/// `[[fault]]` tables as written (so a default left out and written out
/// must plan alike even where it does not change this small run, as a
/// `window` with one operation).
fn outcome(text: &str) -> Result<serde_json::Value, String> {
    let sc = Scenario::parse("needs.toml", text).map_err(|e| e.to_string())?;
    let p = plan(&sc, sc.file.seed, BackendKind::Sim).map_err(|e| e.to_string())?;
    let planned = format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        p.resolved, p.work, p.time_limit, p.checks, p.outputs, p.kinds
    );
    let r = run(&sc, RunOptions::default()).map_err(|e| e.to_string())?;
    let mut v = serde_json::to_value(&r).unwrap();
    for k in ["wall_s", "packet_hops_per_s"] {
        v.as_object_mut().unwrap().remove(k);
    }
    v.as_object_mut()
        .unwrap()
        .insert("planned".into(), planned.into());
    Ok(v)
}

/// The bases a kind's defaults are tried on: some keys belong to one of
/// its modes only (a collective's `warmup` to an MPI algorithm, its
/// `interval` to the NIC study).
fn bases(kind: WorkloadKind) -> &'static [&'static str] {
    match kind {
        WorkloadKind::Noncontig => &["block = \"64B\"\n"],
        WorkloadKind::Collective => &["", "algorithm = \"ring\"\n"],
        _ => &[""],
    }
}

/// Every default a workload kind states, written out, runs as the file
/// without it; every key it must have, left out, is refused by name.
#[test]
fn each_workload_default_is_what_runs_and_each_required_key_is_asked_for() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    for (name, kind) in kinds(&doc) {
        let needs = needs_of(kind);
        let file = |keys: &str| format!("{HEAD}[[workload]]\nkind = \"{name}\"\n{keys}");
        for (key, need) in needs {
            match need {
                Need::Default(v) => {
                    let tried: Vec<String> = bases(kind)
                        .iter()
                        .filter_map(|extra| {
                            let plain = file(&base(needs, extra));
                            let said = format!("{plain}{key} = {v}\n");
                            let (a, b) = (outcome(&plain).ok()?, outcome(&said));
                            Some(match b {
                                Ok(b) if a == b => String::new(),
                                Ok(_) => format!(
                                    "{name}: `{key} = {v}` runs otherwise than leaving it out"
                                ),
                                Err(e) => format!("{name}: `{key} = {v}`: {e}"),
                            })
                        })
                        .collect();
                    assert!(
                        tried.iter().any(String::is_empty),
                        "{name}.{key}: no base took the default: {tried:?}"
                    );
                }
                Need::Required => {
                    let keys: String = base(needs, bases(kind)[0])
                        .lines()
                        .filter(|l| !l.starts_with(&format!("{key} = ")))
                        .map(|l| format!("{l}\n"))
                        .collect();
                    let e = outcome(&file(&keys)).expect_err(&format!("{name} without {key}"));
                    assert!(
                        e.contains(&format!("`{key}`")) || e.contains(&format!("{key} ")),
                        "{name} without {key}: {e}"
                    );
                }
                Need::Or(other) => {
                    let keys: String = base(needs, bases(kind)[0])
                        .lines()
                        .filter(|l| {
                            !l.starts_with(&format!("{key} = "))
                                && !l.starts_with(&format!("{other} = "))
                        })
                        .map(|l| format!("{l}\n"))
                        .collect();
                    let e = outcome(&file(&keys))
                        .expect_err(&format!("{name} without {key} or {other}"));
                    assert!(
                        e.contains(key) || e.contains(other),
                        "{name} without {key} or {other}: {e}"
                    );
                }
                Need::Else(_) => {}
            }
        }
    }
}

/// The same for the fault models: a default written out runs as the
/// rule without it; a required key left out is refused by name.
#[test]
fn each_fault_default_is_what_runs_and_each_required_key_is_asked_for() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    let work = "[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"16KiB\"\n";
    for (name, model) in models(&doc) {
        if model == ModelKind::RegistrationFailure {
            // The messaging layer's: it has no default to try, and its
            // one required key, `p`, is asked for by name.
            let text = format!("{HEAD}{work}[[fault]]\nname = \"f\"\nmodel = \"{name}\"\n");
            let e = outcome(&text).expect_err("registration-failure without p");
            assert!(e.contains("needs `p`"), "{e}");
            continue;
        }
        let needs = model_needs(model);
        let file =
            |keys: &str| format!("{HEAD}{work}[[fault]]\nname = \"f\"\nmodel = \"{name}\"\n{keys}");
        for (key, need) in needs {
            match need {
                Need::Default(v) => {
                    let plain = file(&base(needs, ""));
                    let a = outcome(&plain).unwrap_or_else(|e| panic!("{name}: {e}"));
                    let b = outcome(&format!("{plain}{key} = {v}\n"))
                        .unwrap_or_else(|e| panic!("{name}.{key}: {e}"));
                    assert_eq!(
                        a, b,
                        "{name}: `{key} = {v}` runs otherwise than leaving it out"
                    );
                }
                Need::Required => {
                    let keys: String = base(needs, "")
                        .lines()
                        .filter(|l| !l.starts_with(&format!("{key} = ")))
                        .map(|l| format!("{l}\n"))
                        .collect();
                    let e = outcome(&file(&keys)).expect_err(&format!("{name} without {key}"));
                    assert!(e.contains(&format!("`{key}`")), "{name} without {key}: {e}");
                }
                Need::Or(_) | Need::Else(_) => {}
            }
        }
    }
}

/// Prints the rows for docs/scenarios.md (`cargo test --test needs --
/// --ignored --nocapture`), to paste when the code's table changes.
#[test]
#[ignore = "prints the doc's rows; run by hand when the table changes"]
fn print_the_rows() {
    let doc = std::fs::read_to_string(DOC).unwrap();
    for (name, kind) in kinds(&doc) {
        println!("{}", row(&name, needs_of(kind)));
    }
    for (name, model) in models(&doc) {
        println!("{}", row(&name, model_needs(model)));
    }
}
