-- udrma.lua: Wireshark/tshark dissector for the udrma RDMA-over-UDP protocol.
--
--   tshark -X lua_script:tools/wireshark/udrma.lua -r capture.pcap -V
--   wireshark -X lua_script:tools/wireshark/udrma.lua capture.pcap
--
-- Or copy it to your personal plugins folder (Help > About > Folders).
-- Registers on UDP port 18791 (change it under Preferences > Protocols >
-- UDRMA). The layout it reads is docs/wire-format.md; the field names
-- (udrma.opcode, udrma.msg_id, ...) are stable and usable in filters, e.g.
--   udrma.opcode == 0x12 && udrma.nack.syndrome == 3
--   !udrma.icrc_ok

local DEFAULT_PORT = 18791
local HEADER_LEN = 32
local ICRC_LEN = 4

local udrma = Proto("udrma", "udrma RDMA over UDP")

local opcodes = {
    [0x01] = "WRITE", [0x02] = "READ_REQ", [0x03] = "READ_RESP", [0x04] = "SEND",
    [0x10] = "ACK", [0x11] = "SACK", [0x12] = "NACK", [0x13] = "COMPLETION",
    [0x14] = "DATA_ARRIVED", [0x20] = "CREDIT", [0x21] = "RTS", [0x22] = "CTS",
    [0x23] = "FIN", [0x24] = "HELLO", [0x25] = "DEMAND", [0x26] = "GRANT",
    [0x30] = "REDUCE", [0x31] = "REDUCE_BCAST", [0x32] = "REDUCE_ACK",
}
-- Length of each opcode's extension header (between header and payload).
local ext_len = {
    [0x01] = 16, [0x02] = 16, [0x03] = 8, [0x04] = 8, [0x10] = 0, [0x11] = 12,
    [0x12] = 8, [0x13] = 8, [0x14] = 16, [0x20] = 0, [0x21] = 32, [0x22] = 32,
    [0x23] = 12, [0x24] = 48, [0x25] = 16, [0x26] = 8, [0x30] = 16, [0x31] = 16, [0x32] = 8,
}
local data_kinds = { [0x01] = true, [0x03] = true, [0x04] = true }
local syndromes = {
    [1] = "REMOTE_ACCESS", [2] = "OUT_OF_BOUNDS", [3] = "BAD_RKEY", [4] = "RNR",
    [5] = "INVALID_REQUEST", [6] = "UNKNOWN_OPCODE", [7] = "TRIMMED",
    [8] = "SEQUENCE_ERROR",
}
local protocols = { [1] = "R3", [2] = "RGET", [3] = "RPUT" }
local reduce_ops = {
    [1] = "sum", [2] = "min", [3] = "max", [4] = "minloc", [5] = "maxloc", [6] = "land",
    [7] = "lor", [8] = "lxor", [9] = "band", [10] = "bor", [11] = "bxor",
}
local reduce_types = { [1] = "f32", [2] = "f64", [3] = "i32", [4] = "i64", [5] = "u32", [6] = "u64" }
local reduce_width = { [1] = 4, [2] = 8, [3] = 4, [4] = 8, [5] = 4, [6] = 8 }

local F = ProtoField
local f = {
    version = F.uint8("udrma.version", "Version", base.DEC),
    opcode = F.uint8("udrma.opcode", "Opcode", base.HEX, opcodes),
    flags = F.uint16("udrma.flags", "Flags", base.HEX),
    flag_ack_req = F.bool("udrma.flags.ack_req", "ACK requested", 16, nil, 0x0001),
    flag_first = F.bool("udrma.flags.first", "FIRST", 16, nil, 0x0002),
    flag_last = F.bool("udrma.flags.last", "LAST", 16, nil, 0x0004),
    flag_last_seg = F.bool("udrma.flags.last_segment", "Last segment of large transfer", 16, nil, 0x0008),
    flag_retx = F.bool("udrma.flags.retransmit", "Retransmission (on a DUP ACK: the copy came after an answer)", 16, nil, 0x0010),
    flag_credits = F.bool("udrma.flags.credits_valid", "Credits valid", 16, nil, 0x0020),
    flag_solicited = F.bool("udrma.flags.solicited", "Solicited", 16, nil, 0x0040),
    flag_ece = F.bool("udrma.flags.ece", "ECN echo (acknowledged data was CE-marked)", 16, nil, 0x0080),
    flag_partial = F.bool("udrma.flags.partial", "Partial (a READ retry asks for a span)", 16, nil, 0x0100),
    flag_acks = F.bool("udrma.flags.acks", "Acknowledges (a COMPLETION that is its one packet's ACK)", 16, nil, 0x0200),
    flag_dup = F.bool("udrma.flags.dup", "Duplicate (an ACK of a copy that had arrived before)", 16, nil, 0x0400),
    flag_credits_echo = F.bool("udrma.flags.credits_echo", "Credits echo (the field echoes the receiver's count)", 16, nil, 0x0800),
    flag_incarnation = F.bool("udrma.flags.incarnation", "Incarnation (flips each time the whole operation goes again after a lost registration)", 16, nil, 0x1000),
    src_ep = F.uint16("udrma.src_ep", "Source endpoint", base.DEC),
    dst_ep = F.uint16("udrma.dst_ep", "Destination endpoint", base.DEC),
    op_num = F.uint32("udrma.op_num", "OP number", base.HEX),
    op_slot = F.uint32("udrma.op_num.slot", "OP table slot", base.DEC, nil, 0x0000FFFF),
    op_gen = F.uint32("udrma.op_num.generation", "OP slot generation", base.DEC, nil, 0xFFFF0000),
    msg_id = F.uint32("udrma.msg_id", "Message id", base.DEC),
    seg_index = F.uint32("udrma.seg_index", "Segment index", base.DEC),
    seg_count = F.uint32("udrma.seg_count", "Segment count", base.DEC),
    credits = F.uint16("udrma.credits", "Credits", base.DEC),
    payload_len = F.uint16("udrma.payload_len", "Payload length", base.DEC),
    epoch = F.uint32("udrma.epoch", "Epoch", base.HEX),
    ext = F.bytes("udrma.ext", "Extension header"),
    addr = F.uint64("udrma.addr", "Address", base.HEX),
    rkey = F.uint32("udrma.rkey", "Remote key", base.HEX),
    total_len = F.uint32("udrma.total_len", "Operation length", base.DEC),
    length = F.uint32("udrma.length", "Length", base.DEC),
    offset = F.uint32("udrma.offset", "Offset", base.DEC),
    sack_base = F.uint32("udrma.sack.base", "SACK base", base.DEC),
    sack_bitmap = F.uint64("udrma.sack.bitmap", "SACK bitmap", base.HEX),
    syndrome = F.uint8("udrma.nack.syndrome", "NACK syndrome", base.DEC, syndromes),
    nack_detail = F.uint32("udrma.nack.detail", "NACK detail", base.HEX),
    status = F.uint8("udrma.status", "Completion status", base.DEC),
    immediate = F.uint32("udrma.immediate", "Immediate", base.HEX),
    protocol = F.uint8("udrma.rdv.protocol", "Rendezvous protocol", base.DEC, protocols),
    tag = F.uint32("udrma.rdv.tag", "Tag", base.DEC),
    msg_len = F.uint64("udrma.rdv.msg_len", "Message length", base.DEC),
    rdv_seq = F.uint32("udrma.rdv.seq", "Message sequence", base.DEC),
    hello_reply = F.bool("udrma.hello.reply", "HELLO reply", 8, nil, 0x01),
    hello_mtu = F.uint16("udrma.hello.max_payload", "Max payload", base.DEC),
    hello_nonce = F.uint32("udrma.hello.nonce", "Nonce", base.HEX),
    region_len = F.uint64("udrma.hello.region_len", "Region length", base.DEC),
    hello_ports = F.uint16("udrma.hello.ports", "Source ports", base.DEC),
    hello_retry = F.bool("udrma.hello.retry", "Retry (echo the cookie)", 8, nil, 0x02),
    hello_full = F.bool("udrma.hello.full", "Peer table full", 8, nil, 0x04),
    hello_cookie = F.bytes("udrma.hello.cookie", "Cookie"),
    sec_key_id = F.uint8("udrma.sec.key_id", "Key id", base.DEC),
    sec_sender = F.bytes("udrma.sec.sender", "Sender"),
    sec_seq = F.uint64("udrma.sec.seq", "Sequence number", base.DEC),
    sec_payload = F.bytes("udrma.sec.sealed_payload", "Sealed payload (AES-256-GCM)"),
    sec_tag = F.bytes("udrma.sec.tag", "Tag"),
    wanted = F.uint64("udrma.demand.wanted", "Wanted (cumulative bytes)", base.DEC),
    free = F.uint64("udrma.demand.free", "Sent unscheduled (cumulative bytes)", base.DEC),
    granted = F.uint64("udrma.grant.granted", "Granted (cumulative bytes)", base.DEC),
    reduce_op = F.uint8("udrma.reduce.op", "ALU operation", base.DEC, reduce_ops),
    reduce_type = F.uint8("udrma.reduce.type", "Element type", base.DEC, reduce_types),
    reduce_count = F.uint8("udrma.reduce.count", "Elements", base.DEC),
    reduce_branch = F.uint8("udrma.reduce.branch", "Branch", base.DEC),
    reduce_fan_in = F.uint16("udrma.reduce.fan_in", "Fan-in", base.DEC),
    reduce_tree = F.uint16("udrma.reduce.tree", "Tree", base.DEC),
    reduce_level = F.uint8("udrma.reduce.level", "Level", base.DEC),
    reduce_first = F.uint32("udrma.reduce.first", "First element", base.DEC),
    reduce_value = F.string("udrma.reduce.value", "Value"),
    reduce_loc = F.uint32("udrma.reduce.loc", "Location", base.DEC),
    reduce_acked = F.uint8("udrma.reduce.acked", "Acknowledges", base.HEX, opcodes),
    payload = F.bytes("udrma.payload", "Payload"),
    icrc = F.uint32("udrma.icrc", "ICRC", base.HEX),
    icrc_ok = F.bool("udrma.icrc_ok", "ICRC good"),
}
local field_list = {}
for _, v in pairs(f) do field_list[#field_list + 1] = v end
udrma.fields = field_list

local ef_bad_icrc = ProtoExpert.new("udrma.icrc.bad", "ICRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR)
local ef_short = ProtoExpert.new("udrma.short", "Datagram shorter than header + ICRC", expert.group.MALFORMED, expert.severity.ERROR)
local ef_len = ProtoExpert.new("udrma.bad_len", "Payload length disagrees with datagram length", expert.group.MALFORMED, expert.severity.ERROR)
local ef_version = ProtoExpert.new("udrma.bad_version", "Unknown protocol version", expert.group.MALFORMED, expert.severity.WARN)
local ef_opcode = ProtoExpert.new("udrma.unknown_opcode", "Unknown opcode", expert.group.UNDECODED, expert.severity.WARN)
udrma.experts = { ef_bad_icrc, ef_short, ef_len, ef_version, ef_opcode }

udrma.prefs.port = Pref.uint("UDP port", DEFAULT_PORT, "UDP port udrma traffic uses")

-- CRC-32 (IEEE, reflected), as the ICRC. Lua 5.2 has bit32; Wireshark also
-- ships LuaBitOp as `bit`; Lua 5.3+ has native operators.
local bits = bit32 or bit
local band, bxor, rshift
if bits then
    band, bxor, rshift = bits.band, bits.bxor, bits.rshift
else
    band = load("return function(a, b) return a & b end")()
    bxor = load("return function(a, b) return a ~ b end")()
    rshift = load("return function(a, n) return (a & 0xffffffff) >> n end")()
end
local function u32(x) return x % 4294967296 end

local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) == 1 then
            c = bxor(rshift(c, 1), 0xEDB88320)
        else
            c = rshift(c, 1)
        end
    end
    crc_table[i] = c
end

local function crc32(tvb, len)
    local crc = 0xFFFFFFFF
    local bytes = tvb:range(0, len):bytes()
    for i = 0, len - 1 do
        local idx = band(bxor(crc, bytes:get_index(i)), 0xFF)
        crc = bxor(rshift(crc, 8), crc_table[idx])
    end
    return u32(bxor(crc, 0xFFFFFFFF))
end

local function kind_name(op, flags)
    local name = opcodes[op] or string.format("UNKNOWN(0x%02x)", op)
    if data_kinds[op] then
        local first = band(flags, 0x0002) ~= 0
        local last = band(flags, 0x0004) ~= 0
        local pos = (first and last and "ONLY") or (first and "FIRST") or (last and "LAST") or "MIDDLE"
        name = name .. "_" .. pos
    end
    return name
end

-- The values (and locations) of a REDUCE payload, one item each.
local function dissect_reduce_values(tvb, tree, plen)
    local r = function(o, n) return tvb:range(HEADER_LEN + o, n) end
    local op, ty, count = r(0, 1):uint(), r(1, 1):uint(), r(2, 1):uint()
    local w = reduce_width[ty]
    local locs = op == 4 or op == 5
    if not w or count * (w + (locs and 4 or 0)) ~= plen then return end
    local base = HEADER_LEN + 16
    for i = 0, count - 1 do
        local v = tvb:range(base + i * w, w)
        local text
        if ty == 1 or ty == 2 then text = tostring(v:float())
        elseif ty == 3 then text = tostring(v:int())
        elseif ty == 4 then text = tostring(v:int64())
        elseif ty == 5 then text = tostring(v:uint())
        else text = tostring(v:uint64()) end
        tree:add(f.reduce_value, v, text)
    end
    if locs then
        for i = 0, count - 1 do
            tree:add(f.reduce_loc, tvb:range(base + count * w + i * 4, 4))
        end
    end
end

local function dissect_ext(op, tvb, tree)
    local r = function(o, n) return tvb:range(HEADER_LEN + o, n) end
    if op == 0x01 then
        tree:add(f.addr, r(0, 8)); tree:add(f.rkey, r(8, 4)); tree:add(f.total_len, r(12, 4))
    elseif op == 0x02 then
        tree:add(f.addr, r(0, 8)); tree:add(f.rkey, r(8, 4)); tree:add(f.length, r(12, 4))
    elseif op == 0x03 or op == 0x04 then
        tree:add(f.offset, r(0, 4)); tree:add(f.total_len, r(4, 4))
    elseif op == 0x11 then
        tree:add(f.sack_base, r(0, 4)); tree:add(f.sack_bitmap, r(4, 8))
    elseif op == 0x12 then
        tree:add(f.syndrome, r(0, 1)); tree:add(f.nack_detail, r(4, 4))
    elseif op == 0x13 then
        tree:add(f.status, r(0, 1)); tree:add(f.length, r(4, 4))
    elseif op == 0x14 then
        tree:add(f.addr, r(0, 8)); tree:add(f.length, r(8, 4)); tree:add(f.immediate, r(12, 4))
    elseif op == 0x21 or op == 0x22 then
        tree:add(f.protocol, r(0, 1)); tree:add(f.tag, r(4, 4)); tree:add(f.msg_len, r(8, 8))
        tree:add(f.addr, r(16, 8)); tree:add(f.rkey, r(24, 4)); tree:add(f.rdv_seq, r(28, 4))
    elseif op == 0x23 then
        tree:add(f.protocol, r(0, 1)); tree:add(f.tag, r(4, 4)); tree:add(f.rdv_seq, r(8, 4))
    elseif op == 0x24 then
        tree:add(f.hello_reply, r(0, 1)); tree:add(f.hello_mtu, r(2, 2)); tree:add(f.hello_nonce, r(4, 4))
        tree:add(f.addr, r(8, 8)); tree:add(f.region_len, r(16, 8)); tree:add(f.rkey, r(24, 4))
        tree:add(f.hello_ports, r(28, 2))
        tree:add(f.hello_retry, r(0, 1)); tree:add(f.hello_full, r(0, 1)); tree:add(f.hello_cookie, r(32, 16))
    elseif op == 0x25 then
        tree:add(f.wanted, r(0, 8)); tree:add(f.free, r(8, 8))
    elseif op == 0x26 then
        tree:add(f.granted, r(0, 8))
    elseif op == 0x30 or op == 0x31 then
        tree:add(f.reduce_op, r(0, 1)); tree:add(f.reduce_type, r(1, 1)); tree:add(f.reduce_count, r(2, 1))
        tree:add(f.reduce_branch, r(3, 1)); tree:add(f.reduce_fan_in, r(4, 2)); tree:add(f.reduce_tree, r(6, 2))
        tree:add(f.reduce_level, r(8, 1)); tree:add(f.reduce_first, r(12, 4))
    elseif op == 0x32 then
        tree:add(f.reduce_acked, r(0, 1)); tree:add(f.reduce_branch, r(1, 1)); tree:add(f.reduce_tree, r(2, 2))
    end
end

-- A sealed datagram (authenticated mode, docs/wire-format.md): the
-- security header, the packet's headers in clear, its payload sealed, the
-- tag. The tag is shown, not verified: that needs the key and AES-GCM,
-- which Wireshark's Lua has not (`udrma_bridge::secure` verifies).
local SEC_HEADER_LEN = 24
local TAG_LEN = 16
local function dissect_sealed(tvb, pinfo, tree)
    local len = tvb:len()
    local stree = tree:add(udrma, tvb:range(0, SEC_HEADER_LEN), "Security header")
    stree:add(f.sec_key_id, tvb:range(1, 1))
    stree:add(f.sec_sender, tvb:range(4, 12))
    stree:add(f.sec_seq, tvb:range(16, 8))
    local inner = tvb:range(SEC_HEADER_LEN, len - SEC_HEADER_LEN - TAG_LEN):tvb()
    local op = inner:range(1, 1):uint()
    local flags = inner:range(2, 2):uint()
    local plen = inner:range(26, 2):uint()
    tree:add(f.version, inner:range(0, 1))
    tree:add(f.opcode, inner:range(1, 1))
    tree:add(f.flags, inner:range(2, 2))
    tree:add(f.op_num, inner:range(8, 4))
    tree:add(f.msg_id, inner:range(12, 4))
    tree:add(f.seg_index, inner:range(16, 4))
    tree:add(f.seg_count, inner:range(20, 4))
    tree:add(f.payload_len, inner:range(26, 2))
    tree:add(f.epoch, inner:range(28, 4))
    local known_ext = ext_len[op]
    if known_ext and inner:len() == HEADER_LEN + known_ext + plen then
        dissect_ext(op, inner, tree)
        if plen > 0 then
            tree:add(f.sec_payload, inner:range(HEADER_LEN + known_ext, plen))
        end
    else
        tree:add_proto_expert_info(ef_len)
    end
    tree:add(f.sec_tag, tvb:range(len - TAG_LEN, TAG_LEN))
    pinfo.cols.info = string.format("SEALED key=%d seq=%s %s msg=%d seg=%d/%d",
        tvb:range(1, 1):uint(), tostring(tvb:range(16, 8):uint64()), kind_name(op, flags),
        inner:range(12, 4):uint(), inner:range(16, 4):uint(), inner:range(20, 4):uint())
    tree:append_text(", sealed " .. kind_name(op, flags))
    return len
end

function udrma.dissector(tvb, pinfo, root)
    local len = tvb:len()
    if len >= SEC_HEADER_LEN + HEADER_LEN + TAG_LEN and tvb:range(0, 1):uint() == 0x81 then
        pinfo.cols.protocol = "UDRMA"
        return dissect_sealed(tvb, pinfo, root:add(udrma, tvb:range(0, len)))
    end
    pinfo.cols.protocol = "UDRMA"
    local tree = root:add(udrma, tvb:range(0, len))
    if len < HEADER_LEN + ICRC_LEN then
        tree:add_proto_expert_info(ef_short)
        pinfo.cols.info = "UDRMA [truncated]"
        return len
    end

    local icrc_carried = tvb:range(len - ICRC_LEN, ICRC_LEN):uint()
    local icrc_ok = crc32(tvb, len - ICRC_LEN) == icrc_carried

    local version = tvb:range(0, 1):uint()
    local op = tvb:range(1, 1):uint()
    local flags = tvb:range(2, 2):uint()
    local plen = tvb:range(26, 2):uint()

    local vitem = tree:add(f.version, tvb:range(0, 1))
    if version ~= 1 then vitem:add_proto_expert_info(ef_version) end
    local oitem = tree:add(f.opcode, tvb:range(1, 1))
    if not opcodes[op] then oitem:add_proto_expert_info(ef_opcode) end
    local ftree = tree:add(f.flags, tvb:range(2, 2))
    ftree:add(f.flag_ack_req, tvb:range(2, 2))
    ftree:add(f.flag_first, tvb:range(2, 2))
    ftree:add(f.flag_last, tvb:range(2, 2))
    ftree:add(f.flag_last_seg, tvb:range(2, 2))
    ftree:add(f.flag_retx, tvb:range(2, 2))
    ftree:add(f.flag_credits, tvb:range(2, 2))
    ftree:add(f.flag_solicited, tvb:range(2, 2))
    ftree:add(f.flag_ece, tvb:range(2, 2))
    ftree:add(f.flag_partial, tvb:range(2, 2))
    ftree:add(f.flag_acks, tvb:range(2, 2))
    ftree:add(f.flag_dup, tvb:range(2, 2))
    ftree:add(f.flag_credits_echo, tvb:range(2, 2))
    ftree:add(f.flag_incarnation, tvb:range(2, 2))
    tree:add(f.src_ep, tvb:range(4, 2))
    tree:add(f.dst_ep, tvb:range(6, 2))
    local optree = tree:add(f.op_num, tvb:range(8, 4))
    optree:add(f.op_slot, tvb:range(8, 4))
    optree:add(f.op_gen, tvb:range(8, 4))
    tree:add(f.msg_id, tvb:range(12, 4))
    tree:add(f.seg_index, tvb:range(16, 4))
    tree:add(f.seg_count, tvb:range(20, 4))
    tree:add(f.credits, tvb:range(24, 2))
    local litem = tree:add(f.payload_len, tvb:range(26, 2))
    tree:add(f.epoch, tvb:range(28, 4))

    local known_ext = ext_len[op]
    local body = len - HEADER_LEN - ICRC_LEN
    local length_ok
    if known_ext then
        length_ok = body == known_ext + plen
    else
        length_ok = body >= plen
    end
    if not length_ok then
        litem:add_proto_expert_info(ef_len)
    elseif known_ext then
        dissect_ext(op, tvb, tree)
    elseif body - plen > 0 then
        tree:add(f.ext, tvb:range(HEADER_LEN, body - plen))
    end
    if length_ok and plen > 0 then
        local ptree = tree:add(f.payload, tvb:range(len - ICRC_LEN - plen, plen))
        if op == 0x30 or op == 0x31 then dissect_reduce_values(tvb, ptree, plen) end
    end

    local citem = tree:add(f.icrc, tvb:range(len - ICRC_LEN, ICRC_LEN))
    local okitem = tree:add(f.icrc_ok, icrc_ok)
    okitem:set_generated()
    if not icrc_ok then citem:add_proto_expert_info(ef_bad_icrc) end

    local info = string.format("%s msg=%d seg=%d/%d op=0x%08x",
        kind_name(op, flags), tvb:range(12, 4):uint(), tvb:range(16, 4):uint(),
        tvb:range(20, 4):uint(), tvb:range(8, 4):uint())
    if plen > 0 then info = info .. string.format(" len=%d", plen) end
    if not icrc_ok then info = info .. " [BAD ICRC]" end
    if not length_ok then info = info .. " [BAD LENGTH]" end
    pinfo.cols.info = info
    tree:append_text(", " .. kind_name(op, flags))
    return len
end

local udp_table = DissectorTable.get("udp.port")
local registered_port = udrma.prefs.port
udp_table:add(registered_port, udrma)

function udrma.prefs_changed()
    if registered_port ~= udrma.prefs.port then
        udp_table:remove(registered_port, udrma)
        registered_port = udrma.prefs.port
        udp_table:add(registered_port, udrma)
    end
end
