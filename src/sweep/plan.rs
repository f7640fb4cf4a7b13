//! What a sweep runs: the settings' cross product × seeds, in one
//! canonical order, and how that order is cut into shards.
//!
//! A run ("job") is a case (one value of every `--set` axis) and a seed.
//! Jobs are listed case-major (every seed of the first case, then the
//! next case), which is the CSV's order. Shard `I` of `N` runs the jobs
//! whose position in that list is `I` modulo `N`: dealt round robin, so
//! shards differ by at most one run in all and by at most one run of each
//! case (a study whose settings differ a hundredfold in cost, `topology.k
//! = 4, 8, 16`, does not put every large run in one shard), and a job's
//! shard depends only on the sweep and `N`, never on the machine or its
//! thread count. Changing the settings or the number of seeds deals anew.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Value;
use udrma_scenarios::file::edit::{render, set, value};
use udrma_scenarios::Scenario;

use super::{bad, case_error, read_doc};

/// One `--set KEY=V1,V2,...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// The dotted key (`fault.loss.p`).
    pub key: String,
    /// Its values, in the order given.
    pub values: Vec<String>,
}

/// The shape of a sweep: enough to list its jobs (a part file carries it,
/// so a merge needs no scenario file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// The settings, first axis outermost.
    pub axes: Vec<Axis>,
    /// Seeds per case.
    pub seeds: u32,
    /// The first seed (the file's `seed`, or 1).
    pub base_seed: u64,
}

/// One run: a case and a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Index of the case in [`Layout::cases`].
    pub case: usize,
    /// The seed (`base_seed + k`).
    pub seed: u64,
}

impl Layout {
    /// Parses `--set` arguments.
    pub fn new(sets: &[String], seeds: u32, base_seed: u64) -> anyhow::Result<Self> {
        let mut axes = Vec::new();
        for s in sets {
            let (k, vs) = s
                .split_once('=')
                .ok_or_else(|| bad(format!("--set {s:?}: expected KEY=V1,V2,...")))?;
            let values: Vec<String> = vs
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            if values.is_empty() {
                return Err(bad(format!("--set {s:?}: no values")));
            }
            axes.push(Axis {
                key: k.trim().to_string(),
                values,
            });
        }
        if axes.is_empty() {
            return Err(bad("a sweep needs at least one --set".into()));
        }
        Ok(Self {
            axes,
            seeds,
            base_seed,
        })
    }

    /// Number of cases (the product of the axes' lengths).
    pub fn case_count(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// Number of runs.
    pub fn job_count(&self) -> usize {
        self.case_count() * self.seeds as usize
    }

    /// The settings of case `c`: one `(key, value)` per axis.
    pub fn case(&self, c: usize) -> Vec<(String, String)> {
        let mut rest = c;
        let mut out = vec![(String::new(), String::new()); self.axes.len()];
        for (i, a) in self.axes.iter().enumerate().rev() {
            let n = a.values.len();
            out[i] = (a.key.clone(), a.values[rest % n].clone());
            rest /= n;
        }
        out
    }

    /// Every case, in order.
    pub fn cases(&self) -> Vec<Vec<(String, String)>> {
        (0..self.case_count()).map(|c| self.case(c)).collect()
    }

    /// Every job, case-major (the CSV's order).
    pub fn jobs(&self) -> Vec<Job> {
        (0..self.case_count())
            .flat_map(|case| {
                (0..self.seeds as u64).map(move |s| Job {
                    case,
                    seed: self.base_seed + s,
                })
            })
            .collect()
    }

    /// Where `job` sits in the case-major order, if it belongs here.
    pub fn position(&self, job: Job) -> Option<usize> {
        let s = job.seed.checked_sub(self.base_seed)?;
        (job.case < self.case_count() && s < u64::from(self.seeds))
            .then(|| job.case * self.seeds as usize + s as usize)
    }

    /// The shard (of `count`) that runs `job`, which must belong here.
    pub fn shard_of(&self, job: Job, count: u32) -> u32 {
        let at = self.position(job).expect("a job of this layout");
        (at % count as usize) as u32
    }

    /// The jobs of one shard, in case-major order.
    pub fn shard_jobs(&self, shard: Shard) -> Vec<Job> {
        self.jobs()
            .into_iter()
            .filter(|j| self.shard_of(*j, shard.count) == shard.index)
            .collect()
    }

    /// A job as people read it: `fault.loss.p=0.05 seed=3`.
    pub fn describe(&self, job: Job) -> String {
        let mut s: Vec<String> = self
            .case(job.case)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        s.push(format!("seed={}", job.seed));
        s.join(" ")
    }

    /// The `--set` and `--seeds` arguments that make this layout again.
    pub fn args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.axes {
            out.push("--set".into());
            out.push(format!("{}={}", a.key, a.values.join(",")));
        }
        out.push("--seeds".into());
        out.push(self.seeds.to_string());
        out
    }
}

/// One slice of a sweep: `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which slice, `0..count`.
    pub index: u32,
    /// How many slices.
    pub count: u32,
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N`, with `0 <= I < N`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected I/N (the I-th of N shards, from 0)"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: the shard index {i:?} is not a number"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: the shard count {n:?} is not a number"))?;
        Shard::new(index, count).map_err(|e| format!("{s:?}: {e}"))
    }
}

impl Shard {
    /// Checks `index < count` and `count >= 1`.
    pub fn new(index: u32, count: u32) -> Result<Self, String> {
        if count == 0 {
            return Err("the shard count must be at least 1".into());
        }
        if index >= count {
            return Err(format!(
                "shard index {index} is not below the count {count} (shards count from 0)"
            ));
        }
        Ok(Self { index, count })
    }

    /// The shard a batch system asks for, when it asks: a Slurm array task
    /// (`SLURM_ARRAY_TASK_ID` and `SLURM_ARRAY_TASK_COUNT`, counted from
    /// `SLURM_ARRAY_TASK_MIN` in steps of `SLURM_ARRAY_TASK_STEP`), or a
    /// Kubernetes Indexed Job (`JOB_COMPLETION_INDEX`, with the count given
    /// by `--shards`). Returns the shard and where it came from.
    pub fn from_env(
        get: impl Fn(&str) -> Option<String>,
        shards: Option<u32>,
    ) -> anyhow::Result<Option<(Shard, &'static str)>> {
        let num = |name: &str| -> anyhow::Result<Option<u64>> {
            match get(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| bad(format!("{name}={v:?} is not a number"))),
            }
        };
        if let (Some(id), Some(count)) =
            (num("SLURM_ARRAY_TASK_ID")?, num("SLURM_ARRAY_TASK_COUNT")?)
        {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let step = num("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
            // A list (`--array=1,5,9`) gives MIN 1, STEP 1, COUNT 3: only
            // MAX tells it from a range. Refuse it in every task, not just
            // in those whose index falls outside.
            if let Some(max) = num("SLURM_ARRAY_TASK_MAX")? {
                let span = count.saturating_sub(1).saturating_mul(step);
                if max.checked_sub(min) != Some(span) {
                    return Err(bad(format!(
                        "SLURM_ARRAY_TASK_MIN={min}, _MAX={max}, _STEP={step} and _COUNT={count} \
                         are not a plain range (a list such as --array=1,5,9): give the shard \
                         with --shard I/N"
                    )));
                }
            }
            let offset = id.checked_sub(min).ok_or_else(|| {
                bad(format!(
                    "SLURM_ARRAY_TASK_ID={id} is below SLURM_ARRAY_TASK_MIN={min}"
                ))
            })?;
            if offset % step != 0 {
                return Err(bad(format!(
                    "SLURM_ARRAY_TASK_ID={id} is not on the array's step {step} from {min}: \
                     give the shard with --shard I/N"
                )));
            }
            let count = u32::try_from(count)
                .map_err(|_| bad(format!("SLURM_ARRAY_TASK_COUNT={count} is too large")))?;
            if let Some(n) = shards.filter(|n| *n != count) {
                return Err(bad(format!(
                    "--shards {n} disagrees with SLURM_ARRAY_TASK_COUNT={count}"
                )));
            }
            let index = u32::try_from(offset / step).unwrap_or(u32::MAX);
            let shard = Shard::new(index, count).map_err(|e| {
                bad(format!(
                    "SLURM_ARRAY_TASK_ID={id} (from {min}, step {step}): {e}; \
                     the array must be a plain range"
                ))
            })?;
            return Ok(Some((shard, "SLURM_ARRAY_TASK_ID")));
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = shards.ok_or_else(|| {
                bad(
                    "JOB_COMPLETION_INDEX is set: give the number of shards with --shards N \
                     (the Job's completions)"
                        .into(),
                )
            })?;
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            let shard = Shard::new(index, count)
                .map_err(|e| bad(format!("JOB_COMPLETION_INDEX={index}: {e}")))?;
            return Ok(Some((shard, "JOB_COMPLETION_INDEX")));
        }
        if let Some(n) = shards {
            return Err(bad(format!(
                "--shards {n} needs JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) or a \
                 Slurm array task; elsewhere use --shard I/{n}"
            )));
        }
        Ok(None)
    }
}

/// A sweep of one scenario file: its layout, where it came from, and the
/// text of every case.
pub struct Plan {
    /// The file as the user named it.
    pub file: PathBuf,
    /// The scenario's `name`.
    pub name: String,
    /// SHA-256 of the file's bytes, hex.
    pub sha256: String,
    /// The settings and seeds.
    pub layout: Layout,
    /// The scenario text of each case.
    pub texts: Vec<String>,
}

impl Plan {
    /// Reads the file and checks every case before anything runs.
    pub fn new(file: &Path, sets: &[String], seeds: u32) -> anyhow::Result<Self> {
        let (original, doc) = read_doc(file)?;
        let base_seed = doc.get("seed").and_then(Value::as_integer).unwrap_or(1) as u64;
        let layout = Layout::new(sets, seeds, base_seed)?;
        let mut texts = Vec::with_capacity(layout.case_count());
        for assign in layout.cases() {
            let mut d = doc.clone();
            for (k, v) in &assign {
                set(&mut d, k, value(v)).map_err(|e| bad(format!("--set {e}")))?;
            }
            let text = render(&d);
            if Scenario::parse(&file.display().to_string(), &text).is_err() {
                return Err(case_error(file, &original, &doc, &assign));
            }
            texts.push(text);
        }
        Ok(Self {
            file: file.to_path_buf(),
            name: doc
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("sweep")
                .to_string(),
            sha256: sha256_hex(original.as_bytes()),
            layout,
            texts,
        })
    }
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(lens: &[usize], seeds: u32) -> Layout {
        Layout {
            axes: lens
                .iter()
                .enumerate()
                .map(|(i, n)| Axis {
                    key: format!("k{i}"),
                    values: (0..*n).map(|v| v.to_string()).collect(),
                })
                .collect(),
            seeds,
            base_seed: 7,
        }
    }

    #[test]
    fn cases_are_the_cross_product_first_axis_outermost() {
        let l = layout(&[2, 3], 1);
        let cases: Vec<String> = l
            .cases()
            .iter()
            .map(|c| c.iter().map(|(_, v)| v.as_str()).collect())
            .collect();
        assert_eq!(cases, ["00", "01", "02", "10", "11", "12"]);
        assert_eq!(l.describe(Job { case: 4, seed: 9 }), "k0=1 k1=1 seed=9");
        // Seeds 7 (the base) to 7; cases 0 to 5.
        assert_eq!(l.position(Job { case: 5, seed: 7 }), Some(5));
        for outside in [
            Job { case: 6, seed: 7 },
            Job { case: 0, seed: 8 },
            Job { case: 0, seed: 6 },
        ] {
            assert_eq!(l.position(outside), None, "{outside:?}");
        }
    }

    proptest! {
        /// Every job lands in exactly one shard, shards differ by at most
        /// one job, and the position round-trips.
        #[test]
        fn every_job_in_exactly_one_balanced_shard(
            lens in proptest::collection::vec(1usize..5, 1..4),
            seeds in 1u32..12,
            count in 1u32..40,
        ) {
            let l = layout(&lens, seeds);
            let mut seen = vec![0u32; l.job_count()];
            let mut sizes = Vec::new();
            for index in 0..count {
                let jobs = l.shard_jobs(Shard::new(index, count).unwrap());
                sizes.push(jobs.len());
                for j in jobs {
                    seen[l.position(j).unwrap()] += 1;
                }
            }
            prop_assert!(seen.iter().all(|n| *n == 1), "{seen:?}");
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(hi - lo <= 1, "{sizes:?}");
            for (p, j) in l.jobs().into_iter().enumerate() {
                prop_assert_eq!(l.position(j), Some(p));
            }
        }

        /// Each case's runs, too, are spread over the shards within one.
        #[test]
        fn every_case_spreads_over_the_shards(
            lens in proptest::collection::vec(1usize..5, 1..4),
            seeds in 1u32..12,
            count in 1u32..40,
        ) {
            let l = layout(&lens, seeds);
            for case in 0..l.case_count() {
                let mut per = vec![0usize; count as usize];
                for s in 0..seeds as u64 {
                    per[l.shard_of(Job { case, seed: 7 + s }, count) as usize] += 1;
                }
                let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
                prop_assert!(hi - lo <= 1, "case {case}: {per:?}");
            }
        }
    }

    #[test]
    fn a_shard_holds_every_case() {
        // Two cases (cheap and dear), 10 seeds, 4 shards: every shard runs
        // both, not one shard all of the dear case.
        let l = layout(&[2], 10);
        for index in 0..4 {
            let jobs = l.shard_jobs(Shard::new(index, 4).unwrap());
            for c in 0..2 {
                let n = jobs.iter().filter(|j| j.case == c).count();
                assert!((2..=3).contains(&n), "shard {index} case {c}: {n}");
            }
        }
    }

    #[test]
    fn shard_arguments_are_checked() {
        assert_eq!("2/5".parse::<Shard>(), Ok(Shard { index: 2, count: 5 }));
        for (arg, says) in [
            ("5/5", "not below the count 5"),
            ("1/0", "at least 1"),
            ("x/3", "index \"x\" is not a number"),
            ("3", "expected I/N"),
        ] {
            let e = arg.parse::<Shard>().unwrap_err();
            assert!(e.contains(says), "{arg}: {e}");
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn batch_systems_name_the_shard() {
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ]);
        let (s, from) = Shard::from_env(slurm, None).unwrap().unwrap();
        assert_eq!(
            (s, from),
            (Shard::new(3, 4).unwrap(), "SLURM_ARRAY_TASK_ID")
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2")]);
        let (s, _) = Shard::from_env(&k8s, Some(3)).unwrap().unwrap();
        assert_eq!(s, Shard::new(2, 3).unwrap());
        let e = Shard::from_env(&k8s, None).unwrap_err().to_string();
        assert!(e.contains("--shards N"), "{e}");
        let e = Shard::from_env(env(&[]), Some(3)).unwrap_err().to_string();
        assert!(e.contains("--shard I/3"), "{e}");
        assert!(Shard::from_env(env(&[]), None).unwrap().is_none());
        let four = env(&[
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert!(Shard::from_env(&four, Some(4)).unwrap().is_some());
        let e = Shard::from_env(&four, Some(3)).unwrap_err().to_string();
        assert!(
            e.contains("--shards 3 disagrees with SLURM_ARRAY_TASK_COUNT=4"),
            "{e}"
        );
        // `--array=1,5,9`: refused in its first task too.
        for id in ["1", "5", "9"] {
            let list = env(&[
                ("SLURM_ARRAY_TASK_ID", id),
                ("SLURM_ARRAY_TASK_COUNT", "3"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", "9"),
                ("SLURM_ARRAY_TASK_STEP", "1"),
            ]);
            let e = Shard::from_env(list, None).unwrap_err().to_string();
            assert!(e.contains("not a plain range"), "{e}");
        }
        // `--array=1-7:2`: a range with a step.
        let stepped = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_MAX", "7"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ]);
        let (s, _) = Shard::from_env(stepped, None).unwrap().unwrap();
        assert_eq!(s, Shard::new(2, 4).unwrap());
        let off = env(&[
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        let e = Shard::from_env(off, None).unwrap_err().to_string();
        assert!(e.contains("not below the count 4"), "{e}");
    }
}
