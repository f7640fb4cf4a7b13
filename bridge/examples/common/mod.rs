//! What the speed examples share: a one-packet WRITE carrying `data`.

/// A first-and-only WRITE packet of `data` to address 0 under rkey 1.
pub fn write_packet(data: &[u8]) -> udrma_proto::Repr<'_> {
    udrma_proto::Repr {
        flags: udrma_proto::Flags::FIRST,
        src_ep: 0,
        dst_ep: 0,
        op_num: 1,
        msg_id: 1,
        seg_index: 0,
        seg_count: 1,
        credits: 0,
        epoch: 1,
        body: udrma_proto::Body::Write {
            remote_addr: 0,
            rkey: 1,
            total_len: data.len() as u32,
            data,
        },
    }
}
