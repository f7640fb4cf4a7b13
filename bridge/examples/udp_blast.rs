//! A plain UDP sender and receiver with the bridge's own batching and no
//! protocol engine: the bandwidth yardstick of `docs/benchmarks.md`.
//!
//! The sender hands the kernel GSO batches of up to 44 datagrams of
//! `SIZE` bytes (the bridge's batch for 1468 B datagrams) through
//! quinn-udp, as the bridge does; the receiver reads with GRO and
//! recvmmsg through quinn-udp, as the bridge does, into buffers of the
//! same size, and counts what arrived. Sockets get the bridge's 8 MiB
//! buffers. Two threads, so the two ends run on two cores like the
//! bridge's two processes. Prints what was sent and received, and the
//! received rate: what a sender that did nothing but batch could move.
//!
//! ```text
//! cargo run --release -p udrma-bridge --example udp_blast -- [SECONDS] [SIZE]
//! ```

use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn_udp::{RecvMeta, Transmit, UdpSocketState, BATCH_SIZE};

fn socket() -> (UdpSocket, UdpSocketState) {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )
    .expect("socket");
    let _ = s.set_recv_buffer_size(8 << 20);
    let _ = s.set_send_buffer_size(8 << 20);
    s.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .expect("bind");
    let sock: UdpSocket = s.into();
    let state = UdpSocketState::new((&sock).into()).expect("quinn-udp state");
    (sock, state)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().map_or(5.0, |a| a.parse().expect("SECONDS"));
    let size: usize = args.get(1).map_or(1468, |a| a.parse().expect("SIZE"));

    let (rx, rx_state) = socket();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let to = rx.local_addr().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let stop = done.clone();
    let receiver = std::thread::spawn(move || {
        let gro = rx_state.gro_segments().max(1);
        let slot = 65_536.max(size * gro);
        let mut buf = vec![0u8; slot * BATCH_SIZE];
        let mut metas = [RecvMeta::default(); BATCH_SIZE];
        let (mut bytes, mut datagrams) = (0u64, 0u64);
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        loop {
            let mut slices: Vec<IoSliceMut> = buf.chunks_mut(slot).map(IoSliceMut::new).collect();
            match rx_state.recv((&rx).into(), &mut slices, &mut metas) {
                Ok(n) => {
                    let now = Instant::now();
                    first.get_or_insert(now);
                    last = now;
                    for m in &metas[..n] {
                        bytes += m.len as u64;
                        datagrams += m.len.div_ceil(m.stride.max(1)) as u64;
                    }
                }
                Err(_) if stop.load(Ordering::Relaxed) => break,
                Err(_) => {}
            }
        }
        let span = first.map_or(0.0, |f| (last - f).as_secs_f64());
        (bytes, datagrams, span, gro)
    });

    let (tx, tx_state) = socket();
    let segments = tx_state.max_gso_segments().max(1).min(65_000 / size).max(1);
    let batch = vec![7u8; size * segments];
    let (mut sent_bytes, mut sent_datagrams, mut calls) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < seconds {
        let t = Transmit {
            destination: to,
            ecn: None,
            contents: &batch,
            segment_size: (segments > 1).then_some(size),
            src_ip: None,
        };
        if tx_state.try_send((&tx).into(), &t).is_ok() {
            sent_bytes += batch.len() as u64;
            sent_datagrams += segments as u64;
        }
        calls += 1;
    }
    let sent_for = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    done.store(true, Ordering::Relaxed);
    let (bytes, datagrams, span, gro) = receiver.join().unwrap();
    println!(
        "plain GSO/GRO blast, {size} B datagrams, {segments} per sendmsg (GRO up to {gro}), {seconds} s"
    );
    println!(
        "sent     {sent_datagrams} datagrams in {calls} calls, {:.2} Gb/s",
        sent_bytes as f64 * 8.0 / sent_for / 1e9
    );
    println!(
        "received {datagrams} datagrams ({:.2} % lost), {:.2} Gb/s",
        100.0 * (1.0 - datagrams as f64 / sent_datagrams.max(1) as f64),
        bytes as f64 * 8.0 / span.max(1e-9) / 1e9
    );
}
