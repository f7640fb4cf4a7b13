//! A simulation built in Rust rather than TOML: a topology, faults, one
//! host app per host, a run over virtual time, and the invariants that
//! hold for any app. This is the surface a researcher's own crate uses
//! from its tests, as `turmoil` is used from `cargo test`.
//!
//! ```
//! use udrma_fabric::sim::Sim;
//! use udrma_faults::{Model, Target};
//! use udrma_host::app::from_fn;
//! use udrma_nic::{Access, Event, WorkRequest};
//! use udrma_proto::NodeAddr;
//!
//! let (h0, h1) = (NodeAddr(0), NodeAddr(1));
//! // Two hosts on one link that loses 5 % of packets.
//! let mut sim = Sim::builder()
//!     .seed(7)
//!     .fault("loss", Target::any(), Model::Loss { p: 0.05, correlation: 0.0 })
//!     .build()
//!     .unwrap();
//! let src = sim.nic_mut(h0).register(0x1000, 64 << 10, Access::ALL);
//! let dst = sim.nic_mut(h1).register(0x9000, 64 << 10, Access::ALL);
//! sim.nic_mut(h0).memory_mut().region_mut(src).unwrap().bytes.fill(0xab);
//!
//! // h0 writes 64 KiB to h1 when it starts, and counts its completions.
//! let wr = WorkRequest::write(h1, src, 0x1000, 64 << 10, dst.0, 0x9000);
//! let mut done = 0;
//! sim.add_app(h0, from_fn(move |_now, _nic, event| {
//!     if let Event::Completed { result, .. } = event {
//!         assert!(result.is_ok());
//!         done += 1;
//!     }
//! }))
//! .unwrap();
//! let now = sim.world().now();
//! sim.nic_mut(h0).post(now, wr).unwrap();
//! sim.service(h0);
//!
//! let outcome = sim.run();
//! outcome.assert_invariants();
//! let landed = &sim.world().nic(h1).memory().region(dst).unwrap().bytes;
//! assert!(landed.iter().all(|b| *b == 0xab));
//! ```

use std::collections::BTreeMap;

use udrma_faults::{Model, Rule, RuleSet, Target};
use udrma_host::App;
use udrma_nic::{Nic, NicConfig, WrId};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::routing::Policy;
use crate::topology::{LinkParams, Topology};
use crate::world::{FabricConfig, FabricError, World};

/// Builds a [`Sim`]: every setting has a default (two hosts on one
/// 100 Gb/s, 1 µs link; seed 1; the default NIC; no faults; 1 s limit).
pub struct SimBuilder {
    topology: Option<Topology>,
    cfg: FabricConfig,
    faults: Vec<(String, Target, Model)>,
    limit: Duration,
}

impl SimBuilder {
    /// The topology (default: [`Topology::pair`] of default links).
    pub fn topology(mut self, topology: Topology) -> SimBuilder {
        self.topology = Some(topology);
        self
    }

    /// The master seed: every random stream (faults, routing) derives
    /// from it, so the same seed gives the same run.
    pub fn seed(mut self, seed: u64) -> SimBuilder {
        self.cfg.seed = seed;
        self
    }

    /// Every host's NIC configuration.
    pub fn nic(mut self, nic: NicConfig) -> SimBuilder {
        self.cfg.nic = nic;
        self
    }

    /// How switches choose among equal next hops.
    pub fn routing(mut self, policy: Policy) -> SimBuilder {
        self.cfg.routing = policy;
        self
    }

    /// Adds a fault rule (rules apply in the order added; the first
    /// verdict other than pass wins). `target` narrows it to links,
    /// directions, flows, opcodes, flags, a time window or every n-th
    /// packet.
    pub fn fault(mut self, name: &str, target: Target, model: Model) -> SimBuilder {
        self.faults.push((name.to_string(), target, model));
        self
    }

    /// Simulated time after which [`Sim::run`] stops (default 1 s).
    pub fn time_limit(mut self, limit: Duration) -> SimBuilder {
        self.limit = limit;
        self
    }

    /// The world, with its fault rules checked (a bad probability or an
    /// unknown link is an error here, not a panic later).
    pub fn build(self) -> Result<Sim, FabricError> {
        let topology = self
            .topology
            .unwrap_or_else(|| Topology::pair(LinkParams::default()));
        let mut rules = RuleSet::new();
        for (name, target, model) in self.faults {
            rules.push(Rule::new(self.cfg.seed, &name, target, model)?);
        }
        Ok(Sim {
            world: World::new(topology, self.cfg, rules)?,
            limit: Instant::ZERO + self.limit,
        })
    }
}

/// A simulated world with host apps, and what a run of it proved.
pub struct Sim {
    world: World,
    limit: Instant,
}

impl Sim {
    /// A builder with every default.
    pub fn builder() -> SimBuilder {
        SimBuilder {
            topology: None,
            cfg: FabricConfig::default(),
            faults: Vec::new(),
            limit: Duration::from_millis(1000),
        }
    }

    /// The world (NICs, statistics, trace).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The world, to schedule pauses, tap links or set a trace sink.
    pub fn world_mut(&mut self) -> &mut World {
        &mut self.world
    }

    /// Host `h`'s NIC, to register memory or post requests before the
    /// run (call [`Sim::service`] after posting). Panics if `h` is not a
    /// host of the topology.
    pub fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        self.world.nic_mut(h)
    }

    /// After working on host `h`'s NIC directly: lets it send.
    pub fn service(&mut self, h: NodeAddr) {
        let _ = self.world.service(h);
    }

    /// Installs and starts `app` on host `h`.
    pub fn add_app(&mut self, h: NodeAddr, app: impl App) -> Result<(), FabricError> {
        self.world.set_app(h, Box::new(app))
    }

    /// Host `h`'s app, if it is a `T`.
    pub fn app<T: App>(&self, h: NodeAddr) -> Option<&T> {
        self.world.app::<T>(h)
    }

    /// Runs until nothing is left to happen or the time limit, then
    /// checks the invariants that hold for any app.
    pub fn run(&mut self) -> Outcome {
        // A wake-up past the limit may be stale (its deadline was
        // cancelled): only a live event means work was left.
        let quiet = self.world.run_until(self.limit) || self.world.peek_time().is_none();
        let mut violations = Vec::new();
        let n = self.world.topology().n_hosts() as u32;
        for h in (0..n).map(NodeAddr) {
            let nic = self.world.nic(h);
            // Invariant 6: bounded state.
            if let Some(what) = nic.occupancy().violation() {
                violations.push(format!("{h}: {what} passed its limit (bounded state)"));
            }
            // Invariant 1: every request completes, once.
            let outstanding = nic.occupancy().requests.0;
            if outstanding > 0 {
                violations.push(format!(
                    "{h}: {outstanding} requests never completed (all-complete)"
                ));
            }
        }
        for (h, wr) in self.world.completed_twice() {
            violations.push(format!(
                "{h}: request {wr:?} completed twice (exactly-once)"
            ));
        }
        // Invariant 8: liveness.
        if !quiet {
            violations.push(format!(
                "work left at the time limit ({})",
                self.limit - Instant::ZERO
            ));
        } else if !self.world.is_idle() {
            violations.push("the run went quiet with NIC state left (liveness)".into());
        }
        for h in self.world.unfinished_apps() {
            violations.push(format!("{h}: its app is not done"));
        }
        Outcome {
            now: self.world.now(),
            trace_hash: self.world.trace().hash(),
            violations,
        }
    }
}

/// What [`Sim::run`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Simulated time at the end.
    pub now: Instant,
    /// The run's trace hash (same seed, same hash).
    pub trace_hash: u64,
    /// Invariants that failed, one line each (empty: all held).
    pub violations: Vec<String>,
}

impl Outcome {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// Panics with every failed invariant, for tests.
    #[track_caller]
    pub fn assert_invariants(&self) {
        assert!(
            self.violations.is_empty(),
            "invariants failed:\n  {}",
            self.violations.join("\n  ")
        );
    }
}

/// Completions seen per request on hosts that run an app (to catch a
/// request completed twice).
#[derive(Debug, Default)]
pub(crate) struct CompletionLog {
    seen: BTreeMap<(NodeAddr, WrId), u32>,
}

impl CompletionLog {
    pub(crate) fn record(&mut self, h: NodeAddr, wr: WrId) {
        *self.seen.entry((h, wr)).or_default() += 1;
    }

    pub(crate) fn twice(&self) -> Vec<(NodeAddr, WrId)> {
        self.seen
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, _)| *k)
            .collect()
    }
}
