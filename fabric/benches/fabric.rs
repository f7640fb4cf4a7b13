//! The standard speed shape (issue: fabric benchmark): a 3-tier fat tree
//! of 100 Gb/s, 1 µs links, 4000-byte packets, per-packet spraying and a
//! random permutation of 2 MB WRITEs, at k = 8 (128 hosts) and k = 16
//! (1024 hosts). Throughput is reported in packet-hops (one packet
//! crossing one link).
//!
//! cargo bench -p udrma-fabric

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use udrma_fabric::shapes::speed_shape;

fn speed(c: &mut Criterion) {
    let mut group = c.benchmark_group("speed_shape");
    group.sample_size(10);
    for k in [8u32, 16] {
        let hops = {
            let mut w = speed_shape(k, 1).expect("shape builds");
            w.run();
            w.stats().packet_hops
        };
        group.throughput(Throughput::Elements(hops));
        group.measurement_time(std::time::Duration::from_secs(if k == 8 { 10 } else { 60 }));
        group.bench_function(format!("k{k}"), |b| {
            b.iter_batched(
                || speed_shape(k, 1).expect("shape builds"),
                |mut w| w.run(),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, speed);
criterion_main!(benches);
