//! Any bytes, read as a script of what a host driver might do to a `simple-nic` in the
//! timed simulator: register writes of any size at any offset, descriptors with any
//! address and length (host memory, nowhere, the device's own BAR), doorbells and posts
//! with any index, time passing. The device never panics, the simulation comes to rest,
//! and (unless a descriptor pointed the device at its own registers) it raises at most
//! two interrupts per doorbell: the TX one, and the RX one of the frame coming back on
//! the loopback MAC.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;

const TOPO: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
                    [[node]]\nname=\"nic\"\nkind=\"simple-nic\"\nring_entries=16\nmax_frame=3000\nrx_fifo=2\n\
                    [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=3\nwidth=8\n";

fuzz_target!(|data: &[u8]| {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPO, "snic.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
    let bar4 = sim.bar("nic", 4).unwrap();
    let mem = sim.alloc_dma(0x10000);
    let (tx_ring, rx_ring) = (mem, mem + 0x100);
    sim.mmio_write(bar4, &tx_ring.to_le_bytes()).unwrap();
    sim.mmio_write(bar4 + 8, &rx_ring.to_le_bytes()).unwrap();
    let mut doorbells = 0u64;
    let mut at_itself = false;
    for c in data.chunks(12) {
        let b = |i: usize| c.get(i).copied().unwrap_or(0);
        let word = |i: usize| u64::from(b(i)) | u64::from(b(i + 1)) << 8;
        match b(0) % 5 {
            0 => {
                let off = u64::from(b(1) % 40);
                let len = [1usize, 2, 3, 4, 8][usize::from(b(2) % 5)];
                let bytes: Vec<u8> = (0..len).map(|i| b(3 + i)).collect();
                if off == 16 && len == 4 {
                    doorbells += 1;
                }
                let _ = sim.mmio_write(bar4 + off, &bytes);
            }
            1 => {
                let ring = if b(1) & 1 == 0 { tx_ring } else { rx_ring };
                let at = ring + 16 * u64::from(b(1) >> 1 & 15);
                let addr = match b(2) % 3 {
                    0 => mem + 0x1000 + word(3) % 0xe000,
                    1 => {
                        at_itself = true;
                        bar4 + word(3) % 64
                    }
                    _ => word(3) << 32 | word(5),
                };
                let mut d = addr.to_le_bytes().to_vec();
                d.extend_from_slice(&word(7).to_le_bytes());
                sim.host_write(at, &d);
            }
            2 | 3 => {
                let reg = if b(0) % 5 == 2 { 16 } else { 20 };
                if reg == 16 {
                    doorbells += 1;
                }
                let _ = sim.mmio_write(bar4 + reg, &u32::from(b(1) % 20).to_le_bytes());
            }
            _ => sim.run_for(SimDuration::from_us(u64::from(b(1)))),
        }
    }
    let limit = sim.now() + SimDuration::from_us(50_000);
    sim.run_until_idle(limit);
    assert!(sim.now() < limit, "the simulation did not come to rest");
    if !at_itself {
        let nic = sim.bdf("nic").unwrap();
        let irqs = sim
            .interrupts()
            .iter()
            .filter(|(_, i)| i.from == nic)
            .count() as u64;
        assert!(
            irqs <= 2 * doorbells,
            "{irqs} interrupts for {doorbells} doorbells"
        );
    }
});
