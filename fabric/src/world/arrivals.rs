//! What a host has heard from each source, to count packets that arrive
//! out of order.

use super::*;

/// The highest packet serial number that reached a host from each source.
/// The two sources heard most recently sit inline (a host of a permutation
/// hears from two: the peer writing to it and the peer it writes to, whose
/// ACKs come back), so a delivery reads the host's own state instead of a
/// tree node of its own, which on a large fabric is a cold load at every
/// delivery; the rest wait in a tree.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Arrivals {
    /// The newest first.
    recent: [Option<(NodeAddr, u64)>; 2],
    rest: BTreeMap<NodeAddr, u64>,
}

impl Arrivals {
    /// Notes packet `serial` from `src`; says whether a later packet from
    /// that source (a higher serial) reached the host before it.
    #[inline]
    pub(super) fn overtaken(&mut self, src: NodeAddr, serial: u64) -> bool {
        let entry = match &mut self.recent {
            [Some(e), _] if e.0 == src => e,
            [first, Some(e)] if e.0 == src => {
                let e = *e;
                self.recent[1] = first.take();
                self.recent[0].insert(e)
            }
            _ => {
                let max = self.rest.remove(&src).unwrap_or(0);
                if let Some((s, m)) = self.recent[1].take() {
                    self.rest.insert(s, m);
                }
                self.recent[1] = self.recent[0].take();
                self.recent[0].insert((src, max))
            }
        };
        if serial < entry.1 {
            true
        } else {
            entry.1 = serial;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same verdicts as one plain map from source to highest serial,
    /// whatever the order of sources (three or more take turns in the
    /// inline pair and the tree).
    #[test]
    fn a_packet_is_overtaken_exactly_when_a_later_one_from_its_source_came_first() {
        let mut arrivals = Arrivals::default();
        let mut plain: BTreeMap<NodeAddr, u64> = BTreeMap::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut overtaken = 0;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let src = NodeAddr((x % 5) as u32);
            let serial = (x >> 8) % 1000;
            let max = plain.entry(src).or_insert(0);
            let expected = serial < *max;
            if !expected {
                *max = serial;
            }
            overtaken += u32::from(expected);
            assert_eq!(
                arrivals.overtaken(src, serial),
                expected,
                "{src:?} {serial}"
            );
        }
        assert!(overtaken > 1000, "the sequence reorders: {overtaken}");
    }

    #[test]
    fn two_sources_taking_turns_stay_inline() {
        let mut arrivals = Arrivals::default();
        for serial in 1..100 {
            assert!(!arrivals.overtaken(NodeAddr(serial as u32 % 2), serial));
        }
        assert!(arrivals.rest.is_empty());
        assert!(arrivals.overtaken(NodeAddr(0), 3));
    }
}
