//! Functions fit on a screen or two (docs/design.md, "Reading the
//! code"): no function outside tests is longer than 120 lines, counted
//! from its `fn` line to its closing brace. Every crate's `src/` and the
//! CLI's are read; `#[cfg(test)]` modules, `tests/`, `benches/` and the
//! fuzz crate are not.

use std::path::{Path, PathBuf};

/// Longest a function may be, in lines.
const MOST: usize = 120;

/// The source folders read.
const FOLDERS: [&str; 10] = [
    "src",
    "proto/src",
    "nic-model/src",
    "app/src",
    "host/src",
    "sim/src",
    "fault-injection/src",
    "fabric/src",
    "bridge/src",
    "scenarios/src",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code a reader sees: comments, string and character literals
/// blanked (their braces are not the code's), and nothing from the first
/// `#[cfg(test)] mod` on.
fn code_of(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
        } else if rest.starts_with(b"r#\"") || rest.starts_with(b"r\"") {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                i += 1;
            }
            i += close.len();
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                i += 1;
            }
            i += 1;
        } else if b[i] == b'\'' && (rest.get(2) == Some(&b'\'') || rest.get(1) == Some(&b'\\')) {
            // A character literal ('{', '\n', '\''), not a lifetime.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    let s = String::from_utf8_lossy(&out).into_owned();
    let cut = s.find("#[cfg(test)]\nmod ").unwrap_or(s.len());
    s.as_bytes()[..cut].to_vec()
}

/// Each function of `code` with a body: (name, first line, lines long).
fn functions(code: &[u8]) -> Vec<(String, usize, usize)> {
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 < code.len() {
        if !(code[i..].starts_with(b"fn ") && (i == 0 || !is_ident(code[i - 1]))) {
            i += 1;
            continue;
        }
        let name: String = code[i + 3..]
            .iter()
            .take_while(|c| is_ident(**c))
            .map(|c| *c as char)
            .collect();
        let (Some(brace), semi) = (
            code[i..].iter().position(|c| *c == b'{'),
            code[i..].iter().position(|c| *c == b';'),
        ) else {
            break;
        };
        if semi.is_some_and(|s| s < brace) {
            i += 3;
            continue;
        }
        let mut depth = 0usize;
        let mut end = i + brace;
        for (k, c) in code[i + brace..].iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + brace + k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let line = code[..i].iter().filter(|c| **c == b'\n').count() + 1;
        let long = code[i..end].iter().filter(|c| **c == b'\n').count() + 1;
        out.push((name, line, long));
        i += 3;
    }
    out
}

#[test]
fn no_function_outside_tests_is_longer_than_two_screens() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for f in FOLDERS {
        rust_files(&root.join(f), &mut files);
    }
    files.sort();
    let mut long = Vec::new();
    let mut seen = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (name, line, n) in functions(&code_of(&text)) {
            seen += 1;
            if n > MOST {
                let rel = f.strip_prefix(root).unwrap().display();
                long.push(format!("{rel}:{line}: fn {name} is {n} lines"));
            }
        }
    }
    assert!(
        seen > 2000,
        "only {seen} functions read: the reader is broken"
    );
    assert!(
        long.is_empty(),
        "functions longer than {MOST} lines (split them by what they do):\n{}",
        long.join("\n")
    );
}

/// The reader counts a function from `fn` to its closing brace, and is
/// not misled by braces in strings, characters or comments, nor by a
/// declaration without a body.
#[test]
fn the_reader_measures_functions_as_written() {
    let src = "trait T { fn decl(&self); }\nfn a() {\n    let s = \"}}{\";\n    let c = '}';\n    // }\n    if x { y }\n}\nfn b<'a>(x: &'a str) {}\n#[cfg(test)]\nmod tests { fn t() {} }\n";
    let got = functions(&code_of(src));
    assert_eq!(got, vec![("a".to_string(), 2, 6), ("b".to_string(), 8, 1)]);
}
