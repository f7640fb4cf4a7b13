//! A rule set: rules in install order, the first verdict other than
//! `Pass` wins.

use crate::rule::{closest, FaultError, PacketCtx, Rule, Verdict};

/// Rules in install order.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RuleSet {
    rules: Vec<Rule>,
}

impl RuleSet {
    /// No rules: every packet passes.
    pub fn new() -> RuleSet {
        RuleSet::default()
    }

    /// Installs a rule after the existing ones.
    pub fn push(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// The rules, in install order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Resolves link names to indices with `lookup`; an unknown name is an
    /// error that suggests the closest of `all_names`.
    pub fn resolve(
        &mut self,
        lookup: impl Fn(&str) -> Option<u32>,
        all_names: &[&str],
    ) -> Result<(), FaultError> {
        for rule in &mut self.rules {
            let mut ids = Vec::with_capacity(rule.target.links.len());
            for name in &rule.target.links {
                match lookup(name) {
                    Some(id) => ids.push(id),
                    None => {
                        return Err(FaultError::UnknownLink {
                            rule: rule.name.clone(),
                            link: name.clone(),
                            suggestion: closest(name, all_names),
                            known: all_names.iter().take(6).map(|n| n.to_string()).collect(),
                            total: all_names.len(),
                        })
                    }
                }
            }
            rule.target.link_ids = ids;
        }
        Ok(())
    }

    /// Applies the rules in order; the first verdict other than `Pass`
    /// wins. Returns it with the index of the rule that gave it.
    pub fn judge(&mut self, p: &PacketCtx) -> (Verdict, Option<usize>) {
        for (i, rule) in self.rules.iter_mut().enumerate() {
            let v = rule.judge(p);
            if v != Verdict::Pass {
                return (v, Some(i));
            }
        }
        (Verdict::Pass, None)
    }

    /// Flips bits with rule `i`'s stream (after it returned `Corrupt`).
    pub fn corrupt(&mut self, i: usize, bytes: &mut [u8], bits: u32) {
        if let Some(rule) = self.rules.get_mut(i) {
            rule.corrupt(bytes, bits);
        }
    }

    /// [`RuleSet::judge`] with every rule that draws by packet drawing
    /// from `key` ([`Rule::judge_keyed`]).
    pub fn judge_keyed(&mut self, p: &PacketCtx, key: u64) -> (Verdict, Option<usize>) {
        for (i, rule) in self.rules.iter_mut().enumerate() {
            let v = rule.judge_keyed(p, key);
            if v != Verdict::Pass {
                return (v, Some(i));
            }
        }
        (Verdict::Pass, None)
    }

    /// [`RuleSet::corrupt`] after [`RuleSet::judge_keyed`] with `key`.
    pub fn corrupt_keyed(&mut self, i: usize, key: u64, bytes: &mut [u8], bits: u32) {
        if let Some(rule) = self.rules.get_mut(i) {
            rule.corrupt_keyed(key, bytes, bits);
        }
    }
}
