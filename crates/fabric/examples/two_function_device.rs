//! The device of `docs/devices.md` ("write your own device"): a copy engine with two
//! functions. Function 0 copies a buffer in host memory (its registers: source,
//! destination, length, doorbell) and raises its MSI-X vector 0 when done; function 1
//! counts copies and bytes and raises its own vector 0 when a copy fails.
//!
//! `cargo run -p pcielab-fabric --example two_function_device` (CI runs it; it checks
//! what it prints).

use pcielab_config::caps::{CapabilityList, MsixCap};
use pcielab_config::{Bar, Ids, Type0, PCIELAB_VENDOR_ID};
use pcielab_device::{Cx, DeviceModel, DeviceTiming, DmaId, ReadReply};
use pcielab_fabric::functional::HwFunction;
use pcielab_fabric::kinds::{
    common_keys, Device, EndpointCtx, KindError, KindRegistry, KindRole, KindSpec,
};
use pcielab_fabric::timed::{FabricSim, HostRead, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

// -- registers --------------------------------------------------------------------
/// Function 0, BAR0: where to copy from, to, how many bytes; writing DOORBELL starts.
const SRC: u64 = 0x00;
const DST: u64 = 0x08;
const LEN: u64 = 0x10;
const DOORBELL: u64 = 0x18;
/// What the driver writes to DOORBELL.
const GO: [u8; 8] = 1u64.to_le_bytes();
/// Function 1, BAR0 (read-only): copies done, bytes copied, copies failed.
const COPIES: u64 = 0x00;
const BYTES: u64 = 0x08;
const FAILED: u64 = 0x10;

// -- the functions ----------------------------------------------------------------
/// One function's configuration space: a 4 KiB register BAR (BAR0), and an MSI-X
/// table of one vector with its PBA in BAR2; PCI Express capability (Endpoint).
fn function(ctx: &EndpointCtx<'_>, devfn: u8) -> Result<HwFunction, KindError> {
    let mut bars = [None; 6];
    bars[0] = Some(Bar::Mem32 {
        size: 4096,
        prefetchable: false,
    });
    bars[2] = Some(Bar::Mem32 {
        size: 4096,
        prefetchable: false,
    });
    let ids = Ids {
        vendor_id: PCIELAB_VENDOR_ID,
        device_id: 0x00c0 + devfn as u16,
        revision: 1,
        class_code: 0x08_8000, // base system peripheral, other
    };
    let mut config = Type0 {
        ids,
        bars,
        multi_function: true,
        ..Type0::default()
    }
    .build()
    .map_err(|e| e.to_string())?;
    CapabilityList::new()
        .with(ctx.pcie)
        .with(MsixCap {
            table_size: 1,
            table_bir: 2,
            table_offset: 0,
            pba_bir: 2,
            pba_offset: 0x800,
        })
        .install(&mut config)
        .map_err(|e| e.to_string())?;
    Ok(HwFunction {
        devfn,
        config,
        bars,
        vfs: None,
    })
}

/// The kind's builder: the two functions and the model behind them.
fn build_copier(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    Ok(Device {
        functions: vec![function(ctx, 0)?, function(ctx, 1)?],
        model: Some(Box::new(Copier::default())),
    })
}

// -- the behaviour ----------------------------------------------------------------
#[derive(Debug, Default)]
enum Stage {
    #[default]
    Idle,
    /// Reading the source.
    Reading(DmaId),
    /// Writing the destination.
    Writing(DmaId),
}

#[derive(Debug, Default)]
struct Copier {
    src: u64,
    dst: u64,
    len: u64,
    stage: Stage,
    copies: u64,
    bytes: u64,
    failed: u64,
}

impl Copier {
    /// A copy ended: count it; say so on function 0's vector 0, or on function 1's
    /// when it failed.
    fn finish(&mut self, ok: bool, cx: &mut Cx<'_>) {
        self.stage = Stage::Idle;
        if ok {
            self.copies += 1;
            self.bytes += self.len;
            cx.act_as(0);
        } else {
            self.failed += 1;
            cx.act_as(1);
        }
        cx.msix(0);
    }
}

impl DeviceModel for Copier {
    /// A 250 MHz core with a 128-bit datapath; a register read takes 4 cycles.
    fn timing(&self) -> DeviceTiming {
        DeviceTiming {
            clock_mhz: 250,
            datapath_bits: 128,
            read_cycles: 4,
            ..DeviceTiming::NONE
        }
    }

    fn mem_read(&mut self, bar: u8, offset: u64, buf: &mut [u8], cx: &mut Cx<'_>) -> ReadReply {
        let value = match (cx.function(), bar, offset) {
            (0, 0, SRC) => self.src,
            (0, 0, DST) => self.dst,
            (0, 0, LEN) => self.len,
            (1, 0, COPIES) => self.copies,
            (1, 0, BYTES) => self.bytes,
            (1, 0, FAILED) => self.failed,
            _ => return ReadReply::Unsupported,
        };
        let n = buf.len().min(8);
        buf[..n].copy_from_slice(&value.to_le_bytes()[..n]);
        ReadReply::Now
    }

    fn mem_write(&mut self, bar: u8, offset: u64, data: &[u8], cx: &mut Cx<'_>) {
        if cx.function() != 0 || bar != 0 {
            return; // function 1's registers are read-only
        }
        let mut v = [0u8; 8];
        let n = data.len().min(8);
        v[..n].copy_from_slice(&data[..n]);
        let value = u64::from_le_bytes(v);
        match offset {
            SRC => self.src = value,
            DST => self.dst = value,
            LEN => self.len = value,
            DOORBELL if matches!(self.stage, Stage::Idle) => {
                self.stage = Stage::Reading(cx.dma_read(self.src, self.len));
            }
            _ => {}
        }
    }

    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut Cx<'_>) {
        match self.stage {
            Stage::Reading(r) if r == id && ok => {
                let mut buf = cx.buffer(data.len());
                buf.extend_from_slice(data);
                self.stage = Stage::Writing(cx.dma_write(self.dst, buf));
            }
            Stage::Reading(r) | Stage::Writing(r) if r == id => self.finish(ok, cx),
            _ => {}
        }
    }
}

// -- register the kind and run it -------------------------------------------------
const TOPOLOGY: &str = r#"
[[node]]
name = "rc"
kind = "root-complex"

[[node]]
name = "cp"
kind = "copier"

[[link]]
up = "rc.0"
down = "cp"
gen = 3
width = 4
"#;

fn registry() -> KindRegistry {
    let mut reg = KindRegistry::builtin();
    reg.register(KindSpec {
        name: "copier",
        role: KindRole::Endpoint(build_copier),
        keys: common_keys(256, 0x00c0),
        doc: "a two-function copy engine (docs/devices.md)",
    });
    reg
}

fn read_u64(sim: &mut FabricSim, addr: u64) -> u64 {
    match sim.mmio_read(addr, 8).expect("routable") {
        HostRead::Done { data, .. } => u64::from_le_bytes(data.try_into().expect("8 bytes")),
        other => panic!("read at {addr:#x}: {other:?}"),
    }
}

fn main() {
    let reg = registry();
    let topo = Topology::parse(TOPOLOGY, "copier.toml", &reg).expect("valid topology");
    let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).expect("built");
    let f0 = sim.bdf("cp").expect("enumerated");
    let f1 = Bdf::new(f0.bus(), f0.device(), 1).expect("a BDF");
    let regs = |sim: &FabricSim, f: Bdf| sim.tree().get(f).expect("function").bars[0].address;
    let (engine, stats) = (regs(&sim, f0), regs(&sim, f1));
    println!("copier: function 0 at {f0} (registers {engine:#x}), function 1 at {f1} (statistics {stats:#x})");

    // A 4 KiB buffer with a pattern, and a place to copy it to.
    let len = 4096u64;
    let src = sim.alloc_dma(len);
    let dst = sim.alloc_dma(len);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    sim.host_write(src, &pattern);

    // The driver: program the engine, ring the doorbell, wait for the interrupt.
    sim.mmio_write(engine + SRC, &src.to_le_bytes()).unwrap();
    sim.mmio_write(engine + DST, &dst.to_le_bytes()).unwrap();
    sim.mmio_write(engine + LEN, &len.to_le_bytes()).unwrap();
    sim.mmio_write(engine + DOORBELL, &GO).unwrap();
    let rang = sim.now();
    let (at, irq) = sim
        .wait_interrupt(SimDuration::from_us(100))
        .expect("the copy finishes");
    assert_eq!(irq.from, f0, "function 0 signals a finished copy");
    let mut copy = vec![0u8; len as usize];
    sim.host_read(dst, &mut copy);
    assert_eq!(copy, pattern, "the destination holds the source");
    let took = at.saturating_since(rang).as_ns_f64();
    println!("copied {len} B in {took:.0} ns (doorbell to MSI-X)");

    // Function 1 counts it. With function 0's Bus Master Enable cleared, the next copy
    // fails at once (a function may not issue DMA then), and function 1, still a bus
    // master, says so on its own vector.
    assert_eq!(read_u64(&mut sim, stats + COPIES), 1);
    assert_eq!(read_u64(&mut sim, stats + BYTES), len);
    let command = sim.cfg_read(f0, 0x04) & 0xffff;
    sim.cfg_write(f0, 0x04, command & !0x4);
    sim.mmio_write(engine + DOORBELL, &GO).unwrap();
    let (_, irq) = sim
        .wait_interrupt(SimDuration::from_us(100))
        .expect("the failure is signalled");
    assert_eq!(irq.from, f1, "function 1 signals a failed copy");
    assert_eq!(read_u64(&mut sim, stats + FAILED), 1);
    println!(
        "function 1: {} copy, {} bytes, {} failed",
        read_u64(&mut sim, stats + COPIES),
        read_u64(&mut sim, stats + BYTES),
        read_u64(&mut sim, stats + FAILED)
    );
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
}
