//! Files `udrma run` writes as it runs (a capture, a trace, a timeline):
//! each regular file is written beside its path under a temporary name,
//! and only when the run was accepted and ended does the CLI move them
//! all onto their paths ([`commit`]); a run refused or failed leaves the
//! files that were there as they were, and no new ones ([`discard`]).
//! The path is checked when it is made (a directory that does not exist
//! or cannot be written fails first), and one path given for two outputs
//! is refused. A path that is not a regular file (`/dev/null`, a FIFO a
//! capture tool reads) is written directly.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;

/// Outputs made and not yet moved: (temporary name, path); the
/// temporary name is `None` for a path written directly.
static MADE: Mutex<Vec<(Option<PathBuf>, PathBuf)>> = Mutex::new(Vec::new());

/// The temporary name `path` is written under: hidden, beside it, with
/// this process's id.
fn part_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.{}.udrma-part", std::process::id()))
}

/// Starts writing `path` (see the module documentation).
pub(crate) fn create(path: &Path) -> anyhow::Result<Box<dyn Write + Send>> {
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let same = |p: &Path| {
        p == path || (p.canonicalize().ok()).is_some_and(|c| Some(c) == path.canonicalize().ok())
    };
    if made.iter().any(|(_, p)| same(p)) {
        anyhow::bail!(
            "{} is given for two outputs: give each its own file",
            path.display()
        );
    }
    let direct = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    let part = (!direct).then(|| part_of(path));
    let f = File::create(part.as_deref().unwrap_or(path))
        .with_context(|| format!("cannot create {}", path.display()))?;
    made.push((part, path.to_path_buf()));
    Ok(Box::new(BufWriter::new(f)))
}

/// After a run that was accepted and ended (its outputs written and
/// closed): moves each onto its path. Fails naming the first that could
/// not be moved, and where its bytes still are.
pub(crate) fn commit() -> anyhow::Result<()> {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    for (part, path) in made {
        if let Some(part) = part {
            std::fs::rename(&part, &path).with_context(|| {
                format!(
                    "cannot finish {}: what was written is in {}",
                    path.display(),
                    part.display()
                )
            })?;
        }
    }
    Ok(())
}

/// After a run refused or failed, or on a second Ctrl-C: removes what
/// was written under temporary names; the paths keep what they held.
pub(crate) fn discard() {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    for (part, _) in made {
        if let Some(part) = part {
            let _ = std::fs::remove_file(part);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outputs are one process-wide list: the tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("udrma-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Committed, what was written replaces the file; until then the old
    /// one is there.
    #[test]
    fn a_committed_output_replaces_the_file() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let d = dir("written");
        let path = d.join("t.json");
        std::fs::write(&path, "old").unwrap();
        let mut o = create(&path).unwrap();
        o.write_all(b"new").unwrap();
        drop(o);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        commit().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(!part_of(&path).exists());
        // An empty output of a run that ended is an empty file.
        drop(create(&path).unwrap());
        commit().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    /// Discarded (a refused run), even after a header was written: the old
    /// file stays, no new one appears, and no part is left.
    #[test]
    fn a_discarded_output_leaves_everything_as_it_was() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let d = dir("refused");
        let old = d.join("old.pcap");
        std::fs::write(&old, "keep me").unwrap();
        let mut o = create(&old).unwrap();
        o.write_all(b"a pcap header").unwrap();
        drop(o);
        let new = d.join("new.pcap");
        drop(create(&new).unwrap());
        discard();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "keep me");
        assert!(!new.exists() && !part_of(&new).exists() && !part_of(&old).exists());
    }

    #[test]
    fn a_path_in_no_directory_or_given_twice_is_refused() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let e = create(Path::new("/nonexistent-dir/t.json")).err().unwrap();
        assert_eq!(e.to_string(), "cannot create /nonexistent-dir/t.json");
        let d = dir("twice");
        let path = d.join("x");
        let _first = create(&path).unwrap();
        let e = create(&path).err().unwrap();
        assert!(
            e.to_string()
                .ends_with("x is given for two outputs: give each its own file"),
            "{e}"
        );
        discard();
    }

    /// `/dev/null` is written directly (no part beside it in /dev).
    #[test]
    fn a_device_is_written_directly() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut o = create(Path::new("/dev/null")).unwrap();
        o.write_all(b"gone").unwrap();
        drop(o);
        commit().unwrap();
    }
}
