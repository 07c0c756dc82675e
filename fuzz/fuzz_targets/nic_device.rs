//! Any bytes, read as a script of what a host driver might do to pcie-bench's NIC
//! (`kind = "nic"`, batched, two queue pairs, MAC loopback) in the timed simulator:
//! register writes of any size at any offset (ring bases and sizes, doorbells, control,
//! moderation), descriptors with any address and length (host memory, nowhere, the
//! NIC's own registers), time passing. The NIC never panics, the simulation comes to
//! rest (within 50 ms after the longest interrupt moderation delay the script set:
//! a pending interrupt may legitimately wait that long), and (unless a descriptor pointed the NIC at its own registers) it never
//! receives more frames than it sent: on a loopback MAC every received frame is one of
//! its own.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;

const TOPO: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
                    [[node]]\nname=\"nic\"\nkind=\"nic\"\nmodel=\"batched\"\nqueues=2\n\
                    rx=\"loopback\"\neth_gbps=100\nrx_fifo=\"4KiB\"\nirq_delay_ns=5000\n\
                    [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=3\nwidth=8\n";

fuzz_target!(|data: &[u8]| {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPO, "nic.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
    let bar = sim.bar("nic", 0).unwrap();
    let mem = sim.alloc_dma(0x10000);
    // A plausible start: both queue pairs' rings in host memory, 8 entries, enabled.
    for q in 0..2u64 {
        let r = bar + 0x100 + 0x40 * q;
        let ring = mem + 0x200 * q;
        let _ = sim.mmio_write(r, &ring.to_le_bytes());
        let _ = sim.mmio_write(r + 0x08, &8u32.to_le_bytes());
        let _ = sim.mmio_write(r + 0x18, &(ring + 0x100).to_le_bytes());
        let _ = sim.mmio_write(r + 0x20, &8u32.to_le_bytes());
    }
    let _ = sim.mmio_write(bar, &1u32.to_le_bytes());
    let mut at_itself = false;
    // The script's writes to the first registers, to know the longest moderation delay
    // it set (IRQ_DELAY, a u32 of nanoseconds at 0x0c; the topology sets 5 µs).
    let mut shadow = [0u8; 0x10];
    shadow[0x0c..0x10].copy_from_slice(&5000u32.to_le_bytes());
    let mut longest_delay = 5000u64;
    for c in data.chunks(12) {
        let b = |i: usize| c.get(i).copied().unwrap_or(0);
        let word = |i: usize| u64::from(b(i)) | u64::from(b(i + 1)) << 8;
        match b(0) % 5 {
            0 => {
                let off = u64::from(b(1)) * 2 % 0x200;
                let len = [1usize, 2, 4, 8][usize::from(b(2) % 4)];
                let bytes: Vec<u8> = (0..len).map(|i| b(3 + i)).collect();
                let _ = sim.mmio_write(bar + off, &bytes);
                for (i, &v) in bytes.iter().enumerate() {
                    if let Some(r) = shadow.get_mut(off as usize + i) {
                        *r = v;
                    }
                }
                let mut delay = [0u8; 4];
                delay.copy_from_slice(&shadow[0x0c..0x10]);
                longest_delay = longest_delay.max(u64::from(u32::from_le_bytes(delay)));
            }
            1 => {
                // A descriptor in one of the four rings.
                let at = mem + 0x100 * u64::from(b(1) % 4) + 16 * u64::from(b(1) >> 2 & 7);
                let addr = match b(2) % 3 {
                    0 => mem + 0x1000 + word(3) % 0xe000,
                    1 => {
                        at_itself = true;
                        bar + word(3) % 0x200
                    }
                    _ => word(3) << 32 | word(5),
                };
                let mut d = addr.to_le_bytes().to_vec();
                d.extend_from_slice(&word(7).to_le_bytes());
                d.extend_from_slice(&[b(9), b(10), 0, 0, 0, 0]);
                sim.host_write(at, &d);
            }
            2 | 3 => {
                // A doorbell: transmit or receive tail of either queue pair.
                let q = u64::from(b(1) & 1);
                let off = 0x100 + 0x40 * q + if b(0) % 5 == 2 { 0x0c } else { 0x24 };
                let _ = sim.mmio_write(bar + off, &u32::from(b(2) % 10).to_le_bytes());
            }
            _ => sim.run_for(SimDuration::from_us(u64::from(b(1)))),
        }
    }
    let limit = sim.now() + SimDuration::from_us(50_000) + SimDuration::from_ns(longest_delay);
    sim.run_until_idle(limit);
    assert!(sim.now() < limit, "the simulation did not come to rest");
    if !at_itself {
        let j = sim.model("nic").unwrap().report().unwrap();
        let (tx, rx) = (
            j["tx_packets"].as_u64().unwrap(),
            j["rx_packets"].as_u64().unwrap(),
        );
        assert!(rx <= tx, "received {rx} frames, sent {tx}: {j}");
    }
});
