//! The drivers of the SR-IOV DMA engine ([`pcielab_device::dma_engine`]): host
//! programs that own one function each, the PF or a VF, as seed 003's physical and
//! virtual drivers do (§IV.C: "practically analogous in behaviour"; only the PF's
//! driver enables VFs and sets the payload and read-request sizes, which host
//! enumeration does here).
//!
//! A [`DmaFunction`] drives queue pair 0 of its function (the paper's one H2D and one
//! D2H engine): it sets up the two rings in host memory, maps what the
//! function may touch when there is an IOMMU (and nothing else), programs the
//! function's MSI-X table through its BAR (in the remappable format, with its own
//! handles, when the IOMMU remaps interrupts), and enables it. [`run`] then moves data
//! the way the paper's test program does (§IV.D–E): for each transfer the driver
//! fills a descriptor (CPU time `driver_ns` from the host model), rings the doorbell
//! (`doorbell_ns`), and sleeps until the descriptor's interrupt (`irq_ns`); the next
//! transfer starts after it. Throughput counts all of it, as the paper's does ("these
//! measures include the time needed to configure the descriptors").
//!
//! **A VF in a VM** ([`DmaDriverConfig::vm`]): the VF's driver runs in a guest, so
//! the addresses it writes into descriptors are guest-physical; the IOMMU maps them to
//! host memory in the VF's own domain (PCI passthrough, `FabricSim::assign_vm`). What
//! that costs comes from the host model: IOTLB misses with nested page walks
//! (`nested_walk_ns`), and interrupts injected into the guest (`vm_irq_ns` on top of
//! `irq_ns`).
//!
//! ```
//! use pcielab_fabric::{kinds::KindRegistry, topology::Topology};
//! use pcielab_fabric::timed::{FabricSim, SimConfig};
//! use pcielab_fabric::drivers::dma_engine::{run, Dir, DmaDriverConfig, DmaFunction};
//! let reg = KindRegistry::builtin();
//! let t = Topology::parse(
//!     "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
//!      [[node]]\nname = \"dma\"\nkind = \"dma-engine\"\nvfs = 2\n\
//!      [[link]]\nup = \"rc.0\"\ndown = \"dma\"\ngen = 3\nwidth = 8\n",
//!     "doc.toml", &reg)?;
//! let mut sim = FabricSim::new(&t, &reg, SimConfig::default())?;
//! // The PF and VF 2 each move 4 transfers of 64 KiB to the device, at once.
//! let mut fns = vec![
//!     DmaFunction::open(&mut sim, "dma", 0, DmaDriverConfig::default())?,
//!     DmaFunction::open(&mut sim, "dma", 2, DmaDriverConfig::default())?,
//! ];
//! let runs = run(&mut sim, &mut fns, Dir::H2d, 64 * 1024, 4)?;
//! assert!(runs.iter().all(|r| r.bytes == 4 * 64 * 1024 && r.errors == 0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{Observer, RunStage};
use crate::timed::{remappable_msi_address, FabricSim, HostRead, SimError};
use pcielab_device::dma_engine::{
    fill_pattern, reg, stream_hash, CTRL_CHECK, CTRL_ENABLE, DESC, DESC_STATUS, ENGINE_BASE,
    ENGINE_STRIDE, FLAG_IRQ, STATUS_DONE, STATUS_ERR, STREAM_HASH_START,
};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

/// A direction of transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Host to device: the engine reads host memory.
    H2d,
    /// Device to host: the engine writes host memory.
    D2h,
}

impl Dir {
    /// The engine of queue 0 in this direction.
    fn engine(self) -> u16 {
        match self {
            Dir::H2d => 0,
            Dir::D2h => 1,
        }
    }

    /// `"h2d"` or `"d2h"`.
    pub fn name(self) -> &'static str {
        match self {
            Dir::H2d => "h2d",
            Dir::D2h => "d2h",
        }
    }
}

/// A VF used by a guest through the IOMMU (PCI passthrough).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vm {
    /// Where the guest's memory starts in its guest-physical address space: the
    /// driver's first buffer is there, and the rest follow as in host memory.
    pub guest_base: u64,
}

/// How a function's driver works.
#[derive(Debug, Clone, PartialEq)]
pub struct DmaDriverConfig {
    /// Descriptors per ring (2..=65536).
    pub ring: u32,
    /// Largest size of one descriptor, bytes: a buffer larger than this takes several
    /// (the paper: one per physically contiguous region, so a huge page each).
    pub max_desc: u64,
    /// Fill H2D buffers with the test stream and check D2H data against it (and have
    /// the engine check the H2D stream); off, buffers are left as they are.
    pub check: bool,
    /// The function is used from a VM ([`Vm`]); `None`: by the host.
    pub vm: Option<Vm>,
    /// A run that makes no progress for this long ends with an error.
    pub stall_timeout: SimDuration,
}

impl Default for DmaDriverConfig {
    /// 64 descriptors per ring, 2 MiB (huge page) descriptors, checking on, host use,
    /// a 10 ms stall timeout.
    fn default() -> Self {
        DmaDriverConfig {
            ring: 64,
            max_desc: 2 << 20,
            check: true,
            vm: None,
            stall_timeout: SimDuration::from_ms(10),
        }
    }
}

/// One ring as its driver keeps it.
#[derive(Debug, Clone, Copy, Default)]
struct HostRing {
    base: u64,
    tail: u32,
}

/// The driver of one function (PF or VF) of a `dma-engine` node.
#[derive(Debug)]
pub struct DmaFunction {
    name: String,
    index: u16,
    bdf: Bdf,
    bar: u64,
    rings: [HostRing; 2],
    /// Host address of the first allocation and its guest-physical address (VM).
    gpa_shift: Option<(u64, u64)>,
    /// The data of each engine's interrupt as it reaches the host.
    irq_data: [u32; 2],
    /// The transfer buffer: host address, the function's address for it, size.
    buffer: Option<(u64, u64, u64)>,
    /// Stream offsets: bytes sent host to device, bytes expected device to host.
    h2d_sent: u64,
    d2h_seen: u64,
    h2d_hash: u64,
    d2h_mismatch: u64,
    cfg: DmaDriverConfig,
}

/// What one function's run did.
#[derive(Debug, Clone, PartialEq)]
pub struct DmaRun {
    /// The function's index (0: the PF).
    pub function: u16,
    /// Its requester ID.
    pub bdf: Bdf,
    /// Bytes moved.
    pub bytes: u64,
    /// Transfers done.
    pub transfers: u64,
    /// Descriptors that came back with the error bit.
    pub errors: u64,
    /// From the first transfer's set-up to the last one's interrupt handled.
    pub elapsed: SimDuration,
    /// Bytes × 8 / elapsed.
    pub gbps: f64,
}

fn bad(what: &'static str, value: String, allowed: &'static str) -> SimError {
    SimError::Param {
        what,
        value,
        allowed,
    }
}

impl DmaFunction {
    /// Sets up function `index` of `dma-engine` node `name` (0: the PF; 1..: its VFs,
    /// enabled by host enumeration): rings, IOMMU mappings, MSI-X, enable.
    pub fn open(
        sim: &mut FabricSim,
        name: &str,
        index: u16,
        cfg: DmaDriverConfig,
    ) -> Result<DmaFunction, SimError> {
        let bdf = sim.function_bdf(name, index).ok_or_else(|| {
            bad(
                "DMA engine function",
                format!("{name} function {index}"),
                "a dma-engine node and one of its functions (0: the PF, 1..: its enabled VFs)",
            )
        })?;
        let bar = sim.function_bar(name, index, 0).ok_or_else(|| {
            bad(
                "DMA engine function",
                format!("{name} function {index}"),
                "a function with a register BAR 0",
            )
        })?;
        if !(2..=65536).contains(&cfg.ring) {
            return Err(bad("ring", cfg.ring.to_string(), "2..=65536 descriptors"));
        }
        if cfg.max_desc == 0 || cfg.max_desc > 1 << 30 {
            return Err(bad("max_desc", cfg.max_desc.to_string(), "1..=1 GiB"));
        }
        if cfg.vm.is_some() && sim.config().iommu.is_none() {
            return Err(bad(
                "vm",
                "no IOMMU".into(),
                "an IOMMU (a VF in a VM is reached through it)",
            ));
        }
        if cfg.vm.is_some() {
            // PCI passthrough: the IOMMU translates the VF's DMA with nested walks,
            // and its interrupts are injected into the guest.
            sim.assign_vm(bdf)?;
        }
        let mut d = DmaFunction {
            name: name.to_string(),
            index,
            bdf,
            bar,
            rings: [HostRing::default(); 2],
            gpa_shift: None,
            irq_data: [0; 2],
            buffer: None,
            h2d_sent: 0,
            d2h_seen: 0,
            h2d_hash: STREAM_HASH_START,
            d2h_mismatch: 0,
            cfg,
        };
        // Interrupts: the vectors enumeration gave the function, or remapped ones.
        let remap = sim.config().iommu.is_some_and(|m| m.interrupt_remapping);
        let tbl = sim
            .function_bar(name, index, 2)
            .ok_or_else(|| bad("DMA engine function", name.to_string(), "an MSI-X BAR 2"))?;
        for e in 0..2u16 {
            let (addr, data, seen) = if remap {
                // A handle per function and engine, unique in the host; the interrupt
                // arrives as the vector the handle maps to.
                let handle = ((bdf.raw() as u32 * 2 + e as u32) & 0x7fff) as u16;
                let vector = 0x1_0000 + handle as u32;
                sim.iommu_map_interrupt_function(bdf, handle, vector)?;
                (remappable_msi_address(handle), 0, vector)
            } else {
                let entries = match sim.tree().get(bdf).map(|f| &f.interrupts) {
                    Some(crate::host::enumerate::Interrupts::MsiX { entries }) => entries,
                    _ => {
                        return Err(bad(
                            "DMA engine function",
                            format!("{name} function {index}"),
                            "a function whose MSI-X table enumeration programmed",
                        ))
                    }
                };
                let (addr, data) = *entries
                    .get(e as usize)
                    .ok_or_else(|| bad("MSI-X", format!("{name} vector {e}"), "2 vectors"))?;
                (addr, data, data)
            };
            // Written into the function's table by its driver (again: after a Function
            // Level Reset the table starts over, masked).
            let mut entry = Vec::with_capacity(16);
            entry.extend_from_slice(&(addr as u32).to_le_bytes());
            entry.extend_from_slice(&((addr >> 32) as u32).to_le_bytes());
            entry.extend_from_slice(&data.to_le_bytes());
            entry.extend_from_slice(&0u32.to_le_bytes());
            sim.mmio_write(tbl + 16 * e as u64, &entry)?;
            d.irq_data[e as usize] = seen;
        }
        for e in 0..2u16 {
            let bytes = d.cfg.ring as u64 * DESC;
            let base = d.alloc(sim, bytes)?;
            sim.host_write(base.0, &vec![0; bytes as usize]);
            let regs = bar + ENGINE_BASE + e as u64 * ENGINE_STRIDE;
            sim.mmio_write(regs + reg::BASE, &base.1.to_le_bytes())?;
            sim.mmio_write(regs + reg::SIZE, &d.cfg.ring.to_le_bytes())?;
            d.rings[e as usize] = HostRing {
                base: base.0,
                tail: 0,
            };
        }
        let ctrl = CTRL_ENABLE | if d.cfg.check { CTRL_CHECK } else { 0 };
        sim.mmio_write(bar + reg::CTRL, &ctrl.to_le_bytes())?;
        // Let the set-up writes land.
        sim.run_for(SimDuration::from_us(2));
        Ok(d)
    }

    /// The function's requester ID.
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }

    /// The function's index on its device (0: the PF).
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Allocates `len` bytes of host memory the function may use: (host address,
    /// the address the function is given: the same, or guest-physical in a VM). With
    /// an IOMMU it is mapped in the function's domain.
    pub fn alloc(&mut self, sim: &mut FabricSim, len: u64) -> Result<(u64, u64), SimError> {
        let pages = len.div_ceil(4096) * 4096;
        let hpa = sim.alloc_dma(pages);
        let dev = match self.cfg.vm {
            Some(vm) => {
                // The guest's memory is the host's from the first allocation on,
                // shifted to `guest_base`.
                let (h0, g0) = *self.gpa_shift.get_or_insert((hpa, vm.guest_base));
                hpa.checked_sub(h0)
                    .and_then(|off| g0.checked_add(off))
                    .ok_or_else(|| {
                        bad(
                            "vm guest_base",
                            format!("{g0:#x} (host memory at {hpa:#x}, first at {h0:#x})"),
                            "a guest-physical window that holds every allocation",
                        )
                    })?
            }
            None => hpa,
        };
        if sim.config().iommu.is_some() {
            sim.iommu_map_function(self.bdf, dev, hpa, pages)?;
        }
        Ok((hpa, dev))
    }

    fn regs(&self, dir: Dir) -> u64 {
        self.bar + ENGINE_BASE + dir.engine() as u64 * ENGINE_STRIDE
    }

    /// Writes descriptors for `[dev, dev + len)` (split at `max_desc`), the last with
    /// the interrupt flag, and rings the doorbell: the index of the last one.
    pub fn post(
        &mut self,
        sim: &mut FabricSim,
        dir: Dir,
        dev: u64,
        len: u64,
    ) -> Result<u32, SimError> {
        let ring = self.cfg.ring;
        let r = &mut self.rings[dir.engine() as usize];
        let pieces = len.div_ceil(self.cfg.max_desc).max(1);
        if pieces >= ring as u64 {
            return Err(bad(
                "transfer",
                format!("{len} bytes in {pieces} descriptors"),
                "fewer descriptors than the ring has entries",
            ));
        }
        let mut off = 0;
        let mut last = 0;
        for i in 0..pieces {
            let n = self.cfg.max_desc.min(len - off);
            let flags = if i + 1 == pieces { FLAG_IRQ } else { 0 };
            let mut d = [0u8; DESC as usize];
            d[0..8].copy_from_slice(&(dev + off).to_le_bytes());
            d[8..16].copy_from_slice(&n.to_le_bytes());
            d[16..20].copy_from_slice(&flags.to_le_bytes());
            sim.host_write(r.base + r.tail as u64 * DESC, &d);
            last = r.tail;
            r.tail = (r.tail + 1) % ring;
            off += n;
        }
        let tail = r.tail;
        sim.doorbell(self.regs(dir) + reg::TAIL, &tail.to_le_bytes())?;
        Ok(last)
    }

    /// The status word the engine wrote back into descriptor `idx` of `dir`'s ring
    /// (`STATUS_DONE`, `STATUS_ERR`; 0 while it is not done).
    pub fn descriptor_status(&self, sim: &FabricSim, dir: Dir, idx: u32) -> u32 {
        let mut b = [0u8; 4];
        let r = &self.rings[dir.engine() as usize];
        sim.host_read(r.base + idx as u64 * DESC + DESC_STATUS, &mut b);
        u32::from_le_bytes(b)
    }

    /// Reads a u64 register of the function.
    pub fn read_reg(&self, sim: &mut FabricSim, off: u64) -> Result<u64, SimError> {
        match sim.mmio_read(self.bar + off, 8)? {
            HostRead::Done { data, .. } => Ok(u64::from_le_bytes(data[..8].try_into().unwrap())),
            other => Err(bad(
                "DMA engine register read",
                format!("{} function {}: {other:?}", self.name, self.index),
                "a successful completion",
            )),
        }
    }

    /// The hash of every byte this driver sent host to device (compare with the
    /// engine's `H2D_HASH`).
    pub fn h2d_hash(&self) -> u64 {
        self.h2d_hash
    }

    /// D2H bytes that did not match the function's test stream (with `check`).
    pub fn d2h_mismatches(&self) -> u64 {
        self.d2h_mismatch
    }

    /// The buffer for transfers of `size` bytes (allocated anew when a larger one
    /// is needed): its host address and the function's address for it.
    pub fn buffer(&mut self, sim: &mut FabricSim, size: u64) -> Result<(u64, u64), SimError> {
        match self.buffer {
            Some((h, d, len)) if size <= len => Ok((h, d)),
            _ => {
                let (h, d) = self.alloc(sim, size)?;
                self.buffer = Some((h, d, size));
                Ok((h, d))
            }
        }
    }
}

/// One function's progress in [`run`].
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    done: u64,
    waiting: Option<u32>,
    errors: u64,
    end: SimTime,
}

/// Runs `count` transfers of `size` bytes in direction `dir` on every function of
/// `fns` at once, each function one transfer after the other (set-up, doorbell,
/// interrupt), as the paper's test program does: what each function did.
///
/// With `check`, H2D buffers hold the function's test stream before each transfer
/// and D2H buffers are checked against it after ([`DmaFunction::d2h_mismatches`]).
pub fn run(
    sim: &mut FabricSim,
    fns: &mut [DmaFunction],
    dir: Dir,
    size: u64,
    count: u64,
) -> Result<Vec<DmaRun>, SimError> {
    run_observed(sim, fns, dir, size, count, &mut |_, _| Ok(()))
}

/// Simulated time [`run_observed`] lets pass at most between two calls of its
/// observer (20 µs).
const STEP: SimDuration = SimDuration::from_us(20);

/// [`run`], calling `observe` with [`RunStage::Step`] after each interrupt the
/// functions' drivers handled, and at least every 20 µs of simulated time while they
/// wait for one; the caller that set the simulation up calls `Begin` and `End` itself.
pub fn run_observed(
    sim: &mut FabricSim,
    fns: &mut [DmaFunction],
    dir: Dir,
    size: u64,
    count: u64,
    observe: &mut Observer<'_>,
) -> Result<Vec<DmaRun>, SimError> {
    if size == 0 || size > 1 << 30 {
        return Err(bad("transfer size", size.to_string(), "1..=1 GiB"));
    }
    let host = sim.config().host;
    let e = dir.engine() as usize;
    let mut bufs = Vec::with_capacity(fns.len());
    for f in fns.iter_mut() {
        bufs.push(f.buffer(sim, size)?);
    }
    let mut st = vec![Progress::default(); fns.len()];
    let mut seen = sim.interrupts().len();
    let start = sim.now();
    let mut scratch = vec![
        0u8;
        if fns.iter().any(|f| f.cfg.check) {
            size as usize
        } else {
            0
        }
    ];
    loop {
        for (i, f) in fns.iter_mut().enumerate() {
            if st[i].waiting.is_some() || st[i].done >= count {
                continue;
            }
            let (hpa, dev) = bufs[i];
            if dir == Dir::H2d {
                if f.cfg.check {
                    fill_pattern(f.index, f.h2d_sent, &mut scratch);
                    sim.host_write(hpa, &scratch);
                    f.h2d_hash = stream_hash(f.h2d_hash, &scratch);
                }
                f.h2d_sent += size;
            }
            // The ioctl and the descriptor set-up, then the doorbell.
            sim.driver_work(1);
            st[i].waiting = Some(f.post(sim, dir, dev, size)?);
        }
        if st.iter().all(|p| p.done >= count) {
            break;
        }
        let from = seen;
        let limit = sim.now() + fns[0].cfg.stall_timeout;
        // Up to the limit in steps of at most STEP, the observer called between them.
        let mut until = sim.now();
        let came = loop {
            until = (until + STEP).min(limit);
            if sim.run_while(until, |s| s.interrupts().len() > from) {
                break true;
            }
            if until >= limit {
                break false;
            }
            observe(sim, RunStage::Step).map_err(SimError::Observer)?;
        };
        if !came {
            let waiting: Vec<String> = fns
                .iter()
                .zip(&st)
                .filter(|(_, p)| p.waiting.is_some())
                .map(|(f, _)| format!("{} function {}", f.name, f.index))
                .collect();
            return Err(bad(
                "DMA engine run",
                format!(
                    "no interrupt for {:?} of {}",
                    fns[0].cfg.stall_timeout,
                    waiting.join(", ")
                ),
                "every transfer to end with its interrupt",
            ));
        }
        let n = sim.interrupts().len();
        for k in seen..n {
            let (_, irq) = sim.interrupts()[k];
            let Some(i) = fns
                .iter()
                .position(|f| f.bdf == irq.from && f.irq_data[e] == irq.data)
            else {
                continue; // not one of ours
            };
            // The handler runs after the interrupt's delivery; in a guest, after its
            // injection too.
            let irq = host.irq
                + if sim.vm_assigned(irq.from) {
                    host.vm_irq
                } else {
                    SimDuration::ZERO
                };
            if irq > SimDuration::ZERO {
                sim.run_for(irq);
            }
            let Some(idx) = st[i].waiting else {
                continue;
            };
            let status = fns[i].descriptor_status(sim, dir, idx);
            if status & STATUS_DONE == 0 {
                continue;
            }
            if status & STATUS_ERR != 0 {
                st[i].errors += 1;
            }
            st[i].done += 1;
            st[i].waiting = None;
            st[i].end = sim.now();
            let f = &mut fns[i];
            if dir == Dir::D2h && f.cfg.check {
                let (hpa, _) = bufs[i];
                let mut got = vec![0u8; size as usize];
                sim.host_read(hpa, &mut got);
                fill_pattern(f.index, f.d2h_seen, &mut scratch);
                f.d2h_mismatch += got.iter().zip(&scratch).filter(|(a, b)| a != b).count() as u64;
            }
            if dir == Dir::D2h {
                f.d2h_seen += size;
            }
        }
        seen = n;
        observe(sim, RunStage::Step).map_err(SimError::Observer)?;
    }
    Ok(fns
        .iter()
        .zip(&st)
        .map(|(f, p)| {
            let elapsed = p.end.saturating_since(start);
            let bytes = p.done * size;
            DmaRun {
                function: f.index,
                bdf: f.bdf,
                bytes,
                transfers: p.done,
                errors: p.errors,
                elapsed,
                gbps: if elapsed > SimDuration::ZERO {
                    bytes as f64 * 8.0 / (elapsed.as_ps() as f64 / 1000.0)
                } else {
                    0.0
                },
            }
        })
        .collect())
}
