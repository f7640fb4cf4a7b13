//! `udrma bench sim`: the standard speed shape (or a connection matrix's
//! flows) run once, on one thread or split across several, and its
//! figures printed: hops and events per second, peak memory, huge pages,
//! the topology's build time and the trace hash.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant as Wall;

use anyhow::Context;

use crate::{BadInput, Order};

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Bytes of the process's anonymous memory on transparent huge pages.
fn resident_huge_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = text.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub(crate) fn bench_sim(
    k: u32,
    seed: u64,
    matrix: Option<&Path>,
    order: Order,
    threads: usize,
) -> anyhow::Result<ExitCode> {
    let build = Wall::now();
    let (flows, traffic) = match matrix {
        None => (None, "permutation of 2 MB WRITEs".to_string()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let m = udrma_fabric::matrix::ConnectionMatrix::parse(&text)
                .map_err(|e| BadInput(format!("{}: {e}", path.display())))?;
            let hosts = u64::from(k).pow(3) / 4;
            if u64::from(m.nodes) != hosts {
                return Err(BadInput(format!(
                    "{}: the matrix says Nodes {}, but a k={k} fat tree has {hosts} hosts",
                    path.display(),
                    m.nodes
                ))
                .into());
            }
            let traffic = format!("{} connections of {}", m.connections.len(), path.display());
            (Some(m.connections), traffic)
        }
    };
    let make = || match &flows {
        None => udrma_fabric::shapes::speed_shape(k, seed),
        Some(f) => udrma_fabric::shapes::speed_shape_with(k, seed, f),
    };
    if threads > 1 {
        if order == Order::Time {
            return Err(
                BadInput("--threads splits runs in windows: drop --order time".into()).into(),
            );
        }
        let start = Wall::now();
        let run = udrma_fabric::run_sharded(threads, make).map_err(|e| BadInput(e.to_string()))?;
        let wall = start.elapsed().as_secs_f64();
        let hosts = u64::from(k).pow(3) / 4;
        let order = format!(
            "windows of {:.3} us, node by node, split across {} threads",
            run.window.as_ps() as f64 / 1e6,
            run.shards
        );
        Figures {
            k,
            hosts,
            traffic: &traffic,
            now: run.now,
            stats: &run.stats,
            order,
            built: None,
            took: format!("{wall:.3} s (each thread's build and the run)"),
            wall,
            hash: run.trace.hash(),
        }
        .print();
        return Ok(ExitCode::SUCCESS);
    }
    let mut w = make().map_err(|e| BadInput(e.to_string()))?;
    let window = w
        .set_event_order(match order {
            Order::Time => udrma_fabric::EventOrder::Time,
            Order::Windows => udrma_fabric::EventOrder::Windows,
        })
        .map_err(|e| BadInput(format!("--order windows: {e}")))?;
    let built = build.elapsed().as_secs_f64();
    let start = Wall::now();
    w.run();
    let wall = start.elapsed().as_secs_f64();
    let order = match window {
        Some(d) => format!("windows of {:.3} us, node by node", d.as_ps() as f64 / 1e6),
        None => "time".to_string(),
    };
    Figures {
        k,
        hosts: w.topology().n_hosts() as u64,
        traffic: &traffic,
        now: w.now(),
        stats: w.stats(),
        order,
        built: Some(built),
        took: format!("{wall:.3} s (the run)"),
        wall,
        hash: w.trace().hash(),
    }
    .print();
    Ok(ExitCode::SUCCESS)
}

/// What `udrma bench sim` prints, on one thread or several.
struct Figures<'a> {
    k: u32,
    hosts: u64,
    traffic: &'a str,
    now: udrma::proto::Instant,
    stats: &'a udrma_fabric::FabricStats,
    /// The order line's text.
    order: String,
    /// Build time, when it was measured apart from the run.
    built: Option<f64>,
    /// The wall line's text.
    took: String,
    /// Seconds the rates are worked out over.
    wall: f64,
    hash: u64,
}

impl Figures<'_> {
    fn print(&self) {
        let Figures {
            k,
            hosts,
            traffic,
            now,
            stats: s,
            ref order,
            built,
            ref took,
            wall,
            hash,
        } = *self;
        println!(
        "shape          fat tree k={k} ({hosts} hosts), 100 Gb/s, 1 us, 4000 B packets, spraying, {traffic}"
    );
        println!(
            "simulated      {:.1} us, {} events, {} packet-hops",
            now.as_ps() as f64 / 1e6,
            s.events,
            s.packet_hops
        );
        println!(
            "event queue    {} events pending at most",
            s.max_event_queue
        );
        println!("order          {order}");
        if let Some(b) = built {
            println!("build          {b:.3} s (topology, NICs, posts)");
        }
        println!("wall           {took}");
        println!("packet-hops/s  {:.0}", s.packet_hops as f64 / wall);
        println!("events/s       {:.0}", s.events as f64 / wall);
        if let Some(m) = peak_rss_mib() {
            println!("peak memory    {m:.1} MiB");
        }
        match resident_huge_bytes() {
            Some(b) => println!(
                "huge pages     {:.1} MiB of the memory at the end",
                b as f64 / f64::from(1 << 20)
            ),
            None => println!("huge pages     unknown (no /proc/self/smaps_rollup)"),
        }
        println!("trace hash     {hash:016x}");
    }
}
