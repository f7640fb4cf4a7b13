//! Receiver credit (`cc = "rccc"`) over virtual time: a sender sends its
//! unscheduled window, asks for the rest with a DEMAND, and sends only
//! what the receiver's GRANTs allow, paced at the receiver's line rate; a
//! lost DEMAND or lost GRANTs cost one repair interval, not the transfer.

use std::cell::Cell;
use std::rc::Rc;

mod common;

use common::{setup, Setup};
use udrma_nic::cc::{CcAlgorithm, CcConfig};
use udrma_nic::pair::{Pair, Verdict};
use udrma_nic::{Duration, Instant, NicConfig, WrId};
use udrma_proto::{NodeAddr, Opcode};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// Receiver credit at 10 Gb/s with a 20 µs base RTT, 1,000-byte payloads
/// and a 4,000-byte unscheduled window (three packets go before a grant).
fn rccc() -> NicConfig {
    NicConfig {
        mtu_payload: 1000,
        cc: CcConfig {
            algorithm: CcAlgorithm::Rccc,
            line_rate_bps: 10_000_000_000,
            base_rtt: us(20),
            target_delay: Duration::ZERO,
            mtu_bytes: 1100,
            unscheduled: 4000,
            pace_slack: Duration::ZERO,
        },
        ..NicConfig::default()
    }
}

/// A pair with a WRITE of `len` bytes posted from h0 to h1.
fn write_pair(len: u64) -> (Setup, WrId) {
    let mut s = setup(rccc());
    let wr = s.write(len);
    (s, wr)
}

/// The WRITE completed once and every byte landed.
fn done(s: &Setup, wr: WrId, len: usize) {
    s.assert_ok_once(0, wr);
    assert_eq!(s.dst_bytes(0, len), s.src_bytes(0, len));
}

/// Send times of h0's WRITE packets that reached the wire.
fn writes(p: &Pair) -> Vec<Instant> {
    p.log
        .iter()
        .filter(|l| l.from == NodeAddr(0) && l.kind.starts_with("WRITE"))
        .map(|l| l.at)
        .collect()
}

fn first(p: &Pair, kind: &str) -> Option<Instant> {
    p.log.iter().find(|l| l.kind == kind).map(|l| l.at)
}

#[test]
fn the_unscheduled_window_goes_at_once_and_the_rest_waits_for_grants() {
    let (mut s, wr) = write_pair(40_000);
    let p = &mut s.pair;
    // 5 µs in, h1 has heard the DEMAND and is granting.
    p.run_until(Instant::ZERO + us(5));
    assert!(p.nics[1].grant_backlog() > 30_000);
    p.run();
    let grant = first(p, "GRANT").expect("h1 granted credit");
    let sent = writes(p);
    assert_eq!(sent.len(), 40);
    // Three packets fit the 4,000 unscheduled bytes; the fourth waits.
    let before = sent.iter().filter(|t| **t < grant).count();
    assert_eq!(before, 3, "{sent:?}");
    // The three were already in when the DEMAND came: h1 charges its line
    // only for the unscheduled bytes still to come (the 844 of the window
    // left unsent), not for all 4,000.
    let demand = first(p, "DEMAND").unwrap();
    assert!(grant < demand + us(1) + us(2), "{demand:?} {grant:?}");
    // One DEMAND said everything at once: 40 packets of 1,052 bytes on
    // the wire wanted, 4,000 of them free, so h1 grants 38,080 bytes, a
    // packet's worth (1,100 B) each 0.907 µs at 97 % of 10 Gb/s: 35
    // GRANTs, the last 30.8 µs after the first, and the last WRITE after
    // it.
    let s0 = p.nics[0].stats();
    assert_eq!(s0.demands_sent, 1);
    assert_eq!(s0.grants_received, 35, "{s0:?}");
    assert_eq!(p.nics[1].stats().grants_sent, 35);
    let last = *sent.last().unwrap();
    assert!(
        last >= grant + us(31),
        "last WRITE at {last:?}, first GRANT at {grant:?}"
    );
    assert_eq!(p.nics[1].grant_backlog(), 0);
    assert_eq!(s0.retransmits, 0);
    done(&s, wr, 40_000);
}

#[test]
fn a_message_within_the_unscheduled_window_never_asks() {
    let (mut s, wr) = write_pair(3000);
    let p = &mut s.pair;
    p.run();
    assert_eq!(p.nics[0].stats().demands_sent, 0);
    assert_eq!(first(p, "GRANT"), None);
    done(&s, wr, 3000);
}

#[test]
fn a_lost_demand_is_asked_again_after_the_repair_interval() {
    let (mut s, wr) = write_pair(20_000);
    let p = &mut s.pair;
    let dropped = Rc::new(Cell::new(false));
    let d = dropped.clone();
    p.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::Demand && !d.get() => {
            d.set(true);
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    p.run();
    assert!(dropped.get());
    assert_eq!(p.nics[0].stats().demands_sent, 2);
    // Asked again four base RTTs (80 µs) after the first DEMAND.
    let asks: Vec<Instant> = p
        .log
        .iter()
        .filter(|l| l.kind == "DEMAND")
        .map(|l| l.at)
        .collect();
    assert_eq!(asks.len(), 2);
    assert_eq!(asks[1], asks[0] + us(80), "{asks:?}");
    assert_eq!(p.nics[0].stats().retransmits, 0);
    done(&s, wr, 20_000);
}

#[test]
fn lost_grants_are_repaired_by_the_answer_to_the_next_demand() {
    let (mut s, wr) = write_pair(20_000);
    let p = &mut s.pair;
    // Every GRANT the pacer sends is lost; only the one answering the
    // second DEMAND arrives.
    let demands = Rc::new(Cell::new(0));
    let seen = demands.clone();
    p.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::Demand => {
            seen.set(seen.get() + 1);
            Verdict::Deliver
        }
        Some(r) if r.opcode() == Opcode::Grant && seen.get() < 2 => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    p.run();
    let s0 = p.nics[0].stats();
    assert_eq!(s0.demands_sent, 2);
    // That one GRANT carried everything granted so far.
    assert_eq!(s0.grants_received, 1);
    assert_eq!(writes(p).len(), 20);
    done(&s, wr, 20_000);
}

#[test]
fn unscheduled_bytes_still_on_their_way_hold_the_first_grant_back() {
    let (mut s, wr) = write_pair(20_000);
    let p = &mut s.pair;
    // The WRITEs take 20 µs longer than the DEMAND sent after them: when
    // it arrives, the 4,000 unscheduled bytes are still coming, and they
    // will take 3.3 µs of h1's line at 97 % of 10 Gb/s.
    p.set_filter(|w| match w.repr {
        Some(r) if r.opcode() == Opcode::Write => Verdict::Delay(us(20)),
        _ => Verdict::Deliver,
    });
    p.run();
    let demand = first(p, "DEMAND").unwrap();
    let grant = first(p, "GRANT").unwrap();
    // The DEMAND lands 1 µs after it left; the first grant waits for the
    // unscheduled bytes' share of the line.
    assert!(
        grant >= demand + us(1) + Duration::from_nanos(3_290),
        "{demand:?} {grant:?}"
    );
    assert_eq!(p.nics[1].stats().demands_received, 1);
    done(&s, wr, 20_000);
}
