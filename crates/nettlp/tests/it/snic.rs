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
