//! `Nscc`: a sender window driven by queueing delay and ECN, after Ultra
//! Ethernet's sender-based controller (NSCC).
//!
//! Each acknowledgement carries two signals: the queueing delay (its RTT
//! minus the smallest RTT seen toward the peer) against a target, and the
//! receiver's ECN echo. The four combinations act as UET's NSCC does:
//!
//! | delay vs target | ECN | action |
//! |---|---|---|
//! | below | no | proportional increase: the further below, the faster |
//! | above | no | fair increase: one packet per window acknowledged |
//! | above | yes | multiplicative decrease, once per RTT, if the averaged delay is above too, by how far it is |
//! | below | yes | nothing (a transient queue somewhere) |
//!
//! A loss signal (timeout or NACK) halves the window, at most once per
//! base RTT; a packet found lost because a later one overtook it does
//! not (on sprayed paths that is reordering far more often than a queue,
//! and a queue shows in the delay and the marks). The window starts at
//! its cap, 1.5 bandwidth-delay products, as UET's does; packets are
//! paced at window / smoothed RTT, so a window below one BDP spreads its
//! packets instead of bursting.
//!
//! The averaged delay is an exponentially weighted mean of the samples
//! (weight 1/8): on sprayed paths single packets meet short queues that
//! the rest of the window does not, and cutting on one such packet (the
//! instantaneous delay) slowed whole flows of a permutation for tens of
//! round trips.
//!
//! Where ours differs from UET's: no "quick adapt" to the bytes acked in
//! the last RTT (a halving instead), the fair increase is one packet
//! per window rather than a tuned constant, and the average weighs each
//! sample 1/8 rather than 1/80 (with 1/80 the all-to-all's queues
//! overflowed before the average rose).

use udrma_proto::time::{Duration, Instant};

use super::{pace_from, serialization, AckSample, CcConfig, CongestionControl, LossCause};

/// Gain of the multiplicative decrease (fraction of the excess delay).
const MD_GAIN: f64 = 0.8;
/// Deepest single decrease.
const MD_FLOOR: f64 = 0.5;
/// Gain of the proportional increase (bytes of window per byte acked, at
/// zero delay).
const PI_GAIN: f64 = 0.5;
/// Weight of each sample in the averaged queueing delay: about eight
/// acknowledgements. (UET's reference weighs 0.0125, about 80; on the
/// all-to-all that cut so late that queues overflowed: 743 drops, the
/// exchange 1.57x as long. Its code keeps 0.125 as the other choice.)
const DELAY_ALPHA: f64 = 0.125;

/// NSCC-like state toward one peer.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Nscc {
    cwnd: f64,
    max_cwnd: f64,
    min_cwnd: f64,
    mtu: f64,
    base_rtt: Duration,
    target: Duration,
    srtt: Duration,
    /// Queueing delay averaged over the acknowledgements (ps).
    avg_delay: f64,
    line_rate_bps: u64,
    last_decrease: Option<Instant>,
    next_send: Option<Instant>,
    pace_slack: Duration,
}

impl Nscc {
    /// A controller for a network described by `cfg`.
    pub fn new(cfg: &CcConfig) -> Nscc {
        let bdp = cfg.bdp() as f64;
        Nscc {
            cwnd: bdp * 1.5,
            max_cwnd: bdp * 1.5,
            min_cwnd: cfg.mtu_bytes as f64,
            mtu: cfg.mtu_bytes as f64,
            base_rtt: cfg.base_rtt,
            target: cfg.target(),
            srtt: cfg.base_rtt,
            avg_delay: 0.0,
            line_rate_bps: cfg.line_rate_bps,
            last_decrease: None,
            next_send: None,
            pace_slack: cfg.pace_slack,
        }
    }

    /// The window in bytes.
    pub fn cwnd(&self) -> u64 {
        self.cwnd as u64
    }

    /// Cuts the window to `factor` of what limits the flow: the window,
    /// or the bytes really in flight when they are fewer (a window far
    /// above the flight is no limit, and cutting it would take many RTTs
    /// to bite).
    fn decrease(&mut self, now: Instant, factor: f64, inflight: u64) {
        if self
            .last_decrease
            .is_some_and(|t| now < t + self.base_rtt.max(self.srtt))
        {
            return;
        }
        self.last_decrease = Some(now);
        let base = self.cwnd.min(inflight.max(self.mtu as u64) as f64);
        self.cwnd = (base * factor.max(MD_FLOOR)).max(self.min_cwnd);
    }
}

impl CongestionControl for Nscc {
    #[cfg(feature = "fingerprint")]
    fn snapshot(&self) -> Option<super::CcSnapshot> {
        Some(super::CcSnapshot::Nscc(self.clone()))
    }

    fn on_send(&mut self, now: Instant, bytes: u64) {
        // Pace at cwnd per smoothed RTT, never faster than the line.
        let rate = (self.cwnd * 8.0 * 1e12 / self.srtt.as_ps().max(1) as f64) as u64;
        let gap = serialization(bytes, rate.clamp(1, self.line_rate_bps));
        self.next_send = Some(pace_from(self.next_send, now, self.pace_slack) + gap);
    }

    fn on_ack(&mut self, now: Instant, ack: AckSample) {
        let target = self.target.0.max(1) as f64;
        // Without an RTT sample (a READ response, a completion notice) a
        // CE mark stands for a queue at twice the target, and no mark for
        // an empty one.
        let delay = match ack.rtt {
            Some(rtt) => {
                if rtt < self.base_rtt {
                    self.base_rtt = rtt;
                }
                self.srtt = Duration((7 * self.srtt.0 + rtt.0) / 8);
                rtt.0.saturating_sub(self.base_rtt.0) as f64
            }
            None if ack.ce => 2.0 * target,
            None => 0.0,
        };
        self.avg_delay += DELAY_ALPHA * (delay - self.avg_delay);
        let bytes = ack.bytes as f64;
        // Grow only a window the flow is using (RFC 7661's idea): one far
        // above the flight would otherwise grow without meaning anything.
        let limited = (ack.inflight + ack.bytes) as f64 * 2.0 >= self.cwnd;
        match (delay > target, ack.ce) {
            (false, false) if limited => {
                self.cwnd += PI_GAIN * bytes * (target - delay) / target;
            }
            (true, false) if limited => {
                self.cwnd += self.mtu * bytes / self.cwnd;
            }
            // A mark with the delay above the target cuts, by how far the
            // *average* delay is above it, and only if that is above too:
            // one late sprayed packet is not a standing queue.
            (true, true) if self.avg_delay > target => {
                let excess = (self.avg_delay - target) / self.avg_delay;
                self.decrease(now, 1.0 - MD_GAIN * excess, ack.inflight + ack.bytes);
            }
            _ => {}
        }
        self.cwnd = self.cwnd.clamp(self.min_cwnd, self.max_cwnd);
    }

    fn on_loss(&mut self, now: Instant, _bytes: u64, cause: LossCause) {
        if cause == LossCause::Overtaken {
            return;
        }
        self.decrease(now, 0.5, u64::MAX);
    }

    fn window(&self) -> u64 {
        self.cwnd as u64
    }

    fn next_send_time(&self) -> Option<Instant> {
        self.next_send
    }

    fn name(&self) -> &'static str {
        "nscc"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CcConfig {
        CcConfig {
            algorithm: super::super::CcAlgorithm::Nscc,
            line_rate_bps: 100_000_000_000,
            base_rtt: Duration::from_micros(10),
            target_delay: Duration::from_micros(5),
            mtu_bytes: 4160,
            unscheduled: 0,
            pace_slack: Duration::ZERO,
        }
    }

    fn ack(rtt_us: u64, ce: bool) -> AckSample {
        AckSample {
            bytes: 4160,
            rtt: Some(Duration::from_micros(rtt_us)),
            ce,
            inflight: 1 << 30,
        }
    }

    #[test]
    fn starts_at_its_cap_and_grows_back_only_to_it() {
        let mut c = Nscc::new(&cfg());
        assert_eq!(c.window(), 187_500);
        let t = Instant::ZERO;
        c.on_loss(t, 4160, LossCause::Timeout);
        assert_eq!(c.window(), 93_750);
        for _ in 0..1000 {
            c.on_ack(t, ack(10, false));
        }
        assert_eq!(c.window(), 187_500);
    }

    #[test]
    fn a_mark_cuts_a_standing_queue_once_per_rtt_not_a_lone_late_packet() {
        let mut c = Nscc::new(&cfg());
        let t = Instant::ZERO + Duration::from_micros(100);
        // One late packet, marked: 10 µs of queue against a 5 µs target,
        // but the average holds an eighth of it (1.25 µs).
        c.on_ack(t, ack(20, true));
        assert_eq!(c.window(), 187_500, "a lone late packet cut the window");
        // The queue stands: the average climbs 10 × (1 - (7/8)^n) µs,
        // 5.51 after six samples, 6.07 after seven.
        for _ in 0..5 {
            c.on_ack(t, ack(20, false));
        }
        c.on_ack(t, ack(20, true));
        // Cut by 0.8 × (6.07 - 5)/6.07: 187,500 × 0.8586.
        let once = c.window();
        assert_eq!(once, 160_996);
        c.on_ack(t + Duration::from_micros(1), ack(30, true));
        assert_eq!(c.window(), once, "a second cut within the RTT");
        c.on_ack(t + Duration::from_micros(40), ack(30, true));
        assert!(c.window() < once);
    }

    /// An average exactly at the target is not above it: no cut, and so
    /// nothing holds back the cut the next mark brings.
    #[test]
    fn an_average_at_the_target_does_not_cut() {
        let mut c = Nscc::new(&cfg());
        let us = |n: u64| Instant::ZERO + Duration::from_micros(n);
        // 40 µs of queue: the average becomes 1/8 of it, the 5 µs target.
        c.on_ack(us(100), ack(50, true));
        assert_eq!(c.cwnd(), 187_500);
        c.on_ack(us(101), ack(50, true));
        assert!(c.cwnd() < 187_500, "the first cut was held back");
    }

    /// Cuts are a round trip apart at least, and exactly one is enough.
    #[test]
    fn the_next_cut_may_come_one_rtt_after_the_last() {
        let mut c = Nscc::new(&cfg());
        let us = |n: u64| Instant::ZERO + Duration::from_micros(n);
        // Marks without RTT samples stand for 10 µs of queue and leave the
        // smoothed RTT at the base, 10 µs; the sixth lifts the average
        // past the 5 µs target.
        for _ in 0..5 {
            c.on_ack(us(100), sample(None, true, 1 << 30));
        }
        assert_eq!(c.cwnd(), 187_500);
        c.on_ack(us(100), sample(None, true, 1 << 30));
        let first = c.cwnd();
        assert!(first < 187_500, "no cut at an average above the target");
        c.on_ack(us(109), sample(None, true, 1 << 30));
        assert_eq!(c.cwnd(), first, "a cut within the RTT");
        c.on_ack(us(110), sample(None, true, 1 << 30));
        assert!(c.cwnd() < first, "no cut one RTT after the last");
    }

    #[test]
    fn low_delay_with_ecn_holds_and_high_delay_without_grows_slowly() {
        let mut c = Nscc::new(&cfg());
        let t = Instant::ZERO;
        c.on_loss(t, 4160, LossCause::Timeout);
        c.on_ack(t, ack(12, true));
        assert_eq!(c.window(), 93_750);
        c.on_ack(t, ack(30, false));
        assert_eq!(c.window(), 93_750 + 4160 * 4160 / 93_750);
    }

    fn sample(rtt_us: Option<u64>, ce: bool, inflight: u64) -> AckSample {
        AckSample {
            bytes: 4160,
            rtt: rtt_us.map(Duration::from_micros),
            ce,
            inflight,
        }
    }

    /// Each signal moves the window by the amount the table in the module
    /// comment says, with the base RTT learned from the samples.
    #[test]
    fn every_signal_moves_the_window_by_its_rule() {
        let mut c = Nscc::new(&cfg());
        assert_eq!(c.name(), "nscc");
        let us = |n: u64| Instant::ZERO + Duration::from_micros(n);
        let busy = 1 << 30;
        c.on_loss(us(0), 4160, LossCause::Timeout);
        assert_eq!(c.cwnd(), 93_750);
        // 2 µs of queue against a 5 µs target: +0.5 × 4160 × 3/5.
        c.on_ack(us(1), sample(Some(12), false, busy));
        assert_eq!(c.cwnd(), 93_750 + 1_248);
        // A window far above what is in flight does not grow, below the
        // target or above it.
        c.on_ack(us(1), sample(Some(12), false, 0));
        c.on_ack(us(1), sample(Some(30), false, 0));
        assert_eq!(c.cwnd(), 94_998);
        // A faster sample lowers the base RTT: zero queue, the full gain.
        c.on_ack(us(2), sample(Some(8), false, busy));
        assert_eq!(c.cwnd(), 94_998 + 2_080);
        // 4 µs of queue over the new base.
        c.on_ack(us(3), sample(Some(12), false, busy));
        assert_eq!(c.cwnd(), 97_078 + 416);
        // No RTT sample: a CE mark stands for twice the target (10 µs of
        // queue). The average of the samples so far (2, 2, 20, 0, 4 µs of
        // queue, then 10) is 3.64 µs, below the target: no cut yet.
        c.on_ack(us(20), sample(None, true, busy));
        assert_eq!(c.cwnd(), 97_494);
        // Two more marks: 4.43, then 5.13 µs, and the window is cut by
        // 0.8 × (5.13 - 5)/5.13.
        c.on_ack(us(21), sample(None, true, busy));
        assert_eq!(c.cwnd(), 97_494);
        c.on_ack(us(22), sample(None, true, busy));
        assert_eq!(c.cwnd(), 95_541);
        // A cut applies to the bytes in flight when they are fewer: the
        // average is 5.74 µs, 20,000 B × (1 - 0.8 × 0.74/5.74).
        c.on_ack(us(40), sample(None, true, 20_000 - 4160));
        assert_eq!(c.cwnd(), 17_943);
        // No RTT and no mark: an empty queue, the full gain.
        c.on_ack(us(41), sample(None, false, busy));
        assert_eq!(c.cwnd(), 20_023);
    }

    /// The edges of the rules: a queue exactly at the target, a window
    /// half used, the smoothed RTT in the pacing, a one-packet window.
    #[test]
    fn the_rules_at_their_edges() {
        let mut c = Nscc::new(&cfg());
        let us = |n: u64| Instant::ZERO + Duration::from_micros(n);
        c.on_loss(us(0), 4160, LossCause::Timeout);
        // Queue = target: neither below it (no gain left) nor above.
        c.on_ack(us(1), sample(Some(15), false, 1 << 30));
        assert_eq!(c.cwnd(), 93_750);
        // 50,000 B in flight keeps a 93,750 B window in use (at least
        // half), so it grows.
        c.on_ack(us(2), sample(Some(10), false, 50_000 - 4160));
        assert_eq!(c.cwnd(), 95_830);
        // Paced at cwnd per smoothed RTT: srtt = 7/8 old + 1/8 sample,
        // 10 → 10.625 → 10.546875 µs: 72.69 Gb/s, 4160 B in 457,842 ps.
        c.on_send(us(3), 4160);
        assert_eq!(c.next_send_time(), Some(us(3) + Duration::from_ps(457_842)));
        // A one-packet window is in use with one packet in flight.
        for k in 1..=10 {
            c.on_loss(us(100 * k), 4160, LossCause::Timeout);
        }
        assert_eq!(c.cwnd(), 4160);
        c.on_ack(us(1100), sample(Some(10), false, 0));
        assert_eq!(c.cwnd(), 4160 + 2080);
    }

    #[test]
    fn a_packet_overtaken_on_another_path_is_not_congestion() {
        let mut c = Nscc::new(&cfg());
        c.on_loss(Instant::ZERO, 4160, LossCause::Overtaken);
        assert_eq!(c.window(), 187_500);
        c.on_loss(Instant::ZERO, 4160, LossCause::Nack);
        assert_eq!(c.window(), 93_750);
    }

    #[test]
    fn loss_halves_and_never_goes_below_one_packet() {
        let mut c = Nscc::new(&cfg());
        let mut t = Instant::ZERO;
        for _ in 0..20 {
            c.on_loss(t, 4160, LossCause::Timeout);
            t += Duration::from_micros(50);
        }
        assert_eq!(c.window(), 4160);
    }

    #[test]
    fn paces_at_window_per_rtt() {
        let mut c = Nscc::new(&cfg());
        let mut t = Instant::ZERO;
        for _ in 0..10 {
            c.on_loss(t, 4160, LossCause::Timeout);
            t += Duration::from_micros(50);
        }
        // cwnd is one packet: one packet per 10 µs RTT.
        c.on_send(t, 4160);
        assert_eq!(c.next_send_time(), Some(t + Duration::from_micros(10)));
    }
}
