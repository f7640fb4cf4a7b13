//! The `udrma` command-line tool.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use udrma::decode::{decode_capture, DecodeError};
use udrma::proto;

/// udrma: a deterministic testbed for reliable, connectionless RDMA over UDP.
///
/// With no command, runs the built-in demo and prints its summary.
#[derive(Debug, Parser)]
#[command(name = "udrma", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print one line per packet of a pcap capture (time, src→dst, kind,
    /// message id, segment i/n, op number, flags, payload length), and
    /// "BAD: <reason>" for frames that are not valid udrma packets.
    Decode {
        /// The capture (Ethernet link type; nanosecond or microsecond pcap).
        file: PathBuf,
        /// UDP port udrma traffic uses.
        #[arg(long, default_value_t = proto::DEFAULT_UDP_PORT)]
        port: u16,
    },
    /// The built-in demo (what `udrma` with no command runs).
    Demo,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command.unwrap_or(Command::Demo) {
        Command::Decode { file, port } => decode(&file, port),
        Command::Demo => demo(),
    };
    match result {
        Ok(code) => code,
        // `udrma decode x.pcap | head`: the reader left; not our failure.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<DecodeError>()
            .is_some_and(DecodeError::is_broken_pipe)
            || cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn decode(path: &PathBuf, port: u16) -> anyhow::Result<ExitCode> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    decode_capture(BufReader::new(file), port, &mut out)
        .with_context(|| format!("decoding {}", path.display()))?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The wire demo: builds one packet of every kind (and one with a broken
/// ICRC) as an in-memory capture and decodes it. The simulated-fabric demo
/// scenario replaces it when the scenario runner lands.
fn demo() -> anyhow::Result<ExitCode> {
    let mut pcap = Vec::new();
    let frames = proto::samples::write_capture(&mut pcap)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "udrma wire demo: {} packets, one of every kind, the last with a corrupted ICRC,\n\
         encapsulated in Ethernet/IPv4/UDP (port {}) and decoded back.\n\
         Write the same capture with `cargo run -p udrma-proto --example all_packets -- all.pcap`.\n",
        frames.len(),
        proto::DEFAULT_UDP_PORT
    )?;
    let summary = decode_capture(&pcap[..], proto::DEFAULT_UDP_PORT, &mut out)?;
    out.flush()?;
    Ok(if summary.bad == 1 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
