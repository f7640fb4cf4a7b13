//! Which keys each workload kind and each fault model takes. Every
//! `[[workload]]` table shares one schema, as every `[[fault]]` table
//! does, so serde alone would accept `window = 3` on a `single` workload
//! (or `bits = 2` on a loss fault) and ignore it; here a key that its
//! kind or model does not read is refused at its place in the file,
//! naming the kind and the keys it takes.

use crate::file::schema::ModelKind;
use crate::file::source::Locate;
use crate::{Scenario, ScenarioError};

pub use crate::file::keys::{keys_of, model_keys, model_needs, needs_of, Need, TARGETING};

/// Refuses the first key of a `[[workload]]` or `[[fault]]` table that its
/// kind or model does not read. (Keys no table of its sort has were
/// refused by the parser already.)
pub fn check(sc: &Scenario) -> Result<(), ScenarioError> {
    // The text parsed once already; a document that does not parse here
    // has nothing more to refuse.
    let Ok(doc) = toml::de::DeTable::parse(&sc.text) else {
        return Ok(());
    };
    for (i, w) in sc.file.workloads.iter().enumerate() {
        let takes = keys_of(w.kind);
        let name = w.kind.name();
        refuse_other(
            sc,
            &doc,
            "workload",
            i,
            |k| k == "kind" || takes.contains(&k),
            || {
                format!(
                "workload {i}: `{{key}}` does not apply to `kind = \"{name}\"`, which takes `{}`",
                takes.join("`, `")
            )
            },
        )?;
    }
    for (i, f) in sc.file.faults.iter().enumerate() {
        let takes = model_keys(f.model);
        let packets = f.model != ModelKind::RegistrationFailure;
        let name = f.model.name();
        refuse_other(
            sc,
            &doc,
            "fault",
            i,
            |k| {
                k == "name"
                    || k == "model"
                    || takes.contains(&k)
                    || (packets && TARGETING.contains(&k))
            },
            || {
                let also = if packets {
                    " and the targeting keys"
                } else {
                    ""
                };
                format!(
                    "fault {i}: `{{key}}` does not apply to `model = \"{name}\"`, which takes `{}`{also}",
                    takes.join("`, `")
                )
            },
        )?;
    }
    Ok(())
}

/// The `i`-th table of the array `array`: its first key that `takes`
/// refuses is an error (`message` with `{key}` replaced) at that key.
fn refuse_other(
    sc: &Scenario,
    doc: &toml::Spanned<toml::de::DeTable<'_>>,
    array: &str,
    i: usize,
    takes: impl Fn(&str) -> bool,
    message: impl Fn() -> String,
) -> Result<(), ScenarioError> {
    let table = doc
        .get_ref()
        .iter()
        .find(|(k, _)| k.get_ref() == array)
        .and_then(|(_, v)| match v.get_ref() {
            toml::de::DeValue::Array(a) => a.get(i),
            _ => None,
        })
        .and_then(|t| match t.get_ref() {
            toml::de::DeValue::Table(t) => Some(t),
            _ => None,
        });
    let Some(table) = table else {
        return Ok(());
    };
    // (The table's keys come sorted by name: the first in the file is
    // the one shown.)
    match table
        .iter()
        .filter(|(k, _)| !takes(k.get_ref()))
        .min_by_key(|(k, _)| k.span().start)
    {
        Some((k, _)) => {
            Err(sc.error_at_offset(k.span().start, message().replace("{key}", k.get_ref())))
        }
        None => Ok(()),
    }
}
