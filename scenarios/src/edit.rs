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
                    Err(_) => items
                        .iter_mut()
                        .find(|t| t.get("name").and_then(Value::as_str) == Some(*sel))
                        .ok_or_else(|| format!("{path}: no `{key}` named {sel:?}"))?,
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
        assert_eq!(value("true"), Value::Boolean(true));
        assert_eq!(value("h3"), Value::String("h3".into()));
    }
}
