//! What each workload family adds to a report: the messaging layer's
//! per-size rows, the collective study's two sides, and the
//! non-contiguous ping-pong's figures (the summary's lines for them are
//! `Report`'s own).

use std::collections::BTreeMap;

use serde::Serialize;

/// One row of the per-size table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SizeRow {
    /// Workload index.
    pub workload: usize,
    /// Workload kind (`msg-latency`, ...).
    pub kind: String,
    /// Message size in bytes (for the mix: the power-of-two bucket).
    pub size: u64,
    /// Protocol the timed messages went by (the most used).
    pub protocol: String,
    /// Timed messages.
    pub messages: u64,
    /// One-way latency (latency, mix) or time per message (bandwidth), µs.
    pub latency_us: f64,
    /// Payload bandwidth in MB/s (10^6 bytes per second).
    pub bandwidth_mbs: f64,
}

/// `messaging` in the JSON report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MessagingReport {
    /// Messages sent eagerly.
    pub eager: u64,
    /// By R3.
    pub r3: u64,
    /// By RGET.
    pub rget: u64,
    /// By RPUT.
    pub rput: u64,
    /// NOOP credit messages.
    pub noops: u64,
    /// Chunks that waited for a credit.
    pub credit_stalls: u64,
    /// Protocol fallbacks (credits, registration).
    pub fallbacks: u64,
    /// Per-size results.
    pub sizes: Vec<SizeRow>,
}

/// Minimum, median, 99th percentile, maximum and mean, µs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// One version of a collective (NIC offload or host software).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CollectiveSide {
    /// Per iteration: from the common start until every node holds the
    /// result (for a reduce: the root).
    pub completion_us: Spread,
    /// Per node and iteration: from the common start until that node
    /// holds the result.
    pub per_node_us: Spread,
    /// Iterations every result holder finished.
    pub completed_iterations: u32,
    /// Each iteration's completion (every result holder done), µs, in
    /// iteration order; `null` where one did not finish.
    pub per_iteration_us: Vec<Option<f64>>,
    /// Triggered descriptors that fired (NIC only).
    pub descriptors_fired: u64,
    /// Reduce packets (NIC) or data packets (host) sent the first time.
    pub packets: u64,
    /// Of those, sent again after a timeout.
    pub retransmits: u64,
    /// Duplicate reduce packets dropped (NIC only).
    pub duplicates: u64,
}

/// What the report says about a collective study.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CollectiveReport {
    /// `allreduce`, `reduce` or `broadcast`.
    pub collective: String,
    /// ALU operation.
    pub op: String,
    /// Element type.
    pub datatype: String,
    /// Bytes of data per node (locations included).
    pub bytes: u64,
    /// Elements per node.
    pub elements: u32,
    /// Nodes taking part.
    pub nodes: u32,
    /// Radix of the NIC's k-nomial tree.
    pub radix: u32,
    /// Children of the NIC tree's root.
    pub fan_in: u32,
    /// Height of the NIC tree.
    pub depth: u8,
    /// Height of the host baseline's binomial tree.
    pub host_depth: u8,
    /// Iterations.
    pub iterations: u32,
    /// The NIC offload, when it ran.
    pub nic: Option<CollectiveSide>,
    /// The host baseline, when it ran.
    pub host: Option<CollectiveSide>,
    /// Host median over NIC median (0 when either did not run).
    pub speedup: f64,
}

/// What the report says about a noncontig run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NoncontigReport {
    /// Method asked for.
    pub requested: String,
    /// Method used (what `auto` chose).
    pub method: String,
    /// `messaging` or `rdma`.
    pub form: String,
    /// Layout name.
    pub layout: String,
    /// Blocks on the sender's side, and on the receiver's.
    pub blocks: [usize; 2],
    /// Bytes per transfer.
    pub bytes: u64,
    /// One-way latency: median and mean of the timed round trips, µs.
    pub latency_p50_us: f64,
    /// Mean one-way latency, µs.
    pub latency_mean_us: f64,
    /// Bytes per one-way latency, MB/s.
    pub bandwidth_mbs: f64,
    /// Work requests posted per transfer.
    pub work_requests: f64,
    /// Bytes copied by host CPUs per transfer (both sides).
    pub bytes_copied: f64,
    /// Indirect keys created, both hosts, whole run.
    pub keys_created: u64,
    /// Translation lines found and fetched, both hosts.
    pub translation: [u64; 2],
    /// The cost estimate of each method, µs (latency excluded).
    pub estimates_us: BTreeMap<String, f64>,
    /// With `method = "auto"`: each method's one-way p50 on the simulated
    /// fabric, µs, the lowest chosen (`null`: it did not finish cleanly);
    /// empty otherwise.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub measured_us: BTreeMap<String, Option<f64>>,
}
