//! `NicConfig`: every knob of the engine, with defaults and validation.

use thiserror::Error;

use udrma_proto::time::Duration;

/// How the receiver lets an operation into its registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum RegistrationMode {
    /// Only a packet flagged FIRST registers (the patent). Others that
    /// arrive before it wait in the escape channel.
    FirstOnly,
    /// Every data packet describes the whole operation, so any packet can
    /// register it; the escape channel is never needed.
    SelfDescribing,
}

/// How the receiver acknowledges data packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum AckMode {
    /// One ACK per data packet, at once.
    PerPacket,
    /// Coalesced selective ACKs (message id + base + 64-bit bitmap), sent
    /// `delay` after the first un-acknowledged packet of a message, or at
    /// once when the operation completes.
    Selective {
        /// Longest an acknowledgement waits to be coalesced.
        delay: Duration,
    },
}

/// How the receiver remembers completed operations, so that a late copy
/// of one never writes again (docs/design.md, "Exactly once").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum TombstoneMode {
    /// Per peer, the `tombstone_capacity` newest completed message ids; a
    /// sender opens at most `tombstone_capacity` operations toward a peer
    /// from its oldest unfinished one on, so every completed operation it
    /// may still send a copy of is among them, and a copy older than all
    /// of a full window's is one its sender has finished with (dropped).
    /// Exactly once with bounded state; the default.
    Window,
    /// One first-in, first-out set of `tombstone_capacity` completed
    /// operations for all peers, with no limit on the sender: once a
    /// completion is evicted, a late copy of it is taken as new (the
    /// stale-duplicate hazard of bounded tombstones; kept to compare).
    Fifo,
}

/// What the sender retransmits after a timeout or NACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum RetransmitMode {
    /// Only the packet that timed out or was NACKed.
    Selective,
    /// That packet and every later packet of its operation already sent
    /// (a baseline for comparison).
    GoBackN,
}

/// How the sender spreads one peer's packets over the fabric's paths. The
/// path of a packet is chosen by switches hashing its UDP source port (its
/// entropy, as RoCEv2 and Ultra Ethernet use it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Multipath {
    /// One source port: one path per peer (per-flow ECMP).
    Single,
    /// Every packet takes the next of `entropies` source ports in turn
    /// (oblivious spraying).
    Spray,
    /// REPS-like recycling: an entropy whose packet came back acknowledged
    /// without an ECN echo is used again; one that saw a mark, a trim or a
    /// loss is abandoned, and fresh ones are taken in turn.
    Reps,
}

/// Every configurable parameter of one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct NicConfig {
    /// Largest data payload per packet.
    pub mtu_payload: u32,
    /// Requests larger than this go to the large-transfer queue.
    pub segment_threshold: u64,
    /// Size of each segment operation a large request is cut into.
    pub segment_size: u32,
    /// DMA OP table slots: the most packets outstanding at once (≤ 65535).
    pub op_table_capacity: u16,
    /// Most requests waiting in the command queue (not yet fully sent).
    pub command_queue_capacity: usize,
    /// Receive registry entries (operations being received at once).
    pub registry_capacity: usize,
    /// An entry that sees no packet for this long is evicted.
    pub registry_timeout: Duration,
    /// Escape channel entries.
    pub escape_capacity: usize,
    /// Escape channel bytes (sum of buffered datagram lengths).
    pub escape_bytes: usize,
    /// How long a packet waits in the escape channel.
    pub escape_timeout: Duration,
    /// Whether completed operations are remembered (see `tombstone_capacity`).
    /// Off is the published registry's pure behaviour: no memory of
    /// finished operations, so a late copy of one registers again.
    pub tombstones: bool,
    /// [`TombstoneMode::Window`]: completed message ids remembered per
    /// peer, and the most operations a sender opens toward one peer from
    /// its oldest unfinished one on (peers must agree on it).
    /// [`TombstoneMode::Fifo`]: completed operations remembered in all,
    /// oldest forgotten first.
    pub tombstone_capacity: usize,
    /// How completed operations are remembered.
    pub tombstone_mode: TombstoneMode,
    /// Registration mode.
    pub registration: RegistrationMode,
    /// Acknowledgement mode.
    pub ack_mode: AckMode,
    /// A one-packet operation's completion notice is also its packet's
    /// acknowledgement: the receiver sends the COMPLETION (with ECE if the
    /// packet was marked) and no ACK or SACK, one datagram back instead of
    /// two. Fewer datagrams (on sockets, one system call fewer on a
    /// pingpong's critical path); one copy of the answer instead of two, so
    /// a lost notice costs a timeout. Off by default; the UDP bridge turns
    /// it on.
    pub completion_acks: bool,
    /// A packet's retransmit timer counts from the later of its sending
    /// and the last acknowledgement its peer sent for any packet after it
    /// left (TCP restarts its one timer on every acknowledgement, RFC 6298
    /// 5.3): while the peer acknowledges, a packet queued behind others is
    /// waiting, not lost. A real loss is still found by a later packet
    /// overtaking it, or by the timer once the acknowledgements stop. Off
    /// by default (each packet's timer counts from its own sending).
    pub rto_restart: bool,
    /// Tail loss probes (after RACK-TLP, RFC 8985): when an operation has
    /// had no acknowledgement and sent nothing for a probe timeout (two
    /// smoothed RTTs plus the selective-ACK delay), its last packet still
    /// out is sent again once, without spending a retry or telling the
    /// controller of a loss. The probe's acknowledgement then shows which
    /// earlier packets overtaken loss detection should send again. A loss
    /// at an operation's end, which no later packet can reveal, is found
    /// in about two round trips instead of a whole RTO (a first probe
    /// re-arms the operation's other timers to one RTO after it, so its
    /// answer, not a timer, says what was lost), so a long RTO
    /// floor (`rto_min = "full-queues"`) costs little where losses are
    /// real. A READ whose responses stop coming with some still missing
    /// asks again, for the span still missing, after the same silence (a
    /// READ nothing of which came back is left to its timer: its
    /// responder may only be busy). Off by default.
    pub tail_probe: bool,
    /// A credit count the peer has not echoed within a retransmit
    /// timeout is sent again in a repair NOOP (docs/wire-format.md,
    /// "Credit echo"). On by default. Off, a count rides only on the
    /// packets that carry it, as in MVICH, and one that rode on a lost
    /// ACK waits for the next packet to the peer (docs/testing.md,
    /// finding 8): kept so that `udrma check` can be shown finding it.
    pub credit_repair: bool,
    /// Retransmission mode.
    pub retransmit: RetransmitMode,
    /// After a loss that congestion caused, fewer bytes may be out toward
    /// that peer, opening up again as acknowledgements come back (a
    /// timeout starts again from one packet, a NACK halves what was out;
    /// docs/engine.md, "The loss window"): under go-back-N, with or
    /// without a controller; under selective retransmission, with no
    /// controller, on trims. On by default; off, every go-back-N rewind
    /// resends a whole window at once (docs/testing.md, finding 40) and
    /// every trim is resent at once (finding 41).
    pub loss_window: bool,
    /// Declare a packet lost, and send it again at once, when a packet to
    /// the same peer (of any open operation) sent more than a reordering
    /// window after it is acknowledged first (RACK-style: the window is the selective-ACK
    /// delay plus the farthest reordering seen toward the peer, from the
    /// controller's base RTT on sprayed paths). The retransmit timer
    /// stays as the last resort. `false`: only timers and NACKs.
    pub fast_retransmit: bool,
    /// While a peer answers nothing, one timeout at a time toward it
    /// (after F-RTO, RFC 5682; selective retransmission only): a retransmit timer that comes due after
    /// another packet toward the same peer timed out, and before the peer
    /// answered anything since, is filed again for one backed-off RTO
    /// after that timeout's copy instead of sending. When the peer
    /// answers, the answer says what was lost (an answer to the copy
    /// convicts the packets sent before it, `fast_retransmit`); a peer
    /// that was only slow (a host process the scheduler did not run)
    /// answers for the packets, and nothing more is sent. Off by default
    /// (a simulated NIC answers at its own pace); on in the bridge, where
    /// a stalled process would otherwise have every packet it had not
    /// yet acknowledged sent again.
    pub timeout_hold: bool,
    /// Judge a packet sent again on loss detection spurious, and double
    /// the reordering window toward its peer, when an acknowledgement for
    /// it comes too soon after the copy left to be the copy's own (under
    /// half the smoothed RTT and under the fastest round trip seen). A
    /// duplicate reported by the receiver (flag `DUP`) is judged either
    /// way. Sound where the clock is when a packet arrived (the
    /// simulator); over sockets the engine's clock is when a batch of
    /// datagrams was read, and answers read behind a send look sooner
    /// than they were, so the bridge turns it off.
    pub spurious_by_timing: bool,
    /// RTO before the first RTT sample.
    pub rto_initial: Duration,
    /// RTO lower clamp.
    pub rto_min: Duration,
    /// RTO upper clamp (also caps exponential backoff).
    pub rto_max: Duration,
    /// Retransmissions of one packet before its request fails.
    pub max_retries: u32,
    /// Wait before retrying a packet the receiver NACKed as not ready.
    pub rnr_delay: Duration,
    /// Receiver-not-ready retries of one packet before its request fails,
    /// counted apart from `max_retries` (as InfiniBand's RNR retry count):
    /// a busy receiver is not a lossy path.
    pub max_rnr_retries: u32,
    /// Posted receive buffers per endpoint.
    pub recv_queue_capacity: usize,
    /// Most scatter-gather entries one work request (or posted receive)
    /// may carry; 30 on the ConnectX-5 of the non-contiguous study.
    pub max_sge: usize,
    /// Geometry of the indirect keys' translation cache.
    pub translation: crate::translation::TranslationConfig,
    /// Control packets (ACK, NACK, notices) and READ responses queued for
    /// transmission; beyond it new ones are dropped and counted.
    pub transmit_queue_capacity: usize,
    /// Most READ response bytes this NIC, as a requester, has asked for
    /// and not yet received. A READ request is one packet however many
    /// responses it calls for, so the OP table alone does not bound the
    /// response burst; over real paths with small queues this does. A single
    /// READ operation larger than the window still goes (alone).
    /// `u64::MAX` (the default) means unlimited.
    pub read_window: u64,
    /// This NIC's boot epoch, carried in every packet.
    pub epoch: u32,
    /// UDP source port the NIC suggests for its packets.
    pub src_port: u16,
    /// Slots of the NIC's descriptor ring. A posted request holds a slot
    /// from its fetch until it completes; requests posted while the ring is
    /// full wait in the host's overflow ring (at most
    /// `command_queue_capacity` requests in all).
    pub descriptor_ring: usize,
    /// When a completion leaves at most this many slots in use and the
    /// overflow ring holds requests, the host takes an interrupt and refills
    /// the ring.
    pub ring_low_water: usize,
    /// Most bytes of reduce data one descriptor (and one REDUCE packet)
    /// carries: 48 on the Tianhe NIC. Longer vectors take more chunks.
    pub reduce_data_limit: usize,
    /// Reduce chunks (one per collective, chunk and endpoint) the NIC
    /// tracks at once, posted or created by arrivals; arrivals beyond it
    /// are dropped unacknowledged (their senders retry).
    pub reduce_chunks: usize,
    /// Simulated costs of host and NIC work (all zero by default).
    pub cost: crate::cost::CostModel,
    /// Congestion control: the algorithm and what it knows of the network.
    pub cc: crate::cc::CcConfig,
    /// How packets are spread over paths (their source port).
    pub multipath: Multipath,
    /// Distinct source ports (entropies) `Spray` and `Reps` use, from
    /// `src_port` up.
    pub entropies: u16,
    /// Consecutive UDP source ports this host's datagrams may come from,
    /// announced in its HELLOs (`Hello::ports`) so that a peer over real
    /// sockets knows them all as this host. The UDP bridge sets it to its
    /// number of sockets (`--paths`); 0 (one port) in the simulator, where
    /// hosts are known by address, not by port.
    pub hello_ports: u16,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            mtu_payload: 4096,
            segment_threshold: 256 * 1024,
            segment_size: 64 * 1024,
            op_table_capacity: 1024,
            command_queue_capacity: 1024,
            registry_capacity: 256,
            registry_timeout: Duration::from_millis(100),
            escape_capacity: 64,
            escape_bytes: 256 * 1024,
            escape_timeout: Duration::from_micros(100),
            tombstones: true,
            tombstone_capacity: 4096,
            tombstone_mode: TombstoneMode::Window,
            registration: RegistrationMode::FirstOnly,
            ack_mode: AckMode::PerPacket,
            completion_acks: false,
            rto_restart: false,
            tail_probe: false,
            credit_repair: true,
            retransmit: RetransmitMode::Selective,
            loss_window: true,
            fast_retransmit: true,
            timeout_hold: false,
            spurious_by_timing: true,
            rto_initial: Duration::from_micros(100),
            rto_min: Duration::from_micros(20),
            rto_max: Duration::from_millis(50),
            max_retries: 8,
            rnr_delay: Duration::from_micros(50),
            max_rnr_retries: 1000,
            recv_queue_capacity: 256,
            max_sge: 30,
            translation: crate::translation::TranslationConfig::default(),
            transmit_queue_capacity: 65_536,
            read_window: u64::MAX,
            epoch: 1,
            src_port: 49_152,
            descriptor_ring: 1024,
            ring_low_water: 256,
            reduce_data_limit: 48,
            reduce_chunks: 1024,
            cost: crate::cost::CostModel::ZERO,
            cc: crate::cc::CcConfig::default(),
            multipath: Multipath::Single,
            entropies: 256,
            hello_ports: 0,
        }
    }
}

/// A configuration that cannot work, by field.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum ConfigError {
    /// A field is out of its range.
    #[error("{field} = {value}: {why}")]
    OutOfRange {
        /// Field name as in the scenario file.
        field: &'static str,
        /// Offending value.
        value: u64,
        /// What the range is.
        why: &'static str,
    },
}

impl NicConfig {
    /// The largest single operation (one registry entry): requests up to
    /// the threshold go whole, larger ones in segments.
    pub fn max_op_bytes(&self) -> u64 {
        self.segment_threshold.max(u64::from(self.segment_size))
    }

    /// The most packets one operation may have (the receiver refuses more).
    pub fn max_packets_per_op(&self) -> u64 {
        self.max_op_bytes()
            .div_ceil(u64::from(self.mtu_payload.max(1)))
            .max(1)
    }

    /// Checks every field against its range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, value: u64, why| Err(ConfigError::OutOfRange { field, value, why });
        if self.mtu_payload == 0
            || self.mtu_payload as usize > udrma_proto::encap::MAX_DATAGRAM - 128
            || self.mtu_payload > u32::from(u16::MAX)
        {
            return bad(
                "mtu_payload",
                self.mtu_payload.into(),
                "must be 1..=65407 bytes",
            );
        }
        if self.read_window == 0 {
            return bad("read_window", 0, "must be at least 1 byte");
        }
        if self.segment_size == 0 {
            return bad("segment_size", 0, "must be at least 1 byte");
        }
        if self.max_op_bytes() > u64::from(u32::MAX) {
            return bad(
                "segment_threshold",
                self.segment_threshold,
                "one operation must fit the wire's 32-bit length fields",
            );
        }
        if self.max_packets_per_op() > 1 << 20 {
            return bad(
                "segment_threshold",
                self.segment_threshold,
                "an operation may have at most 2^20 packets (segment_threshold and segment_size over mtu_payload)",
            );
        }
        if self.entropies == 0 || u32::from(self.src_port) + u32::from(self.entropies) > 65_536 {
            return bad(
                "entropies",
                self.entropies.into(),
                "must be at least 1, and src_port + entropies must stay within the 16-bit port range",
            );
        }
        if self.op_table_capacity == 0 {
            return bad("op_table_capacity", 0, "must be 1..=65535");
        }
        for (field, value) in [
            ("command_queue_capacity", self.command_queue_capacity),
            ("registry_capacity", self.registry_capacity),
            ("recv_queue_capacity", self.recv_queue_capacity),
            ("max_sge", self.max_sge),
            ("transmit_queue_capacity", self.transmit_queue_capacity),
            ("descriptor_ring", self.descriptor_ring),
            ("reduce_chunks", self.reduce_chunks),
        ] {
            if value == 0 {
                return bad(field, 0, "must be at least 1");
            }
        }
        let t = self.translation;
        for (field, value) in [
            ("translation_sets", t.sets),
            ("translation_ways", t.ways),
            ("translation_entries_per_line", t.entries_per_line),
            ("translation_page_size", t.page_size),
            ("translation_pages_per_line", t.pages_per_line),
        ] {
            if value == 0 {
                return bad(field, 0, "must be at least 1");
            }
        }
        if u64::from(t.sets) * u64::from(t.ways) > 1 << 20 {
            return bad(
                "translation_sets",
                u64::from(t.sets) * u64::from(t.ways),
                "the translation cache may hold at most 2^20 lines (sets × ways)",
            );
        }
        if self.tombstones && self.tombstone_capacity == 0 {
            return bad(
                "tombstone_capacity",
                0,
                "must be at least 1 when tombstones are on",
            );
        }
        if self.tombstones
            && self.tombstone_mode == TombstoneMode::Window
            && self.tombstone_capacity < 2
        {
            return bad(
                "tombstone_capacity",
                self.tombstone_capacity as u64,
                "must be at least 2 with tombstone_mode = window (a WRITE with \
                 notification opens two operations: its data and its notice)",
            );
        }
        if self.ring_low_water >= self.descriptor_ring {
            return bad(
                "ring_low_water",
                self.ring_low_water as u64,
                "must be below descriptor_ring",
            );
        }
        if self.reduce_data_limit < 12 || self.reduce_data_limit > self.mtu_payload as usize {
            return bad(
                "reduce_data_limit",
                self.reduce_data_limit as u64,
                "must be 12 bytes (one 64-bit element and its location) up to mtu_payload",
            );
        }
        if self.rto_min.0 == 0 || self.rto_min > self.rto_max {
            return bad(
                "rto_min",
                self.rto_min.0,
                "must be positive and at most rto_max",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_errors_name_the_field() {
        NicConfig::default().validate().unwrap();
        let c = NicConfig {
            mtu_payload: 0,
            ..NicConfig::default()
        };
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "mtu_payload = 0: must be 1..=65407 bytes"
        );
        let c = NicConfig {
            mtu_payload: 1,
            segment_threshold: 1 << 30,
            ..NicConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("segment_threshold"));
    }
}
