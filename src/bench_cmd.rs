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
    if let Some(mut ranks) = crate::ranks::join()? {
        if threads > 1 {
            return crate::ranks::alike(udrma_fabric::Ranks::rank(&ranks), "--threads splits a run within one process; under an MPI launcher the ranks split it: drop --threads");
        }
        if order == Order::Time {
            return crate::ranks::alike(
                udrma_fabric::Ranks::rank(&ranks),
                "ranks split runs in windows: drop --order time",
            );
        }
        crate::ranks::roster(&mut ranks, "bench sim")?;
        let what = format!("bench sim k={k} seed={seed}, {traffic}");
        let shard = Some((
            udrma_fabric::Ranks::size(&ranks),
            udrma_fabric::Ranks::rank(&ranks),
        ));
        let make = || match &flows {
            None => udrma_fabric::shapes::speed_shape_for(k, seed, shard),
            Some(f) => udrma_fabric::shapes::speed_shape_with_for(k, seed, f, shard),
        };
        return on_ranks(ranks, &what, k, &traffic, make);
    }
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
            "windows of {:.3} us, node by node, split across {} thread{}",
            run.window.as_ps() as f64 / 1e6,
            run.shards,
            if run.shards == 1 { "" } else { "s" }
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

/// `udrma bench sim` on MPI ranks: each rank builds and runs its shard;
/// rank 0 prints the figures, and each rank's memory and exchange.
fn on_ranks(
    ranks: crate::ranks::Mpi,
    what: &str,
    k: u32,
    traffic: &str,
    make: impl FnOnce() -> Result<udrma_fabric::World, udrma_fabric::FabricError>,
) -> anyhow::Result<ExitCode> {
    use udrma_fabric::Ranks;
    let identity = crate::ranks::identity(what);
    let (me, size) = (ranks.rank(), ranks.size());
    let start = Wall::now();
    let ran = (|| {
        let mut w = udrma_fabric::RankedWorld::new(make()?, ranks, &identity)?;
        w.run_until(udrma::proto::Instant(u64::MAX))?;
        let run = w.gather()?;
        Ok((w, run))
    })();
    let (mut w, run) = crate::ranks::settle(me, size, ran)?;
    let wall = start.elapsed().as_secs_f64();
    // Each rank's peak memory, in KiB, to rank 0.
    let kib = peak_rss_mib().map_or(0, |m| (m * 1024.0) as u64);
    let mut out = vec![Vec::new(); size];
    out[0] = kib.to_le_bytes().to_vec();
    let got = w.exchange(out)?;
    let Some(run) = run else {
        return Ok(ExitCode::SUCCESS);
    };
    let n = run.ranks.len();
    let order = format!(
        "windows of {:.3} us, node by node, split across {n} rank{}",
        run.window.as_ps() as f64 / 1e6,
        if n == 1 { "" } else { "s" }
    );
    Figures {
        k,
        hosts: u64::from(k).pow(3) / 4,
        traffic,
        now: run.now,
        stats: &run.stats,
        order,
        built: None,
        took: format!("{wall:.3} s (each rank's build and the run)"),
        wall,
        hash: run.trace_hash,
    }
    .print();
    println!("rank  peak MiB  windows  skipped  sent MiB  messages  packets");
    for (r, x) in run.ranks.iter().enumerate() {
        let kib = got
            .get(r)
            .and_then(|b| <[u8; 8]>::try_from(&b[..]).ok())
            .map_or(0, u64::from_le_bytes);
        println!(
            "{r:>4}  {:>8.1}  {:>7}  {:>7}  {:>8.1}  {:>8}  {:>7}",
            kib as f64 / 1024.0,
            x.windows,
            x.skipped,
            x.bytes as f64 / f64::from(1 << 20),
            x.messages,
            x.packets
        );
    }
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
