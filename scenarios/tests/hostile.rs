//! Mangled scenario files never panic the parser or the validator: every
//! outcome is a scenario or an error with a place and a reason.

use proptest::prelude::*;
use udrma_scenarios::Scenario;

fn examples() -> Vec<String> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v.into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize),
    Duplicate(usize),
    Replace(usize, String),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let junk = prop_oneof![
        Just("k = 0".to_string()),
        Just("k = 3".to_string()),
        Just("k = 1000".to_string()),
        Just("hosts = 4000000000".to_string()),
        Just("hosts = 1".to_string()),
        Just("size = -5".to_string()),
        Just("size = \"9999999GiB\"".to_string()),
        Just("p = 7.5".to_string()),
        Just("links = [\"x-y\"]".to_string()),
        Just("src = \"h999999999999\"".to_string()),
        Just("[[fault]]".to_string()),
        Just("model = \"rate\"".to_string()),
        Just("time_limit = \"-1s\"".to_string()),
        Just("mtu_payload = 0".to_string()),
        Just("count = 0".to_string()),
        "[ -~]{0,30}",
    ];
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Duplicate),
        (any::<usize>(), junk).prop_map(|(i, j)| Edit::Replace(i, j)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn mangled_examples_parse_or_fail_with_a_place(which in any::<usize>(), edits in proptest::collection::vec(edit(), 1..6)) {
        let all = examples();
        let mut lines: Vec<String> = all[which % all.len()].lines().map(String::from).collect();
        for e in edits {
            let n = lines.len().max(1);
            match e {
                Edit::Delete(i) if !lines.is_empty() => { lines.remove(i % n); }
                Edit::Duplicate(i) if !lines.is_empty() => { let l = lines[i % n].clone(); lines.insert(i % n, l); }
                Edit::Replace(i, j) if !lines.is_empty() => lines[i % n] = j,
                Edit::Truncate(i) => { let text = lines.join("\n"); let cut = i % (text.len() + 1); let cut = (0..=cut).rev().find(|c| text.is_char_boundary(*c)).unwrap_or(0); lines = text[..cut].lines().map(String::from).collect(); }
                _ => {}
            }
        }
        let text = lines.join("\n");
        if let Err(e) = Scenario::parse("mangled.toml", &text) {
            prop_assert!(e.to_string().starts_with("mangled.toml"), "{}", e);
        }
    }
}
