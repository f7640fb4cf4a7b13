//! Priority Flow Control (IEEE 802.1Qbb): lossless ports beside the
//! lossy ones.
//!
//! With PFC on ([`World::set_pfc`]) every port keeps eight priority
//! queues and starts a packet only when the port is free, from the
//! highest priority that has one and is not paused (a PAUSE may come in
//! while a packet waits, so no start is worked out ahead as the lossy
//! queue does). A switch counts, per ingress link and priority, the bytes
//! that came in over it and have not yet started out again. Past
//! `xoff_bytes` it sends a PAUSE frame back over that link; once the
//! count falls to `xon_bytes`, a RESUME. The frames are real: they wait
//! for the frame on the wire to finish, take their 84 bytes of wire time
//! and the link's latency, are traced and captured. While the count stays
//! above `xon_bytes` the PAUSE is sent again every half pause time, as
//! switches refresh it. Bytes beyond `xoff_bytes + headroom_bytes` are
//! dropped (`DropReason::Headroom`); [`World::set_pfc`] refuses a headroom
//! that cannot take what is in flight while the PAUSE travels.
//!
//! A lossless port never tail-drops and never trims. A NIC counts what
//! it has received and not yet taken in (a costed NIC's receive unit is
//! busy, or the host is paused) the same way, and pauses its switch's
//! port past XOFF.
//!
//! Deadlock: a port paused with packets waiting waits for the ports its
//! peer switch would send those packets out of. When a PAUSE takes
//! effect, the loop looks for a cycle of such waits among paused ports;
//! one that is still there, with nothing started on any of its ports, a
//! confirmation time later is a deadlock ([`World::pfc_deadlock`]).

use super::port_state::ecn_marks;
use super::*;
use udrma_proto::pfc::{pause_time, PfcRepr, FRAME_LEN, XOFF_QUANTA};

/// Bytes a PFC frame takes on the wire: the 60-byte frame, FCS, preamble
/// and inter-frame gap.
pub const PFC_WIRE_BYTES: u64 = FRAME_LEN as u64 + 4 + 8 + 12;

/// No port (a packet that came in over no switch ingress: from a host's
/// own NIC, or out of a fault's delay line).
const NO_PORT: PortId = PortId::MAX;

/// Packets a host's NIC may hand its port while they wait (paused) before
/// the host stops pulling: what a NIC's transmit queue holds.
pub const HOST_WAITING: usize = 16;

/// PFC's parameters, the same on every link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct PfcConfig {
    /// Bytes an ingress link may hold in one priority before the switch
    /// pauses it.
    pub xoff_bytes: u64,
    /// Bytes at or below which a paused ingress is resumed.
    pub xon_bytes: u64,
    /// Bytes an ingress may hold beyond `xoff_bytes` (what arrives while
    /// the PAUSE travels); `None`: on each link, the least that is safe
    /// ([`PfcConfig::headroom_needed`]).
    pub headroom_bytes: Option<u64>,
    /// Priority of data packets (0–7).
    pub data_priority: u8,
    /// Priority of control packets (ACK, NACK, credits: `Opcode::is_control`).
    pub control_priority: u8,
}

impl Default for PfcConfig {
    /// XOFF at 64 KiB, XON 18 KiB (two 9 KiB frames) below it, headroom
    /// worked out per link; data on priority 3 and control on 6, as RoCE
    /// deployments commonly map RDMA and its congestion notifications.
    fn default() -> Self {
        PfcConfig {
            xoff_bytes: 64 << 10,
            xon_bytes: (64 << 10) - 2 * 9216,
            headroom_bytes: None,
            data_priority: 3,
            control_priority: 6,
        }
    }
}

/// Why a PFC configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum PfcError {
    /// XON must lie below XOFF.
    #[error("pfc_xon ({xon} B) must be below pfc_xoff ({xoff} B)")]
    Thresholds {
        /// XOFF.
        xoff: u64,
        /// XON.
        xon: u64,
    },
    /// A priority is not 0–7.
    #[error("PFC priority {0} is not one of 0 to 7")]
    Priority(u8),
    /// The headroom cannot take one round trip at line rate.
    #[error("pfc_headroom ({given} B) cannot absorb what arrives on link {link} while a PAUSE takes effect: {arithmetic} = {needed} B")]
    Headroom {
        /// The link.
        link: String,
        /// Headroom given.
        given: u64,
        /// Headroom needed.
        needed: u64,
        /// How `needed` is made up.
        arithmetic: String,
    },
    /// Trimming cuts packets a lossless port must keep.
    #[error("link {0} trims (trim = true): a lossless port never cuts a packet, so PFC and trimming do not go together")]
    Trim(String),
    /// PFC needs time order.
    #[error("PFC needs time order: lookahead windows (order = \"windows\", --threads) cannot run a lossless fabric")]
    Windows,
}

impl PfcConfig {
    /// The least headroom that is safe on a link of `bps` and `latency`
    /// carrying frames of up to `mtu` bytes of datagram, and how it is
    /// made up: after the ingress passes XOFF, the PAUSE waits for the
    /// frame on the reverse wire (one largest frame), takes its own wire
    /// time and the link's latency; the sender finishes the frame it has
    /// begun (another largest frame), and everything on the wire arrives
    /// (one more latency).
    pub fn headroom_needed(bps: u64, latency: Duration, mtu: u64) -> (u64, String) {
        let frame = mtu + WIRE_OVERHEAD;
        let wire = (u128::from(bps) * 2 * u128::from(latency.as_ps()))
            .div_ceil(8 * u128::from(PS_PER_S)) as u64;
        let needed = wire + 2 * frame + PFC_WIRE_BYTES;
        let arithmetic = format!(
            "2 × {} ns × {} Gb/s ({wire} B on the wire) + 2 × {frame} B (a frame each way) + {PFC_WIRE_BYTES} B (the PAUSE)",
            latency.as_nanos(),
            bps as f64 / 1e9
        );
        (needed, arithmetic)
    }

    /// Checks the configuration against `topo`'s links and gives each
    /// port's headroom (see [`World::set_pfc`] for what is refused).
    pub fn check(&self, topo: &Topology) -> Result<Vec<u64>, PfcError> {
        if self.xon_bytes >= self.xoff_bytes {
            return Err(PfcError::Thresholds {
                xoff: self.xoff_bytes,
                xon: self.xon_bytes,
            });
        }
        if let Some(p) = self.priorities().into_iter().find(|&p| p > 7) {
            return Err(PfcError::Priority(p));
        }
        let mut headroom = Vec::with_capacity(topo.ports.len());
        for port in &topo.ports {
            let link = &topo.links[port.link as usize];
            if link.params.trim {
                return Err(PfcError::Trim(link.name.clone()));
            }
            let (needed, arithmetic) = PfcConfig::headroom_needed(
                link.params.bandwidth_bps,
                link.params.latency,
                u64::from(link.params.mtu),
            );
            match self.headroom_bytes {
                Some(given) if given < needed => {
                    return Err(PfcError::Headroom {
                        link: link.name.clone(),
                        given,
                        needed,
                        arithmetic,
                    })
                }
                Some(given) => headroom.push(given),
                None => headroom.push(needed),
            }
        }
        Ok(headroom)
    }

    fn priorities(&self) -> [u8; 2] {
        [self.data_priority, self.control_priority]
    }
}

/// What PFC did on one port (one direction of a link).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct PfcPortStats {
    /// PAUSE frames that reached the port (refreshes included).
    pub pauses: u64,
    /// RESUME frames that reached it.
    pub resumes: u64,
    /// Time some priority of the port was paused, in picoseconds (each
    /// priority's own time, added up).
    pub paused_ps: u64,
    /// Bytes that came in over the port's link and waited in the far
    /// switch, at most.
    pub max_ingress_bytes: u64,
}

/// A cycle of paused ports, each waiting for the next: a PFC deadlock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct PfcDeadlock {
    /// When the last PAUSE of the cycle took effect.
    pub formed: Instant,
    /// When it was confirmed (nothing of the cycle moved since).
    pub confirmed: Instant,
    /// The ports of the cycle, as `link (from→to)`, in waiting order.
    pub cycle: Vec<String>,
}

/// A PFC event.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum PfcEv {
    /// A port may be able to start its next packet.
    Pump(PortId),
    /// A PFC frame reaches the sender of `port`'s link: `quanta` for
    /// priority `prio` (0: resume).
    Frame(PortId, u8, u16),
    /// Time to send the PAUSE for (ingress `port`, priority) again if it
    /// still holds too much (stale unless the time is the one kept).
    Refresh(PortId, u8),
    /// Time to confirm the candidate deadlock.
    Confirm,
}

impl PfcEv {
    /// The node it happens at (for the window loop's bookkeeping; a
    /// lossless world never runs in windows).
    pub(super) fn node(&self, topo: &Topology) -> NodeId {
        match *self {
            PfcEv::Pump(p) | PfcEv::Frame(p, ..) => topo.ports[p as usize].node,
            PfcEv::Refresh(p, _) => topo.ports[p as usize].peer,
            PfcEv::Confirm => 0,
        }
    }
}

/// One port's lossless state.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct LosslessPort {
    /// Packets not yet started, per priority, with the port they came in
    /// by ([`NO_PORT`]: none counted).
    queues: [VecDeque<(Pkt, PortId)>; 8],
    /// Packets waiting in all queues.
    waiting: usize,
    /// Until when each priority may not start.
    paused_until: [Instant; 8],
    /// Since when each priority has been paused, if it is.
    paused_from: [Option<Instant>; 8],
    /// Bytes that came in over this port's link, per priority, still in
    /// the far switch.
    ingress: [u64; 8],
    /// Priorities this port's link was sent a PAUSE for and no RESUME.
    xoff: u8,
    /// When each priority's PAUSE is next refreshed.
    refresh_at: [Instant; 8],
    /// The pump event filed, if any.
    pump_at: Option<Instant>,
    /// Packets started, per priority (a deadlock's cycle moves if any of
    /// its ports starts one).
    started: [u64; 8],
    stats: PfcPortStats,
}

/// A cycle of waits found, not yet confirmed: its (port, priority)
/// pairs, what each had started then, and when it formed.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Candidate {
    cycle: Vec<(PortId, u8)>,
    started: Vec<u64>,
    formed: Instant,
}

/// A world's PFC.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Pfc {
    cfg: PfcConfig,
    ports: Vec<LosslessPort>,
    /// Per port: its link's headroom.
    headroom: Vec<u64>,
    /// A cycle found and waiting to be confirmed.
    candidate: Option<Candidate>,
    deadlock: Option<PfcDeadlock>,
    frames: u64,
}

impl World {
    /// Makes every port lossless with `cfg` (see the module docs). Refused
    /// (and nothing changed) when XON is not below XOFF, a priority is
    /// not 0–7, a link's headroom cannot take what arrives while a PAUSE
    /// takes effect (the error gives the arithmetic), a link trims, or
    /// the world runs in lookahead windows.
    pub fn set_pfc(&mut self, cfg: PfcConfig) -> Result<(), PfcError> {
        if self.windows.width > 0 {
            return Err(PfcError::Windows);
        }
        let headroom = cfg.check(&self.topo)?;
        self.pfc = Some(Box::new(Pfc {
            cfg,
            ports: (0..self.ports.len())
                .map(|_| LosslessPort::default())
                .collect(),
            headroom,
            candidate: None,
            deadlock: None,
            frames: 0,
        }));
        Ok(())
    }

    /// The PFC configuration, if the fabric is lossless.
    pub fn pfc(&self) -> Option<&PfcConfig> {
        self.pfc.as_ref().map(|p| &p.cfg)
    }

    /// What PFC did on each port, by port (`Topology::ports`), with the
    /// paused time counted up to now; empty without PFC.
    pub fn pfc_stats(&self) -> Vec<PfcPortStats> {
        let Some(pfc) = self.pfc.as_ref() else {
            return Vec::new();
        };
        pfc.ports
            .iter()
            .map(|lp| {
                let mut s = lp.stats.clone();
                for (from, until) in lp.paused_from.iter().zip(lp.paused_until) {
                    if let Some(f) = from {
                        s.paused_ps += (until.min(self.now) - *f).as_ps();
                    }
                }
                s
            })
            .collect()
    }

    /// The first PFC deadlock, once confirmed.
    pub fn pfc_deadlock(&self) -> Option<&PfcDeadlock> {
        self.pfc.as_ref()?.deadlock.as_ref()
    }

    /// A port's name as `link (from→to)`.
    pub fn port_name(&self, port: PortId) -> String {
        let p = self.topo.ports[port as usize];
        format!(
            "{} ({}→{})",
            self.topo.links[p.link as usize].name,
            self.topo.nodes[p.node as usize].name,
            self.topo.nodes[p.peer as usize].name
        )
    }

    /// The priority `pkt` travels on.
    fn priority_of(cfg: &PfcConfig, pkt: &Pkt) -> u8 {
        if pkt.head.opcode.is_some_and(Opcode::is_control) {
            cfg.control_priority
        } else {
            cfg.data_priority
        }
    }

    /// Whether host `h`'s NIC may hand its port another packet: it is
    /// free (the NIC's lead ahead) and, on a lossless fabric, fewer than
    /// [`HOST_WAITING`] packets wait in it.
    pub(super) fn host_may_send(&self, h: u32) -> bool {
        let host = &self.hosts[h as usize];
        self.ports[host.port as usize].free_at <= self.now + host.tx_lead
            && self
                .pfc
                .as_ref()
                .is_none_or(|p| p.ports[host.port as usize].waiting < HOST_WAITING)
    }

    /// A packet joins lossless port `port` (it came in over the link of
    /// `self.ingress`, if that is a port): charged to that ingress, which
    /// pauses its link past XOFF, then queued by priority.
    pub(super) fn pfc_enqueue(&mut self, port: PortId, mut pkt: Pkt, len: u64) {
        let from = std::mem::replace(&mut self.ingress, NO_PORT);
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let c = Self::priority_of(&pfc.cfg, &pkt);
        let hot = self.ports[port as usize].hot;
        let queued: u64 = pfc.ports[port as usize].queues[usize::from(c)]
            .iter()
            .map(|(p, _)| p.len() + self.seal_bytes)
            .sum();
        if ecn_marks(queued, hot.ecn_threshold, hot.ecn_span, pkt.serial, port) {
            self.stats.ecn_marked += 1;
            pkt.ce = true;
        }
        let mut pause = false;
        if from != NO_PORT {
            let room = pfc.cfg.xoff_bytes + pfc.headroom[from as usize];
            let lp = &mut pfc.ports[from as usize];
            let held = lp.ingress[usize::from(c)];
            if held + len > room {
                let link = self.topo.ports[from as usize].link;
                self.drop_pkt(link, pkt, DropReason::Headroom);
                return;
            }
            let held = held + len;
            lp.ingress[usize::from(c)] = held;
            lp.stats.max_ingress_bytes = lp.stats.max_ingress_bytes.max(held);
            pause = held > pfc.cfg.xoff_bytes && lp.xoff & (1 << c) == 0;
        }
        let lp = &mut pfc.ports[port as usize];
        lp.queues[usize::from(c)].push_back((pkt, from));
        lp.waiting += 1;
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(queued + len);
        if pause {
            self.send_pfc(from, c, XOFF_QUANTA);
        }
        self.pump(port);
    }

    /// A packet reaches a NIC over `port` on a lossless fabric: it holds
    /// its bytes in the NIC's receive buffer until the NIC takes it
    /// ([`World::pfc_nic_taken`]), and the NIC pauses the link past XOFF,
    /// as a switch does (a NIC that stops taking packets, a paused host,
    /// keeps pausing its switch). `None`: dropped, the headroom full.
    pub(super) fn pfc_nic_arrival(&mut self, port: PortId, pkt: Pkt) -> Option<Pkt> {
        let pfc = self.pfc.as_mut()?;
        let c = Self::priority_of(&pfc.cfg, &pkt);
        let len = pkt.len() + self.seal_bytes;
        let room = pfc.cfg.xoff_bytes + pfc.headroom[port as usize];
        let lp = &mut pfc.ports[port as usize];
        let held = lp.ingress[usize::from(c)] + len;
        if held > room {
            let link = self.topo.ports[port as usize].link;
            self.drop_pkt(link, pkt, DropReason::Headroom);
            return None;
        }
        lp.ingress[usize::from(c)] = held;
        lp.stats.max_ingress_bytes = lp.stats.max_ingress_bytes.max(held);
        if held > pfc.cfg.xoff_bytes && lp.xoff & (1 << c) == 0 {
            self.send_pfc(port, c, XOFF_QUANTA);
        }
        Some(pkt)
    }

    /// Host `h`'s NIC takes `pkt` in: its bytes leave the receive buffer,
    /// which resumes the link at XON.
    pub(super) fn pfc_nic_taken(&mut self, h: u32, pkt: &Pkt) {
        let own = self.hosts[h as usize].port;
        let p = self.topo.ports[own as usize];
        let port =
            self.topo.links[p.link as usize].ports[usize::from(p.direction == Direction::Forward)];
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let c = Self::priority_of(&pfc.cfg, pkt);
        let lp = &mut pfc.ports[port as usize];
        let i = usize::from(c);
        lp.ingress[i] = lp.ingress[i].saturating_sub(pkt.len() + self.seal_bytes);
        if lp.xoff & (1 << c) != 0 && lp.ingress[i] <= pfc.cfg.xon_bytes {
            lp.xoff &= !(1 << c);
            self.send_pfc(port, c, 0);
        }
    }

    /// Starts `port`'s next packet if the port is free and a priority
    /// that has one is not paused; otherwise files a pump for when the
    /// port frees or the earliest pause runs out.
    pub(super) fn pump(&mut self, port: PortId) {
        let now = self.now;
        let free_at = self.ports[port as usize].free_at;
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let lp = &mut pfc.ports[port as usize];
        if lp.waiting == 0 {
            return;
        }
        let wake = if free_at > now {
            Some(free_at)
        } else {
            let ready = (0..8u8).rev().find(|&c| {
                !lp.queues[usize::from(c)].is_empty() && lp.paused_until[usize::from(c)] <= now
            });
            match ready {
                Some(c) => {
                    self.start_next(port, c);
                    return;
                }
                // Paused: until the earliest pause runs out (a RESUME
                // pumps sooner).
                None => (0..8)
                    .filter(|&c| !lp.queues[c].is_empty())
                    .map(|c| lp.paused_until[c])
                    .min(),
            }
        };
        if let Some(t) = wake {
            // (A pump filed earlier and not yet run covers this one.)
            if lp.pump_at.is_none_or(|at| at > t) {
                lp.pump_at = Some(t);
                self.schedule(t, EvKind::Pfc(PfcEv::Pump(port)));
            }
        }
    }

    /// Starts the first packet of priority `c` at `port`: it leaves the
    /// buffer (its ingress may resume) and goes on the wire.
    fn start_next(&mut self, port: PortId, c: u8) {
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let lp = &mut pfc.ports[port as usize];
        let Some((pkt, from)) = lp.queues[usize::from(c)].pop_front() else {
            return;
        };
        lp.waiting -= 1;
        lp.started[usize::from(c)] += 1;
        let len = pkt.len() + self.seal_bytes;
        let mut resume = false;
        if from != NO_PORT {
            let xon = pfc.cfg.xon_bytes;
            let src = &mut pfc.ports[from as usize];
            src.ingress[usize::from(c)] -= len;
            if src.xoff & (1 << c) != 0 && src.ingress[usize::from(c)] <= xon {
                src.xoff &= !(1 << c);
                resume = true;
            }
        }
        if resume {
            self.send_pfc(from, c, 0);
        }
        self.launch(port, pkt, len);
        self.pump(port);
    }

    /// The switch at the far end of ingress `from`'s link sends a PFC
    /// frame back over it for priority `c`: after the frame on that wire
    /// ends, taking its own wire time, arriving a latency later.
    fn send_pfc(&mut self, from: PortId, c: u8, quanta: u16) {
        let now = self.now;
        let p = self.topo.ports[from as usize];
        let back =
            self.topo.links[p.link as usize].ports[usize::from(p.direction == Direction::Forward)];
        let hot = self.ports[back as usize].hot;
        let start = self.ports[back as usize].free_at.max(now);
        let end = start + hot.serialization(PFC_WIRE_BYTES - WIRE_OVERHEAD);
        self.ports[back as usize].free_at = end;
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        pfc.frames += 1;
        let frame_no = pfc.frames;
        if quanta > 0 {
            let lp = &mut pfc.ports[from as usize];
            lp.xoff |= 1 << c;
            // Refreshed at half its pause time, while still needed.
            let at = now + Duration::from_ps(pause_time(quanta, hot.bandwidth_bps).as_ps() / 2);
            lp.refresh_at[usize::from(c)] = at;
            self.schedule(at, EvKind::Pfc(PfcEv::Refresh(from, c)));
        }
        self.trace.record(&TraceEvent::Pfc {
            t: start.as_ps(),
            link: hot.link,
            dir: u8::from(hot.direction == Direction::Reverse),
            priority: c,
            quanta,
        });
        if hot.tapped {
            let node = p.peer;
            let mac = match self.topo.host_addr(node) {
                Some(a) => a.mac(),
                None => [
                    0x02,
                    0x75,
                    0x73,
                    (node >> 16) as u8,
                    (node >> 8) as u8,
                    node as u8,
                ],
            };
            let repr = if quanta > 0 {
                PfcRepr::pause(mac, c)
            } else {
                PfcRepr::resume(mac, c)
            };
            if self.pcap.is_some() && self.pcap_error.is_none() {
                self.pcap_pending
                    .insert((start, (1 << 63) | frame_no), repr.to_bytes().to_vec());
            }
        }
        self.schedule(
            end + hot.latency,
            EvKind::Pfc(PfcEv::Frame(from, c, quanta)),
        );
        // The reverse port's own next packet waits for the frame.
        self.pump(back);
    }

    /// Whether a PFC event filed for `t` still has anything to do: a
    /// pump the port still expects, a refresh still wanted, a candidate
    /// still waiting. A stale one is dropped without moving the clock, as
    /// a stale timer is (else a run would end at a pause that a RESUME
    /// cut short).
    pub(super) fn pfc_due(&mut self, ev: &PfcEv, t: Instant) -> bool {
        let Some(pfc) = self.pfc.as_mut() else {
            return false;
        };
        match *ev {
            PfcEv::Pump(p) => {
                let lp = &mut pfc.ports[p as usize];
                if lp.pump_at == Some(t) {
                    lp.pump_at = None;
                    true
                } else {
                    false
                }
            }
            PfcEv::Refresh(from, c) => {
                let lp = &pfc.ports[from as usize];
                lp.refresh_at[usize::from(c)] == t && lp.xoff & (1 << c) != 0
            }
            PfcEv::Frame(..) => true,
            PfcEv::Confirm => pfc.candidate.is_some(),
        }
    }

    /// Runs a PFC event.
    pub(super) fn pfc_event(&mut self, ev: PfcEv) {
        match ev {
            PfcEv::Pump(port) => {
                self.pump(port);
                if let Some(h) = self.ports[port as usize].hot.host() {
                    if self.host_may_send(h) && !self.hosts[h as usize].paused {
                        self.service_host(h);
                    }
                }
            }
            PfcEv::Frame(port, c, quanta) => self.pfc_frame(port, c, quanta),
            PfcEv::Refresh(from, c) => self.send_pfc(from, c, XOFF_QUANTA),
            PfcEv::Confirm => self.confirm_deadlock(),
        }
    }

    /// A PFC frame for priority `c` reaches the sender of `port`'s link.
    fn pfc_frame(&mut self, port: PortId, c: u8, quanta: u16) {
        let now = self.now;
        let bps = self.ports[port as usize].hot.bandwidth_bps;
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let lp = &mut pfc.ports[port as usize];
        let i = usize::from(c);
        // Close the pause running so far, if it ran out or ends now.
        if let Some(from) = lp.paused_from[i] {
            if lp.paused_until[i] <= now || quanta == 0 {
                lp.stats.paused_ps += (lp.paused_until[i].min(now) - from).as_ps();
                lp.paused_from[i] = None;
            }
        }
        if quanta == 0 {
            lp.stats.resumes += 1;
            lp.paused_until[i] = now;
        } else {
            lp.stats.pauses += 1;
            lp.paused_until[i] = now + pause_time(quanta, bps);
            lp.paused_from[i].get_or_insert(now);
        }
        self.pump(port);
        if quanta > 0 {
            self.look_for_deadlock(port);
        } else if let Some(h) = self.ports[port as usize].hot.host() {
            if self.host_may_send(h) && !self.hosts[h as usize].paused {
                self.service_host(h);
            }
        }
    }

    /// The (port, priority) pairs `port` waits for: paused with packets
    /// of priority `c` waiting, it waits for the ports of its peer switch
    /// that hold packets of `c` which came in over it and that are paused
    /// for `c` themselves.
    fn waits_for(&self, port: PortId) -> Vec<(PortId, u8)> {
        let Some(pfc) = self.pfc.as_ref() else {
            return Vec::new();
        };
        let now = self.now;
        let lp = &pfc.ports[port as usize];
        let peer = self.topo.ports[port as usize].peer;
        let mut out = Vec::new();
        for c in 0..8u8 {
            let i = usize::from(c);
            if lp.queues[i].is_empty() || lp.paused_until[i] <= now {
                continue;
            }
            for &q in &self.topo.nodes[peer as usize].ports {
                let lq = &pfc.ports[q as usize];
                if lq.paused_until[i] > now && lq.queues[i].iter().any(|(_, f)| *f == port) {
                    out.push((q, c));
                }
            }
        }
        out
    }

    /// Looks for a cycle of waits through `port` (depth first, each port
    /// once); a cycle found becomes the candidate, confirmed a pause time
    /// later if nothing of it moved.
    fn look_for_deadlock(&mut self, port: PortId) {
        let Some(pfc) = self.pfc.as_ref() else {
            return;
        };
        if pfc.deadlock.is_some() || pfc.candidate.is_some() {
            return;
        }
        let mut path: Vec<(PortId, u8)> = Vec::new();
        let mut seen = std::collections::BTreeSet::from([port]);
        let mut stack = vec![(port, 0u8, 0usize)];
        let mut cycle = None;
        while let Some((p, c, depth)) = stack.pop() {
            path.truncate(depth);
            path.push((p, c));
            let next = self.waits_for(p);
            if let Some(&(_, c)) = next.iter().find(|&&(q, _)| q == port) {
                // The cycle closes on `port` in priority `c`.
                path[0].1 = c;
                cycle = Some(path.clone());
                break;
            }
            for (q, c) in next {
                if seen.insert(q) {
                    stack.push((q, c, depth + 1));
                }
            }
        }
        let Some(cycle) = cycle else {
            return;
        };
        let now = self.now;
        let bps = self.ports[port as usize].hot.bandwidth_bps;
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let started = cycle
            .iter()
            .map(|&(p, c)| pfc.ports[p as usize].started[usize::from(c)])
            .collect();
        pfc.candidate = Some(Candidate {
            cycle,
            started,
            formed: now,
        });
        self.schedule(
            now + pause_time(XOFF_QUANTA, bps),
            EvKind::Pfc(PfcEv::Confirm),
        );
    }

    /// The candidate cycle is a deadlock if every port of it is still
    /// paused with its packets waiting and none has started one since.
    fn confirm_deadlock(&mut self) {
        let now = self.now;
        let Some(pfc) = self.pfc.as_mut() else {
            return;
        };
        let Some(Candidate {
            cycle,
            started,
            formed,
        }) = pfc.candidate.take()
        else {
            return;
        };
        let held = cycle.iter().zip(&started).all(|(&(p, c), &s)| {
            let lp = &pfc.ports[p as usize];
            let i = usize::from(c);
            lp.started[i] == s && lp.paused_until[i] > now && !lp.queues[i].is_empty()
        });
        if !held {
            return;
        }
        let names = cycle.iter().map(|&(p, _)| self.port_name(p)).collect();
        tracing::info!(sim_ns = now.as_nanos(), cycle = ?names, "PFC deadlock");
        if let Some(pfc) = self.pfc.as_mut() {
            pfc.deadlock = Some(PfcDeadlock {
                formed,
                confirmed: now,
                cycle: names,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::LinkParams;

    fn packet(len: usize) -> Pkt {
        Pkt {
            serial: 1,
            src: NodeAddr(1),
            dst: NodeAddr(0),
            src_port: 0,
            bytes: Vec::new(),
            elided: len as u16,
            nic_work_ps: 0,
            ce: false,
            trimmed: false,
            head: Head::of(&[]),
        }
    }

    /// The headroom is a hard bound: an ingress (a switch's, or a NIC's)
    /// holding all but 99 bytes of XOFF + headroom drops a 100-byte packet
    /// (`DropReason::Headroom`), takes a 99-byte one, and counts neither
    /// twice. With a headroom `set_pfc` accepted this never happens in a
    /// run; here the count is set by hand.
    #[test]
    fn an_ingress_full_to_its_headroom_drops_and_counts() {
        let mut w = World::new(
            Topology::star(2, LinkParams::default()),
            FabricConfig::default(),
            RuleSet::new(),
        )
        .unwrap();
        w.set_pfc(PfcConfig::default()).unwrap();
        let cfg = *w.pfc().unwrap();
        let h1_out = w.topo.links[1].ports[0]; // h1 → s0: the switch's ingress
        let s0_to_h0 = w.topo.links[0].ports[1];
        let room = cfg.xoff_bytes + w.pfc.as_ref().unwrap().headroom[h1_out as usize];
        let data = usize::from(cfg.data_priority);
        w.pfc.as_mut().unwrap().ports[h1_out as usize].ingress[data] = room - 99;
        w.ingress = h1_out;
        w.pfc_enqueue(s0_to_h0, packet(100), 100);
        assert_eq!(w.stats.dropped.get(&DropReason::Headroom), Some(&1));
        assert_eq!(
            w.pfc.as_ref().unwrap().ports[h1_out as usize].ingress[data],
            room - 99
        );
        w.ingress = h1_out;
        w.pfc_enqueue(s0_to_h0, packet(99), 99);
        assert_eq!(w.stats.dropped.get(&DropReason::Headroom), Some(&1));
        // Taken, and started at once (the port was free): its bytes left
        // the count again, and it is on the wire.
        assert_eq!(
            w.pfc.as_ref().unwrap().ports[h1_out as usize].ingress[data],
            room - 99
        );
        assert_eq!(w.ports[s0_to_h0 as usize].flight.len(), 1);
        // A NIC's buffer: the port into h0, full but for 99 bytes.
        w.pfc.as_mut().unwrap().ports[s0_to_h0 as usize].ingress[data] = room - 99;
        assert!(w.pfc_nic_arrival(s0_to_h0, packet(100)).is_none());
        assert_eq!(w.stats.dropped.get(&DropReason::Headroom), Some(&2));
        assert!(w.pfc_nic_arrival(s0_to_h0, packet(99)).is_some());
    }
}
