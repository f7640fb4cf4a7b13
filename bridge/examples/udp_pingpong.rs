//! A plain UDP pingpong: the baseline `docs/benchmarks.md` compares the
//! bridge's one-way latency with. One process runs both sides on loopback
//! with blocking std sockets (a thread echoes), with non-blocking std
//! sockets that both sides spin on (`--spin`, the yardstick of the bridge's
//! `--busy-poll`), with quinn-udp on sockets that both sides spin on
//! (`--quinn`: the bridge's socket layer, ECN and GRO on, without its
//! engine; `--no-ecn` sends not ECN-capable; `--extra` adds a 44-byte
//! second datagram each way per round trip, after the echo and after the
//! next ping, as the bridge's COMPLETIONs go), or with tokio sockets on a
//! current-thread runtime (`--tokio`, the bridge's own I/O stack). With std sockets it also
//! prints how long the client's `send_to` call takes on average: on
//! loopback it runs the receiver's network stack too, so it is most of
//! the one-way time.
//!
//! ```text
//! cargo run --release -p udrma-bridge --example udp_pingpong -- [--tokio|--spin|--quinn [--no-ecn] [--extra]] [SIZE ...]
//! ```

use std::net::UdpSocket;
use std::time::Instant;

const ITERS: usize = 20_000;
const WARMUP: usize = 1_000;
/// The size of `--extra`'s second datagram (a COMPLETION's, as the bridge sends).
const ACK: usize = 44;

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let avg = v.iter().sum::<f64>() / v.len() as f64;
    (avg, v[v.len() / 2], v[(v.len() - 1) * 99 / 100])
}

/// A receive that spins on a non-blocking socket when `spin`.
fn recv(sock: &UdpSocket, buf: &mut [u8]) -> (usize, std::net::SocketAddr) {
    loop {
        match sock.recv_from(buf) {
            Ok(r) => return r,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("recv: {e}"),
        }
    }
}

/// One-way samples (µs), and the client's mean `send_to` time (µs).
fn std_pingpong(size: usize, spin: bool) -> (Vec<f64>, f64) {
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(spin).unwrap();
    let addr = server.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        for _ in 0..ITERS + WARMUP {
            let (n, from) = recv(&server, &mut buf);
            server.send_to(&buf[..n], from).unwrap();
        }
    });
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_nonblocking(spin).unwrap();
    let msg = vec![7u8; size];
    let mut buf = vec![0u8; 65_536];
    let r = round_trips(
        |_| {
            client.send_to(&msg, addr).unwrap();
        },
        |_| {
            recv(&client, &mut buf);
        },
    );
    echo.join().unwrap();
    r
}

/// Times `ITERS` round trips after `WARMUP` untimed ones: `ping(i)` sends
/// round trip `i`'s message, `pong(i)` does the rest until the echo is
/// back. One-way samples (µs, half the round trip), and the mean time of
/// `ping` (µs).
fn round_trips(mut ping: impl FnMut(usize), mut pong: impl FnMut(usize)) -> (Vec<f64>, f64) {
    let mut out = Vec::with_capacity(ITERS);
    let mut sending = 0.0;
    for i in 0..ITERS + WARMUP {
        let t0 = Instant::now();
        ping(i);
        let sent = t0.elapsed().as_secs_f64() * 1e6;
        pong(i);
        if i >= WARMUP {
            out.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            sending += sent;
        }
    }
    (out, sending / ITERS as f64)
}

/// Spinning on non-blocking sockets through quinn-udp, as the bridge's
/// sockets are set up (ECN read and written with every datagram, GRO on):
/// what the socket features cost beside a plain `recv_from`/`send_to`.
fn quinn_pingpong(size: usize, ecn: bool, extra: bool) -> (Vec<f64>, f64) {
    use quinn_udp::{EcnCodepoint, RecvMeta, Transmit, UdpSocketState};
    use std::io::IoSliceMut;
    fn open() -> (UdpSocket, UdpSocketState) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_nonblocking(true).unwrap();
        let st = UdpSocketState::new((&s).into()).unwrap();
        (s, st)
    }
    fn recv(s: &UdpSocket, st: &UdpSocketState, buf: &mut [u8]) -> (usize, std::net::SocketAddr) {
        let mut meta = [RecvMeta::default()];
        loop {
            let mut slot = [IoSliceMut::new(buf)];
            match st.recv(s.into(), &mut slot, &mut meta) {
                Ok(_) => return (meta[0].len, meta[0].addr),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("recv: {e}"),
            }
        }
    }
    let send = move |s: &UdpSocket, st: &UdpSocketState, to, contents: &[u8]| {
        let t = Transmit {
            destination: to,
            ecn: ecn.then_some(EcnCodepoint::Ect0),
            contents,
            segment_size: None,
            src_ip: None,
        };
        st.send(s.into(), &t).unwrap();
    };
    let (server, sst) = open();
    let addr = server.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65_536];
        for _ in 0..ITERS + WARMUP {
            let (mut n, mut from) = recv(&server, &sst, &mut buf);
            while extra && n == ACK {
                (n, from) = recv(&server, &sst, &mut buf);
            }
            send(&server, &sst, from, &buf[..n]);
            if extra {
                send(&server, &sst, from, &[1u8; ACK]);
            }
        }
    });
    let (client, cst) = open();
    let msg = vec![7u8; size];
    let mut buf = vec![0u8; 65_536];
    let r = round_trips(
        |_| send(&client, &cst, addr, &msg),
        |i| {
            if extra && i > 0 {
                send(&client, &cst, addr, &[1u8; ACK]);
            }
            while recv(&client, &cst, &mut buf).0 == ACK && extra {}
        },
    );
    echo.join().unwrap();
    r
}

fn tokio_pingpong(size: usize) -> Vec<f64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let server = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let echo = async {
            let mut buf = vec![0u8; 65_536];
            for _ in 0..ITERS + WARMUP {
                let (n, from) = server.recv_from(&mut buf).await.unwrap();
                server.send_to(&buf[..n], from).await.unwrap();
            }
        };
        let ping = async {
            let msg = vec![7u8; size];
            let mut buf = vec![0u8; 65_536];
            let mut out = Vec::with_capacity(ITERS);
            for i in 0..ITERS + WARMUP {
                let t0 = Instant::now();
                client.send_to(&msg, addr).await.unwrap();
                client.recv_from(&mut buf).await.unwrap();
                if i >= WARMUP {
                    out.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
                }
            }
            out
        };
        tokio::join!(echo, ping).1
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let use_tokio = args.iter().any(|a| a == "--tokio");
    let spin = args.iter().any(|a| a == "--spin");
    let quinn = args.iter().any(|a| a == "--quinn");
    let no_ecn = args.iter().any(|a| a == "--no-ecn");
    let extra = args.iter().any(|a| a == "--extra");
    let mut sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![1, 64, 1024, 1400];
    }
    if extra && sizes.contains(&ACK) {
        eprintln!("error: with --extra a message of {ACK} bytes cannot be told from the extra datagram; choose another size");
        std::process::exit(2);
    }
    println!(
        "# plain UDP pingpong on loopback ({}), one-way = RTT/2, {ITERS} round trips",
        if use_tokio {
            "tokio, one thread"
        } else if quinn {
            "quinn-udp on non-blocking sockets, both sides spinning, echo thread"
        } else if spin {
            "non-blocking std sockets, both sides spinning, echo thread"
        } else {
            "blocking std sockets, echo thread"
        }
    );
    println!(
        "# {:>10} {:>12} {:>12} {:>12} {:>14}",
        "Size", "Avg (us)", "p50 (us)", "p99 (us)", "send_to (us)"
    );
    for size in sizes {
        let (v, sending) = if use_tokio {
            (tokio_pingpong(size), None)
        } else if quinn {
            let (v, s) = quinn_pingpong(size, !no_ecn, extra);
            (v, Some(s))
        } else {
            let (v, s) = std_pingpong(size, spin);
            (v, Some(s))
        };
        let (avg, p50, p99) = stats(v);
        let sending = sending.map_or("-".to_string(), |s| format!("{s:.2}"));
        println!("{size:>12} {avg:>12.2} {p50:>12.2} {p99:>12.2} {sending:>14}");
    }
}
