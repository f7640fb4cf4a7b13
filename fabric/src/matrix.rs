//! Connection matrices in the text format htsim's datacenter simulators
//! read (`-tm FILE`), so one traffic pattern can drive both simulators in
//! a side-by-side comparison.
//!
//! ```text
//! Nodes 128
//! Connections 2
//! 14->127 id 1 start 0 size 2000000
//! 3->9 id 2 start 5000000 size 64000
//! ```
//!
//! `start` is in picoseconds, as htsim reads it; `size` in bytes. Blank
//! lines are ignored. Only the keys above are understood: htsim's
//! triggers (`trigger`, `send_done_trigger`, ...) have no udrma
//! counterpart here and are refused by name rather than ignored.

use udrma_proto::{Duration, Instant};

/// One connection: `src` writes `size` bytes to `dst`, starting at `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Connection {
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// When the transfer is posted.
    pub start: Instant,
    /// Bytes written.
    pub size: u64,
}

/// A parsed connection matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct ConnectionMatrix {
    /// Hosts the matrix was written for.
    pub nodes: u32,
    /// Its connections, in file order.
    pub connections: Vec<Connection>,
}

/// What is wrong with a matrix, and on which line (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("connection matrix line {line}: {what}")]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MatrixError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong there.
    pub what: String,
}

impl ConnectionMatrix {
    /// Parses htsim's text format; see the module documentation.
    pub fn parse(text: &str) -> Result<ConnectionMatrix, MatrixError> {
        let mut nodes = None;
        let mut declared = None;
        let mut connections = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |what: String| MatrixError { line, what };
            let mut words = raw.split_whitespace();
            let Some(first) = words.next() else {
                continue;
            };
            match first {
                "Nodes" | "Connections" => {
                    let n: u32 = number(words.next(), first).map_err(err)?;
                    if let Some(extra) = words.next() {
                        return Err(err(format!("unexpected `{extra}` after {first} {n}")));
                    }
                    if first == "Nodes" {
                        nodes = Some(n);
                    } else {
                        declared = Some(n);
                    }
                }
                pair => {
                    let n = nodes.ok_or_else(|| {
                        err(format!(
                            "`{pair}` before the `Nodes N` line that says how many hosts there are"
                        ))
                    })?;
                    connections.push(connection(pair, words, n).map_err(err)?);
                }
            }
        }
        let nodes = nodes.ok_or(MatrixError {
            line: text.lines().count().max(1),
            what: "no `Nodes N` line".into(),
        })?;
        if let Some(d) = declared {
            if d as usize != connections.len() {
                return Err(MatrixError {
                    line: text.lines().count().max(1),
                    what: format!(
                        "`Connections {d}` declared but {} listed",
                        connections.len()
                    ),
                });
            }
        }
        Ok(ConnectionMatrix { nodes, connections })
    }
}

fn number<T: std::str::FromStr>(word: Option<&str>, what: &str) -> Result<T, String> {
    let w = word.ok_or_else(|| format!("`{what}` needs a number after it"))?;
    w.parse()
        .map_err(|_| format!("`{w}` after `{what}` is not a whole number in range"))
}

fn connection<'a>(
    pair: &str,
    mut words: impl Iterator<Item = &'a str>,
    nodes: u32,
) -> Result<Connection, String> {
    let (a, b) = pair
        .split_once("->")
        .ok_or_else(|| format!("expected `SRC->DST`, found `{pair}`"))?;
    let host = |s: &str| -> Result<u32, String> {
        let h: u32 = s
            .parse()
            .map_err(|_| format!("`{s}` in `{pair}` is not a host number"))?;
        if h >= nodes {
            return Err(format!(
                "host {h} in `{pair}` is out of range (Nodes {nodes}: hosts 0..{})",
                nodes.saturating_sub(1)
            ));
        }
        Ok(h)
    };
    let (src, dst) = (host(a)?, host(b)?);
    if src == dst {
        return Err(format!("`{pair}` sends from a host to itself"));
    }
    let mut start_ps = 0u64;
    let mut size = None;
    while let Some(key) = words.next() {
        match key {
            "id" => {
                number::<u64>(words.next(), key)?;
            }
            "start" => start_ps = number(words.next(), key)?,
            "size" => size = Some(number(words.next(), key)?),
            other => {
                return Err(format!(
                    "`{other}` is not a key udrma understands (id, start, size)"
                ))
            }
        }
    }
    let size = size.ok_or_else(|| format!("`{pair}` has no `size`"))?;
    if size == 0 {
        return Err(format!("`{pair}` has size 0"));
    }
    Ok(Connection {
        src,
        dst,
        start: Instant::ZERO + Duration::from_ps(start_ps),
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_gen_permutation_writes() {
        let m = ConnectionMatrix::parse(
            "Nodes 4\nConnections 2\n0->3 id 1 start 0 size 2000000\n\n2->1 id 2 start 5000000 size 64\n",
        )
        .unwrap();
        assert_eq!(m.nodes, 4);
        assert_eq!(
            m.connections,
            vec![
                Connection {
                    src: 0,
                    dst: 3,
                    start: Instant::ZERO + Duration::from_ps(0),
                    size: 2_000_000
                },
                Connection {
                    src: 2,
                    dst: 1,
                    start: Instant::ZERO + Duration::from_ps(5_000_000),
                    size: 64
                },
            ]
        );
    }

    #[test]
    fn says_what_is_wrong_and_where() {
        let cases = [
            ("Nodes 4\n0->9 size 1\n", 2, "host 9"),
            ("Nodes 4\n0-1 size 1\n", 2, "SRC->DST"),
            ("Nodes 4\n1->1 size 1\n", 2, "to itself"),
            ("Nodes 4\n0->1 id 1\n", 2, "no `size`"),
            ("Nodes 4\n0->1 size 1 trigger 3\n", 2, "`trigger`"),
            ("Nodes 4\n0->1 size x\n", 2, "`x` after `size`"),
            ("0->1 size 1\n", 1, "before the `Nodes N`"),
            ("Nodes 4\nConnections 2\n0->1 size 1\n", 3, "declared but 1"),
            ("Nodes\n", 1, "needs a number"),
            ("Connections 0\n", 1, "no `Nodes N`"),
            ("Nodes 4 5\n", 1, "unexpected `5`"),
        ];
        for (text, line, needle) in cases {
            let e = ConnectionMatrix::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
        }
    }
}
