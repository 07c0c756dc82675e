//! pcie-bench's NIC (`pcielab_device::nic::Nic`, the model the timed simulator runs
//! as `kind = "nic"`) served over NetTLP by `hosted::ModelHandler`, driven from the
//! software adapter host through its BAR: the same model, over UDP.

use crate::{adapter, device, lock};
use pcielab_device::nic::{reg, Nic, NicConfig, RxSource, DESC, QUEUE_BASE, STATUS_DD};
use pcielab_nettlp::hosted::ModelHandler;
use std::sync::Arc;
use std::time::Duration;

/// The simple NIC in MAC loopback: the host sets up a transmit and a receive ring in
/// the adapter's memory, posts 8 receive buffers and sends 8 frames, one doorbell each.
/// Every frame comes back into a buffer byte for byte, with its descriptor written
/// back, and both the transmit and the receive vector arrive.
#[test]
fn the_simulators_nic_runs_over_nettlp() {
    // The simple NIC needs no timers (no moderation timer, no fetch wait).
    loop_frames(
        NicConfig {
            rx_source: RxSource::Loopback,
            bar: 4,
            ..NicConfig::simple(1)
        },
        false,
    );
}

/// The batched NIC needs timers: 8 frames are fewer than a fetch batch of 40 (fetched
/// once the host has stopped posting for `fetch_wait`) and than an interrupt's 32
/// packets (raised by the moderation timer). The runtime's timer thread fires them.
#[test]
fn the_batched_nic_runs_over_nettlp_with_timers() {
    loop_frames(
        NicConfig {
            rx_source: RxSource::Loopback,
            bar: 4,
            irq_delay: pcielab_sim::SimDuration::from_us(200),
            ..NicConfig::batched(1)
        },
        true,
    );
}

fn loop_frames(cfg: NicConfig, timers: bool) {
    let _g = lock();
    let a = adapter(|c| c.mmio_timeout = Duration::from_millis(300));
    let table = a.config().msix;
    let h = Arc::new(
        ModelHandler::new(Nic::new(cfg), 4, a.config().bar4, 16 * 1024)
            .with_device(device(|_| {}), &table),
    );
    let timer_thread = timers.then(|| h.start_timers());
    let server = crate::serve_dev(h.clone(), 1);
    let (tx_ring, rx_ring, tx_buf, rx_buf) = (0x10_0000u64, 0x11_0000, 0x20_0000, 0x30_0000);
    let n = 8u32;
    let ring = 40u32;
    a.memory()
        .write(tx_ring, &vec![0; (ring as u64 * DESC) as usize]);
    a.memory()
        .write(rx_ring, &vec![0; (ring as u64 * DESC) as usize]);
    let q = QUEUE_BASE;
    a.mmio_write(q + reg::TX_BASE, &tx_ring.to_le_bytes())
        .unwrap();
    a.mmio_write(q + reg::TX_SIZE, &ring.to_le_bytes()).unwrap();
    a.mmio_write(q + reg::RX_BASE, &rx_ring.to_le_bytes())
        .unwrap();
    a.mmio_write(q + reg::RX_SIZE, &ring.to_le_bytes()).unwrap();
    a.mmio_write(reg::CTRL, &1u32.to_le_bytes()).unwrap();
    let desc = |addr: u64, len: u16| {
        let mut d = [0u8; 16];
        d[0..8].copy_from_slice(&addr.to_le_bytes());
        d[8..10].copy_from_slice(&len.to_le_bytes());
        d[10] = 1;
        d
    };
    for i in 0..n {
        let b = rx_buf + i as u64 * 2048;
        a.memory().write(rx_ring + i as u64 * DESC, &desc(b, 2048));
    }
    a.mmio_write(q + reg::RX_TAIL, &n.to_le_bytes()).unwrap();
    a.take_interrupts();
    let frame = |i: u32| -> Vec<u8> {
        (0..60 + 100 * i as usize)
            .map(|k| crate::pattern(i as u64 * 4096 + k as u64))
            .collect()
    };
    for i in 0..n {
        let b = tx_buf + i as u64 * 2048;
        let f = frame(i);
        a.memory().write(b, &f);
        a.memory()
            .write(tx_ring + i as u64 * DESC, &desc(b, f.len() as u16));
        a.mmio_write(q + reg::TX_TAIL, &(i + 1).to_le_bytes())
            .unwrap();
    }
    let mut wb = [0u8; 16];
    assert!(
        crate::wait_until(Duration::from_secs(3), || {
            a.memory().read(rx_ring + (n - 1) as u64 * DESC, &mut wb);
            wb[11] & STATUS_DD != 0
        }),
        "the last frame came back ({:?})",
        h.with_model(|m| m.stats())
    );
    for i in 0..n {
        a.memory().read(rx_ring + i as u64 * DESC, &mut wb);
        let len = u16::from_le_bytes([wb[8], wb[9]]) as usize;
        assert_eq!(wb[11], STATUS_DD, "descriptor {i}");
        let mut got = vec![0u8; len];
        a.memory().read(rx_buf + i as u64 * 2048, &mut got);
        assert_eq!(got, frame(i), "frame {i}");
    }
    // The head registers read back over NetTLP.
    let mut head = [0u8; 4];
    a.mmio_read(q + reg::TX_HEAD, &mut head).unwrap();
    assert_eq!(u32::from_le_bytes(head), n);
    a.mmio_read(q + reg::RX_HEAD, &mut head).unwrap();
    assert_eq!(u32::from_le_bytes(head), n);
    // An interrupt per packet and path, or (moderated) one per path.
    let want = if timers { 2 } else { 2 * n as usize };
    let mut irqs = Vec::new();
    assert!(
        crate::wait_until(Duration::from_secs(2), || {
            irqs.extend(a.take_interrupts());
            irqs.len() >= want
        }),
        "{} interrupts",
        irqs.len()
    );
    let vectors: std::collections::BTreeSet<u32> = irqs.iter().map(|i| i.data).collect();
    assert_eq!(
        vectors,
        [table[0].data, table[1].data].into_iter().collect(),
        "the transmit and the receive vector"
    );
    assert_eq!(h.commands_dropped(), 0, "{:?}", h.last_dropped());
    if let Some(t) = timer_thread {
        t.stop();
    }
    server.stop();
}
