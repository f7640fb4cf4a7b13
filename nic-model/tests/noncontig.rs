//! Non-contiguous transfers as protocol stories: gather lists on WRITE and
//! SEND, scatter lists on receives and READs, indirect keys over many
//! blocks with different layouts on each side, all byte-exact over a wire
//! that loses, duplicates and reorders, and never past `max_sge`.

mod common;

use common::*;
use udrma_nic::pair::{Pair, Verdict};
use udrma_nic::{
    Access, CostModel, Duration, Event, MrKey, Nic, NicConfig, PostError, RetransmitMode, Sge, Sgl,
    WcError, WorkRequest,
};
use udrma_proto::{NodeAddr, Opcode, Syndrome};

fn list(key: MrKey, blocks: &[(u64, u64)]) -> Sgl {
    Sgl::new(
        blocks
            .iter()
            .map(|&(addr, len)| Sge { key, addr, len })
            .collect(),
    )
    .unwrap()
}

/// The bytes of `blocks` (absolute addresses) of a region, concatenated.
fn bytes_of(nic: &Nic, key: MrKey, blocks: &[(u64, u64)]) -> Vec<u8> {
    let r = nic.memory().region(key).unwrap();
    blocks
        .iter()
        .flat_map(|&(a, l)| r.bytes[(a - r.base) as usize..(a - r.base + l) as usize].to_vec())
        .collect()
}

/// Asserts every byte of the region outside `blocks` still equals `before`.
fn untouched_outside(nic: &Nic, key: MrKey, blocks: &[(u64, u64)], before: &[u8]) {
    let r = nic.memory().region(key).unwrap();
    for (i, (now, was)) in r.bytes.iter().zip(before).enumerate() {
        let a = r.base + i as u64;
        if blocks.iter().all(|&(s, l)| a < s || a >= s + l) {
            assert_eq!(now, was, "byte at {a:#x}, between blocks, changed");
        }
    }
}

/// Delays the 2nd data packet, drops the 3rd, duplicates the 4th.
fn rough_wire(s: &mut Setup) {
    let mut seen = 0;
    s.pair.set_filter(move |w| {
        let data = w.repr.is_some_and(|r| {
            matches!(
                r.opcode(),
                Opcode::Write | Opcode::Send | Opcode::ReadResponse
            )
        });
        if !data {
            return Verdict::Deliver;
        }
        seen += 1;
        match seen {
            2 => Verdict::Delay(Duration::from_micros(30)),
            3 => Verdict::Drop,
            4 => Verdict::Duplicate(2),
            _ => Verdict::Deliver,
        }
    });
}

/// Asserts the rough wire really dropped and duplicated something.
fn was_rough(s: &Setup) {
    let v: Vec<_> = s.pair.log.iter().map(|l| l.verdict).collect();
    assert!(v.contains(&Verdict::Drop), "nothing dropped");
    assert!(
        v.iter().any(|x| matches!(x, Verdict::Duplicate(_))),
        "nothing duplicated"
    );
}

#[test]
fn a_gathered_write_lands_contiguously_across_packet_boundaries() {
    let mut s = setup(config());
    rough_wire(&mut s);
    // Three blocks of odd sizes: packets (1024 B) straddle them.
    let blocks = [(SRC + 5000, 700), (SRC + 100, 1500), (SRC + 9000, 333)];
    let wr = WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, s.dst.0, DST + 64)
        .gather(list(s.src, &blocks));
    assert_eq!(wr.len, 2533);
    let before = s.dst_bytes(0, 8192);
    let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
    s.pair.run();
    was_rough(&s);
    s.assert_ok_once(0, id);
    let want = bytes_of(&s.pair.nics[0], s.src, &blocks);
    assert_eq!(s.dst_bytes(64, 2533), want);
    assert_eq!(s.dst_bytes(0, 64), before[..64]);
    assert_eq!(s.dst_bytes(2597, 100), before[2597..2697]);
    // Packets that spanned blocks were counted, piece by piece.
    assert!(s.pair.nics[0].stats().dma_pieces >= 4);
    assert_eq!(s.pair.nics[0].stats().max_sges_posted, 3);
}

#[test]
fn more_entries_than_max_sge_are_refused_at_post() {
    let mut s = setup(NicConfig {
        max_sge: 4,
        ..config()
    });
    let blocks: Vec<(u64, u64)> = (0..5).map(|i| (SRC + i * 64, 8)).collect();
    let wr =
        WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, s.dst.0, DST).gather(list(s.src, &blocks));
    assert_eq!(
        s.pair.nics[0].post(s.pair.now, wr.clone()),
        Err(PostError::TooManySges { sges: 5, max: 4 })
    );
    assert_eq!(
        s.pair.nics[1].post_recv_sgl(s.pair.now, 0, list(s.dst, &blocks)),
        Err(PostError::TooManySges { sges: 5, max: 4 })
    );
    let four = WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, s.dst.0, DST)
        .gather(list(s.src, &blocks[..4]));
    s.pair.nics[0].post(s.pair.now, four).unwrap();
    assert_eq!(s.pair.nics[0].stats().max_sges_posted, 4);
    assert_eq!(s.pair.nics[0].stats().posted, 1);
    // An entry outside its region is refused like a bad buffer.
    let bad = WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, s.dst.0, DST)
        .gather(list(s.src, &[(SRC, 8), (SRC + LEN as u64 - 4, 8)]));
    assert_eq!(
        s.pair.nics[0].post(s.pair.now, bad),
        Err(PostError::LocalAccess(Syndrome::OutOfBounds))
    );
}

#[test]
fn a_send_scatters_into_a_receive_list_of_the_same_lengths() {
    let mut s = setup(config());
    rough_wire(&mut s);
    // The study's rule for SEND/RECV lists: the same block lengths on both
    // sides, at different places.
    let lens = [256u64, 1000, 64, 2048, 300];
    let send: Vec<(u64, u64)> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| (SRC + 4096 * i as u64, l))
        .collect();
    let recv: Vec<(u64, u64)> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| (DST + 40_000 - 5000 * i as u64, l))
        .collect();
    let before = s.dst_bytes(0, 64 * 1024);
    let rid = s.pair.nics[1]
        .post_recv_sgl(s.pair.now, 0, list(s.dst, &recv))
        .unwrap();
    let wr = WorkRequest::send(NodeAddr(1), MrKey(0), 0, 0).gather(list(s.src, &send));
    let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
    s.pair.run();
    was_rough(&s);
    s.assert_ok_once(0, id);
    s.assert_ok_once(1, rid);
    assert_eq!(
        bytes_of(&s.pair.nics[1], s.dst, &recv),
        bytes_of(&s.pair.nics[0], s.src, &send)
    );
    untouched_outside(&s.pair.nics[1], s.dst, &recv, &before);
}

#[test]
fn a_write_through_an_indirect_key_with_a_different_layout_on_each_side() {
    let mut s = setup(config());
    rough_wire(&mut s);
    // Sender: 4 blocks; receiver: 7 blocks of other sizes, out of address
    // order; both 3050 bytes.
    let send = [
        (SRC + 100, 100),
        (SRC + 3000, 2000),
        (SRC + 800, 50),
        (SRC + 9000, 900),
    ];
    let recv = [
        (DST + 9000, 500),
        (DST + 100, 10),
        (DST + 4000, 1200),
        (DST + 20_000, 1),
        (DST + 300, 639),
        (DST + 7000, 600),
        (DST + 50_000, 100),
    ];
    let ikey = s.pair.nics[1]
        .memory_mut()
        .register_indirect(0x7000_0000, list(s.dst, &recv), Access::ALL)
        .unwrap();
    let before = s.dst_bytes(0, 64 * 1024);
    let wr = WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, ikey.0, 0x7000_0000)
        .gather(list(s.src, &send));
    let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
    s.pair.run();
    was_rough(&s);
    s.assert_ok_once(0, id);
    assert_eq!(
        bytes_of(&s.pair.nics[1], s.dst, &recv),
        bytes_of(&s.pair.nics[0], s.src, &send)
    );
    untouched_outside(&s.pair.nics[1], s.dst, &recv, &before);
    let st = s.pair.nics[1].stats();
    assert!(st.translation_misses > 0, "the receiver translated: {st:?}");
}

#[test]
fn a_read_from_an_indirect_key_scatters_into_a_local_list() {
    let mut s = setup(config());
    rough_wire(&mut s);
    let remote = [(DST + 5000, 1500), (DST + 100, 1500), (DST + 30_000, 7)];
    let local = [(SRC + 20_000, 7), (SRC + 1000, 2000), (SRC + 60_000, 1000)];
    let ikey = s.pair.nics[1]
        .memory_mut()
        .register_indirect(0x10, list(s.dst, &remote), Access::ALL)
        .unwrap();
    let before = s.src_bytes(0, 64 * 1024);
    let wr =
        WorkRequest::read(NodeAddr(1), MrKey(0), 0, 0, ikey.0, 0x10).gather(list(s.src, &local));
    let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
    s.pair.run();
    was_rough(&s);
    s.assert_ok_once(0, id);
    assert_eq!(
        bytes_of(&s.pair.nics[0], s.src, &local),
        bytes_of(&s.pair.nics[1], s.dst, &remote)
    );
    untouched_outside(&s.pair.nics[0], s.src, &local, &before);
}

#[test]
fn an_indirect_key_whose_region_is_gone_is_refused_and_writes_nothing() {
    let mut s = setup(config());
    let spare = s.pair.nics[1].register(0x900_0000, 4096, Access::ALL);
    let recv = [(DST + 100, 1000), (0x900_0000, 1000)];
    let blocks = Sgl::new(vec![
        Sge {
            key: s.dst,
            addr: recv[0].0,
            len: 1000,
        },
        Sge {
            key: spare,
            addr: recv[1].0,
            len: 1000,
        },
    ])
    .unwrap();
    let ikey = s.pair.nics[1]
        .memory_mut()
        .register_indirect(0, blocks, Access::ALL)
        .unwrap();
    s.pair.nics[1].memory_mut().deregister(spare);
    let before = s.dst_bytes(0, 4096);
    let wr = WorkRequest::write(NodeAddr(1), s.src, SRC, 2000, ikey.0, 0);
    let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
    s.pair.run();
    assert_eq!(
        s.completions(0, id),
        vec![Err(WcError::Remote(Syndrome::BadRkey))]
    );
    assert_eq!(
        s.dst_bytes(0, 4096),
        before,
        "the whole range is refused up front"
    );
}

/// A NIC with `cfg` that has posted, at time zero, a WRITE of 2,000 bytes
/// gathered from 20 blocks of 100 bytes, 1,000 apart; and the blocks' key.
fn posted_gather_of_twenty_blocks(cfg: NicConfig) -> (Nic, MrKey) {
    let mut nic = Nic::new(NodeAddr(0), cfg).unwrap();
    let k = nic.register(SRC, 65_536, Access::ALL);
    let blocks: Vec<(u64, u64)> = (0..20).map(|i| (SRC + 1000 * i, 100)).collect();
    nic.post(
        udrma_nic::Instant::ZERO,
        WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, 7, 0).gather(list(k, &blocks)),
    )
    .unwrap();
    (nic, k)
}

#[test]
fn gathering_costs_a_setup_per_extra_block_and_a_longer_descriptor_fetch() {
    let cost = CostModel {
        descriptor_fetch: Duration::from_nanos(400),
        per_sge: Duration::from_nanos(10),
        dma_setup: Duration::from_nanos(50),
        ..CostModel::ZERO
    };
    let (mut nic, k) = posted_gather_of_twenty_blocks(NicConfig { cost, ..config() });
    let t0 = udrma_nic::Instant::ZERO;
    // The descriptor with 20 entries is fetched 400 + 20 × 10 ns later.
    assert_eq!(nic.poll_timeout(), Some(t0 + Duration::from_nanos(600)));
    nic.handle_timeout(t0 + Duration::from_nanos(600));
    let mut buf = Vec::new();
    // 2000 bytes in 1024-byte packets: bytes 0..1024 touch blocks 0 to 10.
    let first = nic.poll_transmit(t0, &mut buf).unwrap();
    assert_eq!(first.nic_work, Duration::from_nanos(10 * 50), "11 pieces");
    // Bytes 1024..2000: the rest of block 10 and blocks 11 to 19.
    let second = nic.poll_transmit(t0, &mut buf).unwrap();
    assert_eq!(second.nic_work, Duration::from_nanos(9 * 50), "10 pieces");
    // A contiguous buffer costs nothing extra.
    nic.post(t0, WorkRequest::write(NodeAddr(1), k, SRC, 100, 7, 0))
        .unwrap();
    nic.handle_timeout(t0 + Duration::from_micros(5));
    let plain = nic.poll_transmit(t0, &mut buf).unwrap();
    assert_eq!(plain.nic_work, Duration::ZERO);
}

/// A packet whose gather takes its NIC a while leaves only once gathered:
/// its retransmit timer counts from then, so a slow gather (an indirect
/// key's walk took up to 276 us a packet in finding 34) is never taken
/// for a loss. Nor does it leave before a packet handed out ahead of it.
#[test]
fn a_packets_timer_counts_from_when_its_gather_is_done() {
    let cost = CostModel {
        dma_setup: Duration::from_micros(10),
        ..CostModel::ZERO
    };
    let rto = Duration::from_micros(100);
    let cfg = NicConfig {
        cost,
        rto_initial: rto,
        ..config()
    };
    let (mut nic, _) = posted_gather_of_twenty_blocks(cfg);
    let t1 = nic.poll_timeout().expect("the descriptor fetch");
    nic.handle_timeout(t1);
    let mut buf = Vec::new();
    let first = nic.poll_transmit(t1, &mut buf).unwrap();
    assert_eq!(first.nic_work, Duration::from_micros(10 * 10), "11 pieces");
    let second = nic.poll_transmit(t1, &mut buf).unwrap();
    assert_eq!(second.nic_work, Duration::from_micros(9 * 10), "10 pieces");
    // The second packet is gathered sooner, but leaves behind the first:
    // the NIC sends in the order it hands packets out. Both are due one
    // RTO after the first one's gather is done, not one before the other.
    let leaves = t1 + first.nic_work;
    assert_eq!(nic.poll_timeout(), Some(leaves + rto));
    nic.handle_timeout(leaves + rto);
    assert_eq!(nic.poll_timeout(), None, "both came due at once");
    assert_eq!(nic.stats().timeouts, 2);
    assert!(
        nic.recorded_timeouts().is_empty(),
        "recorded only when asked"
    );
}

/// Asked to (a timeline), the NIC records when each retransmit timer
/// expired and for which message: the same two expiries as above, at the
/// instant they fired, and nothing else changes.
#[test]
fn a_nic_asked_to_records_each_timeout() {
    let cfg = NicConfig {
        cost: CostModel {
            dma_setup: Duration::from_micros(10),
            ..CostModel::ZERO
        },
        rto_initial: Duration::from_micros(100),
        ..config()
    };
    let (mut nic, _) = posted_gather_of_twenty_blocks(cfg);
    nic.record_timeouts();
    let t1 = nic.poll_timeout().expect("the descriptor fetch");
    nic.handle_timeout(t1);
    let mut buf = Vec::new();
    let first = nic.poll_transmit(t1, &mut buf).unwrap();
    let msg = udrma_proto::Packet::new_checked(&buf[..])
        .map(|p| p.msg_id())
        .expect("a packet");
    nic.poll_transmit(t1, &mut buf).unwrap();
    let due = t1 + first.nic_work + Duration::from_micros(100);
    nic.handle_timeout(due);
    assert_eq!(nic.stats().timeouts, 2);
    assert_eq!(nic.recorded_timeouts(), &[(due, msg), (due, msg)]);
}

/// A pair with `cost` whose h1 holds an indirect key over `blocks` blocks
/// of 32 bytes, 64 apart; returns the pair, h0's source key and the
/// indirect key.
fn pair_with_indirect_target(cost: CostModel, blocks: u64) -> (Pair, MrKey, MrKey) {
    let cfg = NicConfig { cost, ..config() };
    let mut pair = Pair::new(cfg);
    let src = pair.nics[0].register(SRC, 65_536, Access::ALL);
    let dst = pair.nics[1].register(DST, 65_536, Access::ALL);
    let entries: Vec<Sge> = (0..blocks)
        .map(|i| Sge {
            key: dst,
            addr: DST + 64 * i,
            len: 32,
        })
        .collect();
    let ikey = pair.nics[1]
        .memory_mut()
        .register_indirect(0, Sgl::new(entries).unwrap(), Access::ALL)
        .unwrap();
    (pair, src, ikey)
}

/// h0 WRITEs 1024 bytes at `offset` of h1's indirect key `ikey`, one
/// packet; returns the work h1's NIC prices for receiving it.
fn write_one_packet(pair: &mut Pair, src: MrKey, ikey: MrKey, offset: u64) -> Duration {
    let mut buf = Vec::new();
    let t = pair.now;
    pair.nics[0]
        .post(
            t,
            WorkRequest::write(NodeAddr(1), src, SRC, 1024, ikey.0, offset),
        )
        .unwrap();
    // (The descriptor fetch costs nothing here, but is still a step.)
    pair.nics[0].handle_timeout(t);
    let tx = pair.nics[0].poll_transmit(t, &mut buf).unwrap();
    let work = pair.nics[1].receive_work(NodeAddr(0), &buf[..tx.len]);
    pair.nics[1].handle_datagram(t, NodeAddr(0), &buf[..tx.len]);
    pair.run();
    work
}

#[test]
fn the_receiver_pays_for_translation_misses_then_hits_on_a_repeat() {
    let cost = CostModel {
        translate_hit: Duration::from_nanos(5),
        translate_miss: Duration::from_nanos(500),
        ..CostModel::ZERO
    };
    // 32 blocks of 32 bytes: one 1024-byte packet, 8 table lines.
    let (mut pair, src, ikey) = pair_with_indirect_target(cost, 32);
    let work: Vec<Duration> = (0..2)
        .map(|_| write_one_packet(&mut pair, src, ikey, 0))
        .collect();
    // Both levels: 8 lines of key entries, and for each of the 32 blocks
    // the page-table line of its page (all in one line: 32 KiB of pages).
    // The 31 extra DMA setups cost nothing here (dma_setup is zero).
    assert_eq!(
        work[0],
        Duration::from_nanos(9 * 500 + 31 * 5),
        "cold: 8 key lines and 1 page line fetched, the page line then hit"
    );
    assert_eq!(
        work[1],
        Duration::from_nanos(40 * 5),
        "warm: every line cached"
    );
    let st = pair.nics[1].stats();
    assert_eq!((st.translation_misses, st.translation_hits), (9, 71));
    assert!(pair
        .events_of(1)
        .any(|e| matches!(e, Event::WriteReceived { len: 1024, .. })));
}

#[test]
fn an_indirect_key_s_lookup_walks_its_entries_so_deep_blocks_cost_more() {
    // The study's explanation of the indirect key's slow-down: its
    // translation is a two-level lookup whose first level grows with the
    // blocks. Entries have lengths of their own, so the NIC walks them
    // from the first to each block's: a packet deep in the key pays for
    // every entry before its own, and a whole transfer's walks grow with
    // the square of its blocks.
    let cost = CostModel {
        translate_search: Duration::from_nanos(1),
        ..CostModel::ZERO
    };
    // 128 blocks of 32 bytes: 32 to a 1024-byte WRITE.
    let (mut pair, src, ikey) = pair_with_indirect_target(cost, 128);
    let work: Vec<Duration> = (0..4u64)
        .map(|k| write_one_packet(&mut pair, src, ikey, 1024 * k))
        .collect();
    // WRITE k touches entries 32k to 32k + 31: it steps over 32 × 32k +
    // (0 + 1 + ... + 31) = 1024k + 496 entries.
    let ns: Vec<u64> = work.iter().map(|d| d.as_ps() / 1000).collect();
    assert_eq!(ns, [496, 1520, 2544, 3568]);
    // All 128 blocks once: 0 + 1 + ... + 127 steps; twice the blocks
    // would be four times the walk.
    assert_eq!(pair.nics[1].stats().translation_search_steps, 8128);
}

/// Datagrams `from` sends now, in order.
fn drain(nic: &mut Nic, now: udrma_nic::Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = nic.poll_transmit(now, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

#[test]
fn a_sends_first_packet_fetches_the_receive_list_and_each_packet_pays_its_blocks() {
    let cost = CostModel {
        dma_setup: Duration::from_nanos(50),
        per_sge: Duration::from_nanos(10),
        recv_fetch: Duration::from_nanos(1000),
        ..CostModel::ZERO
    };
    let mut a = Nic::new(NodeAddr(0), NicConfig { cost, ..config() }).unwrap();
    let mut b = Nic::new(NodeAddr(1), NicConfig { cost, ..config() }).unwrap();
    assert!(!b.uses_layouts());
    assert!(b.needs_dma_work(), "recv_fetch is priced");
    let src = a.register(SRC, 4096, Access::ALL);
    let dst = b.register(DST, 65_536, Access::ALL);
    let t = udrma_nic::Instant::ZERO;
    b.post_recv_sgl(
        t,
        0,
        list(dst, &[(DST, 500), (DST + 4000, 700), (DST + 9000, 800)]),
    )
    .unwrap();
    assert!(b.uses_layouts());
    a.post(t, WorkRequest::send(NodeAddr(1), src, SRC, 2000))
        .unwrap();
    // (The descriptor takes per_sge to fetch.)
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let pkts = drain(&mut a, t);
    assert_eq!(pkts.len(), 2);
    // Packet 0 (FIRST): the descriptor with 3 entries, then bytes 0..1024
    // over entries 0 and 1 (one extra setup).
    assert_eq!(
        b.receive_work(NodeAddr(0), &pkts[0]),
        Duration::from_nanos(1000 + 3 * 10 + 50)
    );
    b.handle_datagram(t, NodeAddr(0), &pkts[0]);
    // Packet 1 fills the buffer bound to its SEND: bytes 1024..2000 over
    // the rest of entry 1 and entry 2, no fetch.
    assert_eq!(
        b.receive_work(NodeAddr(0), &pkts[1]),
        Duration::from_nanos(50)
    );
    b.handle_datagram(t, NodeAddr(0), &pkts[1]);
    assert!(b
        .poll_event()
        .is_some_and(|e| matches!(e, Event::Completed { len: 2000, .. })));
    // Not data: nothing to place.
    assert_eq!(b.receive_work(NodeAddr(0), &[1, 2, 3]), Duration::ZERO);
}

/// h0's SEND of `len` bytes toward h1, whose receive list is `blocks`,
/// with a DMA setup of 50 ns per extra block and `retransmit`: h1 and the
/// SEND's packets, not yet delivered.
fn send_into_list(
    retransmit: RetransmitMode,
    blocks: &[(u64, u64)],
    len: u64,
) -> (Nic, MrKey, Vec<Vec<u8>>) {
    let cfg = NicConfig {
        cost: CostModel {
            dma_setup: Duration::from_nanos(50),
            ..CostModel::ZERO
        },
        retransmit,
        ..config()
    };
    let mut a = Nic::new(NodeAddr(0), cfg.clone()).unwrap();
    let mut b = Nic::new(NodeAddr(1), cfg).unwrap();
    let src = a.register(SRC, 4096, Access::ALL);
    let dst = b.register(DST, 65_536, Access::ALL);
    let t = udrma_nic::Instant::ZERO;
    b.post_recv_sgl(t, 0, list(dst, blocks)).unwrap();
    a.post(t, WorkRequest::send(NodeAddr(1), src, SRC, len))
        .unwrap();
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let pkts = drain(&mut a, t);
    (b, dst, pkts)
}

/// A receive list over which each packet of a 2,500-byte SEND spans two
/// blocks: one extra DMA setup each.
const TWO_BLOCKS_A_PACKET: [(u64, u64); 4] = [
    (DST, 500),
    (DST + 4000, 1000),
    (DST + 9000, 700),
    (DST + 12_000, 400),
];

/// A copy the receiver will discard never reaches its DMA engine: a copy
/// of a packet the bitmask holds, one go-back-N's sequence turns away, and
/// a late copy of a finished SEND cost no block setup. When they did, a
/// slow NIC that timed out spent its time translating copies it then
/// dropped, and its queue fed itself (docs/testing.md, finding 22).
#[test]
fn copies_the_receiver_discards_cost_its_dma_engine_nothing() {
    let blocks = TWO_BLOCKS_A_PACKET;
    let (mut b, dst, pkts) = send_into_list(RetransmitMode::GoBackN, &blocks, 2500);
    assert_eq!(pkts.len(), 3);
    let t = udrma_nic::Instant::ZERO + Duration::from_micros(1);
    let one_extra_block = Duration::from_nanos(50);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), one_extra_block);
    b.handle_datagram(t, NodeAddr(0), &pkts[0]);
    // A copy of packet 0: the bitmask holds it.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), Duration::ZERO);
    // Packet 1 forged to say the SEND has 4 packets, not 3: refused.
    let mut forged = udrma_proto::Repr::parse_bytes(&pkts[1]).unwrap();
    forged.seg_count = 4;
    let forged = forged.to_vec().unwrap();
    assert_eq!(b.receive_work(NodeAddr(0), &forged), Duration::ZERO);
    // Packet 2 before packet 1: go-back-N discards it.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[2]), Duration::ZERO);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[1]), one_extra_block);
    b.handle_datagram(t, NodeAddr(0), &pkts[1]);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[2]), one_extra_block);
    b.handle_datagram(t, NodeAddr(0), &pkts[2]);
    assert!(b
        .poll_event()
        .is_some_and(|e| matches!(e, Event::Completed { len: 2500, .. })));
    // Late copies of the finished SEND, with a buffer posted they could
    // take if they were new.
    b.post_recv_sgl(t, 0, list(dst, &blocks)).unwrap();
    for p in &pkts {
        assert_eq!(b.receive_work(NodeAddr(0), p), Duration::ZERO);
    }
}

/// A copy that arrives while its first copy still waits in the receive
/// unit costs no placing work either: the first is handled before it and
/// sets its bit. When it did, a receiver that took longer to place a
/// message than the sender's timer cap placed every spurious copy too,
/// fell further behind each round, and its sender ran out of retries
/// with nothing lost (docs/testing.md, finding 42).
#[test]
fn a_copy_of_a_packet_still_waiting_to_be_placed_costs_nothing() {
    let blocks = TWO_BLOCKS_A_PACKET;
    let (mut b, _, pkts) = send_into_list(RetransmitMode::Selective, &blocks, 2500);
    let t = udrma_nic::Instant::ZERO + Duration::from_micros(1);
    let one_extra_block = Duration::from_nanos(50);
    // Packet 0 is booked; two copies of it arrive before it is handled.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), one_extra_block);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), Duration::ZERO);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), Duration::ZERO);
    // Packet 1 is its own packet: booked in full.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[1]), one_extra_block);
    b.handle_datagram(t, NodeAddr(0), &pkts[0]);
    b.handle_datagram(t, NodeAddr(0), &pkts[0]);
    b.handle_datagram(t, NodeAddr(0), &pkts[1]);
    // Handled: a later copy is the bitmask's to discard, and a packet
    // not booked before costs its work.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[1]), Duration::ZERO);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[2]), one_extra_block);
    b.handle_datagram(t, NodeAddr(0), &pkts[2]);
    assert!(b
        .poll_event()
        .is_some_and(|e| matches!(e, Event::Completed { len: 2500, .. })));
}

/// A packet of an operation not registered yet: go-back-N discards all
/// but packet 0, while selective retransmission keeps it in the escape
/// channel and places it later, so its work counts.
#[test]
fn a_packet_ahead_of_its_registration_costs_work_only_if_it_will_be_placed() {
    // Each packet spans two blocks: one extra setup each.
    let blocks = [(DST, 500), (DST + 4000, 1000), (DST + 9000, 500)];
    let one_extra_block = Duration::from_nanos(50);
    for retransmit in [RetransmitMode::GoBackN, RetransmitMode::Selective] {
        let (mut b, _, pkts) = send_into_list(retransmit, &blocks, 2000);
        assert_eq!(pkts.len(), 2);
        let want = match retransmit {
            RetransmitMode::GoBackN => Duration::ZERO,
            _ => one_extra_block,
        };
        assert_eq!(
            b.receive_work(NodeAddr(0), &pkts[1]),
            want,
            "{retransmit:?}"
        );
        assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), one_extra_block);
    }
}

#[test]
fn a_read_response_pays_for_the_blocks_of_the_local_list_it_lands_in() {
    let cost = CostModel {
        dma_setup: Duration::from_nanos(50),
        ..CostModel::ZERO
    };
    let mut a = Nic::new(NodeAddr(0), NicConfig { cost, ..config() }).unwrap();
    let mut b = Nic::new(NodeAddr(1), NicConfig { cost, ..config() }).unwrap();
    let src = a.register(SRC, 65_536, Access::ALL);
    let dst = b.register(DST, 65_536, Access::ALL);
    let t = udrma_nic::Instant::ZERO;
    // One 1024-byte entry, then nine small ones.
    let mut blocks = vec![(SRC, 1024)];
    blocks.extend((0..8).map(|i| (SRC + 2000 + 200 * i, 100)));
    blocks.push((SRC + 5000, 176));
    let wr = WorkRequest::read(NodeAddr(1), MrKey(0), 0, 0, dst.0, DST).gather(list(src, &blocks));
    assert_eq!(wr.len, 2000);
    a.post(t, wr).unwrap();
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let req = drain(&mut a, t);
    b.handle_datagram(t, NodeAddr(0), &req[0]);
    let resp = drain(&mut b, t);
    assert_eq!(resp.len(), 2);
    // Response 0 lands in the first entry alone; response 1 in nine.
    assert_eq!(a.receive_work(NodeAddr(1), &resp[0]), Duration::ZERO);
    assert_eq!(
        a.receive_work(NodeAddr(1), &resp[1]),
        Duration::from_nanos(8 * 50)
    );
    for r in &resp {
        a.handle_datagram(t, NodeAddr(1), r);
    }
    assert_eq!(
        bytes_of(&a, src, &blocks),
        b.memory().region(dst).unwrap().bytes[..2000].to_vec()
    );
}

#[test]
fn a_send_into_a_receive_under_an_indirect_key_pays_for_the_blocks_at_its_offset() {
    let cost = CostModel {
        dma_setup: Duration::from_nanos(50),
        ..CostModel::ZERO
    };
    let mut a = Nic::new(NodeAddr(0), NicConfig { cost, ..config() }).unwrap();
    let mut b = Nic::new(NodeAddr(1), NicConfig { cost, ..config() }).unwrap();
    assert!(
        !a.needs_dma_work(),
        "a plain NIC with no list, key or priced lookup"
    );
    let src = a.register(SRC, 4096, Access::ALL);
    let dst = b.register(DST, 65_536, Access::ALL);
    // 1024 bytes in one block, then four of 256 B.
    let mut blocks = vec![Sge {
        key: dst,
        addr: DST,
        len: 1024,
    }];
    blocks.extend((0..4).map(|i| Sge {
        key: dst,
        addr: DST + 4096 + 512 * i,
        len: 256,
    }));
    let ikey = b
        .memory_mut()
        .register_indirect(0x7_0000, Sgl::new(blocks).unwrap(), Access::ALL)
        .unwrap();
    assert!(b.uses_layouts() && b.needs_dma_work());
    let t = udrma_nic::Instant::ZERO;
    b.post_recv(t, 0, ikey, 0x7_0000, 2048).unwrap();
    a.post(t, WorkRequest::send(NodeAddr(1), src, SRC, 2048))
        .unwrap();
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let pkts = drain(&mut a, t);
    // Packet 0 fills the big block alone; packet 1 (offset 1024) the four.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), Duration::ZERO);
    b.handle_datagram(t, NodeAddr(0), &pkts[0]);
    assert_eq!(
        b.receive_work(NodeAddr(0), &pkts[1]),
        Duration::from_nanos(3 * 50)
    );
    // Only packets of several blocks count their pieces.
    assert_eq!(b.stats().dma_pieces, 4);
    // Translation is not priced here, so no page lines are walked; the
    // key's own entry lines are (4 to a line): line 0 for packet 0, lines
    // 0 and 1 for packet 1.
    assert_eq!(b.stats().translation_hits + b.stats().translation_misses, 3);
}

#[test]
fn page_lines_are_walked_only_when_priced_and_never_for_an_empty_packet() {
    let priced = CostModel {
        translate_hit: Duration::from_nanos(5),
        translate_miss: Duration::from_nanos(500),
        ..CostModel::ZERO
    };
    let mut a = Nic::new(
        NodeAddr(0),
        NicConfig {
            cost: priced,
            ..config()
        },
    )
    .unwrap();
    // A 1024-byte WRITE ending exactly at a page-table line boundary
    // (32 KiB of pages to a line) touches one line.
    let base = 0x10_0000;
    let src = a.register(base, 65_536, Access::ALL);
    let t = udrma_nic::Instant::ZERO;
    a.post(
        t,
        WorkRequest::write(NodeAddr(1), src, base + 32_768 - 1024, 1024, 7, 0),
    )
    .unwrap();
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let mut buf = Vec::new();
    let tx = a.poll_transmit(t, &mut buf).unwrap();
    assert_eq!(tx.nic_work, Duration::from_nanos(500), "one line fetched");
    assert_eq!(a.stats().translation_misses, 1);
    // A zero-length WRITE has no bytes to translate (and does not panic).
    a.post(t, WorkRequest::write(NodeAddr(1), src, base, 0, 7, 0))
        .unwrap();
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let tx = a.poll_transmit(t, &mut buf).unwrap();
    assert_eq!(tx.nic_work, Duration::ZERO);
    // Unpriced, a list walks no page lines at all.
    let mut b = Nic::new(NodeAddr(0), config()).unwrap();
    let k = b.register(base, 65_536, Access::ALL);
    b.post(
        t,
        WorkRequest::write(NodeAddr(1), MrKey(0), 0, 0, 7, 0)
            .gather(list(k, &[(base, 100), (base + 50_000, 100)])),
    )
    .unwrap();
    b.poll_transmit(t, &mut buf).unwrap();
    assert_eq!(b.stats().translation_hits + b.stats().translation_misses, 0);
    assert_eq!(b.stats().dma_pieces, 2);
}
