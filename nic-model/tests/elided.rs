//! Elided payloads: a simulator's NICs leave phantom memory's all-zero
//! payloads out of their buffers. The story is told twice, elided and
//! whole, and must come out the same: the same datagrams (lengths and
//! ICRCs), the same completions, the same counters.

use udrma_nic::{Access, Event, Nic, NicConfig, RxMeta, Transmit, WorkRequest};
use udrma_proto::{Datagram, Instant, NodeAddr, Repr};

const SRC: u64 = 0x1000;
const DST: u64 = 0x10_0000;

/// What one run saw: each datagram whole, with how much was left out.
struct Run {
    wire: Vec<(NodeAddr, Vec<u8>, u16)>,
    events: Vec<Vec<Event>>,
    nics: [Nic; 2],
}

/// h0 WRITEs 10 KiB and READs 5 KiB of h1's memory (mtu 1024), over a
/// 1 µs wire, with phantom regions on both sides (or, with `real_src`, a
/// zero-filled real source region on h0).
fn run(elide: bool, real_src: bool) -> Run {
    let cfg = NicConfig {
        mtu_payload: 1024,
        ..NicConfig::default()
    };
    let mut nics = [
        Nic::new(NodeAddr(0), cfg.clone()).unwrap(),
        Nic::new(NodeAddr(1), cfg).unwrap(),
    ];
    let src = if real_src {
        nics[0].register(SRC, 1 << 20, Access::ALL)
    } else {
        nics[0]
            .memory_mut()
            .register_phantom(SRC, 1 << 20, Access::ALL)
    };
    let dst = nics[1]
        .memory_mut()
        .register_phantom(DST, 1 << 20, Access::ALL);
    for n in &mut nics {
        n.set_elide_zeros(elide);
    }
    let mut now = Instant::ZERO;
    nics[0]
        .post(
            now,
            WorkRequest::write(NodeAddr(1), src, SRC, 10 * 1024, dst.0, DST),
        )
        .unwrap();
    nics[0]
        .post(
            now,
            WorkRequest::read(NodeAddr(1), src, SRC, 5 * 1024, dst.0, DST),
        )
        .unwrap();
    let mut wire = Vec::new();
    let mut in_flight: Vec<(Instant, usize, Vec<u8>, u16)> = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..10_000 {
        for (i, nic) in nics.iter_mut().enumerate() {
            while let Some(Transmit { len, elided, .. }) = nic.poll_transmit(now, &mut buf) {
                let bytes = buf[..len].to_vec();
                let whole = Datagram {
                    bytes: &bytes,
                    zeros: elided,
                }
                .to_vec();
                wire.push((NodeAddr(i as u32), whole, elided));
                in_flight.push((
                    now + udrma_nic::Duration::from_micros(1),
                    1 - i,
                    bytes,
                    elided,
                ));
            }
        }
        in_flight.sort_by_key(|(t, ..)| *t);
        let next_arrival = in_flight.first().map(|(t, ..)| *t);
        let next_timer = nics.iter().filter_map(|n| n.poll_timeout()).min();
        let Some(t) = next_arrival.into_iter().chain(next_timer).min() else {
            break;
        };
        now = t;
        while in_flight.first().is_some_and(|(t, ..)| *t <= now) {
            let (_, to, bytes, zeros) = in_flight.remove(0);
            nics[to].handle_elided(
                now,
                NodeAddr(1 - to as u32),
                RxMeta::default(),
                Datagram {
                    bytes: &bytes,
                    zeros,
                },
            );
        }
        for n in &mut nics {
            n.handle_timeout(now);
        }
    }
    let events = nics
        .iter_mut()
        .map(|n| std::iter::from_fn(|| n.poll_event()).collect())
        .collect();
    Run { wire, events, nics }
}

#[test]
fn phantom_payloads_travel_elided_and_nothing_else_changes() {
    let (elided, whole) = (run(true, false), run(false, false));
    // WRITE data from h0 and READ responses from h1 went without payload.
    let left_out: Vec<u16> = elided.wire.iter().map(|w| w.2).filter(|z| *z > 0).collect();
    assert_eq!(left_out.len(), 10 + 5, "every data packet: {left_out:?}");
    assert!(left_out.iter().all(|z| *z == 1024));
    assert!(whole.wire.iter().all(|w| w.2 == 0));
    // The same datagrams, byte for byte once rebuilt (ICRC included).
    let strip = |r: &Run| -> Vec<(NodeAddr, Vec<u8>)> {
        r.wire.iter().map(|(n, b, _)| (*n, b.clone())).collect()
    };
    assert_eq!(strip(&elided), strip(&whole));
    for (_, b, _) in &elided.wire {
        Repr::parse_bytes(b).expect("a rebuilt datagram is a valid datagram");
    }
    assert_eq!(elided.events, whole.events);
    assert_eq!(elided.events[0].len(), 2, "both requests completed on h0");
    for i in 0..2 {
        assert_eq!(elided.nics[i].stats(), whole.nics[i].stats());
        assert!(elided.nics[i].is_idle());
    }
}

#[test]
fn zeros_from_real_memory_are_carried() {
    // A real region that happens to hold zeros is not phantom memory: its
    // bytes could change between reads, so they travel.
    let r = run(true, true);
    let from_h0: Vec<u16> = r
        .wire
        .iter()
        .filter(|w| w.0 == NodeAddr(0))
        .map(|w| w.2)
        .collect();
    assert!(from_h0.iter().all(|z| *z == 0), "{from_h0:?}");
    assert!(
        r.wire.iter().any(|w| w.0 == NodeAddr(1) && w.2 > 0),
        "h1's phantom READ responses still elided"
    );
}
