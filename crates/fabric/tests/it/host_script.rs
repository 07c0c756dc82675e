//! A host that does anything: a script of actions (configuration writes anywhere, link
//! failures, hot-plug, MMIO and I/O, stray completions, recovery, PME_Turn_Off, IOMMU
//! unmaps, time passing) on a simulated fabric under DMA traffic, with a device that
//! misbehaves in every way its API allows ([`ChaosDevice`]). Shared by the chaos
//! property test and the `sim_chaos` fuzz target (which includes this file).

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, AtomicOp, DmaId, DmaOpKind, DmaStream, Endpoint, EpCx, FabricSim, IommuConfig,
    ReadReply, ReadTicket, SimConfig, VdmRoute, VendorMessage,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::{Bdf, ByteEnables, CplStatus, Tag};

/// RC ─ switch (two surprise hot-plug slots) ─ ep (with an I/O BAR), ep2 (an AtomicOp
/// completer); ep3 on a
/// second root port (an orderly hot-plug slot: attention button, power controller).
const TOPO: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=2\nhotplug_power=true\n\
    [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\nhotplug=true\n\
    [[node]]\nname=\"ep\"\nkind=\"psmem\"\nio_size=256\n\
    [[node]]\nname=\"ep2\"\nkind=\"psmem\"\natomics=true\n\
    [[node]]\nname=\"ep3\"\nkind=\"psmem\"\n\
    [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
    [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n\
    [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen=4\nwidth=2\n\
    [[link]]\nup=\"rc.1\"\ndown=\"ep3\"\ngen=2\nwidth=1\n";
const NODES: [&str; 4] = ["sw", "ep", "ep2", "ep3"];
const EPS: [&str; 3] = ["ep", "ep2", "ep3"];

/// Runs a script: its first byte picks the configuration (bit 0 ASPM, 1 L1 substates,
/// 2 ECRC, 3 LCRC errors at 2 %, 4 IOMMU with ATS and PRI, 5 devices that take 30 µs
/// to be ready after a reset (and PASID support with the IOMMU), 6 interrupt remapping
/// with the IOMMU, 7 burst mode with bursts of up to 16 TLPs); then 8 bytes per
/// action, at most 64 actions. Returns the trace hash, the kernel events still pending
/// 20 ms after the script, and the TLP records alive then.
pub fn run(data: &[u8]) -> (u64, usize, i64) {
    let Some((&pick, script)) = data.split_first() else {
        return (0, 0, 0);
    };
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPO, "fuzz.toml", &reg).unwrap();
    let cfg = SimConfig {
        trace: true,
        link_training_time: SimDuration::from_us(5),
        completion_timeout: SimDuration::from_us(100),
        device_ready_wait: SimDuration::from_us(20),
        aspm: if pick & 1 != 0 { 3 } else { 0 },
        aspm_l1ss: pick & 2 != 0,
        ecrc: pick & 4 != 0,
        error_rate: if pick & 8 != 0 { 0.02 } else { 0.0 },
        iommu: (pick & 16 != 0).then(|| IommuConfig {
            interrupt_remapping: pick & 64 != 0,
            pasid: pick & 32 != 0,
            ..IommuConfig::default()
        }),
        ats: pick & 16 != 0,
        pri: pick & 16 != 0,
        device_ready_time: SimDuration::from_us(if pick & 32 != 0 { 30 } else { 0 }),
        burst: if pick & 128 != 0 { 16 } else { 1 },
        ..SimConfig::default()
    };
    let mut s = FabricSim::new(&topo, &reg, cfg).unwrap();
    let mut dma = Vec::new();
    for (i, name) in EPS.iter().enumerate() {
        let base = s.alloc_dma(1 << 16);
        dma.push(base);
        if pick & 16 != 0 {
            s.iommu_map(name, base, base, 1 << 15).unwrap();
            s.iommu_map_on_demand(name, base + (1 << 15), base + (1 << 15), 1 << 15)
                .unwrap();
            if pick & 32 != 0 {
                s.iommu_map_pasid(name, 1, base, base + (1 << 15), 1 << 15)
                    .unwrap();
                s.iommu_map_on_demand_pasid(name, 2, base, base, 1 << 15)
                    .unwrap();
            }
        }
        if *name == "ep3" {
            continue; // the misbehaving device, attached below
        }
        let op = [DmaOpKind::Write, DmaOpKind::Read][i];
        let st = DmaStream::new(op, 700, 4, 40, base, 1 << 16, AddrPattern::Random);
        s.attach(name, Box::new(st)).unwrap();
    }
    // ep3 misbehaves: it reads the script too, as its own actions.
    let targets = [
        dma[2],
        0xfee0_0000,
        s.bar("ep", 0).unwrap_or(0),
        s.bar("ep2", 0).unwrap_or(0),
    ];
    let device = ChaosDevice {
        actions: script
            .chunks_exact(8)
            .take(64)
            .map(|c| c.try_into().unwrap())
            .collect(),
        targets,
        ..ChaosDevice::default()
    };
    s.attach("ep3", Box::new(device)).unwrap();
    // The misbehaving device may issue AtomicOps (until the script clears the bit).
    s.enable_atomic_ops_to_root("ep3", &[4, 8, 16]).unwrap();
    let funcs: Vec<_> = s
        .tree()
        .functions
        .iter()
        .map(|f| s.fabric().function_at(f.bdf).unwrap())
        .collect();
    let bars: Vec<Option<u64>> = EPS.iter().map(|n| s.bar(n, 0)).collect();
    let io = s.bar("ep", 1);
    let saved: Vec<_> = NODES.iter().map(|n| s.save_below(n).unwrap()).collect();
    for op in script.chunks_exact(8).take(64) {
        let v = u32::from_le_bytes([op[4], op[5], op[6], op[7]]);
        let f = funcs[op[1] as usize % funcs.len()];
        let bdf = s.fabric().bdf(f);
        let reg = u16::from_le_bytes([op[2], op[3]]) & 0xffc;
        match op[0] % 12 {
            0 => s.cfg_write(bdf, reg, v),
            1 => {
                let old = s.cfg_read(bdf, reg);
                s.cfg_write(bdf, reg, old ^ (1 << (v % 32)));
            }
            2 => {
                let be = ByteEnables::new((v & 0xf) as u8).unwrap_or(ByteEnables::ALL);
                let _ = s.config_write(bdf, reg, v, be);
            }
            3 => {
                let _ = s.config_read(bdf, reg);
            }
            4 => s.run_for(SimDuration::from_ns(v as u64 % 200_000)),
            5 => {
                let n = NODES[op[1] as usize % 4];
                let _ = if op[2] & 1 == 0 {
                    s.link_down(n)
                } else {
                    s.link_up(n)
                };
            }
            6 => {
                let n = ["ep2", "ep3"][op[1] as usize % 2];
                let _ = match op[2] % 3 {
                    0 => s.unplug(n),
                    1 => s.plug(n),
                    _ => s.press_attention_button(n),
                };
            }
            7 => {
                if let Some(bar) = bars[op[1] as usize % 3] {
                    let a = bar + (v as u64 & 0xffc);
                    let _ = if op[2] & 1 == 0 {
                        s.mmio_write(a, &v.to_le_bytes()).map(|_| ())
                    } else {
                        s.mmio_read(a, 1 + (op[3] as u32 % 8)).map(|_| ())
                    };
                }
            }
            8 => {
                let _ = s.inject_stray_completion(EPS[op[1] as usize % 3], (v & 0x3ff) as u16);
            }
            9 => {
                let n = op[1] as usize % 4;
                let _ = s.recover(NODES[n], &saved[n]);
            }
            10 => {
                let rp = Bdf::new(0, 1 + op[1] % 2, 0).unwrap();
                let _ = s.pme_turn_off(rp, SimDuration::from_us(50));
            }
            _ => {
                if pick & 16 != 0 {
                    let e = op[1] as usize % 3;
                    let _ = s.iommu_unmap(EPS[e], dma[e] + (v as u64 % 16) * 4096, 4096);
                } else if let Some(a) = io {
                    let a = a as u32 + (v & 0xfc);
                    let _ = if op[2] & 1 == 0 {
                        s.io_write(a, &[1, 2, 3, 4])
                    } else {
                        s.io_read(a, 4)
                    };
                }
            }
        }
    }
    for n in NODES {
        let _ = s.link_up(n);
    }
    let limit = s.now() + SimDuration::from_ms(20);
    s.run_until_idle(limit);
    (
        s.trace().map_or(0, |t| t.hash()),
        s.pending_events(),
        s.tlps_in_flight(),
    )
}

/// A device that does whatever its bytes say, one action every 0.2–5.3 µs: DMA reads
/// and writes of any length (none included) anywhere (host memory, the interrupt range,
/// peers' BARs, any address), some with a PASID (mapped, unmapped or wider than 20
/// bits), poisoned writes, completions for tickets it holds (stale
/// after a reset, which it ignores) or makes up, interrupts of any vector, INTx,
/// vendor-defined messages on any route, PM_PME, PME_TO_Ack unasked, LTR, AtomicOps
/// of every kind anywhere (misaligned ones included), TLPs it
/// builds itself (malformed or not: see [`raw_tlp`]); its BAR
/// reads are answered now, later (perhaps never), poisoned or not at all, as the last
/// action's byte says.
#[derive(Debug, Default)]
struct ChaosDevice {
    actions: Vec<[u8; 8]>,
    next: usize,
    targets: [u64; 4],
    tickets: Vec<ReadTicket>,
    mood: u8,
}

/// A TLP as a device might get it wrong: a memory write (perhaps over MPS), a read
/// (perhaps crossing 4 KiB), a completion nobody asked for, or bytes of anything;
/// with one byte changed when `a[1]` says so.
fn raw_tlp(a: [u8; 8], addr: u64, len: u64, me: Bdf) -> Vec<u8> {
    let tag = Tag::from_bits_truncate(u16::from(a[2]));
    let mut b = match a[3] % 4 {
        0 => TlpRepr::mem_write(
            me,
            tag,
            addr & !3,
            &vec![a[2]; (len as usize % 512 + 1) * 4],
        )
        .and_then(|r| r.to_vec())
        .unwrap_or_default(),
        1 => TlpRepr::mem_read(me, tag, addr & !3, (len % 1024 + 1) as u16)
            .and_then(|r| r.to_vec())
            .unwrap_or_default(),
        2 => TlpRepr::completion(me, Bdf::from_raw(0), tag, CplStatus::Sc, 4, 0, &[a[4]; 4])
            .and_then(|r| r.to_vec())
            .unwrap_or_default(),
        _ => a
            .iter()
            .cycle()
            .copied()
            .take(12 + len as usize % 60)
            .collect(),
    };
    if a[1] & 0x80 != 0 && !b.is_empty() {
        let i = a[4] as usize % b.len();
        b[i] = a[5];
    }
    b
}

impl ChaosDevice {
    fn act(&mut self, a: [u8; 8], cx: &mut EpCx<'_>) {
        let v = u32::from_le_bytes([a[4], a[5], a[6], a[7]]);
        let addr = match a[1] % 5 {
            4 => u64::from(v) << (a[2] % 40),
            k => self.targets[k as usize] + u64::from(v % 0x2_0000),
        };
        let len = u64::from(u16::from_le_bytes([a[2], a[3]])) % 9000;
        self.mood = a[3];
        // Some DMAs in a process's address space: PASID 1 (mapped when the IOMMU
        // supports PASID), 2 (mapped on demand), others, and some beyond 20 bits.
        let pasid = (a[3] & 0x80 != 0).then_some(match v % 4 {
            0 => 1,
            1 => 2,
            _ => (v >> 9) & 0x1f_ffff,
        });
        match (a[0] % 12, pasid) {
            (0, None) => {
                cx.dma_read(addr, len);
            }
            (0, Some(p)) => {
                cx.dma_read_pasid(addr, len, p);
            }
            (1, None) => {
                cx.dma_write(addr, vec![a[2]; len as usize]);
            }
            (1, Some(p)) => {
                cx.dma_write_pasid(addr, vec![a[2]; len as usize], p);
            }
            (2, _) => {
                cx.dma_write_poisoned(addr, vec![a[2]; len as usize % 600]);
            }
            (3 | 4, _) => {
                let t = if a[2] & 1 == 0 && !self.tickets.is_empty() {
                    self.tickets.swap_remove(v as usize % self.tickets.len())
                } else {
                    ReadTicket(u64::from(v))
                };
                let data = vec![0x5a; len as usize % 300];
                if a[0] % 12 == 3 {
                    cx.complete(t, data);
                } else {
                    cx.complete_poisoned(t, data);
                }
            }
            (5, _) => cx.msix(v as u16),
            (6, _) => cx.msi(v as u8),
            (7, _) => cx.intx(a[2] & 1 != 0),
            (8, _) => {
                let route = match a[2] % 4 {
                    0 => VdmRoute::RootComplex,
                    1 => VdmRoute::Id(Bdf::from_raw(v as u16)),
                    2 => VdmRoute::Broadcast,
                    _ => VdmRoute::Local,
                };
                let payload = vec![1; (len as usize % 5) * 4 + (a[3] as usize % 4)];
                cx.vendor_message(VendorMessage::new(route, v as u16, v, payload));
            }
            (9, _) => cx.pme(),
            (10, _) => cx.pme_to_ack(),
            (_, _) if a[1] & 0x60 == 0x20 => {
                let op = match a[2] % 7 {
                    0 => AtomicOp::FetchAdd32(v),
                    1 => AtomicOp::FetchAdd64(u64::from(v) << 7),
                    2 => AtomicOp::Swap32(v),
                    3 => AtomicOp::Swap64(u64::from(v)),
                    4 => AtomicOp::Cas32 {
                        compare: v,
                        swap: !v,
                    },
                    5 => AtomicOp::Cas64 {
                        compare: 0,
                        swap: u64::from(v),
                    },
                    _ => AtomicOp::Cas128 {
                        compare: 0,
                        swap: u128::from(v),
                    },
                };
                cx.atomic(addr, op);
            }
            (_, _) if a[1] & 0x40 == 0 => cx.ltr(v as u16, (v >> 16) as u16),
            (_, _) => cx.send_raw(raw_tlp(a, addr, len, cx.bdf())),
        }
    }

    fn reply(&mut self, cx: &mut EpCx<'_>) -> ReadReply {
        match self.mood % 4 {
            0 => ReadReply::Now,
            1 => ReadReply::Unsupported,
            2 => ReadReply::Poisoned,
            _ => {
                let t = ReadTicket(cx.now().as_ps() ^ u64::from(self.mood));
                self.tickets.push(t);
                ReadReply::Later(t)
            }
        }
    }
}

impl Endpoint for ChaosDevice {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        cx.timer(SimDuration::from_us(1), 0);
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        let Some(&a) = self.actions.get(self.next) else {
            return;
        };
        self.next += 1;
        self.act(a, cx);
        cx.timer(SimDuration::from_ns(200 + u64::from(a[1]) * 20), 0);
    }
    fn mem_read(&mut self, _bar: u8, _offset: u64, buf: &mut [u8], cx: &mut EpCx<'_>) -> ReadReply {
        buf.fill(0xc3);
        self.reply(cx)
    }
    fn io_read(&mut self, _bar: u8, _offset: u64, buf: &mut [u8], cx: &mut EpCx<'_>) -> ReadReply {
        buf.fill(0x3c);
        self.reply(cx)
    }
    fn io_write(&mut self, _bar: u8, _offset: u64, _data: &[u8], cx: &mut EpCx<'_>) -> ReadReply {
        self.reply(cx)
    }
    fn dma_done(&mut self, _id: DmaId, _ok: bool, _data: &[u8], _cx: &mut EpCx<'_>) {}
    fn vendor_message(&mut self, _from: Bdf, _msg: &VendorMessage, _cx: &mut EpCx<'_>) -> bool {
        self.mood & 1 == 0
    }
    fn pme_turn_off(&mut self, _cx: &mut EpCx<'_>) -> bool {
        self.mood & 2 == 0
    }
}
