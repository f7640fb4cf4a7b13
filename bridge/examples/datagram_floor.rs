//! The protocol's own cost per datagram on this machine, one core: emitting
//! a 1,400-byte WRITE packet (header, payload copy and ICRC) and parsing it
//! back (ICRC check included), against a bare copy of the same bytes.
//! docs/benchmarks.md sets these beside the kernel's share of a plain
//! GSO/GRO sender's time per datagram (`udp_blast`).
mod common;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let data = [7u8; 1400];
    let repr = common::write_packet(&data);
    let n: u32 = 2_000_000;
    let mut buf = vec![0u8; 2048];
    let len = repr.emit(&mut buf).expect("a WRITE fits 2 KiB");
    let t = Instant::now();
    for i in 0..n {
        buf[40] = i as u8;
        black_box(repr.emit(black_box(&mut buf)).expect("fits"));
    }
    let emit = t.elapsed().as_nanos() as f64 / f64::from(n);
    let t = Instant::now();
    for _ in 0..n {
        let r = udrma_proto::Repr::parse_bytes(black_box(&buf[..len])).expect("valid");
        black_box(r.seg_count);
    }
    let parse = t.elapsed().as_nanos() as f64 / f64::from(n);
    let mut dst = vec![0u8; len];
    let t = Instant::now();
    for i in 0..n {
        buf[i as usize % len] ^= 1;
        dst.copy_from_slice(black_box(&buf[..len]));
        black_box(&dst);
    }
    let copy = t.elapsed().as_nanos() as f64 / f64::from(n);
    println!("{len} B datagram (1,400 B WRITE payload), {n} times, one core:");
    println!("emit (header, payload, ICRC)  {emit:7.1} ns");
    println!("parse (ICRC checked)          {parse:7.1} ns");
    println!("bare copy of {len} B          {copy:7.1} ns");
}
