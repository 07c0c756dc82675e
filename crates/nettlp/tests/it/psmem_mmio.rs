//! psmem driven by the adapter's host side; messaging and configuration APIs; MSI-X;
//! completion shaping seen on the wire.

use crate::{ad_ip, adapter, dev_ip, device, lock};
use pcielab_nettlp::adapter::{Compat, MmioError};
use pcielab_nettlp::client;
use pcielab_nettlp::frame::{self, NetTlpHeader};
use pcielab_nettlp::psmem::Psmem;
use pcielab_wire::dma::CplError;
use pcielab_wire::tlp::{TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, Tag};
use std::net::{SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn psmem_by_host_mmio() {
    let _g = lock();
    let a = adapter(|c| c.mmio_timeout = Duration::from_millis(300));
    let mem = Arc::new(Psmem::new(a.config().bar4, 64 * 1024));
    let server = crate::serve_dev(mem.clone(), 4);
    for off in 0..8u64 {
        for size in [
            1usize, 2, 3, 4, 5, 7, 8, 63, 64, 65, 200, 256, 257, 1000, 4096, 5000,
        ] {
            let o = 0x100 * off + off + (size as u64 % 3) * 0x1000;
            let data: Vec<u8> = (0..size)
                .map(|i| (i as u8).wrapping_mul(7) ^ off as u8)
                .collect();
            a.mmio_write(o, &data).expect("write");
            // Posted: wait until psmem holds it, then read it back over the wire.
            let mut seen = vec![0u8; size];
            assert!(
                crate::wait_until(Duration::from_secs(1), || mem.peek(o as usize, &mut seen)
                    && seen == data),
                "psmem got {size} B at {o:#x}"
            );
            let mut back = vec![0u8; size];
            a.mmio_read(o, &mut back)
                .unwrap_or_else(|e| panic!("read {size} at {o:#x}: {e}"));
            assert_eq!(back, data, "{size} B at BAR4+{o:#x}");
        }
    }
    // Outside psmem: Completer Abort, reported as such.
    let mut b = [0u8; 4];
    let e = a.mmio_read(64 * 1024, &mut b).expect_err("outside psmem");
    assert!(
        matches!(e, MmioError::Completion(CplError::CompleterAbort { .. })),
        "{e}"
    );
    server.stop();
    // Nobody answers: completion timeout (a CPU would read all-ones).
    let e = a.mmio_read(0, &mut b).expect_err("no device");
    assert!(
        matches!(
            e,
            MmioError::Timeout {
                offset: 0,
                dropped: None
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("is the device running?"), "{e}");
}

/// A device that answers with another Completer ID than the adapter's device ID: its
/// completions are dropped and counted, and the read's timeout names the completion
/// dropped and what to do, instead of asking whether the device runs.
#[test]
fn a_completion_from_another_completer_id_is_named_in_the_timeout() {
    let _g = lock();
    let a = adapter(|c| c.mmio_timeout = Duration::from_millis(300));
    let mem = Arc::new(Psmem::new(a.config().bar4, 64 * 1024));
    let server = pcielab_nettlp::handler::serve(
        pcielab_nettlp::handler::ServeConfig {
            adapter: ad_ip(),
            local: dev_ip(),
            threads: 1,
            completer: Bdf::from_raw(0x0100),
            ..Default::default()
        },
        mem,
    )
    .expect("serve");
    let before = a.stats().drop_unexpected_cpl;
    let mut b = [0u8; 4];
    let e = a.mmio_read(0x18, &mut b).expect_err("wrong completer");
    server.stop();
    match &e {
        MmioError::Timeout {
            offset: 0x18,
            dropped:
                Some(CplError::CompleterIdMismatch {
                    expected, found, ..
                }),
        } => {
            assert_eq!((expected.raw(), found.raw()), (0x1b00, 0x0100), "{e}");
        }
        other => panic!("expected a timeout naming the dropped completion: {other}"),
    }
    let text = e.to_string();
    assert!(
        text.contains("Completer ID 01:00.0, expected 1b:00.0"),
        "{text}"
    );
    assert!(text.contains("the adapter's device ID, 1b:00.0"), "{text}");
    assert_eq!(a.stats().drop_unexpected_cpl, before + 1);
}

#[test]
fn messaging_and_config_api() {
    let _g = lock();
    let a = adapter(|_| {});
    assert_eq!(
        client::get_bar4(ad_ip(), dev_ip()).expect("bar4"),
        a.config().bar4
    );
    assert_eq!(
        client::get_dev_id(ad_ip(), dev_ip()).expect("devid"),
        0x1b00
    );
    let t = client::get_msix_table(ad_ip(), dev_ip()).expect("msix");
    assert_eq!(t, a.config().msix);
    for port in [frame::CFG_PORT_LIBTLP, frame::CFG_PORT_ADAPTER] {
        let mut id = [0u8; 4];
        client::pcie_cfg_read(ad_ip(), dev_ip(), port, 0, &mut id).expect("cfg read");
        assert_eq!(id, [0x76, 0x37, 0x22, 0x80]);
    }
    // A write to a writable register (interrupt line, 0x3c) reads back; the IDs do not change.
    client::pcie_cfg_write(ad_ip(), dev_ip(), 0x4001, 0x3c, &[0x0b]).expect("cfg write");
    client::pcie_cfg_write(ad_ip(), dev_ip(), 0x4001, 0x0, &[0, 0]).expect("cfg write");
    let mut r = [0u8; 6];
    crate::wait_until(Duration::from_secs(1), || {
        client::pcie_cfg_read(ad_ip(), dev_ip(), 0x4001, 0x3a, &mut r).is_ok() && r[2] == 0x0b
    });
    assert_eq!(r[2], 0x0b);
    let mut id = [0u8; 2];
    client::pcie_cfg_read(ad_ip(), dev_ip(), 0x5001, 0, &mut id).expect("cfg read");
    assert_eq!(id, [0x76, 0x37]);
}

#[test]
fn msix_writes_are_interrupts() {
    let _g = lock();
    let a = adapter(|_| {});
    let dev = device(|_| {});
    let t = a.config().msix;
    dev.dma_write(t[3].addr, &t[3].data.to_le_bytes())
        .expect("msi");
    let irq = a.wait_interrupt(Duration::from_secs(1)).expect("interrupt");
    assert_eq!(irq.vector, Some(3));
    assert_eq!(irq.data, t[3].data);
    assert_eq!(a.stats().mwr, 0, "not stored in memory");
    // Taking it leaves the observers' log: it is still there, once.
    assert!(a.take_interrupts().is_empty());
    let (seen, next) = a.interrupts_since(0);
    assert_eq!((seen, next), (vec![irq], 1));
    assert_eq!(a.interrupts_since(next), (vec![], 1));
}

/// Sends one MRd as LibTLP would (tag 5 on port 0x3005) and returns the completions.
fn raw_read(addr: u64, len: u32) -> Vec<(u16, u8, u16)> {
    let port = frame::device_port(5);
    let s = UdpSocket::bind(SocketAddrV4::new(dev_ip(), port)).expect("bind");
    s.connect(SocketAddrV4::new(ad_ip(), port))
        .expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let chunk = pcielab_wire::dma::split_read(
        addr,
        len as u64,
        4096,
        pcielab_wire::dma::SplitPolicy::Naive,
    )
    .expect("split")
    .next()
    .expect("one chunk");
    let mrd = TlpRepr::mem_read_chunk(Bdf::from_raw(0x1b00), Tag::new(5).expect("tag"), &chunk);
    let mut b = [0u8; 64];
    let n = frame::emit_datagram(NetTlpHeader::default(), &mrd, &mut b).expect("emit");
    s.send(&b[..n]).expect("send");
    let mut out = Vec::new();
    let mut r = [0u8; 5000];
    while let Ok(n) = s.recv(&mut r) {
        let t = TlpRepr::parse_bytes(&r[6..n]).expect("parse");
        if let TlpHeader::Cpl(c) = t.header {
            out.push((c.byte_count, c.lower_address, t.length_dw()));
            if c.byte_count as usize <= t.payload.len() - (c.lower_address as usize & 3) {
                break;
            }
        }
    }
    out
}

#[test]
fn completion_shaping_strict_and_libtlp() {
    let _g = lock();
    {
        let _a = adapter(|c| c.mps = 128);
        // 200 B at 0x6003, RCB 64, MPS 128: 0x6003..0x6080 (125 B, 32 DW), then 75 B.
        assert_eq!(raw_read(0x6003, 200), vec![(200, 0x03, 32), (75, 0x00, 19)]);
        // 4096 B aligned: never one 4096-byte CplD; 32 CplDs of 128 B.
        let v = raw_read(0x8000, 4096);
        assert_eq!(v.len(), 32);
        assert_eq!(v[0], (4096, 0, 32));
        assert_eq!(v[31], (128, 0, 32));
    }
    {
        let _a = adapter(|c| {
            c.mps = 128;
            c.compat = Compat::Libtlp;
        });
        // One CplD: Length (3 + 200 + 3) / 4 = 51 DW, as LibTLP's last-CplD test expects.
        assert_eq!(raw_read(0x6003, 200), vec![(200, 0x03, 51)]);
        assert_eq!(raw_read(0x8000, 4096).len(), 32);
    }
}

/// LibTLP's quirks on the wire are tolerated: a 4096-byte MRd with the stray AT bit
/// (`00 00 04 00`, Length 0 = 1024 DW) is served, and a 2-byte write at 0x3001 sent with
/// 3 payload bytes (Length 1 DW) is applied to exactly its 2 bytes.
#[test]
fn libtlp_wire_quirks_are_tolerated() {
    let _g = lock();
    let a = adapter(|_| {});
    a.memory().write(0x3000, &[0x11, 0x22, 0x33, 0x44]);
    let port = frame::device_port(0);
    let s = UdpSocket::bind(SocketAddrV4::new(dev_ip(), port)).expect("bind");
    s.connect(SocketAddrV4::new(ad_ip(), port))
        .expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    // MWr 3DW, Length 1, requester 1b:00, tag 0, First BE 0110, address 0x3000, 3 bytes.
    let mwr = [
        0, 0, 0, 0, 0, 0, 0x40, 0, 0, 1, 0x1b, 0, 0, 0x06, 0, 0, 0x30, 0, 0x00, 0xaa, 0xbb,
    ];
    s.send(&mwr).expect("send");
    // MRd 3DW with AT = 01 and Length 0, all bytes enabled, at 0x8000.
    let mrd = [
        0, 0, 0, 0, 0, 0, 0x00, 0, 0x04, 0x00, 0x1b, 0, 0, 0xff, 0, 0, 0x80, 0,
    ];
    s.send(&mrd).expect("send");
    let mut total = 0u32;
    let mut r = [0u8; 5000];
    while let Ok(n) = s.recv(&mut r) {
        let t = TlpRepr::parse_bytes(&r[6..n]).expect("CplD");
        if let TlpHeader::Cpl(c) = t.header {
            total += t.payload.len() as u32;
            if c.byte_count as usize == t.payload.len() {
                break;
            }
        }
    }
    assert_eq!(total, 4096, "the whole page came back");
    let mut m = [0u8; 4];
    assert!(
        crate::wait_until(Duration::from_secs(1), || {
            a.memory().read(0x3000, &mut m);
            m == [0x11, 0xaa, 0xbb, 0x44]
        }),
        "{m:02x?}"
    );
}

/// The device-model runtime: pcielab_device::PsMem (the simulator's psmem) served
/// through hosted::ModelHandler answers the adapter's MMIO like the psmem server.
#[test]
fn device_model_served_over_nettlp() {
    use pcielab_device::{PsMem, PsMemLayout};
    use pcielab_nettlp::hosted::ModelHandler;
    let _g = lock();
    let a = adapter(|c| c.mmio_timeout = Duration::from_millis(300));
    let size = 16 * 1024;
    let layout = PsMemLayout {
        mem_bar: 4,
        size,
        io: None,
    };
    let h = Arc::new(ModelHandler::new(
        PsMem::new(layout),
        4,
        a.config().bar4,
        size,
    ));
    let server = crate::serve_dev(h.clone(), 2);
    for (o, n) in [(0u64, 4usize), (0xffe, 7), (0x2000, 1000), (size - 64, 64)] {
        let data: Vec<u8> = (0..n).map(|i| (i as u8) ^ (o as u8) ^ 0x5a).collect();
        a.mmio_write(o, &data).expect("write");
        let mut back = vec![0u8; n];
        assert!(
            crate::wait_until(Duration::from_secs(1), || {
                a.mmio_read(o, &mut back).is_ok() && back == data
            }),
            "{n} B at {o:#x}"
        );
        let mut direct = vec![0u8; n];
        h.with_model(|m| m.read(4, o, &mut direct))
            .expect("in range");
        assert_eq!(direct, data);
    }
    let mut b = [0u8; 4];
    let e = a.mmio_read(size, &mut b).expect_err("outside the BAR");
    assert!(
        matches!(e, MmioError::Completion(CplError::CompleterAbort { .. })),
        "{e}"
    );
    assert_eq!(h.commands_dropped(), 0);
    server.stop();
}

/// A model that acts over NetTLP: a write of an address to its BAR makes it read 64
/// bytes of host memory there (DMA read), write them 4 KiB further on (DMA write) and
/// raise MSI-X vector 0. `ModelHandler::with_device` carries all of it out over UDP.
#[test]
fn a_device_models_dma_and_msix_run_over_nettlp() {
    use pcielab_device::{Cx, DeviceModel, DmaId};
    use pcielab_nettlp::hosted::ModelHandler;
    #[derive(Debug, Default)]
    struct Copy64 {
        to: u64,
        read: Option<DmaId>,
    }
    impl DeviceModel for Copy64 {
        fn mem_write(&mut self, _bar: u8, _off: u64, data: &[u8], cx: &mut Cx<'_>) {
            let mut a = [0u8; 8];
            a.copy_from_slice(&data[..8]);
            let from = u64::from_le_bytes(a);
            self.to = from + 4096;
            self.read = Some(cx.dma_read(from, 64));
        }
        fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
            assert!(ok, "DMA {id:?} failed");
            if Some(id) == self.read {
                let mut buf = cx.buffer(64);
                buf.extend_from_slice(data);
                cx.dma_write(self.to, buf);
            } else {
                cx.msix(0);
            }
        }
    }
    let _g = lock();
    let a = adapter(|c| c.mmio_timeout = Duration::from_millis(300));
    crate::fill(&a, 0x10000, 64);
    let table = a.config().msix;
    let h = Arc::new(
        ModelHandler::new(Copy64::default(), 4, a.config().bar4, 4096)
            .with_device(device(|_| {}), &table),
    );
    let server = crate::serve_dev(h.clone(), 1);
    a.take_interrupts();
    a.mmio_write(0, &0x10000u64.to_le_bytes())
        .expect("doorbell");
    let mut got = [0u8; 64];
    assert!(
        crate::wait_until(Duration::from_secs(2), || {
            a.memory().read(0x11000, &mut got);
            got.iter()
                .enumerate()
                .all(|(i, &b)| b == crate::pattern(0x10000 + i as u64))
        }),
        "the copy arrived"
    );
    let mut irqs = Vec::new();
    assert!(
        crate::wait_until(Duration::from_secs(2), || {
            irqs.extend(a.take_interrupts());
            !irqs.is_empty()
        }),
        "MSI-X vector 0 arrived"
    );
    assert_eq!((irqs[0].addr, irqs[0].data), (table[0].addr, table[0].data));
    assert_eq!(h.commands_dropped(), 0, "{:?}", h.last_dropped());
    server.stop();
}
