//! Byte fixtures for every opcode, written by an encoder independent of
//! this crate (it follows docs/wire-format.md), and the four smoltcp-style
//! checks over them: deconstruct (view getters), construct (view setters),
//! parse (bytes → Repr) and emit (Repr → bytes).

use udrma_proto::{
    Body, Error, Flags, Hello, Opcode, Packet, Protocol, ReduceHeader, ReduceOp, ReduceType,
    Rendezvous, Repr, Syndrome,
};

// WRITE_FIRST: 56 bytes
const WRITE_FIRST: [u8; 56] = [
    // header
    0x01, 0x01, 0x00, 0x03, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x10, 0x00,
    0xde, 0xad, 0xbe, 0xef, // ICRC
    0x1b, 0xf6, 0xb0, 0x39,
];
// READ_REQ: 52 bytes
const READ_REQ: [u8; 52] = [
    // header
    0x01, 0x02, 0x00, 0x07, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x10, 0x00,
    // ICRC
    0xd7, 0xe8, 0x17, 0x42,
];
// READ_REQ retry asking for responses 2..=5 only (flags 0x0107 with PARTIAL,
// seg_index 2, seg_count 4): 52 bytes
const READ_REQ_PARTIAL: [u8; 52] = [
    // header
    0x01, 0x02, 0x01, 0x07, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension
    0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x10, 0x00,
    // ICRC
    0x30, 0x18, 0xe4, 0x6c,
];
// READ_RESP_MIDDLE: 46 bytes
const READ_RESP_MIDDLE: [u8; 46] = [
    // header
    0x01, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x10, 0x00, 0x01, 0x02, // ICRC
    0x08, 0x45, 0x42, 0x83,
];
// SEND_ONLY: 47 bytes
const SEND_ONLY: [u8; 47] = [
    // header
    0x01, 0x04, 0x00, 0x26, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x03, 0x00, 0x03, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x61, 0x62, 0x63, // ICRC
    0x28, 0x5a, 0x8a, 0x3e,
];
// ACK: 36 bytes
const ACK: [u8; 36] = [
    // header
    0x01, 0x10, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // ICRC
    0xde, 0xb0, 0xd9, 0xe6,
];
// ACK with ECN echo (flags 0x0080): 36 bytes
const ACK_ECE: [u8; 36] = [
    // header
    0x01, 0x10, 0x00, 0x80, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // ICRC
    0x33, 0xd2, 0xa4, 0x48,
];
// SACK: 48 bytes
const SACK: [u8; 48] = [
    // header
    0x01, 0x11, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x00, 0x40, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // ICRC
    0x21, 0xb3, 0xd8, 0xa0,
];
// NACK: 44 bytes
const NACK: [u8; 44] = [
    // header
    0x01, 0x12, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0xde, 0xad, // ICRC
    0x86, 0xe2, 0xad, 0xd0,
];
// COMPLETION: 44 bytes
const COMPLETION: [u8; 44] = [
    // header
    0x01, 0x13, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // ICRC
    0x4f, 0x54, 0x68, 0x83,
];
// DATA_ARRIVED: 52 bytes
const DATA_ARRIVED: [u8; 52] = [
    // header
    0x01, 0x14, 0x00, 0x40, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0xfe, 0xed,
    // ICRC
    0xef, 0x63, 0xae, 0x52,
];
// CREDIT: 36 bytes
const CREDIT: [u8; 36] = [
    // header
    0x01, 0x20, 0x00, 0x20, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // ICRC
    0xbb, 0xcc, 0x2c, 0x55,
];
// RTS: 68 bytes
const RTS: [u8; 68] = [
    // header
    0x01, 0x21, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x63, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x33, 0x01, 0x02, 0x03, 0x04,
    // ICRC
    0x56, 0x7b, 0x29, 0x7b,
];
// CTS: 68 bytes
const CTS: [u8; 68] = [
    // header
    0x01, 0x22, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x63, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x44, 0x01, 0x02, 0x03, 0x04,
    // ICRC
    0xe3, 0xa4, 0xfd, 0x99,
];
// FIN: 48 bytes
const FIN: [u8; 48] = [
    // header
    0x01, 0x23, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x63, 0x01, 0x02, 0x03, 0x04, // ICRC
    0xd9, 0x38, 0xf0, 0x86,
];

// HELLO (reply): 68 bytes
const HELLO: [u8; 68] = [
    // header
    0x01, 0x24, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension: reply, max payload 4096, nonce, region 0x100000 + 64 MiB, rkey 5, 8 ports
    0x01, 0x00, 0x10, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x08, 0x00, 0x00,
    // ICRC
    0x52, 0x35, 0x4c, 0x90,
];

// DEMAND: 52 bytes
const DEMAND: [u8; 52] = [
    // header
    0x01, 0x25, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension: wanted 3 MiB + 4214, free 8428
    0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x10, 0x76, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0xec,
    // ICRC
    0x4b, 0xa7, 0xbd, 0xcc,
];

// GRANT: 44 bytes
const GRANT: [u8; 44] = [
    // header
    0x01, 0x26, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension: granted 0x1_0000_1076 (past 32 bits)
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x10, 0x76, // ICRC
    0xc4, 0xfb, 0xab, 0xc0,
];

// REDUCE: 68 bytes (sum of f64 x2, chunk 1 of 2)
const REDUCE: [u8; 68] = [
    // header
    0x01, 0x30, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x01, 0x02, 0x02, 0x01, 0x00, 0x04, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06,
    0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    // ICRC
    0x4a, 0x56, 0xab, 0x7b,
];
// REDUCE_BCAST: 60 bytes (maxloc of u32 x1 with its location)
const REDUCE_BCAST: [u8; 60] = [
    // header
    0x01, 0x31, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x05, 0x05, 0x01, 0x03, 0x00, 0x04, 0x00, 0x09, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x05, // ICRC
    0xdd, 0xf2, 0x3a, 0x48,
];
// REDUCE_ACK: 44 bytes (acknowledges the REDUCE above)
const REDUCE_ACK: [u8; 44] = [
    // header
    0x01, 0x32, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02, 0x00, 0x01, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    // extension + payload
    0x30, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, // ICRC
    0x86, 0xba, 0xc3, 0xcd,
];

fn repr(
    flags: Flags,
    seg_index: u32,
    seg_count: u32,
    credits: u16,
    body: Body<'static>,
) -> Repr<'static> {
    Repr {
        flags,
        src_ep: 1,
        dst_ep: 2,
        op_num: 0x0001_0003,
        msg_id: 7,
        seg_index,
        seg_count,
        credits,
        epoch: 0x2a,
        body,
    }
}

fn table() -> Vec<(&'static str, &'static [u8], Repr<'static>)> {
    let only = Flags::FIRST | Flags::LAST;
    vec![
        (
            "WRITE_FIRST",
            &WRITE_FIRST,
            repr(
                Flags::FIRST | Flags::ACK_REQ,
                0,
                4,
                0,
                Body::Write {
                    remote_addr: 0x10_0000,
                    rkey: 0x11,
                    total_len: 4096,
                    data: &[0xde, 0xad, 0xbe, 0xef],
                },
            ),
        ),
        (
            "READ_REQ",
            &READ_REQ,
            repr(
                only | Flags::ACK_REQ,
                0,
                1,
                0,
                Body::ReadRequest {
                    remote_addr: 0x20_0000,
                    rkey: 0x22,
                    length: 4096,
                },
            ),
        ),
        (
            "READ_REQ (a partial retry)",
            &READ_REQ_PARTIAL,
            repr(
                only | Flags::ACK_REQ | Flags::PARTIAL,
                2,
                4,
                0,
                Body::ReadRequest {
                    remote_addr: 0x20_0000,
                    rkey: 0x22,
                    length: 4096,
                },
            ),
        ),
        (
            "READ_RESP_MIDDLE",
            &READ_RESP_MIDDLE,
            repr(
                Flags::empty(),
                1,
                4,
                0,
                Body::ReadResponse {
                    offset: 1024,
                    total_len: 4096,
                    data: &[1, 2],
                },
            ),
        ),
        (
            "SEND_ONLY",
            &SEND_ONLY,
            repr(
                only | Flags::CREDITS_VALID,
                0,
                1,
                3,
                Body::Send {
                    offset: 0,
                    total_len: 3,
                    data: b"abc",
                },
            ),
        ),
        ("ACK", &ACK, repr(Flags::empty(), 2, 4, 0, Body::Ack)),
        (
            "ACK (with ECN echo)",
            &ACK_ECE,
            repr(Flags::ECE, 2, 4, 0, Body::Ack),
        ),
        (
            "SACK",
            &SACK,
            repr(
                Flags::empty(),
                0,
                200,
                0,
                Body::SelectiveAck {
                    base: 64,
                    bitmap: 0x8000_0000_0000_0005,
                },
            ),
        ),
        (
            "NACK",
            &NACK,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Nack {
                    syndrome: Syndrome::BadRkey,
                    detail: 0xdead,
                },
            ),
        ),
        (
            "COMPLETION",
            &COMPLETION,
            repr(
                Flags::empty(),
                0,
                4,
                0,
                Body::Completion {
                    status: 0,
                    length: 4096,
                },
            ),
        ),
        (
            "DATA_ARRIVED",
            &DATA_ARRIVED,
            repr(
                Flags::SOLICITED,
                0,
                1,
                0,
                Body::DataArrived {
                    addr: 0x10_0000,
                    length: 4096,
                    immediate: 0xfeed,
                },
            ),
        ),
        (
            "CREDIT",
            &CREDIT,
            repr(Flags::CREDITS_VALID, 0, 0, 16, Body::Credit),
        ),
        (
            "RTS",
            &RTS,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Rts(Rendezvous {
                    protocol: Protocol::Rget,
                    tag: 99,
                    length: 65_536,
                    addr: 0x30_0000,
                    rkey: 0x33,
                    seq: 0x0102_0304,
                }),
            ),
        ),
        (
            "CTS",
            &CTS,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Cts(Rendezvous {
                    protocol: Protocol::Rput,
                    tag: 99,
                    length: 65_536,
                    addr: 0x40_0000,
                    rkey: 0x44,
                    seq: 0x0102_0304,
                }),
            ),
        ),
        (
            "FIN",
            &FIN,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Fin {
                    protocol: Protocol::R3,
                    tag: 99,
                    seq: 0x0102_0304,
                },
            ),
        ),
        (
            "HELLO",
            &HELLO,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Hello(Hello {
                    reply: true,
                    max_payload: 4096,
                    nonce: 0xdead_beef,
                    region_addr: 0x10_0000,
                    region_len: 64 << 20,
                    rkey: 5,
                    ports: 8,
                }),
            ),
        ),
        (
            "DEMAND",
            &DEMAND,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Demand {
                    wanted: (3 << 20) + 4214,
                    free: 8428,
                },
            ),
        ),
        (
            "GRANT",
            &GRANT,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::Grant {
                    granted: 0x1_0000_1076,
                },
            ),
        ),
        (
            "REDUCE",
            &REDUCE,
            repr(
                Flags::empty(),
                1,
                2,
                0,
                Body::Reduce {
                    hdr: ReduceHeader {
                        op: ReduceOp::Sum,
                        ty: ReduceType::F64,
                        count: 2,
                        branch: 1,
                        fan_in: 4,
                        tree: 0x0102,
                        level: 0,
                        first: 6,
                    },
                    data: &REDUCE[48..64],
                },
            ),
        ),
        (
            "REDUCE_BCAST",
            &REDUCE_BCAST,
            repr(
                Flags::empty(),
                0,
                1,
                0,
                Body::ReduceBcast {
                    hdr: ReduceHeader {
                        op: ReduceOp::MaxLoc,
                        ty: ReduceType::U32,
                        count: 1,
                        branch: 3,
                        fan_in: 4,
                        tree: 9,
                        level: 2,
                        first: 0,
                    },
                    data: &[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 5],
                },
            ),
        ),
        (
            "REDUCE_ACK",
            &REDUCE_ACK,
            repr(
                Flags::empty(),
                1,
                2,
                0,
                Body::ReduceAck {
                    acked: Opcode::Reduce,
                    branch: 1,
                    tree: 0x0102,
                },
            ),
        ),
    ]
}

#[test]
fn test_parse() {
    for (name, bytes, expected) in table() {
        assert_eq!(Repr::parse_bytes(bytes), Ok(expected), "{name}");
        assert_eq!(
            expected.kind_name(),
            name.split_whitespace().next().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn test_emit() {
    for (name, bytes, repr) in table() {
        assert_eq!(repr.buffer_len(), bytes.len(), "{name}");
        assert_eq!(repr.to_vec().unwrap(), bytes, "{name}");
    }
}

#[test]
fn every_opcode_has_a_fixture() {
    let t = table();
    for op in Opcode::ALL {
        assert!(
            t.iter().any(|(_, _, r)| r.opcode() == op),
            "{op} has no fixture"
        );
    }
}

#[test]
fn test_deconstruct() {
    let p = Packet::new_checked(&WRITE_FIRST[..]).unwrap();
    assert_eq!(p.version(), 1);
    assert_eq!(p.opcode(), Opcode::Write);
    assert_eq!(p.flags(), Flags::FIRST | Flags::ACK_REQ);
    assert_eq!(p.src_ep(), 1);
    assert_eq!(p.dst_ep(), 2);
    assert_eq!(p.op_num(), 0x0001_0003);
    assert_eq!(p.msg_id(), 7);
    assert_eq!(p.seg_index(), 0);
    assert_eq!(p.seg_count(), 4);
    assert_eq!(p.credits(), 0);
    assert_eq!(p.payload_len(), 4);
    assert_eq!(p.epoch(), 0x2a);
    assert_eq!(p.ext().len(), 16);
    assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(p.icrc(), 0x1bf6_b039);
}

#[test]
fn test_construct() {
    let mut bytes = vec![0xa5u8; WRITE_FIRST.len()];
    let mut p = Packet::new_unchecked(&mut bytes);
    p.set_version(1);
    p.set_opcode(Opcode::Write);
    p.set_flags(Flags::FIRST | Flags::ACK_REQ);
    p.set_src_ep(1);
    p.set_dst_ep(2);
    p.set_op_num(0x0001_0003);
    p.set_msg_id(7);
    p.set_seg_index(0);
    p.set_seg_count(4);
    p.set_credits(0);
    p.set_payload_len(4);
    p.set_epoch(0x2a);
    p.ext_mut().copy_from_slice(&WRITE_FIRST[32..48]);
    p.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    p.fill_icrc();
    assert_eq!(bytes, WRITE_FIRST);
}

#[test]
fn unknown_opcode_keeps_its_value_and_header() {
    // A free opcode from the REDUCE range with 8 bytes between header
    // and a 2-byte payload: the view reads it, Repr refuses it by name.
    let mut bytes = WRITE_FIRST[..32].to_vec();
    bytes[1] = 0x3f;
    bytes[26..28].copy_from_slice(&2u16.to_be_bytes());
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&[9, 9]);
    bytes.extend_from_slice(&[0; 4]);
    let mut p = Packet::new_unchecked(&mut bytes[..]);
    p.fill_icrc();
    let p = Packet::new_checked(&bytes[..]).unwrap();
    assert_eq!(p.opcode(), Opcode::Unknown(0x3f));
    assert_eq!(p.msg_id(), 7);
    assert_eq!(p.ext().len(), 8);
    assert_eq!(p.payload(), &[9, 9]);
    assert_eq!(Repr::parse_bytes(&bytes), Err(Error::UnknownOpcode(0x3f)));
}

/// Re-seals `bytes` after an edit so only the edit is judged.
fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
    Packet::new_unchecked(&mut bytes[..]).fill_icrc();
    bytes
}

#[test]
fn each_error_names_its_reason() {
    assert_eq!(
        Repr::parse_bytes(&WRITE_FIRST[..35]),
        Err(Error::Truncated { len: 35, need: 36 })
    );
    let mut flipped = WRITE_FIRST.to_vec();
    flipped[50] ^= 0x10;
    assert!(matches!(
        Repr::parse_bytes(&flipped),
        Err(Error::BadChecksum {
            carried: 0x1bf6_b039,
            ..
        })
    ));

    let mut v2 = WRITE_FIRST.to_vec();
    v2[0] = 2;
    assert_eq!(Repr::parse_bytes(&reseal(v2)), Err(Error::BadVersion(2)));

    // payload_len says 5 but 4 bytes follow the extension.
    let mut long = WRITE_FIRST.to_vec();
    long[27] = 5;
    assert_eq!(
        Repr::parse_bytes(&reseal(long)),
        Err(Error::BadLength {
            opcode: 1,
            payload_len: 5,
            expected: 57,
            actual: 56
        })
    );

    // An ACK that claims a payload.
    let mut ack = ACK.to_vec();
    ack[27] = 4;
    ack.splice(32..32, [1, 2, 3, 4]);
    assert_eq!(
        Repr::parse_bytes(&reseal(ack)),
        Err(Error::UnexpectedPayload {
            opcode: 0x10,
            payload_len: 4
        })
    );

    // A REDUCE whose payload is one byte short of its two doubles.
    let mut short = REDUCE[..63].to_vec();
    short[27] = 15;
    short.extend_from_slice(&[0; 4]);
    assert_eq!(
        Repr::parse_bytes(&reseal(short)),
        Err(Error::BadReduceLength {
            count: 2,
            expected: 16,
            actual: 15
        })
    );

    // Messages read well for people.
    assert_eq!(
        Error::BadVersion(2).to_string(),
        "bad version 2 (this decoder speaks version 1)"
    );
}

#[test]
fn reserved_bytes_are_ignored_on_receipt() {
    let mut nack = NACK.to_vec();
    nack[33] = 0xff; // reserved byte after the syndrome
    let nack = reseal(nack);
    let parsed = Repr::parse_bytes(&nack).map(|r| r.body);
    assert_eq!(
        parsed,
        Ok(Body::Nack {
            syndrome: Syndrome::BadRkey,
            detail: 0xdead
        })
    );
}
