//! Runs the standard speed shape once and prints what it cost.
//!
//! cargo run --release -p udrma-fabric --example speed -- 8
//!
//! Prints simulated packet-hops per wall second, events per second, wall
//! time, simulated time and peak resident memory (VmHWM, Linux).

use std::time::Instant as Wall;

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let k: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8);
    let seed: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let build = Wall::now();
    let mut w = match udrma_fabric::shapes::speed_shape(k, seed) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let built = build.elapsed().as_secs_f64();
    let start = Wall::now();
    let idle = w.run();
    let wall = start.elapsed().as_secs_f64();
    let s = w.stats();
    let done = w
        .host_events()
        .iter()
        .filter(|e| matches!(e.event, udrma_nic::Event::Completed { result: Ok(()), .. }))
        .count();
    println!(
        "k={k} hosts={} seed={seed} idle={idle} completed={done}",
        w.topology().n_hosts()
    );
    println!("sim_time_us={:.1}", w.now().as_ps() as f64 / 1e6);
    println!(
        "packet_hops={} events={} trace_hash={:016x}",
        s.packet_hops,
        s.events,
        w.trace().hash()
    );
    println!(
        "max_event_queue={} max_queue_bytes={} drops={}",
        s.max_event_queue,
        s.max_queue_bytes,
        s.dropped_total()
    );
    let retx: u64 = (0..w.topology().n_hosts() as u32)
        .map(|h| w.nic(udrma_proto::NodeAddr(h)).stats().retransmits)
        .sum();
    println!("retransmits={retx}");
    println!("build_s={built:.3} wall_s={wall:.3}");
    println!("packet_hops_per_s={:.0}", s.packet_hops as f64 / wall);
    println!("events_per_s={:.0}", s.events as f64 / wall);
    if let Some(m) = peak_rss_mib() {
        println!("peak_rss_mib={m:.1}");
    }
}
