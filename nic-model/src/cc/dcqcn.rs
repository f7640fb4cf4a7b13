//! `Dcqcn`: an ECN-driven rate controller, after DCQCN (Zhu et al.,
//! SIGCOMM 2015), the congestion control of RoCEv2 NICs.
//!
//! The sender keeps a current rate `rc`, a target rate `rt` and an
//! estimate `alpha` of how congested the path is. An ECN echo (RoCE's
//! congestion notification packet; here the ECE flag on an ACK or SACK)
//! cuts the rate, at most once per `CUT_PERIOD`: `rt = rc`,
//! `rc *= 1 - alpha/2`, and alpha moves toward 1. Every `UPDATE_PERIOD`
//! without an echo, alpha decays toward 0 and the rate recovers: five
//! steps of fast recovery (`rc = (rc + rt)/2`), then additive increase
//! (`rt += RAI`) and, after five more, hyper increase. Packets are paced at
//! `rc`; there is no window.
//!
//! Where ours differs from the paper: the echo arrives on the ACK rather
//! than as a separate notification packet, and time-driven steps are
//! applied lazily when the controller is next called (the result is the
//! same as a timer's). As in the paper and in RoCE NICs, a loss does not
//! change the rate: loss is for recovery (selective repeat, go-back-N) to
//! repair, and only a congestion notification says the path is full. A
//! fabric that drops without marking therefore gives DCQCN nothing to act
//! on, as a RoCE fabric without ECN would. A trimmed packet is the
//! exception: the switch cut it on a full queue, so its NACK is taken as
//! the notification its lost mark would have drawn (with go-back-N the
//! receiver discards the packets after it, so no echo would come at all).

use udrma_proto::time::{Duration, Instant};

use super::{pace_from, serialization, AckSample, CcConfig, CongestionControl, LossCause};

/// Alpha's gain (the paper's g = 1/256).
const G: f64 = 1.0 / 256.0;
/// Least time between two rate cuts (the paper's 50 µs).
const CUT_PERIOD: Duration = Duration::from_micros(50);
/// Period of alpha decay and rate increase (the paper's 55 µs timer).
const UPDATE_PERIOD: Duration = Duration::from_micros(55);
/// Fast-recovery steps before additive increase.
const FAST_STEPS: u32 = 5;

/// DCQCN-like state toward one peer.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Dcqcn {
    line: f64,
    rc: f64,
    rt: f64,
    alpha: f64,
    /// Additive increase per step, bits/s (line rate / 200).
    rai: f64,
    min_rate: f64,
    last_cut: Option<Instant>,
    /// Next time-driven update, once a cut started recovery.
    next_update: Option<Instant>,
    echo_since_update: bool,
    steps: u32,
    next_send: Option<Instant>,
    pace_slack: Duration,
}

impl Dcqcn {
    /// A controller for a network described by `cfg`.
    pub fn new(cfg: &CcConfig) -> Dcqcn {
        let line = cfg.line_rate_bps as f64;
        Dcqcn {
            line,
            rc: line,
            rt: line,
            alpha: 1.0,
            rai: line / 200.0,
            min_rate: line / 1000.0,
            last_cut: None,
            next_update: None,
            echo_since_update: false,
            steps: 0,
            next_send: None,
            pace_slack: cfg.pace_slack,
        }
    }

    /// The current sending rate, bits/s.
    pub fn rate_bps(&self) -> u64 {
        self.rc as u64
    }

    /// Applies every periodic update due by `now`.
    fn advance(&mut self, now: Instant) {
        while let Some(at) = self.next_update.filter(|t| *t <= now) {
            if self.echo_since_update {
                self.alpha = (1.0 - G) * self.alpha + G;
            } else {
                self.alpha *= 1.0 - G;
            }
            self.echo_since_update = false;
            self.steps += 1;
            if self.steps > FAST_STEPS {
                let hyper = if self.steps > 2 * FAST_STEPS {
                    10.0
                } else {
                    1.0
                };
                self.rt = (self.rt + hyper * self.rai).min(self.line);
            }
            self.rc = ((self.rc + self.rt) / 2.0).min(self.line);
            self.next_update = if self.rc >= self.line {
                None
            } else {
                Some(at + UPDATE_PERIOD)
            };
        }
    }

    fn cut(&mut self, now: Instant, factor: f64) {
        if self.last_cut.is_some_and(|t| now < t + CUT_PERIOD) {
            return;
        }
        self.last_cut = Some(now);
        self.rt = self.rc;
        self.rc = (self.rc * factor).max(self.min_rate);
        self.steps = 0;
        self.next_update = Some(now + UPDATE_PERIOD);
    }
}

impl Dcqcn {
    /// A congestion notification: alpha moves toward 1 and the rate is
    /// cut (at most once per `CUT_PERIOD`).
    fn notified(&mut self, now: Instant) {
        self.echo_since_update = true;
        self.alpha = (1.0 - G) * self.alpha + G;
        self.cut(now, 1.0 - self.alpha / 2.0);
    }
}

impl CongestionControl for Dcqcn {
    #[cfg(feature = "fingerprint")]
    fn snapshot(&self) -> Option<super::CcSnapshot> {
        Some(super::CcSnapshot::Dcqcn(self.clone()))
    }

    fn on_send(&mut self, now: Instant, bytes: u64) {
        self.advance(now);
        let from = pace_from(self.next_send, now, self.pace_slack);
        self.next_send = Some(from + serialization(bytes, self.rc as u64));
    }

    fn on_ack(&mut self, now: Instant, ack: AckSample) {
        self.advance(now);
        if ack.ce {
            self.notified(now);
        }
    }

    fn on_loss(&mut self, now: Instant, _bytes: u64, cause: LossCause) {
        if cause == LossCause::Trimmed {
            // A trimmed header says a queue on the path was full: the
            // congestion notification a marked packet would have sent,
            // which the trim (or go-back-N's discarding what follows it)
            // kept the receiver from echoing.
            self.advance(now);
            self.notified(now);
            return;
        }
        // Only the time-driven steps due by now; the rate stays.
        self.advance(now);
    }

    fn window(&self) -> u64 {
        u64::MAX
    }

    fn next_send_time(&self) -> Option<Instant> {
        self.next_send
    }

    fn name(&self) -> &'static str {
        "dcqcn"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ce() -> AckSample {
        AckSample {
            bytes: 4160,
            rtt: None,
            ce: true,
            inflight: 0,
        }
    }

    #[test]
    fn an_echo_cuts_by_half_alpha_once_per_period_then_recovers() {
        let mut c = Dcqcn::new(&CcConfig::default());
        let t = Instant::ZERO + Duration::from_micros(1);
        c.on_ack(t, ce());
        // alpha starts at 1: the first cut halves the rate.
        assert_eq!(c.rate_bps(), 50_000_000_000);
        c.on_ack(t + Duration::from_micros(10), ce());
        assert_eq!(c.rate_bps(), 50_000_000_000, "within the cut period");
        // One update period later, fast recovery halves the gap to rt.
        c.on_send(t + Duration::from_micros(55), 64);
        assert_eq!(c.rate_bps(), 75_000_000_000);
        // Long after, the rate is back at the line.
        c.on_send(t + Duration::from_millis(10), 64);
        assert_eq!(c.rate_bps(), 100_000_000_000);
    }

    /// The whole cycle, step by step (values from the paper's rules:
    /// g = 1/256, five fast-recovery steps, then additive increase of
    /// line/200 per 55 µs, hyper increase ten times that after five more).
    #[test]
    fn cuts_recover_fast_then_additively_then_hyper() {
        let mut c = Dcqcn::new(&CcConfig::default());
        let t0 = Instant::ZERO + Duration::from_micros(1);
        let at = |us: u64| t0 + Duration::from_micros(us);
        c.on_ack(at(0), ce());
        c.on_send(at(55), 64);
        assert_eq!(c.rate_bps(), 75_000_000_000);
        // A second echo: the target becomes 75, the rate halves again
        // (alpha is still 1: echoes keep it there).
        c.on_ack(at(60), ce());
        assert_eq!(c.rate_bps(), 37_500_000_000);
        let expect = [
            (115, 56_250_000_000),
            (170, 65_625_000_000),
            (225, 70_312_500_000),
            (280, 72_656_250_000),
            (335, 73_828_125_000), // fifth fast-recovery step
            (390, 74_664_062_500), // additive: target 75.5
            (445, 75_332_031_250),
            (500, 75_916_015_625),
            (555, 76_458_007_812),
            (610, 76_979_003_906), // target 77.5
            (665, 79_739_501_953), // hyper: target 82.5
            (720, 83_619_750_976),
            (775, 88_059_875_488),
        ];
        for (us, rate) in expect {
            c.on_send(at(us), 64);
            assert_eq!(c.rate_bps(), rate, "at {us} µs");
        }
        // Thirteen quiet periods decayed alpha to 0.9543: the next cut
        // takes less than half.
        c.on_ack(at(800), ce());
        assert_eq!(c.rate_bps(), 46_042_180_576);
        // Losses of every other kind leave the rate alone (random loss is
        // not congestion); only the recovery steps due by then apply.
        c.on_send(at(900), 64);
        assert_eq!(c.rate_bps(), 67_051_028_032);
        for cause in [LossCause::Timeout, LossCause::Nack, LossCause::Overtaken] {
            c.on_loss(at(900), 4160, cause);
            assert_eq!(c.rate_bps(), 67_051_028_032, "{cause:?}");
        }
        // ... and still once the next recovery step is due.
        c.on_loss(at(960), 4160, LossCause::Timeout);
        assert!(c.rate_bps() > 67_051_028_032);
        assert_eq!(c.window(), u64::MAX);
        assert_eq!(c.name(), "dcqcn");
    }

    /// A trimmed header is the one loss that says a queue was full: it
    /// cuts the rate as an echo does (go-back-N discards what follows a
    /// trim, so no echo may ever come), and only once per cut period.
    #[test]
    fn a_trim_cuts_as_an_echo_does() {
        let (mut a, mut b) = (
            Dcqcn::new(&CcConfig::default()),
            Dcqcn::new(&CcConfig::default()),
        );
        let line = a.rate_bps();
        a.on_ack(Instant::ZERO, ce());
        b.on_loss(Instant::ZERO, 4160, LossCause::Trimmed);
        assert!(b.rate_bps() < line);
        assert_eq!(b.rate_bps(), a.rate_bps());
        b.on_loss(Instant::ZERO, 4160, LossCause::Trimmed);
        assert_eq!(b.rate_bps(), a.rate_bps(), "one cut per period");
    }

    #[test]
    fn paces_at_the_current_rate() {
        let mut c = Dcqcn::new(&CcConfig::default());
        let t = Instant::ZERO;
        c.on_ack(t, ce());
        c.on_send(t, 5000);
        // 5000 B at 50 Gb/s: 800 ns.
        assert_eq!(c.next_send_time(), Some(t + Duration::from_nanos(800)));
    }
}
