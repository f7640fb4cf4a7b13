//! `method = "auto"` picks, on the study's grid, the method the
//! simulator then finds fastest. Each cell (block size × block count ×
//! SEND/RECV or RDMA WRITE, on the study's ConnectX-5 profile) is run
//! with each method asked for, and auto's choice must be the fastest of
//! those runs. The cost estimate alone, which auto chose by before,
//! picked otherwise in many cells: the confusion table below, which
//! docs/noncontig.md prints, is computed here.

use std::collections::BTreeMap;

use udrma_scenarios::{run, RunOptions, Scenario};

const STUDY: &str = include_str!("../reproduce/noncontig-study.toml");

fn scenario(method: &str, form: &str, block: u64, blocks: u64) -> Scenario {
    let text = STUDY
        .replace("method = \"sgl\"", &format!("method = \"{method}\""))
        .replace("form = \"messaging\"", &format!("form = \"{form}\""))
        .replace("block = \"1KiB\"", &format!("block = \"{block}B\""))
        .replace("blocks = 16", &format!("blocks = {blocks}"));
    Scenario::parse("noncontig-study.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

const METHODS: [&str; 3] = ["pack", "sgl", "indirect"];

/// The confusion table's rows: for each fastest method, how many cells
/// the estimate put on each method, and how many auto did.
fn table(rows: &BTreeMap<(&str, &str), u32>, auto_right: u32, cells: u32) -> String {
    let mut s = String::from("| fastest in the simulator | estimate chose pack | sgl | indirect | auto chose the fastest |\n|---|---:|---:|---:|---:|\n");
    for fastest in METHODS {
        let n = |chose: &str| rows.get(&(fastest, chose)).copied().unwrap_or(0);
        let all: u32 = METHODS.iter().map(|c| n(c)).sum();
        s += &format!(
            "| {fastest} | {} | {} | {} | {all} of {all} |\n",
            n("pack"),
            n("sgl"),
            n("indirect")
        );
    }
    let right: u32 = METHODS
        .iter()
        .map(|m| rows.get(&(*m, *m)).copied().unwrap_or(0))
        .sum();
    s += &format!("\nThe estimate chose the fastest method in {right} of {cells} cells; auto in {auto_right} of {cells}.\n");
    s
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "runs 32 cells of the study four ways (a minute in release): run with --release (CI does)"
)]
fn auto_chooses_the_fastest_method_on_the_studys_grid() {
    let mut rows: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    let (mut cells, mut auto_right) = (0, 0);
    for form in ["messaging", "rdma"] {
        for block in [256u64, 1024, 4096, 16384] {
            for blocks in [16u64, 32, 64, 128] {
                let one_way = |m: &str| {
                    let r = run(&scenario(m, form, block, blocks), RunOptions::default()).unwrap();
                    assert!(r.passed(), "{m} {form} {block} B × {blocks}: {:?}", r.notes);
                    r.noncontig.unwrap().latency_p50_us
                };
                let times: Vec<f64> = METHODS.iter().map(|m| one_way(m)).collect();
                let fastest = (0..3).fold(0, |b, i| if times[i] < times[b] { i } else { b });
                let auto = run(
                    &scenario("auto", form, block, blocks),
                    RunOptions::default(),
                )
                .unwrap();
                let n = auto.noncontig.unwrap();
                let at = format!(
                    "{form} {block} B × {blocks}: {times:?}, auto chose {}",
                    n.method
                );
                assert_eq!(n.method, METHODS[fastest], "{at}");
                assert_eq!(
                    n.latency_p50_us, times[fastest],
                    "{at}: auto's run is that method's"
                );
                for (i, m) in METHODS.iter().enumerate() {
                    assert_eq!(
                        n.measured_us[*m],
                        Some(times[i]),
                        "{at}: what auto measured of {m}"
                    );
                }
                let estimated = n
                    .estimates_us
                    .iter()
                    .fold(None::<(&String, f64)>, |b, (m, t)| match b {
                        Some((_, bt)) if bt <= *t => b,
                        _ => Some((m, *t)),
                    })
                    .unwrap()
                    .0;
                let chose = METHODS.iter().find(|m| *m == estimated).unwrap();
                *rows.entry((METHODS[fastest], chose)).or_default() += 1;
                cells += 1;
                auto_right += 1;
            }
        }
    }
    let table = table(&rows, auto_right, cells);
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/noncontig.md"))
        .unwrap();
    assert!(
        doc.contains(&table),
        "docs/noncontig.md should hold:\n{table}"
    );
}
