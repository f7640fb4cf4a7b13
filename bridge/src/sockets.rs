//! The endpoint's UDP sockets: one it receives on, and with `--paths N`,
//! N − 1 more on the next consecutive ports that it only sends from.
//!
//! Each datagram leaves from the socket its entropy names, so its UDP
//! source port is the entropy, as RoCEv2 and Ultra Ethernet carry it: an
//! ECMP router that hashes ports (Linux with
//! `net.ipv4.fib_multipath_hash_policy = 1`) spreads the packets of one
//! peer over its paths, and the engine's multipath feedback (REPS) steers
//! them. The peer learns the span from the HELLO's `ports` field and knows
//! every port in it as this host.

use std::io;
use std::net::SocketAddr;

use quinn_udp::UdpSocketState;
use tokio::net::UdpSocket;

use crate::BridgeError;

/// Most sockets one endpoint opens (`--paths`).
pub const MAX_PATHS: u16 = 64;

/// Ephemeral first ports tried before giving up on a free run of ports.
const EPHEMERAL_TRIES: u32 = 32;

/// One bound, non-blocking UDP socket and quinn-udp's state for it.
#[derive(Debug)]
pub struct PathSocket {
    /// The socket, registered with tokio.
    pub sock: UdpSocket,
    /// quinn-udp's batching and ECN state.
    pub state: UdpSocketState,
}

/// Binds one socket at `addr` with `buffer` bytes of kernel buffers.
pub fn bind_one(addr: SocketAddr, buffer: usize) -> io::Result<PathSocket> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    // Best effort: the kernel caps these at net.core.[rw]mem_max.
    let _ = s.set_recv_buffer_size(buffer);
    let _ = s.set_send_buffer_size(buffer);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    let std_sock: std::net::UdpSocket = s.into();
    let state = UdpSocketState::new((&std_sock).into())?;
    let sock = UdpSocket::from_std(std_sock)?;
    Ok(PathSocket { sock, state })
}

/// Binds `paths` sockets on consecutive ports from `addr`'s. With port 0
/// the kernel picks the first; when a port after it is taken, another
/// first port is tried (up to 32 times). With a fixed port a taken one is
/// an error that names it.
pub fn bind_paths(
    addr: SocketAddr,
    paths: u16,
    buffer: usize,
) -> Result<Vec<PathSocket>, BridgeError> {
    if paths == 0 || paths > MAX_PATHS {
        return Err(BridgeError::BadInput(format!(
            "--paths {paths}: must be between 1 and {MAX_PATHS}"
        )));
    }
    let tries = if addr.port() == 0 { EPHEMERAL_TRIES } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let first = bind_one(addr, buffer).map_err(|source| BridgeError::Bind { addr, source })?;
        let base = first
            .sock
            .local_addr()
            .map_err(|source| BridgeError::Bind { addr, source })?;
        let mut socks = vec![first];
        for k in 1..paths {
            let Some(port) = base.port().checked_add(k) else {
                last = Some((base, io::Error::other("past port 65535")));
                break;
            };
            let at = SocketAddr::new(base.ip(), port);
            match bind_one(at, buffer) {
                Ok(s) => socks.push(s),
                Err(e) => {
                    last = Some((at, e));
                    break;
                }
            }
        }
        if socks.len() == usize::from(paths) {
            return Ok(socks);
        }
    }
    let (at, e) = last.unwrap_or_else(|| (addr, io::Error::other("no free run of ports")));
    Err(BridgeError::BadInput(format!(
        "--paths {paths}: cannot bind {paths} consecutive UDP ports from {addr}: {at}: {e}"
    )))
}

/// The socket a datagram with UDP source port `src_port` leaves from: its
/// entropy (`src_port - base_port`, the engine's numbering) modulo the
/// sockets there are.
pub fn path_of(src_port: u16, base_port: u16, paths: usize) -> usize {
    usize::from(src_port.wrapping_sub(base_port)) % paths.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_a_run_of_consecutive_ports() {
        let socks = bind_paths("127.0.0.1:0".parse().unwrap(), 4, 1 << 16).unwrap();
        let ports: Vec<u16> = socks
            .iter()
            .map(|s| s.sock.local_addr().unwrap().port())
            .collect();
        assert_eq!(ports.len(), 4);
        for w in ports.windows(2) {
            assert_eq!(w[1], w[0] + 1);
        }
    }

    #[tokio::test]
    async fn a_taken_port_in_a_fixed_run_is_named() {
        let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let Some(first) = port.checked_sub(1) else {
            return;
        };
        let err = bind_paths(SocketAddr::new([127, 0, 0, 1].into(), first), 2, 1 << 16)
            .err()
            .map(|e| e.to_string());
        // The first port may itself be taken by someone else: then that
        // one is named instead.
        let err = err.expect("the run cannot be bound");
        assert!(
            err.contains(&format!("127.0.0.1:{port}"))
                || err.contains(&format!("127.0.0.1:{first}")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn zero_or_too_many_paths_is_bad_input() {
        for n in [0, MAX_PATHS + 1] {
            let err = bind_paths("127.0.0.1:0".parse().unwrap(), n, 1 << 16).unwrap_err();
            assert!(err.to_string().contains(&format!("--paths {n}")), "{err}");
        }
    }

    #[test]
    fn an_entropy_picks_its_socket() {
        assert_eq!(path_of(4791, 4791, 4), 0);
        assert_eq!(path_of(4794, 4791, 4), 3);
        assert_eq!(path_of(4795, 4791, 4), 0);
        assert_eq!(path_of(9, 9, 1), 0);
    }
}
