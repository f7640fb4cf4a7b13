//! From scenario text to a validated scenario: [`Scenario::parse`] reads
//! the text ([`crate::file::source`]) and runs the one validation pass
//! ([`crate::plan::validate`]), which resolves it ([`Resolved`]).

use crate::plan::resolved::Resolved;
use crate::{Scenario, ScenarioError};

impl Scenario {
    /// Parses and validates scenario text. `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let sc = Scenario::parse_unchecked(path, text)?;
        sc.resolve()?;
        Ok(sc)
    }

    /// Validates this scenario and returns what it resolves to for its
    /// own seed: its profile, topology, NIC configuration and what the
    /// simulated world is built from, each built once.
    pub fn resolve(&self) -> Result<Resolved, ScenarioError> {
        crate::plan::validate::validate(self)
    }
}
