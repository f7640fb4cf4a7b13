//! `rccc`: a receiver-credit controller, after Ultra Ethernet's RCCC and
//! the pull-based designs it draws on (NDP, EQDS).
//!
//! The sender side lives here. A sender may send `unscheduled` bytes
//! without asking (the first window of a burst: a short message never
//! waits a round trip); beyond that it sends only what the receiver
//! granted. When it runs out, the engine asks [`Rccc::demand`] for a
//! DEMAND packet telling the receiver how much it wants; the receiver's
//! grant scheduler (`nic/grants.rs`) shares its own link among the senders
//! that want it and answers with GRANTs. Every count on the wire is
//! cumulative, so a lost DEMAND or GRANT is repaired by the next one; a
//! sender that hears nothing for `repair` asks again.
//!
//! The sender's credit is `free + granted - sent`: bytes sent unscheduled
//! so far, plus bytes granted so far, less bytes sent so far. A burst that
//! starts when the flow is idle (nothing in flight, everything it asked
//! for sent) tops the credit up to `unscheduled` again.

use udrma_proto::time::{Duration, Instant};

use super::{AckSample, CcConfig, CongestionControl, LossCause};

/// Receiver-credit congestion control, sender side.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Rccc {
    /// Bytes a burst may send before any grant.
    unscheduled: u64,
    /// New bytes sent (cumulative).
    sent: u64,
    /// Bytes the receiver granted (cumulative, the largest heard).
    granted: u64,
    /// Bytes taken unscheduled (cumulative).
    free: u64,
    /// The `wanted` of the last DEMAND.
    wanted: u64,
    /// Bytes in flight, as the last acknowledgement told.
    inflight: u64,
    /// When the receiver last heard from us or we from it about credit.
    progress_at: Option<Instant>,
    /// How long a blocked sender waits for a grant before asking again.
    repair: Duration,
}

impl Rccc {
    /// A controller for one peer; `cfg.unscheduled` is the first window
    /// (zero: an eighth of the bandwidth-delay product, at least a packet).
    pub fn new(cfg: &CcConfig) -> Rccc {
        let unscheduled = cfg.unscheduled_bytes();
        Rccc {
            unscheduled,
            sent: 0,
            granted: 0,
            free: unscheduled,
            wanted: 0,
            inflight: 0,
            progress_at: None,
            repair: Duration((cfg.base_rtt.0 * 4).max(Duration::from_micros(50).0)),
        }
    }
}

impl CongestionControl for Rccc {
    #[cfg(feature = "fingerprint")]
    fn snapshot(&self) -> Option<super::CcSnapshot> {
        Some(super::CcSnapshot::Rccc(self.clone()))
    }

    fn on_send(&mut self, _now: Instant, bytes: u64) {
        if self.inflight == 0 && self.sent >= self.wanted {
            // Idle: a new burst may go unscheduled again.
            let credit = (self.free + self.granted).saturating_sub(self.sent);
            self.free += self.unscheduled.saturating_sub(credit);
        }
        self.sent += bytes;
        self.inflight += bytes;
    }

    fn on_ack(&mut self, _now: Instant, ack: AckSample) {
        self.inflight = ack.inflight;
    }

    fn on_loss(&mut self, _now: Instant, _bytes: u64, _cause: LossCause) {}

    fn window(&self) -> u64 {
        u64::MAX
    }

    fn next_send_time(&self) -> Option<Instant> {
        None
    }

    fn name(&self) -> &'static str {
        "rccc"
    }

    fn credit(&self) -> Option<u64> {
        Some((self.free + self.granted).saturating_sub(self.sent))
    }

    fn on_grant(&mut self, now: Instant, granted: u64) {
        if granted > self.granted {
            self.granted = granted;
            self.progress_at = Some(now);
        }
    }

    fn demand(&mut self, now: Instant, backlog: u64) -> Option<(u64, u64)> {
        let wanted = (self.sent + backlog).max(self.wanted);
        let stale = self.progress_at.is_none_or(|t| now >= t + self.repair);
        if wanted > self.wanted || stale {
            self.wanted = wanted;
            self.progress_at = Some(now);
            return Some((wanted, self.free));
        }
        None
    }

    fn demand_due(&self) -> Option<Instant> {
        self.progress_at.map(|t| t + self.repair)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CcConfig {
        CcConfig {
            unscheduled: 8192,
            pace_slack: Duration::ZERO,
            ..CcConfig::default()
        }
    }

    /// The acknowledgement that leaves nothing in flight.
    fn drained() -> AckSample {
        AckSample {
            bytes: 4096,
            rtt: None,
            ce: false,
            inflight: 0,
        }
    }

    fn at(us: u64) -> Instant {
        Instant::ZERO + Duration::from_micros(us)
    }

    #[test]
    fn a_burst_sends_its_unscheduled_bytes_then_asks() {
        let mut c = Rccc::new(&cfg());
        assert_eq!(c.credit(), Some(8192));
        c.on_send(at(0), 4096);
        c.on_send(at(0), 4096);
        assert_eq!(c.credit(), Some(0));
        // 40 KiB more waiting: the DEMAND says 48 KiB wanted, 8 KiB free.
        assert_eq!(c.demand(at(1), 40960), Some((49152, 8192)));
        // Asked already, nothing new: no second DEMAND.
        assert_eq!(c.demand(at(2), 40960), None);
        // More waiting: a new DEMAND at once.
        assert_eq!(c.demand(at(3), 45056), Some((53248, 8192)));
        c.on_grant(at(10), 4096);
        assert_eq!(c.credit(), Some(4096));
        // A GRANT that arrives late and says less changes nothing.
        c.on_grant(at(11), 2048);
        assert_eq!(c.credit(), Some(4096));
    }

    #[test]
    fn a_blocked_sender_that_hears_nothing_asks_again() {
        let mut c = Rccc::new(&cfg());
        c.on_send(at(0), 8192);
        assert!(c.demand(at(1), 4096).is_some());
        let due = c.demand_due().unwrap();
        assert_eq!(due, at(1) + Duration::from_micros(50));
        assert_eq!(c.demand(at(50), 4096), None);
        assert_eq!(c.demand(at(51), 4096), Some((12288, 8192)));
    }

    #[test]
    fn an_idle_flow_gets_its_unscheduled_window_back() {
        let mut c = Rccc::new(&cfg());
        c.on_send(at(0), 8192);
        c.demand(at(0), 4096);
        c.on_grant(at(10), 4096);
        c.on_send(at(10), 4096);
        // Everything asked for is sent and acknowledged.
        c.on_ack(at(20), drained());
        assert_eq!(c.credit(), Some(0));
        c.on_send(at(30), 1000);
        assert_eq!(c.credit(), Some(8192 - 1000));
    }

    #[test]
    fn a_grant_that_says_nothing_new_is_not_progress() {
        let mut c = Rccc::new(&cfg());
        c.on_send(at(0), 8192);
        assert!(c.demand(at(0), 4096).is_some());
        c.on_grant(at(10), 4096);
        // The same grant again (the answer to a repeated DEMAND, say) does
        // not put off the next ask.
        c.on_grant(at(40), 4096);
        c.on_send(at(40), 4096);
        assert_eq!(c.demand_due(), Some(at(60)));
        assert!(c.demand(at(60), 4096).is_some());
    }

    #[test]
    fn an_idle_flow_with_credit_left_is_topped_up_to_the_window_only() {
        let mut c = Rccc::new(&cfg());
        c.on_send(at(0), 8192);
        c.demand(at(0), 4096);
        // Granted 8 KiB for 4 KiB wanted: 4 KiB left over when idle.
        c.on_grant(at(10), 8192);
        c.on_send(at(10), 4096);
        c.on_ack(at(20), drained());
        assert_eq!(c.credit(), Some(4096));
        c.on_send(at(30), 1000);
        assert_eq!(c.credit(), Some(8192 - 1000));
    }

    #[test]
    fn no_window_no_pacing_and_its_name() {
        let c = Rccc::new(&cfg());
        assert_eq!(c.window(), u64::MAX);
        assert_eq!(c.next_send_time(), None);
        assert_eq!(c.name(), "rccc");
        assert_eq!(c.demand_due(), None);
    }

    #[test]
    fn a_busy_flow_does_not() {
        let mut c = Rccc::new(&cfg());
        c.on_send(at(0), 8192);
        c.demand(at(0), 8192);
        c.on_grant(at(10), 4096);
        c.on_send(at(10), 4096);
        // Still 4 KiB wanted beyond what was sent: no top-up even when
        // nothing is in flight.
        c.on_ack(at(20), drained());
        c.on_grant(at(21), 8192);
        c.on_send(at(22), 4096);
        assert_eq!(c.credit(), Some(0));
    }
}
