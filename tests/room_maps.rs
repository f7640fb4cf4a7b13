//! Every folder's module docs list its children: a `mod x;` whose parent
//! (a crate root, a `mod.rs`, or a file with a folder of its own) does not
//! name `x` in its `//!` docs fails this test, so a new module cannot
//! land without its line in the map.

use std::path::{Path, PathBuf};

/// Parents: crate roots, `mod.rs` files, and `x.rs` beside a folder `x/`.
fn parents(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            if !["target", ".git", "fuzz", "tests", "benches", "examples"].contains(&name.as_str())
            {
                parents(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.components().any(|c| c.as_os_str() == "src")
            && (["lib.rs", "main.rs", "mod.rs"].contains(&name.as_str())
                || p.with_extension("").is_dir())
        {
            out.push(p);
        }
    }
}

/// The modules a file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn declared(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let m = l.strip_prefix("mod ")?.strip_suffix(';')?;
            m.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| m.to_string())
        })
        .collect()
}

/// Whether `docs` names `m` as a word (`m`, [`m`], or plain).
fn names(docs: &str, m: &str) -> bool {
    docs.match_indices(m).any(|(at, _)| {
        let before = docs[..at].chars().next_back();
        let after = docs[at + m.len()..].chars().next();
        let word = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        word(before) && word(after)
    })
}

#[test]
fn every_module_is_named_in_its_parent_s_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    parents(root, &mut files);
    files.sort();
    assert!(files.len() > 20, "found {files:?}");
    let mut missing = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let docs: String = text
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        for m in declared(&text) {
            if !names(&docs, &m) {
                missing.push(format!(
                    "{}: `{m}`",
                    f.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "modules their parent's docs do not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_reader_finds_declarations_and_names() {
    let text = "//! Holds `a` and [`b`].\npub mod a;\nmod b;\npub(crate) mod c;\n#[cfg(test)]\nmod tests;\n";
    assert_eq!(declared(text), ["a", "b", "c", "tests"]);
    assert!(names("Holds `a` and [`b`].", "b"));
    assert!(!names("a table", "tab"));
}
