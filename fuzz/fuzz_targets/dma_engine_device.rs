//! Any bytes, read as a script of what the PF's and two VFs' drivers (or guests) might
//! do to seed 003's SR-IOV DMA engine (`kind = "dma-engine"`, `vfs = 2`) in the timed
//! simulator: register writes of any size at any offset of any function's BAR (ring
//! bases and sizes, doorbells, control), descriptors with any address and size (host
//! memory, nowhere, the engine's own registers), Function Level Resets of a VF, time
//! passing. The engine never panics, the simulation comes to rest, and every interrupt
//! the host gets comes from one of the engine's functions.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;

const TOPO: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
                    [[node]]\nname=\"dma\"\nkind=\"dma-engine\"\nvfs=2\nchunk=1024\n\
                    tags_per_function=8\n\
                    [[link]]\nup=\"rc.0\"\ndown=\"dma\"\ngen=3\nwidth=8\n";

fuzz_target!(|data: &[u8]| {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPO, "dma.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
    let bars: Vec<u64> = (0..3).map(|f| sim.function_bar("dma", f, 0).unwrap()).collect();
    let bdfs: Vec<_> = (0..3).map(|f| sim.function_bdf("dma", f).unwrap()).collect();
    let mem = sim.alloc_dma(0x10000);
    // A plausible start: every function's two rings in host memory, 4 entries, enabled.
    for (f, &bar) in bars.iter().enumerate() {
        for e in 0..2u64 {
            let r = bar + 0x100 + 0x40 * e;
            let ring = mem + 0x400 * (2 * f as u64 + e);
            let _ = sim.mmio_write(r, &ring.to_le_bytes());
            let _ = sim.mmio_write(r + 0x08, &4u32.to_le_bytes());
        }
        let _ = sim.mmio_write(bar + 4, &5u32.to_le_bytes());
    }
    for c in data.chunks(12) {
        let b = |i: usize| c.get(i).copied().unwrap_or(0);
        let word = |i: usize| u64::from(b(i)) | u64::from(b(i + 1)) << 8;
        let f = usize::from(b(1) % 3);
        match b(0) % 6 {
            0 => {
                let off = u64::from(b(2)) * 4 % 0x1000;
                let len = [1usize, 2, 4, 8][usize::from(b(3) % 4)];
                let bytes: Vec<u8> = (0..len).map(|i| b(4 + i)).collect();
                let _ = sim.mmio_write(bars[f] + off, &bytes);
            }
            1 => {
                // A descriptor in one of the six rings.
                let ring = mem + 0x400 * u64::from(b(2) % 6);
                let at = ring + 32 * u64::from(b(2) >> 3 & 3);
                let addr = match b(3) % 3 {
                    0 => mem + 0x2000 + word(4) % 0xd000,
                    1 => bars[usize::from(b(4) % 3)] + word(5) % 0x1000,
                    _ => word(4) << 32 | word(6),
                };
                let len = match b(8) % 3 {
                    0 => word(9) % 0x3000,
                    1 => 0,
                    _ => word(9) << 24,
                };
                let mut d = addr.to_le_bytes().to_vec();
                d.extend_from_slice(&len.to_le_bytes());
                d.extend_from_slice(&u32::from(b(11) & 1).to_le_bytes());
                d.extend_from_slice(&[0; 12]);
                sim.host_write(at, &d);
            }
            2 | 3 => {
                // A doorbell of either engine.
                let off = 0x10c + 0x40 * u64::from(b(2) & 1);
                let _ = sim.mmio_write(bars[f] + off, &u32::from(b(3) % 6).to_le_bytes());
            }
            4 if f > 0 && b(2) & 7 == 0 => {
                // Function Level Reset of a VF (Device Control, Initiate FLR): its
                // PCI Express capability's Device Control, found by walking the list.
                let fab = sim.fabric();
                let fid = fab.function_at(bdfs[f]).unwrap();
                let cs = &fab.functions[fid.0 as usize].config;
                let pcie = pcielab_config::caps::walk(cs.bytes())
                    .0
                    .iter()
                    .find(|c| !c.extended && c.id == 0x10)
                    .map(|c| c.offset);
                if let Some(p) = pcie {
                    let devctl = p + 8;
                    let dw = sim.cfg_read(bdfs[f], devctl);
                    sim.cfg_write(bdfs[f], devctl, dw | 0x8000);
                }
            }
            _ => sim.run_for(SimDuration::from_us(u64::from(b(2)))),
        }
    }
    let limit = sim.now() + SimDuration::from_us(50_000);
    sim.run_until_idle(limit);
    assert!(sim.now() < limit, "the simulation did not come to rest");
    for (_, irq) in sim.interrupts() {
        assert!(bdfs.contains(&irq.from), "an interrupt from {}", irq.from);
    }
    let _ = sim.model("dma").unwrap().report().unwrap();
});
