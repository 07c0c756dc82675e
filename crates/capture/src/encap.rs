//! The NetTLP encapsulation: Ethernet / IPv4 / UDP / 6-byte NetTLP header / TLP bytes.
//!
//! ```text
//!  0        14        34     42        48
//!  +--------+---------+------+---------+-----------------------------+
//!  | Eth II | IPv4    | UDP  | NetTLP  | TLP (prefixes, header, data, |
//!  | 0x0800 | proto17 |      | seq u16 |  ECRC) in PCIe byte order    |
//!  |        | IHL 5   |      | ts  u32 |  -- or a 6-byte DLLP         |
//!  +--------+---------+------+---------+-----------------------------+
//! ```
//!
//! Frames are built with the constants of the NetTLP adapter (source MAC
//! `00:11:22:33:44:55`, broadcast destination, `192.168.10.1 → 192.168.10.3`, IP ID 0, no
//! DF, TTL 64, a correct IPv4 header checksum and a zero UDP checksum) unless an interface
//! is given other [`Endpoints`].
//!
//! # UDP ports
//! TLPs follow NetTLP's current port scheme (source port = destination port):
//! * completions (`Cpl`, `CplD`, `CplLk`, `CplDLk`): [`CPL_PORT_BASE`] + the low 8 bits of the tag;
//! * every other TLP: [`REQ_PORT_BASE`] + the low 4 bits of the tag.
//!
//! DLLPs are carried on [`DLLP_PORT`] (0x5D11 = 23825, "DLL"), outside NetTLP's TLP range
//! 0x3000–0x4FFF, with the same 6-byte header followed by the 6 DLLP bytes (4 bytes of
//! content and the 16-bit CRC).
//!
//! When reading, a datagram is a TLP when either port is in 0x3000–0x4FFF (every NetTLP
//! scheme: the current one, v0.15–v0.21's `0x3000 + (tag & 0xF)` for both directions) or is
//! the v0.14 port [`OLD_PORT`] 0x3776, except LibTLP's 6-byte PCIe-configuration datagrams
//! on 0x4001 / 0x5001, which are told apart by length as LibTLP itself does.
//!
//! ```
//! use pcielab_capture::encap::{self, Endpoints, NetTlpHeader, Datagram};
//! // A 3 DW MRd, tag 5.
//! let tlp = [0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x05, 0x0f, 0x00, 0x00, 0x10, 0x00];
//! let port = encap::tlp_port(&tlp);
//! assert_eq!(port, 0x4005);
//! let mut frame = Vec::new();
//! let hdr = NetTlpHeader { seq: 1, tstamp: 2 };
//! encap::build_frame(&mut frame, &Endpoints::default(), port, port, &[&hdr.to_bytes(), &tlp]);
//! assert_eq!(frame.len(), 60);
//! let udp = encap::parse_frame(encap::LINKTYPE_ETHERNET, &frame).unwrap();
//! assert!(udp.ip_checksum_ok);
//! match encap::classify(&udp) {
//!     Datagram::Tlp { header, tlp: t } => { assert_eq!(header, hdr); assert_eq!(t, &tlp[..]); }
//!     other => panic!("{other:?}"),
//! }
//! ```

use core::fmt;

/// Ethernet II header length.
pub const ETH_HDR_LEN: usize = 14;
/// IPv4 header length (IHL 5, no options) as written.
pub const IPV4_HDR_LEN: usize = 20;
/// UDP header length.
pub const UDP_HDR_LEN: usize = 8;
/// NetTLP header length (sequence u16 + timestamp u32, big endian).
pub const NETTLP_HDR_LEN: usize = 6;
/// Bytes in front of the TLP: 14 + 20 + 8 + 6 = 48.
pub const HEADERS_LEN: usize = ETH_HDR_LEN + IPV4_HDR_LEN + UDP_HDR_LEN + NETTLP_HDR_LEN;

/// Completions travel on `CPL_PORT_BASE + (tag & 0xFF)` (NetTLP ≥ v0.22).
pub const CPL_PORT_BASE: u16 = 0x3000;
/// Requests (and every non-completion TLP) travel on `REQ_PORT_BASE + (tag & 0xF)`.
pub const REQ_PORT_BASE: u16 = 0x4000;
/// The single TLP port of NetTLP adapter v0.14 (14198).
pub const OLD_PORT: u16 = 0x3776;
/// Our port for DLLPs: 0x5D11 (23825).
pub const DLLP_PORT: u16 = 0x5D11;
/// LibTLP's PCIe configuration API port (also tag-1 request port; told apart by length).
pub const CFG_PORT_LIBTLP: u16 = 0x4001;
/// The adapter's (≥ v0.22) PCIe configuration API port.
pub const CFG_PORT: u16 = 0x5001;
/// The adapter command port (≥ v0.22; 0x4002 before).
pub const CMD_PORT: u16 = 0x5002;
/// The messaging API port of the adapter host's driver.
pub const MSG_API_PORT: u16 = 0x2FFF;
/// Length of a LibTLP configuration datagram.
pub const CFG_DATAGRAM_LEN: usize = 6;
/// DLLP bytes: 4 bytes of content + 16-bit CRC.
pub const DLLP_LEN: usize = 6;
/// The adapter's tick: the NetTLP timestamp counts 6.4 ns (156.25 MHz) ticks.
pub const NETTLP_TICK_PS: u64 = 6400;

/// pcap link type: Ethernet.
pub const LINKTYPE_ETHERNET: u16 = 1;
/// pcap link type: BSD loopback (4-byte address family in host order).
pub const LINKTYPE_NULL: u16 = 0;
/// pcap link type: raw IP (101 in files).
pub const LINKTYPE_RAW: u16 = 101;
/// pcap link type: raw IPv4 (228).
pub const LINKTYPE_IPV4: u16 = 228;
/// pcap link type: Linux cooked capture v1 (`tcpdump -i any`).
pub const LINKTYPE_LINUX_SLL: u16 = 113;
/// pcap link type: Linux cooked capture v2.
pub const LINKTYPE_LINUX_SLL2: u16 = 276;

/// Is `port` one of NetTLP's TLP ports (any scheme)?
pub fn is_tlp_port(port: u16) -> bool {
    (0x3000..=0x4FFF).contains(&port) || port == OLD_PORT
}

/// The 6-byte NetTLP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct NetTlpHeader {
    /// Frame sequence number (16 bits, wraps).
    pub seq: u16,
    /// Timestamp in 6.4 ns ticks (32 bits, wraps); LibTLP writes 0.
    pub tstamp: u32,
}

impl NetTlpHeader {
    /// The header for the `seq`-th frame at `time_ps`: `tstamp` counts [`NETTLP_TICK_PS`] ticks.
    pub fn at(seq: u16, time_ps: u64) -> NetTlpHeader {
        NetTlpHeader {
            seq,
            tstamp: (time_ps / NETTLP_TICK_PS) as u32,
        }
    }

    /// Big-endian bytes.
    pub fn to_bytes(self) -> [u8; NETTLP_HDR_LEN] {
        let s = self.seq.to_be_bytes();
        let t = self.tstamp.to_be_bytes();
        [s[0], s[1], t[0], t[1], t[2], t[3]]
    }

    /// Reads the header from the first 6 bytes; `None` when shorter.
    pub fn from_bytes(b: &[u8]) -> Option<NetTlpHeader> {
        if b.len() < NETTLP_HDR_LEN {
            return None;
        }
        Some(NetTlpHeader {
            seq: u16::from_be_bytes([b[0], b[1]]),
            tstamp: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
        })
    }
}

/// The Ethernet and IPv4 addresses of an interface's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoints {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
}

impl Default for Endpoints {
    /// The NetTLP adapter's reset values: `00:11:22:33:44:55 → ff:ff:ff:ff:ff:ff`,
    /// `192.168.10.1 → 192.168.10.3`.
    fn default() -> Endpoints {
        Endpoints {
            src_mac: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
            dst_mac: [0xff; 6],
            src_ip: [192, 168, 10, 1],
            dst_ip: [192, 168, 10, 3],
        }
    }
}

/// The UDP port of a TLP under NetTLP's current scheme (see the module docs).
///
/// Works on raw bytes (TLP prefixes are skipped); bytes too short to hold a tag give the
/// request port of tag 0.
pub fn tlp_port(tlp: &[u8]) -> u16 {
    let mut off = 0;
    // Skip TLP prefixes (Fmt = 0b100).
    while off < tlp.len() && tlp[off] >> 5 == 0b100 {
        off += 4;
    }
    let Some(&fmt_type) = tlp.get(off) else {
        return REQ_PORT_BASE;
    };
    let is_cpl = fmt_type & 0x1e == 0x0a; // Type 0b0101x: Cpl/CplD (x=0), CplLk/CplDLk (x=1)
    if is_cpl {
        match tlp.get(off + 10) {
            Some(&tag) => CPL_PORT_BASE + tag as u16,
            None => CPL_PORT_BASE,
        }
    } else {
        match tlp.get(off + 6) {
            Some(&tag) => REQ_PORT_BASE + (tag & 0xf) as u16,
            None => REQ_PORT_BASE,
        }
    }
}

/// The Internet checksum (RFC 1071) of `data`: the one's complement of the one's-complement
/// sum of its 16-bit big-endian words. Over an IPv4 header with its checksum field filled
/// in, a correct header gives 0.
pub fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Clears `buf` and writes an Ethernet/IPv4/UDP frame whose UDP payload is the
/// concatenation of `payload_parts`. Payloads longer than the 65,507 bytes a UDP datagram
/// can hold get length fields saturated at 0xFFFF (the writer refuses them before this).
pub fn build_frame(
    buf: &mut Vec<u8>,
    ep: &Endpoints,
    src_port: u16,
    dst_port: u16,
    payload_parts: &[&[u8]],
) {
    let payload_len: usize = payload_parts.iter().map(|p| p.len()).sum();
    buf.clear();
    buf.reserve(ETH_HDR_LEN + IPV4_HDR_LEN + UDP_HDR_LEN + payload_len);
    buf.extend_from_slice(&ep.dst_mac);
    buf.extend_from_slice(&ep.src_mac);
    buf.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = u16::try_from(IPV4_HDR_LEN + UDP_HDR_LEN + payload_len).unwrap_or(0xffff);
    let udp_len = u16::try_from(UDP_HDR_LEN + payload_len).unwrap_or(0xffff);
    let ip_start = buf.len();
    buf.extend_from_slice(&[0x45, 0x00]);
    buf.extend_from_slice(&ip_len.to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0, 0, 64, 17, 0, 0]); // ID 0, no flags, TTL 64, UDP, csum
    buf.extend_from_slice(&ep.src_ip);
    buf.extend_from_slice(&ep.dst_ip);
    let csum = internet_checksum(&buf[ip_start..ip_start + IPV4_HDR_LEN]);
    buf[ip_start + 10..ip_start + 12].copy_from_slice(&csum.to_be_bytes());
    buf.extend_from_slice(&src_port.to_be_bytes());
    buf.extend_from_slice(&dst_port.to_be_bytes());
    buf.extend_from_slice(&udp_len.to_be_bytes());
    buf.extend_from_slice(&[0, 0]); // no UDP checksum, as the adapter
    for p in payload_parts {
        buf.extend_from_slice(p);
    }
}

/// Why a frame is not an IPv4/UDP datagram we can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncapError {
    /// The frame ends before the named header does.
    Truncated {
        /// The header being read ("Ethernet", "IPv4", "UDP", …).
        layer: &'static str,
        /// Bytes needed from the start of the frame.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// A field holds a value that is not IPv4/UDP.
    NotUdp {
        /// The field ("EtherType", "IP version", "IP protocol", …).
        field: &'static str,
        /// Its value.
        value: u32,
    },
    /// The capture's link type is not one we decode.
    LinkType(u16),
}

impl fmt::Display for EncapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncapError::Truncated {
                layer,
                needed,
                available,
            } => write!(
                f,
                "{layer} header truncated: needs {needed} bytes, frame has {available}"
            ),
            EncapError::NotUdp { field, value } => {
                write!(f, "not IPv4/UDP: {field} is {value:#x}")
            }
            EncapError::LinkType(l) => write!(f, "unsupported link type {l}"),
        }
    }
}

impl std::error::Error for EncapError {}

/// A parsed IPv4/UDP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFrame<'a> {
    /// Source MAC (zero for link types without one).
    pub src_mac: [u8; 6],
    /// Destination MAC (zero for link types without one).
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The UDP payload (per the UDP length field; Ethernet padding removed).
    pub payload: &'a [u8],
    /// Whether the IPv4 header checksum is correct.
    pub ip_checksum_ok: bool,
    /// Whether the frame held fewer bytes than the UDP length says (snap length).
    pub truncated: bool,
    /// The UDP payload length the UDP header gives (the length as sent).
    pub reported_len: usize,
}

fn need(layer: &'static str, needed: usize, data: &[u8]) -> Result<(), EncapError> {
    if data.len() < needed {
        Err(EncapError::Truncated {
            layer,
            needed,
            available: data.len(),
        })
    } else {
        Ok(())
    }
}

/// Parses a frame of the given pcap link type down to its UDP payload.
///
/// Link types: Ethernet (with any number of 802.1Q/802.1ad tags), BSD loopback, raw IP,
/// Linux cooked v1 and v2. IPv4 options are skipped; fragments other than the first are
/// refused (`NotUdp` on "IP fragment offset").
pub fn parse_frame(linktype: u16, data: &[u8]) -> Result<UdpFrame<'_>, EncapError> {
    let mut src_mac = [0; 6];
    let mut dst_mac = [0; 6];
    let ip_off = match linktype {
        LINKTYPE_ETHERNET => {
            need("Ethernet", ETH_HDR_LEN, data)?;
            dst_mac.copy_from_slice(&data[0..6]);
            src_mac.copy_from_slice(&data[6..12]);
            let mut off = 12;
            let mut ethertype = u16::from_be_bytes([data[12], data[13]]);
            while ethertype == 0x8100 || ethertype == 0x88a8 {
                need("802.1Q", off + 6, data)?;
                off += 4;
                ethertype = u16::from_be_bytes([data[off], data[off + 1]]);
            }
            if ethertype != 0x0800 {
                return Err(EncapError::NotUdp {
                    field: "EtherType",
                    value: ethertype as u32,
                });
            }
            off + 2
        }
        LINKTYPE_NULL => {
            need("loopback", 4, data)?;
            let le = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            let be = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
            if le != 2 && be != 2 {
                return Err(EncapError::NotUdp {
                    field: "address family",
                    value: le,
                });
            }
            4
        }
        LINKTYPE_RAW | LINKTYPE_IPV4 => 0,
        LINKTYPE_LINUX_SLL => {
            need("Linux cooked", 16, data)?;
            let proto = u16::from_be_bytes([data[14], data[15]]);
            if proto != 0x0800 {
                return Err(EncapError::NotUdp {
                    field: "protocol",
                    value: proto as u32,
                });
            }
            16
        }
        LINKTYPE_LINUX_SLL2 => {
            need("Linux cooked v2", 20, data)?;
            let proto = u16::from_be_bytes([data[0], data[1]]);
            if proto != 0x0800 {
                return Err(EncapError::NotUdp {
                    field: "protocol",
                    value: proto as u32,
                });
            }
            20
        }
        other => return Err(EncapError::LinkType(other)),
    };
    need("IPv4", ip_off + IPV4_HDR_LEN, data)?;
    let ip = &data[ip_off..];
    if ip[0] >> 4 != 4 {
        return Err(EncapError::NotUdp {
            field: "IP version",
            value: (ip[0] >> 4) as u32,
        });
    }
    let ihl = ((ip[0] & 0xf) as usize) * 4;
    if ihl < IPV4_HDR_LEN {
        return Err(EncapError::NotUdp {
            field: "IPv4 IHL",
            value: (ip[0] & 0xf) as u32,
        });
    }
    need("IPv4 options", ip_off + ihl, data)?;
    if ip[9] != 17 {
        return Err(EncapError::NotUdp {
            field: "IP protocol",
            value: ip[9] as u32,
        });
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    if frag != 0 {
        return Err(EncapError::NotUdp {
            field: "IP fragment offset",
            value: frag as u32,
        });
    }
    let ip_checksum_ok = internet_checksum(&ip[..ihl]) == 0;
    let mut src_ip = [0; 4];
    let mut dst_ip = [0; 4];
    src_ip.copy_from_slice(&ip[12..16]);
    dst_ip.copy_from_slice(&ip[16..20]);
    let udp_off = ip_off + ihl;
    need("UDP", udp_off + UDP_HDR_LEN, data)?;
    let udp = &data[udp_off..];
    let src_port = u16::from_be_bytes([udp[0], udp[1]]);
    let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    if udp_len < UDP_HDR_LEN {
        return Err(EncapError::NotUdp {
            field: "UDP length",
            value: udp_len as u32,
        });
    }
    let avail = udp.len() - UDP_HDR_LEN;
    let want = udp_len - UDP_HDR_LEN;
    let (payload, truncated) = if want <= avail {
        (&udp[UDP_HDR_LEN..UDP_HDR_LEN + want], false)
    } else {
        (&udp[UDP_HDR_LEN..], true)
    };
    Ok(UdpFrame {
        src_mac,
        dst_mac,
        src_ip,
        dst_ip,
        src_port,
        dst_port,
        payload,
        ip_checksum_ok,
        truncated,
        reported_len: want,
    })
}

/// What a UDP datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// A TLP (bytes not yet decoded) after a NetTLP header.
    Tlp {
        /// The NetTLP header.
        header: NetTlpHeader,
        /// The TLP bytes.
        tlp: &'a [u8],
    },
    /// A DLLP on [`DLLP_PORT`].
    Dllp {
        /// The NetTLP header.
        header: NetTlpHeader,
        /// The DLLP bytes (6 unless the datagram is malformed).
        dllp: &'a [u8],
    },
    /// A LibTLP / adapter PCIe configuration datagram (6 bytes).
    Config(&'a [u8]),
    /// Not NetTLP traffic, or a NetTLP port with fewer than 6 bytes.
    Other,
}

/// Classifies a UDP datagram by its ports and length (see the module docs).
pub fn classify<'a>(udp: &UdpFrame<'a>) -> Datagram<'a> {
    let p = udp.payload;
    let on = |port: u16| udp.src_port == port || udp.dst_port == port;
    if on(DLLP_PORT) {
        return match NetTlpHeader::from_bytes(p) {
            Some(header) => Datagram::Dllp {
                header,
                dllp: &p[NETTLP_HDR_LEN..],
            },
            None => Datagram::Other,
        };
    }
    if (on(CFG_PORT_LIBTLP) || on(CFG_PORT)) && p.len() == CFG_DATAGRAM_LEN {
        return Datagram::Config(p);
    }
    if is_tlp_port(udp.src_port) || is_tlp_port(udp.dst_port) {
        return match NetTlpHeader::from_bytes(p) {
            Some(header) => Datagram::Tlp {
                header,
                tlp: &p[NETTLP_HDR_LEN..],
            },
            None => Datagram::Other,
        };
    }
    Datagram::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_rfc1071_example() {
        // RFC 1071 section 3: words 0001 f203 f4f5 f6f7 sum to ddf2 (one's complement sum),
        // so the checksum is !0xddf2 = 0x220d.
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
    }

    #[test]
    fn ipv4_header_matches_hand_computed_checksum() {
        // 3 DW MRd: UDP payload 6 + 12 = 18, UDP length 26, IP total length 46 = 0x2e.
        // Header words: 4500 002e 0000 0000 4011 0000 c0a8 0a01 c0a8 0a03
        // sum = 0x2_1a93 -> folded 0x1a95, checksum !0x1a95 = 0xe56a.
        let mut buf = Vec::new();
        build_frame(
            &mut buf,
            &Endpoints::default(),
            0x4000,
            0x4000,
            &[&[0; 6], &[0; 12]],
        );
        assert_eq!(buf.len(), 60);
        assert_eq!(&buf[16..18], &[0x00, 0x2e]);
        assert_eq!(&buf[24..26], &[0xe5, 0x6a]);
        assert_eq!(&buf[38..40], &[0x00, 26]);
        assert_eq!(&buf[40..42], &[0, 0]);
    }

    #[test]
    fn ports_follow_nettlp_scheme() {
        // MWr 3DW tag 0x23 -> request port 0x4003.
        let mwr = [
            0x40, 0, 0, 1, 0x01, 0x00, 0x23, 0x0f, 0, 0, 0x10, 0, 1, 2, 3, 4,
        ];
        assert_eq!(tlp_port(&mwr), 0x4003);
        // CplD tag 0xa7 -> 0x30a7.
        let cpld = [0x4a, 0, 0, 1, 0, 0, 0, 4, 0x01, 0x00, 0xa7, 0, 1, 2, 3, 4];
        assert_eq!(tlp_port(&cpld), 0x30a7);
        // CplLk (type 0b01011).
        let cpllk = [0x0b, 0, 0, 0, 0, 0, 0, 4, 0x01, 0x00, 0x11, 0];
        assert_eq!(tlp_port(&cpllk), 0x3011);
        // A prefixed MRd: prefix DW 0x91..., tag at byte 4+6.
        let pre = [0x91, 0, 0, 0, 0x00, 0, 0, 1, 0, 0, 0x0e, 0xff, 0, 0, 0, 0];
        assert_eq!(tlp_port(&pre), 0x400e);
        assert_eq!(tlp_port(&[]), 0x4000);
    }

    #[test]
    fn classify_config_by_length_on_4001() {
        let mut buf = Vec::new();
        build_frame(&mut buf, &Endpoints::default(), 0x4001, 0x4001, &[&[0; 6]]);
        let f = parse_frame(LINKTYPE_ETHERNET, &buf).unwrap();
        assert!(matches!(classify(&f), Datagram::Config(_)));
        build_frame(&mut buf, &Endpoints::default(), 0x4001, 0x4001, &[&[0; 18]]);
        let f = parse_frame(LINKTYPE_ETHERNET, &buf).unwrap();
        assert!(matches!(classify(&f), Datagram::Tlp { .. }));
    }

    #[test]
    fn padding_vlan_and_cooked_captures() {
        let mut eth = Vec::new();
        build_frame(
            &mut eth,
            &Endpoints::default(),
            DLLP_PORT,
            DLLP_PORT,
            &[&[0; 12]],
        );
        assert_eq!(eth.len(), 54);
        // Ethernet padding to 60 bytes is not part of the datagram.
        let mut padded = eth.clone();
        padded.resize(60, 0xee);
        let f = parse_frame(LINKTYPE_ETHERNET, &padded).unwrap();
        assert_eq!(f.payload, &[0u8; 12][..]);
        // An 802.1Q tag between the MACs and the EtherType.
        let mut vlan = eth[..12].to_vec();
        vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        vlan.extend_from_slice(&eth[12..]);
        let f = parse_frame(LINKTYPE_ETHERNET, &vlan).unwrap();
        assert_eq!((f.src_port, f.payload.len()), (DLLP_PORT, 12));
        // Linux cooked v1 (`tcpdump -i any`): 16-byte header, protocol at bytes 14..16.
        let mut sll = vec![
            0, 0, 0, 1, 0, 6, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0x08, 0x00,
        ];
        sll.extend_from_slice(&eth[14..]);
        let f = parse_frame(LINKTYPE_LINUX_SLL, &sll).unwrap();
        assert_eq!(f.src_ip, [192, 168, 10, 1]);
        assert!(f.ip_checksum_ok);
        // Raw IPv4.
        let f = parse_frame(LINKTYPE_RAW, &eth[14..]).unwrap();
        assert_eq!(f.dst_ip, [192, 168, 10, 3]);
        // A corrupted IPv4 header checksum is reported, not fatal.
        let mut bad = eth.clone();
        bad[24] ^= 0xff;
        assert!(!parse_frame(LINKTYPE_ETHERNET, &bad).unwrap().ip_checksum_ok);
        assert!(matches!(
            parse_frame(42, &eth),
            Err(EncapError::LinkType(42))
        ));
    }

    #[test]
    fn truncated_frames_are_errors_not_panics() {
        let mut buf = Vec::new();
        build_frame(&mut buf, &Endpoints::default(), 0x4000, 0x4000, &[&[0; 18]]);
        for n in 0..42 {
            assert!(parse_frame(LINKTYPE_ETHERNET, &buf[..n]).is_err(), "{n}");
        }
        let f = parse_frame(LINKTYPE_ETHERNET, &buf[..50]).unwrap();
        assert!(f.truncated);
        assert_eq!(f.payload.len(), 8);
    }
}
