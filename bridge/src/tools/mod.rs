//! What `udrma bridge serve/put/get` and `udrma perf latency/bandwidth`
//! do, as library functions over an [`Endpoint`] (so tests run them
//! in-process). Each is a host app ([`ServeApp`], [`TransferApp`],
//! [`LatencyApp`], [`BandwidthApp`]) that the endpoint drives the way
//! every backend drives apps; the functions connect, install the app,
//! drive it until it is done and report.
//!
//! Conventions between the two sides, all in-band:
//! - the server registers one region at [`SERVE_BASE`], fills it with
//!   [`pattern`] (seed [`SERVE_SEED`]) and announces it in its HELLO reply;
//! - a client registers its own region at [`CLIENT_BASE`] and announces it
//!   in its HELLO ask;
//! - endpoint 0 is plain memory; a WRITE to endpoint [`ECHO_EP`] is echoed:
//!   the server WRITEs the same bytes back to the same offset of the
//!   client's announced region the moment its registry sees the WRITE
//!   complete (the pingpong of `perf latency`).
//!
//! Children not named above:
//! - `transfer`: `udrma bridge put/get`

use std::net::SocketAddr;

use udrma_app::App;
use udrma_nic::{Access, MrKey, WorkRequest};
use udrma_proto::NodeAddr;

use crate::peers::RemoteRegion;
use crate::{BridgeError, Endpoint};

mod perf;
mod serve;
mod transfer;

pub use perf::{perf_bandwidth, perf_latency, BandwidthApp, BandwidthRow, LatencyApp, LatencyRow};
pub use serve::{serve, ServeApp, ServeOptions, ServeReport};
pub use transfer::{get, put, TransferApp, TransferReport};

/// Address of the region `serve` registers.
pub const SERVE_BASE: u64 = 0x1_0000_0000;
/// Address of the region clients register.
pub const CLIENT_BASE: u64 = 0x2_0000_0000;
/// The endpoint whose WRITEs the server echoes.
pub const ECHO_EP: u16 = 1;
/// Seed of the pattern `serve` fills its region with.
pub const SERVE_SEED: u64 = 0;

/// The bytes of the region `serve` registered on `server`, read from its
/// engine's memory (not through the protocol): what tests compare with
/// what was put.
pub fn served_bytes(server: &crate::Endpoint) -> Option<&[u8]> {
    server
        .nic()
        .memory()
        .regions()
        .find(|(_, r)| r.base == SERVE_BASE)
        .map(|(_, r)| &r.bytes[..])
}

/// The test pattern: byte `i` of a buffer filled with `seed` (a
/// SplitMix64 of the 8-byte word index, so every offset and seed differ).
pub fn pattern_byte(i: u64, seed: u64) -> u8 {
    let mut z = (i / 8)
        .wrapping_add(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.to_le_bytes()[(i % 8) as usize]
}

/// Fills `buf` (standing at offset 0) with the pattern of `seed`.
pub fn pattern(buf: &mut [u8], seed: u64) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let base = w as u64 * 8;
        for (j, b) in chunk.iter_mut().enumerate() {
            *b = pattern_byte(base + j as u64, seed);
        }
    }
}

/// Compares `got` with `expected`; the error names the first difference.
pub fn compare(expected: &[u8], got: &[u8]) -> Result<(), BridgeError> {
    if expected == got {
        return Ok(());
    }
    let mut first = None;
    let mut count = 0u64;
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if e != g {
            count += 1;
            first.get_or_insert((i as u64, *e, *g));
        }
    }
    count += expected.len().abs_diff(got.len()) as u64;
    let (offset, expected, got) = first.unwrap_or((expected.len().min(got.len()) as u64, 0, 0));
    Err(BridgeError::Mismatch {
        offset,
        count,
        expected,
        got,
    })
}

/// A client's connection: its own region and the peer's.
#[derive(Debug, Clone, Copy)]
struct Session {
    node: NodeAddr,
    local: MrKey,
    remote: RemoteRegion,
}

impl Session {
    /// A WRITE of the first `size` local bytes to `offset` in the peer's
    /// region.
    fn write(&self, size: u64, offset: u64) -> WorkRequest {
        WorkRequest::write(
            self.node,
            self.local,
            CLIENT_BASE,
            size,
            self.remote.rkey,
            self.remote.addr + offset,
        )
    }

    /// A READ of the first `size` bytes of the peer's region into `local`
    /// at `local_addr`.
    fn read(&self, size: u64, local: MrKey, local_addr: u64) -> WorkRequest {
        WorkRequest::read(
            self.node,
            local,
            local_addr,
            size,
            self.remote.rkey,
            self.remote.addr,
        )
    }
}

/// Registers a client region of `len` bytes filled with `seed`'s pattern,
/// announces it, and says HELLO to `peer`.
async fn open(
    ep: &mut Endpoint,
    peer: SocketAddr,
    len: u64,
    seed: u64,
) -> Result<Session, BridgeError> {
    let n = usize::try_from(len.max(1))
        .map_err(|_| BridgeError::BadInput(format!("--size {len}: too large for this host")))?;
    let local = ep.nic_mut().register(CLIENT_BASE, n, Access::ALL);
    if let Some(r) = ep.nic_mut().memory_mut().region_mut(local) {
        pattern(&mut r.bytes, seed);
    }
    ep.nic_mut().announce(Some(local));
    let p = ep.connect(peer).await?;
    let remote = p.region.ok_or(BridgeError::NoRegion(peer))?;
    if len > remote.len {
        return Err(BridgeError::TooLarge {
            size: len,
            region: remote.len,
        });
    }
    Ok(Session {
        node: p.node,
        local,
        remote,
    })
}

/// Installs `app` on the endpoint, drives the endpoint until the app is
/// done, and gives the app back.
async fn drive<T: App>(ep: &mut Endpoint, app: T) -> Result<T, BridgeError> {
    ep.set_app(Box::new(app));
    while !ep.app_done() {
        ep.turn(None).await?;
    }
    match ep.take_app().map(udrma_app::downcast_box::<T>) {
        Some(Ok(app)) => Ok(*app),
        _ => unreachable!("the app installed above is still there"),
    }
}

/// Powers of two from `lo` to `hi` inclusive.
pub fn sizes(lo: u64, hi: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = lo.max(1);
    while s <= hi {
        v.push(s);
        s *= 2;
    }
    v
}
