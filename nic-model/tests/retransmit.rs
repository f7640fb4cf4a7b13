//! Retransmission stories with exact timing: Karn's rule keeps RTT samples
//! honest, and go-back-N differs from selective retransmission in what a
//! timeout sends again, not only in how much.

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{Duration, NicConfig, RetransmitMode};
use udrma_proto::Opcode;

#[test]
fn a_retransmitted_packet_gives_no_rtt_sample() {
    // Karn's rule: when the first copy is lost, the ACK of the second
    // cannot say which copy it answers, so it must not feed the estimator.
    let mut s = setup(config());
    s.pair.set_filter(first_matching(is_data, Verdict::Drop, 1));
    let wr = s.write(1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.timeouts, h0.retransmits, h0.acks, h0.rtt_samples),
        (1, 1, 1, 0)
    );
    // A clean WRITE of two packets gives two samples, one per ACK.
    let wr = s.write(2048);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.acks, h0.rtt_samples), (3, 2));
}

/// A 4-packet WRITE through an OP table of 2, so packet 3 leaves after
/// packet 2: packet 1's ACK is held 2 µs (packet 3 waits for its slot),
/// packet 2 is lost, and packet 3's ACK is held past every timer. Returns
/// the data packets h0 sent at the moment packet 2's timer fired.
fn resent_when_the_first_timer_fires(mode: RetransmitMode) -> Vec<u32> {
    let mut s = setup(NicConfig {
        retransmit: mode,
        op_table_capacity: 2,
        ..config()
    });
    let mut lost = false;
    s.pair.set_filter(move |w| {
        let Some(r) = w.repr else {
            return Verdict::Deliver;
        };
        let ack = opcode(w) == Some(Opcode::Ack);
        match (ack, r.seg_index) {
            (false, 2) if !lost && is_data(w) => {
                lost = true;
                Verdict::Drop
            }
            (true, 1) => Verdict::Delay(Duration::from_micros(2)),
            (true, 3) => Verdict::Delay(Duration::from_millis(1)),
            _ => Verdict::Deliver,
        }
    });
    let wr = s.write(4096);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(4096);
    let data = writes_sent(&s);
    // The first copy sent twice is packet 2's retransmission.
    let first_again = data
        .iter()
        .enumerate()
        .find(|(i, l)| data[..*i].iter().any(|e| e.seg_index == l.seg_index))
        .map(|(_, l)| l.at)
        .unwrap();
    data.iter()
        .filter(|l| l.at == first_again)
        .map(|l| l.seg_index)
        .collect()
}

#[test]
fn go_back_n_resends_the_later_packets_when_the_first_timer_fires() {
    assert_eq!(
        resent_when_the_first_timer_fires(RetransmitMode::Selective),
        vec![2],
        "selective: only the lost packet; packet 3 waits for its own timer"
    );
    assert_eq!(
        resent_when_the_first_timer_fires(RetransmitMode::GoBackN),
        vec![2, 3],
        "go-back-N: the lost packet and everything after it, at once"
    );
}

/// A go-back-N pair whose loss budget is zero: the first timeout fails
/// the request. Nothing in these stories is lost.
fn go_back_n_without_a_loss_budget() -> Setup {
    setup(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        max_retries: 0,
        ..config()
    })
}

/// Packet 2 of an 8-packet WRITE is trimmed three times over (a switch
/// queue full each time). A trim is congestion, not a failed try: the
/// header comes back as a `TRIMMED` NACK, and under go-back-N every later
/// packet, which the receiver discards as out of sequence, goes again
/// with it at once. No timer fires and the loss budget is not touched.
/// Before, the trimmed packet alone went again, the discarded ones each
/// waited for their own timer, and each `SEQUENCE_ERROR` spent a retry:
/// the WRITE failed with `RetryExceeded` having lost nothing.
#[test]
fn go_back_n_spends_no_retry_on_trimmed_packets() {
    let mut s = go_back_n_without_a_loss_budget();
    let mut trims = 0;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if trims < 3 && r.opcode() == Opcode::Write && r.seg_index == 2 => {
            trims += 1;
            Verdict::Trim
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(8 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(8 * 1024);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.retries_exhausted), (0, 0));
    assert_eq!(
        h0.nacks_received.get(&udrma_proto::Syndrome::Trimmed),
        Some(&3)
    );
    // Each trim sends packet 2 again, and as much after it as the loss
    // window lets out (a trim is a full queue): 10 copies. Without the
    // window each trim sent the five after it too, which the receiver
    // discarded: 18.
    assert_eq!(resent_segments(&s).len(), 10);
    assert_eq!(h0.loss_window_cuts, 3);
}

/// Packet 2's first copy is overtaken by 3 and 4 (held 3 µs on the way):
/// the receiver discards them as out of sequence and NACKs
/// `SEQUENCE_ERROR`. That is reordering, not loss: the sender goes back,
/// spends nothing of its loss budget, and the WRITE completes.
#[test]
fn go_back_n_spends_no_retry_on_a_sequence_error() {
    let mut s = go_back_n_without_a_loss_budget();
    s.pair.set_filter(first_matching(
        |w| is_data(w) && w.repr.is_some_and(|r| r.seg_index == 2),
        Verdict::Delay(Duration::from_micros(3)),
        1,
    ));
    let wr = s.write(8 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(8 * 1024);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        h0.nacks_received
            .get(&udrma_proto::Syndrome::SequenceError)
            .copied(),
        Some(1)
    );
    assert_eq!((h0.timeouts, h0.retries_exhausted), (0, 0));
}
