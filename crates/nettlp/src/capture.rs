//! Packet capture of NetTLP datagrams, behind the small [`Capture`] trait.
//!
//! [`CaptureFile`] records with `pcielab-capture`'s writer: every datagram becomes an
//! Ethernet/IPv4/UDP frame (IPv4 ID 0, TTL 64, checksum computed; UDP checksum 0, as the
//! adapter sends them) with the real loopback addresses and ports. A `.pcapng` file has two
//! interfaces, `adapter->device` and `device->adapter`; any other name gets classic pcap
//! (nanosecond timestamps). Timestamps count from the moment the file was created, or,
//! with [`CaptureFile::create_wallclock`], are wall-clock times (Unix epoch; pcapng
//! `if_tsoffset` holds the whole seconds of the start). Records are flushed at least
//! once a second while datagrams flow ([`FLUSH_EVERY_NS`]), on [`CaptureFile::flush`]
//! and when the file is dropped.
//!
//! ```
//! use pcielab_nettlp::capture::{Capture, CaptureFile};
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! let path = std::env::temp_dir().join(format!("doc-{}.pcapng", std::process::id()));
//! let cap = CaptureFile::create(&path)?;
//! let a = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0x3000);
//! let d = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), 0x3000);
//! cap.datagram(d, a, &[0u8; 18], false);
//! cap.flush()?;
//! let bytes = std::fs::read(&path)?;
//! assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a]); // pcapng section header
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use pcielab_capture::encap::Endpoints;
use pcielab_capture::writer::{IfId, UdpMeta};
use pcielab_capture::{CaptureWriter, Format};
use std::fs::File;
use std::io::{self, BufWriter};
use std::net::SocketAddrV4;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Something that records datagrams as they are sent or received.
pub trait Capture: Send + Sync + std::fmt::Debug {
    /// Records one UDP datagram from `src` to `dst`; `from_adapter` tells the direction.
    fn datagram(&self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], from_adapter: bool);
}

/// Records are flushed to the file at least this often while datagrams flow (in ns);
/// commands also flush on their own timer and on SIGINT/SIGTERM.
pub const FLUSH_EVERY_NS: u64 = 1_000_000_000;

const ADAPTER_MAC: [u8; 6] = [0x00, 0x11, 0x22, 0x33, 0x44, 0x55];
const BROADCAST: [u8; 6] = [0xff; 6];

#[derive(Debug)]
struct Inner {
    w: CaptureWriter<BufWriter<File>>,
    to_device: IfId,
    to_adapter: IfId,
    errors: u64,
    /// When the records were last flushed, in ns since `start`.
    flushed_ns: u64,
}

/// A capture file written with `pcielab-capture` (pcapng or pcap by extension).
#[derive(Debug)]
pub struct CaptureFile {
    inner: Mutex<Inner>,
    start: Instant,
    /// Picoseconds added to the time since `start` (the sub-second part of the
    /// wall-clock start; the seconds are the writer's epoch).
    base_ps: u64,
}

impl CaptureFile {
    /// Creates `path`: pcapng when it ends in `.pcapng`, classic pcap otherwise.
    pub fn create(path: &Path) -> io::Result<CaptureFile> {
        CaptureFile::create_with(path, false)
    }

    /// Like [`CaptureFile::create`], with wall-clock timestamps (seconds since the Unix
    /// epoch, as tcpdump writes them).
    pub fn create_wallclock(path: &Path) -> io::Result<CaptureFile> {
        CaptureFile::create_with(path, true)
    }

    fn create_with(path: &Path, wallclock: bool) -> io::Result<CaptureFile> {
        let format = if path.extension().is_some_and(|e| e == "pcapng") {
            Format::Pcapng
        } else {
            Format::Pcap
        };
        let err = |e: pcielab_capture::writer::WriteError| io::Error::other(e.to_string());
        let mut w =
            CaptureWriter::create(path, format, "NetTLP over UDP (pcielab)").map_err(err)?;
        let start = Instant::now();
        let mut base_ps = 0;
        if wallclock {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_err(|e| io::Error::other(format!("system clock before 1970: {e}")))?;
            w.set_epoch_secs(now.as_secs());
            base_ps = now.subsec_nanos() as u64 * 1000;
        }
        let to_device = w.add_interface("adapter->device").map_err(err)?;
        let to_adapter = w.add_interface("device->adapter").map_err(err)?;
        Ok(CaptureFile {
            inner: Mutex::new(Inner {
                w,
                to_device,
                to_adapter,
                errors: 0,
                flushed_ns: 0,
            }),
            start,
            base_ps,
        })
    }

    /// Flushes buffered records.
    pub fn flush(&self) -> io::Result<()> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.w.flush().map_err(|e| io::Error::other(e.to_string()))
    }

    /// Records that could not be written (e.g. disk full); capture never stops traffic.
    pub fn errors(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).errors
    }
}

impl Capture for CaptureFile {
    fn datagram(&self, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8], from_adapter: bool) {
        let (src_mac, dst_mac) = if from_adapter {
            (ADAPTER_MAC, BROADCAST)
        } else {
            (BROADCAST, ADAPTER_MAC)
        };
        let meta = UdpMeta {
            endpoints: Endpoints {
                src_mac,
                dst_mac,
                src_ip: src.ip().octets(),
                dst_ip: dst.ip().octets(),
            },
            src_port: src.port(),
            dst_port: dst.port(),
        };
        let t_ns = self.start.elapsed().as_nanos() as u64;
        let t_ps = t_ns.saturating_mul(1000).saturating_add(self.base_ps);
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let id = if from_adapter {
            g.to_device
        } else {
            g.to_adapter
        };
        if g.w.write_udp_payload(id, t_ps, &meta, payload).is_err() {
            g.errors += 1;
        }
        // At most FLUSH_EVERY_NS of records sit in the buffer (a killed process loses
        // no more than that).
        if t_ns.saturating_sub(g.flushed_ns) >= FLUSH_EVERY_NS {
            g.flushed_ns = t_ns;
            if g.w.flush().is_err() {
                g.errors += 1;
            }
        }
    }
}

impl Drop for CaptureFile {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn classic_pcap_layout() {
        let path = std::env::temp_dir().join(format!("pcielab-cap-{}.pcap", std::process::id()));
        let p = CaptureFile::create(&path).unwrap();
        let a = SocketAddrV4::new(Ipv4Addr::new(192, 168, 10, 1), 0x3000);
        let b = SocketAddrV4::new(Ipv4Addr::new(192, 168, 10, 3), 0x3001);
        p.datagram(a, b, &[0u8; 18], true);
        p.flush().unwrap();
        let f = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        // Nanosecond pcap magic, little endian; one 16-byte record header + 60-byte frame.
        assert_eq!(&f[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(f.len(), 24 + 16 + 60);
        let fr = &f[40..];
        assert_eq!(&fr[0..6], &[0xff; 6]);
        assert_eq!(&fr[6..12], &ADAPTER_MAC);
        // IPv4 checksum by hand: 4500 + 002e + 0000 + 0000 + 4011 + c0a8 + 0a01 + c0a8 +
        // 0a03 = 0x21a93 → 0x1a95 → !0x1a95 = 0xe56a.
        assert_eq!(&fr[24..26], &[0xe5, 0x6a]);
        // UDP: ports 0x3000 → 0x3001, length 8 + 18, checksum 0.
        assert_eq!(&fr[34..42], &[0x30, 0x00, 0x30, 0x01, 0x00, 0x1a, 0, 0]);
        assert_eq!(p.errors(), 0);
    }
}
