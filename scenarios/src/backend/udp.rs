//! The hosts on real UDP sockets ([`Udp`]), in real time.

use udrma_bridge::Cluster;
use udrma_host::App;
use udrma_nic::Nic;
use udrma_proto::{Duration, Instant, NodeAddr};

use super::{Backend, DropCounts, Ending, Traffic};

/// Real UDP sockets, one per host, in real time: every host in this
/// process on loopback, or some here and the others elsewhere.
#[derive(Debug)]
pub struct Udp {
    cluster: Cluster,
}

/// How long a slice of a watched run over sockets lasts, in real time.
pub const UDP_SLICE: Duration = Duration::from_millis(100);

impl Udp {
    /// Drives `cluster`.
    pub fn new(cluster: Cluster) -> Udp {
        Udp { cluster }
    }

    /// One turn of a run to `limit`: the run's end if it came, else one
    /// wait for datagrams or timers until at most `until` (no later than
    /// `limit`).
    fn turn(&mut self, limit: Instant, until: Instant) -> Option<Ending> {
        let now = self.cluster.now();
        if now >= limit {
            return Some(Ending::Limit(now));
        }
        // Send what the last turn's arrivals produced (ACKs), so that
        // an idle host looks idle.
        let _ = self.cluster.flush();
        let done = self.cluster.apps_done() && self.cluster.is_idle();
        // This process's hosts are done. Alone, that is the end; with
        // hosts in other processes, stay (serving them) until every one
        // has said goodbye and heard ours.
        if done && (!self.cluster.has_remotes() || self.cluster.goodbye()) {
            return Some(Ending::Quiet);
        }
        let until = match self.cluster.next_goodbye() {
            Some(t) if done => self.cluster.now_of(t).min(until),
            _ => until,
        };
        let _ = self.cluster.wait(self.cluster.to_os(until));
        None
    }

    /// The cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }
}

impl Backend for Udp {
    fn name(&self) -> &'static str {
        "udp"
    }

    fn now(&self) -> Instant {
        self.cluster.now()
    }

    fn n_hosts(&self) -> usize {
        self.cluster.len()
    }

    fn is_local(&self, h: NodeAddr) -> bool {
        self.cluster.is_local(h)
    }

    fn nic(&self, h: NodeAddr) -> &Nic {
        self.cluster.nic(h)
    }

    fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        self.cluster.nic_mut(h)
    }

    fn service(&mut self, h: NodeAddr) {
        // A send the kernel refuses is a lost datagram, which the engine
        // repairs like any other.
        let _ = self.cluster.service(h);
    }

    fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), String> {
        self.cluster.set_app(h, app).map_err(|e| e.to_string())
    }

    fn app(&self, h: NodeAddr) -> Option<&dyn App> {
        self.cluster.app_dyn(h)
    }

    fn start(&mut self) -> Result<(), String> {
        self.cluster.meet().map_err(|e| e.to_string())
    }

    fn run(&mut self, limit: Instant) -> Result<Ending, String> {
        loop {
            if let Some(ending) = self.turn(limit, limit) {
                return Ok(ending);
            }
        }
    }

    /// In slices of [`UDP_SLICE`] of real time: `events` means nothing
    /// over sockets.
    fn run_for(&mut self, limit: Instant, events: u64) -> Result<Option<Ending>, String> {
        let _ = events;
        let end = (self.cluster.now() + UDP_SLICE).min(limit);
        loop {
            if let Some(ending) = self.turn(limit, end) {
                return Ok(Some(ending));
            }
            if self.cluster.now() >= end {
                return Ok(None);
            }
        }
    }

    fn is_idle(&self) -> bool {
        self.cluster.is_idle()
    }

    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn traffic(&self) -> Traffic {
        let mut t = Traffic::default();
        for h in (0..self.cluster.len() as u32).map(NodeAddr) {
            if !self.cluster.is_local(h) {
                continue;
            }
            let ep = self.cluster.endpoint(h).stats();
            let f = self.cluster.fault_stats(h);
            // What the engines sent: the kernel took the copies and not
            // the drops.
            t.sent += (ep.tx_datagrams + f.dropped).saturating_sub(f.duplicated);
            t.delivered += ep.rx_datagrams;
            t.dropped += f.dropped;
            t.duplicated += f.duplicated;
            t.corrupted += f.corrupted;
            t.ecn_marked += self.cluster.endpoint(h).nic().stats().rx_ce;
        }
        t
    }

    fn drop_counts(&self) -> DropCounts {
        // Over sockets only the egress rules drop (what the kernel loses
        // is not seen).
        let mut d = DropCounts::default();
        for h in (0..self.cluster.len() as u32).map(NodeAddr) {
            if self.cluster.is_local(h) {
                d.add_rules(self.cluster.endpoint(h).fault_rules());
            }
        }
        d
    }

    fn trace_hash(&self) -> Option<u64> {
        None
    }
}
