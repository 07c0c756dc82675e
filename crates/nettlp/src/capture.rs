//! Packet capture of NetTLP datagrams, behind the small [`Capture`] trait so a richer
//! writer (pcapng, several interfaces) can replace [`PcapFile`] without touching callers.
//!
//! [`PcapFile`] writes classic pcap (link type Ethernet) with the adapter's framing:
//! Ethernet (dst `ff:ff:ff:ff:ff:ff`, src `00:11:22:33:44:55` from the adapter; swapped
//! for frames the device side sends), IPv4 (ID 0, no DF, TTL 64, checksum computed),
//! UDP (checksum 0), then the datagram as sent.
//!
//! ```
//! use pcielab_nettlp::capture::{ipv4_udp_frame, Capture};
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! let f = ipv4_udp_frame(
//!     SocketAddrV4::new(Ipv4Addr::new(192, 168, 10, 1), 0x3000),
//!     SocketAddrV4::new(Ipv4Addr::new(192, 168, 10, 3), 0x3000),
//!     &[0u8; 18],
//!     true,
//! );
//! assert_eq!(f.len(), 14 + 20 + 8 + 18); // the 60-byte minimum frame of a 12-byte TLP
//! assert_eq!(&f[12..14], &[0x08, 0x00]);
//! ```

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Something that records datagrams as they are sent or received.
pub trait Capture: Send + Sync + std::fmt::Debug {
    /// Records one UDP datagram from `src` to `dst`. `from_adapter` picks the MAC order.
    fn datagram(&self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], from_adapter: bool);
}

const ADAPTER_MAC: [u8; 6] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55];
const BROADCAST: [u8; 6] = [0xff; 6];

/// Builds the Ethernet/IPv4/UDP frame around `payload` as the adapter does.
pub fn ipv4_udp_frame(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: &[u8],
    from_adapter: bool,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    let (dmac, smac) = if from_adapter {
        (BROADCAST, ADAPTER_MAC)
    } else {
        (ADAPTER_MAC, BROADCAST)
    };
    f.extend_from_slice(&dmac);
    f.extend_from_slice(&smac);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload.len()).min(0xffff) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.ip().octets());
    ip[16..20].copy_from_slice(&dst.ip().octets());
    let mut sum: u32 = 0;
    for w in ip.chunks(2) {
        sum += u16::from_be_bytes([w[0], w[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src.port().to_be_bytes());
    f.extend_from_slice(&dst.port().to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()).min(0xffff) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A classic pcap file (microsecond timestamps, link type 1).
#[derive(Debug)]
pub struct PcapFile {
    out: Mutex<BufWriter<File>>,
}

impl PcapFile {
    /// Creates `path` and writes the global header.
    pub fn create(path: &Path) -> io::Result<PcapFile> {
        let mut w = BufWriter::new(File::create(path)?);
        w.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        w.write_all(&2u16.to_le_bytes())?;
        w.write_all(&4u16.to_le_bytes())?;
        w.write_all(&0i32.to_le_bytes())?;
        w.write_all(&0u32.to_le_bytes())?;
        w.write_all(&65535u32.to_le_bytes())?;
        w.write_all(&1u32.to_le_bytes())?;
        Ok(PcapFile { out: Mutex::new(w) })
    }

    /// Flushes buffered records.
    pub fn flush(&self) -> io::Result<()> {
        match self.out.lock() {
            Ok(mut w) => w.flush(),
            Err(p) => p.into_inner().flush(),
        }
    }
}

impl Capture for PcapFile {
    fn datagram(&self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], from_adapter: bool) {
        let frame = ipv4_udp_frame(src, dst, payload, from_adapter);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut w = match self.out.lock() {
            Ok(w) => w,
            Err(p) => p.into_inner(),
        };
        let n = frame.len() as u32;
        let _ = w.write_all(&(now.as_secs() as u32).to_le_bytes());
        let _ = w.write_all(&now.subsec_micros().to_le_bytes());
        let _ = w.write_all(&n.to_le_bytes());
        let _ = w.write_all(&n.to_le_bytes());
        let _ = w.write_all(&frame);
    }
}

impl Drop for PcapFile {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn ip_checksum_by_hand() {
        // 192.168.10.1 -> 192.168.10.3, total length 20+8+18 = 46 (0x2e).
        // Sum of 16-bit words: 4500 + 002e + 0000 + 0000 + 4011 + c0a8 + 0a01 + c0a8 + 0a03
        // = 0x21a93 → 0x1a95 → checksum !0x1a95 = 0xe56a.
        let f = ipv4_udp_frame(
            SocketAddrV4::new(Ipv4Addr::new(192, 168, 10, 1), 0x3000),
            SocketAddrV4::new(Ipv4Addr::new(192, 168, 10, 3), 0x3001),
            &[0u8; 18],
            true,
        );
        assert_eq!(&f[24..26], &[0xe5, 0x6a]);
        assert_eq!(&f[0..6], &[0xff; 6]);
        assert_eq!(&f[34..42], &[0x30, 0x00, 0x30, 0x01, 0x00, 0x1a, 0, 0]);
    }

    #[test]
    fn pcap_file_layout() {
        let dir = std::env::temp_dir().join(format!("pcielab-cap-{}", std::process::id()));
        let p = PcapFile::create(&dir).unwrap();
        let a = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1);
        p.datagram(a, a, &[1, 2, 3], false);
        p.flush().unwrap();
        let b = std::fs::read(&dir).unwrap();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(&b[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(b.len(), 24 + 16 + 45);
        assert_eq!(&b[24 + 8..24 + 12], &45u32.to_le_bytes());
    }
}
