//! Editing a scenario by dotted paths (`fault.loss.p`, `workload.0.size`,
//! `nic.max_retries`), for sweeps and shrinking.

use toml::{Table, Value};

/// Parses a command-line value as TOML (number, boolean, string...);
/// anything that is not valid TOML is taken as a string (`1MiB`, `h3`).
pub fn value(raw: &str) -> Value {
    match format!("v = {raw}").parse::<Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| Value::String(raw.to_string())),
        Err(_) => Value::String(raw.to_string()),
    }
}

/// Parses scenario text as a table to edit. TOML integers are 64-bit
/// signed but a seed is any u64 (as `--seed` takes it): a top-level
/// `seed` above i64::MAX is read as its string of digits, which the
/// scenario schema takes too.
pub fn parse_doc(text: &str) -> Result<Table, String> {
    let mut out = String::with_capacity(text.len() + 2);
    let mut top = true;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        top &= !t.starts_with('[');
        let big = t
            .strip_prefix("seed")
            .and_then(|r| r.trim_start().strip_prefix('='))
            .map(|v| v.split('#').next().unwrap_or("").trim())
            .filter(|d| d.parse::<u64>().is_ok() && d.parse::<i64>().is_err());
        match big {
            Some(digits) if top => out.push_str(&format!("seed = \"{digits}\"\n")),
            _ => out.push_str(line),
        }
    }
    out.parse::<Table>().map_err(|e| e.to_string())
}

/// Sets `path` in `doc` to `v`. Arrays of tables (`fault`, `workload`,
/// `pause`) are indexed by position or, for faults, by `name`.
pub fn set(doc: &mut Table, path: &str, v: Value) -> Result<(), String> {
    let parts: Vec<&str> = path.split('.').collect();
    let mut table: &mut Table = doc;
    let mut i = 0;
    while i + 1 < parts.len() {
        let key = parts[i];
        match table.get(key) {
            Some(Value::Array(_)) => {
                let sel = parts
                    .get(i + 1)
                    .ok_or_else(|| format!("{path}: `{key}` needs an index or a name"))?;
                let Some(Value::Array(items)) = table.get_mut(key) else {
                    unreachable!()
                };
                let n = items.len();
                let item = match sel.parse::<usize>() {
                    Ok(ix) => items
                        .get_mut(ix)
                        .ok_or_else(|| format!("{path}: `{key}` has {n} entries, no {ix}"))?,
                    Err(_) => {
                        let names: Vec<String> = items
                            .iter()
                            .filter_map(|t| t.get("name").and_then(Value::as_str))
                            .map(|n| format!("{n:?}"))
                            .collect();
                        let known = if names.is_empty() {
                            format!(
                                "no `{key}` has a name; use its position, 0 to {}",
                                n.saturating_sub(1)
                            )
                        } else {
                            format!("the names are {}", names.join(", "))
                        };
                        items
                            .iter_mut()
                            .find(|t| t.get("name").and_then(Value::as_str) == Some(*sel))
                            .ok_or_else(|| format!("{path}: no `{key}` named {sel:?}; {known}"))?
                    }
                };
                table = item
                    .as_table_mut()
                    .ok_or_else(|| format!("{path}: `{key}.{sel}` is not a table"))?;
                i += 2;
            }
            Some(Value::Table(_)) => {
                let Some(Value::Table(t)) = table.get_mut(key) else {
                    unreachable!()
                };
                table = t;
                i += 1;
            }
            None => {
                table.insert(key.to_string(), Value::Table(Table::new()));
                let Some(Value::Table(t)) = table.get_mut(key) else {
                    unreachable!()
                };
                table = t;
                i += 1;
            }
            Some(_) => return Err(format!("{path}: `{key}` is not a table")),
        }
    }
    let last = parts
        .last()
        .copied()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{path}: empty key"))?;
    table.insert(last.to_string(), v);
    Ok(())
}

/// Where the dotted `path` is set in the scenario `text`, as 1-based
/// (line, column) of the key, or of its table's header when the key is
/// not in the file yet. `None` when not even the table is there.
pub fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let parts: Vec<&str> = path.split('.').collect();
    // Which table header we are under: (name, position among its array
    // siblings, its `name` key) and the header's line.
    type Place = (String, usize, Option<String>);
    let mut header: Place = (String::new(), 0, None);
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    // (table path as written, key) → position, for every assignment.
    struct Hit {
        table: Place,
        key: String,
        at: (usize, usize),
    }
    let mut hits: Vec<Hit> = Vec::new();
    let mut headers: Vec<(Place, (usize, usize))> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let col = line.len() - trimmed.len() + 1;
        if let Some(rest) = trimmed.strip_prefix("[[") {
            let name = rest.split("]]").next().unwrap_or("").trim().to_string();
            let ix = seen.entry(name.clone()).or_insert(0);
            header = (name, *ix, None);
            *ix += 1;
            headers.push((header.clone(), (i + 1, col)));
        } else if let Some(rest) = trimmed.strip_prefix('[') {
            let name = rest.split(']').next().unwrap_or("").trim().to_string();
            header = (name, 0, None);
            headers.push((header.clone(), (i + 1, col)));
        } else if let Some((key, value)) = trimmed.split_once('=') {
            let key = key.trim().to_string();
            if key == "name" {
                let name = value.trim().trim_matches('"').to_string();
                header.2 = Some(name.clone());
                for h in headers.iter_mut().rev().take(1) {
                    h.0 .2 = Some(name.clone());
                }
                for hit in hits
                    .iter_mut()
                    .filter(|h| h.table.0 == header.0 && h.table.1 == header.1)
                {
                    hit.table.2 = Some(name.clone());
                }
            }
            hits.push(Hit {
                table: header.clone(),
                key,
                at: (i + 1, col),
            });
        }
    }
    let matches = |t: &Place, name: &str, sel: Option<&str>| {
        t.0 == name
            && match sel {
                None => true,
                Some(sel) => match sel.parse::<usize>() {
                    Ok(ix) => t.1 == ix,
                    Err(_) => t.2.as_deref() == Some(sel),
                },
            }
    };
    let (table, sel, key) = match parts.as_slice() {
        [key] => ("", None, key.to_string()),
        [table, key] => (*table, None, key.to_string()),
        [table, sel, rest @ ..] if seen.contains_key(*table) => {
            (*table, Some(*sel), rest.join("."))
        }
        [table, rest @ ..] => (*table, None, rest.join(".")),
        [] => return None,
    };
    hits.iter()
        .find(|h| matches(&h.table, table, sel) && h.key == key)
        .map(|h| h.at)
        .or_else(|| {
            headers
                .iter()
                .find(|(t, _)| matches(t, table, sel))
                .map(|(_, at)| *at)
        })
}

/// The document as TOML text.
pub fn render(doc: &Table) -> String {
    toml::to_string(doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_reach_tables_arrays_and_named_faults() {
        let mut doc: Table = "name = \"x\"\n[nic]\nmax_retries = 3\n[[fault]]\nname = \"loss\"\np = 0.1\n[[workload]]\nkind = \"single\"\n".parse().unwrap();
        set(&mut doc, "fault.loss.p", value("0.05")).unwrap();
        set(&mut doc, "workload.0.size", value("1MiB")).unwrap();
        set(&mut doc, "nic.max_retries", value("9")).unwrap();
        set(&mut doc, "topology.k", value("4")).unwrap();
        let text = render(&doc);
        assert!(
            text.contains("p = 0.05")
                && text.contains("size = \"1MiB\"")
                && text.contains("max_retries = 9"),
            "{text}"
        );
        assert!(set(&mut doc, "fault.nope.p", value("1"))
            .unwrap_err()
            .contains("no `fault` named \"nope\""));
        assert!(set(&mut doc, "workload.3.size", value("1"))
            .unwrap_err()
            .contains("has 1 entries"));
        assert!(set(&mut doc, "fault.los.p", value("1"))
            .unwrap_err()
            .ends_with("no `fault` named \"los\"; the names are \"loss\""));
        assert_eq!(value("true"), Value::Boolean(true));
        assert_eq!(value("h3"), Value::String("h3".into()));
    }

    #[test]
    fn a_seed_above_what_toml_integers_hold_is_edited_as_digits() {
        let text = "name = \"x\"\nseed = 18446744073709551615 # u64::MAX\n[nic]\nseed = 1\n";
        let mut doc = parse_doc(text).unwrap();
        assert_eq!(doc["seed"], Value::String("18446744073709551615".into()));
        assert_eq!(doc["nic"]["seed"], Value::Integer(1));
        set(&mut doc, "seed", value("9223372036854775808")).unwrap();
        assert!(render(&doc).contains("seed = \"9223372036854775808\""));
        set(&mut doc, "seed", value("7")).unwrap();
        assert!(render(&doc).contains("seed = 7"));
    }

    #[test]
    fn dotted_paths_are_found_at_their_line_in_the_file() {
        let text = "seed = 1\n[nic]\nmax_retries = 3\n\n[[workload]]\nkind = \"single\"\nsize = \"1MiB\"\n\n[[workload]]\nkind = \"many\"\n  size = 4\n[[fault]]\nname = \"loss\"\np = 0.1\n[[fault]]\nname = \"dup\"\np = 0.2\n";
        assert_eq!(locate(text, "seed"), Some((1, 1)));
        assert_eq!(locate(text, "nic.max_retries"), Some((3, 1)));
        assert_eq!(locate(text, "workload.0.size"), Some((7, 1)));
        assert_eq!(locate(text, "workload.1.size"), Some((11, 3)));
        assert_eq!(locate(text, "fault.dup.p"), Some((17, 1)));
        assert_eq!(locate(text, "fault.1.p"), Some((17, 1)));
        // A key the file does not set yet: its table's header.
        assert_eq!(locate(text, "fault.loss.delay"), Some((12, 1)));
        assert_eq!(locate(text, "nic.mtu_payload"), Some((2, 1)));
        assert_eq!(locate(text, "topology.k"), None);
    }
}
