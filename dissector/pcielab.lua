-- pcielab.lua: Wireshark (4.0+) dissector for PCIe TLPs and DLLPs carried over NetTLP.
--
-- Frames are Ethernet/IPv4/UDP; the UDP payload is NetTLP's 6-byte header (sequence,
-- timestamp; big endian) followed by one TLP in PCIe byte order, or, on UDP port 0x5D11
-- (23825), by one 6-byte DLLP. Both NetTLP port schemes are recognised: completions on
-- 0x3000 + tag, requests on 0x4000 + (tag & 0xF), v0.15-v0.21's 0x3000 + (tag & 0xF),
-- v0.14's single port 0x3776. LibTLP's 6-byte configuration datagrams on 0x4001/0x5001
-- are told apart by their length. The messaging API on 0x2FFF (12287: requests 1 BAR4
-- address, 2 device ID, 3 MSI-X table; replies told apart by their length 8, 2, 192)
-- and the adapter command port 0x5002 (6-byte register read/write) are decoded too.
--
-- Field names follow pcielab's JSON (`pcielab dump --json`): pcielab.tlp.<json key>.
-- Completions are linked to their requests by (link, Requester ID, Tag), a link being the
-- pair of interfaces "a->b" / "b->a" of a pcielab capture (or one interface otherwise).
-- Run tshark with -2 so that requests left without a completion are flagged, and with a
-- read filter (-R frame) so that interface names are known in its first pass.
--
-- Usage: tshark -X lua_script:pcielab.lua -r capture.pcapng -2 -R frame [-V]
-- or copy this file into Wireshark's personal plugins folder.
--
-- Written for pcielab; licensed MIT OR Apache-2.0 like the rest of pcielab.

local VERSION = "0.1.0"
set_plugin_info({ version = VERSION, description = "PCIe TLP/DLLP over NetTLP (pcielab)" })

local DLLP_PORT = 0x5D11
local proto = Proto("pcielab", "PCIe over NetTLP (pcielab)")

---------------------------------------------------------------------------------------
-- Bit helpers that work on every Lua version Wireshark ships (numbers as doubles).

local bits
if bit32 and bit32.extract then
    -- Lua 5.2 (Wireshark's): in C, several times faster than the arithmetic below.
    bits = bit32.extract
else
    bits = function(v, shift, width) return math.floor(v / 2 ^ shift) % 2 ^ width end
end

local flag
if bit32 and bit32.btest then
    local btest = bit32.btest
    flag = function(v, bit) return btest(v, 2 ^ bit) end
else
    flag = function(v, bit) return bits(v, bit, 1) == 1 end
end

local bxor
if bit32 and bit32.bxor then
    bxor = bit32.bxor
elseif bit and bit.bxor then
    bxor = function(a, b) return bit.bxor(a, b) % 4294967296 end
else
    bxor = function(a, b)
        local r, m = 0, 1
        for _ = 0, 31 do
            local x, y = a % 2, b % 2
            if x ~= y then r = r + m end
            a, b, m = (a - x) / 2, (b - y) / 2, m * 2
        end
        return r
    end
end

-- Reflected CRC tables: CRC-32 (poly 04C11DB7 reflected = EDB88320) for ECRC,
-- CRC-16 (poly 100B reflected = D008) for DLLPs.
local function make_table(poly, width)
    local t = {}
    for i = 0, 255 do
        local c = i
        for _ = 1, 8 do
            if c % 2 == 1 then c = bxor(math.floor(c / 2), poly) else c = math.floor(c / 2) end
        end
        t[i] = c % 2 ^ width
    end
    return t
end
local CRC32_T = make_table(0xEDB88320, 32)
local CRC16_T = make_table(0xD008, 16)

-- crc32 over a list of byte arrays (Lua tables of numbers), seed all ones, complemented.
local function crc32(chunks)
    local c = 0xFFFFFFFF
    for _, bytes in ipairs(chunks) do
        for i = 1, #bytes do
            c = bxor(math.floor(c / 256), CRC32_T[bxor(c % 256, bytes[i])])
        end
    end
    return 0xFFFFFFFF - c
end

-- crc16 of the four bytes of the big-endian word `w` (a DLLP's content).
local function crc16_word(w)
    local c = 0xFFFF
    for shift = 24, 0, -8 do
        c = bxor(bits(c, 8, 8), CRC16_T[bxor(c % 256, bits(w, shift, 8))])
    end
    return 0xFFFF - c
end

local function crc16(bytes)
    local c = 0xFFFF
    for i = 1, #bytes do
        c = bxor(math.floor(c / 256), CRC16_T[bxor(c % 256, bytes[i])])
    end
    return 0xFFFF - c
end

local function tvb_bytes(tvb, off, len)
    local t = {}
    for i = 0, len - 1 do t[#t + 1] = tvb(off + i, 1):uint() end
    return t
end

local function hex_of(tvb, off, len)
    local s = {}
    for i = 0, len - 1 do s[#s + 1] = string.format("%02x", tvb(off + i, 1):uint()) end
    return table.concat(s)
end

-- IDs repeat from packet to packet: each is formatted once.
local BDF_TEXT = {}
local function bdf_str(raw)
    local s = BDF_TEXT[raw]
    if not s then
        s = string.format("%02x:%02x.%x", bits(raw, 8, 8), bits(raw, 3, 5), bits(raw, 0, 3))
        BDF_TEXT[raw] = s
    end
    return s
end

-- Hex of a 64-bit value given as two 32-bit halves, without leading zeros.
local function hex64(hi, lo)
    if hi > 0 then return string.format("%x%08x", hi, lo) end
    return string.format("%x", lo)
end

-- "0x1_2345_6780" as pcielab's text output writes addresses: a "_" before every group
-- of four digits counted from the right.
local function addr_text(hi, lo)
    local lo_hi, lo_lo = bits(lo, 16, 16), lo % 65536
    if hi > 0 then
        -- The high word's own groups, then the low word's two, zero-padded.
        local h = string.format("%x", hi)
        local grouped = h:reverse():gsub("(%x%x%x%x)", "%1_"):reverse()
        if grouped:sub(1, 1) == "_" then grouped = grouped:sub(2) end
        return string.format("0x%s_%04x_%04x", grouped, lo_hi, lo_lo)
    end
    if lo_hi > 0 then return string.format("0x%x_%04x", lo_hi, lo_lo) end
    return string.format("0x%x", lo_lo)
end

---------------------------------------------------------------------------------------
-- Tables

local KIND = {}
local function kind_of(fmt, ty)
    if fmt > 3 then return nil end -- 100b is a prefix; 101b..111b are reserved
    local has = fmt >= 2
    if ty == 0 then return has and "MWr" or "MRd" end
    if ty == 1 then return (fmt <= 1) and "MRdLk" or nil end
    if ty == 2 then return (fmt == 0 and "IORd") or (fmt == 2 and "IOWr") or nil end
    if ty == 4 then return (fmt == 0 and "CfgRd0") or (fmt == 2 and "CfgWr0") or nil end
    if ty == 5 then return (fmt == 0 and "CfgRd1") or (fmt == 2 and "CfgWr1") or nil end
    if ty >= 0x10 and ty <= 0x15 then return (fmt == 1 and "Msg") or (fmt == 3 and "MsgD") or nil end
    if ty == 0x0a then return (fmt == 0 and "Cpl") or (fmt == 2 and "CplD") or nil end
    if ty == 0x0b then return (fmt == 0 and "CplLk") or (fmt == 2 and "CplDLk") or nil end
    if ty == 0x0c then return has and "FetchAdd" or nil end
    if ty == 0x0d then return has and "Swap" or nil end
    if ty == 0x0e then return has and "CAS" or nil end
    return nil
end
KIND.of = kind_of

local NON_POSTED = {
    MRd = true, MRdLk = true, IORd = true, IOWr = true, CfgRd0 = true, CfgWr0 = true,
    CfgRd1 = true, CfgWr1 = true, FetchAdd = true, Swap = true, CAS = true,
}
local MEM = { MRd = true, MRdLk = true, MWr = true, FetchAdd = true, Swap = true, CAS = true }
local IO = { IORd = true, IOWr = true }
local CFG = { CfgRd0 = true, CfgWr0 = true, CfgRd1 = true, CfgWr1 = true }
local CPL = { Cpl = true, CplD = true, CplLk = true, CplDLk = true }

local ROUTING = { [0] = "to_rc", "by_address", "by_id", "broadcast", "local", "gathered" }
local STATUS = { [0] = "SC", "UR", "CRS", "3", "CA", "5", "6", "7" }
local STATUS_LONG = {
    SC = "Successful Completion", UR = "Unsupported Request",
    CRS = "Configuration Request Retry Status", CA = "Completer Abort",
}
local MSG = {
    [0x00] = "Unlock", [0x01] = "ATS_Invalidate_Request", [0x02] = "ATS_Invalidate_Completion",
    [0x04] = "Page_Request", [0x05] = "PRG_Response", [0x10] = "LTR", [0x12] = "OBFF",
    [0x14] = "PM_Active_State_Nak", [0x18] = "PM_PME", [0x19] = "PME_Turn_Off",
    [0x1b] = "PME_TO_Ack", [0x20] = "Assert_INTA", [0x21] = "Assert_INTB",
    [0x22] = "Assert_INTC", [0x23] = "Assert_INTD", [0x24] = "Deassert_INTA",
    [0x25] = "Deassert_INTB", [0x26] = "Deassert_INTC", [0x27] = "Deassert_INTD",
    [0x30] = "ERR_COR", [0x31] = "ERR_NONFATAL", [0x33] = "ERR_FATAL",
    [0x50] = "Set_Slot_Power_Limit", [0x52] = "PTM_Request", [0x53] = "PTM_Response",
    [0x7e] = "Vendor_Defined_Type_0", [0x7f] = "Vendor_Defined_Type_1",
}
local PREFIX_NAME = {
    [0x00] = "MR-IOV", [0x0e] = "VendL0", [0x0f] = "VendL1",
    [0x10] = "TPH", [0x11] = "PASID", [0x1e] = "VendE0", [0x1f] = "VendE1",
}
local function prefix_name(t)
    local n = PREFIX_NAME[t]
    if n then return n end
    if t >= 0x10 then return "E" .. (t - 0x10) end
    return "L" .. t
end

---------------------------------------------------------------------------------------
-- Fields (names = pcielab's JSON keys)

local f = {}
f["nettlp.seq"] = ProtoField.uint16("pcielab.nettlp.seq", "NetTLP sequence", base.DEC)
f["nettlp.tstamp"] = ProtoField.uint32("pcielab.nettlp.tstamp", "NetTLP timestamp (6.4 ns ticks)", base.DEC)
f["nettlp.config"] = ProtoField.bytes("pcielab.nettlp.config", "NetTLP configuration datagram")
local MSG_REQ = { [1] = "GET_BAR4_ADDR", [2] = "GET_DEV_ID", [3] = "GET_MSIX_TABLE" }
f["nettlp.msg.request"] = ProtoField.uint32("pcielab.nettlp.msg.request", "Messaging API request", base.DEC, MSG_REQ)
f["nettlp.msg.bar4"] = ProtoField.uint64("pcielab.nettlp.msg.bar4", "BAR4 address", base.HEX)
f["nettlp.msg.devid"] = ProtoField.uint16("pcielab.nettlp.msg.devid", "Device ID (bus << 8 | devfn)", base.HEX)
f["nettlp.msg.msix_entry"] = ProtoField.uint8("pcielab.nettlp.msg.msix_entry", "MSI-X entry", base.DEC)
f["nettlp.msg.msix_addr"] = ProtoField.uint64("pcielab.nettlp.msg.msix_addr", "MSI-X message address", base.HEX)
f["nettlp.msg.msix_data"] = ProtoField.uint32("pcielab.nettlp.msg.msix_data", "MSI-X message data", base.HEX)
f["nettlp.msg.error"] = ProtoField.string("pcielab.nettlp.msg.error", "Messaging API error")
local CMD_OP = { [0x10] = "REG_READ", [0x11] = "REG_WRITE", [0x20] = "MAGIC", [0x21] = "TSTAMP", [0x22] = "RESET_ALL" }
local CMD_REG = { [0x00] = "MAGIC", [0x01] = "DST_MAC_LOW", [0x02] = "DST_MAC_HIGH", [0x03] = "SRC_MAC_LOW",
    [0x04] = "SRC_MAC_HIGH", [0x05] = "DST_IP", [0x06] = "SRC_IP", [0x07] = "DST_PORT", [0x08] = "SRC_PORT",
    [0x10] = "REQUESTER_ID" }
f["nettlp.cmd.opcode"] = ProtoField.uint8("pcielab.nettlp.cmd.opcode", "Adapter command", base.HEX, CMD_OP)
f["nettlp.cmd.reg"] = ProtoField.uint8("pcielab.nettlp.cmd.reg", "Adapter register", base.HEX, CMD_REG)
f["nettlp.cmd.value"] = ProtoField.uint32("pcielab.nettlp.cmd.value", "Register value (little endian)", base.HEX)

f["tlp"] = ProtoField.bytes("pcielab.tlp", "TLP")
f["tlp.kind"] = ProtoField.string("pcielab.tlp.kind", "Kind")
f["tlp.fmt"] = ProtoField.uint8("pcielab.tlp.fmt", "Fmt", base.DEC)
f["tlp.type"] = ProtoField.uint8("pcielab.tlp.type", "Type", base.DEC)
f["tlp.tc"] = ProtoField.uint8("pcielab.tlp.tc", "Traffic class", base.DEC)
f["tlp.tag"] = ProtoField.uint16("pcielab.tlp.tag", "Tag", base.DEC)
f["tlp.attr.ro"] = ProtoField.bool("pcielab.tlp.attr.ro", "Relaxed ordering")
f["tlp.attr.ns"] = ProtoField.bool("pcielab.tlp.attr.ns", "No snoop")
f["tlp.attr.ido"] = ProtoField.bool("pcielab.tlp.attr.ido", "ID-based ordering")
f["tlp.ln"] = ProtoField.bool("pcielab.tlp.ln", "Lightweight notification (LN)")
f["tlp.th"] = ProtoField.bool("pcielab.tlp.th", "TLP processing hints (TH)")
f["tlp.td"] = ProtoField.bool("pcielab.tlp.td", "TLP digest present (TD)")
f["tlp.ep"] = ProtoField.bool("pcielab.tlp.ep", "Poisoned (EP)")
f["tlp.at"] = ProtoField.uint8("pcielab.tlp.at", "Address type", base.DEC)
f["tlp.length_dw"] = ProtoField.uint16("pcielab.tlp.length_dw", "Length (DW)", base.DEC)
f["tlp.requester_id"] = ProtoField.string("pcielab.tlp.requester_id", "Requester ID")
f["tlp.completer_id"] = ProtoField.string("pcielab.tlp.completer_id", "Completer ID")
f["tlp.first_be"] = ProtoField.uint8("pcielab.tlp.first_be", "First DW byte enables", base.DEC)
f["tlp.last_be"] = ProtoField.uint8("pcielab.tlp.last_be", "Last DW byte enables", base.DEC)
f["tlp.address"] = ProtoField.string("pcielab.tlp.address", "Address")
f["tlp.address_value"] = ProtoField.uint64("pcielab.tlp.address_value", "Address (number, for filters)", base.HEX)
f["tlp.ph"] = ProtoField.uint8("pcielab.tlp.ph", "Processing hint (PH)", base.DEC)
f["tlp.register"] = ProtoField.uint16("pcielab.tlp.register", "Register number (DW)", base.DEC)
f["tlp.status"] = ProtoField.string("pcielab.tlp.status", "Completion status")
f["tlp.bcm"] = ProtoField.bool("pcielab.tlp.bcm", "Byte count modified (BCM)")
f["tlp.byte_count"] = ProtoField.uint16("pcielab.tlp.byte_count", "Byte count", base.DEC)
f["tlp.lower_address"] = ProtoField.uint8("pcielab.tlp.lower_address", "Lower address", base.DEC)
f["tlp.msg_code"] = ProtoField.uint8("pcielab.tlp.msg_code", "Message code", base.DEC)
f["tlp.msg_name"] = ProtoField.string("pcielab.tlp.msg_name", "Message")
f["tlp.msg_routing"] = ProtoField.string("pcielab.tlp.msg_routing", "Message routing")
f["tlp.msg_fields"] = ProtoField.string("pcielab.tlp.msg_fields", "Message-specific bytes 8-15")
f["tlp.target_id"] = ProtoField.string("pcielab.tlp.target_id", "Destination ID")
f["tlp.vendor_id"] = ProtoField.uint16("pcielab.tlp.vendor_id", "Vendor ID", base.DEC)
f["tlp.vendor_data"] = ProtoField.uint32("pcielab.tlp.vendor_data", "Vendor-defined data", base.DEC)
f["tlp.ltr_no_snoop"] = ProtoField.uint16("pcielab.tlp.ltr_no_snoop", "LTR no-snoop latency", base.DEC)
f["tlp.ltr_snoop"] = ProtoField.uint16("pcielab.tlp.ltr_snoop", "LTR snoop latency", base.DEC)
f["tlp.obff_code"] = ProtoField.uint8("pcielab.tlp.obff_code", "OBFF code", base.DEC)
f["tlp.itag"] = ProtoField.uint8("pcielab.tlp.itag", "Invalidate tag", base.DEC)
f["tlp.completion_count"] = ProtoField.uint8("pcielab.tlp.completion_count", "Completion count", base.DEC)
f["tlp.itag_vector"] = ProtoField.uint32("pcielab.tlp.itag_vector", "ITag vector", base.DEC)
f["tlp.page_address"] = ProtoField.string("pcielab.tlp.page_address", "Page address")
f["tlp.prg_index"] = ProtoField.uint16("pcielab.tlp.prg_index", "Page request group index", base.DEC)
f["tlp.read_access"] = ProtoField.uint8("pcielab.tlp.read_access", "Read access requested", base.DEC)
f["tlp.write_access"] = ProtoField.uint8("pcielab.tlp.write_access", "Write access requested", base.DEC)
f["tlp.last_in_group"] = ProtoField.uint8("pcielab.tlp.last_in_group", "Last request in page request group", base.DEC)
f["tlp.response_code"] = ProtoField.uint8("pcielab.tlp.response_code", "PRG response code", base.DEC)
f["tlp.payload"] = ProtoField.bytes("pcielab.tlp.payload", "Payload")
f["tlp.ecrc"] = ProtoField.string("pcielab.tlp.ecrc", "ECRC (bytes as sent)")
f["tlp.ecrc_ok"] = ProtoField.bool("pcielab.tlp.ecrc_ok", "ECRC correct")
f["tlp.prefix"] = ProtoField.bytes("pcielab.tlp.prefix", "TLP prefix")
f["tlp.prefix.kind"] = ProtoField.string("pcielab.tlp.prefix.kind", "Prefix kind")
f["tlp.prefix.content"] = ProtoField.uint32("pcielab.tlp.prefix.content", "Prefix content", base.DEC)
f["tlp.prefix.pasid"] = ProtoField.uint32("pcielab.tlp.prefix.pasid", "PASID", base.DEC)
f["tlp.prefix.execute"] = ProtoField.bool("pcielab.tlp.prefix.execute", "Execute requested")
f["tlp.prefix.privileged"] = ProtoField.bool("pcielab.tlp.prefix.privileged", "Privileged mode requested")
f["tlp.error"] = ProtoField.string("pcielab.tlp.error", "Malformed TLP")
f["tlp.captured_len"] = ProtoField.uint32("pcielab.tlp.captured_len", "Bytes captured (snap length)", base.DEC)

f["request_frame"] = ProtoField.framenum("pcielab.request_frame", "Request in frame", base.NONE, frametype.REQUEST)
f["response_frame"] = ProtoField.framenum("pcielab.response_frame", "Completion in frame", base.NONE, frametype.RESPONSE)
f["latency"] = ProtoField.relative_time("pcielab.latency", "Request to completion latency")
f["last"] = ProtoField.bool("pcielab.last", "Request complete after this completion")
f["tlp.dll_replay"] = ProtoField.bool("pcielab.tlp.dll_replay", "Data-link retransmission (from the replay buffer)")
f["completion_index"] = ProtoField.uint32("pcielab.completion_index", "Completion number", base.DEC)

f["dllp"] = ProtoField.bytes("pcielab.dllp", "DLLP")
f["dllp.kind"] = ProtoField.string("pcielab.dllp.kind", "Kind")
f["dllp.type"] = ProtoField.uint8("pcielab.dllp.type", "Type byte", base.DEC)
f["dllp.seq"] = ProtoField.uint16("pcielab.dllp.seq", "AckNak sequence number", base.DEC)
f["dllp.fc_class"] = ProtoField.string("pcielab.dllp.fc_class", "Credit class")
f["dllp.vc"] = ProtoField.uint8("pcielab.dllp.vc", "Virtual channel", base.DEC)
f["dllp.hdr_scale"] = ProtoField.uint8("pcielab.dllp.hdr_scale", "HdrScale", base.DEC)
f["dllp.hdr_fc"] = ProtoField.uint8("pcielab.dllp.hdr_fc", "HdrFC", base.DEC)
f["dllp.data_scale"] = ProtoField.uint8("pcielab.dllp.data_scale", "DataScale", base.DEC)
f["dllp.data_fc"] = ProtoField.uint16("pcielab.dllp.data_fc", "DataFC", base.DEC)
f["dllp.vendor_data"] = ProtoField.uint32("pcielab.dllp.vendor_data", "Vendor data", base.DEC)
f["dllp.feature_ack"] = ProtoField.bool("pcielab.dllp.feature_ack", "Feature ack")
f["dllp.feature_support"] = ProtoField.uint32("pcielab.dllp.feature_support", "Feature support", base.DEC)
f["dllp.content"] = ProtoField.uint32("pcielab.dllp.content", "Content", base.DEC)
f["dllp.crc"] = ProtoField.uint16("pcielab.dllp.crc", "CRC", base.HEX)
f["dllp.crc_ok"] = ProtoField.bool("pcielab.dllp.crc_ok", "CRC correct")
f["dllp.error"] = ProtoField.string("pcielab.dllp.error", "Malformed DLLP")

local list = {}
for _, v in pairs(f) do list[#list + 1] = v end
proto.fields = list

local e = {
    malformed = ProtoExpert.new("pcielab.malformed", "Malformed TLP/DLLP", expert.group.MALFORMED, expert.severity.ERROR),
    ecrc = ProtoExpert.new("pcielab.ecrc_bad", "ECRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
    crc = ProtoExpert.new("pcielab.dllp_crc_bad", "DLLP CRC mismatch", expert.group.CHECKSUM, expert.severity.ERROR),
    unmatched = ProtoExpert.new("pcielab.unmatched_completion", "Completion without a pending request", expert.group.SEQUENCE, expert.severity.WARN),
    missing = ProtoExpert.new("pcielab.missing_completion", "Request without its (last) completion in the capture", expert.group.SEQUENCE, expert.severity.WARN),
    status = ProtoExpert.new("pcielab.completion_status", "Completion status is not SC", expert.group.RESPONSE_CODE, expert.severity.NOTE),
    poisoned = ProtoExpert.new("pcielab.poisoned", "Poisoned TLP (EP set)", expert.group.PROTOCOL, expert.severity.WARN),
    tag_in_use = ProtoExpert.new("pcielab.tag_in_use", "Request reuses a tag that is still outstanding", expert.group.SEQUENCE, expert.severity.WARN),
    snapped = ProtoExpert.new("pcielab.snapped", "TLP cut by the capture's snap length", expert.group.UNDECODED, expert.severity.NOTE),
    internal = ProtoExpert.new("pcielab.internal", "pcielab dissector could not decode this packet", expert.group.MALFORMED, expert.severity.ERROR),
    replay = ProtoExpert.new("pcielab.dll_replay", "Data-link retransmission of a TLP sent earlier on this link direction", expert.group.SEQUENCE, expert.severity.NOTE),
}
proto.experts = { e.malformed, e.ecrc, e.crc, e.unmatched, e.missing, e.status, e.poisoned, e.tag_in_use, e.snapped, e.internal, e.replay }

---------------------------------------------------------------------------------------
-- Request/completion state (rebuilt on every (re)dissection pass 1)

local iface_field = Field.new("frame.interface_name")
-- Simulation captures mark data-link retransmissions with a packet comment starting
-- "DLL replay" (like the interface name, known in pass 1 only when a tree is built).
local comment_field = Field.new("frame.comment")

-- The packet's comment, read once per packet (nil when it has none).
local function packet_comment()
    local c = comment_field()
    return c and tostring(c.value)
end

local function is_dll_replay(comment)
    return comment ~= nil and string.sub(comment, 1, 10) == "DLL replay"
end

-- ... and TLPs corrupted on the wire by error injection with one that says so.
local function is_lcrc_corrupted(comment)
    return comment ~= nil and string.find(comment, "LCRC corrupted on the wire", 1, true) ~= nil
end

local state
-- Whether a filter, column or tap uses any of our fields: nil until the first packet of
-- a dissection pass asks (see `need_fields`).
local fields_referenced
local function reset()
    -- Per frame, in flat tables of numbers (no table per packet, which made the
    -- garbage collector's work grow with the capture):
    --   cpl_req[f]   the request a completion answers (0: none, "no request");
    --   cpl_ns[f]    its latency in ns;  cpl_info[f]  its index * 2 + 1 if the last;
    --   cpl_next[f]  the next completion of the same request;
    --   req_in_use[f]  a request's frame whose tag it reused while open (0: none);
    --   req_first[f], req_last[f]  its first and last completion;  req_done[f]  true.
    state = {
        pending = {}, cpl_req = {}, cpl_ns = {}, cpl_info = {}, cpl_next = {},
        req_in_use = {}, req_first = {}, req_last = {}, req_done = {},
    }
    fields_referenced = nil
end
reset()
function proto.init() reset() end

local LINK_KEY = {}
local function link_key_of(name)
    local a, b = name:match("^(.-)%->(.*)$")
    if not a then return name end
    if a <= b then return a .. "<->" .. b end
    return b .. "<->" .. a
end

-- The key of the link an interface's direction is on (both directions, one key).
local function link_key(name)
    if not name then return "" end
    local k = LINK_KEY[name]
    if not k then
        k = link_key_of(name)
        LINK_KEY[name] = k
    end
    return k
end

---------------------------------------------------------------------------------------
-- TLP decoding

-- The codec's wording for a length error.
local function trunc(what, needed, available)
    return string.format("truncated: %s needs %d bytes, only %d available", what, needed, available)
end

-- Big-endian 32-bit words of a string of bytes read with tvb:raw(), which makes a Lua
-- string instead of a TvbRange object (an allocation with a finalizer) per field.
local sbyte = string.byte
local function word_at(raw, i)
    local a, b, c, d = sbyte(raw, i, i + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
end

-- The prefix list of a TLP without prefixes (shared, never written).
local NO_PREFIXES = {}

-- Decodes a TLP of `len` bytes at tvb offset `off`, of which `clen` were captured (fewer
-- when the capture's snap length cut it). Returns a table of decoded fields, or nil and an
-- error string (the same checks as pcielab's codec).
-- `head` holds the datagram's first bytes (tvb:raw(0, ...)): without prefixes the whole
-- TLP header is in it, so no call into Wireshark is needed for it.
local function decode_tlp(tvb, off, len, clen, head)
    -- Every field decoded for every TLP, made in one constructor: a table grown key by
    -- key is rehashed five times, which cost more than the decoding.
    local t = {
        prefixes = NO_PREFIXES, h0 = 0, kind = false, fmt = 0, type = 0, four = false,
        length_dw = 0, tc = 0, ro = false, ns = false, ido = false, ln = false, th = false,
        td = false, ep = false, at = 0, len = 0, payload_off = 0, payload_len = 0,
        captured_payload = 0, tag = 0, rid_raw = 0, requester_id = false, first_be = 0,
        last_be = 0, group = false, addr_hi = 0, addr_lo = 0,
    }
    local h = 0
    -- Fmt 100b is a prefix: most TLPs have none, so look at the first byte once.
    if clen > 0 and bits(sbyte(head, off + 1), 5, 3) == 4 then t.prefixes = {} end
    while t.prefixes ~= NO_PREFIXES and h < clen and bits(tvb(off + h, 1):uint(), 5, 3) == 4 do
        if h + 4 > clen then return nil, trunc("TLP prefix", h + 4, len) end
        local w = tvb(off + h, 4):uint()
        local ty = bits(w, 24, 5)
        local p = { kind = prefix_name(ty), content = w % 2 ^ 24, off = h, e2e = ty >= 0x10 }
        if ty == 0x11 then
            p.pasid = w % 2 ^ 20
            p.execute = flag(w, 20)
            p.privileged = flag(w, 21)
        end
        t.prefixes[#t.prefixes + 1] = p
        h = h + 4
        if #t.prefixes > 8 then
            -- count them all, as the codec reports the count
            local np = #t.prefixes
            local k = h
            while k < clen and bits(tvb(off + k, 1):uint(), 5, 3) == 4 do np, k = np + 1, k + 4 end
            return nil, string.format("bad TLP Prefix count at byte 0: 0x%x (more than 8 TLP prefixes)", np)
        end
    end
    t.h0 = h
    if clen < h + 4 then return nil, trunc("TLP header DW0", h + 4, len) end
    -- The header's bytes: from `head` (1-based, at `b + 1`), or read past prefixes.
    local raw, b = head, off
    if h > 0 or #head < off + math.min(clen, 16) then
        raw, b = tvb:raw(off + h, math.min(clen - h, 16)), 0
    end
    local dw0 = word_at(raw, b + 1)
    local fmt, ty = bits(dw0, 29, 3), bits(dw0, 24, 5)
    local kind = kind_of(fmt, ty)
    if not kind then
        return nil, string.format("bad Fmt/Type at byte %d: 0x%x (reserved or deprecated Fmt/Type encoding)", h, bits(dw0, 24, 8))
    end
    t.kind, t.fmt, t.type = kind, fmt, ty
    local four = fmt % 2 == 1
    local hl = four and 16 or 12
    t.four = four
    if clen < h + hl then return nil, trunc((four and "4" or "3") .. " DW TLP header", h + hl, len) end
    local lraw = dw0 % 1024
    t.length_dw = (lraw == 0) and 1024 or lraw
    t.tc = bits(dw0, 20, 3)
    t.ro, t.ns, t.ido = flag(dw0, 13), flag(dw0, 12), flag(dw0, 18)
    t.ln, t.th, t.td, t.ep = flag(dw0, 17), flag(dw0, 16), flag(dw0, 15), flag(dw0, 14)
    t.at = bits(dw0, 10, 2)
    local has_data = fmt >= 2
    local n = has_data and t.length_dw * 4 or 0
    -- As pcielab's codec: the Length of a Msg or Cpl without data is reserved, shown as 0.
    if not has_data and (kind == "Msg" or CPL[kind]) then t.length_dw = 0 end
    local endp = h + hl + n
    if len < endp then return nil, trunc("payload of the Length field", endp, len) end
    if t.td then
        endp = endp + 4
        if len < endp then return nil, trunc("ECRC digest (TD set)", endp, len) end
    end
    if len > endp then
        return nil, string.format("trailing bytes: Fmt, Length and TD gives %d bytes but the buffer holds %d", endp, len)
    end
    t.len = endp
    t.payload_off, t.payload_len = h + hl, n
    if clen < len then
        t.snapped, t.captured = true, clen
        t.captured_payload = math.max(0, math.min(n, clen - (h + hl)))
    else
        t.captured_payload = n
    end
    local dw1 = word_at(raw, b + 5)
    local dw2 = word_at(raw, b + 9)
    local tag_hi = bits(dw0, 23, 1) * 512 + bits(dw0, 19, 1) * 256
    t.tag = tag_hi + bits(dw1, 8, 8)
    t.rid_raw = bits(dw1, 16, 16)
    t.requester_id = bdf_str(t.rid_raw)
    t.first_be, t.last_be = bits(dw1, 0, 4), bits(dw1, 4, 4)
    if MEM[kind] then
        t.group = "mem"
        local hi, lo
        if four then
            local w3 = word_at(raw, b + 13)
            hi, lo = dw2, w3 - w3 % 4
            t.ph = w3 % 4
        else
            hi, lo = 0, dw2 - dw2 % 4
            t.ph = dw2 % 4
        end
        t.addr_hi, t.addr_lo = hi, lo
    elseif IO[kind] or CFG[kind] then
        if lraw ~= 1 then
            return nil, string.format("bad Length at byte %d: 0x%x (I/O and configuration requests must have Length 1)", h + 2, lraw)
        end
        t.last_be = 0
        if IO[kind] then
            t.group = "io"
            t.addr_hi, t.addr_lo = 0, dw2 - dw2 % 4
        else
            t.group = "cfg"
            t.completer_id = bdf_str(bits(dw2, 16, 16))
            t.register = bits(dw2, 2, 10)
        end
    elseif kind == "Msg" or kind == "MsgD" then
        t.group = "msg"
        local r = ty % 8
        t.msg_routing = ROUTING[r]
        t.msg_code = dw1 % 256
        t.msg_name = MSG[t.msg_code]
        t.msg_fields = hex_of(tvb, off + h + 8, 8)
        local w3 = word_at(raw, b + 13)
        t.w2, t.w3 = dw2, w3
        if r == 1 then t.addr_hi, t.addr_lo = dw2, w3 end
        if r == 2 then t.target_id = bdf_str(bits(dw2, 16, 16)) end
        local c = t.msg_code
        if c == 0x7e or c == 0x7f then
            t.vendor_id = dw2 % 65536
            t.vendor_data = w3
        elseif c == 0x10 then
            t.ltr_no_snoop = bits(w3, 16, 16)
            t.ltr_snoop = w3 % 65536
        elseif c == 0x12 then
            t.obff_code = w3 % 16
        elseif c == 0x01 then
            t.itag = w3 % 32
        elseif c == 0x02 then
            t.completion_count = bits(dw2, 0, 3)
            t.itag_vector = w3
        elseif c == 0x04 then
            t.page_address = "0x" .. hex64(dw2, w3 - w3 % 4096)
            t.prg_index = math.floor(w3 / 8) % 512
            t.read_access = bits(w3, 0, 1)
            t.write_access = bits(w3, 1, 1)
            t.last_in_group = bits(w3, 2, 1)
        elseif c == 0x05 then
            t.prg_index = dw2 % 512
            t.response_code = bits(dw2, 12, 4)
        end
    else
        t.group = "cpl"
        t.completer_id = bdf_str(bits(dw1, 16, 16))
        t.status = STATUS[bits(dw1, 13, 3)]
        t.bcm = flag(dw1, 12)
        local bc = dw1 % 4096
        t.byte_count = (bc == 0) and 4096 or bc
        t.rid_raw = bits(dw2, 16, 16)
        t.requester_id = bdf_str(t.rid_raw)
        t.tag = tag_hi + bits(dw2, 8, 8)
        t.lower_address = dw2 % 128
    end
    if t.td and not t.snapped then
        t.ecrc = hex_of(tvb, off + endp - 4, 4)
        -- ECRC over End-End prefixes, then the header with Type bit 0 and EP taken as 1.
        local chunks = {}
        for _, p in ipairs(t.prefixes) do
            if p.e2e then chunks[#chunks + 1] = tvb_bytes(tvb, off + p.off, 4) end
        end
        local hdr = tvb_bytes(tvb, off + h, hl)
        hdr[1] = hdr[1] - hdr[1] % 2 + 1
        if bits(hdr[3], 6, 1) == 0 then hdr[3] = hdr[3] + 64 end
        chunks[#chunks + 1] = hdr
        chunks[#chunks + 1] = tvb_bytes(tvb, off + h + hl, n)
        local c = crc32(chunks)
        local found = tvb(off + endp - 4, 4):le_uint()
        t.ecrc_ok = (c == found)
        t.ecrc_computed = c
    end
    return t
end

-- pcielab's one-line text of a TLP (the same as `pcielab dump`).
local TC_TEXT = {}
for tc = 0, 7 do TC_TEXT[tc] = " TC" .. tc end

local function tlp_text(t)
    local s
    if t.group == "mem" then
        s = string.format("%s %s %s tag %d addr %s len %dDW BE %x/%x", t.kind, t.four and "4DW" or "3DW",
            t.requester_id, t.tag, addr_text(t.addr_hi, t.addr_lo), t.length_dw, t.first_be, t.last_be)
        if t.th then s = s .. " TH PH " .. t.ph end
    elseif t.group == "io" then
        s = string.format("%s %s tag %d addr %s BE %x", t.kind, t.requester_id, t.tag,
            addr_text(0, t.addr_lo), t.first_be)
    elseif t.group == "cfg" then
        s = string.format("%s %s tag %d -> %s reg %d (0x%03x) BE %x", t.kind, t.requester_id, t.tag,
            t.completer_id, t.register, t.register * 4, t.first_be)
    elseif t.group == "msg" then
        s = string.format("%s %s %s %s tag %d", t.kind, t.msg_routing,
            t.msg_name or string.format("Msg_0x%02x", t.msg_code), t.requester_id, t.tag)
        if t.msg_routing == "by_address" then s = s .. " addr " .. addr_text(t.addr_hi, t.addr_lo) end
        if t.msg_routing == "by_id" then s = s .. " -> " .. t.target_id end
        if t.vendor_id then s = s .. string.format(" vendor 0x%04x", t.vendor_id) end
        if t.payload_len > 0 then s = s .. " len " .. t.length_dw .. "DW" end
    else
        s = string.format("%s %s -> %s tag %d %s bc %d la 0x%02x", t.kind, t.completer_id,
            t.requester_id, t.tag, t.status, t.byte_count, t.lower_address)
        if t.bcm then s = s .. " BCM" end
        if t.payload_len > 0 then s = s .. " len " .. t.length_dw .. "DW" end
    end
    -- One concatenation for the usual case (no attribute, flag or AT set).
    if t.ro or t.ns or t.ido or t.ln or t.ep or t.td or t.at ~= 0 then
        s = s .. " TC" .. t.tc
        if t.ro then s = s .. " RO" end
        if t.ns then s = s .. " NS" end
        if t.ido then s = s .. " IDO" end
        if t.ln then s = s .. " LN" end
        if t.ep then s = s .. " EP" end
        if t.td then s = s .. " TD" end
        if t.at ~= 0 then s = s .. " AT" .. t.at end
    else
        s = s .. TC_TEXT[t.tc]
    end
    for _, p in ipairs(t.prefixes) do
        if p.pasid then
            s = s .. string.format(" [PASID 0x%x%s%s]", p.pasid, p.execute and " exe" or "", p.privileged and " priv" or "")
        else
            s = s .. string.format(" [%s 0x%06x]", p.kind, p.content)
        end
    end
    return s
end

local function is_last_completion(t)
    if t.payload_len == 0 then return true end
    return (t.lower_address % 4) + t.byte_count <= t.length_dw * 4
end

-- Pass-1 bookkeeping; returns nothing. Results are stored per frame.
local function track(pinfo, num, t, comment, ifname)
    -- A replayed TLP is a copy of one already seen: it neither opens nor answers a request.
    if is_dll_replay(comment) then return end
    -- The interface name is known only when a tree is built; tshark's first pass with -2
    -- builds none unless a read filter (-R) is given. Without it all interfaces are one link.
    local link = ifname and link_key(ifname) or ""
    local now = pinfo.rel_ts
    local st = state
    local by_link = st.pending[link]
    if not by_link then
        by_link = {}
        st.pending[link] = by_link
    end
    local key = t.rid_raw * 1024 + t.tag
    if CPL[t.kind] then
        local q = by_link[key]
        -- A queue of requests: frame, time, completions so far, for each (flat).
        if not q or q.head > q.tail then
            st.cpl_req[num] = 0
            return
        end
        local i = q.head
        local req = q[3 * i - 2]
        local count = q[3 * i] + 1
        q[3 * i] = count
        local last = is_last_completion(t)
        local ns = math.floor((now - q[3 * i - 1]) * 1e9 + 0.5)
        if ns < 0 then ns = 0 end
        st.cpl_req[num] = req
        st.cpl_ns[num] = ns
        st.cpl_info[num] = count * 2 + (last and 1 or 0)
        local prev = st.req_last[req]
        if prev then st.cpl_next[prev] = num else st.req_first[req] = num end
        st.req_last[req] = num
        if last then
            st.req_done[req] = true
            q[3 * i - 2], q[3 * i - 1], q[3 * i] = nil, nil, nil
            q.head = i + 1
            if q.head > q.tail then by_link[key] = nil end
        end
    elseif NON_POSTED[t.kind] then
        -- Requests with the same key queue up; completions go to the oldest.
        local q = by_link[key]
        if not q then
            q = { head = 1, tail = 0 }
            by_link[key] = q
        end
        local in_use = (q.tail >= q.head) and q[3 * q.tail - 2] or 0
        local i = q.tail + 1
        q.tail = i
        q[3 * i - 2], q[3 * i - 1], q[3 * i] = num, now, 0
        st.req_in_use[num] = in_use
    end
end

local function add_tlp_tree(tree, tvb, off, t, pinfo)
    local ti = tree:add(f["tlp"], tvb(off, t.snapped and t.captured or t.len))
    ti:set_text("TLP: " .. tlp_text(t))
    for _, p in ipairs(t.prefixes) do
        local pt = ti:add(f["tlp.prefix"], tvb(off + p.off, 4))
        pt:set_text("Prefix: " .. p.kind)
        pt:add(f["tlp.prefix.kind"], tvb(off + p.off, 1), p.kind)
        pt:add(f["tlp.prefix.content"], tvb(off + p.off + 1, 3), p.content)
        if p.pasid then
            pt:add(f["tlp.prefix.pasid"], tvb(off + p.off + 1, 3), p.pasid)
            pt:add(f["tlp.prefix.execute"], tvb(off + p.off + 1, 1), p.execute)
            pt:add(f["tlp.prefix.privileged"], tvb(off + p.off + 1, 1), p.privileged)
        end
    end
    local h = off + t.h0
    local b0, b1, b2 = tvb(h, 1), tvb(h + 1, 1), tvb(h + 2, 2)
    ti:add(f["tlp.kind"], b0, t.kind)
    ti:add(f["tlp.fmt"], b0, t.fmt)
    ti:add(f["tlp.type"], b0, t.type)
    ti:add(f["tlp.tc"], b1, t.tc)
    ti:add(f["tlp.tag"], (t.group == "cpl") and tvb(h + 10, 1) or tvb(h + 6, 1), t.tag)
    ti:add(f["tlp.attr.ro"], b2, t.ro)
    ti:add(f["tlp.attr.ns"], b2, t.ns)
    ti:add(f["tlp.attr.ido"], b1, t.ido)
    ti:add(f["tlp.ln"], b1, t.ln)
    ti:add(f["tlp.th"], b1, t.th)
    ti:add(f["tlp.td"], b2, t.td)
    local ep = ti:add(f["tlp.ep"], b2, t.ep)
    if t.ep then ep:add_proto_expert_info(e.poisoned) end
    ti:add(f["tlp.at"], b2, t.at)
    ti:add(f["tlp.length_dw"], b2, t.length_dw)
    if t.group == "cpl" then
        ti:add(f["tlp.completer_id"], tvb(h + 4, 2), t.completer_id)
        local st = ti:add(f["tlp.status"], tvb(h + 6, 1), t.status)
        st:append_text(" (" .. (STATUS_LONG[t.status] or "reserved") .. ")")
        if t.status ~= "SC" then st:add_proto_expert_info(e.status, "Completion status " .. t.status) end
        ti:add(f["tlp.bcm"], tvb(h + 6, 1), t.bcm)
        ti:add(f["tlp.byte_count"], tvb(h + 6, 2), t.byte_count)
        ti:add(f["tlp.requester_id"], tvb(h + 8, 2), t.requester_id)
        ti:add(f["tlp.lower_address"], tvb(h + 11, 1), t.lower_address)
    else
        ti:add(f["tlp.requester_id"], tvb(h + 4, 2), t.requester_id)
    end
    if t.group == "mem" or t.group == "io" or t.group == "cfg" then
        ti:add(f["tlp.first_be"], tvb(h + 7, 1), t.first_be)
        ti:add(f["tlp.last_be"], tvb(h + 7, 1), t.last_be)
    end
    if t.group == "mem" or t.group == "io" or (t.group == "msg" and t.msg_routing == "by_address") then
        local ar = t.four and tvb(h + 8, 8) or tvb(h + 8, 4)
        ti:add(f["tlp.address"], ar, "0x" .. hex64(t.addr_hi, t.addr_lo))
        ti:add(f["tlp.address_value"], ar, UInt64.new(t.addr_lo, t.addr_hi))
    end
    if t.group == "mem" then ti:add(f["tlp.ph"], tvb(h + (t.four and 15 or 11), 1), t.ph) end
    if t.group == "cfg" then
        ti:add(f["tlp.completer_id"], tvb(h + 8, 2), t.completer_id)
        ti:add(f["tlp.register"], tvb(h + 10, 2), t.register)
    end
    if t.group == "msg" then
        local ct = ti:add(f["tlp.msg_code"], tvb(h + 7, 1), t.msg_code)
        if t.msg_name then
            ct:append_text(" (" .. t.msg_name .. ")")
            ti:add(f["tlp.msg_name"], tvb(h + 7, 1), t.msg_name)
        end
        ti:add(f["tlp.msg_routing"], b0, t.msg_routing)
        local mf = tvb(h + 8, 8)
        ti:add(f["tlp.msg_fields"], mf, t.msg_fields)
        if t.target_id then ti:add(f["tlp.target_id"], tvb(h + 8, 2), t.target_id) end
        for _, k in ipairs({ "vendor_id", "vendor_data", "ltr_no_snoop", "ltr_snoop", "obff_code",
            "itag", "completion_count", "itag_vector", "page_address", "prg_index", "read_access",
            "write_access", "last_in_group", "response_code" }) do
            if t[k] ~= nil then ti:add(f["tlp." .. k], mf, t[k]) end
        end
    end
    if t.captured_payload > 0 then
        ti:add(f["tlp.payload"], tvb(off + t.payload_off, t.captured_payload))
    end
    if t.snapped then
        local st = ti:add(f["tlp.captured_len"], t.captured)
        st:set_generated(true)
        st:add_proto_expert_info(e.snapped, string.format("Only %d of the TLP's %d bytes were captured (snap length)", t.captured, t.len))
    end
    if t.td and not t.snapped then
        local er = tvb(off + t.len - 4, 4)
        ti:add(f["tlp.ecrc"], er, t.ecrc)
        local ok = ti:add(f["tlp.ecrc_ok"], er, t.ecrc_ok)
        if not t.ecrc_ok then
            local c = t.ecrc_computed
            ok:add_proto_expert_info(e.ecrc, string.format("ECRC mismatch: computed %02x%02x%02x%02x",
                c % 256, bits(c, 8, 8), bits(c, 16, 8), bits(c, 24, 8)))
        end
    end
    return ti
end

-- The request/completion links of a TLP: the Info column's note, and (when `full`, a
-- tree being built) the generated fields and expert info.
local function add_links(tree, pinfo, num, ti, comment, full)
    if is_dll_replay(comment) then
        if full then
            local it = tree:add(f["tlp.dll_replay"], true)
            it:set_generated(true)
            it:add_proto_expert_info(e.replay)
        end
        return " (DLL replay)"
    end
    local st = state
    local note = ""
    local req = st.cpl_req[num]
    if req == 0 then
        if full then ti:add_proto_expert_info(e.unmatched) end
        note = " (no request)"
    elseif req then
        local info = st.cpl_info[num]
        local last = info % 2 == 1
        if full then
            local it = tree:add(f["request_frame"], req)
            it:set_generated(true)
            local ns = st.cpl_ns[num]
            local lt = tree:add(f["latency"], NSTime.new(math.floor(ns / 1e9), ns % 1e9))
            lt:set_generated(true)
            tree:add(f["last"], last):set_generated(true)
            tree:add(f["completion_index"], math.floor(info / 2)):set_generated(true)
        end
        note = string.format(" (reply to #%d%s)", req, last and "" or ", more to come")
    end
    local in_use = st.req_in_use[num]
    if in_use then
        if full then
            local cf = st.req_first[num]
            while cf do
                tree:add(f["response_frame"], cf):set_generated(true)
                cf = st.cpl_next[cf]
            end
        end
        if in_use ~= 0 then
            if full then
                ti:add_proto_expert_info(e.tag_in_use, string.format("Tag in use by frame %d, which has not completed", in_use))
            end
            note = string.format(" (tag in use by #%d)", in_use)
        end
        if pinfo.visited and not st.req_done[num] then
            if full then ti:add_proto_expert_info(e.missing, "No (last) completion in the capture") end
            note = " (no completion)"
        end
    end
    return note
end

---------------------------------------------------------------------------------------
-- DLLP decoding

local FC_KIND = { [4] = "InitFC1", [0xc] = "InitFC2", [8] = "UpdateFC" }
local FC_CLASS = { [0] = "P", [1] = "NP", [2] = "Cpl" }

local function dllp_decode(tvb, off)
    local d = {}
    local raw = tvb:raw(off, 6)
    local w = word_at(raw, 1)
    local b0 = bits(w, 24, 8)
    local content = w % 16777216
    d.type = b0
    d.content = content
    local lo, hi = sbyte(raw, 5, 6)
    d.crc = hi * 256 + lo
    local c = crc16_word(w)
    d.crc_ok = (c == d.crc)
    d.crc_computed = c
    if b0 == 0x00 then
        d.kind = "Ack"; d.seq = content % 4096; d.text = "Ack seq " .. d.seq
    elseif b0 == 0x10 then
        d.kind = "Nak"; d.seq = content % 4096; d.text = "Nak seq " .. d.seq
    elseif b0 == 0x20 then d.kind = "PM_Enter_L1"; d.text = d.kind
    elseif b0 == 0x21 then d.kind = "PM_Enter_L23"; d.text = d.kind
    elseif b0 == 0x23 then d.kind = "PM_Active_State_Request_L1"; d.text = d.kind
    elseif b0 == 0x24 then d.kind = "PM_Request_Ack"; d.text = d.kind
    elseif b0 == 0x30 then
        d.kind = "Vendor"; d.vendor_data = content
        d.text = string.format("Vendor-specific 0x%06x", content)
    elseif b0 == 0x31 then d.kind = "NOP"; d.text = "NOP"
    elseif b0 == 0x02 then
        d.kind = "Data_Link_Feature"
        d.feature_ack = flag(content, 23)
        d.feature_support = content % 2 ^ 23
        d.text = string.format("Data_Link_Feature ack %d support 0x%06x", d.feature_ack and 1 or 0, d.feature_support)
    elseif b0 == 0x01 or (bits(b0, 3, 1) == 0 and (bits(b0, 4, 4) == 7 or bits(b0, 4, 4) == 0xf or bits(b0, 4, 4) == 0xb)) then
        d.kind = "MR-IOV"
        local names = { [0x0] = "MRInit", [0x7] = "MRInitFC1", [0xf] = "MRInitFC2", [0xb] = "MRUpdateFC" }
        d.text = string.format("%s 0x%06x", names[bits(b0, 4, 4)] or "MRInit", content)
    elseif bits(b0, 3, 1) == 0 and FC_KIND[bits(b0, 6, 2) * 4] ~= nil and FC_CLASS[bits(b0, 4, 2)] ~= nil then
        d.kind = FC_KIND[bits(b0, 6, 2) * 4]
        d.fc_class = FC_CLASS[bits(b0, 4, 2)]
        d.vc = b0 % 8
        d.hdr_scale = bits(content, 22, 2)
        d.hdr_fc = bits(content, 14, 8)
        d.data_scale = bits(content, 12, 2)
        d.data_fc = content % 4096
        d.text = string.format("%s-%s VC%d hdr %d (scale %d) data %d (scale %d)", d.kind, d.fc_class,
            d.vc, d.hdr_fc, d.hdr_scale, d.data_fc, d.data_scale)
    else
        return nil, string.format("bad DLLP Type at byte 0: 0x%x (reserved DLLP type encoding)", b0)
    end
    if not d.crc_ok then
        return d, string.format("DLLP CRC mismatch at byte 4: found 0x%x, computed 0x%x", d.crc, c)
    end
    return d
end

local function dissect_dllp(tvb, pinfo, root, off, len, full)
    if not full and len == 6 then
        -- No tree to fill: the Info column's text only.
        local d, err = dllp_decode(tvb, off)
        if not d then return "malformed DLLP: " .. err end
        return d.crc_ok and d.text or (d.text .. " CRC-BAD")
    end
    local ti = root:add(f["dllp"], tvb(off, len))
    if len ~= 6 then
        local msg = (len < 6) and trunc("DLLP", 6, len)
            or string.format("trailing bytes: DLLP (always 6 bytes) gives 6 bytes but the buffer holds %d", len)
        ti:add(f["dllp.error"], tvb(off, len), msg):add_proto_expert_info(e.malformed, msg)
        return "malformed DLLP: " .. msg
    end
    local d, err = dllp_decode(tvb, off)
    if not d then
        ti:add(f["dllp.error"], tvb(off, 1), err):add_proto_expert_info(e.malformed, err)
        return "malformed DLLP: " .. err
    end
    ti:set_text("DLLP: " .. d.text)
    ti:add(f["dllp.kind"], tvb(off, 1), d.kind)
    ti:add(f["dllp.type"], tvb(off, 1), d.type)
    local c = tvb(off + 1, 3)
    for _, k in ipairs({ "seq", "fc_class", "vc", "hdr_scale", "hdr_fc", "data_scale", "data_fc",
        "vendor_data", "feature_ack", "feature_support" }) do
        if d[k] ~= nil then ti:add(f["dllp." .. k], (k == "vc" or k == "fc_class") and tvb(off, 1) or c, d[k]) end
    end
    if d.kind == "MR-IOV" then ti:add(f["dllp.content"], c, d.content) end
    ti:add(f["dllp.crc"], tvb(off + 4, 2), d.crc)
    local ok = ti:add(f["dllp.crc_ok"], tvb(off + 4, 2), d.crc_ok)
    if not d.crc_ok then
        ok:add_proto_expert_info(e.crc, err)
        return d.text .. " CRC-BAD"
    end
    return d.text
end

---------------------------------------------------------------------------------------
-- Main

local MSG_PORT = 0x2FFF
local CMD_PORT = 0x5002

-- The messaging API: a 4-byte request to 0x2FFF, a reply from it told apart by length.
local function dissect_msg(tvb, pinfo, root, to_api)
    local len = tvb:len()
    pinfo.cols.protocol = "NetTLP"
    local t = root:add(proto, tvb(), "NetTLP messaging API")
    if to_api then
        if len ~= 4 then
            local m = string.format("messaging request of %d bytes (4 expected)", len)
            t:add(f["nettlp.msg.error"], tvb(), m):add_proto_expert_info(e.malformed, m)
            pinfo.cols.info = "NetTLP messaging: " .. m
            return len
        end
        local code = tvb(0, 4):le_uint()
        t:add_le(f["nettlp.msg.request"], tvb(0, 4))
        pinfo.cols.info = "NetTLP messaging request " .. (MSG_REQ[code] or string.format("unknown code %d", code))
        return len
    end
    if len == 8 then
        t:add_le(f["nettlp.msg.bar4"], tvb(0, 8))
        pinfo.cols.info = "NetTLP messaging reply BAR4 0x" .. tvb(0, 8):le_uint64():tohex()
    elseif len == 2 then
        local id = tvb(0, 2):le_uint()
        t:add_le(f["nettlp.msg.devid"], tvb(0, 2))
        pinfo.cols.info = string.format("NetTLP messaging reply device ID %02x:%02x", math.floor(id / 256), id % 256)
    elseif len == 192 then
        for i = 0, 15 do
            local et = t:add(f["nettlp.msg.msix_entry"], tvb(i * 12, 12), i)
            et:add_le(f["nettlp.msg.msix_addr"], tvb(i * 12, 8))
            et:add_le(f["nettlp.msg.msix_data"], tvb(i * 12 + 8, 4))
        end
        pinfo.cols.info = "NetTLP messaging reply MSI-X table (16 entries)"
    else
        local m = string.format("messaging reply of %d bytes (8, 2 or 192 expected)", len)
        t:add(f["nettlp.msg.error"], tvb(), m):add_proto_expert_info(e.malformed, m)
        pinfo.cols.info = "NetTLP messaging: " .. m
    end
    return len
end

-- The adapter command port: opcode, register, value (least significant byte first).
local function dissect_cmd(tvb, pinfo, root)
    local len = tvb:len()
    pinfo.cols.protocol = "NetTLP"
    local t = root:add(proto, tvb(), "NetTLP adapter command")
    if len < 6 then
        local m = string.format("adapter command of %d bytes (6 expected)", len)
        t:add(f["nettlp.msg.error"], tvb(), m):add_proto_expert_info(e.malformed, m)
        pinfo.cols.info = "NetTLP command: " .. m
        return len
    end
    local op, reg = tvb(0, 1):uint(), tvb(1, 1):uint()
    t:add(f["nettlp.cmd.opcode"], tvb(0, 1))
    t:add(f["nettlp.cmd.reg"], tvb(1, 1))
    t:add_le(f["nettlp.cmd.value"], tvb(2, 4))
    pinfo.cols.info = string.format("NetTLP command %s %s 0x%08x", CMD_OP[op] or string.format("op 0x%02x", op),
        CMD_REG[reg] or string.format("reg 0x%02x", reg), tvb(2, 4):le_uint())
    return len
end

-- Whether any of our fields is referenced (asked once per dissection pass: a filter
-- does not change within one).
local function need_fields(tree)
    if fields_referenced == nil then
        fields_referenced = false
        -- The protocol itself (a filter of just "pcielab").
        local ok, d = pcall(Dissector.get, "pcielab")
        if ok and d and tree:referenced(d) then
            fields_referenced = true
            return true
        end
        for _, field in pairs(f) do
            if tree:referenced(field) then
                fields_referenced = true
                break
            end
        end
    end
    return fields_referenced
end

local function dissect(tvb, pinfo, root)
    local len = tvb:len()
    local udp_src, udp_dst = pinfo.src_port, pinfo.dst_port
    if udp_dst == MSG_PORT or udp_src == MSG_PORT then
        return dissect_msg(tvb, pinfo, root, udp_dst == MSG_PORT)
    end
    if udp_dst == CMD_PORT or udp_src == CMD_PORT then
        return dissect_cmd(tvb, pinfo, root)
    end
    local is_dllp = (udp_src == DLLP_PORT or udp_dst == DLLP_PORT)
    local cfg_port = (udp_dst == 0x4001 or udp_dst == 0x5001 or udp_src == 0x4001 or udp_src == 0x5001)
    if (udp_dst == 0x5001 or udp_src == 0x5001) and len ~= 6 then return 0 end
    if not is_dllp and len == 6 and cfg_port then
        pinfo.cols.protocol = "NetTLP"
        local t = root:add(proto, tvb(), "NetTLP PCIe configuration datagram")
        t:add(f["nettlp.config"], tvb())
        pinfo.cols.info = "NetTLP config " .. hex_of(tvb, 0, 6)
        return len
    end
    -- Whether the fields are wanted: shown (tshark -V, -T, Wireshark's details pane) or
    -- used by a filter, column or tap. Otherwise only the Info column and the matching
    -- state are made (not even the protocol's item), which is most of the time a plain
    -- `tshark -r` takes.
    local full = root.visible or (fields_referenced ~= false and need_fields(root))
    local tree = full and root:add(proto, tvb()) or root
    -- (pinfo.cols makes a new object on each access: once per packet)
    local cols = pinfo.cols
    cols.protocol = is_dllp and "PCIe DLLP" or "PCIe TLP"
    if len < 6 then
        local msg = string.format("NetTLP header truncated: %d bytes of 6", len)
        if full then tree:add_proto_expert_info(e.malformed, msg) end
        cols.info = msg
        return len
    end
    if full then
        tree:add(f["nettlp.seq"], tvb(0, 2))
        tree:add(f["nettlp.tstamp"], tvb(2, 4))
    end
    local iface = iface_field()
    local ifname = iface and tostring(iface.value)
    local prefix = ifname and (ifname .. " ") or ""
    if is_dllp then
        local text = dissect_dllp(tvb, pinfo, tree, 6, len - 6, full)
        if full then tree:append_text(": " .. text) end
        cols.info = prefix .. text
        return len
    end
    -- NetTLP header and the TLP header in one read (22 bytes: 6 + a 4DW header).
    local head = tvb:raw(0, len < 22 and len or 22)
    local t, err = decode_tlp(tvb, 6, tvb:reported_len() - 6, len - 6, head)
    if not t then
        local ti = tree:add(f["tlp.error"], tvb(6, len - 6), err)
        ti:add_proto_expert_info(e.malformed, "Malformed TLP: " .. err)
        if len > 6 then
            local b = tvb(6, 1):uint()
            local k = kind_of(bits(b, 5, 3), bits(b, 0, 5))
            if k then tree:add(f["tlp.kind"], tvb(6, 1), k) end
        end
        cols.info = prefix .. "malformed TLP: " .. err
        return len
    end
    local comment = packet_comment()
    local num = pinfo.number
    if not pinfo.visited then track(pinfo, num, t, comment, ifname) end
    local ti = full and add_tlp_tree(tree, tvb, 6, t, pinfo) or tree
    local note = add_links(tree, pinfo, num, ti, comment, full)
    local text = tlp_text(t)
    if t.snapped then text = text .. string.format(" [snapped: %d of %d bytes]", t.captured, t.len) end
    if t.td and not t.snapped and not t.ecrc_ok then text = text .. " ECRC-BAD" end
    -- The NetTLP sequence number (in simulation captures, the data-link one).
    local s0, s1 = sbyte(head, 1, 2)
    local lcrc = is_lcrc_corrupted(comment) and " LCRC-BAD" or ""
    if full then
        text = text .. " seq " .. (s0 * 256 + s1) .. lcrc
        tree:append_text(": " .. text)
        cols.info = prefix .. text .. note
    else
        cols.info = prefix .. text .. " seq " .. (s0 * 256 + s1) .. lcrc .. note
    end
    return len
end

function proto.dissector(tvb, pinfo, root)
    local ok, res = pcall(dissect, tvb, pinfo, root)
    if ok then return res end
    -- Never let a Lua error escape: report it as expert info on the packet.
    local t = root:add(proto, tvb())
    t:add_proto_expert_info(e.internal, "pcielab dissector error: " .. tostring(res))
    return tvb:len()
end

local udp = DissectorTable.get("udp.port")
for port = 0x3000, 0x30FF do udp:add(port, proto) end
for port = 0x4000, 0x400F do udp:add(port, proto) end
udp:add(0x3776, proto)
udp:add(DLLP_PORT, proto)
udp:add(0x5001, proto)
udp:add(MSG_PORT, proto)
udp:add(CMD_PORT, proto)
