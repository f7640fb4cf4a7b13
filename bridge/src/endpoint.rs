//! [`Endpoint`]: one udrma NIC engine on one UDP socket (or, with
//! `paths` > 1, on a run of consecutive ports, one per entropy; see
//! [`crate::sockets`]).
//!
//! The driver is a single task: [`Endpoint::turn`] waits for the socket, the
//! engine's next deadline, the egress rules' next held datagram or the caller's
//! deadline, whichever comes first; feeds the engine; and sends what it
//! wants sent. Received datagrams are read in batches (`recvmmsg`, and GRO
//! where the kernel offers it); sent ones are grouped by destination and
//! size into GSO batches (one `sendmsg` for many datagrams) where the
//! kernel offers it, plain `sendmsg` otherwise. Both come from quinn-udp.
//!
//! Children:
//! - `admit`: Strangers at the door
//! - `receive`: The receive path
//! - `send`: The send path: pending datagrams to the kernel, grouped into GSO batches per destination, socket and size

use std::collections::VecDeque;
use std::net::SocketAddr;

use quinn_udp::BATCH_SIZE;
use udrma_nic::{Event, Nic, NicConfig, PostError, WorkRequest, WrId};
use udrma_proto::NodeAddr;

use udrma_app::App;

use crate::admission::Admission;
use crate::clock::Clock;
use crate::egress::{Egress, FaultPlan};
use crate::peers::{Peer, Peers, RemoteRegion};
use crate::secure::{KeyRing, SecStats, Secure};
use crate::sockets::{bind_paths, path_of, PathSocket};
use crate::BridgeError;

mod admit;
mod receive;
mod send;

/// The top half of a HELLO nonce that says "this host is done with its
/// own work" (the bottom half counts the asks).
pub(crate) const GOODBYE: u32 = 0xd0de_0000;

/// Everything an endpoint needs besides its address.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The engine's configuration (see [`BridgeConfig::real_time_nic`]).
    pub nic: NicConfig,
    /// Faults on what this endpoint sends (none by default): the
    /// simulator's rules (`udrma-faults`), see [`FaultPlan`].
    pub faults: FaultPlan,
    /// Most peers admitted; HELLOs from further addresses are refused.
    pub max_peers: usize,
    /// HELLO asks sent before a peer is declared unreachable.
    pub hello_tries: u32,
    /// Wait after the first HELLO ask; doubles after each, up to 1 s.
    pub hello_interval: std::time::Duration,
    /// Socket send and receive buffer sizes requested from the kernel.
    pub socket_buffer: usize,
    /// Send every datagram ECN-capable (ECT(0) in the IP header), so an
    /// ECN-marking queue on the path (`fq_codel`, `red ecn`) marks it
    /// Congestion Experienced instead of dropping it. Marks that arrive
    /// reach the engine either way.
    pub ecn: bool,
    /// UDP sockets on consecutive ports, one per entropy (1: one socket).
    /// With more than one, each datagram leaves from the port its entropy
    /// names, HELLOs announce the span, and the engine should spread its
    /// packets (`nic.multipath`, with `nic.entropies` = `paths`). At most
    /// [`crate::sockets::MAX_PATHS`].
    pub paths: u16,
    /// A peer admitted by its HELLO (not one this host connected to or
    /// was given) that has been silent this long and holds no work in the
    /// engine is evicted, and the engine forgets it.
    pub peer_idle: std::time::Duration,
    /// Authenticated mode: seal every datagram with the ring's send key
    /// and accept only datagrams sealed with one of its keys (see
    /// [`crate::secure`]). `None`: plain UDP.
    pub keys: Option<KeyRing>,
    /// Spin on the socket instead of sleeping until it is readable: a
    /// datagram is seen microseconds sooner (no wake-up through the
    /// kernel's scheduler), at the price of a core kept busy while the
    /// endpoint waits. For latency runs.
    pub busy_poll: bool,
    /// What an unreachable peer should be running, as the error's hint
    /// says it (default: `udrma bridge serve`).
    pub peer_program: &'static str,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            nic: BridgeConfig::real_time_nic(),
            faults: FaultPlan::default(),
            max_peers: 256,
            hello_tries: 8,
            hello_interval: std::time::Duration::from_millis(100),
            socket_buffer: 8 << 20,
            ecn: true,
            paths: 1,
            peer_idle: std::time::Duration::from_secs(60),
            keys: None,
            busy_poll: false,
            peer_program: "`udrma bridge serve`",
        }
    }
}

impl BridgeConfig {
    /// The engine's defaults retuned for real networks and an OS clock
    /// (the simulator's defaults assume a datacenter fabric in virtual
    /// time): 1400-byte payloads fit a 1500-byte Ethernet MTU with the
    /// headers; timers respect the runtime's millisecond resolution;
    /// self-describing packets, so a registry entry that expired while its
    /// sender backed off can be re-registered by any later packet; and a
    /// window of 256 packets in flight, which a default Linux socket
    /// buffer (208 KiB) nearly absorbs, and READs calling for at most
    /// 256 KiB of responses at once; a one-packet operation's completion
    /// notice is its acknowledgement (one datagram back, not two: a
    /// system call fewer on a pingpong's critical path); tail loss probes
    /// on, so a loss at an operation's end costs a probe timeout and a
    /// round trip, not the 5 ms floor and the OS timer's lateness; a copy
    /// sent again on loss detection is judged spurious only when the
    /// receiver reports it twice (`DUP`), not by how soon it was answered:
    /// the engine's clock is when a batch was read, so an answer read
    /// behind a send looks sooner than it came. The
    /// engine has no congestion control:
    /// over a slower path, shrink both (`--inflight`, `--read-window`). The boot epoch comes from the wall clock.
    pub fn real_time_nic() -> NicConfig {
        use udrma_nic::{AckMode, Duration, RegistrationMode};
        NicConfig {
            mtu_payload: 1400,
            op_table_capacity: 256,
            read_window: 256 << 10,
            registration: RegistrationMode::SelfDescribing,
            ack_mode: AckMode::Selective {
                delay: Duration::from_micros(200),
            },
            completion_acks: true,
            tail_probe: true,
            spurious_by_timing: false,
            timeout_hold: true,
            rto_initial: Duration::from_millis(20),
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_millis(500),
            max_retries: 16,
            rnr_delay: Duration::from_millis(1),
            registry_timeout: Duration::from_millis(2000),
            escape_timeout: Duration::from_millis(20),
            escape_capacity: 1024,
            escape_bytes: 2 << 20,
            epoch: crate::clock::boot_epoch(),
            ..NicConfig::default()
        }
    }
}

/// The bridge's own counters (the engine's are in `nic().stats()`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BridgeStats {
    /// Datagrams received from the socket.
    pub rx_datagrams: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Datagrams the kernel accepted (copies made by fault rules included).
    pub tx_datagrams: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// `sendmsg` calls (one per GSO batch).
    pub tx_calls: u64,
    /// `recvmsg`/`recvmmsg` calls that returned data.
    pub rx_calls: u64,
    /// Dropped: from an address that never said HELLO.
    pub unknown_peer: u64,
    /// Dropped: a HELLO from a new address while the peer table was full.
    pub peers_full: u64,
    /// Datagrams the kernel refused to send (errors other than would-block).
    pub tx_errors: u64,
    /// Socket receive errors (other than would-block).
    pub rx_errors: u64,
    /// Datagrams that arrived marked Congestion Experienced.
    pub rx_ce: u64,
    /// Further source ports of peers learned from their HELLOs (`ports`).
    pub alias_ports: u64,
    /// HELLO retries sent to strangers: "echo this cookie" (no state kept).
    pub hello_retries_sent: u64,
    /// HELLOs from strangers dropped by the per-source rate limit.
    pub hello_rate_limited: u64,
    /// HELLO asks whose cookie did not check out (forged, stale, or
    /// minted for another address).
    pub bad_cookies: u64,
    /// Valid asks refused because the peer table was full (each answered
    /// "full").
    pub refused_full: u64,
    /// Peers evicted after `peer_idle` of silence with no work.
    pub peers_evicted: u64,
}

/// One engine on one socket.
pub struct Endpoint {
    /// Socket 0 receives; all send (see [`crate::sockets`]).
    socks: Vec<PathSocket>,
    /// Datagrams handed to the kernel on each socket.
    path_tx: Vec<u64>,
    nic: Nic,
    clock: Clock,
    peers: Peers,
    egress: Egress,
    cfg: BridgeConfig,
    stats: BridgeStats,
    events: VecDeque<Event>,
    /// Datagrams the engine produced, not yet handed to the kernel: the
    /// destination, the socket to leave from, the bytes.
    pending: VecDeque<(SocketAddr, usize, Vec<u8>)>,
    pool: Vec<Vec<u8>>,
    rx_buf: Vec<u8>,
    rx_slot: usize,
    next_nonce: u32,
    local: SocketAddr,
    /// Host software driven like the simulator drives it: it gets the
    /// engine's events (instead of [`Endpoint::poll_event`]) and its
    /// deadline joins the engine's.
    app: Option<Box<dyn App>>,
    /// Each peer's latest HELLO reply's nonce (what
    /// [`Endpoint::connect`] waits for).
    last_reply: std::collections::BTreeMap<NodeAddr, u32>,
    /// Whether a [`crate::Cluster`] drives it (and keeps the goodbyes
    /// between processes from its app).
    pub(crate) cluster_member: bool,
    /// Whether the app's timeouts are held (see [`Endpoint::hold_app`]).
    app_held: bool,
    /// Cookies and per-source rates for strangers' HELLOs.
    admission: Admission,
    /// Authenticated mode's keys, sequence numbers and replay windows.
    secure: Option<Secure>,
    /// Scratch for an opened datagram.
    open_buf: Vec<u8>,
    /// When idle peers were last looked for.
    last_sweep: std::time::Instant,
}

impl core::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.local)
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Endpoint {
    /// Binds a UDP socket at `addr` and starts an engine on it.
    pub async fn bind(addr: SocketAddr, cfg: BridgeConfig) -> Result<Endpoint, BridgeError> {
        Endpoint::bind_as(addr, NodeAddr(0), cfg, Clock::start()).await
    }

    /// Binds a socket at `addr` for host `node` (the engine's own name),
    /// on a clock shared with other endpoints of the same process.
    pub async fn bind_as(
        addr: SocketAddr,
        node: NodeAddr,
        cfg: BridgeConfig,
        clock: Clock,
    ) -> Result<Endpoint, BridgeError> {
        let mut nic_cfg = cfg.nic.clone();
        nic_cfg.hello_ports = if cfg.paths > 1 { cfg.paths } else { 0 };
        let nic = Nic::new(node, nic_cfg).map_err(|e| {
            BridgeError::BadInput(format!(
                "engine configuration: {e} (op_table_capacity is --inflight, mtu_payload is --mtu)"
            ))
        })?;
        let socks = bind_paths(addr, cfg.paths, cfg.socket_buffer)?;
        let admission = Admission::new().map_err(|source| BridgeError::Bind { addr, source })?;
        let secure = match &cfg.keys {
            Some(ring) => Some(
                Secure::new(ring.clone()).map_err(|source| BridgeError::Bind { addr, source })?,
            ),
            None => None,
        };
        let local = socks[0]
            .sock
            .local_addr()
            .map_err(|source| BridgeError::Bind { addr, source })?;
        // One receive slot holds a GRO train of up to 64 KiB.
        let rx_slot = 65_536;
        Ok(Endpoint {
            path_tx: vec![0; socks.len()],
            socks,
            nic,
            clock,
            peers: Peers::new(cfg.max_peers),
            egress: Egress::new(cfg.faults.clone()),
            stats: BridgeStats::default(),
            events: VecDeque::new(),
            pending: VecDeque::new(),
            pool: Vec::new(),
            rx_buf: vec![0; rx_slot * BATCH_SIZE],
            rx_slot,
            next_nonce: cfg.nic.epoch.rotate_left(16) | 1,
            cfg,
            local,
            app: None,
            app_held: false,
            cluster_member: false,
            last_reply: std::collections::BTreeMap::new(),
            admission,
            last_sweep: std::time::Instant::now(),
            secure,
            open_buf: Vec::new(),
        })
    }

    /// The socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The engine.
    pub fn nic(&self) -> &Nic {
        &self.nic
    }

    /// The engine, to register memory and announce a region.
    pub fn nic_mut(&mut self) -> &mut Nic {
        &mut self.nic
    }

    /// The bridge's counters.
    pub fn stats(&self) -> BridgeStats {
        self.stats
    }

    /// What the egress fault rules did.
    pub fn fault_stats(&self) -> crate::egress::EgressStats {
        self.egress.stats()
    }

    /// The egress fault rules, each with what it did.
    pub fn fault_rules(&self) -> &udrma_faults::RuleSet {
        self.egress.rules()
    }

    /// Records `addr` as host `node` without a HELLO (hosts of one
    /// scenario know each other's addresses). `false` if the table is
    /// full or either is taken.
    pub fn add_peer(&mut self, node: NodeAddr, addr: SocketAddr) -> bool {
        self.peers.insert(node, canonical(addr))
    }

    /// The configuration.
    pub fn config(&self) -> &BridgeConfig {
        &self.cfg
    }

    /// Whether the kernel segments GSO batches for this socket.
    pub fn gso_segments(&self) -> usize {
        self.socks[0].state.max_gso_segments()
    }

    /// Whether the kernel coalesces received datagrams (GRO) for this socket.
    pub fn gro_segments(&self) -> usize {
        self.socks[0].state.gro_segments()
    }

    /// Authenticated mode's counters (`None` in plain mode).
    pub fn security_stats(&self) -> Option<SecStats> {
        self.secure.as_ref().map(|s| s.stats())
    }

    /// Authenticated mode: seal with key `id` from now on (rotation;
    /// receivers must hold it already).
    pub fn set_send_key(&mut self, id: u8) -> Result<(), BridgeError> {
        match self.secure.as_mut() {
            Some(s) => s.set_send_key(id),
            None => Err(BridgeError::BadInput(
                "set_send_key: not in authenticated mode (no --key)".into(),
            )),
        }
    }

    /// Source addresses whose HELLO rate is tracked now (bounded by
    /// [`crate::admission::RATE_SOURCES`]).
    pub fn admission_sources(&self) -> usize {
        self.admission.sources()
    }

    /// Datagrams sent from each of [`Endpoint::local_ports`].
    pub fn tx_by_path(&self) -> &[u64] {
        &self.path_tx
    }

    /// The UDP ports this endpoint sends from (its own first).
    pub fn local_ports(&self) -> Vec<u16> {
        self.socks
            .iter()
            .filter_map(|s| s.sock.local_addr().ok().map(|a| a.port()))
            .collect()
    }

    /// Engine time now.
    pub fn now(&self) -> udrma_nic::Instant {
        self.clock.now()
    }

    /// Known peers.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// A peer by node.
    pub fn peer(&self, node: NodeAddr) -> Option<&Peer> {
        self.peers.get(node)
    }

    /// Posts a work request to the engine (the caller drives it with
    /// [`Endpoint::turn`]).
    pub fn post(&mut self, wr: WorkRequest) -> Result<WrId, PostError> {
        let now = self.clock.now();
        self.nic.post(now, wr)
    }

    /// The next event the engine raised (HELLOs and restarts included:
    /// the endpoint has already recorded them in the peer table).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Introduces this host to `addr` with HELLO asks until the reply
    /// comes: `hello_tries` asks, the wait doubling from `hello_interval`
    /// (at most 1 s). Returns the peer with the region it announced.
    pub async fn connect(&mut self, addr: SocketAddr) -> Result<Peer, BridgeError> {
        let node = self.peers.admit(addr).ok_or(BridgeError::PeersFull)?;
        if let Some(p) = self.peers.get_mut(node) {
            p.pinned = true;
            p.refused_full = false;
        }
        let mut wait = self.cfg.hello_interval;
        let started = std::time::Instant::now();
        let mut tries = 0;
        // A retry (the peer's "echo this cookie") is answered at once and
        // does not count as a try, at most a few times.
        let mut retries_left = 4;
        while tries < self.cfg.hello_tries.max(1) {
            tries += 1;
            let nonce = self.next_nonce;
            self.next_nonce = self.next_nonce.wrapping_mul(0x9e37_79b9).wrapping_add(1);
            let cookie = self.peers.get(node).and_then(|p| p.cookie);
            self.nic
                .hello_with_cookie(node, nonce, cookie.unwrap_or_default());
            let until = std::time::Instant::now() + wait;
            while std::time::Instant::now() < until {
                self.turn(Some(until)).await?;
                // (The reply is an event too, for the app or the caller.)
                if self.last_reply.get(&node) == Some(&nonce) {
                    return Ok(self.peers.get(node).cloned().expect("admitted above"));
                }
                let p = self.peers.get(node).expect("admitted above");
                if p.refused_full {
                    return Err(BridgeError::ServerFull(addr));
                }
                if p.cookie != cookie && retries_left > 0 {
                    retries_left -= 1;
                    tries -= 1;
                    break;
                }
            }
            if self.peers.get(node).and_then(|p| p.cookie) == cookie {
                wait = (wait * 2).min(std::time::Duration::from_secs(1));
            }
        }
        Err(BridgeError::Unreachable {
            addr,
            tries: self.cfg.hello_tries.max(1),
            waited: started.elapsed(),
            program: self.cfg.peer_program,
        })
    }

    /// One turn of the driver: waits until a datagram arrives, an engine
    /// or egress-hold deadline passes, or `until`; handles what is due; sends what
    /// the engine wants sent.
    pub async fn turn(&mut self, until: Option<std::time::Instant>) -> Result<(), BridgeError> {
        self.flush().await?;
        let wake = [self.wake_at(), until].into_iter().flatten().min();
        if self.cfg.busy_poll {
            return self.spin(wake).await;
        }
        match wake {
            Some(w) if w <= std::time::Instant::now() => {}
            Some(w) => {
                tokio::select! {
                    r = self.socks[0].sock.readable() => r.map_err(BridgeError::Io)?,
                    _ = tokio::time::sleep_until(w.into()) => {}
                }
            }
            None => self.socks[0]
                .sock
                .readable()
                .await
                .map_err(BridgeError::Io)?,
        }
        self.pump();
        // No flush here: the caller sees the events first and may post
        // (an echo, the next ping); the next turn sends everything, data
        // ahead of acknowledgements.
        Ok(())
    }

    /// `turn` with `busy_poll`: receives without waiting until a datagram
    /// came in or `wake` passed, yielding to the runtime now and then so
    /// its other tasks (a Ctrl-C handler) still run.
    ///
    /// Each empty turn of the loop costs one read of one slot and one
    /// clock read, nothing else: the sooner a turn ends, the sooner an
    /// arriving datagram is seen. What one read brings is handled and
    /// answered before the socket is read again (a second, empty read of
    /// a whole batch would delay the answer by a system call).
    async fn spin(&mut self, wake: Option<std::time::Instant>) -> Result<(), BridgeError> {
        let mut spins = 0u32;
        loop {
            if self.receive(1, true) || wake.is_some_and(|w| w <= std::time::Instant::now()) {
                self.service();
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                tokio::task::yield_now().await;
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// When the engine or the egress hold queue next needs attention.
    pub fn wake_at(&self) -> Option<std::time::Instant> {
        [
            self.nic.poll_timeout().map(|t| self.clock.to_os(t)),
            self.app
                .as_ref()
                .filter(|_| !self.app_held)
                .and_then(|a| a.poll_timeout())
                .map(|t| self.clock.to_os(t)),
            self.egress.next_release(),
            // The idle-peer sweep, once a second while peers are in.
            (!self.peers.is_empty()).then(|| self.last_sweep + std::time::Duration::from_secs(1)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether nothing waits to be sent or is held by the egress rules.
    pub fn is_drained(&self) -> bool {
        self.pending.is_empty() && self.egress.held() == 0
    }

    /// Installs `app` on this endpoint and starts it now (see
    /// `udrma_app` for the calling rules, the same as in the
    /// simulator); its events no longer reach [`Endpoint::poll_event`].
    pub fn set_app(&mut self, app: Box<dyn App>) {
        let now = self.clock.now();
        let app = self.app.insert(app);
        app.start(now, &mut self.nic);
        self.collect();
    }

    /// The app, if it is a `T`.
    pub fn app<T: App>(&self) -> Option<&T> {
        udrma_app::downcast_ref::<T>(self.app.as_deref()?)
    }

    /// Removes the app and gives it back (events queue for
    /// [`Endpoint::poll_event`] again).
    pub fn take_app(&mut self) -> Option<Box<dyn App>> {
        self.app.take()
    }

    /// The app, whatever its type.
    pub fn app_dyn(&self) -> Option<&dyn App> {
        self.app.as_deref()
    }

    /// Holds the app's timeouts (not its events) while `held`: a host
    /// that has not met its peers yet must not start sending to them.
    pub fn hold_app(&mut self, held: bool) {
        self.app_held = held;
    }

    /// Whether the app (if any) says it is done.
    pub fn app_done(&self) -> bool {
        self.app.as_ref().is_none_or(|a| a.is_done())
    }

    /// Waits until the socket has something to read.
    pub async fn readable(&self) -> Result<(), BridgeError> {
        self.socks[0].sock.readable().await.map_err(BridgeError::Io)
    }

    /// Without waiting: reads what the socket holds, handles what is due,
    /// releases held datagrams, and collects events and datagrams to send
    /// (call [`Endpoint::flush`] to send them).
    pub fn pump(&mut self) {
        self.receive(BATCH_SIZE, false);
        self.service();
    }

    /// What [`Endpoint::pump`] does after reading the socket: due
    /// timeouts, the idle-peer sweep, released egress holds, and the
    /// engine's events and datagrams collected.
    fn service(&mut self) {
        let now = self.clock.now();
        let os_now = self.clock.to_os(now);
        if os_now.saturating_duration_since(self.last_sweep) >= std::time::Duration::from_secs(1) {
            self.last_sweep = os_now;
            self.evict_idle(now, true);
        }
        if self.nic.poll_timeout().is_some_and(|t| t <= now) {
            self.nic.handle_timeout(now);
        }
        if let Some(app) = self.app.as_mut().filter(|_| !self.app_held) {
            if app.poll_timeout().is_some_and(|t| t <= now) {
                app.handle_timeout(now, &mut self.nic);
            }
        }
        let os_now = std::time::Instant::now();
        while let Some(held) = self.egress.release(os_now) {
            self.pending.push_back(held);
        }
        self.collect();
    }

    /// Moves engine events to the endpoint's queue (recording HELLOs in the
    /// peer table) and engine datagrams to the send queue (through the
    /// egress fault rules).
    pub fn collect(&mut self) {
        let now = self.clock.now();
        while let Some(e) = self.nic.poll_event() {
            if let Event::Hello { from, hello, .. } = &e {
                if hello.reply {
                    self.last_reply.insert(*from, hello.nonce);
                }
                let epoch = self.nic.peer_epoch(*from);
                if let Some(p) = self.peers.get_mut(*from) {
                    p.region = (hello.rkey != 0 || hello.region_len != 0).then_some(RemoteRegion {
                        addr: hello.region_addr,
                        len: hello.region_len,
                        rkey: hello.rkey,
                    });
                    p.max_payload = Some(hello.max_payload);
                    p.epoch = epoch;
                }
                if hello.ports > 1 {
                    let added = self.peers.alias_ports(*from, hello.ports);
                    self.stats.alias_ports += added as u64;
                }
            }
            if let Event::PeerRestarted { peer, epoch, .. } = &e {
                if let Some(p) = self.peers.get_mut(*peer) {
                    p.epoch = Some(*epoch);
                }
            }
            // The cluster's goodbyes between processes are its own.
            let goodbye = self.cluster_member
                && matches!(&e, Event::Hello { hello, .. } if hello.nonce & 0xffff_0000 == GOODBYE);
            match self.app.as_mut().filter(|_| !goodbye) {
                Some(app) => app.handle_event(now, &mut self.nic, e),
                None => self.events.push_back(e),
            }
        }
        let os_now = std::time::Instant::now();
        loop {
            let mut buf = self.pool.pop().unwrap_or_default();
            let Some(t) = self.nic.poll_transmit(now, &mut buf) else {
                self.pool.push(buf);
                break;
            };
            buf.truncate(t.len);
            let Some(peer) = self.peers.get(t.dst) else {
                // The engine only addresses nodes the table gave it.
                self.pool.push(buf);
                continue;
            };
            if let Some(sec) = self.secure.as_mut() {
                let mut sealed = self.pool.pop().unwrap_or_default();
                sec.seal(&buf, &mut sealed);
                self.pool.push(std::mem::replace(&mut buf, sealed));
            }
            let to = peer.addr;
            let path = path_of(t.src_port, self.cfg.nic.src_port, self.socks.len());
            // The datagram leaves when the engine counts it as gone: after
            // its NIC's gather, as in the fabric (the timer rule,
            // docs/engine.md). Sent sooner, its round trip would look
            // that much shorter.
            let leaves = os_now + std::time::Duration::from_nanos(t.leaves_in.as_nanos());
            let (copies, delay) = if self.egress.is_active() {
                let fate = self.egress.judge(now, self.nic.addr(), t.dst, &mut buf);
                (
                    fate.copies,
                    std::time::Duration::from_nanos(fate.delay.as_nanos()),
                )
            } else {
                (1, std::time::Duration::ZERO)
            };
            if copies == 0 {
                self.pool.push(buf);
                continue;
            }
            for i in 0..copies {
                let copy = if i + 1 == copies {
                    std::mem::take(&mut buf)
                } else {
                    buf.clone()
                };
                let held = if !delay.is_zero() {
                    self.egress.hold(leaves + delay, to, path, copy)
                } else if leaves > os_now {
                    self.egress.hold_for_nic(leaves, to, path, copy)
                } else {
                    Err(copy)
                };
                if let Err(copy) = held {
                    self.pending.push_back((to, path, copy));
                }
            }
        }
    }
}

/// IPv4-mapped IPv6 addresses (from dual-stack sockets) as plain IPv4, so
/// one peer has one key.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => a,
        },
        v4 => v4,
    }
}
