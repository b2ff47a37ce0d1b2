-- openmrc.lua: a Wireshark dissector for openmrc's MRC packets (docs/wire-format.md).
--
-- openmrc keeps the IBTA BTH first after UDP 4791, then its own headers: a RETH
-- in every data packet, ImmDt for the _IMM opcodes, the MRC data header (MDH),
-- and its own SACK / NACK / PROBE / PROBE_REPLY headers (opcodes 0xC0-0xC3).
-- Wireshark's built-in RoCE dissector knows none of the MRC headers and reads
-- the RETH of a WRITE_LAST_IMM as its immediate (IBTA puts no RETH there), so
-- this dissector takes UDP port 4791 for itself.
--
-- Use:  tshark -X lua_script:/path/to/openmrc.lua -r capture.pcap -V
--       openmrc wireshark --install   (copies it to the personal plugins folder)
-- Filter fields start with "openmrc.", e.g. openmrc.sack.cack, openmrc.ev.

local p = Proto("openmrc", "openmrc MRC (RoCEv2 BTH + MRC headers)")

local OPCODES = {
  [0x06] = "WRITE_FIRST", [0x07] = "WRITE_MIDDLE", [0x08] = "WRITE_LAST",
  [0x09] = "WRITE_LAST_IMM", [0x0A] = "WRITE_ONLY", [0x0B] = "WRITE_ONLY_IMM",
  [0xC0] = "SACK", [0xC1] = "NACK", [0xC2] = "PROBE", [0xC3] = "PROBE_REPLY",
}
local NACK_REASONS = {
  [1] = "TRIMMED", [2] = "TRIMMED_LASTHOP", [3] = "PSN_OUT_OF_WINDOW", [4] = "NO_RESOURCE",
  [5] = "REMOTE_ACCESS_ERROR", [6] = "INVALID_REQUEST", [7] = "QP_NOT_READY",
}

local f = p.fields
-- BTH
f.opcode = ProtoField.uint8("openmrc.bth.opcode", "OpCode", base.HEX, OPCODES)
f.se = ProtoField.bool("openmrc.bth.se", "Solicited event", 8, nil, 0x80)
f.mig = ProtoField.bool("openmrc.bth.m", "Migration state", 8, nil, 0x40)
f.padcnt = ProtoField.uint8("openmrc.bth.padcnt", "PadCnt", base.DEC, nil, 0x30)
f.tver = ProtoField.uint8("openmrc.bth.tver", "TVer", base.DEC, nil, 0x0F)
f.pkey = ProtoField.uint16("openmrc.bth.pkey", "P_Key", base.HEX)
f.dqpn = ProtoField.uint24("openmrc.bth.dqpn", "Destination QP", base.HEX)
f.ackreq = ProtoField.bool("openmrc.bth.ackreq", "AckReq", 8, nil, 0x80)
f.psn24 = ProtoField.uint24("openmrc.bth.psn", "PSN (low 24 bits)", base.DEC)
-- RETH, ImmDt
f.va = ProtoField.uint64("openmrc.reth.va", "Virtual address", base.HEX)
f.rkey = ProtoField.uint32("openmrc.reth.rkey", "R_Key", base.HEX)
f.dmalen = ProtoField.uint32("openmrc.reth.dmalen", "DMA length (this packet)", base.DEC)
f.imm = ProtoField.uint32("openmrc.imm", "Immediate data", base.HEX)
-- MDH
f.version = ProtoField.uint8("openmrc.version", "MRC version", base.DEC)
f.mdh_flags = ProtoField.uint8("openmrc.mdh.flags", "Flags", base.HEX)
f.retransmit = ProtoField.bool("openmrc.mdh.retransmit", "RETRANSMIT", 8, nil, 0x01)
f.mdh_ackreq = ProtoField.bool("openmrc.mdh.ack_req", "ACK_REQ", 8, nil, 0x02)
f.trimmed = ProtoField.bool("openmrc.mdh.trimmed", "TRIMMED", 8, nil, 0x04)
f.trimmed_lasthop = ProtoField.bool("openmrc.mdh.trimmed_lasthop", "TRIMMED_LASTHOP", 8, nil, 0x08)
f.wimm = ProtoField.bool("openmrc.mdh.wimm", "WIMM (WRITE WITH IMMEDIATE message)", 8, nil, 0x10)
f.psn = ProtoField.uint32("openmrc.psn", "PSN", base.DEC)
f.ev = ProtoField.uint32("openmrc.ev", "Entropy value (EV)", base.HEX)
f.ev_plane = ProtoField.uint8("openmrc.ev.plane", "EV plane (bits 0-3)", base.DEC)
f.ev_path = ProtoField.uint32("openmrc.ev.path", "EV path (bits 4-15)", base.DEC)
f.msn = ProtoField.uint32("openmrc.mdh.msn", "MSN", base.DEC)
f.ts = ProtoField.uint64("openmrc.ts", "Transmit timestamp (ps)", base.DEC)
f.payload = ProtoField.bytes("openmrc.payload", "Payload")
f.payload_len = ProtoField.uint32("openmrc.payload_len", "Payload length", base.DEC)
-- SACK
f.ecn_seen = ProtoField.bool("openmrc.sack.ecn_seen", "ECN_SEEN", 8, nil, 0x01)
f.penalty = ProtoField.uint8("openmrc.sack.penalty", "Window penalty", base.DEC, nil, 0x7F)
f.cack = ProtoField.uint32("openmrc.sack.cack", "Cumulative ACK PSN", base.DEC)
f.sack_off = ProtoField.uint16("openmrc.sack.base_offset", "SACK base offset", base.DEC)
f.sack_base = ProtoField.uint32("openmrc.sack.base", "SACK base PSN (cack + offset)", base.DEC)
f.bitmap = ProtoField.uint64("openmrc.sack.bitmap", "SACK bitmap", base.HEX)
f.sacked = ProtoField.uint8("openmrc.sack.count", "PSNs acknowledged in the bitmap", base.DEC)
f.rcvd_bytes = ProtoField.uint64("openmrc.sack.rcvd_bytes", "Received bytes", base.DEC)
f.ooo = ProtoField.uint32("openmrc.sack.ooo_count", "Out-of-order count", base.DEC)
f.ts_echo = ProtoField.uint64("openmrc.ts_echo", "Timestamp echo (ps)", base.DEC)
-- NACK
f.nack_flags = ProtoField.uint8("openmrc.nack.flags", "Flags", base.HEX)
f.reason = ProtoField.uint8("openmrc.nack.reason", "Reason", base.HEX, NACK_REASONS)
f.nack_cack = ProtoField.uint32("openmrc.nack.cack", "Cumulative ACK PSN", base.DEC)
-- PROBE / PROBE_REPLY
f.reliability = ProtoField.bool("openmrc.probe.reliability", "RELIABILITY", 8, nil, 0x01)
f.seq = ProtoField.uint32("openmrc.probe.seq", "Probe seq", base.DEC)
f.icrc = ProtoField.uint32("openmrc.icrc", "ICRC (CRC-32 of the UDP payload)", base.HEX)
-- --auth trailer (after the ICRC; only when the preference says datagrams carry it)
f.auth_counter = ProtoField.uint64("openmrc.auth.counter", "Auth counter", base.DEC)
f.auth_tag = ProtoField.bytes("openmrc.auth.tag", "Auth tag (AES-256-GCM)")
p.prefs.auth = Pref.bool("Auth trailer", false,
  "Datagrams carry the 24-byte trailer of openmrc --auth (8-byte counter, 16-byte tag) after the ICRC")

local e_short = ProtoExpert.new("openmrc.short", "Truncated openmrc packet", expert.group.MALFORMED, expert.severity.ERROR)
p.experts = { e_short }

local function add_ev(tree, buf)
  local ev = buf:uint()
  local sub = tree:add(f.ev, buf)
  sub:add(f.ev_plane, buf, ev % 16)
  sub:add(f.ev_path, buf, math.floor(ev / 16) % 4096)
  return ev
end

local function popcount64(v)
  local n = 0
  local hi, lo = v:higher(), v:lower()
  while hi > 0 do n = n + (hi % 2); hi = math.floor(hi / 2) end
  while lo > 0 do n = n + (lo % 2); lo = math.floor(lo / 2) end
  return n
end

function p.dissector(tvb, pinfo, root)
  local len = tvb:len()
  if len < 16 then return 0 end
  pinfo.cols.protocol = "openmrc"
  local op = tvb(0, 1):uint()
  local name = OPCODES[op] or string.format("opcode 0x%02x", op)
  local tree = root:add(p, tvb(0, len), "openmrc MRC, " .. name)
  if p.prefs.auth and len >= 40 then -- the trailer: shown, then left out of the MRC packet
    local tr = tree:add(p, tvb(len - 24, 24), "Authentication trailer (--auth)")
    tr:add(f.auth_counter, tvb(len - 24, 8)); tr:add(f.auth_tag, tvb(len - 16, 16))
    len = len - 24
  end
  local bth = tree:add(p, tvb(0, 12), "Base Transport Header")
  bth:add(f.opcode, tvb(0, 1))
  bth:add(f.se, tvb(1, 1)); bth:add(f.mig, tvb(1, 1)); bth:add(f.padcnt, tvb(1, 1)); bth:add(f.tver, tvb(1, 1))
  bth:add(f.pkey, tvb(2, 2))
  bth:add(f.dqpn, tvb(5, 3))
  bth:add(f.ackreq, tvb(8, 1))
  bth:add(f.psn24, tvb(9, 3))
  local body = len - 4 -- the ICRC closes every packet
  local info
  local function need(n)
    if body < n then
      tree:add_proto_expert_info(e_short, string.format("%s needs %d bytes, got %d", name, n + 4, len))
      return false
    end
    return true
  end
  if op >= 0x06 and op <= 0x0B then
    local has_imm = (op == 0x09 or op == 0x0B)
    local o = 12
    if not need(12 + 16 + (has_imm and 4 or 0) + 24) then return len end
    local reth = tree:add(p, tvb(o, 16), "RDMA Extended Transport Header (in every MRC data packet)")
    reth:add(f.va, tvb(o, 8)); reth:add(f.rkey, tvb(o + 8, 4)); reth:add(f.dmalen, tvb(o + 12, 4))
    o = o + 16
    local imm
    if has_imm then
      tree:add(f.imm, tvb(o, 4)); imm = tvb(o, 4):uint(); o = o + 4
    end
    local mdh = tree:add(p, tvb(o, 24), "MRC Data Header")
    mdh:add(f.version, tvb(o, 1))
    local fl = mdh:add(f.mdh_flags, tvb(o + 1, 1))
    fl:add(f.retransmit, tvb(o + 1, 1)); fl:add(f.mdh_ackreq, tvb(o + 1, 1)); fl:add(f.trimmed, tvb(o + 1, 1))
    fl:add(f.trimmed_lasthop, tvb(o + 1, 1)); fl:add(f.wimm, tvb(o + 1, 1))
    mdh:add(f.psn, tvb(o + 4, 4))
    local ev = add_ev(mdh, tvb(o + 8, 4))
    mdh:add(f.msn, tvb(o + 12, 4))
    mdh:add(f.ts, tvb(o + 16, 8))
    local psn = tvb(o + 4, 4):uint()
    o = o + 24
    local plen = body - o
    tree:add(f.payload_len, plen)
    if plen > 0 then tree:add(f.payload, tvb(o, plen)) end
    info = string.format("%s QP 0x%06x PSN %d EV 0x%x len %d", name, tvb(5, 3):uint(), psn, ev, tvb(28, 4):uint())
    if imm then info = info .. string.format(" imm 0x%x", imm) end
    if tvb(o - 23, 1):uint() % 8 >= 4 then info = info .. " TRIMMED" end
  elseif op == 0xC0 then
    if not need(12 + 44) then return len end
    local o = 12
    local h = tree:add(p, tvb(o, 44), "MRC ACK header (SACK)")
    h:add(f.version, tvb(o, 1))
    h:add(f.ecn_seen, tvb(o + 1, 1))
    h:add(f.penalty, tvb(o + 2, 1))
    h:add(f.cack, tvb(o + 4, 4))
    h:add(f.sack_off, tvb(o + 8, 2))
    local cack, off = tvb(o + 4, 4):uint(), tvb(o + 8, 2):uint()
    h:add(f.sack_base, tvb(o + 8, 2), (cack + off) % 4294967296)
    local bm = h:add(f.bitmap, tvb(o + 12, 8))
    bm:add(f.sacked, tvb(o + 12, 8), popcount64(tvb(o + 12, 8):uint64()))
    local ev = add_ev(h, tvb(o + 20, 4))
    h:add(f.rcvd_bytes, tvb(o + 24, 8))
    h:add(f.ooo, tvb(o + 32, 4))
    h:add(f.ts_echo, tvb(o + 36, 8))
    info = string.format("SACK QP 0x%06x cack %d base %d EV 0x%x%s", tvb(5, 3):uint(), cack,
      (cack + off) % 4294967296, ev, (tvb(o + 1, 1):uint() % 2 == 1) and " ECN" or "")
  elseif op == 0xC1 then
    if not need(12 + 24) then return len end
    local o = 12
    local h = tree:add(p, tvb(o, 24), "MRC NACK header")
    h:add(f.version, tvb(o, 1))
    h:add(f.nack_flags, tvb(o + 1, 1))
    h:add(f.reason, tvb(o + 2, 1))
    h:add(f.psn, tvb(o + 4, 4))
    local ev = add_ev(h, tvb(o + 8, 4))
    h:add(f.nack_cack, tvb(o + 12, 4))
    h:add(f.ts_echo, tvb(o + 16, 8))
    info = string.format("NACK QP 0x%06x %s PSN %d EV 0x%x", tvb(5, 3):uint(),
      NACK_REASONS[tvb(o + 2, 1):uint()] or "?", tvb(o + 4, 4):uint(), ev)
  elseif op == 0xC2 or op == 0xC3 then
    if not need(12 + 20) then return len end
    local o = 12
    local h = tree:add(p, tvb(o, 20), "MRC probe header")
    h:add(f.version, tvb(o, 1))
    if op == 0xC2 then h:add(f.reliability, tvb(o + 1, 1)) end
    h:add(f.seq, tvb(o + 4, 4))
    local ev = add_ev(h, tvb(o + 8, 4))
    if op == 0xC2 then h:add(f.ts, tvb(o + 12, 8)) else h:add(f.ts_echo, tvb(o + 12, 8)) end
    info = string.format("%s QP 0x%06x seq %d EV 0x%x", name, tvb(5, 3):uint(), tvb(o + 4, 4):uint(), ev)
  else
    info = name
  end
  tree:add(f.icrc, tvb(len - 4, 4))
  pinfo.cols.info = info
  return tvb:len()
end

-- Own UDP 4791 (replacing the RoCE dissector there): openmrc's RETH-in-every-
-- packet layout is not IBTA's, and only this dissector reads it right.
DissectorTable.get("udp.port"):add(4791, p)
