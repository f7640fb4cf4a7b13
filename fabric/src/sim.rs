//! A simulation built in Rust rather than TOML: a topology, faults, one
//! host app per host, a run over virtual time, and the invariants that
//! hold for any app. This is the surface a researcher's own crate uses
//! from its tests, as `turmoil` is used from `cargo test`.
//!
//! ```
//! use udrma_app::from_fn;
//! use udrma_fabric::sim::Sim;
//! use udrma_faults::{Model, Target};
//! use udrma_nic::{Access, Event, Transfer};
//! use udrma_proto::NodeAddr;
//!
//! // Two hosts on one link that loses 5 % of packets.
//! let mut sim = Sim::builder()
//!     .seed(7)
//!     .fault("loss", Target::any(), Model::Loss { p: 0.05, correlation: 0.0 })
//!     .build()
//!     .unwrap();
//! let src = sim.nic_mut("h0").unwrap().register(0x1000, 64 << 10, Access::ALL);
//! let dst = sim.nic_mut("h1").unwrap().register(0x9000, 64 << 10, Access::ALL);
//! sim.nic_mut("h0").unwrap().memory_mut().region_mut(src).unwrap().bytes.fill(0xab);
//!
//! // h0 counts its completions; it writes 64 KiB to h1 now.
//! let mut done = 0;
//! sim.add_app("h0", from_fn(move |_now, _nic, event| {
//!     if let Event::Completed { .. } = event {
//!         done += 1;
//!     }
//! }))
//! .unwrap();
//! let wr = Transfer {
//!     peer: NodeAddr(1),
//!     local: src,
//!     local_addr: 0x1000,
//!     remote: dst,
//!     remote_addr: 0x9000,
//!     len: 64 << 10,
//! };
//! sim.post("h0", wr.write()).unwrap();
//!
//! // Every invariant held, and every request succeeded.
//! let outcome = sim.run();
//! outcome.assert_invariants();
//! let landed = &sim.world().nic(NodeAddr(1)).memory().region(dst).unwrap().bytes;
//! assert!(landed.iter().all(|b| *b == 0xab));
//! ```

use udrma_app::App;
use udrma_faults::{Model, Rule, RuleSet, Target};
use udrma_nic::{Nic, NicConfig, WorkRequest, WrId};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::routing::Policy;
use crate::topology::{LinkParams, Topology};
use crate::world::{FabricConfig, FabricError, World};

/// A host, by address (`NodeAddr(1)`) or by name (`"h1"`).
pub trait Host {
    /// Its address (an error for a name that is not `h` and a number).
    fn addr(&self) -> Result<NodeAddr, FabricError>;
}

impl Host for NodeAddr {
    fn addr(&self) -> Result<NodeAddr, FabricError> {
        Ok(*self)
    }
}

impl Host for &str {
    fn addr(&self) -> Result<NodeAddr, FabricError> {
        self.strip_prefix('h')
            .filter(|n| !n.starts_with('+'))
            .and_then(|n| n.parse().ok())
            .map(NodeAddr)
            .ok_or_else(|| FabricError::HostName(self.to_string()))
    }
}

/// Builds a [`Sim`]: every setting has a default (two hosts on one
/// 100 Gb/s, 1 µs link; seed 1; the default NIC; no faults; 1 s limit;
/// every request must succeed).
pub struct SimBuilder {
    topology: Option<Topology>,
    cfg: FabricConfig,
    faults: Vec<(String, Target, Model)>,
    limit: Duration,
    expect_failures: bool,
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

    /// Failed requests are expected (a fault plan no retry budget
    /// survives): [`Sim::run`] then does not require every request to
    /// succeed. Off by default, so a READ that fails `BadRkey` fails the
    /// run.
    pub fn expect_failures(mut self, expect: bool) -> SimBuilder {
        self.expect_failures = expect;
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
            expect_failures: self.expect_failures,
        })
    }
}

/// A simulated world with host apps, and what a run of it proved.
pub struct Sim {
    world: World,
    limit: Instant,
    expect_failures: bool,
}

impl Sim {
    /// A builder with every default.
    pub fn builder() -> SimBuilder {
        SimBuilder {
            topology: None,
            cfg: FabricConfig::default(),
            faults: Vec::new(),
            limit: Duration::from_millis(1000),
            expect_failures: false,
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

    /// Host `h`'s address, checked against the topology.
    fn host(&self, h: impl Host) -> Result<NodeAddr, FabricError> {
        let a = h.addr()?;
        let n = self.world.topology().n_hosts();
        if a.0 as usize >= n {
            return Err(FabricError::NoHost(a.0, n));
        }
        Ok(a)
    }

    /// Host `h`'s NIC, to register memory or look at it (post with
    /// [`Sim::post`]; after posting on the NIC itself, call
    /// [`Sim::service`]).
    pub fn nic_mut(&mut self, h: impl Host) -> Result<&mut Nic, FabricError> {
        let h = self.host(h)?;
        Ok(self.world.nic_mut(h))
    }

    /// Posts `wr` on host `h` now and lets the NIC send it.
    pub fn post(&mut self, h: impl Host, wr: WorkRequest) -> Result<WrId, FabricError> {
        let h = self.host(h)?;
        self.world.post(h, wr)
    }

    /// After working on host `h`'s NIC directly: lets it send.
    pub fn service(&mut self, h: impl Host) -> Result<(), FabricError> {
        let h = self.host(h)?;
        self.world.service(h)
    }

    /// Installs and starts `app` on host `h`.
    pub fn add_app(&mut self, h: impl Host, app: impl App) -> Result<(), FabricError> {
        let h = self.host(h)?;
        self.world.set_app(h, Box::new(app))
    }

    /// Host `h`'s app, if it is a `T`.
    pub fn app<T: App>(&self, h: impl Host) -> Option<&T> {
        self.world.app::<T>(h.addr().ok()?)
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
        // Every request succeeded, unless failures were expected.
        let (failed, first) = self.world.failed_requests();
        if !self.expect_failures && failed > 0 {
            let shown: Vec<String> = first
                .iter()
                .map(|(h, wr, e)| format!("{h} request {wr:?}: {e}"))
                .collect();
            let requests = if failed == 1 { "request" } else { "requests" };
            violations.push(format!(
                "{failed} {requests} failed, first {} (all-succeeded; SimBuilder::expect_failures if the faults make failures expected)",
                shown.join("; ")
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
