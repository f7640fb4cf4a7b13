//! Hosts: driving each NIC as its sans-IO contract asks (pull at line
//! rate, wake at its deadline, deliver what arrives).

use super::*;

/// A host's state. Laid out in this order (`repr(C)`): what every event
/// of the host reads of its own fields comes first, then the NIC, so that
/// the lines asked for ahead of the host's events (the deep pipeline's
/// first lines of this struct) hold both; Rust's own order had put the
/// host's fields after the NIC's 2.5 KB, where nothing asked for them.
#[repr(C)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct HostState {
    pub(super) port: PortId,
    pub(super) paused: bool,
    pub(super) timer_at: Option<Instant>,
    /// Cost-model NIC time of the last packet sent: the host pulls its next
    /// datagram this long before its link frees up, so NIC processing
    /// overlaps the wire as in a pipelined NIC.
    pub(super) tx_lead: Duration,
    /// Host software, if any: it gets the NIC's events instead of
    /// [`World::take_host_events`], and its deadline joins the NIC's.
    #[cfg_attr(
        feature = "fingerprint",
        serde(serialize_with = "udrma_app::serialize_app")
    )]
    pub(super) app: Option<Box<dyn App>>,
    /// Who it has heard from, for the count of packets out of order.
    /// (A counter only: not in a fingerprint.)
    #[cfg_attr(feature = "fingerprint", serde(skip))]
    pub(super) arrivals: Arrivals,
    pub(super) nic: Nic,
    pub(super) held: VecDeque<Pkt>,
    /// The NIC's receive processing unit (cost model).
    pub(super) rx_unit: udrma_nic::cost::Serial,
    /// When the receive unit will have taken every packet already given
    /// to the link into this host, as the port feeding it works it out
    /// (a host has one link, so that port alone feeds the unit): the
    /// link's flow control holds the next packet back until then (see
    /// `World::enqueue`).
    pub(super) rx_ready: Instant,
}

impl HostState {
    /// Host `h`'s state before anything happened: a fresh NIC of `nic`'s
    /// configuration on the link of `port`.
    pub(super) fn fresh(
        h: NodeAddr,
        port: PortId,
        nic: &NicConfig,
        phantom_payload: bool,
    ) -> Result<HostState, FabricError> {
        let mut nic = Nic::new(h, nic.clone())?;
        // Phantom memory's payloads travel elided: the NIC leaves them
        // out and takes them back that way (the same run, faster).
        nic.set_elide_zeros(phantom_payload);
        Ok(HostState {
            nic,
            port,
            timer_at: None,
            paused: false,
            held: VecDeque::new(),
            arrivals: Arrivals::default(),
            tx_lead: Duration::ZERO,
            rx_unit: udrma_nic::cost::Serial::default(),
            rx_ready: Instant::ZERO,
            app: None,
        })
    }

    /// Gives back what host `h` holds, for a world in which another
    /// thread runs it (see `shards`): its state here is never read again,
    /// and the build's posts, regions and app would otherwise stay in
    /// every thread's memory. The NIC becomes a fresh one of the same
    /// configuration.
    pub(super) fn vacate(&mut self, h: NodeAddr) {
        // The configuration built this NIC, so it builds another.
        if let Ok(nic) = Nic::new(h, self.nic.config().clone()) {
            self.nic = nic;
        }
        self.app = None;
        self.held = VecDeque::new();
    }

    /// The earlier of the NIC's and the app's deadlines.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let nic = self.nic.poll_timeout();
        match self.app.as_ref().and_then(|a| a.poll_timeout()) {
            Some(a) => Some(nic.map_or(a, |n| n.min(a))),
            None => nic,
        }
    }

    /// Lets the NIC, then the app, handle what is due at `now`.
    pub(super) fn handle_timeout(&mut self, now: Instant) {
        self.nic.handle_timeout(now);
        if let Some(app) = self.app.as_mut() {
            if app.poll_timeout().is_some_and(|t| t <= now) {
                app.handle_timeout(now, &mut self.nic);
            }
        }
    }
}

impl World {
    /// After anything happened at host `h`: collect its events, let it
    /// send if its link is free, and keep one wake-up for its earliest
    /// deadline.
    pub(super) fn service_host(&mut self, h: u32) {
        let now = self.now;
        let host = &mut self.hosts[h as usize];
        while let Some(e) = host.nic.poll_event() {
            tracing::info!(sim_ns = now.as_nanos(), host = h, event = ?e, "host event");
            match &e {
                Event::Completed { wr, result, .. } => {
                    if let Err(e) = result {
                        self.completions.record_failure(NodeAddr(h), *wr, *e);
                    }
                    self.trace.record(&TraceEvent::Completed {
                        t: now.as_ps(),
                        host: h,
                        wr: wr.0,
                        ok: result.is_ok(),
                    })
                }
                Event::WriteReceived { from, msg_id, .. } => {
                    self.trace.record(&TraceEvent::WriteReceived {
                        t: now.as_ps(),
                        host: h,
                        from: from.0,
                        msg: *msg_id,
                    })
                }
                Event::DataArrived { .. }
                | Event::Control { .. }
                | Event::Credits { .. }
                | Event::Hello { .. }
                | Event::PeerRestarted { .. } => {}
            }
            match host.app.as_mut() {
                Some(app) => {
                    if let Event::Completed { wr, .. } = &e {
                        self.completions.record(NodeAddr(h), *wr);
                    }
                    app.handle_event(now, &mut host.nic, e)
                }
                None => self.host_events.push(HostEvent {
                    host: NodeAddr(h),
                    event: e,
                }),
            }
        }
        if !host.paused && self.host_may_send(h) {
            self.pull(h);
        }
        self.arm_timer(h);
    }

    /// Keeps one wake-up for host `h`'s earliest deadline.
    pub(super) fn arm_timer(&mut self, h: u32) {
        let now = self.now;
        let host = &mut self.hosts[h as usize];
        if let Some(t) = host.deadline() {
            if host.timer_at.is_none_or(|at| t < at) {
                let t = t.max(now);
                host.timer_at = Some(t);
                self.schedule(t, EvKind::Timer(h));
            }
        }
    }

    /// Takes the host's next datagram, if it has one, onto its link.
    pub(super) fn pull(&mut self, h: u32) {
        let now = self.now;
        let port = self.hosts[h as usize].port;
        // A datagram a fault drops or delays at the host's own egress never
        // occupies the link: take the next one at once, until one does (or
        // the NIC has nothing). Otherwise a host without timers of its own
        // (a READ responder, a receiver owing ACKs) would stall with its
        // transmit queue full.
        loop {
            let mut buf = self.pool.pop().unwrap_or_default();
            let host = &mut self.hosts[h as usize];
            let Some(t) = host.nic.poll_transmit(now, &mut buf) else {
                self.pool.push(buf);
                return;
            };
            buf.truncate(t.len);
            self.stats.sent += 1;
            let mut pkt = Pkt {
                serial: self.next_serial(),
                src: NodeAddr(h),
                dst: t.dst,
                src_port: t.src_port,
                head: Head::of(&buf),
                bytes: buf,
                elided: t.elided,
                nic_work_ps: u32::try_from(t.nic_work.as_ps()).unwrap_or(u32::MAX),
                ce: false,
                trimmed: false,
            };
            if self.phantom_payload && pkt.elided == 0 {
                if let Some(big) = pkt.elide_zero_payload() {
                    self.recycle(big);
                }
            }
            if self.watch.is_some() {
                self.journal_new(&pkt, None);
            }
            self.egress(port, pkt);
            if !self.host_may_send(h) {
                return;
            }
        }
    }

    /// A packet reaches host `h`'s NIC (held while the host is paused).
    pub(super) fn arrive_at_host(&mut self, h: u32, pkt: Pkt) {
        let host = &mut self.hosts[h as usize];
        if host.paused {
            if host.held.len() >= PAUSE_HOLD_LIMIT {
                let link = self.topo.ports[host.port as usize].link;
                self.drop_pkt(link, pkt, DropReason::PausedOverflow);
            } else {
                host.held.push_back(pkt);
            }
            return;
        }
        self.deliver(h, pkt);
        self.service_host(h);
    }

    pub(super) fn deliver(&mut self, h: u32, pkt: Pkt) {
        self.stats.delivered += 1;
        if self.pfc.is_some() {
            self.pfc_nic_taken(h, &pkt);
        }
        let now = self.now;
        if let Some(j) = self.journal_mut(pkt.serial) {
            j.arrived = Some(now);
        }
        if self.hosts[h as usize]
            .arrivals
            .overtaken(pkt.src, pkt.serial)
        {
            self.stats.reordered += 1;
        }
        let now = self.now;
        let meta = udrma_nic::RxMeta {
            ecn: udrma_nic::Ecn::marked(pkt.ce),
            trimmed: pkt.trimmed,
            src_port: pkt.src_port,
        };
        self.hosts[h as usize]
            .nic
            .handle_elided(now, pkt.src, meta, pkt.as_datagram());
        self.recycle(pkt.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines the deep pipeline asks for ahead of a host's events
    /// cover the host's own fields and the NIC's per-packet part, and no
    /// more than that part needs: if either grows, this says so (and the
    /// count follows it).
    #[test]
    fn the_prefetched_lines_cover_the_hot_part_of_a_host() {
        let own = std::mem::offset_of!(HostState, nic);
        let lines = super::super::events::HOST_LINES;
        assert!(lines * 64 >= own + Nic::HOT_BYTES);
        assert!((lines - 1) * 64 < own + Nic::HOT_BYTES);
        assert_eq!(
            lines,
            20,
            "a change to the hot part ({own} + {} bytes): measure it (docs/benchmarks.md)",
            Nic::HOT_BYTES
        );
    }
}
