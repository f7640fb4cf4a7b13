//! `udrma reproduce`: the published results udrma models, rerun from the
//! shipped scenario files (built into the binary), ours beside the
//! published figure with the ratio, and whether each trend holds within
//! the tolerance its entry states.
//!
//! Each source is one function returning a [`Section`]: rows of
//! comparisons plus, where the result is a curve, the curve itself. The
//! Markdown rendering is `docs/reproduce.md` (a test keeps it current).
//!
//! Children:
//! - `classic`: MyVIA's pingpong and bandwidth
//! - `collectives`: The NIC-offloaded reduction work
//! - `fit`: coordinate search and the error measure, for the
//!   cross-validation of fitted profiles
//! - `irn`: IRN against RoCE, with and without PFC
//! - `mpi`: MPI's collective algorithms over the engine: α-β-γ costs,
//!   crossovers beside MPICH's choice, a ring allreduce's bus bandwidth
//! - `study`: The non-contiguous study: the comparison, its rows and plots
//! - `study_cv`: its profile's cross-validation
//! - `study_table`: the study's published table, and our latency at any
//!   of its points

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use udrma_scenarios::file::edit::{render, set, value};
use udrma_scenarios::{run, Report, RunOptions, Scenario};

mod classic;
mod collectives;
mod fit;
mod irn;
mod mpi;
mod study;
mod study_cv;
mod study_table;

/// One comparison.
#[derive(Debug, Clone)]
pub struct Row {
    /// What is compared.
    pub what: String,
    /// The published figure (or claim).
    pub published: String,
    /// Ours.
    pub ours: String,
    /// Ours over published, where both are numbers.
    pub ratio: Option<f64>,
    /// What "holds" means for this row.
    pub tolerance: String,
    /// Whether it holds.
    pub holds: bool,
}

/// One published source and what we got.
#[derive(Debug, Clone)]
pub struct Section {
    /// Source name.
    pub title: String,
    /// The scenario file(s) it ran.
    pub files: String,
    /// What the source says and how we reproduce it.
    pub intro: String,
    /// The comparisons.
    pub rows: Vec<Row>,
    /// Extra Markdown (curves, per-point tables).
    pub extra: String,
    /// SVG drawings to write: (file name, contents).
    pub plots: Vec<(String, String)>,
    /// Rows known not to hold, by their `what`, with why: the section
    /// still holds while they miss, and stops holding if one of them
    /// starts to hold (its note would then be wrong).
    pub known: Vec<(String, String)>,
}

impl Section {
    /// Whether every row holds, or misses as its known note says.
    pub fn holds(&self) -> bool {
        self.rows
            .iter()
            .all(|r| r.holds != self.known_miss(r).is_some())
    }

    /// Why row `r` is known not to hold, if it is.
    pub fn known_miss(&self, r: &Row) -> Option<&str> {
        self.known
            .iter()
            .find(|(what, _)| *what == r.what)
            .map(|(_, why)| why.as_str())
    }
}

/// A shipped scenario file's text, with dotted-path settings applied.
pub(crate) fn scenario(
    name: &str,
    text: &str,
    sets: &[(&str, String)],
) -> anyhow::Result<Scenario> {
    let mut doc: toml::Table = text
        .parse()
        .with_context(|| format!("{name} does not parse"))?;
    for (k, v) in sets {
        set(&mut doc, k, value(v)).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    }
    Scenario::parse(name, &render(&doc)).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs a scenario in the simulator; a failed check is an error (a
/// reproduction stands only on a correct run).
pub(crate) fn simulate(sc: &Scenario) -> anyhow::Result<Report> {
    let r = run(sc, RunOptions::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !r.passed() {
        anyhow::bail!(
            "{}: a check failed ({:?}): {}",
            sc.file.name,
            r.checks
                .iter()
                .filter(|(_, v)| !**v)
                .map(|(k, _)| k)
                .collect::<Vec<_>>(),
            r.notes.join("; ")
        );
    }
    Ok(r)
}

/// How a section is made.
type Make = fn() -> anyhow::Result<Section>;

/// Every section's short name and how it is made, in the order the docs
/// list them.
const SECTIONS: [(&str, Make); 7] = [
    ("MyVIA", classic::myvia),
    ("MVICH", classic::mvich),
    ("segmentation", classic::segmentation),
    ("non-contiguous study", study::noncontig),
    ("NIC-offloaded reduction", collectives::tianhe),
    ("IRN", irn::irn),
    ("MPI collectives", mpi::mpi),
];

/// Every section, in the order the docs list them, each handed to
/// `done` as soon as it is made (so its table can be printed then, not
/// at the end); `starting` hears the short name of each before it runs.
pub fn reproduce(
    starting: impl FnMut(&str),
    done: impl FnMut(&Section) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Section>> {
    made_in_order(&SECTIONS, starting, done)
}

/// [`reproduce`] over the sections `list` makes.
fn made_in_order(
    list: &[(&str, Make)],
    mut starting: impl FnMut(&str),
    mut done: impl FnMut(&Section) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Section>> {
    let mut sections = Vec::with_capacity(list.len());
    for &(name, make) in list {
        starting(name);
        let sec = make()?;
        done(&sec)?;
        sections.push(sec);
    }
    Ok(sections)
}

/// The terminal table.
pub fn table(sections: &[Section]) -> String {
    let mut s = String::new();
    for sec in sections {
        let _ = writeln!(
            s,
            "{}  [{}]",
            sec.title,
            if sec.holds() {
                "holds"
            } else {
                "DOES NOT HOLD"
            }
        );
        for r in &sec.rows {
            let ratio = r.ratio.map_or("-".to_string(), |x| format!("{x:.2}"));
            let _ = writeln!(
                s,
                "  {:<4} {:<58} published {:>14}  ours {:>14}  ratio {:>5}  ({})",
                match (r.holds, sec.known_miss(r).is_some()) {
                    (true, false) => "ok",
                    (false, true) => "known",
                    (true, true) => "HOLDS NOW",
                    (false, false) => "FAIL",
                },
                r.what,
                r.published,
                r.ours,
                ratio,
                r.tolerance
            );
            if let (false, Some(why)) = (r.holds, sec.known_miss(r)) {
                let _ = writeln!(s, "         why: {why}");
            }
        }
    }
    s
}

/// The Markdown document (`docs/reproduce.md`).
pub fn markdown(sections: &[Section]) -> String {
    let mut s = String::from(
        "# Reproducing the published results\n\n\
         Generated by `udrma reproduce --markdown docs/reproduce.md` (do not edit by hand;\n\
         `cargo test` fails when this file is out of date). Each section reruns the\n\
         shipped scenario files named under it in the simulator and sets our figure\n\
         beside the published one. *Ratio* is ours over published; a row *holds* when\n\
         it is within the tolerance it states, and the command exits 1 if any row does\n\
         not. Sources: [sources.md](sources.md).\n\n",
    );
    for sec in sections {
        let _ = writeln!(s, "## {}\n", sec.title);
        let _ = writeln!(s, "{}\n", sec.intro);
        let _ = writeln!(s, "Scenario files: {}.\n", sec.files);
        let _ = writeln!(s, "| what | published | ours | ratio | tolerance | holds |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for r in &sec.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                r.what,
                r.published,
                r.ours,
                r.ratio.map_or("-".to_string(), |x| format!("{x:.2}")),
                r.tolerance,
                match (r.holds, sec.known_miss(r).is_some()) {
                    (true, false) => "yes",
                    (false, true) => "no (known, below)",
                    (true, true) => "**yes, though noted as a miss**",
                    (false, false) => "**no**",
                }
            );
        }
        if !sec.known.is_empty() {
            let _ = writeln!(s, "\nKnown misses:\n");
            // Rows that miss for one reason share its line.
            let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
            for (what, why) in &sec.known {
                match reasons.iter_mut().find(|(w, _)| w == why) {
                    Some((_, rows)) => rows.push(what),
                    None => reasons.push((why, vec![what])),
                }
            }
            for (why, rows) in reasons {
                let rows: Vec<String> = rows.iter().map(|r| format!("*{r}*")).collect();
                let _ = writeln!(s, "- {}: {why}", rows.join("; "));
            }
        }
        if !sec.extra.is_empty() {
            let _ = writeln!(s, "\n{}", sec.extra.trim_end());
        }
        for (name, _) in &sec.plots {
            let _ = writeln!(s, "\n![{name}](img/{name})");
        }
        s.push('\n');
    }
    s
}

/// Runs everything, printing each section's table as it is done (with
/// a bar across the sections on stderr, on a terminal), then writes the
/// Markdown and plots when asked; `Ok(true)` when every row holds.
pub fn main(markdown_to: Option<&Path>, plots_to: Option<&Path>) -> anyhow::Result<bool> {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(SECTIONS.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("[{elapsed_precise}] {bar:20} {pos}/{len} sections: {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let sections = reproduce(
        |name| bar.set_message(name.to_string()),
        |sec| {
            bar.suspend(|| -> anyhow::Result<()> {
                let mut out = std::io::stdout().lock();
                write!(out, "{}", table(std::slice::from_ref(sec)))?;
                out.flush()?;
                Ok(())
            })?;
            bar.inc(1);
            Ok(())
        },
    );
    bar.finish_and_clear();
    let sections = sections?;
    if let Some(p) = markdown_to {
        std::fs::write(p, markdown(&sections))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(dir) = plots_to {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for sec in &sections {
            for (name, svg) in &sec.plots {
                let p = dir.join(name);
                std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
            }
        }
    }
    Ok(sections.iter().all(Section::holds))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each section is handed over as soon as it is made, before the
    /// next one runs, in the docs' order; the first failure ends it.
    #[test]
    fn each_section_is_handed_over_before_the_next_runs() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static MADE: AtomicUsize = AtomicUsize::new(0);
        fn make(title: &str) -> anyhow::Result<Section> {
            MADE.fetch_add(1, Ordering::SeqCst);
            if title == "bad" {
                anyhow::bail!("no");
            }
            Ok(Section {
                title: title.into(),
                files: String::new(),
                intro: String::new(),
                rows: vec![row("a", true)],
                extra: String::new(),
                plots: Vec::new(),
                known: Vec::new(),
            })
        }
        let list: [(&str, Make); 3] = [
            ("one", || make("one")),
            ("two", || make("two")),
            ("bad", || make("bad")),
        ];
        let heard = std::cell::RefCell::new(Vec::new());
        let r = made_in_order(
            &list,
            |name| heard.borrow_mut().push(format!("start {name}")),
            |sec| {
                let n = MADE.load(Ordering::SeqCst);
                heard.borrow_mut().push(format!("{} after {n}", sec.title));
                Ok(())
            },
        );
        assert!(r.is_err());
        assert_eq!(
            heard.into_inner(),
            [
                "start one",
                "one after 1",
                "start two",
                "two after 2",
                "start bad"
            ]
        );
        // What is printed as sections finish is the whole table.
        let (a, b) = (make("one").unwrap(), make("two").unwrap());
        let streamed = table(std::slice::from_ref(&a)) + &table(std::slice::from_ref(&b));
        assert_eq!(streamed, table(&[a, b]));
    }

    fn row(what: &str, holds: bool) -> Row {
        Row {
            what: what.into(),
            published: String::new(),
            ours: String::new(),
            ratio: None,
            tolerance: String::new(),
            holds,
        }
    }

    /// A known miss keeps its section holding only while it misses: a
    /// miss not noted fails the section, and so does a noted miss that
    /// holds now (its note would be wrong). The Markdown says which.
    #[test]
    fn a_known_miss_holds_the_section_only_while_it_misses() {
        let section = |rows: Vec<Row>| Section {
            title: "t".into(),
            files: String::new(),
            intro: String::new(),
            rows,
            extra: String::new(),
            plots: Vec::new(),
            known: vec![("b".into(), "why".into())],
        };
        let ok = section(vec![row("a", true), row("b", false)]);
        assert!(ok.holds());
        assert!(markdown(std::slice::from_ref(&ok)).contains("| no (known, below) |\n"));
        assert!(markdown(&[ok]).contains("- *b*: why"));
        assert!(!section(vec![row("a", false), row("b", false)]).holds());
        let now = section(vec![row("a", true), row("b", true)]);
        assert!(!now.holds());
        assert!(table(&[now]).contains("HOLDS NOW"));
    }
}
