//! `Stats`: every counter of the engine, and `Occupancy`, its bounded
//! state now and at its peak.

use std::collections::BTreeMap;

use udrma_proto::Syndrome;

/// Counters since the NIC was created. Every dropped or rejected packet is
/// counted under exactly one reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests accepted by `post`/`post_recv`.
    pub posted: u64,
    /// Requests completed successfully.
    pub completed: u64,
    /// Requests completed in error.
    pub failed: u64,
    /// Datagrams that arrived Congestion Experienced (ECN).
    pub rx_ce: u64,
    /// Packets sent with an entropy recycled from a clean acknowledgement
    /// (REPS).
    pub entropies_reused: u64,
    /// Entropies dropped from reuse after an ECN echo, a trim or a loss.
    pub entropies_abandoned: u64,
    /// Trimmed headers received (payload cut by a switch); WRITE and SEND
    /// ones are NACKed `TRIMMED` (`detail` 1 when a go-back-N receiver
    /// discards them as out of sequence).
    pub rx_trimmed: u64,
    /// Acknowledged packets whose receiver echoed a CE mark (ECE), READ
    /// responses that arrived marked included.
    pub ecn_echoes: u64,
    /// Receiver credit: DEMAND packets sent (a flow ran out of credit).
    pub demands_sent: u64,
    /// DEMAND packets received.
    pub demands_received: u64,
    /// GRANT packets sent (the receiver's pacer, and answers to DEMANDs).
    pub grants_sent: u64,
    /// GRANT packets received.
    pub grants_received: u64,
    /// Data packets (WRITE, SEND, READ request) sent the first time.
    pub data_sent: u64,
    /// Data packets sent again.
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Timers that came due but were filed again from a later
    /// acknowledgement by the same peer (`rto_restart`; not counted in
    /// `timeouts`).
    pub rto_restarts: u64,
    /// Timers that came due while their peer had answered nothing since a
    /// timeout's copy toward it, and were filed again after that copy
    /// (`timeout_hold`; not counted in `timeouts`).
    pub timeouts_held: u64,
    /// Tail loss probes sent (`tail_probe`; counted in `retransmits` too).
    pub tail_probes: u64,
    /// Of them, acknowledged too soon after they left to be the probe's
    /// own acknowledgement: the packet was late, not lost.
    pub spurious_tail_probes: u64,
    /// Go-back-N receiver: data packets discarded for arriving ahead of
    /// the next one expected of their operation.
    pub out_of_sequence: u64,
    /// Go-back-N sender: TRIMMED NACKs whose receiver had discarded the
    /// packet out of sequence (`detail` 1): heard by the controller,
    /// nothing resent.
    pub trims_ahead: u64,
    /// First-only registration: packets refused before their operation
    /// registered, held until its first packet was acknowledged.
    pub parked_for_first: u64,
    /// First packets sent again at once because a later packet of their
    /// operation was refused before they registered it.
    pub first_resent_on_refusal: u64,
    /// Packets judged lost because a packet of their operation sent after
    /// them was acknowledged first (`fast_retransmit`), before any timer,
    /// and queued to go again; counted as judged, so one acknowledged
    /// before its copy leaves counts here and not in `retransmits`.
    pub fast_retransmits: u64,
    /// Of them, found unneeded: acknowledged too soon after they left to
    /// be the new copy's acknowledgement (the reordering window widens).
    pub spurious_fast_retransmits: u64,
    /// Requests failed after `max_retries`.
    pub retries_exhausted: u64,
    /// Control packets sent (ACK, SACK, NACK, notices, READ responses).
    pub control_sent: u64,
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Received: shorter than header + ICRC.
    pub rx_truncated: u64,
    /// Received: ICRC mismatch (corruption).
    pub rx_bad_checksum: u64,
    /// Received: wrong protocol version.
    pub rx_bad_version: u64,
    /// Received: length field inconsistent.
    pub rx_bad_length: u64,
    /// Received: unknown opcode (NACKed).
    pub rx_unknown_opcode: u64,
    /// Received: kinds this layer does not handle (messaging packets
    /// without a messaging layer).
    pub rx_unhandled: u64,
    /// Received: segment index/count inconsistent (NACKed).
    pub rx_invalid: u64,
    /// ACKs that matched an outstanding packet.
    pub acks: u64,
    /// ACK/NACK naming a free or recycled OP slot, or the wrong packet.
    pub stale_acks: u64,
    /// NACKs received, by syndrome.
    pub nacks_received: BTreeMap<Syndrome, u64>,
    /// NACKs sent, by syndrome.
    pub nacks_sent: BTreeMap<Syndrome, u64>,
    /// Duplicate data packets dropped by the registry mask (re-ACKed).
    pub dup_dropped: u64,
    /// Late packets of completed operations dropped by a tombstone
    /// (re-ACKed).
    pub stale_dropped: u64,
    /// Packets put into the escape channel.
    pub escape_buffered: u64,
    /// Escaped packets applied when their operation registered.
    pub escape_drained: u64,
    /// Escaped packets dropped when their timer expired.
    pub escape_expired: u64,
    /// Packets dropped because the escape channel was full.
    pub escape_overflow: u64,
    /// Registrations refused because the registry was full (RNR NACK).
    pub registry_full: u64,
    /// SENDs refused because no receive buffer was posted (RNR NACK): for
    /// a messaging layer, a vbuf overflow.
    pub no_receive_buffer: u64,
    /// Registry entries evicted after `registry_timeout` without progress.
    pub registry_expired: u64,
    /// Tombstones forgotten to make room while a late copy could still
    /// name them (`tombstone_mode = "fifo"` only: a window forgets only
    /// what its sender has finished with).
    pub tombstone_evictions: u64,
    /// Late copies of operations their sender had finished with (older
    /// than a full window of completions), dropped without a reply.
    pub stale_finished: u64,
    /// Completions not remembered because a window was kept for
    /// [`crate::nic::MAX_PEERS`] peers already.
    pub tombstone_peers_overflow: u64,
    /// Times the sender held a new operation back because it had opened
    /// `tombstone_capacity` toward its peer from its oldest unfinished
    /// one on (the window the receiver remembers).
    pub window_waits: u64,
    /// Operations sent again from their first packet because the receiver
    /// refused a later packet after acknowledging the first: it had lost
    /// the registration (`registry_timeout`), and says so only this way.
    pub registrations_lost: u64,
    /// Later packets of an operation whose registry entry expired holding
    /// acknowledged packets, refused at once (receiver-not-ready) so that
    /// its sender sends it all again, instead of registering an entry
    /// that waits for packets never sent again (self-describing
    /// registration) or escaping to wait for a first packet that is not
    /// coming (first-only).
    pub lost_registration_refusals: u64,
    /// Records of such operations forgotten to make room (more than
    /// `registry_capacity` waiting for their restart at once): a later
    /// packet of one registers it again, which can wait for ever.
    pub lost_registrations_forgotten: u64,
    /// Receiver-side completions (registry mask full).
    pub receiver_completions: u64,
    /// Completion notices received by senders.
    pub completion_notices: u64,
    /// READ responses for no outstanding READ (late or unsolicited).
    pub stale_read_responses: u64,
    /// Control packets dropped because the transmit queue was full.
    pub tx_queue_overflow: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
    /// Requests posted while the descriptor ring was full (they waited in
    /// the host overflow ring).
    pub ring_overflows: u64,
    /// Refills of the descriptor ring from the overflow ring (each one
    /// interrupt).
    pub ring_refills: u64,
    /// Control messages (RTS, CTS, FIN) raised as events.
    pub controls_delivered: u64,
    /// CREDIT (NOOP) packets sent.
    pub noops_sent: u64,
    /// CREDIT (NOOP) packets received.
    pub noops_received: u64,
    /// NOOPs sent because a peer's echo showed that the newest credit
    /// count carried to it never arrived (its packet was lost).
    pub credit_repairs: u64,
    /// Newer credit advertisements raised as events.
    pub credit_updates: u64,
    /// Advertisements ignored because too many peers were tracked.
    pub credit_peers_overflow: u64,
    /// READ requests answered with data (retransmitted requests included).
    pub read_requests_served: u64,
    /// Of those, retries that asked only for the responses still missing
    /// (flag PARTIAL).
    pub read_requests_partial: u64,
    /// READ timeouts past `max_retries` that went again instead of failing,
    /// because the responder had answered other READs since (congestion
    /// this requester caused, not a dead path).
    pub read_retries_congested: u64,
    /// Times a congestion loss cut the loss window toward a peer
    /// (`loss_window`).
    pub loss_window_cuts: u64,
    /// READ responses to this requester that arrived trimmed and were
    /// asked for again at once, alone.
    pub read_responses_trimmed: u64,
    /// Trimmed READ responses that came too soon to answer the latest ask
    /// for their segment (a duplicate's, or an older ask's): not asked for
    /// again.
    pub read_trims_of_older_asks: u64,
    /// Responses a retried READ asked for again that were still waiting in
    /// this responder's transmit queue, and so were not queued twice.
    pub read_responses_still_queued: u64,
    /// HELLOs sent (asks and replies).
    pub hellos_sent: u64,
    /// HELLOs received (asks and replies).
    pub hellos_received: u64,
    /// Received: packets of a peer's previous life (older boot epoch).
    pub stale_epoch: u64,
    /// Peers seen to restart (a newer boot epoch).
    pub peer_restarts: u64,
    /// Peers whose epochs went untracked because [`crate::nic::MAX_PEERS`]
    /// were already tracked.
    pub epoch_peers_overflow: u64,
    /// Indirect-key translation lines found in the NIC's cache.
    pub translation_hits: u64,
    /// Indirect-key translation lines read from host memory.
    pub translation_misses: u64,
    /// Indirect-key entries stepped over by the lookups of the blocks
    /// packets touched ([`crate::CostModel::search`]).
    pub translation_search_steps: u64,
    /// Blocks touched by packets whose bytes span several blocks (each one
    /// DMA setup).
    pub dma_pieces: u64,
    /// Most scatter-gather entries any accepted request or receive carried
    /// (never above `NicConfig::max_sge`).
    pub max_sges_posted: u64,
    /// REDUCE and REDUCE_BCAST packets sent the first time.
    pub reduce_sent: u64,
    /// REDUCE and REDUCE_BCAST packets sent again after a timeout.
    pub reduce_retransmits: u64,
    /// Triggered descriptors fired (an up descriptor whose counter reached
    /// its threshold, or a broadcast).
    pub reduce_fired: u64,
    /// Children's operands counted (each at most once per chunk).
    pub reduce_counted: u64,
    /// Operands the ALU folded in.
    pub alu_operands: u64,
    /// Duplicate reduce packets (re-acknowledged, never combined).
    pub reduce_duplicates: u64,
    /// Malformed or inconsistent reduce packets dropped.
    pub reduce_invalid: u64,
    /// Reduce packets dropped because `reduce_chunks` were all in use
    /// (unacknowledged: the sender retries).
    pub reduce_refused: u64,
    /// Chunks created by arrivals and never posted here, forgotten.
    pub reduce_expired: u64,
    /// REDUCE_ACKs that matched a reduce packet awaiting one.
    pub reduce_acks: u64,
    /// REDUCE_ACKs for nothing awaiting one (late or forged).
    pub reduce_stale_acks: u64,
    /// Result chunks written to host memory.
    pub reduce_results: u64,
}

impl Stats {
    /// Total NACKs received.
    pub fn nacks_in(&self) -> u64 {
        self.nacks_received.values().sum()
    }

    /// Total NACKs sent.
    pub fn nacks_out(&self) -> u64 {
        self.nacks_sent.values().sum()
    }
}

/// The engine's bounded state: now, at its peak, and its configured limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Occupancy {
    /// Receive registry entries (now, peak, limit).
    pub registry: (usize, usize, usize),
    /// Escape channel packets (now, peak, limit).
    pub escape_entries: (usize, usize, usize),
    /// Escape channel bytes (now, peak, limit).
    pub escape_bytes: (usize, usize, usize),
    /// DMA OP table slots (now, peak, limit).
    pub op_table: (usize, usize, usize),
    /// Tombstones (now, peak, limit).
    pub tombstones: (usize, usize, usize),
    /// Transmit queue (control packets and READ responses) (now, peak, limit).
    pub transmit_queue: (usize, usize, usize),
    /// Requests posted and not completed (now, peak, limit).
    pub requests: (usize, usize, usize),
    /// Descriptor ring slots in use (now, peak, limit).
    pub descriptor_ring: (usize, usize, usize),
    /// Reduce chunks tracked (now, peak, limit).
    pub reduce_chunks: (usize, usize, usize),
    /// Operations remembered after their registry entry expired (now,
    /// peak, limit).
    pub lost_registrations: (usize, usize, usize),
}

impl Occupancy {
    /// The first structure whose peak passed its limit, if any.
    pub fn violation(&self) -> Option<&'static str> {
        let all = [
            ("registry", self.registry),
            ("escape channel entries", self.escape_entries),
            ("escape channel bytes", self.escape_bytes),
            ("OP table", self.op_table),
            ("tombstones", self.tombstones),
            ("transmit queue", self.transmit_queue),
            ("requests", self.requests),
            ("descriptor ring", self.descriptor_ring),
            ("reduce chunks", self.reduce_chunks),
            ("lost registrations", self.lost_registrations),
        ];
        all.into_iter()
            .find(|(_, (now, peak, limit))| now > limit || peak > limit)
            .map(|(name, _)| name)
    }
}

/// The counters as a fingerprint of a state reads them: only what a
/// check reads at the end (a SEND chunk with no buffer posted; the most
/// scatter-gather entries a request carried), since no counter decides
/// what the NIC does next.
#[cfg(feature = "fingerprint")]
impl serde::Serialize for Stats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.no_receive_buffer > 0, self.max_sges_posted).serialize(s)
    }
}
