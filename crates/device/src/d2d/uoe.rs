//! The UDP/IP offload engine of the D2D receiver (seed 004, §III-C, Table II): header
//! templates that the driver programs per stream, the per-frame fields the engine
//! computes (Ethernet length, IP total length and header checksum, UDP length and
//! checksum, RTP sequence number and timestamp), and a parser of the frames it builds
//! (for tests and tools).
//!
//! Each 64-bit offload register holds header bytes in wire order: the register's
//! little-endian bytes are the header's bytes (register byte 0 goes first on the wire).
//!
//! ```text
//!   +0x00 MAC_DST    bytes 0..6: destination MAC
//!   +0x08 MAC_SRC    bytes 0..6: source MAC
//!   +0x10 VLAN       bytes 0..4: an 802.1Q tag (TPID 0x8100, TCI); byte 4 bit 0: insert it
//!   +0x18 IP_HDR1    IPv4 header bytes 0..8 (version/IHL, DSCP/ECN, total length*, ID, flags)
//!   +0x20 IP_HDR2    IPv4 header bytes 8..16 (TTL, protocol, checksum*, source address)
//!   +0x28 IP_HDR3    bytes 0..4: destination address (bytes 4..8 unused)
//!   +0x30 UDP_HDR    source port, destination port, length*, checksum*
//!   +0x38 RTP_HDR1   RTP bytes 0..8 (V/P/X/CC, M/PT, first sequence number, timestamp base)
//!   +0x40 RTP_HDR2   bytes 0..4: SSRC
//!   +0x48 UOE_CTRL   bits 15:0 payload bytes per frame (0: the most a 1500-byte IP
//!                    MTU holds); bit 16: RTP header on; bit 17: UDP checksum on
//!   (* computed per frame by the engine)
//! ```
//!
//! ```
//! use pcielab_device::d2d::uoe::{parse, Template};
//! let mut t = Template::udp([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [10, 0, 0, 1], [10, 0, 0, 2], 5000, 5004);
//! t.set_rtp(33, 0x1234_5678, 100);
//! let mut frame = Vec::new();
//! t.build(&[7u8; 1316], 0, 0, &mut frame).unwrap();
//! let p = parse(&frame).unwrap();
//! assert_eq!(p.payload.len(), 1316);
//! assert_eq!(p.rtp.unwrap().seq, 100);
//! assert_eq!(p.dst_port, 5004);
//! ```

/// Bytes of one stream's offload block.
pub const BLOCK: usize = 0x50;
/// UOE_CTRL bit: RTP header on.
pub const CTRL_RTP: u64 = 1 << 16;
/// UOE_CTRL bit: UDP checksum on.
pub const CTRL_UDP_CSUM: u64 = 1 << 17;
/// The IP MTU the engine frames for.
pub const IP_MTU: usize = 1500;
/// RTP timestamps count at 90 kHz (RFC 3551 for video, MP2T included).
pub const RTP_CLOCK_HZ: u64 = 90_000;

/// One stream's offload registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The block, as the registers hold it.
    pub bytes: [u8; BLOCK],
}

impl Default for Template {
    fn default() -> Template {
        Template { bytes: [0; BLOCK] }
    }
}

/// Why the offload registers cannot make a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTemplate(pub String);

/// Why a frame is not one the engine builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFrame {
    /// The layer at fault (`ethernet`, `ipv4`, `udp`, `rtp`).
    pub layer: &'static str,
    /// Byte offset in the frame.
    pub offset: usize,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for BadFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}: {}", self.layer, self.offset, self.what)
    }
}

/// The Internet checksum (RFC 1071) of the concatenation of `parts` (each but the
/// last of even length).
pub fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum = 0u64;
    for p in parts {
        let mut it = p.chunks_exact(2);
        for w in &mut it {
            sum += u16::from_be_bytes([w[0], w[1]]) as u64;
        }
        if let [b] = it.remainder() {
            sum += (*b as u64) << 8;
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

impl Template {
    /// A UDP template: Ethernet, IPv4 (DSCP 0, ID 0, DF, TTL 64), UDP with checksum,
    /// no RTP, the largest payload.
    pub fn udp(
        dst_mac: [u8; 6],
        src_mac: [u8; 6],
        src_ip: [u8; 4],
        dst_ip: [u8; 4],
        src_port: u16,
        dst_port: u16,
    ) -> Template {
        let mut t = Template::default();
        let b = &mut t.bytes;
        b[0..6].copy_from_slice(&dst_mac);
        b[8..14].copy_from_slice(&src_mac);
        b[0x18..0x20].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0]);
        b[0x20] = 64;
        b[0x21] = 17;
        b[0x24..0x28].copy_from_slice(&src_ip);
        b[0x28..0x2c].copy_from_slice(&dst_ip);
        b[0x30..0x32].copy_from_slice(&src_port.to_be_bytes());
        b[0x32..0x34].copy_from_slice(&dst_port.to_be_bytes());
        t.set_ctrl(CTRL_UDP_CSUM);
        t
    }

    /// Turns RTP on: payload type `pt`, SSRC `ssrc`, first sequence number `seq`.
    pub fn set_rtp(&mut self, pt: u8, ssrc: u32, seq: u16) {
        let b = &mut self.bytes;
        b[0x38] = 0x80;
        b[0x39] = pt & 0x7f;
        b[0x3a..0x3c].copy_from_slice(&seq.to_be_bytes());
        b[0x40..0x44].copy_from_slice(&ssrc.to_be_bytes());
        let c = self.ctrl() | CTRL_RTP;
        self.set_ctrl(c);
    }

    /// Sets the payload bytes per frame (0: the most the MTU holds).
    pub fn set_payload(&mut self, bytes: u16) {
        let c = (self.ctrl() & !0xffff) | bytes as u64;
        self.set_ctrl(c);
    }

    /// UOE_CTRL.
    pub fn ctrl(&self) -> u64 {
        u64::from_le_bytes(self.bytes[0x48..0x50].try_into().unwrap_or([0; 8]))
    }

    fn set_ctrl(&mut self, v: u64) {
        self.bytes[0x48..0x50].copy_from_slice(&v.to_le_bytes());
    }

    /// The register at `off` (8-aligned, below [`BLOCK`]).
    pub fn reg(&self, off: usize) -> u64 {
        self.bytes
            .get(off..off + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// The header bytes before the payload (Ethernet, optional 802.1Q, IPv4, UDP,
    /// optional RTP).
    pub fn header_len(&self) -> usize {
        let vlan = if self.bytes[0x14] & 1 != 0 { 4 } else { 0 };
        let rtp = if self.ctrl() & CTRL_RTP != 0 { 12 } else { 0 };
        14 + vlan + 20 + 8 + rtp
    }

    /// Payload bytes per frame, or why the registers cannot frame.
    pub fn payload_len(&self) -> Result<usize, BadTemplate> {
        let b = &self.bytes;
        if b[0x18] != 0x45 {
            return Err(BadTemplate(format!(
                "IP_HDR1 byte 0 is {:#04x}: only IPv4 with a 20-byte header (0x45) is offloaded",
                b[0x18]
            )));
        }
        if b[0x21] != 17 {
            return Err(BadTemplate(format!(
                "IP_HDR2 protocol is {}: only UDP (17) is offloaded",
                b[0x21]
            )));
        }
        if b[0x14] & 1 != 0 && b[0x10..0x12] != [0x81, 0x00] {
            return Err(BadTemplate(format!(
                "VLAN tag protocol ID {:#04x}{:02x}: an 802.1Q tag starts 0x8100",
                b[0x10], b[0x11]
            )));
        }
        let rtp = if self.ctrl() & CTRL_RTP != 0 { 12 } else { 0 };
        let most = IP_MTU - 28 - rtp;
        match (self.ctrl() & 0xffff) as usize {
            0 => Ok(most),
            n if n <= most => Ok(n),
            n => Err(BadTemplate(format!(
                "UOE_CTRL payload of {n} bytes: at most {most} fit a {IP_MTU}-byte IP MTU"
            ))),
        }
    }

    /// Builds the frame (FCS not included) carrying `payload` into `out`: frame number
    /// `n` of the stream (RTP sequence number: the first plus `n`), leaving the engine at
    /// `now_ns` (the RTP timestamp: its base plus 90 kHz ticks).
    pub fn build(
        &self,
        payload: &[u8],
        n: u64,
        now_ns: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), BadTemplate> {
        let most = self.payload_len()?;
        if payload.len() > most {
            return Err(BadTemplate(format!(
                "a payload of {} bytes: at most {most}",
                payload.len()
            )));
        }
        let b = &self.bytes;
        let rtp = self.ctrl() & CTRL_RTP != 0;
        out.clear();
        out.extend_from_slice(&b[0..6]);
        out.extend_from_slice(&b[8..14]);
        if b[0x14] & 1 != 0 {
            out.extend_from_slice(&b[0x10..0x14]);
        }
        out.extend_from_slice(&[0x08, 0x00]);
        let ip = out.len();
        let udp_len = 8 + if rtp { 12 } else { 0 } + payload.len();
        out.extend_from_slice(&b[0x18..0x20]);
        out.extend_from_slice(&b[0x20..0x28]);
        out.extend_from_slice(&b[0x28..0x2c]);
        out[ip + 2..ip + 4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
        out[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
        let c = checksum(&[&out[ip..ip + 20]]);
        out[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        let udp = out.len();
        out.extend_from_slice(&b[0x30..0x34]);
        out.extend_from_slice(&(udp_len as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        if rtp {
            let seq = u16::from_be_bytes([b[0x3a], b[0x3b]]).wrapping_add(n as u16);
            let base = u32::from_be_bytes([b[0x3c], b[0x3d], b[0x3e], b[0x3f]]);
            let ticks = (now_ns as u128 * RTP_CLOCK_HZ as u128 / 1_000_000_000) as u32;
            out.push(0x80); // version 2, no padding, extension or CSRC
            out.push(b[0x39]);
            out.extend_from_slice(&seq.to_be_bytes());
            out.extend_from_slice(&base.wrapping_add(ticks).to_be_bytes());
            out.extend_from_slice(&b[0x40..0x44]);
        }
        out.extend_from_slice(payload);
        if self.ctrl() & CTRL_UDP_CSUM != 0 {
            let c = udp_checksum(&out[ip + 12..ip + 20], &out[udp..]);
            out[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
        }
        Ok(())
    }
}

/// The UDP checksum over the IPv4 pseudo-header (`addrs`: source and destination,
/// 8 bytes) and the datagram (its checksum field zero); 0 is sent as 0xffff.
fn udp_checksum(addrs: &[u8], datagram: &[u8]) -> u16 {
    let len = (datagram.len() as u16).to_be_bytes();
    let pseudo = [0, 17, len[0], len[1]];
    match checksum(&[addrs, &pseudo, datagram]) {
        0 => 0xffff,
        c => c,
    }
}

/// An RTP header as parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtp {
    /// Payload type.
    pub pt: u8,
    /// Sequence number.
    pub seq: u16,
    /// Timestamp.
    pub timestamp: u32,
    /// SSRC.
    pub ssrc: u32,
}

/// A frame of the engine, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The 802.1Q tag's TCI, if there is one.
    pub vlan: Option<u16>,
    /// IPv4 source address.
    pub src_ip: [u8; 4],
    /// IPv4 destination address.
    pub dst_ip: [u8; 4],
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The RTP header, when `parse_rtp` found one (see [`parse_with`]).
    pub rtp: Option<Rtp>,
    /// The payload (after UDP, or after RTP).
    pub payload: &'a [u8],
}

/// Parses an Ethernet/IPv4/UDP frame (FCS not included), RTP after UDP when its first
/// byte says version 2: checks lengths, the IPv4 header checksum and a non-zero UDP
/// checksum.
pub fn parse(frame: &[u8]) -> Result<Frame<'_>, BadFrame> {
    parse_with(frame, true)
}

/// [`parse`], with RTP looked for (`rtp`) or not.
pub fn parse_with(frame: &[u8], rtp: bool) -> Result<Frame<'_>, BadFrame> {
    let bad = |layer, offset, what: String| BadFrame {
        layer,
        offset,
        what,
    };
    if frame.len() < 14 {
        return Err(bad(
            "ethernet",
            0,
            format!("{} bytes, less than a header", frame.len()),
        ));
    }
    let mut at = 12;
    let mut vlan = None;
    let mut et = u16::from_be_bytes([frame[12], frame[13]]);
    if et == 0x8100 {
        if frame.len() < 18 {
            return Err(bad("ethernet", 14, "an 802.1Q tag cut short".into()));
        }
        vlan = Some(u16::from_be_bytes([frame[14], frame[15]]));
        et = u16::from_be_bytes([frame[16], frame[17]]);
        at = 16;
    }
    if et != 0x0800 {
        return Err(bad(
            "ethernet",
            at,
            format!("EtherType {et:#06x}, not IPv4"),
        ));
    }
    let ip = at + 2;
    let h = frame
        .get(ip..ip + 20)
        .ok_or_else(|| bad("ipv4", ip, "header cut short".into()))?;
    if h[0] != 0x45 {
        return Err(bad(
            "ipv4",
            ip,
            format!("version/IHL {:#04x}, not 0x45", h[0]),
        ));
    }
    if checksum(&[h]) != 0 {
        return Err(bad("ipv4", ip + 10, "header checksum wrong".into()));
    }
    let total = u16::from_be_bytes([h[2], h[3]]) as usize;
    if total < 28 || ip + total > frame.len() {
        return Err(bad(
            "ipv4",
            ip + 2,
            format!(
                "total length {total} does not fit the frame's {} bytes",
                frame.len() - ip
            ),
        ));
    }
    if h[9] != 17 {
        return Err(bad("ipv4", ip + 9, format!("protocol {}, not UDP", h[9])));
    }
    let udp = ip + 20;
    let u = &frame[udp..ip + total];
    let ulen = u16::from_be_bytes([u[4], u[5]]) as usize;
    if ulen != u.len() {
        return Err(bad(
            "udp",
            udp + 4,
            format!("length {ulen}, the IP datagram holds {}", u.len()),
        ));
    }
    if u16::from_be_bytes([u[6], u[7]]) != 0 && checksum(&[&h[12..20], &[0, 17], &u[4..6], u]) != 0
    {
        return Err(bad("udp", udp + 6, "checksum wrong".into()));
    }
    let mut payload = &u[8..];
    let mut r = None;
    if rtp && payload.len() >= 12 && payload[0] >> 6 == 2 {
        let p = payload;
        let cc = (p[0] & 0x0f) as usize;
        if p.len() < 12 + 4 * cc {
            return Err(bad("rtp", udp + 8, "CSRC list cut short".into()));
        }
        r = Some(Rtp {
            pt: p[1] & 0x7f,
            seq: u16::from_be_bytes([p[2], p[3]]),
            timestamp: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
            ssrc: u32::from_be_bytes([p[8], p[9], p[10], p[11]]),
        });
        payload = &p[12 + 4 * cc..];
    }
    Ok(Frame {
        vlan,
        src_ip: h[12..16].try_into().unwrap_or_default(),
        dst_ip: h[16..20].try_into().unwrap_or_default(),
        src_port: u16::from_be_bytes([u[0], u[1]]),
        dst_port: u16::from_be_bytes([u[2], u[3]]),
        rtp: r,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Template {
        Template::udp(
            [1; 6],
            [2; 6],
            [192, 168, 0, 1],
            [192, 168, 0, 2],
            1234,
            5678,
        )
    }

    #[test]
    fn ipv4_checksum_by_hand() {
        // RFC 1071's worked example: words 0x0001 0xf203 0xf4f5 0xf6f7 sum to 0xddf2
        // (end-around carries folded), whose complement is 0x220d.
        assert_eq!(
            checksum(&[&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
            0x220d
        );
    }

    #[test]
    fn frame_lengths_and_fields() {
        let mut f = Vec::new();
        t().build(&[9; 100], 0, 0, &mut f).unwrap();
        assert_eq!(f.len(), 14 + 20 + 8 + 100);
        assert_eq!(&f[16..18], &128u16.to_be_bytes()); // IP total length
        assert_eq!(&f[38..40], &108u16.to_be_bytes()); // UDP length
        let p = parse_with(&f, false).unwrap();
        assert_eq!((p.src_port, p.dst_port, p.payload.len()), (1234, 5678, 100));
        // A flipped payload bit breaks the UDP checksum.
        f[50] ^= 1;
        assert_eq!(parse(&f).unwrap_err().layer, "udp");
    }

    #[test]
    fn rtp_sequence_and_timestamp() {
        let mut tp = t();
        tp.set_rtp(33, 7, 0xfffe);
        let mut f = Vec::new();
        tp.build(&[0; 10], 3, 1_000_000, &mut f).unwrap();
        let r = parse(&f).unwrap().rtp.unwrap();
        assert_eq!((r.pt, r.seq, r.ssrc), (33, 1, 7)); // 0xfffe + 3 wraps to 1
        assert_eq!(r.timestamp, 90); // 1 ms at 90 kHz
    }

    #[test]
    fn bad_templates_are_refused() {
        let mut tp = t();
        tp.bytes[0x21] = 6;
        assert!(tp.payload_len().unwrap_err().0.contains("UDP"));
        let mut tp = t();
        tp.set_payload(1473);
        assert!(tp.payload_len().is_err());
        tp.set_payload(1472);
        assert_eq!(tp.payload_len(), Ok(1472));
    }
}
