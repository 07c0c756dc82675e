//! Scatter-gather DMAs (`Cx::dma_read_sg` / `dma_write_sg`) of a `DeviceModel` served
//! over NetTLP: each segment goes to the adapter's memory as its own DMA, and the model
//! hears one `dma_done` for the whole list, as in the simulator.

use crate::{adapter, device, lock};
use pcielab_device::{Cx, DeviceModel, DmaId};
use pcielab_nettlp::hosted::ModelHandler;
use std::sync::Arc;
use std::time::Duration;

/// Segments of different lengths and alignments, one crossing a 4 KiB boundary.
const READ: [(u64, u64); 3] = [(0x4_0010, 100), (0x5_0ff0, 300), (0x6_0003, 1)];
const WRITE: [(u64, u64); 3] = [(0x8_0001, 1), (0x9_0ffc, 250), (0xa_0000, 150)];

/// Reads [`READ`] on the doorbell, then writes what it read to [`WRITE`]; then tries a
/// write whose data is shorter than its segments, which must fail whole.
#[derive(Debug, Default)]
struct Gather {
    /// `(id, ok, bytes)` of every `dma_done`, in order.
    done: Vec<(DmaId, bool, Vec<u8>)>,
}

impl DeviceModel for Gather {
    fn mem_write(&mut self, _bar: u8, _off: u64, _data: &[u8], cx: &mut Cx<'_>) {
        cx.dma_read_sg(&READ);
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        self.done.push((id, ok, data.to_vec()));
        match self.done.len() {
            1 => {
                cx.dma_write_sg(&WRITE, data.to_vec());
            }
            2 => {
                cx.dma_write_sg(&[(0xb_0000, 8), (0xc_0000, 8)], vec![0xee; 15]);
            }
            _ => {}
        }
    }
}

#[test]
fn a_scatter_gather_dma_over_nettlp_is_its_segments_with_one_dma_done() {
    let _g = lock();
    let a = adapter(|c| c.mmio_timeout = Duration::from_millis(300));
    let table = a.config().msix;
    let h = Arc::new(
        ModelHandler::new(Gather::default(), 4, a.config().bar4, 4096)
            .with_device(device(|_| {}), &table),
    );
    let server = crate::serve_dev(h.clone(), 1);
    let mut want = Vec::new();
    for &(addr, len) in &READ {
        crate::fill(&a, addr, len);
        want.extend((addr..addr + len).map(crate::pattern));
    }
    for (addr, _) in [(0xb_0000u64, 8u64), (0xc_0000, 8)] {
        a.memory().write(addr, &[0x11; 8]);
    }
    a.mmio_write(0, &1u32.to_le_bytes()).unwrap();
    assert!(
        crate::wait_until(Duration::from_secs(3), || h.with_model(|m| m.done.len())
            >= 3),
        "three dma_done calls ({:?})",
        h.with_model(|m| m.done.iter().map(|d| (d.0, d.1)).collect::<Vec<_>>())
    );
    let done = h.with_model(|m| std::mem::take(&mut m.done));
    assert_eq!(done.len(), 3, "one dma_done per DMA, not per segment");
    assert!(done[0].1, "the read succeeded");
    assert_eq!(
        done[0].2, want,
        "the segments' bytes, concatenated in order"
    );
    assert!(done[1].1, "the write succeeded");
    assert_ne!(done[0].0, done[1].0, "each DMA has its own id");
    // The write's TLPs are posted: its `dma_done` comes when they are sent, not when
    // the adapter has applied them, so wait (bounded) for the adapter to catch up.
    let mut at = 0usize;
    let expected: Vec<(u64, &[u8])> = WRITE
        .iter()
        .map(|&(addr, len)| {
            let seg = &want[at..at + len as usize];
            at += len as usize;
            (addr, seg)
        })
        .collect();
    let read = |addr: u64, len: usize| {
        let mut got = vec![0u8; len];
        a.memory().read(addr, &mut got);
        got
    };
    crate::wait_until(Duration::from_secs(3), || {
        expected.iter().all(|&(addr, w)| read(addr, w.len()) == w)
    });
    for &(addr, w) in &expected {
        assert_eq!(read(addr, w.len()), w, "segment at {addr:#x}");
    }
    assert!(!done[2].1, "15 bytes for 16 bytes of segments is refused");
    for addr in [0xb_0000u64, 0xc_0000] {
        let mut got = [0u8; 8];
        a.memory().read(addr, &mut got);
        assert_eq!(
            got, [0x11; 8],
            "a refused write writes nothing at {addr:#x}"
        );
    }
    assert_eq!(h.commands_dropped(), 0, "{:?}", h.last_dropped());
    server.stop();
}
