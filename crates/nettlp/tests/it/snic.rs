//! The simple-nic host driver end to end: a small simple-nic device, written here on the
//! device library following the BAR4 layout of NetTLP's simple-nic (registers at BAR4 +
//! 0/8/16/20/24, 16-byte descriptors), on a loopback address pair of its own.

use crate::own_addrs;
use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::client;
use pcielab_nettlp::device::{Device, DeviceConfig};
use pcielab_nettlp::frame::MsixEntry;
use pcielab_nettlp::handler::{serve, Handler, ServeConfig};
use pcielab_nettlp::snic::{SnicConfig, SnicDriver};
use pcielab_wire::CplStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
struct Regs {
    tx_base: u64,
    rx_base: u64,
    enabled: u32,
    /// The posted RX descriptor: (its address, buffer address, buffer length).
    rx_desc: Option<(u64, u64, u64)>,
    /// Packets "put on the wire".
    sent: Vec<Vec<u8>>,
    errors: Vec<String>,
}

/// The device: BAR4 registers, DMA through the device library, MSI-X 0 (TX) / 1 (RX).
#[derive(Debug)]
struct SimpleNic {
    bar4: u64,
    dev: Device,
    msix: [MsixEntry; 2],
    regs: Mutex<Regs>,
}

fn u64_le(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

impl SimpleNic {
    fn irq(&self, v: usize) {
        let e = self.msix[v];
        if let Err(x) = self.dev.dma_write(e.addr, &e.data.to_le_bytes()) {
            self.regs.lock().unwrap().errors.push(format!("irq: {x}"));
        }
    }

    fn desc(&self, at: u64) -> Result<(u64, u64), String> {
        let mut d = [0u8; 16];
        self.dev.dma_read(at, &mut d).map_err(|e| e.to_string())?;
        Ok((u64_le(&d[..8]), u64_le(&d[8..])))
    }

    fn transmit(&self, idx: u32) -> Result<(), String> {
        let base = self.regs.lock().unwrap().tx_base;
        if base == 0 {
            return Err("TX index before the TX ring base".into());
        }
        let (addr, len) = self.desc(base + 16 * idx as u64)?;
        if len > 4096 {
            return Err(format!("TX descriptor length {len}"));
        }
        let mut pkt = vec![0u8; len as usize];
        self.dev
            .dma_read(addr, &mut pkt)
            .map_err(|e| e.to_string())?;
        self.regs.lock().unwrap().sent.push(pkt);
        self.irq(0);
        Ok(())
    }

    /// A packet from the wire into the posted RX buffer.
    fn receive(&self, pkt: &[u8]) -> Result<(), String> {
        let Some((at, buf, cap)) = self.regs.lock().unwrap().rx_desc.take() else {
            return Err("no RX buffer posted".into());
        };
        if pkt.len() as u64 > cap {
            return Err("packet larger than the RX buffer".into());
        }
        self.dev.dma_write(buf, pkt).map_err(|e| e.to_string())?;
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&buf.to_le_bytes());
        d[8..].copy_from_slice(&(pkt.len() as u64).to_le_bytes());
        self.dev.dma_write(at, &d).map_err(|e| e.to_string())?;
        self.irq(1);
        Ok(())
    }
}

impl Handler for SimpleNic {
    fn read(&self, _addr: u64, _out: &mut [u8]) -> Result<(), CplStatus> {
        Err(CplStatus::Ur)
    }
    fn write(&self, addr: u64, data: &[u8]) {
        let off = addr.wrapping_sub(self.bar4);
        let r = match (off, data.len()) {
            (0, 8) => {
                self.regs.lock().unwrap().tx_base = u64_le(data);
                Ok(())
            }
            (8, 8) => {
                self.regs.lock().unwrap().rx_base = u64_le(data);
                Ok(())
            }
            (16, 4) => self.transmit(u32::from_le_bytes([data[0], data[1], data[2], data[3]])),
            (20, 4) => {
                let idx = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                let base = self.regs.lock().unwrap().rx_base;
                let at = base + 16 * idx as u64;
                self.desc(at).map(|(buf, cap)| {
                    self.regs.lock().unwrap().rx_desc = Some((at, buf, cap));
                })
            }
            (24, 4) => {
                self.regs.lock().unwrap().enabled =
                    u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                Ok(())
            }
            _ => Err(format!("write of {} B at BAR4+{off:#x}", data.len())),
        };
        if let Err(e) = r {
            self.regs.lock().unwrap().errors.push(e);
        }
    }
}

#[test]
fn driver_sends_and_receives_through_a_simple_nic() {
    let (ad, dv) = own_addrs();
    let a = Adapter::start(AdapterConfig::on(ad, dv)).expect("adapter starts");
    // The device learns BAR4 and its MSI-X vectors from the messaging API, as upstream's.
    let bar4 = client::get_bar4(ad, dv).expect("BAR4");
    let table = client::get_msix_table(ad, dv).expect("MSI-X table");
    let nic = Arc::new(SimpleNic {
        bar4,
        dev: Device::open(DeviceConfig {
            adapter: ad,
            local: dv,
            timeout: Duration::from_millis(500),
            ..DeviceConfig::default()
        })
        .expect("device opens"),
        msix: [table[0], table[1]],
        regs: Mutex::new(Regs::default()),
    });
    let _server = serve(
        ServeConfig {
            adapter: ad,
            local: dv,
            threads: 1,
            ..ServeConfig::default()
        },
        nic.clone(),
    )
    .expect("device serves BAR4");

    let cfg = SnicConfig {
        base: 0x20_0000,
        entries: 4,
        buf_size: 1514,
        ..SnicConfig::default()
    };
    let mut drv = SnicDriver::open(&a, cfg).expect("driver opens");
    // TX: six frames (the ring of four wraps); each send returns after its interrupt.
    let frames: Vec<Vec<u8>> = (0..6u8)
        .map(|k| (0..60 + 100 * k as usize).map(|i| (i as u8) ^ k).collect())
        .collect();
    for f in &frames {
        drv.send(f)
            .unwrap_or_else(|e| panic!("send: {e}; device: {:?}", nic.regs.lock().unwrap().errors));
    }
    {
        let r = nic.regs.lock().unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.enabled, 1);
        assert_eq!(r.tx_base, 0x20_0000);
        assert_eq!(r.rx_base, 0x20_0000 + 4 * 16);
        assert_eq!(r.sent, frames);
    }
    // RX: nothing yet (and the driver posts its first buffer).
    assert_eq!(drv.recv(Duration::from_millis(50)).expect("recv"), None);
    for k in 0..5u8 {
        let pkt: Vec<u8> = (0..(64 + 300 * k as usize))
            .map(|i| (i as u8).wrapping_mul(3) ^ k)
            .collect();
        // Wait (bounded) for the device to have taken the posted descriptor.
        assert!(crate::wait_until(Duration::from_secs(2), || nic
            .regs
            .lock()
            .unwrap()
            .rx_desc
            .is_some()));
        nic.receive(&pkt).expect("device receives");
        let got = drv
            .recv(Duration::from_secs(2))
            .expect("recv")
            .expect("a packet");
        assert_eq!(got, pkt, "packet {k}");
    }
    let s = drv.stats();
    assert_eq!((s.tx_packets, s.rx_packets, s.other_irqs), (6, 5, 0));
    // A packet larger than a buffer is refused before anything is written.
    assert!(drv.send(&[0u8; 1515]).is_err());
    assert!(nic.regs.lock().unwrap().errors.is_empty());
}

// ---------------------------------------------------------------------------------
// The simple-nic device of pcielab (`pcielab_device::snic::SimpleNic`, served by
// `pcielab_nettlp::snic_device`) driven end to end by the same host driver.

use pcielab_nettlp::snic_device::{Mac, SnicDevice, SnicDeviceConfig};

/// An adapter and a served simple-nic with `mac`, on addresses of their own.
fn served(mac: Mac) -> (Adapter, SnicDevice) {
    let (ad, dv) = own_addrs();
    let a = Adapter::start(AdapterConfig::on(ad, dv)).expect("adapter starts");
    let d = SnicDevice::start(SnicDeviceConfig {
        adapter: ad,
        local: dv,
        mac,
        ..SnicDeviceConfig::default()
    })
    .expect("the simple-nic device starts");
    assert_eq!(d.bar4(), a.config().bar4, "BAR4 from the messaging API");
    (a, d)
}

fn driver_cfg() -> SnicConfig {
    SnicConfig {
        base: 0x40_0000,
        entries: 8,
        buf_size: 2048,
        timeout: Duration::from_secs(2),
        ..SnicConfig::default()
    }
}

/// Frames of different sizes, each with its own bytes.
fn frames(n: usize) -> Vec<Vec<u8>> {
    let sizes = [
        60usize, 61, 64, 127, 128, 255, 512, 1000, 1514, 2048, 1, 333,
    ];
    (0..n)
        .map(|k| {
            (0..sizes[k % sizes.len()])
                .map(|i| (i as u8).wrapping_mul(31) ^ (k as u8).wrapping_mul(7) ^ 0xa5)
                .collect()
        })
        .collect()
}

#[test]
fn served_simple_nic_on_loopback_returns_every_frame_in_order() {
    let (a, dev) = served(Mac::Loopback);
    let mut drv = SnicDriver::open(&a, driver_cfg()).expect("driver opens");
    drv.post_rx().expect("first RX buffer");
    // One at a time: each frame goes out (TX interrupt), comes back into the posted
    // buffer (RX interrupt); the ring of 8 wraps.
    let fs = frames(20);
    for (k, f) in fs.iter().enumerate() {
        drv.send(f)
            .unwrap_or_else(|e| panic!("send {k}: {e}; device {}", dev.report()));
        let got = drv
            .recv(Duration::from_secs(2))
            .expect("recv")
            .unwrap_or_else(|| panic!("frame {k} did not come back; device {}", dev.report()));
        assert_eq!(&got, f, "frame {k} ({} B)", f.len());
    }
    // A burst: all sent first; they wait in the device's receive FIFO and come back in
    // order as the driver posts buffers.
    let burst = frames(12);
    for f in &burst {
        drv.send(f).expect("send");
    }
    for (k, f) in burst.iter().enumerate() {
        let got = drv
            .recv(Duration::from_secs(2))
            .expect("recv")
            .unwrap_or_else(|| panic!("burst frame {k} missing; device {}", dev.report()));
        assert_eq!(&got, f, "burst frame {k}");
    }
    let s = drv.stats();
    // One RX interrupt came while the driver waited for a TX one: the burst's first
    // frame took the buffer posted after the last single frame (kept for `recv`).
    assert_eq!((s.tx_packets, s.rx_packets, s.other_irqs), (32, 32, 1));
    let d = dev.stats();
    let bytes: u64 = fs.iter().chain(&burst).map(|f| f.len() as u64).sum();
    assert_eq!((d.tx_frames, d.rx_frames, d.tx_irqs), (32, 32, 32));
    assert_eq!((d.tx_bytes, d.rx_bytes), (bytes, bytes));
    assert_eq!(d.errors(), 0, "{}", dev.report());
    let r = dev.report();
    assert_eq!(r["commands_dropped"], 0, "{r}");
    assert_eq!(r["enabled"], 1);
    dev.stop();
}

#[test]
fn served_simple_nic_counts_bad_input_from_the_host() {
    use pcielab_nettlp::snic::{RX_DESC_IDX, TX_DESC_IDX};
    let (a, dev) = served(Mac::None);
    let drv = SnicDriver::open(&a, driver_cfg()).expect("driver opens");
    let _ = a.take_interrupts();
    // A doorbell past the device's ring (1024 entries): counted, and still answered by
    // the TX interrupt, as upstream answers every doorbell.
    a.mmio_write(TX_DESC_IDX, &5000u32.to_le_bytes())
        .expect("doorbell");
    let irq = a
        .wait_interrupt(Duration::from_secs(2))
        .expect("TX interrupt");
    assert_eq!(irq.vector, Some(0));
    // Writes of the wrong size, past the registers and an RX post of a zero-length
    // buffer (the driver's ring is zeroed).
    a.mmio_write(TX_DESC_IDX, &[1, 0]).expect("2-byte write");
    a.mmio_write(0x40, &[0; 4])
        .expect("write past the registers");
    a.mmio_write(RX_DESC_IDX, &3u32.to_le_bytes())
        .expect("post");
    assert!(
        crate::wait_until(Duration::from_secs(2), || dev.stats().rx_bad_length == 1),
        "{}",
        dev.report()
    );
    let s = dev.stats();
    assert_eq!(
        (
            s.tx_bad_index,
            s.bad_size_writes,
            s.unknown_writes,
            s.rx_bad_length
        ),
        (1, 1, 1, 1)
    );
    // With nothing on the MAC side a frame is sent into the void: counted.
    drop(drv);
    let mut drv = SnicDriver::open(&a, driver_cfg()).expect("driver opens again");
    drv.send(&[7u8; 100]).expect("TX interrupt comes");
    assert_eq!(dev.stats().tx_mac_dropped, 1);
    assert!(dev.report()["last_error"]
        .as_str()
        .unwrap()
        .contains("no MAC"));
    dev.stop();
}

/// A raw packet socket on one interface (test helper; Linux AF_PACKET).
struct PacketSocket(std::os::fd::OwnedFd);

impl PacketSocket {
    fn open(ifname: &str) -> std::io::Result<PacketSocket> {
        use std::os::fd::FromRawFd;
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is fresh and ours.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let name = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: sockaddr_ll is plain old data.
        let mut sll: libc::sockaddr_ll = unsafe { core::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: a valid fd and a sockaddr_ll of its size.
        let r = unsafe {
            libc::bind(
                fd,
                (&sll as *const libc::sockaddr_ll).cast(),
                core::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(PacketSocket(owned))
    }

    fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid fd and buffer.
        let r = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// The next frame the interface received (not one it sent), within `limit`.
    fn recv_incoming(&self, limit: Duration) -> Option<Vec<u8>> {
        use std::os::fd::AsRawFd;
        let end = std::time::Instant::now() + limit;
        let mut buf = vec![0u8; 65536];
        let mut ready = Vec::new();
        while std::time::Instant::now() < end {
            pcielab_nettlp::sys::poll_readable(
                &[self.0.as_raw_fd()],
                Duration::from_millis(50),
                &mut ready,
            )
            .ok()?;
            if ready.is_empty() {
                continue;
            }
            // SAFETY: sockaddr_ll is plain old data; buffers outlive the call.
            let mut sll: libc::sockaddr_ll = unsafe { core::mem::zeroed() };
            let mut len = core::mem::size_of::<libc::sockaddr_ll>() as u32;
            let n = unsafe {
                libc::recvfrom(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                    (&mut sll as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n > 0 && sll.sll_pkttype != libc::PACKET_OUTGOING {
                return Some(buf[..n as usize].to_vec());
            }
        }
        None
    }
}

/// A broadcast frame of the local experimental EtherType 0x88B5 with `payload`.
fn experimental_frame(src: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, src]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(payload);
    f
}

#[test]
fn served_simple_nic_on_a_tap_interface() {
    let name = format!("pltap{:05x}", std::process::id() & 0xfffff);
    // Probe first: where a TAP interface cannot be had, say why and skip.
    match pcielab_nettlp::snic_device::TapMac::open(&name) {
        Ok(t) => drop(t),
        Err(e) => {
            println!("skipped: no TAP interface here: {e}");
            return;
        }
    }
    let (a, dev) = served(Mac::Tap(name.clone()));
    assert_eq!(dev.tap(), Some(name.as_str()));
    let sock = match PacketSocket::open(&name) {
        Ok(s) => s,
        Err(e) => {
            println!("skipped: TAP {name} opened, but no packet socket on it: {e}");
            return;
        }
    };
    let mut drv = SnicDriver::open(&a, driver_cfg()).expect("driver opens");
    drv.post_rx().expect("RX buffer");
    // TX: the driver's frame comes out of the TAP into the kernel, byte for byte.
    let marker: Vec<u8> = (0..200u32).map(|i| (i * 17 + 3) as u8).collect();
    let out = experimental_frame(1, &marker);
    drv.send(&out).expect("send");
    let mut seen = None;
    let end = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < end {
        match sock.recv_incoming(Duration::from_millis(500)) {
            Some(f) if f.get(12..14) == Some(&[0x88, 0xb5]) => {
                seen = Some(f);
                break;
            }
            _ => {}
        }
    }
    assert_eq!(
        seen.as_ref(),
        Some(&out),
        "the kernel got the frame; device {}",
        dev.report()
    );
    // RX: a frame the kernel sends on the TAP reaches the driver (the kernel may send
    // frames of its own, IPv6 neighbour discovery say: skipped).
    let back = experimental_frame(2, &marker[..150]);
    sock.send(&back).expect("packet socket send");
    let mut got = None;
    for _ in 0..20 {
        match drv.recv(Duration::from_secs(2)).expect("recv") {
            Some(f) if f.get(12..14) == Some(&[0x88, 0xb5]) => {
                got = Some(f);
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    assert_eq!(got.as_ref(), Some(&back), "device {}", dev.report());
    let r = dev.report();
    assert_eq!(r["tx_mac_dropped"], 0, "{r}");
    assert_eq!(r["commands_dropped"], 0, "{r}");
    dev.stop();
}
