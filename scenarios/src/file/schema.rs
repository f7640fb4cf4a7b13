//! The scenario file: one TOML document describing a whole experiment.
//! Every table refuses unknown keys; sizes, times and rates are strings
//! with units. `docs/scenarios.md` lists every key.

use serde::Deserialize;

use crate::file::cdf::CdfSpec;
use crate::file::units::{Rate, Size, Time};

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// Name (shown in reports).
    pub name: String,
    /// What it demonstrates, and the outcome to expect.
    #[serde(default)]
    pub description: String,
    /// Master seed (overridable with `--seed`): any u64, written as an
    /// integer or, above what TOML's 64-bit signed integers hold, as a
    /// string of digits.
    #[serde(default = "one", deserialize_with = "seed")]
    pub seed: u64,
    /// Simulated time after which the run stops (liveness fails if work
    /// remains).
    #[serde(default = "default_limit")]
    pub time_limit: Time,
    /// The fabric.
    pub topology: TopologySpec,
    /// Every NIC's configuration.
    #[serde(default)]
    pub nic: NicSpec,
    /// What the hosts do.
    #[serde(default, rename = "workload")]
    pub workloads: Vec<WorkloadSpec>,
    /// What goes wrong.
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultSpec>,
    /// Host pauses.
    #[serde(default, rename = "pause")]
    pub pauses: Vec<PauseSpec>,
    /// Which checks run.
    #[serde(default)]
    pub checks: ChecksSpec,
    /// Files the CLI writes (flags override).
    #[serde(default)]
    pub outputs: OutputsSpec,
    /// A named hardware profile (`scenarios/profiles/NAME.toml`): link
    /// speed and latency defaults and the cost model.
    pub profile: Option<String>,
    /// Cost-model overrides (on top of the profile's).
    #[serde(default)]
    pub cost: CostSpec,
    /// The authenticated mode's cost.
    #[serde(default)]
    pub security: SecuritySpec,
    /// The messaging layer's knobs (for `msg-*` workloads).
    #[serde(default)]
    pub messaging: MessagingSpec,
}

/// `[cost]` (and a profile's `[cost]`): absent keys keep the profile's
/// value, or zero.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostSpec {
    /// Host rings the doorbell (per post).
    pub doorbell: Option<Time>,
    /// NIC fetches one descriptor.
    pub descriptor_fetch: Option<Time>,
    /// Extra fetch time per scatter-gather entry.
    pub per_sge: Option<Time>,
    /// NIC sets up one DMA (per packet, each way).
    pub dma_setup: Option<Time>,
    /// DMA bandwidth between host memory and the NIC (per-byte cost).
    pub dma_bandwidth: Option<Rate>,
    /// NIC firmware per packet (each way).
    pub nic_per_packet: Option<Time>,
    /// Host memory copy bandwidth (vbuf copies).
    pub host_copy_bandwidth: Option<Rate>,
    /// One interrupt.
    pub interrupt: Option<Time>,
    /// Host time per block packed or unpacked.
    pub host_copy_per_block: Option<Time>,
    /// Host reduction bandwidth (bytes of a received vector folded into
    /// the held one per second, by MPI's collective algorithms).
    pub host_reduce_bandwidth: Option<Rate>,
    /// An indirect-key translation line found in the NIC's cache.
    pub translate_hit: Option<Time>,
    /// An indirect-key translation line read from host memory.
    pub translate_miss: Option<Time>,
    /// One indirect-key entry a lookup steps over.
    pub translate_search: Option<Time>,
    /// Creating one indirect key.
    pub key_create: Option<Time>,
    /// Fetching a receive descriptor when a SEND arrives.
    pub recv_fetch: Option<Time>,
    /// A reduce descriptor fires (counter at threshold to packet out).
    pub reduce_trigger: Option<Time>,
    /// The NIC ALU folds one operand into a reduce chunk.
    pub alu_per_operand: Option<Time>,
    /// Sealing or opening one packet, authenticated mode (each way).
    pub aead_per_packet: Option<Time>,
    /// Sealing and opening speed, authenticated mode (per-byte cost).
    pub aead_bandwidth: Option<Rate>,
}

/// `[security]`: the authenticated mode, as the simulator models it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySpec {
    /// `"none"` (default) or `"aead"`: every packet carries the 24-byte
    /// security header and a 16-byte tag in place of its 4-byte ICRC (36
    /// bytes more on every link), and the NICs spend `[cost]
    /// aead_per_packet` and `aead_bandwidth` sealing and opening it.
    pub mode: Option<String>,
}

/// `[messaging]`: absent keys keep the layer's defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessagingSpec {
    /// Bytes per vbuf (header included).
    pub vbuf_size: Option<Size>,
    /// vbufs pre-posted per peer (and initial credits).
    pub vbufs_per_peer: Option<u16>,
    /// Send-side vbufs.
    pub send_vbufs: Option<u16>,
    /// Un-carried re-posts that trigger a NOOP at once.
    pub credit_notify_threshold: Option<u16>,
    /// Credits an eager send must leave.
    pub credit_preserve: Option<u16>,
    /// Largest eager message.
    pub rendezvous_threshold: Option<Size>,
    /// `r3`, `rget` or `rput`.
    pub rendezvous: Option<String>,
    /// NOOP timer.
    pub noop_interval: Option<Time>,
    /// Unexpected eager bytes held before vbufs stop being re-posted.
    pub unexpected_bytes: Option<Size>,
    /// `ok` (default) or `fail`: every memory registration fails.
    pub registration: Option<String>,
}

fn one() -> u64 {
    1
}

/// A seed: an integer, or a string of digits (TOML integers stop at
/// i64::MAX; seeds, as `--seed` takes them, go to u64::MAX).
fn seed<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a seed: an integer 0..=18446744073709551615, or one in a string")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("seed {v} is negative")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            v.parse().map_err(|_| {
                E::custom(format!(
                    "seed {v:?} is not an integer 0..=18446744073709551615"
                ))
            })
        }
    }
    d.deserialize_any(V)
}

fn default_limit() -> Time {
    Time(udrma_proto::Duration::from_millis(100))
}

/// Topology kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// Two hosts back to back.
    Pair,
    /// Hosts on one switch.
    Star,
    /// Two switches joined by a bottleneck.
    Dumbbell,
    /// 3-tier k-ary fat tree.
    FatTree,
    /// k-ary n-tree (`k`, `hosts`, optional `levels`).
    KaryNtree,
    /// `hosts` switches in a ring, one host on each (a cyclic buffer
    /// dependency on an odd ring: docs/lossless.md).
    Ring,
}

/// Routing policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingKind {
    /// One fixed path per destination.
    Shortest,
    /// By flow hash.
    #[default]
    Ecmp,
    /// Per packet at random.
    Spray,
}

/// `[topology]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// Shape.
    pub kind: TopologyKind,
    /// Hosts (star) or hosts per side (dumbbell).
    pub hosts: Option<u32>,
    /// Fat-tree arity (even), or a k-ary n-tree's k.
    pub k: Option<u32>,
    /// A k-ary n-tree's levels (default: the fewest that hold `hosts`).
    pub levels: Option<u32>,
    /// Link rate (default 100Gbps).
    pub bandwidth: Option<Rate>,
    /// Link latency (default 1us).
    pub latency: Option<Time>,
    /// Largest datagram a link carries (default 9216).
    pub mtu: Option<u32>,
    /// Egress queue per port (default 1MiB).
    pub queue: Option<Size>,
    /// ECN marking threshold.
    pub ecn_threshold: Option<Size>,
    /// Queue depth from which every packet is marked; between
    /// `ecn_threshold` and it, marking is a linear ramp (RED-style).
    pub ecn_max: Option<Size>,
    /// Switch ports trim packets on a full queue instead of dropping them
    /// (NDP/UET packet trimming).
    #[serde(default)]
    pub trim: bool,
    /// Switch ports serve control packets (ACK, SACK, NACK, COMPLETION,
    /// credit) ahead of data, as a two-level priority queue.
    #[serde(default)]
    pub control_priority: bool,
    /// Dumbbell bottleneck rate (default: `bandwidth`).
    pub bottleneck: Option<Rate>,
    /// Routing policy (default ecmp).
    #[serde(default)]
    pub routing: RoutingKind,
    /// Phantom memory and payloads: no bytes stored (memory-equal is
    /// skipped), for scale runs.
    #[serde(default)]
    pub phantom: bool,
    /// The order the simulator runs events in: `time` (default), or
    /// `windows`, node by node within windows as wide as the shortest
    /// link latency (faster on large fabrics; the same model, another
    /// trace: docs/fabric.md, "Event order"). Simulated backend only.
    #[serde(default)]
    pub order: OrderKind,
    /// A lossless fabric: Priority Flow Control (IEEE 802.1Qbb) on every
    /// link (docs/lossless.md). Simulated backend, time order, one thread.
    #[serde(default)]
    pub pfc: bool,
    /// Bytes an ingress may hold in one priority before its switch (or
    /// NIC) sends PAUSE (default 64KiB).
    pub pfc_xoff: Option<Size>,
    /// Bytes at or below which a paused ingress is resumed (default
    /// `pfc_xoff` less 18KiB).
    pub pfc_xon: Option<Size>,
    /// Bytes an ingress may hold beyond `pfc_xoff` (default: per link, the
    /// least that takes what arrives while a PAUSE takes effect).
    pub pfc_headroom: Option<Size>,
    /// Priority of data packets, 0–7 (default 3).
    pub pfc_data_priority: Option<u8>,
    /// Priority of control packets, 0–7 (default 6).
    pub pfc_control_priority: Option<u8>,
}

/// `[topology] order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum OrderKind {
    /// Strictly by time.
    #[default]
    Time,
    /// Lookahead windows, node by node.
    Windows,
}

/// `[nic]`: every engine knob; absent keys keep the engine's defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicSpec {
    /// Largest payload per packet.
    pub mtu_payload: Option<Size>,
    /// Requests above this are segmented.
    pub segment_threshold: Option<Size>,
    /// Segment size.
    pub segment_size: Option<Size>,
    /// DMA OP table slots.
    pub op_table: Option<u16>,
    /// Command queue capacity.
    pub command_queue: Option<usize>,
    /// Registry entries.
    pub registry: Option<usize>,
    /// Registry entry timeout.
    pub registry_timeout: Option<Time>,
    /// Escape channel entries.
    pub escape_entries: Option<usize>,
    /// Escape channel bytes.
    pub escape_bytes: Option<Size>,
    /// Escape channel timeout.
    pub escape_timeout: Option<Time>,
    /// Tombstones on or off.
    pub tombstones: Option<bool>,
    /// Tombstone capacity.
    pub tombstone_capacity: Option<usize>,
    /// `window` (per peer, exactly once) or `fifo` (one bounded set).
    pub tombstone_mode: Option<String>,
    /// `first-only` or `self-describing`.
    pub registration: Option<String>,
    /// `per-packet` or `selective`.
    pub ack: Option<String>,
    /// Coalescing delay of selective ACKs.
    pub sack_delay: Option<Time>,
    /// A one-packet operation's COMPLETION is its acknowledgement.
    pub completion_acks: Option<bool>,
    /// A packet's timer restarts on each acknowledgement from its peer.
    pub rto_restart: Option<bool>,
    /// An operation's last packet out goes again once after two smoothed
    /// RTTs of silence (tail loss probe).
    pub tail_probe: Option<bool>,
    /// While a peer answers nothing, one timeout at a time toward it: the
    /// other timers wait for the copy's answer (F-RTO).
    pub timeout_hold: Option<bool>,
    /// Repair NOOPs for credit counts the peer has not echoed (default
    /// on; off reinstates finding 8).
    pub credit_repair: Option<bool>,
    /// `selective` or `go-back-n`.
    pub retransmit: Option<String>,
    /// After a loss near a sign of congestion keep less out toward the
    /// peer (default on; off reinstates findings 40 and 41).
    pub loss_window: Option<bool>,
    /// Selective-ACK loss detection before the timer (default on).
    pub fast_retransmit: Option<bool>,
    /// A copy answered too soon to be its own is judged spurious (default
    /// on; duplicate reports are judged either way).
    pub spurious_by_timing: Option<bool>,
    /// Initial RTO.
    pub rto_initial: Option<Time>,
    /// RTO floor: a time, or "full-queues" (every queue of a longest
    /// round trip, drained).
    pub rto_min: Option<crate::file::units::RtoFloor>,
    /// RTO ceiling.
    pub rto_max: Option<Time>,
    /// Retries before a request fails.
    pub max_retries: Option<u32>,
    /// Wait after a receiver-not-ready NACK.
    pub rnr_delay: Option<Time>,
    /// Receiver-not-ready retries before a request fails.
    pub max_rnr_retries: Option<u32>,
    /// Receive queue capacity per endpoint.
    pub recv_queue: Option<usize>,
    /// Transmit queue capacity.
    pub transmit_queue: Option<usize>,
    /// Most READ response bytes a requester has asked for and not yet
    /// received (default: unlimited).
    pub read_window: Option<Size>,
    /// NIC descriptor ring slots.
    pub descriptor_ring: Option<usize>,
    /// Ring refill low-water mark.
    pub ring_low_water: Option<usize>,
    /// Most scatter-gather entries per work request.
    pub max_sge: Option<usize>,
    /// Translation cache: sets.
    pub translation_sets: Option<u32>,
    /// Translation cache: lines per set.
    pub translation_ways: Option<u32>,
    /// Translation table entries per cache line.
    pub translation_entries_per_line: Option<u32>,
    /// Bytes of reduce data one descriptor (and REDUCE packet) carries.
    pub reduce_data_limit: Option<Size>,
    /// Reduce chunks a NIC tracks at once.
    pub reduce_chunks: Option<usize>,
    /// Congestion control: "none" (default), "nscc", "dcqcn" or "rccc".
    pub cc: Option<String>,
    /// The unloaded round trip controllers start from (default: worked
    /// out from the topology's longest path).
    pub cc_base_rtt: Option<crate::file::units::Time>,
    /// Queueing delay a delay-based controller aims for (default: one base
    /// RTT).
    pub cc_target_delay: Option<crate::file::units::Time>,
    /// Bytes a receiver-credit (`rccc`) sender sends before any grant
    /// (default: an eighth of the bandwidth-delay product).
    pub cc_unscheduled: Option<Size>,
    /// Path spreading: "single" (default), "spray" or "reps".
    pub multipath: Option<String>,
    /// Source ports (entropies) spray and reps use.
    pub entropies: Option<u16>,
}

/// Workload kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// One operation from `src` to `dst`.
    Single,
    /// `count` operations from `src` to `dst`, all posted at `start`.
    Many,
    /// `count` round trips: `src` writes to `dst`, `dst` answers when the
    /// write lands (one-way latency = half the round trip).
    Pingpong,
    /// `count` operations from `src` to `dst` with at most `window`
    /// outstanding (osu_bw).
    Window,
    /// Every host to every other host, `count` rounds.
    AllToAll,
    /// Every host in `srcs` (default: all but `dst`) to `dst`.
    Incast,
    /// `count` operations between random distinct hosts.
    RandomPairs,
    /// A random permutation: every host sends to exactly one other.
    Permutation,
    /// At `start`, host `dst` reuses the buffers of every WRITE that
    /// completed into it (fills them with new bytes).
    Reuse,
    /// Messaging pingpong per size (osu_latency): one-way latency.
    MsgLatency,
    /// Messaging window bandwidth per size (osu_bw, window 64).
    MsgBw,
    /// Messaging bidirectional bandwidth per size (osu_bibw).
    MsgBibw,
    /// A non-contiguous ping-pong between `src` and `dst` (pack,
    /// scatter-gather lists or indirect keys).
    Noncontig,
    /// `count` messages with the bimodal cluster size mix.
    MsgMixed,
    /// A collective (allreduce, reduce or broadcast) over every host,
    /// offloaded to the NICs, done by host software, or both.
    Collective,
    /// `count` flows between random distinct hosts, sizes drawn from
    /// `cdf`, starts a Poisson process offering `load` of every host's
    /// link (the datacenter studies' workload; reports flow completion
    /// times and slowdown).
    Flows,
}

impl WorkloadKind {
    /// Whether it is one of the RDMA workloads (operations posted
    /// straight on the NICs), not messaging, non-contiguous or collective.
    pub fn is_rdma(self) -> bool {
        !self.is_messaging() && !matches!(self, WorkloadKind::Noncontig | WorkloadKind::Collective)
    }

    /// Its name in a scenario file.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Single => "single",
            WorkloadKind::Many => "many",
            WorkloadKind::Pingpong => "pingpong",
            WorkloadKind::Window => "window",
            WorkloadKind::AllToAll => "all-to-all",
            WorkloadKind::Incast => "incast",
            WorkloadKind::RandomPairs => "random-pairs",
            WorkloadKind::Flows => "flows",
            WorkloadKind::Permutation => "permutation",
            WorkloadKind::Reuse => "reuse",
            WorkloadKind::MsgLatency => "msg-latency",
            WorkloadKind::MsgBw => "msg-bw",
            WorkloadKind::MsgBibw => "msg-bibw",
            WorkloadKind::Noncontig => "noncontig",
            WorkloadKind::MsgMixed => "msg-mixed",
            WorkloadKind::Collective => "collective",
        }
    }

    /// Whether it runs on the messaging layer.
    pub fn is_messaging(self) -> bool {
        matches!(
            self,
            WorkloadKind::MsgLatency
                | WorkloadKind::MsgBw
                | WorkloadKind::MsgBibw
                | WorkloadKind::MsgMixed
        )
    }
}

/// Message sizes: a list, or `"1B..4MiB"` (every power of two between).
#[derive(Debug, Clone)]
pub enum SizesSpec {
    /// `["1B", "4KiB", ...]`.
    List(Vec<Size>),
    /// One size (`"4KiB"` or `4096`; what `udrma sweep --set` writes).
    One(Size),
    /// `"1B..4MiB"`.
    Range(String),
}

/// Read by hand so that a wrong value says what is wrong with it (an
/// untagged enum says only that no form matched).
impl<'de> Deserialize<'de> for SizesSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{self, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SizesSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a size (4096 or \"4KiB\"), a list of sizes, or \"FROM..TO\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SizesSpec, E> {
                if s.contains("..") {
                    return Ok(SizesSpec::Range(s.to_string()));
                }
                crate::file::units::parse_size(s)
                    .map(|b| SizesSpec::One(Size(b)))
                    .map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<SizesSpec, E> {
                self.visit_str(&n.to_string())
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<SizesSpec, E> {
                self.visit_str(&n.to_string())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SizesSpec, A::Error> {
                let mut sizes = Vec::new();
                while let Some(s) = seq.next_element::<Size>()? {
                    sizes.push(s);
                }
                Ok(SizesSpec::List(sizes))
            }
        }
        d.deserialize_any(V)
    }
}

/// Operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// RDMA WRITE.
    #[default]
    Write,
    /// RDMA READ.
    Read,
    /// SEND into a posted receive buffer.
    Send,
}

/// `[[workload]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// What.
    pub kind: WorkloadKind,
    /// Operation (default write).
    #[serde(default)]
    pub op: OpKind,
    /// Source host (`h0`).
    pub src: Option<String>,
    /// Destination host.
    pub dst: Option<String>,
    /// Sources of an incast.
    #[serde(default)]
    pub srcs: Vec<String>,
    /// A permutation's flows given explicitly, `[["h3", "h7"], ...]`
    /// (source, destination), instead of one drawn from the seed: a job
    /// copied from another simulator's connection matrix.
    #[serde(default)]
    pub pairs: Vec<[String; 2]>,
    /// Bytes per operation.
    pub size: Option<Size>,
    /// How many (operations, round trips or rounds).
    #[serde(default = "one_u32")]
    pub count: u32,
    /// Most outstanding (window workloads).
    pub window: Option<u32>,
    /// When it starts.
    pub start: Option<Time>,
    /// Message sizes of `msg-*` workloads (default: `size`).
    pub sizes: Option<SizesSpec>,
    /// Untimed iterations before the timed ones, per size (`msg-*`,
    /// default 2; a collective by an MPI algorithm, default 1).
    pub warmup: Option<u32>,
    /// Non-contiguous: `pack`, `sgl`, `indirect` or `auto`.
    pub method: Option<String>,
    /// Non-contiguous, or a collective by an MPI algorithm: `messaging`
    /// (the messaging layer, default) or `rdma` (RDMA WRITEs).
    pub form: Option<String>,
    /// Non-contiguous: `vector` (default), `transpose`, `halo`, `face-x`,
    /// `face-y` or `face-z`.
    pub layout: Option<String>,
    /// Non-contiguous: bytes per block (`vector`, `transpose`).
    pub block: Option<Size>,
    /// A collective by an MPI algorithm: most bytes per message of the
    /// ring allgatherv's pipeline (MPICH's default 32 KiB).
    pub pipeline: Option<Size>,
    /// Non-contiguous: blocks (`vector`), or the side of the matrix, grid
    /// or cube.
    pub blocks: Option<u64>,
    /// Non-contiguous: bytes between block starts (`vector`; default twice
    /// the block).
    pub stride: Option<Size>,
    /// Non-contiguous: the receiver's layout, `same` (default) or
    /// `contiguous`.
    pub peer_layout: Option<String>,
    /// Non-contiguous: halo width in points (`halo`, default 1).
    pub halo: Option<u64>,
    /// Non-contiguous: keep indirect keys between transfers (default true).
    pub key_cache: Option<bool>,
    /// Collective: `allreduce` (default), `reduce` or `broadcast`; with an
    /// MPI `algorithm` also `allgather`, `alltoall`, `reduce_scatter` and
    /// `barrier`.
    pub collective: Option<String>,
    /// Collective: the ALU operation (`sum` default, `min`, `max`,
    /// `minloc`, `maxloc`, `land`, `lor`, `lxor`, `band`, `bor`, `bxor`).
    pub reduce_op: Option<String>,
    /// Collective: element type (`f64` default, `f32`, `i32`, `i64`, `u32`,
    /// `u64`).
    pub datatype: Option<String>,
    /// Collective: radix of the NIC's k-nomial tree (default: follows the
    /// topology).
    pub fan_in: Option<u32>,
    /// Collective: time between the common starts of iterations.
    pub interval: Option<Time>,
    /// Collective: hosts taking part, `h0` up (default: all).
    pub nodes: Option<u32>,
    /// Collective: the MPI algorithm run over the messaging layer
    /// (`ring`, `recursive_doubling`, ...), or `nic` for the NIC study.
    pub algorithm: Option<String>,
    /// Flows: the offered load, a share of every host's link (0 to 1).
    pub load: Option<f64>,
    /// Flows: the size distribution, `[[bytes, cumulative probability],
    /// ...]`, sizes rising, the last probability 1; or the name of a
    /// published one (`"websearch"`, `"datamining"`, `"hadoop"`).
    pub cdf: Option<CdfSpec>,
}

impl WorkloadSpec {
    /// A collective run by one of MPI's algorithms (`algorithm` set, and
    /// not to `nic`, the NIC study).
    pub fn is_scheduled(&self) -> bool {
        self.kind == WorkloadKind::Collective
            && self.algorithm.as_deref().is_some_and(|a| a != "nic")
    }
}

fn one_u32() -> u32 {
    1
}

/// Fault models by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// Random loss (`p`, `correlation`).
    Loss,
    /// Gilbert-Elliott (`p`, `r`, `loss_good`, `loss_bad`).
    GilbertElliott,
    /// Duplication (`p`, `copies`, `correlation`).
    Duplicate,
    /// netem reorder (`p`, `correlation`, `gap`, `delay`, `limit`).
    Reorder,
    /// Delay (`delay`, `jitter`, `distribution`, `limit`).
    Delay,
    /// Bit corruption (`p`, `bits`).
    Corrupt,
    /// Rate shaping (`rate`, `limit`).
    Rate,
    /// Drop all (link down).
    Down,
    /// Partition (`a`, `b`, `two_way`).
    Partition,
    /// Memory registrations fail with probability `p` on the hosts in
    /// `src` (default all), within `from`..`until` (messaging layer).
    RegistrationFailure,
}

impl ModelKind {
    /// Its name in a scenario file.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Loss => "loss",
            ModelKind::GilbertElliott => "gilbert-elliott",
            ModelKind::Duplicate => "duplicate",
            ModelKind::Reorder => "reorder",
            ModelKind::Delay => "delay",
            ModelKind::Corrupt => "corrupt",
            ModelKind::Rate => "rate",
            ModelKind::Down => "down",
            ModelKind::Partition => "partition",
            ModelKind::RegistrationFailure => "registration-failure",
        }
    }
}

/// `[[fault]]`: a model and its target.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Name (default: `fault<i>`).
    pub name: Option<String>,
    /// Model.
    pub model: ModelKind,
    /// Probability.
    pub p: Option<f64>,
    /// Correlation with the previous draw.
    pub correlation: Option<f64>,
    /// Gilbert-Elliott P(bad → good).
    pub r: Option<f64>,
    /// Gilbert-Elliott loss in the good state.
    pub loss_good: Option<f64>,
    /// Gilbert-Elliott loss in the bad state.
    pub loss_bad: Option<f64>,
    /// Duplicate copies.
    pub copies: Option<u32>,
    /// Reorder gap.
    pub gap: Option<u32>,
    /// Delay (delay and reorder).
    pub delay: Option<Time>,
    /// Jitter scale.
    pub jitter: Option<Time>,
    /// `uniform`, `normal` or `pareto`.
    pub distribution: Option<String>,
    /// Queue limit in packets.
    pub limit: Option<u32>,
    /// Bits flipped.
    pub bits: Option<u32>,
    /// Shaping rate.
    pub rate: Option<Rate>,
    /// Partition side A.
    #[serde(default)]
    pub a: Vec<String>,
    /// Partition side B.
    #[serde(default)]
    pub b: Vec<String>,
    /// Partition both ways.
    #[serde(default)]
    pub two_way: bool,
    /// Links by name.
    #[serde(default)]
    pub links: Vec<String>,
    /// `forward` or `reverse`.
    pub direction: Option<String>,
    /// Flow sources.
    #[serde(default)]
    pub src: Vec<String>,
    /// Flow destinations.
    #[serde(default)]
    pub dst: Vec<String>,
    /// Opcodes (`write`, `read-request`, `ack`, ...).
    #[serde(default)]
    pub opcodes: Vec<String>,
    /// Flags that must be set (`first`, `last`, `retransmit`, ...).
    #[serde(default)]
    pub flags: Vec<String>,
    /// Window start.
    pub from: Option<Time>,
    /// Window end.
    pub until: Option<Time>,
    /// Every n-th matching packet.
    pub every: Option<u64>,
    /// Which one in each period.
    pub offset: Option<u64>,
    /// At most this many times.
    pub times: Option<u64>,
}

/// `[[pause]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PauseSpec {
    /// Host.
    pub host: String,
    /// Start.
    pub from: Time,
    /// End.
    pub until: Time,
}

/// `[checks]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChecksSpec {
    /// Checks not to run.
    #[serde(default)]
    pub skip: Vec<String>,
    /// The scenario expects some operations to fail (a fault plan that is
    /// not finite, a congestion collapse): `all-succeeded` is not run, and
    /// failures are only reported in the notes.
    #[serde(default)]
    pub expect_failures: bool,
}

/// `[outputs]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputsSpec {
    /// pcap file.
    pub pcap: Option<String>,
    /// Links to capture (default: all).
    #[serde(default)]
    pub pcap_links: Vec<String>,
    /// Trace file (postcard; `.jsonl` for JSON lines).
    pub trace: Option<String>,
}
