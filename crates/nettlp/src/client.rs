//! Clients of the messaging API (UDP 0x2FFF) and the PCIe configuration API (6-byte
//! packets on 0x4001 or 0x5001).
//!
//! ```no_run
//! use pcielab_nettlp::client;
//! use std::net::Ipv4Addr;
//! let host = Ipv4Addr::new(127, 0, 0, 1);
//! let local = Ipv4Addr::new(127, 0, 0, 2);
//! let bar4 = client::get_bar4(host, local)?;
//! let devid = client::get_dev_id(host, local)?;
//! let mut id = [0u8; 4];
//! client::pcie_cfg_read(host, local, 0x4001, 0, &mut id)?; // 76 37 22 80
//! # Ok::<(), std::io::Error>(())
//! ```

use crate::frame::{self, CfgPacket, MsgRequest, MsixEntry, MSG_PORT, MSIX_ENTRIES};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

/// Messaging API timeout (as LibTLP: 500 ms).
pub const MSG_TIMEOUT: Duration = Duration::from_millis(500);
/// Configuration API timeout (as LibTLP: 1000 ms).
pub const CFG_TIMEOUT: Duration = Duration::from_millis(1000);

fn request(
    host: Ipv4Addr,
    local: Ipv4Addr,
    req: MsgRequest,
    reply: &mut [u8],
) -> io::Result<usize> {
    let s = UdpSocket::bind(SocketAddrV4::new(local, 0))?;
    s.connect(SocketAddrV4::new(host, MSG_PORT))?;
    s.set_read_timeout(Some(MSG_TIMEOUT))?;
    s.send(&req.code().to_le_bytes())?;
    s.recv(reply).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
            io::ErrorKind::TimedOut,
            format!("messaging API: no reply from {host}:{MSG_PORT:#x} within 500 ms"),
        ),
        _ => e,
    })
}

fn exact(n: usize, want: usize, what: &str) -> io::Result<()> {
    if n == want {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("messaging API {what}: reply of {n} bytes, expected {want}"),
        ))
    }
}

/// GET_BAR4_ADDR: the BAR4 physical address.
pub fn get_bar4(host: Ipv4Addr, local: Ipv4Addr) -> io::Result<u64> {
    let mut b = [0u8; 16];
    let n = request(host, local, MsgRequest::GetBar4Addr, &mut b)?;
    exact(n, 8, "BAR4 address")?;
    Ok(u64::from_le_bytes([
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
    ]))
}

/// GET_DEV_ID: the adapter's `bus << 8 | devfn`.
pub fn get_dev_id(host: Ipv4Addr, local: Ipv4Addr) -> io::Result<u16> {
    let mut b = [0u8; 16];
    let n = request(host, local, MsgRequest::GetDevId, &mut b)?;
    exact(n, 2, "device ID")?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

/// GET_MSIX_TABLE: the first 16 MSI-X entries.
pub fn get_msix_table(host: Ipv4Addr, local: Ipv4Addr) -> io::Result<[MsixEntry; MSIX_ENTRIES]> {
    let mut b = [0u8; 256];
    let n = request(host, local, MsgRequest::GetMsixTable, &mut b)?;
    frame::decode_msix_table(&b[..n])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

fn cfg_socket(host: Ipv4Addr, local: Ipv4Addr, port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddrV4::new(local, port))?;
    s.connect(SocketAddrV4::new(host, port))?;
    s.set_read_timeout(Some(CFG_TIMEOUT))?;
    Ok(s)
}

/// Per-DW operations covering `[addr, addr+len)`: (dw, byte mask, first byte, count).
fn dw_ops(addr: u16, len: usize) -> Vec<(u16, u8, usize, usize)> {
    let mut v = Vec::new();
    let mut a = addr as usize;
    let end = addr as usize + len;
    while a < end {
        let dw = a / 4;
        let lo = a % 4;
        let hi = (end - dw * 4).min(4);
        let mask = ((0xfu8 << lo) & (0xfu8 >> (4 - hi))) & 0xf;
        v.push((dw as u16, mask, lo, hi - lo));
        a = dw * 4 + hi;
    }
    v
}

/// Reads `buf.len()` bytes of configuration space at `addr` (little-endian register order).
pub fn pcie_cfg_read(
    host: Ipv4Addr,
    local: Ipv4Addr,
    port: u16,
    addr: u16,
    buf: &mut [u8],
) -> io::Result<usize> {
    cfg_read_on(&cfg_socket(host, local, port)?, addr, buf)
}

/// Writes `data` into configuration space at `addr` (no reply is expected).
pub fn pcie_cfg_write(
    host: Ipv4Addr,
    local: Ipv4Addr,
    port: u16,
    addr: u16,
    data: &[u8],
) -> io::Result<usize> {
    cfg_write_on(&cfg_socket(host, local, port)?, addr, data)
}

/// [`pcie_cfg_read`] on a socket connected to the configuration port.
pub fn cfg_read_on(s: &UdpSocket, addr: u16, buf: &mut [u8]) -> io::Result<usize> {
    if addr as usize + buf.len() > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "configuration space is 4096 bytes",
        ));
    }
    s.set_read_timeout(Some(CFG_TIMEOUT))?;
    let mut done = 0;
    for (dw, mask, lo, n) in dw_ops(addr, buf.len()) {
        let p = CfgPacket {
            write: false,
            byte_mask: mask,
            dw_addr: dw,
            data: 0,
        };
        s.send(&p.to_bytes())?;
        let mut r = [0u8; 64];
        let got = s.recv(&mut r).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                "configuration API: no reply within 1000 ms",
            ),
            _ => e,
        })?;
        let reply = CfgPacket::parse(&r[..got.min(6)])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        buf[done..done + n].copy_from_slice(&reply.data.to_le_bytes()[lo..lo + n]);
        done += n;
    }
    Ok(done)
}

/// [`pcie_cfg_write`] on a socket connected to the configuration port.
pub fn cfg_write_on(s: &UdpSocket, addr: u16, data: &[u8]) -> io::Result<usize> {
    if addr as usize + data.len() > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "configuration space is 4096 bytes",
        ));
    }
    let mut done = 0;
    for (dw, mask, lo, n) in dw_ops(addr, data.len()) {
        let mut v = [0u8; 4];
        v[lo..lo + n].copy_from_slice(&data[done..done + n]);
        let p = CfgPacket {
            write: true,
            byte_mask: mask,
            dw_addr: dw,
            data: u32::from_le_bytes(v),
        };
        s.send(&p.to_bytes())?;
        done += n;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dw_ops_by_hand() {
        assert_eq!(dw_ops(0, 4), vec![(0, 0xf, 0, 4)]);
        assert_eq!(dw_ops(2, 4), vec![(0, 0xc, 2, 2), (1, 0x3, 0, 2)]);
        assert_eq!(dw_ops(5, 1), vec![(1, 0x2, 1, 1)]);
        assert_eq!(dw_ops(0, 0), vec![]);
    }
}
