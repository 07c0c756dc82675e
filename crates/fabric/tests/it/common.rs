//! Shared helpers.

use pcielab_fabric::functional::Fabric;
use pcielab_fabric::host::enumerate::{enumerate, EnumeratedTree, HostConfig};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::topology::Topology;
use pcielab_wire::Bdf;
use std::path::PathBuf;

/// The example topologies directory of the repository.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/topologies")
}

/// Every example topology file.
pub fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/topologies exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    assert!(v.len() >= 3, "expected the example topologies, found {v:?}");
    v
}

/// Parses, builds and enumerates topology text.
pub fn bring_up(text: &str) -> (Topology, Fabric, EnumeratedTree) {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(text, "test.toml", &reg).unwrap_or_else(|e| panic!("{e}"));
    let mut fabric = Fabric::build(&topo, &reg).unwrap_or_else(|e| panic!("{e}"));
    let tree = enumerate(&mut fabric, &HostConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    (topo, fabric, tree)
}

/// Same for an example file.
pub fn bring_up_file(name: &str) -> (Topology, Fabric, EnumeratedTree) {
    let text = std::fs::read_to_string(examples_dir().join(name)).expect("example exists");
    bring_up(&text)
}

/// RC ─ Gen3 x4 switch (2 downstream ports) ─ ep (psmem, with a 256-byte I/O BAR when
/// `io`) and ep2 (psmem without one), every link Gen3 x4.
pub fn switch_tree(seed: u64, io: bool) -> Topology {
    let io = if io { "io_size=256\n" } else { "" };
    let s = format!(
        "seed = {seed}\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n{io}\
         [[node]]\nname=\"ep2\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n\
         [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen=3\nwidth=4\n"
    );
    Topology::parse(&s, "t.toml", &KindRegistry::builtin()).unwrap()
}

/// Timing for hand-computed latencies on [`switch_tree`]: root complex 100 ns, switch
/// 150 ns, propagation 5 ns, device 40 ns.
pub fn hand_timing(trace: bool) -> pcielab_fabric::timed::SimConfig {
    use pcielab_sim::SimDuration;
    pcielab_fabric::timed::SimConfig {
        rc_latency: SimDuration::from_ns(100),
        switch_latency: SimDuration::from_ns(150),
        propagation: SimDuration::from_ns(5),
        ep_latency: SimDuration::from_ns(40),
        trace,
        ..Default::default()
    }
}

/// Serialization of `bytes` on Gen3 x4 in ps (128b/130b, one SKP ordered set per 375
/// blocks), rounded up per transmission.
pub fn ser_gen3x4(bytes: u64) -> u64 {
    (bytes * 1000 * 130 * 376).div_ceil(128 * 375 * 4)
}

/// Issue-to-completion time of a finished host request in ps.
pub fn latency(r: &pcielab_fabric::timed::HostRead) -> u64 {
    match r {
        pcielab_fabric::timed::HostRead::Done { issued, done, .. } => (*done - *issued).as_ps(),
        r => panic!("{r:?}"),
    }
}

/// A device that answers reads later with more data than asked (a bug).
#[derive(Debug, Default)]
pub struct Chatty;
impl pcielab_fabric::timed::Endpoint for Chatty {
    fn mem_read(
        &mut self,
        _b: u8,
        _o: u64,
        _buf: &mut [u8],
        cx: &mut pcielab_fabric::timed::EpCx<'_>,
    ) -> pcielab_fabric::timed::ReadReply {
        cx.timer(pcielab_sim::SimDuration::from_ns(10), 1);
        pcielab_fabric::timed::ReadReply::Later(pcielab_fabric::timed::ReadTicket(1))
    }
    fn timer(&mut self, _t: u64, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        cx.complete(pcielab_fabric::timed::ReadTicket(1), vec![0xab; 64]);
    }
}

/// [`switch_tree`] with [`hand_timing`] (no trace).
pub fn hand_sim(seed: u64, io: bool) -> pcielab_fabric::timed::FabricSim {
    pcielab_fabric::timed::FabricSim::new(
        &switch_tree(seed, io),
        &KindRegistry::builtin(),
        hand_timing(false),
    )
    .unwrap()
}

/// [`switch_tree`] with [`hand_timing`], run until its links are trained and idle.
pub fn trained_sim(seed: u64, trace: bool) -> pcielab_fabric::timed::FabricSim {
    let mut sim = pcielab_fabric::timed::FabricSim::new(
        &switch_tree(seed, false),
        &KindRegistry::builtin(),
        hand_timing(trace),
    )
    .unwrap();
    sim.run_for(pcielab_sim::SimDuration::from_us(5));
    sim
}

/// The bridge above `bdf` in the enumerated tree.
pub fn parent(sim: &pcielab_fabric::timed::FabricSim, bdf: Bdf) -> Bdf {
    sim.tree().get(bdf).unwrap().parent.unwrap()
}

/// (PCI Express capability, AER capability) offsets of `bdf`, found with config reads.
pub fn caps(sim: &mut pcielab_fabric::timed::FabricSim, bdf: Bdf) -> (u16, u16) {
    let mut pcie = 0;
    let mut at = (sim.cfg_read(bdf, 0x34) & 0xfc) as u16;
    while at != 0 {
        let h = sim.cfg_read(bdf, at);
        if h & 0xff == 0x10 {
            pcie = at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    let mut aer = 0x100u16;
    loop {
        let h = sim.cfg_read(bdf, aer);
        if h & 0xffff == 1 {
            break;
        }
        aer = (h >> 20) as u16;
        assert!(aer != 0, "no AER in {bdf}");
    }
    assert!(pcie != 0, "no PCI Express capability in {bdf}");
    (pcie, aer)
}

pub fn dev_status(sim: &mut pcielab_fabric::timed::FabricSim, bdf: Bdf) -> u32 {
    let (p, _) = caps(sim, bdf);
    sim.cfg_read(bdf, p + 8) >> 16
}

/// The real `lspci -vvv` (pciutils) on the simulation's configuration spaces, for
/// function `bdf` only.
pub fn lspci_vvv(sim: &pcielab_fabric::timed::FabricSim, bdf: Bdf, tag: &str) -> String {
    let path = std::env::temp_dir().join(format!("pcielab-{}-{tag}.lspci", std::process::id()));
    std::fs::write(&path, sim.fabric().lspci_dump()).unwrap();
    let out = std::process::Command::new("lspci")
        .arg("-F")
        .arg(&path)
        .arg("-vvv")
        .arg("-s")
        .arg(bdf.to_string())
        .output()
        .expect("lspci runs (pciutils)");
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// Offset of capability `id` of `f`, found with config reads.
pub fn cap_offset(sim: &mut pcielab_fabric::timed::FabricSim, f: Bdf, id: u32) -> u16 {
    let mut at = (sim.cfg_read(f, 0x34) & 0xfc) as u16;
    while at != 0 {
        let h = sim.cfg_read(f, at);
        if h & 0xff == id {
            return at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    panic!("no capability {id:#04x} in {f}");
}

fn msi_cap(sim: &mut pcielab_fabric::timed::FabricSim, f: Bdf) -> u16 {
    cap_offset(sim, f, 0x05)
}

/// (MSI address, MSI data) the enumerator gave `f` (its MSI must be enabled, 64-bit).
pub fn msi_of(sim: &mut pcielab_fabric::timed::FabricSim, f: Bdf) -> (u64, u32) {
    let at = msi_cap(sim, f);
    let h = sim.cfg_read(f, at);
    assert!(h >> 16 & 1 == 1, "MSI enabled");
    assert!(h >> 16 & 0x80 != 0, "64-bit");
    let addr = sim.cfg_read(f, at + 4) as u64 | (sim.cfg_read(f, at + 8) as u64) << 32;
    (addr, sim.cfg_read(f, at + 0xc) & 0xffff)
}

/// Turns MSI off in `f` (Message Control's enable bit).
pub fn disable_msi(sim: &mut pcielab_fabric::timed::FabricSim, f: Bdf) {
    let at = msi_cap(sim, f);
    let h = sim.cfg_read(f, at);
    sim.cfg_write(f, at, h & !(1 << 16));
}

/// The TLP records of `t` (DLLPs skipped), each with its bytes decoded by the codec.
pub fn trace_tlps(
    t: &pcielab_fabric::timed::Trace,
) -> impl Iterator<
    Item = (
        &pcielab_fabric::timed::TraceRecord,
        pcielab_wire::tlp::TlpRepr<'_>,
    ),
> {
    t.records
        .iter()
        .filter(|r| matches!(r.kind, pcielab_fabric::timed::TraceKind::Tlp { .. }))
        .map(|r| {
            let b = t.bytes(r);
            let p = pcielab_wire::tlp::TlpRepr::parse_bytes(b)
                .unwrap_or_else(|e| panic!("{e}: {b:02x?}"));
            (r, p)
        })
}

/// The offset of extended capability `id` of function `bdf` (its list walked).
pub fn ext_cap(sim: &pcielab_fabric::timed::FabricSim, bdf: Bdf, id: u16) -> u16 {
    let f = sim.fabric().function_at(bdf).unwrap();
    pcielab_config::caps::walk(sim.fabric().functions[f.0 as usize].config.bytes())
        .0
        .iter()
        .find(|c| c.extended && c.id == id)
        .unwrap_or_else(|| panic!("no extended capability {id:#x} in {bdf}"))
        .offset
}

/// A stream of `count` 1 KiB DMA writes, 8 in flight, DMA i to the 4 KiB slot i from
/// `base`; [`check_write_slots`] checks what it wrote.
pub fn write_stream(base: u64, count: u64) -> Box<pcielab_fabric::timed::DmaStream> {
    use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream};
    Box::new(DmaStream::new(
        DmaOpKind::Write,
        1024,
        8,
        count,
        base,
        count * 4096,
        AddrPattern::Sequential,
    ))
}

/// Checks that the slots `range` hold what [`write_stream`] (any `DmaStream` of 1 KiB
/// writes) writes there: byte k of DMA i is (k as u8) ^ (i as u8) * 31.
pub fn check_write_slots(
    s: &pcielab_fabric::timed::FabricSim,
    base: u64,
    range: std::ops::Range<u64>,
) {
    let mut buf = vec![0u8; 1024];
    for i in range {
        s.host_read(base + i * 4096, &mut buf);
        for (k, b) in buf.iter().enumerate() {
            assert_eq!(
                *b,
                (k as u8) ^ (i as u8).wrapping_mul(31),
                "DMA {i} byte {k}"
            );
        }
    }
}

/// An endpoint that raises MSI-X vector 1 `times` times: `first` after it starts, then
/// every `every`.
#[derive(Debug)]
pub struct MsixTimer {
    pub first: pcielab_sim::SimDuration,
    pub every: pcielab_sim::SimDuration,
    pub times: u64,
}

impl pcielab_fabric::timed::Endpoint for MsixTimer {
    fn start(&mut self, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        cx.timer(self.first, 0);
    }
    fn timer(&mut self, n: u64, cx: &mut pcielab_fabric::timed::EpCx<'_>) {
        cx.msix(1);
        if n + 1 < self.times {
            cx.timer(self.every, n + 1);
        }
    }
}

/// Unmasks MSI-X vector 1 of psmem node `ep` with a host MMIO write to its table
/// (vector control is dword 3 of the 16-byte entry; psmem's MSI-X BAR follows its
/// 64-bit memory BAR, in slot 2).
pub fn unmask_msix_vector1(sim: &mut pcielab_fabric::timed::FabricSim, ep: &str) {
    let tbl = sim.bar(ep, 2).unwrap();
    sim.mmio_write(tbl + 16 + 12, &[0, 0, 0, 0]).unwrap();
}

/// The messages of `sim`'s faults of class `kind`, one per line.
pub fn fault_text(
    sim: &pcielab_fabric::timed::FabricSim,
    kind: pcielab_fabric::timed::FaultKind,
) -> String {
    sim.errors()
        .iter()
        .filter(|e| e.is(kind))
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The timed simulator on the `sriov-4vf` example (a psmem PF "nic" with four VFs)
/// and the BDF of each function by index (0 the PF).
pub fn sim_sriov_4vf(
    cfg: pcielab_fabric::timed::SimConfig,
) -> (pcielab_fabric::timed::FabricSim, Vec<pcielab_wire::Bdf>) {
    let text = std::fs::read_to_string(examples_dir().join("sriov-4vf.toml")).expect("readable");
    let reg = pcielab_fabric::kinds::KindRegistry::builtin();
    let topo = pcielab_fabric::topology::Topology::parse(&text, "sriov-4vf.toml", &reg).unwrap();
    let sim = pcielab_fabric::timed::FabricSim::new(&topo, &reg, cfg).unwrap();
    let bdfs: Vec<_> = (0..5)
        .map(|i| sim.function_bdf("nic", i).unwrap())
        .collect();
    (sim, bdfs)
}
