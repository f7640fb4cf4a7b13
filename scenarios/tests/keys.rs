//! A key that its workload kind or fault model does not read is refused
//! at its line, naming the kind and the keys it takes; the tables of
//! docs/scenarios.md say the same as the code.

use udrma_scenarios::file::applies::{keys_of, model_keys, TARGETING};
use udrma_scenarios::file::schema::{ModelKind, WorkloadKind};
use udrma_scenarios::Scenario;

/// The rows `| `name` | `a`, `b` |` of the table that follows `heading`
/// in docs/scenarios.md.
fn doc_table(heading: &str) -> Vec<(String, Vec<String>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let at = doc
        .find(heading)
        .unwrap_or_else(|| panic!("{heading:?} not in {path}"));
    doc[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`').to_string();
            let keys = cells[2]
                .split(',')
                .filter_map(|k| k.split('`').nth(1))
                .map(str::to_string)
                .collect();
            (name, keys)
        })
        .collect()
}

#[derive(serde::Deserialize)]
struct Named<T> {
    k: T,
}

fn named<T: serde::de::DeserializeOwned>(name: &str) -> T {
    toml::from_str::<Named<T>>(&format!("k = \"{name}\""))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .k
}

/// A value of the right type for `key` (of a fault table if `fault`), so
/// that only the refusal is left to fail.
fn value(key: &str, fault: bool) -> &'static str {
    match key {
        "op" => "\"write\"",
        "src" | "dst" if fault => "[\"h0\"]",
        "src" | "dst" => "\"h0\"",
        "srcs" | "a" | "b" => "[\"h0\"]",
        "pairs" => "[[\"h0\", \"h1\"]]",
        "size" | "block" | "stride" => "\"1KiB\"",
        "sizes" => "[8]",
        "start" | "interval" | "delay" | "jitter" | "from" | "until" => "\"1us\"",
        "key_cache" | "two_way" => "true",
        "method" => "\"pack\"",
        "form" => "\"rdma\"",
        "layout" => "\"vector\"",
        "peer_layout" => "\"same\"",
        "collective" => "\"allreduce\"",
        "algorithm" => "\"ring\"",
        "reduce_op" => "\"sum\"",
        "datatype" => "\"f64\"",
        "distribution" => "\"uniform\"",
        "rate" => "\"1Gbps\"",
        "links" => "[\"h0-s0\"]",
        "direction" => "\"forward\"",
        "opcodes" => "[\"write\"]",
        "flags" => "[\"first\"]",
        "p" | "correlation" | "r" | "loss_good" | "loss_bad" | "load" => "0.5",
        "cdf" => "[[1000, 1.0]]",
        _ => "2",
    }
}

const HEAD: &str = "name = \"keys\"\n[topology]\nkind = \"pair\"\n";

#[test]
fn every_workload_kind_refuses_the_keys_it_does_not_read() {
    let rows = doc_table("**Keys each kind takes**");
    assert_eq!(rows.len(), 16, "one row a workload kind");
    let every: Vec<&String> = rows.iter().flat_map(|(_, k)| k).collect();
    for (name, keys) in &rows {
        let kind: WorkloadKind = named(name);
        assert_eq!(
            keys_of(kind),
            keys.as_slice(),
            "docs/scenarios.md row {name}"
        );
        for key in every.iter().filter(|k| !keys.contains(k)) {
            let text = format!(
                "{HEAD}[[workload]]\nkind = \"{name}\"\n{key} = {}\n",
                value(key, false)
            );
            let e = Scenario::parse("w.toml", &text)
                .expect_err(&text)
                .to_string();
            let want = format!(
                "w.toml:6:1: workload 0: `{key}` does not apply to `kind = \"{name}\"`, which takes `{}`",
                keys.join("`, `")
            );
            assert_eq!(e, want);
        }
        // Its own keys are not refused as not applying (the file may
        // still be wrong in other ways).
        let own: String = keys
            .iter()
            .map(|k| format!("{k} = {}\n", value(k, false)))
            .collect();
        let text = format!("{HEAD}[[workload]]\nkind = \"{name}\"\n{own}");
        if let Err(e) = Scenario::parse("w.toml", &text) {
            assert!(!e.to_string().contains("does not apply"), "{e}");
        }
    }
}

#[test]
fn every_fault_model_refuses_the_keys_it_does_not_read() {
    let rows = doc_table("| model | keys |");
    assert_eq!(rows.len(), 10, "one row a fault model");
    // The targeting keys, as the code lists them (the table's prose
    // names them too).
    let targeting = TARGETING;
    let mut every: Vec<&str> = rows
        .iter()
        .flat_map(|(_, k)| k.iter().map(String::as_str))
        .chain(targeting)
        .collect();
    every.sort_unstable();
    every.dedup();
    for (name, keys) in &rows {
        let model: ModelKind = named(name);
        let packets = name != "registration-failure";
        // The registration-failure row names its targeting keys too.
        let own: Vec<&str> = model_keys(model).to_vec();
        let doc: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert_eq!(own, doc, "docs/scenarios.md row {name}");
        let takes = |k: &str| own.contains(&k) || (packets && targeting.contains(&k));
        for key in every.iter().filter(|k| !takes(k)) {
            let text = format!(
                "{HEAD}[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\n\
                 [[fault]]\nmodel = \"{name}\"\n{key} = {}\n",
                value(key, true)
            );
            let e = Scenario::parse("f.toml", &text)
                .expect_err(&text)
                .to_string();
            let prefix = format!("f.toml:11:1: fault 0: `{key}` does not apply to `model = \"");
            assert!(e.starts_with(&prefix), "{e}\nwanted {prefix}");
        }
    }
}

/// A `[nic]` value the engine refuses is reported at its line under the
/// file's key, not the engine's field name (`op_table`, not
/// `op_table_capacity`).
#[test]
fn a_nic_value_out_of_range_is_named_as_the_file_names_it() {
    for (key, says) in [
        ("op_table", "must be 1..=65535"),
        ("command_queue", "must be at least 1"),
        ("registry", "must be at least 1"),
        ("recv_queue", "must be at least 1"),
        ("transmit_queue", "must be at least 1"),
    ] {
        let text = format!(
            "{HEAD}[nic]\n{key} = 0\n[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\n"
        );
        let e = Scenario::parse("n.toml", &text).expect_err(key).to_string();
        assert_eq!(e, format!("n.toml:5:1: nic.{key} = 0: {says}"));
    }
}
