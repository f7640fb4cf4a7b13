//! Writes one packet of every udrma kind, plus one WRITE with a corrupted
//! ICRC, to a nanosecond pcap file.
//!
//! ```text
//! cargo run -p udrma-proto --example all_packets -- OUT.pcap
//! udrma decode OUT.pcap
//! tshark -X lua_script:tools/wireshark/udrma.lua -r OUT.pcap
//! ```

use std::fs::File;
use std::io::BufWriter;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: all_packets OUT.pcap");
        return ExitCode::from(2);
    };
    let file = match File::create(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot create {}: {e}", path.to_string_lossy());
            return ExitCode::from(2);
        }
    };
    let mut out = BufWriter::new(file);
    match udrma_proto::samples::write_capture(&mut out) {
        Ok(frames) => {
            if let Err(e) = std::io::Write::flush(&mut out) {
                eprintln!("error: writing {}: {e}", path.to_string_lossy());
                return ExitCode::from(2);
            }
            let bad = frames.iter().filter(|f| f.corrupted).count();
            println!(
                "wrote {} packets ({} with a corrupted ICRC) to {}",
                frames.len(),
                bad,
                path.to_string_lossy()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: writing {}: {e}", path.to_string_lossy());
            ExitCode::from(2)
        }
    }
}
