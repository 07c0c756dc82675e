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
        0x5002 => PortClass::Command,
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
    /// Missing payload bytes of an MWr, filled with zeros (LibTLP's single-DW write bug).
    pub padded: usize,
}

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

/// Normalises received TLP bytes: drops trailing bytes and zero-pads a short MWr payload
/// (into `scratch`), then parses. Any other shortfall is an error.
///
/// ```
/// use pcielab_nettlp::frame::parse_tlp_lenient;
/// // LibTLP's 2-byte write at 0x3001: 1 DW declared, 3 payload bytes sent.
/// let bytes = [0x40, 0, 0, 1, 0x1b, 0, 0, 0x06, 0, 0, 0x30, 0, 0, 0xaa, 0xbb];
/// let mut scratch = Vec::new();
/// let (tlp, fix) = parse_tlp_lenient(&bytes, &mut scratch)?;
/// assert_eq!(tlp.payload, &[0, 0xaa, 0xbb, 0]);
/// assert_eq!(fix.padded, 1);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
pub fn parse_tlp_lenient<'a>(
    bytes: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> Result<(TlpRepr<'a>, Leniency)> {
    let want = tlp_len_from_header(bytes)?;
    let hl = if bytes[0] & 0x20 != 0 { 16 } else { 12 };
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
    let is_mwr = bytes[0] & 0xdf == 0x40;
    if !is_mwr || bytes.len() <= hl {
        return Err(Error::Truncated {
            what: "TLP (Length field)",
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
