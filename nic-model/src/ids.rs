//! Identifiers shared by the modules that hold memory and the ones that
//! name it: below both, so that neither imports the other for a name.

/// A memory region key (lkey = rkey).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MrKey(pub u32);
