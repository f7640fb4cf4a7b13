//! A scenario as parsed from its TOML text, and the errors that point
//! into that text.

use core::fmt;

use crate::file::schema::ScenarioFile;

/// What is wrong with a scenario, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    /// File name as given.
    pub file: String,
    /// 1-based line and column, when known.
    pub at: Option<(usize, usize)>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ScenarioError {}

/// A parsed scenario with its source (for error locations).
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The parsed file.
    pub file: ScenarioFile,
    /// Its name as given (path or `<demo>`).
    pub path: String,
    /// Its text.
    pub text: String,
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

impl Scenario {
    /// Parses scenario text without validating it (see
    /// [`Scenario::parse`], which does both). `path` names it in errors.
    pub fn parse_unchecked(path: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let file: ScenarioFile = toml::from_str(text).map_err(|e| ScenarioError {
            file: path.to_string(),
            at: e.span().map(|s| line_col(text, s.start)),
            message: name_the_key(
                text,
                e.span().map(|s| s.start),
                improve(&narrow_to_kind(
                    text,
                    e.span().map(|s| s.start),
                    e.message(),
                )),
            ),
        })?;
        let sc = Scenario {
            file,
            path: path.to_string(),
            text: text.to_string(),
        };
        Ok(sc)
    }
}

/// Locating an error in a scenario's text: what the parsed scenario
/// ([`Scenario`]) and a plan's [`Locator`] share, so a runner that holds
/// only the plan still points at the key that asked for what failed.
pub trait Locate {
    /// The file's name as given (path or `<demo>`).
    fn path(&self) -> &str;
    /// Its text.
    fn text(&self) -> &str;

    /// The host a name in the file means: `h<n>` → host `n`, if a
    /// topology of `n_hosts` has it; otherwise an error at the name,
    /// saying `whose` it was.
    fn host(
        &self,
        name: &str,
        n_hosts: usize,
        whose: &str,
    ) -> Result<udrma_proto::NodeAddr, ScenarioError> {
        let id = name.strip_prefix('h').and_then(|n| n.parse::<u32>().ok());
        match id {
            Some(i) if (i as usize) < n_hosts => Ok(udrma_proto::NodeAddr(i)),
            Some(_) => Err(self.error_at(
                name,
                format!(
                    "{whose}: no host {name:?} in this topology (it has {n_hosts} hosts, h0..h{})",
                    n_hosts - 1
                ),
            )),
            None => Err(self.error_at(
                name,
                format!("{whose}: {name:?} is not a host name (expected h0, h1, ...)"),
            )),
        }
    }

    /// An error about the key `key` (located at the first line that sets
    /// it, if any).
    fn error_at_key(&self, key: &str, message: String) -> ScenarioError {
        ScenarioError {
            file: self.path().to_string(),
            at: self
                .settings(key, None)
                .first()
                .map(|&o| line_col(self.text(), o)),
            message,
        }
    }

    /// Where the lines that set `key` (to the string `value`, if given)
    /// start, in order.
    fn settings(&self, key: &str, value: Option<&str>) -> Vec<usize> {
        let quoted = value.map(|v| format!("\"{v}\""));
        let mut offset = 0;
        let mut found = Vec::new();
        for line in self.text().split_inclusive('\n') {
            let trimmed = line.trim_start();
            let sets = trimmed
                .strip_prefix(key)
                .and_then(|r| r.trim_start().strip_prefix('='))
                .is_some_and(|v| {
                    quoted
                        .as_ref()
                        .is_none_or(|q| v.trim_start().starts_with(q))
                });
            if sets {
                found.push(offset + (line.len() - trimmed.len()));
            }
            offset += line.len();
        }
        found
    }

    /// An error at byte `offset` of the text.
    fn error_at_offset(&self, offset: usize, message: String) -> ScenarioError {
        ScenarioError {
            file: self.path().to_string(),
            at: Some(line_col(self.text(), offset)),
            message,
        }
    }

    /// An error about the whole file (no place in it).
    fn error(&self, message: String) -> ScenarioError {
        ScenarioError {
            file: self.path().to_string(),
            at: None,
            message,
        }
    }

    /// An error about `token` (located at its first quoted occurrence in
    /// the text, if any).
    fn error_at(&self, token: &str, message: String) -> ScenarioError {
        let quoted = format!("\"{token}\"");
        let at = self
            .text()
            .find(&quoted)
            .or_else(|| self.text().find(token))
            .map(|o| line_col(self.text(), o));
        ScenarioError {
            file: self.path().to_string(),
            at,
            message,
        }
    }

    /// An error about the `nth` (from 0) line that sets `key` to the
    /// string `value` (the first such line if there are fewer; unlocated
    /// if none).
    fn error_at_nth_setting(
        &self,
        key: &str,
        value: &str,
        nth: usize,
        message: String,
    ) -> ScenarioError {
        let found = self.settings(key, Some(value));
        ScenarioError {
            file: self.path().to_string(),
            at: found
                .get(nth)
                .or(found.first())
                .map(|&o| line_col(self.text(), o)),
            message,
        }
    }
}

/// Where a scenario came from, without its keys: its name and text, to
/// locate the errors of a run that holds only its plan
/// (`crate::plan::resolved::Plan`).
#[derive(Debug, Clone, Default)]
pub struct Locator {
    /// The file's name as given.
    pub path: String,
    /// Its text.
    pub text: String,
}

impl Locate for Locator {
    fn path(&self) -> &str {
        &self.path
    }
    fn text(&self) -> &str {
        &self.text
    }
}

impl Locate for Scenario {
    fn path(&self) -> &str {
        &self.path
    }
    fn text(&self) -> &str {
        &self.text
    }
}

impl Scenario {
    /// Where this scenario came from, for a plan to carry.
    pub fn locator(&self) -> Locator {
        Locator {
            path: self.path.clone(),
            text: self.text.clone(),
        }
    }
}

/// An unknown key in a `[[workload]]` table of a known kind: serde lists
/// the keys of every kind (they share one schema); name the kind and list
/// only the keys it takes, so that "did you mean" draws from those.
fn narrow_to_kind(text: &str, offset: Option<usize>, message: &str) -> String {
    use serde::Deserialize;
    let unchanged = || message.to_string();
    let (Some(offset), Some(rest)) = (offset, message.strip_prefix("unknown field `")) else {
        return unchanged();
    };
    let Some((got, _)) = rest.split_once('`') else {
        return unchanged();
    };
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return unchanged();
    };
    let Some(toml::de::DeValue::Array(tables)) = doc.get_ref().get("workload").map(|v| v.get_ref())
    else {
        return unchanged();
    };
    // A table's span here is its header: the key sits in the table whose
    // header is the last before it. Which one that is, of every table and
    // array-of-tables element in the file (a line of a multi-line array
    // is no header).
    let mut headers: Vec<(usize, Option<usize>)> = Vec::new();
    for (k, v) in doc.get_ref().iter() {
        match v.get_ref() {
            toml::de::DeValue::Table(_) => headers.push((v.span().start, None)),
            toml::de::DeValue::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    if matches!(e.get_ref(), toml::de::DeValue::Table(_)) {
                        let w = (k.get_ref() == "workload").then_some(i);
                        headers.push((e.span().start, w));
                    }
                }
            }
            _ => {}
        }
    }
    let Some((_, Some(i))) = headers
        .into_iter()
        .filter(|(at, _)| *at <= offset)
        .max_by_key(|(at, _)| *at)
    else {
        return unchanged();
    };
    let kind = tables.get(i).and_then(|t| match t.get_ref() {
        toml::de::DeValue::Table(t) => t.get("kind").and_then(|k| match k.get_ref() {
            toml::de::DeValue::String(s) => Some(s.to_string()),
            _ => None,
        }),
        _ => None,
    });
    let Some(kind) = kind else {
        return unchanged();
    };
    let de = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(&kind);
    let Ok(k) = crate::file::schema::WorkloadKind::deserialize(de) else {
        return unchanged();
    };
    let keys: Vec<String> = std::iter::once("kind")
        .chain(crate::file::keys::keys_of(k))
        .map(|k| format!("`{k}`"))
        .collect();
    format!(
        "unknown field `{got}` in a `{kind}` workload, expected one of {}",
        keys.join(", ")
    )
}

/// Adds "did you mean" to serde's unknown-field and unknown-variant errors.
fn improve(message: &str) -> String {
    for (rust, words) in [
        ("expected u8", "expected a whole number 0..=255"),
        ("expected u16", "expected a whole number 0..=65535"),
        ("expected u32", "expected a whole number 0..=4294967295"),
        ("expected u64", "expected a whole number 0 or more"),
        ("expected usize", "expected a whole number 0 or more"),
        ("expected f64", "expected a number"),
    ] {
        if let Some(head) = message.strip_suffix(rust) {
            return format!("{head}{words}");
        }
    }
    let Some((head, expected)) = message
        .split_once(", expected one of ")
        .or_else(|| message.split_once(", expected "))
    else {
        return message.to_string();
    };
    // Only a name the file gave (an unknown field or variant) has a
    // nearest known one; a syntax error ("unclosed table, expected `]`")
    // names none.
    let Some(got) = head.split('`').nth(1).filter(|g| !g.is_empty()) else {
        return message.to_string();
    };
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match udrma_faults::closest(got, &names).filter(|b| *b != got) {
        Some(best) => format!("{message} (did you mean `{best}`?)"),
        None => message.to_string(),
    }
}

/// Names the key a parse error is about, when the error points into a
/// line that sets one: `nic.op_table: invalid value: integer `-64`,
/// expected a whole number 0..=65535`, `duplicate key `seed``. An error
/// that points at the key itself (an unknown field) names it already.
fn name_the_key(text: &str, offset: Option<usize>, message: String) -> String {
    let Some(offset) = offset else {
        return message;
    };
    if message == "duplicate key" {
        // The file does not parse into a tree: the key is the one its
        // line sets.
        let start = text[..offset.min(text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let line = text[start..].lines().next().unwrap_or("");
        return match line.split_once('=') {
            Some((key, _)) => format!("duplicate key `{}`", key.trim()),
            None => message,
        };
    }
    match toml::de::DeTable::parse(text)
        .ok()
        .and_then(|doc| key_at(doc.get_ref(), offset, ""))
    {
        Some(key) => format!("{key}: {message}"),
        None => message,
    }
}

/// The dotted key (`nic.op_table`, `workload[2].size`) under `prefix`
/// whose value's span holds byte `offset` of the text `table` was parsed
/// from (the same tree `applies` checks keys in).
fn key_at(table: &toml::de::DeTable<'_>, offset: usize, prefix: &str) -> Option<String> {
    table.iter().find_map(|(k, v)| {
        let name = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        value_at(v, offset, name)
    })
}

fn value_at(
    v: &toml::Spanned<toml::de::DeValue<'_>>,
    offset: usize,
    name: String,
) -> Option<String> {
    match v.get_ref() {
        toml::de::DeValue::Table(t) => key_at(t, offset, &name),
        toml::de::DeValue::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, e)| value_at(e, offset, format!("{name}[{i}]")))
            .or_else(|| v.span().contains(&offset).then_some(name)),
        _ => v.span().contains(&offset).then_some(name),
    }
}
