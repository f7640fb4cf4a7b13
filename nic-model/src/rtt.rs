//! `RttEstimator`: the adaptive retransmission timeout of RFC 6298
//! (srtt + 4·rttvar, clamped), with exponential backoff per packet. As in
//! Linux, the variance term is never less than the RTO floor: a simulated
//! path's RTT barely varies, and an RTO of one bare srtt fires on every
//! ACK that a SACK delay or a queue holds back a little.

use udrma_proto::time::Duration;

/// Smoothed RTT state toward one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The fastest sample seen (`None` before any).
    fastest: Option<Duration>,
    initial: Duration,
    min: Duration,
    max: Duration,
}

impl RttEstimator {
    /// No samples yet: the RTO is `initial` (clamped).
    pub fn new(initial: Duration, min: Duration, max: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            fastest: None,
            initial,
            min,
            max,
        }
    }

    /// Feeds one sample (never from a retransmitted packet: Karn's rule).
    pub fn on_sample(&mut self, rtt: Duration) {
        self.fastest = Some(self.fastest.map_or(rtt, |f| f.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = Duration(rtt.0 / 2);
            }
            Some(srtt) => {
                let err = srtt.0.abs_diff(rtt.0);
                self.rttvar = Duration((3 * self.rttvar.0 + err) / 4);
                self.srtt = Some(Duration((7 * srtt.0 + rtt.0) / 8));
            }
        }
    }

    /// Smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The fastest round trip sampled, once sampled: no packet sent later
    /// is answered much sooner than this.
    pub fn fastest(&self) -> Option<Duration> {
        self.fastest
    }

    /// The smoothed RTT's mean deviation (zero before any sample).
    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    /// srtt + max(4·rttvar, min), clamped to `[min, max]` (the initial
    /// RTO before any sample).
    pub fn rto(&self) -> Duration {
        let raw = match self.srtt {
            None => self.initial,
            Some(srtt) => srtt + self.rttvar.saturating_mul(4).max(self.min),
        };
        Duration(raw.0.clamp(self.min.0, self.max.0))
    }

    /// The RTO after `retries` timeouts of one packet: doubled each time,
    /// capped at `max`.
    pub fn backoff(&self, retries: u32) -> Duration {
        let factor = 1u64 << retries.min(32);
        Duration(self.rto().0.saturating_mul(factor).min(self.max.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_rfc6298_and_clamps() {
        let us = Duration::from_micros;
        let mut e = RttEstimator::new(us(100), us(5), us(1000));
        assert_eq!(e.rto(), us(100));
        e.on_sample(us(10));
        // srtt 10, rttvar 5 → 10 + 20.
        assert_eq!(e.rto(), us(30));
        e.on_sample(us(10));
        // rttvar = (3·5 + 0)/4 = 3.75 → 10 + 15.
        assert_eq!(e.rto(), us(25));
        assert_eq!(e.backoff(1), us(50));
        assert_eq!(e.backoff(10), us(1000), "capped at max");
        for _ in 0..40 {
            e.on_sample(us(10));
        }
        // rttvar → 0: the floor stands in for it.
        assert_eq!(e.rto(), us(15), "srtt + min when the RTT never varies");
        let mut tiny = RttEstimator::new(us(100), us(5), us(1000));
        tiny.on_sample(Duration::from_nanos(1));
        assert_eq!(tiny.rto(), us(5) + Duration::from_nanos(1));
    }

    #[test]
    fn remembers_the_fastest_sample_while_the_smoothed_one_swells() {
        let us = Duration::from_micros;
        let mut e = RttEstimator::new(us(100), us(5), us(1000));
        assert_eq!(e.fastest(), None);
        e.on_sample(us(4));
        e.on_sample(us(2));
        for _ in 0..20 {
            e.on_sample(us(40));
        }
        assert_eq!(e.fastest(), Some(us(2)));
        assert!(e.srtt().is_some_and(|s| s > us(30)));
    }
}
