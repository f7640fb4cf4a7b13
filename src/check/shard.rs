//! One search across machines: `udrma check --shard I/N` searches the
//! schedules whose first fault falls on a packet of the fault-free run
//! with position `i mod N = I`, and writes what it found as a shard file;
//! `udrma check FILE --merge SHARDS...` adds the shards up into the
//! result one process gives (the same counts per number of faults and
//! the same smallest counterexample), and writes that counterexample.
//!
//! Every schedule descends from exactly one first fault, so the shards
//! split the search and its counts. One process stops after the first
//! number of faults at which a schedule fails; a shard stops at its own,
//! so the merge keeps every shard's counts up to the smallest such number
//! (each shard ran all of its schedules that small). The counterexample
//! is the first failing schedule in the search's order, which orders
//! schedules of one size by their faults' positions and kinds, fault by
//! fault; the merge takes the least of the shards' and runs it again
//! from its path (`enumerate::rebuild`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::enumerate::{self, Bound, Level, Search};
use super::schedule::{Base, Kind, Outcome};
use crate::sweep::plan::Shard;
use crate::BadInput;

/// The shard file's format; a merge refuses another.
const FORMAT: u32 = 1;

/// What one shard found, as written to its file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardFile {
    /// [`FORMAT`].
    pub format: u32,
    /// The udrma that searched it.
    pub udrma_version: String,
    /// The scenario file as given.
    pub file: String,
    /// The SHA-256 of its bytes.
    pub scenario_sha256: String,
    /// The seed of every run.
    pub seed: u64,
    /// The fault-free run's trace hash: a merge on another build (or an
    /// engine that behaves otherwise) sees another and refuses.
    pub zero_trace: String,
    /// Whether `--seed` was given (the counterexample's command says so).
    pub seed_given: bool,
    /// Most faults in a schedule.
    pub faults: usize,
    /// The fault kinds, in search order.
    pub kinds: Vec<String>,
    /// How long `delay` holds a packet, in nanoseconds.
    pub delay_ns: u64,
    /// Whether `--delay` was given.
    pub delay_given: bool,
    /// `--merge-states`: the shard merged the states it saw (files of
    /// earlier builds, which had no merging across shards, read as no).
    #[serde(default)]
    pub merge_states: bool,
    /// With `--merge-states`: runs cut at a state an earlier run had
    /// reached, and the states recorded.
    #[serde(default)]
    pub merged: Option<(u64, usize)>,
    /// This shard's index, from 0.
    pub index: u32,
    /// How many shards.
    pub count: u32,
    /// Per number of faults, this shard's counts (index 0: the fault-free
    /// run, which every shard runs).
    pub levels: Vec<Level>,
    /// The shard's first failing schedule at its smallest number of
    /// faults, as (position in the parent's run, kind) per fault.
    pub first: Option<Vec<(usize, String)>>,
    /// Stopped by an interrupt before its share was covered.
    pub interrupted: bool,
    /// Wall-clock seconds the shard's search took.
    pub wall_s: f64,
}

/// How the search was asked for, beside its bound: what a shard file
/// records so that the merge writes the same counterexample.
pub struct Asked<'a> {
    /// The scenario file as given.
    pub file: &'a Path,
    /// Its bytes' SHA-256.
    pub sha256: String,
    /// The seed.
    pub seed: u64,
    /// The fault-free run's trace hash.
    pub zero_trace: String,
    /// Whether `--seed` was given.
    pub seed_given: bool,
    /// Whether `--delay` was given.
    pub delay_given: bool,
}

/// The shard file's path for shard `s` of scenario `name` in `dir`.
pub fn path(dir: &Path, name: &str, s: Shard) -> PathBuf {
    dir.join(format!(
        "{name}-check-shard-{}-of-{}.json",
        s.index, s.count
    ))
}

/// What a shard's search comes to, ready to write.
pub fn record(asked: &Asked, bound: &Bound, s: Shard, found: &Search, wall_s: f64) -> ShardFile {
    ShardFile {
        format: FORMAT,
        udrma_version: env!("CARGO_PKG_VERSION").into(),
        file: asked.file.display().to_string(),
        scenario_sha256: asked.sha256.clone(),
        seed: asked.seed,
        zero_trace: asked.zero_trace.clone(),
        seed_given: asked.seed_given,
        faults: bound.faults,
        kinds: bound.kinds.iter().map(|k| k.name().to_string()).collect(),
        delay_ns: bound.delay_ns,
        delay_given: asked.delay_given,
        merge_states: bound.merge_states,
        merged: found.states.as_ref().map(|m| (m.met, m.recorded())),
        index: s.index,
        count: s.count,
        levels: found.levels.clone(),
        first: found.first.as_ref().map(|(schedule, _)| {
            schedule
                .iter()
                .map(|f| (f.pos, f.kind.name().to_string()))
                .collect()
        }),
        interrupted: found.interrupted,
        wall_s,
    }
}

/// Writes `f` as JSON to `to`.
pub fn write(f: &ShardFile, to: &Path) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(f)?;
    std::fs::write(to, text + "\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", to.display()))
}

/// Reads shard files, refusing anything that is not one search's whole
/// set of shards: files that do not parse, another format, another
/// scenario (by its bytes), seed, bound or shard count, a shard missing,
/// given twice, or interrupted.
pub fn read_all(paths: &[PathBuf]) -> Result<Vec<ShardFile>, BadInput> {
    let mut shards: Vec<(PathBuf, ShardFile)> = Vec::new();
    for p in paths {
        let text = std::fs::read_to_string(p)
            .map_err(|e| BadInput(format!("{}: cannot read: {e}", p.display())))?;
        let f: ShardFile = serde_json::from_str(&text).map_err(|e| {
            BadInput(format!(
                "{}: not a shard file of udrma check --shard: {e}",
                p.display()
            ))
        })?;
        if f.format != FORMAT {
            return Err(BadInput(format!(
                "{}: shard file format {} (this udrma reads {FORMAT})",
                p.display(),
                f.format
            )));
        }
        if let Err(why) = f.consistent() {
            return Err(BadInput(format!("{}: {why}", p.display())));
        }
        if f.interrupted {
            return Err(BadInput(format!(
                "{}: shard {}/{} was interrupted before its share was searched: run it again",
                p.display(),
                f.index,
                f.count
            )));
        }
        if let Some((q, g)) = shards.first() {
            let differ = differences(g, &f);
            if !differ.is_empty() {
                return Err(BadInput(format!(
                    "{} and {} are shards of different searches: their {} differ",
                    q.display(),
                    p.display(),
                    differ.join(", ")
                )));
            }
        }
        if let Some((q, _)) = shards.iter().find(|(_, g)| g.index == f.index) {
            return Err(BadInput(format!(
                "{} and {} are both shard {}/{}",
                q.display(),
                p.display(),
                f.index,
                f.count
            )));
        }
        shards.push((p.clone(), f));
    }
    let Some(count) = shards.first().map(|(_, f)| f.count) else {
        return Err(BadInput("--merge: no shard files given".into()));
    };
    let missing: Vec<String> = (0..count)
        .filter(|i| !shards.iter().any(|(_, f)| f.index == *i))
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(BadInput(format!(
            "--merge: {} of {count} shards given; missing: {} (shard I of N writes NAME-check-shard-I-of-N.json in its --out)",
            shards.len(),
            missing.join(", "),
        )));
    }
    let mut out: Vec<ShardFile> = shards.into_iter().map(|(_, f)| f).collect();
    out.sort_by_key(|f| f.index);
    Ok(out)
}

impl ShardFile {
    /// What one file must hold to be a shard of a search this udrma could
    /// have run: a shard index below a count of at least one, at most 8
    /// faults of known kinds (sorted, each once), a first failing schedule
    /// no longer than the bound, and one level of counts per number of
    /// faults searched (to the bound, or to the first failing one).
    fn consistent(&self) -> Result<(), String> {
        if self.count == 0 || self.index >= self.count {
            return Err(format!(
                "shard {}/{}: not a shard of that many",
                self.index, self.count
            ));
        }
        if self.faults > 8 {
            return Err(format!(
                "{} faults: udrma check searches 0 to 8",
                self.faults
            ));
        }
        let kinds = self
            .kinds
            .iter()
            .map(|k| kind(k).map_err(|e| e.0))
            .collect::<Result<Vec<_>, _>>()?;
        if kinds.is_empty() || kinds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "fault kinds {:?}: not a search's (sorted, each once)",
                self.kinds
            ));
        }
        let deepest = match &self.first {
            Some(p) if p.len() > self.faults => {
                return Err(format!(
                    "a first failing schedule of {} faults, beyond its bound of {}",
                    p.len(),
                    self.faults
                ))
            }
            Some(p) => p.len(),
            None => self.faults,
        };
        if self.levels.is_empty() || (!self.interrupted && self.levels.len() != deepest + 1) {
            return Err(format!(
                "{} levels of counts, where its search has {}",
                self.levels.len(),
                deepest + 1
            ));
        }
        Ok(())
    }
}

/// What makes shards `a` and `b` two searches, by name: the fields of
/// their search that differ (none: one search).
fn differences(a: &ShardFile, b: &ShardFile) -> Vec<&'static str> {
    [
        ("scenario bytes", a.scenario_sha256 == b.scenario_sha256),
        ("seeds", a.seed == b.seed),
        ("fault-free runs (trace hash)", a.zero_trace == b.zero_trace),
        ("--faults", a.faults == b.faults),
        ("--kinds", a.kinds == b.kinds),
        ("--delay", a.delay_ns == b.delay_ns),
        ("--merge-states", a.merge_states == b.merge_states),
        ("shard counts (N of I/N)", a.count == b.count),
        ("fault-free counts", a.levels.first() == b.levels.first()),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(what, _)| what)
    .collect()
}

/// For `--merge`: reads the shard files (`read_all`), checks that `FILE`
/// is the scenario they searched (by `sha256`, its bytes'), and takes
/// their bound and seed into `args`, so that the rest of the command runs
/// as the search did.
pub fn adopt(args: &mut super::CheckArgs, sha256: &str) -> Result<Vec<ShardFile>, BadInput> {
    let shards = read_all(&args.merge)?;
    let f = &shards[0];
    if f.scenario_sha256 != sha256 {
        return Err(BadInput(format!(
            "{}: not the scenario the shards searched ({}: its bytes differ)",
            args.file.display(),
            f.file
        )));
    }
    args.faults = u32::try_from(f.faults).unwrap_or(u32::MAX);
    args.kinds = f.kinds.iter().map(|k| kind(k)).collect::<Result<_, _>>()?;
    args.delay = Some(udrma_proto::Duration::from_nanos(f.delay_ns));
    args.seed = Some(f.seed);
    args.merge_states = f.merge_states;
    args.max_schedules = u64::MAX;
    Ok(shards)
}

/// A fault's kind by its name in a shard file.
pub fn kind(name: &str) -> Result<Kind, BadInput> {
    [
        Kind::Drop,
        Kind::Duplicate,
        Kind::Delay,
        Kind::Corrupt,
        Kind::Reorder,
    ]
    .into_iter()
    .find(|k| k.name() == name)
    .ok_or_else(|| BadInput(format!("shard file: unknown fault kind {name:?}")))
}

/// The search one process would have reported, from all its shards (as
/// `read_all` returns them): counts up to the smallest number of faults
/// any shard found failing, and the least failing schedule of that size,
/// run again.
pub fn merge(
    shards: &[ShardFile],
    base: &Base,
    zero: &Outcome,
    bound: &Bound,
) -> Result<Search, String> {
    let smallest = shards
        .iter()
        .filter_map(|f| f.first.as_ref().map(Vec::len))
        .min();
    let depth = smallest.unwrap_or(bound.faults);
    let mut levels: Vec<Level> = Vec::new();
    for d in 0..=depth {
        let mut sum = Level::default();
        let mut any = false;
        for f in shards {
            let Some(l) = f.levels.get(d) else { continue };
            any = true;
            if d == 0 {
                // Every shard ran the fault-free run: count it once.
                sum = l.clone();
                break;
            }
            sum.ran = sum.ran.saturating_add(l.ran);
            sum.violations = sum.violations.saturating_add(l.violations);
            sum.same_rule = sum.same_rule.saturating_add(l.same_rule);
            sum.not_applicable = sum.not_applicable.saturating_add(l.not_applicable);
            sum.cut = sum.cut.saturating_add(l.cut);
        }
        if any {
            levels.push(sum);
        }
    }
    let mut paths: Vec<Vec<(usize, Kind)>> = Vec::new();
    for f in shards {
        if let Some(first) = f.first.as_ref().filter(|p| Some(p.len()) == smallest) {
            let path = first
                .iter()
                .map(|(pos, k)| kind(k).map(|k| (*pos, k)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.0)?;
            paths.push(path);
        }
    }
    let first = match paths.into_iter().min() {
        Some(path) => {
            let (schedule, outcome) = enumerate::rebuild(base, zero, bound, &path)?;
            if outcome.failing().is_empty() {
                return Err(format!(
                    "the shards' smallest counterexample ({} faults) passes when run here: the shards ran another build",
                    path.len()
                ));
            }
            Some((schedule, outcome))
        }
        None => None,
    };
    // Each shard merged only the states it saw: the tally adds theirs.
    let states = bound.merge_states.then(|| {
        let (met, recorded) = shards
            .iter()
            .filter_map(|f| f.merged)
            .fold((0u64, 0usize), |(m, r), (fm, fr)| {
                (m.saturating_add(fm), r.saturating_add(fr))
            });
        super::merge::States::tallied(bound.kinds.contains(&Kind::Corrupt), met, recorded)
    });
    Ok(Search {
        levels,
        first,
        interrupted: false,
        futures: None,
        states,
    })
}

/// The shard files' search time, summed (each shard's own wall clock).
pub fn wall_s(shards: &[ShardFile]) -> f64 {
    shards.iter().map(|f| f.wall_s).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(index: u32, count: u32) -> ShardFile {
        ShardFile {
            format: FORMAT,
            udrma_version: "0".into(),
            file: "f.toml".into(),
            scenario_sha256: "ab".into(),
            seed: 1,
            zero_trace: "cd".into(),
            seed_given: false,
            faults: 2,
            kinds: vec!["drop".into(), "delay".into()],
            delay_ns: 1000,
            delay_given: false,
            merge_states: false,
            merged: None,
            index,
            count,
            levels: vec![Level::default(); 3],
            first: None,
            interrupted: false,
            wall_s: 0.0,
        }
    }

    /// A file that no search of this udrma could have written is refused,
    /// saying what is wrong with it.
    #[test]
    fn a_shard_file_must_be_one_a_search_could_write() {
        assert_eq!(shard(1, 2).consistent(), Ok(()));
        let bad = |f: ShardFile| f.consistent().unwrap_err();
        assert!(bad(shard(2, 2)).contains("not a shard of that many"));
        assert!(bad(shard(0, 0)).contains("not a shard of that many"));
        let mut f = shard(0, 2);
        f.faults = 9;
        assert!(bad(f).contains("0 to 8"));
        let mut f = shard(0, 2);
        f.kinds = vec!["delay".into(), "drop".into(), "drop".into()];
        assert!(bad(f).contains("sorted, each once"));
        let mut f = shard(0, 2);
        f.kinds = vec!["melt".into()];
        assert!(bad(f).contains("unknown fault kind"));
        let mut f = shard(0, 2);
        f.first = Some(vec![(0, "drop".into()); 3]);
        assert!(bad(f).contains("beyond its bound"));
        let mut f = shard(0, 2);
        f.levels.pop();
        assert!(bad(f).contains("2 levels of counts, where its search has 3"));
        // A shard that failed at one fault stopped there.
        let mut f = shard(0, 2);
        f.first = Some(vec![(4, "drop".into())]);
        f.levels.truncate(2);
        assert_eq!(f.consistent(), Ok(()));
    }

    /// Each field that makes two searches is named when it differs, and
    /// only then.
    #[test]
    fn the_merge_names_what_makes_two_searches() {
        let a = shard(0, 2);
        assert!(differences(&a, &shard(1, 2)).is_empty());
        type Change = fn(&mut ShardFile);
        let cases: [(&str, Change); 9] = [
            ("scenario bytes", |f| f.scenario_sha256 = "ef".into()),
            ("seeds", |f| f.seed = 2),
            ("fault-free runs (trace hash)", |f| {
                f.zero_trace = "ee".into()
            }),
            ("--faults", |f| f.faults = 3),
            ("--kinds", |f| f.kinds = vec!["drop".into()]),
            ("--delay", |f| f.delay_ns = 7),
            ("--merge-states", |f| f.merge_states = true),
            ("shard counts (N of I/N)", |f| f.count = 3),
            ("fault-free counts", |f| f.levels[0].ran = 1),
        ];
        for (what, change) in cases {
            let mut b = shard(1, 2);
            change(&mut b);
            assert_eq!(differences(&a, &b), vec![what]);
        }
    }

    /// Shards of which some merged states and some did not are two
    /// searches; a file of a build before merging shards reads as one
    /// that did not merge.
    #[test]
    fn shards_that_merged_states_and_shards_that_did_not_are_not_one_search() {
        let dir = std::env::temp_dir().join(format!("udrma-shard-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut merging = shard(1, 2);
        merging.merge_states = true;
        merging.merged = Some((3, 40));
        let files = [(shard(0, 2), "a.json"), (merging, "b.json")];
        let paths: Vec<PathBuf> = files
            .iter()
            .map(|(f, name)| {
                let p = dir.join(name);
                write(f, &p).unwrap();
                p
            })
            .collect();
        let e = read_all(&paths).unwrap_err().0;
        assert!(e.contains("--merge-states"), "{e}");
        let mut old = serde_json::to_value(shard(0, 2)).unwrap();
        let map = old.as_object_mut().unwrap();
        map.remove("merge_states");
        map.remove("merged");
        let read: ShardFile = serde_json::from_value(old).unwrap();
        assert!(!read.merge_states && read.merged.is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
