//! Files `udrma run` writes as it runs (a capture, a trace, a timeline):
//! each is written beside its path under a temporary name and moved onto
//! the path once something was written, so that a run refused before it
//! wrote anything (a key the backend cannot carry, a flag that does not
//! apply) leaves the file that was there as it was, and leaves no empty
//! file where there was none. The path is checked when it is made: a
//! directory that does not exist or cannot be written fails first.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// An output file being written (see the module documentation).
pub(crate) struct Output {
    out: Option<BufWriter<File>>,
    part: PathBuf,
    path: PathBuf,
    wrote: bool,
}

/// The temporary name `path` is written under: hidden, beside it.
fn part_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    path.with_file_name(format!(".{name}.udrma-part"))
}

impl Output {
    /// Starts writing `path` (under its temporary name).
    pub(crate) fn create(path: &Path) -> anyhow::Result<Output> {
        let part = part_of(path);
        let f = File::create(&part).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Output {
            out: Some(BufWriter::new(f)),
            part,
            path: path.to_path_buf(),
            wrote: false,
        })
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.wrote |= !buf.is_empty();
        match self.out.as_mut() {
            Some(out) => out.write(buf),
            None => Err(std::io::Error::other("the output was closed")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.as_mut().map_or(Ok(()), Write::flush)
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        let flushed = self.out.take().map(|mut out| out.flush());
        if !self.wrote {
            let _ = std::fs::remove_file(&self.part);
            return;
        }
        let moved = match flushed {
            Some(Err(e)) => Err(e),
            _ => std::fs::rename(&self.part, &self.path),
        };
        if let Err(e) = moved {
            // Said, never lost quietly: the bytes are still in the part.
            eprintln!(
                "warning: cannot finish {} ({e}); what was written is in {}",
                self.path.display(),
                self.part.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("udrma-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Written, the file replaces what was there once it is closed.
    #[test]
    fn what_is_written_replaces_the_file_when_closed() {
        let d = dir("written");
        let path = d.join("t.json");
        std::fs::write(&path, "old").unwrap();
        let mut o = Output::create(&path).unwrap();
        o.write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        drop(o);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert!(!part_of(&path).exists());
    }

    /// Nothing written (a refused run): the old file stays, no new one
    /// appears, and no part is left.
    #[test]
    fn nothing_written_leaves_everything_as_it_was() {
        let d = dir("refused");
        let old = d.join("old.pcap");
        std::fs::write(&old, "keep me").unwrap();
        drop(Output::create(&old).unwrap());
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "keep me");
        let new = d.join("new.pcap");
        drop(Output::create(&new).unwrap());
        assert!(!new.exists() && !part_of(&new).exists());
    }

    #[test]
    fn a_path_in_no_directory_fails_at_once() {
        let e = Output::create(Path::new("/nonexistent-dir/t.json"))
            .err()
            .unwrap();
        assert_eq!(e.to_string(), "cannot create /nonexistent-dir/t.json");
    }
}
