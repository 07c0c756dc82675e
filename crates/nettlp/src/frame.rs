//! NetTLP framing: the 6-byte header, the UDP port scheme, the messaging API and the
//! PCIe configuration API packets.
//!
//! ```text
//!  UDP payload of a TLP datagram
//!  ┌────────┬──────────────┬──────────────────────────────┐
//!  │ seq 16 │ tstamp 32    │ TLP (standard PCIe byte order,│
//!  │  (BE)  │   (BE)       │ no LCRC, no framing)          │
//!  └────────┴──────────────┴──────────────────────────────┘
//!   0        2              6
//! ```
//!
//! Ports (source port == destination port):
//! * `0x3000 + tag` — requests issued by the device side (LibTLP) and their completions;
//! * `0x4000 + (tag & 0xF)` — requests issued by the host side (to BAR4) and their
//!   completions;
//! * `0x2FFF` — messaging API (BAR4 address, device ID, MSI-X table);
//! * `0x4001` (LibTLP) / `0x5001` (adapter RTL) — configuration API; on 0x4001 a 6-byte
//!   datagram is a configuration packet, a TLP datagram is at least 18 bytes.
//!
//! ```
//! use pcielab_nettlp::frame::{NetTlpHeader, classify_port, PortClass};
//! let h = NetTlpHeader { seq: 0x0102, tstamp: 0x0304_0506 };
//! let mut b = [0u8; 6];
//! h.emit(&mut b)?;
//! assert_eq!(b, [1, 2, 3, 4, 5, 6]);
//! assert_eq!(NetTlpHeader::parse(&b)?, h);
//! assert_eq!(classify_port(0x3007), PortClass::DeviceIssued { tag: 7 });
//! assert_eq!(classify_port(0x4003), PortClass::HostIssued { lane: 3 });
//! # Ok::<(), pcielab_wire::Error>(())
//! ```

use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::{Error, Result};

/// Length of the NetTLP header.
pub const HEADER_LEN: usize = 6;
/// First port of requests issued by the device side: `0x3000 + tag`.
pub const DEVICE_PORT_BASE: u16 = 0x3000;
/// First port of requests issued by the host side: `0x4000 + (tag & 0xF)`.
pub const HOST_PORT_BASE: u16 = 0x4000;
/// Number of host-side ports.
pub const HOST_PORTS: u16 = 16;
/// Messaging API port (answered by the adapter host).
pub const MSG_PORT: u16 = 0x2fff;
/// Configuration API port as LibTLP uses it (shared with the tag-1 host-side port).
pub const CFG_PORT_LIBTLP: u16 = 0x4001;
/// Configuration API port as adapter RTL ≥ v0.22 uses it.
pub const CFG_PORT_ADAPTER: u16 = 0x5001;
/// Length of a configuration API packet.
pub const CFG_PACKET_LEN: usize = 6;
/// Largest UDP payload a NetTLP datagram needs: header + 4DW TLP header + 4 KiB + digest.
pub const MAX_DATAGRAM: usize = HEADER_LEN + 16 + 4096 + 4;

/// `tstamp` value that asks the adapter for a write acknowledgement (pcielab extension,
/// ignored by real adapters): "ACKQ".
pub const ACK_REQUEST: u32 = 0x4143_4b51;
/// `tstamp` value of a write acknowledgement (a header-only datagram): "ACK!".
pub const ACK_REPLY: u32 = 0x4143_4b21;
/// `tstamp` value of the answer to an acknowledged write the adapter received but did not
/// apply (outside its memory windows): "NAK!".
pub const ACK_REFUSED: u32 = 0x4e41_4b21;

/// Port for a request the device side issues with `tag` (and for its completions).
pub const fn device_port(tag: u8) -> u16 {
    DEVICE_PORT_BASE + tag as u16
}

/// Port for a request the host side issues with `tag` (and for its completions).
pub const fn host_port(tag: u16) -> u16 {
    HOST_PORT_BASE + (tag & 0xf)
}

/// What a UDP destination port carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortClass {
    /// 0x3000 + tag: device-issued requests and their completions.
    DeviceIssued {
        /// The tag (low 8 bits).
        tag: u8,
    },
    /// 0x4000 + lane: host-issued requests and their completions.
    HostIssued {
        /// `tag & 0xF`.
        lane: u8,
    },
    /// Other ports the adapter treats as TLP ports (0x3100-0x3FFF, 0x4010-0x4FFF).
    OtherTlp,
    /// 0x2FFF.
    Messaging,
    /// 0x5001.
    Config,
    /// 0x5002.
    Command,
    /// Anything else.
    Other,
}

/// Classifies a destination port as the adapter does.
pub const fn classify_port(port: u16) -> PortClass {
    match port {
        MSG_PORT => PortClass::Messaging,
        CFG_PORT_ADAPTER => PortClass::Config,
        CMD_PORT => PortClass::Command,
        0x3000..=0x30ff => PortClass::DeviceIssued {
            tag: (port - DEVICE_PORT_BASE) as u8,
        },
        0x4000..=0x400f => PortClass::HostIssued {
            lane: (port - HOST_PORT_BASE) as u8,
        },
        0x3100..=0x3fff | 0x4010..=0x4fff => PortClass::OtherTlp,
        _ => PortClass::Other,
    }
}

/// The 6-byte NetTLP header (both fields big endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NetTlpHeader {
    /// Frame counter of the adapter (LibTLP sends 0).
    pub seq: u16,
    /// Adapter timestamp, 6.4 ns ticks (LibTLP sends 0).
    pub tstamp: u32,
}

impl NetTlpHeader {
    /// Parses the first 6 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<NetTlpHeader> {
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated {
                what: "NetTLP header",
                needed: HEADER_LEN,
                available: b.len(),
            });
        }
        Ok(NetTlpHeader {
            seq: u16::from_be_bytes([b[0], b[1]]),
            tstamp: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
        })
    }

    /// Writes the header into the first 6 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: HEADER_LEN,
                available: b.len(),
            });
        }
        b[0..2].copy_from_slice(&self.seq.to_be_bytes());
        b[2..6].copy_from_slice(&self.tstamp.to_be_bytes());
        Ok(())
    }
}

/// What [`parse_tlp_lenient`] had to forgive in a received TLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Leniency {
    /// Bytes after the TLP (the adapter takes the extent from the frame end).
    pub trailing: usize,
    /// Missing payload bytes of a single-DW MWr, filled with zeros (the one tolerance,
    /// always 1 byte: see [`LIBTLP_SHORT_WRITE`]).
    pub padded: usize,
}

/// The one payload shortfall NetTLP receivers forgive, and why.
///
/// Upstream LibTLP's `dma_write` of fewer than 4 bytes inside one DW sends a 1-DW MWr
/// (Length = 1) whose payload is one padding byte per clear bit among First DW BE bits
/// 0-2, then the data bytes (one per set bit), and nothing for the rest. That is
/// `3 + bit 3` bytes: exactly 3 whenever First DW BE bit 3 is clear, 4 otherwise (e.g.
/// 2 bytes at `0x3001`: First BE `0110`, payload `00 aa bb`). The adapter hardware reads
/// the missing byte from the Ethernet minimum-frame padding, which is zero. So a 3DW or
/// 4DW MWr without digest, with Length = 1, First DW BE non-zero with bit 3 clear, and
/// exactly 3 payload bytes is completed with a zero byte; the byte enables then decide
/// what is written, as on hardware. (For First BE `0001`, `0010` and `0011` LibTLP's
/// leading pads push its data past the enabled bytes, so a pad byte is written instead:
/// an upstream bug the hardware shares.)
///
/// Every other disagreement between a TLP's Length field and the bytes it carries is a
/// Malformed TLP, which PCIe receivers drop: it is never padded and never applied.
pub const LIBTLP_SHORT_WRITE: &str =
    "a 1-DW MWr with First DW BE bit 3 clear carrying 3 payload bytes (LibTLP dma_write of < 4 bytes) is completed with a zero byte";

/// The length a TLP has according to its header (Fmt, Length, TD), from its first bytes.
pub fn tlp_len_from_header(b: &[u8]) -> Result<usize> {
    if b.len() < 4 {
        return Err(Error::Truncated {
            what: "TLP header",
            needed: 12,
            available: b.len(),
        });
    }
    let fmt = b[0] >> 5;
    if fmt == 0b100 {
        return Err(Error::Field {
            field: "Fmt",
            value: fmt as u64,
            offset: 0,
            reason: "TLP prefixes are not carried by NetTLP",
        });
    }
    let hl = if fmt & 1 != 0 { 16 } else { 12 };
    let raw = (((b[2] & 3) as usize) << 8) | b[3] as usize;
    let dw = if raw == 0 { 1024 } else { raw };
    let data = if fmt & 2 != 0 { dw * 4 } else { 0 };
    let digest = if b[2] & 0x80 != 0 { 4 } else { 0 };
    Ok(hl + data + digest)
}

/// True when `bytes` (a TLP that is short of what its header declares) falls under
/// [`LIBTLP_SHORT_WRITE`]: an MWr without digest, Length = 1, First DW BE non-zero with
/// bit 3 clear, exactly 3 payload bytes.
fn is_libtlp_short_write(bytes: &[u8], want: usize) -> bool {
    let hl = if bytes[0] & 0x20 != 0 { 16 } else { 12 };
    let is_mwr = bytes[0] & 0xdf == 0x40;
    let len_one = bytes[2] & 3 == 0 && bytes[3] == 1;
    let no_digest = bytes[2] & 0x80 == 0;
    let first_be = bytes.get(7).map_or(0, |b| b & 0xf);
    is_mwr
        && len_one
        && no_digest
        && want == hl + 4
        && bytes.len() == hl + 3
        && first_be != 0
        && first_be & 0x8 == 0
}

/// Parses received TLP bytes as a device-side receiver does: trailing bytes after the
/// TLP are ignored (reported in [`Leniency::trailing`]), LibTLP's short single-DW MWr is
/// completed under [`LIBTLP_SHORT_WRITE`] (into `scratch`); any other shortfall is an
/// error (`Truncated`, naming the Length field).
///
/// ```
/// use pcielab_nettlp::frame::parse_tlp_lenient;
/// // LibTLP's 2-byte write at 0x3001: 1 DW declared, 3 payload bytes sent.
/// let bytes = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x06, 0, 0, 0x30, 0, 0, 0xaa, 0xbb];
/// let mut scratch = Vec::new();
/// let (tlp, fix) = parse_tlp_lenient(&bytes, &mut scratch)?;
/// assert_eq!(tlp.payload, &[0, 0xaa, 0xbb, 0]);
/// assert_eq!(fix.padded, 1);
/// // Length = 1024 DW with 4 bytes of payload: Malformed, never padded.
/// let short = [0x40, 0, 0, 0, 0x1b, 0, 0, 0xff, 0, 0, 0xa0, 0, 1, 2, 3, 4];
/// assert!(parse_tlp_lenient(&short, &mut scratch).is_err());
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
pub fn parse_tlp_lenient<'a>(
    bytes: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> Result<(TlpRepr<'a>, Leniency)> {
    let want = tlp_len_from_header(bytes)?;
    if bytes.len() >= want {
        let tlp = TlpRepr::parse_bytes(&bytes[..want])?;
        return Ok((
            tlp,
            Leniency {
                trailing: bytes.len() - want,
                padded: 0,
            },
        ));
    }
    let hl = if bytes[0] & 0x20 != 0 { 16 } else { 12 };
    if bytes.len() < hl {
        return Err(Error::Truncated {
            what: "TLP header",
            needed: hl,
            available: bytes.len(),
        });
    }
    if !is_libtlp_short_write(bytes, want) {
        return Err(Error::Truncated {
            what: "TLP payload (Length field)",
            needed: want,
            available: bytes.len(),
        });
    }
    scratch.clear();
    scratch.extend_from_slice(bytes);
    scratch.resize(want, 0);
    let padded = want - bytes.len();
    let tlp = TlpRepr::parse_bytes(&scratch[..])?;
    Ok((
        tlp,
        Leniency {
            trailing: 0,
            padded,
        },
    ))
}

/// Parses received TLP bytes as the adapter does (the PCIe side of NetTLP): the bytes
/// must be exactly what the header declares, except for [`LIBTLP_SHORT_WRITE`]. Bytes
/// after the TLP are an [`Error::Trailing`], a shortfall an [`Error::Truncated`] (both a
/// Malformed TLP whose payload disagrees with Length).
///
/// ```
/// use pcielab_nettlp::frame::parse_tlp_exact;
/// use pcielab_wire::Error;
/// let mut scratch = Vec::new();
/// // MRd of 1 DW with 2 bytes after it.
/// let b = [0, 0, 0, 1, 0x1b, 0, 5, 0x0f, 0, 0, 0x10, 0, 9, 9];
/// assert!(matches!(parse_tlp_exact(&b, &mut scratch), Err(Error::Trailing { .. })));
/// assert!(parse_tlp_exact(&b[..12], &mut scratch).is_ok());
/// ```
pub fn parse_tlp_exact<'a>(
    bytes: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> Result<(TlpRepr<'a>, Leniency)> {
    let want = tlp_len_from_header(bytes)?;
    if bytes.len() > want {
        return Err(Error::Trailing {
            what: "TLP Length field",
            expected: want,
            available: bytes.len(),
        });
    }
    parse_tlp_lenient(bytes, scratch)
}

/// Writes a NetTLP datagram (header + TLP) into `buf`; returns its length.
pub fn emit_datagram(hdr: NetTlpHeader, tlp: &TlpRepr<'_>, buf: &mut [u8]) -> Result<usize> {
    hdr.emit(buf)?;
    let n = tlp.emit(&mut buf[HEADER_LEN..])?;
    Ok(HEADER_LEN + n)
}

/// A messaging API request (4-byte little-endian integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgRequest {
    /// 1: the BAR4 physical start address (reply: u64 LE).
    GetBar4Addr,
    /// 2: the adapter's device ID `bus << 8 | devfn` (reply: u16 LE).
    GetDevId,
    /// 3: the first 16 MSI-X table entries (reply: 16 × {u64 addr, u32 data} LE).
    GetMsixTable,
}

impl MsgRequest {
    /// The request's code.
    pub const fn code(self) -> u32 {
        match self {
            MsgRequest::GetBar4Addr => 1,
            MsgRequest::GetDevId => 2,
            MsgRequest::GetMsixTable => 3,
        }
    }

    /// Parses a 4-byte request.
    pub fn parse(b: &[u8]) -> Result<MsgRequest> {
        if b.len() != 4 {
            return Err(Error::Invalid {
                what: "messaging API request length",
                value: b.len() as u64,
                allowed: "exactly 4 bytes",
            });
        }
        match u32::from_le_bytes([b[0], b[1], b[2], b[3]]) {
            1 => Ok(MsgRequest::GetBar4Addr),
            2 => Ok(MsgRequest::GetDevId),
            3 => Ok(MsgRequest::GetMsixTable),
            v => Err(Error::Invalid {
                what: "messaging API request code",
                value: v as u64,
                allowed: "1 (BAR4 address), 2 (device ID) or 3 (MSI-X table)",
            }),
        }
    }
}

/// Number of MSI-X entries the messaging API reports.
pub const MSIX_ENTRIES: usize = 16;
/// Bytes of one packed MSI-X entry in the messaging reply.
pub const MSIX_ENTRY_LEN: usize = 12;

/// One MSI-X table entry as the messaging API reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MsixEntry {
    /// Message address.
    pub addr: u64,
    /// Message data.
    pub data: u32,
}

/// Encodes an MSI-X table reply (192 bytes).
pub fn encode_msix_table(t: &[MsixEntry; MSIX_ENTRIES]) -> [u8; MSIX_ENTRIES * MSIX_ENTRY_LEN] {
    let mut out = [0u8; MSIX_ENTRIES * MSIX_ENTRY_LEN];
    for (i, e) in t.iter().enumerate() {
        out[i * 12..i * 12 + 8].copy_from_slice(&e.addr.to_le_bytes());
        out[i * 12 + 8..i * 12 + 12].copy_from_slice(&e.data.to_le_bytes());
    }
    out
}

/// Decodes an MSI-X table reply.
pub fn decode_msix_table(b: &[u8]) -> Result<[MsixEntry; MSIX_ENTRIES]> {
    if b.len() != MSIX_ENTRIES * MSIX_ENTRY_LEN {
        return Err(Error::Invalid {
            what: "MSI-X table reply length",
            value: b.len() as u64,
            allowed: "exactly 192 bytes",
        });
    }
    let mut t = [MsixEntry::default(); MSIX_ENTRIES];
    for (i, e) in t.iter_mut().enumerate() {
        let c = &b[i * 12..i * 12 + 12];
        e.addr = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        e.data = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
    }
    Ok(t)
}

/// A configuration API packet: one DW of configuration space.
///
/// ```
/// use pcielab_nettlp::frame::CfgPacket;
/// // Read of DW 0 (vendor/device ID), all bytes enabled, answered 3776:8022.
/// let p = CfgPacket { write: false, byte_mask: 0xf, dw_addr: 0, data: 0x8022_3776 };
/// assert_eq!(p.to_bytes(), [0x3c, 0x00, 0x80, 0x22, 0x37, 0x76]);
/// assert_eq!(CfgPacket::parse(&p.to_bytes())?, p);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CfgPacket {
    /// Write (opcode 01) or read (00).
    pub write: bool,
    /// Byte enables of the DW (4 bits).
    pub byte_mask: u8,
    /// DW address (10 bits: 4 KiB of configuration space).
    pub dw_addr: u16,
    /// The register value (big endian on the wire).
    pub data: u32,
}

impl CfgPacket {
    /// Parses exactly 6 bytes.
    pub fn parse(b: &[u8]) -> Result<CfgPacket> {
        if b.len() != CFG_PACKET_LEN {
            return Err(Error::Invalid {
                what: "configuration API packet length",
                value: b.len() as u64,
                allowed: "exactly 6 bytes",
            });
        }
        let op = b[0] >> 6;
        if op > 1 {
            return Err(Error::Field {
                field: "configuration API opcode",
                value: op as u64,
                offset: 0,
                reason: "00 (read) and 01 (write) are defined",
            });
        }
        Ok(CfgPacket {
            write: op == 1,
            byte_mask: (b[0] >> 2) & 0xf,
            dw_addr: (((b[0] & 3) as u16) << 8) | b[1] as u16,
            data: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
        })
    }

    /// The 6 wire bytes.
    pub fn to_bytes(&self) -> [u8; CFG_PACKET_LEN] {
        let d = self.data.to_be_bytes();
        [
            (u8::from(self.write) << 6)
                | ((self.byte_mask & 0xf) << 2)
                | ((self.dw_addr >> 8) as u8 & 3),
            self.dw_addr as u8,
            d[0],
            d[1],
            d[2],
            d[3],
        ]
    }
}

/// The adapter command port (NetTLP adapter RTL: adapter registers).
pub const CMD_PORT: u16 = 0x5002;
/// Length of an adapter command packet.
pub const CMD_PACKET_LEN: usize = 6;

/// Adapter command opcodes (first byte of a command packet).
pub mod cmd_op {
    /// Read an adapter register; the adapter answers with the packet, data filled in.
    pub const REG_READ: u8 = 0x10;
    /// Write an adapter register; no answer.
    pub const REG_WRITE: u8 = 0x11;
    /// Defined by the adapter RTL, not implemented there (no answer).
    pub const MAGIC: u8 = 0x20;
    /// Defined by the adapter RTL, not implemented there (no answer).
    pub const TSTAMP: u8 = 0x21;
    /// Defined by the adapter RTL, not implemented there (no answer).
    pub const RESET_ALL: u8 = 0x22;
}

/// Adapter registers (DW addresses of command packets).
pub mod cmd_reg {
    /// Magic number 0x01234567 (read-only).
    pub const MAGIC: u8 = 0x00;
    /// Destination MAC (the device host), bits 31:0.
    pub const DST_MAC_LOW: u8 = 0x01;
    /// Destination MAC, bits 47:32.
    pub const DST_MAC_HIGH: u8 = 0x02;
    /// Source MAC (the adapter), bits 31:0.
    pub const SRC_MAC_LOW: u8 = 0x03;
    /// Source MAC, bits 47:32.
    pub const SRC_MAC_HIGH: u8 = 0x04;
    /// Destination IPv4 address (the device host).
    pub const DST_IP: u8 = 0x05;
    /// Source IPv4 address (the adapter).
    pub const SRC_IP: u8 = 0x06;
    /// Destination UDP port register.
    pub const DST_PORT: u8 = 0x07;
    /// Source UDP port register.
    pub const SRC_PORT: u8 = 0x08;
    /// Requester ID (read-only).
    pub const REQUESTER_ID: u8 = 0x10;
}

/// A packet of the adapter command port 0x5002: opcode, register (DW address) and a
/// 32-bit value, which travels least significant byte first (the adapter RTL swaps
/// each register's bytes onto the wire).
///
/// ```text
///  byte 0   1        2..5
///  opcode | dwaddr | value (LE)
/// ```
///
/// ```
/// use pcielab_nettlp::frame::{cmd_op, cmd_reg, CmdPacket};
/// let p = CmdPacket::parse(&[0x10, 0x00, 0, 0, 0, 0])?;
/// assert_eq!((p.opcode, p.dw_addr), (cmd_op::REG_READ, cmd_reg::MAGIC));
/// let reply = CmdPacket { value: 0x0123_4567, ..p };
/// assert_eq!(reply.to_bytes(), [0x10, 0x00, 0x67, 0x45, 0x23, 0x01]);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmdPacket {
    /// Opcode ([`cmd_op`]).
    pub opcode: u8,
    /// Register ([`cmd_reg`]).
    pub dw_addr: u8,
    /// Register value.
    pub value: u32,
}

impl CmdPacket {
    /// Parses a command packet: 6 bytes; bytes after them (Ethernet padding of the
    /// minimum frame) are ignored, as the adapter RTL reads one 8-byte beat.
    pub fn parse(b: &[u8]) -> Result<CmdPacket> {
        if b.len() < CMD_PACKET_LEN {
            return Err(Error::Truncated {
                what: "adapter command packet",
                needed: CMD_PACKET_LEN,
                available: b.len(),
            });
        }
        Ok(CmdPacket {
            opcode: b[0],
            dw_addr: b[1],
            value: u32::from_le_bytes([b[2], b[3], b[4], b[5]]),
        })
    }

    /// The 6 wire bytes.
    pub fn to_bytes(&self) -> [u8; CMD_PACKET_LEN] {
        let v = self.value.to_le_bytes();
        [self.opcode, self.dw_addr, v[0], v[1], v[2], v[3]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_by_hand() {
        assert_eq!(device_port(0), 12288);
        assert_eq!(device_port(255), 0x30ff);
        assert_eq!(host_port(0x13), 0x4003);
        assert_eq!(classify_port(12287), PortClass::Messaging);
        assert_eq!(classify_port(0x5001), PortClass::Config);
        assert_eq!(classify_port(0x5002), PortClass::Command);
        assert_eq!(CMD_PORT, 20482);
        assert_eq!(classify_port(0x3100), PortClass::OtherTlp);
        assert_eq!(classify_port(0x4fff), PortClass::OtherTlp);
        assert_eq!(classify_port(0x2ffe), PortClass::Other);
        assert_eq!(classify_port(0x5000), PortClass::Other);
    }

    #[test]
    fn header_errors() {
        assert!(matches!(
            NetTlpHeader::parse(&[1, 2, 3]),
            Err(Error::Truncated {
                needed: 6,
                available: 3,
                ..
            })
        ));
        assert!(NetTlpHeader::default().emit(&mut [0u8; 5]).is_err());
    }

    #[test]
    fn tlp_lengths_from_header() {
        // MRd 3DW length 4: 12 bytes; MWr 4DW length 2: 16 + 8; CplD len 0 = 1024 DW.
        assert_eq!(tlp_len_from_header(&[0x00, 0, 0, 4]).unwrap(), 12);
        assert_eq!(tlp_len_from_header(&[0x60, 0, 0, 2]).unwrap(), 24);
        assert_eq!(tlp_len_from_header(&[0x4a, 0, 0, 0]).unwrap(), 12 + 4096);
        // TD set adds the digest.
        assert_eq!(tlp_len_from_header(&[0x40, 0, 0x80, 1]).unwrap(), 20);
        assert!(tlp_len_from_header(&[0x40, 0]).is_err());
        assert!(tlp_len_from_header(&[0x80, 0, 0, 1]).is_err());
    }

    #[test]
    fn lenient_parse_cases() {
        let mut s = Vec::new();
        // MRd 3DW, len 1, tag 5, addr 0x1000, with 3 trailing bytes (MAC padding).
        let b = [0, 0, 0, 1, 0x1b, 0, 5, 0x0f, 0, 0, 0x10, 0, 9, 9, 9];
        let (t, f) = parse_tlp_lenient(&b, &mut s).unwrap();
        assert_eq!(f.trailing, 3);
        assert_eq!(t.tag().value(), 5);
        // A truncated MRd is an error, not a pad.
        assert!(matches!(
            parse_tlp_lenient(&b[..10], &mut s),
            Err(Error::Truncated { .. })
        ));
        // A CplD short of payload is an error.
        let c = [0x4a, 0, 0, 1, 0, 0, 0, 4, 0x1b, 0, 0, 0, 1, 2];
        assert!(parse_tlp_lenient(&c, &mut s).is_err());
        // An MWr with only its header is an error (no payload at all).
        let w = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x0f, 0, 0, 0x10, 0];
        assert!(parse_tlp_lenient(&w, &mut s).is_err());
    }

    #[test]
    fn only_the_libtlp_short_write_is_padded() {
        let mut s = Vec::new();
        // 3DW MWr, Length 0 (= 1024 DW), 4 payload bytes: Malformed, never padded.
        let mut w = vec![0x40, 0, 0, 0, 0x1b, 0, 0, 0xff, 0, 0, 0xa0, 0];
        w.extend_from_slice(&[0x41; 4]);
        assert!(matches!(
            parse_tlp_lenient(&w, &mut s),
            Err(Error::Truncated {
                needed: 4108,
                available: 16,
                ..
            })
        ));
        // Length 2 with 5 payload bytes: short, and not a single-DW write.
        let w2 = [
            0x40, 0, 0, 2, 0x1b, 0, 0, 0xff, 0, 0, 0xa0, 0, 1, 2, 3, 4, 5,
        ];
        assert!(parse_tlp_lenient(&w2, &mut s).is_err());
        // Length 1 with a digest declared (TD) and 3 bytes: not LibTLP's shape.
        let w3 = [0x40, 0, 0x80, 1, 0x1b, 0, 0, 0x06, 0, 0, 0xa0, 0, 1, 2, 3];
        assert!(parse_tlp_lenient(&w3, &mut s).is_err());
        // LibTLP always sends 3 bytes when First BE bit 3 is clear: 1 or 2 are not it.
        let w4 = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x06, 0, 0, 0xa0, 0, 1, 2];
        assert!(parse_tlp_lenient(&w4, &mut s).is_err());
        let w5 = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x04, 0, 0, 0xa0, 0, 1];
        assert!(parse_tlp_lenient(&w5, &mut s).is_err());
        // First BE bit 3 set (1000, 1100, 1110): LibTLP sends all 4 bytes.
        let w6 = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x08, 0, 0, 0xa0, 0, 0, 0, 0];
        assert!(parse_tlp_lenient(&w6, &mut s).is_err());
        // First BE 0 (a zero-length write) is never short either.
        let w7 = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x00, 0, 0, 0xa0, 0, 0, 0, 0];
        assert!(parse_tlp_lenient(&w7, &mut s).is_err());
        // LibTLP: 1 byte at 0xa002 (First BE 0100): 2 pad bytes + 1 data byte.
        let ok = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x04, 0, 0, 0xa0, 0, 0, 0, 0x77];
        let (t, f) = parse_tlp_lenient(&ok, &mut s).unwrap();
        assert_eq!((t.payload, f.padded), (&[0, 0, 0x77, 0][..], 1));
        // The same in a 4DW MWr.
        let ok4 = [
            0x60, 0, 0, 1, 0x1b, 0, 0, 0x04, 0, 0, 0, 1, 0, 0, 0xa0, 0, 0, 0, 0x77,
        ];
        assert_eq!(parse_tlp_lenient(&ok4, &mut s).unwrap().1.padded, 1);
        // A CplD is never padded, even with Length 1.
        let c = [0x4a, 0, 0, 1, 0, 0, 0, 4, 0x1b, 0, 0, 0, 1, 2, 3];
        assert!(parse_tlp_lenient(&c, &mut s).is_err());
        // Exact parsing: trailing bytes after an MWr are a mismatch too.
        let mut t4 = vec![0x40, 0, 0, 1, 0x1b, 0, 0, 0x0f, 0, 0, 0xa0, 0, 1, 2, 3, 4];
        assert!(parse_tlp_exact(&t4, &mut s).is_ok());
        t4.push(5);
        assert!(matches!(
            parse_tlp_exact(&t4, &mut s),
            Err(Error::Trailing {
                expected: 16,
                available: 17,
                ..
            })
        ));
        assert!(parse_tlp_exact(&ok, &mut s).is_ok());
    }

    /// Every short write LibTLP's `dma_write` makes inside one DW (offset 0-3, 1-3 bytes)
    /// is accepted: First DW BE as `tlp_calculate_fstdw` computes it, one pad byte per
    /// clear bit among BE bits 0-2, then the data, nothing after.
    #[test]
    fn every_libtlp_short_write_is_accepted() {
        let mut s = Vec::new();
        for off in 0..4u8 {
            for count in 1..4u8 {
                if off + count > 4 {
                    continue; // crosses into a second DW: Length 2, whole DWs
                }
                let be = (((1u8 << count) - 1) << off) & 0xf;
                let pads = (0..3).filter(|n| be & (1 << n) == 0).count();
                let mut t = vec![0x40, 0, 0, 1, 0x1b, 0, 0, be, 0, 0, 0x30, 0];
                t.extend(std::iter::repeat_n(0, pads));
                t.extend((0..count).map(|i| 0xa0 + i));
                let (tlp, fix) = parse_tlp_lenient(&t, &mut s)
                    .unwrap_or_else(|e| panic!("offset {off} count {count}: {e}"));
                assert_eq!(tlp.payload.len(), 4);
                assert_eq!(fix.padded, 4 - (pads + count as usize));
                assert!(parse_tlp_exact(&t, &mut s).is_ok());
            }
        }
    }

    #[test]
    fn msg_codes() {
        assert_eq!(
            MsgRequest::parse(&[1, 0, 0, 0]).unwrap(),
            MsgRequest::GetBar4Addr
        );
        assert_eq!(MsgRequest::parse(&[3, 0, 0, 0]).unwrap().code(), 3);
        assert!(MsgRequest::parse(&[4, 0, 0, 0]).is_err());
        assert!(MsgRequest::parse(&[1, 0, 0]).is_err());
        let mut t = [MsixEntry::default(); 16];
        t[1] = MsixEntry {
            addr: 0xfee0_1000,
            data: 0x4021,
        };
        let b = encode_msix_table(&t);
        assert_eq!(
            &b[12..24],
            &[0, 0x10, 0xe0, 0xfe, 0, 0, 0, 0, 0x21, 0x40, 0, 0]
        );
        assert_eq!(decode_msix_table(&b).unwrap(), t);
        assert!(decode_msix_table(&b[..100]).is_err());
    }

    #[test]
    fn cfg_packets() {
        // Write, mask 0x3, DW 0x301, data 0x11223344.
        let p = CfgPacket {
            write: true,
            byte_mask: 3,
            dw_addr: 0x301,
            data: 0x1122_3344,
        };
        assert_eq!(p.to_bytes(), [0x4f, 0x01, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(CfgPacket::parse(&p.to_bytes()).unwrap(), p);
        assert!(CfgPacket::parse(&[0xc0, 0, 0, 0, 0, 0]).is_err());
        assert!(CfgPacket::parse(&[0; 7]).is_err());
    }
}
