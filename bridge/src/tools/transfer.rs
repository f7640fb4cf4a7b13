//! `udrma bridge put/get`: one transfer, and optionally its verification,
//! as an app ([`TransferApp`]) the client's endpoint drives.

use std::net::SocketAddr;

use udrma_app::App;
use udrma_nic::{Access, Event, MrKey, Nic, WcError, WorkRequest, WrId};
use udrma_proto::{Duration, Instant};

use super::{compare, drive, open, pattern, Session, CLIENT_BASE, SERVE_SEED};
use crate::{BridgeError, Endpoint};

/// Where `put --verify` reads the bytes back to.
const VERIFY_BASE: u64 = CLIENT_BASE + (1 << 40);

/// What a put or get did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TransferReport {
    /// "put" or "get".
    pub op: &'static str,
    /// The peer.
    pub peer: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds the transfer took (verification excluded).
    pub seconds: f64,
    /// Goodput in Gb/s.
    pub gbps: f64,
    /// Whether the bytes were verified (and matched: a mismatch is an error).
    pub verified: bool,
    /// Data packets sent again.
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Of the retransmits, tail loss probes (`--tail-probe`).
    pub tail_probes: u64,
    /// Of the probes, answered by the first copy (the packet was late).
    pub spurious_tail_probes: u64,
    /// Copies sent on loss detection that were found not needed (an
    /// answer too soon, or the peer's duplicate report).
    pub spurious_fast_retransmits: u64,
    /// NACKs received (by syndrome name).
    pub nacks: std::collections::BTreeMap<String, u64>,
    /// Duplicate packets the receiver dropped here.
    pub dup_dropped: u64,
    /// The congestion controller (`none`, `nscc`, ...).
    pub cc: &'static str,
    /// Datagrams that arrived here marked Congestion Experienced (READ
    /// responses, on a verified put).
    pub rx_ce: u64,
    /// Acknowledgements whose receiver echoed a CE mark (ECE): marks the
    /// peer saw on this side's data.
    pub ecn_echoes: u64,
    /// UDP ports this side sent from (`--paths`).
    pub paths: u16,
    /// Times a path (source port) was abandoned after a loss or a CE mark
    /// on it (REPS).
    pub entropies_abandoned: u64,
    /// Authenticated mode's counters on this side (absent in plain mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security: Option<crate::secure::SecStats>,
    /// What the egress fault rules did.
    pub faults: crate::EgressStats,
}

/// Which transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// WRITE the client's region to the server's, READ back to verify.
    Put,
    /// READ the server's region, compare with the server's pattern.
    Get,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Transfer(WrId),
    Verify(WrId, MrKey),
    Done,
}

/// One transfer and its verification, as a host app.
#[derive(Debug)]
pub struct TransferApp {
    s: Session,
    kind: Kind,
    size: u64,
    verify: bool,
    stage: Option<Stage>,
    started: Instant,
    took: Option<Duration>,
    error: Option<BridgeError>,
}

impl TransferApp {
    fn new(s: Session, kind: Kind, size: u64, verify: bool) -> TransferApp {
        TransferApp {
            s,
            kind,
            size,
            verify,
            stage: None,
            started: Instant::ZERO,
            took: None,
            error: None,
        }
    }

    fn fail(&mut self, what: &str, e: impl Into<FailKind>) {
        self.error = Some(match e.into() {
            FailKind::Wc(error) => BridgeError::Transfer {
                what: what.into(),
                error,
            },
            FailKind::Other(e) => e,
        });
        self.stage = Some(Stage::Done);
    }

    fn post(&mut self, now: Instant, nic: &mut Nic, wr: WorkRequest, what: &str) -> Option<WrId> {
        match nic.post(now, wr) {
            Ok(id) => Some(id),
            Err(e) => {
                self.fail(what, FailKind::Other(e.into()));
                None
            }
        }
    }

    fn transferred(&mut self, now: Instant, nic: &mut Nic) {
        self.took = Some(now - self.started);
        if !self.verify {
            self.stage = Some(Stage::Done);
            return;
        }
        let n = self.size as usize;
        match self.kind {
            Kind::Put => {
                let back = nic.register(VERIFY_BASE, n.max(1), Access::ALL);
                let wr = self.s.read(self.size, back, VERIFY_BASE);
                if let Some(id) = self.post(now, nic, wr, "READ (verification)") {
                    self.stage = Some(Stage::Verify(id, back));
                }
            }
            Kind::Get => {
                let mut expected = vec![0u8; n];
                pattern(&mut expected, SERVE_SEED);
                let got = nic
                    .memory()
                    .region(self.s.local)
                    .map(|r| &r.bytes[..n])
                    .unwrap_or(&[]);
                if let Err(e) = compare(&expected, got) {
                    self.fail("READ", FailKind::Other(e));
                }
                self.stage = Some(Stage::Done);
            }
        }
    }
}

enum FailKind {
    Wc(WcError),
    Other(BridgeError),
}

impl From<WcError> for FailKind {
    fn from(e: WcError) -> Self {
        FailKind::Wc(e)
    }
}

impl App for TransferApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        self.started = now;
        let (wr, what) = match self.kind {
            Kind::Put => (self.s.write(self.size, 0), "WRITE"),
            Kind::Get => (self.s.read(self.size, self.s.local, CLIENT_BASE), "READ"),
        };
        if let Some(id) = self.post(now, nic, wr, what) {
            self.stage = Some(Stage::Transfer(id));
        }
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        let Event::Completed { wr, result, .. } = event else {
            return;
        };
        match self.stage {
            Some(Stage::Transfer(id)) if id == wr => match result {
                Ok(()) => self.transferred(now, nic),
                Err(e) => {
                    let what = if self.kind == Kind::Put {
                        "WRITE"
                    } else {
                        "READ"
                    };
                    self.fail(what, e);
                }
            },
            Some(Stage::Verify(id, back)) if id == wr => {
                if let Err(e) = result {
                    self.fail("READ (verification)", e);
                    return;
                }
                let n = self.size as usize;
                let mem = nic.memory();
                let sent = mem
                    .region(self.s.local)
                    .map(|r| &r.bytes[..n])
                    .unwrap_or(&[]);
                let got = mem.region(back).map(|r| &r.bytes[..n]).unwrap_or(&[]);
                if let Err(e) = compare(sent, got) {
                    self.fail("READ (verification)", FailKind::Other(e));
                }
                self.stage = Some(Stage::Done);
            }
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        self.stage == Some(Stage::Done)
    }
}

fn report(
    ep: &Endpoint,
    op: &'static str,
    peer: SocketAddr,
    bytes: u64,
    secs: f64,
    verified: bool,
) -> TransferReport {
    TransferReport {
        op,
        peer: peer.to_string(),
        bytes,
        seconds: secs,
        gbps: bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
        verified,
        retransmits: ep.nic().stats().retransmits,
        timeouts: ep.nic().stats().timeouts,
        tail_probes: ep.nic().stats().tail_probes,
        spurious_tail_probes: ep.nic().stats().spurious_tail_probes,
        spurious_fast_retransmits: ep.nic().stats().spurious_fast_retransmits,
        nacks: ep
            .nic()
            .stats()
            .nacks_received
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        dup_dropped: ep.nic().stats().dup_dropped,
        cc: ep.nic().config().cc.algorithm.name(),
        rx_ce: ep.stats().rx_ce,
        ecn_echoes: ep.nic().stats().ecn_echoes,
        paths: ep.config().paths,
        entropies_abandoned: ep.nic().stats().entropies_abandoned,
        security: ep.security_stats(),
        faults: ep.fault_stats(),
    }
}

async fn transfer(
    ep: &mut Endpoint,
    peer: SocketAddr,
    kind: Kind,
    size: u64,
    verify: bool,
    seed: u64,
) -> Result<TransferReport, BridgeError> {
    let s = open(ep, peer, size, seed).await?;
    let app = drive(ep, TransferApp::new(s, kind, size, verify)).await?;
    if let Some(e) = app.error {
        return Err(e);
    }
    let secs = app.took.map_or(0.0, |d| d.as_ps() as f64 / 1e12);
    let op = if kind == Kind::Put { "put" } else { "get" };
    Ok(report(ep, op, peer, size, secs, verify))
}

/// WRITEs `size` bytes of `seed`'s pattern to offset 0 of the peer's
/// region; with `verify`, READs them back and compares.
pub async fn put(
    ep: &mut Endpoint,
    peer: SocketAddr,
    size: u64,
    verify: bool,
    seed: u64,
) -> Result<TransferReport, BridgeError> {
    transfer(ep, peer, Kind::Put, size, verify, seed).await
}

/// READs `size` bytes from offset 0 of the peer's region; with `verify`,
/// compares them with the pattern `serve` filled the region with (so it
/// fails if the region was written since the server started).
pub async fn get(
    ep: &mut Endpoint,
    peer: SocketAddr,
    size: u64,
    verify: bool,
) -> Result<TransferReport, BridgeError> {
    transfer(ep, peer, Kind::Get, size, verify, 1).await
}
