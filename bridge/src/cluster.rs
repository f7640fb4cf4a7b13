//! The hosts of a scenario on real UDP sockets, named like the scenario's
//! hosts (`h0` is `NodeAddr(0)`, ...), on one shared clock. The scenario
//! runner drives a cluster the way it drives the simulated world: post,
//! look at events, wait for the next thing to happen.
//!
//! [`Cluster::loopback`] holds every host in this process, each on its
//! own loopback socket: they know each other's addresses from the start,
//! so no HELLO is needed; every datagram still crosses the kernel's UDP
//! stack. [`Cluster::partial`] holds some hosts here and knows where the
//! others are (`udrma host ... --peer h0=ADDR`): [`Cluster::meet`]
//! introduces them in-band with HELLO before anything else is sent.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;

use udrma_nic::{Event, Instant, Nic, PostError, WorkRequest, WrId};
use udrma_proto::NodeAddr;

use crate::clock::Clock;
use crate::egress::{EgressStats, FaultPlan};
use crate::endpoint::GOODBYE;
use crate::{BridgeConfig, BridgeError, Endpoint};

/// One endpoint's wait for its socket.
type Readable<'a> = Pin<Box<dyn Future<Output = Result<(), BridgeError>> + 'a>>;

/// `n` endpoints on loopback, driven together.
pub struct Cluster {
    rt: tokio::runtime::Runtime,
    /// The local hosts' endpoints.
    eps: Vec<Endpoint>,
    /// Which host each endpoint is, and the hosts in all.
    n_hosts: usize,
    /// Remote hosts and their addresses.
    remotes: Vec<(NodeAddr, SocketAddr)>,
    clock: Clock,
    /// The goodbye between processes.
    bye: Goodbye,
    /// Events raised while the hosts met (a quick peer's first WRITEs),
    /// kept for the runner.
    early: Vec<(NodeAddr, Event)>,
    /// Whether [`Cluster::meet`] has run (or there was no one to meet).
    met: bool,
}

/// Where the goodbye between processes stands.
#[derive(Debug, Default)]
struct Goodbye {
    /// Remote hosts that said they are done.
    peers_done: std::collections::BTreeSet<NodeAddr>,
    /// Remote hosts that answered this one's goodbye.
    acked: std::collections::BTreeSet<NodeAddr>,
    /// When this one last said goodbye.
    sent_at: Option<std::time::Instant>,
    /// When every peer had said goodbye and heard ours.
    all_gone_at: Option<std::time::Instant>,
}

/// How often a done host repeats its goodbye until each peer answered.
const DONE_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a host stays after the goodbyes are complete, answering the
/// goodbyes of a peer whose answer from us was lost (it repeats every
/// `DONE_EVERY`).
const GRACE: std::time::Duration = std::time::Duration::from_millis(300);

impl core::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cluster")
            .field("local", &self.eps.len())
            .field("remote", &self.remotes.len())
            .finish()
    }
}

impl Cluster {
    /// Binds `n` endpoints at 127.0.0.1 (ports the kernel picks), host `i`
    /// with `cfg` and the egress faults `faults(i)`, and tells each the
    /// others' addresses.
    pub fn loopback(
        n: usize,
        cfg: &BridgeConfig,
        faults: impl Fn(NodeAddr) -> FaultPlan,
    ) -> Result<Cluster, BridgeError> {
        let rt = runtime()?;
        let clock = Clock::start();
        let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        let mut eps = Vec::with_capacity(n);
        for i in 0..n {
            let node = NodeAddr(i as u32);
            let cfg = BridgeConfig {
                faults: faults(node),
                max_peers: cfg.max_peers.max(n),
                ..cfg.clone()
            };
            eps.push(rt.block_on(Endpoint::bind_as(any, node, cfg, clock))?);
        }
        let addrs: Vec<SocketAddr> = eps.iter().map(Endpoint::local_addr).collect();
        for ep in &mut eps {
            for (j, addr) in addrs.iter().enumerate() {
                if *addr != ep.local_addr() {
                    ep.add_peer(NodeAddr(j as u32), *addr);
                }
            }
        }
        Ok(Cluster::assemble(rt, eps, n, Vec::new(), clock))
    }

    /// Host `local` of `n_hosts` here, bound at `bind`, with egress faults
    /// `faults`; the other hosts at `remotes` (every host but `local`
    /// must be listed). Call [`Cluster::meet`] before running.
    pub fn partial(
        n_hosts: usize,
        local: NodeAddr,
        bind: SocketAddr,
        remotes: Vec<(NodeAddr, SocketAddr)>,
        cfg: &BridgeConfig,
        faults: FaultPlan,
    ) -> Result<Cluster, BridgeError> {
        let rt = runtime()?;
        let clock = Clock::start();
        let cfg = BridgeConfig {
            faults,
            max_peers: cfg.max_peers.max(n_hosts),
            ..cfg.clone()
        };
        let mut ep = rt.block_on(Endpoint::bind_as(bind, local, cfg, clock))?;
        for (node, addr) in &remotes {
            if !ep.add_peer(*node, *addr) {
                return Err(BridgeError::BadInput(format!(
                    "peer {node} at {addr}: that host or address is listed twice"
                )));
            }
        }
        Ok(Cluster::assemble(rt, vec![ep], n_hosts, remotes, clock))
    }

    fn assemble(
        rt: tokio::runtime::Runtime,
        eps: Vec<Endpoint>,
        n_hosts: usize,
        remotes: Vec<(NodeAddr, SocketAddr)>,
        clock: Clock,
    ) -> Cluster {
        let met = remotes.is_empty();
        let mut eps = eps;
        for ep in &mut eps {
            ep.cluster_member = true;
        }
        Cluster {
            rt,
            eps,
            n_hosts,
            remotes,
            clock,
            bye: Goodbye::default(),
            early: Vec::new(),
            met,
        }
    }

    /// Introduces every local host to every remote one with HELLO, until
    /// each answered (the endpoint's bounded retries; an unreachable peer
    /// is an error naming it). Both sides call it, so when it returns the
    /// peers are up.
    pub fn meet(&mut self) -> Result<(), BridgeError> {
        let Cluster {
            rt, eps, remotes, ..
        } = self;
        rt.block_on(async {
            for ep in eps.iter_mut() {
                for (_, addr) in remotes.iter() {
                    ep.connect(*addr).await?;
                }
                // Answer the peers' own asks before moving on.
                ep.flush().await?;
            }
            Ok::<(), BridgeError>(())
        })?;
        // The introductions are the cluster's business, not the runner's;
        // what else arrived meanwhile (a quick peer's WRITEs, even its
        // goodbye) is kept.
        let early: Vec<(NodeAddr, Event)> = self
            .take_events()
            .into_iter()
            .filter(|(_, e)| !matches!(e, Event::Hello { .. }))
            .collect();
        self.early = early;
        self.met = true;
        for ep in &mut self.eps {
            ep.hold_app(false);
        }
        Ok(())
    }

    /// Hosts in all (local and remote).
    pub fn len(&self) -> usize {
        self.n_hosts
    }

    /// No hosts.
    pub fn is_empty(&self) -> bool {
        self.n_hosts == 0
    }

    /// Whether host `h` runs in this process.
    pub fn is_local(&self, h: NodeAddr) -> bool {
        self.eps.iter().any(|e| e.nic().addr() == h)
    }

    fn index(&self, h: NodeAddr) -> usize {
        self.eps
            .iter()
            .position(|e| e.nic().addr() == h)
            .unwrap_or_else(|| panic!("{h} is not a host of this process"))
    }

    /// Engine time now (real time since the cluster started).
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The engine time of an OS instant.
    pub fn now_of(&self, t: std::time::Instant) -> Instant {
        self.clock.to_engine(t)
    }

    /// The OS instant of an engine time.
    pub fn to_os(&self, t: Instant) -> std::time::Instant {
        self.clock.to_os(t)
    }

    /// Host `h`'s engine. Panics if `h` is not a host of this process.
    pub fn nic(&self, h: NodeAddr) -> &Nic {
        self.eps[self.index(h)].nic()
    }

    /// Host `h`'s engine, to register memory or post (then call
    /// [`Cluster::service`]).
    pub fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        let i = self.index(h);
        self.eps[i].nic_mut()
    }

    /// The local endpoints, in host order.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.eps
    }

    /// Host `h`'s endpoint.
    pub fn endpoint(&self, h: NodeAddr) -> &Endpoint {
        &self.eps[self.index(h)]
    }

    /// What host `h`'s egress fault rules did.
    pub fn fault_stats(&self, h: NodeAddr) -> EgressStats {
        self.eps[self.index(h)].fault_stats()
    }

    /// After working on host `h`'s engine: collects its events and sends
    /// what it wants sent.
    pub fn service(&mut self, h: NodeAddr) -> Result<(), BridgeError> {
        let i = self.index(h);
        let ep = &mut self.eps[i];
        ep.collect();
        self.rt.block_on(ep.flush())
    }

    /// Installs and starts `app` on local host `h`.
    pub fn set_app(
        &mut self,
        h: NodeAddr,
        app: Box<dyn udrma_app::App>,
    ) -> Result<(), BridgeError> {
        let i = self.index(h);
        self.eps[i].set_app(app);
        // Until the peers are met, the app reacts to what arrives but
        // starts nothing.
        self.eps[i].hold_app(!self.met);
        self.flush()
    }

    /// Host `h`'s app, whatever its type (`None` for a host of another
    /// process).
    pub fn app_dyn(&self, h: NodeAddr) -> Option<&dyn udrma_app::App> {
        if !self.is_local(h) {
            return None;
        }
        self.eps[self.index(h)].app_dyn()
    }

    /// Whether every local app (if any) says it is done.
    pub fn apps_done(&self) -> bool {
        self.eps.iter().all(Endpoint::app_done)
    }

    /// Host `h`'s app, if it is a `T`.
    pub fn app<T: udrma_app::App>(&self, h: NodeAddr) -> Option<&T> {
        udrma_app::downcast_ref::<T>(self.app_dyn(h)?)
    }

    /// Drives the hosts until every local app says it is done, or
    /// `until`; returns whether they all are.
    pub fn run_apps(&mut self, until: std::time::Instant) -> Result<bool, BridgeError> {
        loop {
            if self.apps_done() {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            self.wait(until)?;
        }
    }

    /// Sends what every local host has pending.
    pub fn flush(&mut self) -> Result<(), BridgeError> {
        let Cluster { rt, eps, .. } = self;
        rt.block_on(async {
            for ep in eps.iter_mut() {
                ep.flush().await?;
            }
            Ok(())
        })
    }

    /// Posts `wr` on host `h` now, and sends.
    pub fn post(&mut self, h: NodeAddr, wr: WorkRequest) -> Result<WrId, PostError> {
        let now = self.now();
        let i = self.index(h);
        let r = self.eps[i].nic_mut().post(now, wr);
        let _ = self.service(h);
        r
    }

    /// Every event the hosts raised since the last call, host by host
    /// (the goodbyes between processes stay here).
    pub fn take_events(&mut self) -> Vec<(NodeAddr, Event)> {
        let mut out = std::mem::take(&mut self.early);
        for ep in &mut self.eps {
            ep.collect();
            let h = ep.nic().addr();
            while let Some(e) = ep.poll_event() {
                if let Event::Hello { from, hello, .. } = &e {
                    if hello.nonce & 0xffff_0000 == GOODBYE {
                        if hello.reply {
                            self.bye.acked.insert(*from);
                        } else {
                            self.bye.peers_done.insert(*from);
                        }
                        continue;
                    }
                }
                out.push((h, e));
            }
        }
        out
    }

    /// Says goodbye: this process's hosts are done with their own work.
    /// Call it again and again while waiting; it repeats the goodbye to
    /// the peers that have not answered, and returns `true` once every
    /// remote host has said it is done too and has heard that this one
    /// is (so neither side still needs the other). Without remote hosts,
    /// `true` at once.
    pub fn goodbye(&mut self) -> bool {
        // Anything else that arrives now comes after this process's own
        // work, so the runner has nothing to act on: it is dropped.
        let _ = self.take_events();
        let everyone = |set: &std::collections::BTreeSet<NodeAddr>| {
            self.remotes.iter().all(|(h, _)| set.contains(h))
        };
        if everyone(&self.bye.peers_done) && everyone(&self.bye.acked) {
            // Send our answers to their goodbyes, and stay a little for the
            // peer whose answer from us is lost.
            let _ = self.flush();
            let since = *self
                .bye
                .all_gone_at
                .get_or_insert_with(std::time::Instant::now);
            return since.elapsed() >= GRACE;
        }
        let due = self.bye.sent_at.is_none_or(|t| t.elapsed() >= DONE_EVERY);
        if due {
            let unacked: Vec<NodeAddr> = self
                .remotes
                .iter()
                .map(|(h, _)| *h)
                .filter(|h| !self.bye.acked.contains(h))
                .collect();
            let seq = self.bye.sent_at.map_or(0, |_| 1);
            for ep in &mut self.eps {
                for h in &unacked {
                    ep.nic_mut().hello(*h, GOODBYE | seq);
                }
                ep.collect();
            }
            self.bye.sent_at = Some(std::time::Instant::now());
            let _ = self.flush();
        }
        false
    }

    /// When the goodbye needs attention again (a repeat, or the end of
    /// the grace period), if it started.
    pub fn next_goodbye(&self) -> Option<std::time::Instant> {
        match self.bye.all_gone_at {
            Some(t) => Some(t + GRACE),
            None => self.bye.sent_at.map(|t| t + DONE_EVERY),
        }
    }

    /// Whether some hosts run in other processes.
    pub fn has_remotes(&self) -> bool {
        !self.remotes.is_empty()
    }

    /// The earliest time an engine or an egress hold queue needs
    /// attention.
    pub fn next_deadline(&self) -> Option<std::time::Instant> {
        self.eps.iter().filter_map(Endpoint::wake_at).min()
    }

    /// Sends what every host has pending, then waits until a datagram
    /// arrives at any host, a deadline of any host passes, or `until`;
    /// then lets every host read and handle what is due (their events
    /// wait for [`Cluster::take_events`]).
    pub fn wait(&mut self, until: std::time::Instant) -> Result<(), BridgeError> {
        let Cluster { rt, eps, .. } = self;
        rt.block_on(async {
            for ep in eps.iter_mut() {
                ep.flush().await?;
            }
            let wake = eps
                .iter()
                .filter_map(Endpoint::wake_at)
                .min()
                .map_or(until, |w| w.min(until));
            if wake > std::time::Instant::now() {
                let mut ready: Vec<Readable<'_>> =
                    eps.iter().map(|e| Box::pin(e.readable()) as _).collect();
                let any = std::future::poll_fn(|cx| {
                    for f in ready.iter_mut() {
                        if f.as_mut().poll(cx).is_ready() {
                            return Poll::Ready(());
                        }
                    }
                    Poll::Pending
                });
                tokio::select! {
                    _ = any => {}
                    _ = tokio::time::sleep_until(wake.into()) => {}
                }
            }
            Ok::<(), BridgeError>(())
        })?;
        for ep in eps.iter_mut() {
            ep.pump();
        }
        Ok(())
    }

    /// Whether every engine is idle and nothing is held or waiting to be
    /// sent.
    pub fn is_idle(&self) -> bool {
        self.eps.iter().all(|e| e.nic().is_idle() && e.is_drained())
    }
}

/// The single-threaded runtime a cluster drives its sockets with.
fn runtime() -> Result<tokio::runtime::Runtime, BridgeError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BridgeError::Io)
}
