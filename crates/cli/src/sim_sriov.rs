//! `pcielab sim --workload sriov`: seed 003's SR-IOV DMA engine with its PF and VF
//! drivers in the timed simulator, every function streaming at once, per transfer size.

use crate::model_cmd::{parse_sizes, Fail, Table};
use crate::sim_cmd::capture_to;
use crate::sim_cmd::{Op, SimArgs};
use crate::{fail, Failure};
use pcielab_fabric::drivers::dma_engine::{
    run as run_transfers, run_observed, Dir, DmaDriverConfig, DmaFunction, Vm,
};
use pcielab_fabric::drivers::RunStage;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, IommuConfig};
use pcielab_fabric::topology::Topology;

fn from_fail(e: Fail) -> Failure {
    match e {
        Fail::Input(m) | Fail::Output(m) => fail(m),
    }
}

/// The columns, in order.
const COLUMNS: [&str; 7] = [
    "size_B",
    "functions",
    "total_gbps",
    "min_fn_gbps",
    "max_fn_gbps",
    "transfers",
    "errors",
];

/// Runs `pcielab sim --workload sriov`.
pub fn run(a: &SimArgs) -> Result<(), Failure> {
    let reg = KindRegistry::builtin();
    let dir = match a.op {
        Op::Read => Dir::H2d,
        Op::Write => Dir::D2h,
        other => {
            return Err(fail(format!(
                "--op {}: --workload sriov runs one direction: read (host to device) or write (device to host)",
                format!("{other:?}").to_lowercase()
            )))
        }
    };
    if a.given("vfs") && (a.file.is_some() || a.example.is_some()) {
        return Err(fail(format!(
            "--vfs {}: sets the VFs of the one-link topology made without a file; a \
             topology's dma-engine node has its own (its `vfs` key)",
            a.vfs
        )));
    }
    if a.vfs > 64 {
        return Err(fail(format!("--vfs {}: allowed 0..=64", a.vfs)));
    }
    let (topo, node) = match (&a.file, &a.example) {
        (None, None) => {
            let (gen, lanes) = (a.gen.unwrap_or(3), a.lanes.unwrap_or(8));
            let text = format!(
                "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
                 [[node]]\nname = \"dma\"\nkind = \"dma-engine\"\nvfs = {}\n\
                 [[link]]\nup = \"rc.0\"\ndown = \"dma\"\ngen = {gen}\nwidth = {lanes}\n",
                a.vfs
            );
            let t = Topology::parse(
                &text,
                &format!("one link (rc.0 - dma, Gen{gen} x{lanes}, {} VFs)", a.vfs),
                &reg,
            )
            .map_err(|e| fail(e.to_string()))?;
            let n = pick(&t, a.device.as_deref())?;
            (t, n)
        }
        (_, Some(name)) => {
            let t = Topology::parse(crate::examples::get(name)?.text, name, &reg)
                .map_err(|e| fail(e.to_string()))?;
            let n = pick(&t, a.device.as_deref())?;
            (t, n)
        }
        (Some(f), None) => {
            let t = Topology::load(f, &reg).map_err(|e| fail(e.to_string()))?;
            let n = pick(&t, a.device.as_deref())?;
            (t, n)
        }
    };
    // Transfer sizes: the DMA workloads' default makes no sense here.
    let sizes_arg = if !a.given("sizes") {
        "64K,256K,1M"
    } else {
        a.sizes.as_str()
    };
    let mut sizes = Vec::new();
    for part in sizes_arg.split(',') {
        sizes.extend(parse_sizes(part.trim()).map_err(from_fail)?);
    }
    if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s > 64 << 20) {
        return Err(fail(format!(
            "--sizes: transfer size {s} is not allowed; allowed: 1 byte ..= 64 MiB"
        )));
    }
    let count = if a.given("count") { a.count } else { 8 };
    if count == 0 || count > 100_000 {
        return Err(fail(format!(
            "--count {count}: allowed 1..=100000 transfers"
        )));
    }
    let mut cfg = crate::sim_cmd::build_config(a, &topo)?;
    if a.vm && cfg.iommu.is_none() {
        cfg.iommu = Some(IommuConfig::default());
    }
    cfg.trace = a.captures();
    let mut cap = a.open_capture(&format!(
        "pcielab sim, workload sriov, topology {}, DMA engine {node:?}, MPS {} MRRS {}, \
         transfer sizes {sizes_arg}, {count} transfers per function and size",
        topo.file, a.mps, a.mrrs
    ))?;
    let mut rows = Vec::with_capacity(sizes.len());
    let mut functions = 0;
    let mut bar = crate::progress::Progress::new("sizes", sizes.len() as u64);
    for (k, &size) in sizes.iter().enumerate() {
        bar.set(k as u64);
        // A fresh simulation per size, its functions all set up by their drivers.
        let mut sim = FabricSim::new(&topo, &reg, cfg.clone()).map_err(|e| fail(e.to_string()))?;
        let mut fns = Vec::new();
        let mut i = 0u16;
        while sim.function_bdf(&node, i).is_some() {
            let c = DmaDriverConfig {
                check: false,
                vm: (a.vm && i > 0).then_some(Vm {
                    guest_base: 0x1_0000_0000,
                }),
                ..DmaDriverConfig::default()
            };
            fns.push(DmaFunction::open(&mut sim, &node, i, c).map_err(|e| fail(e.to_string()))?);
            i += 1;
        }
        functions = fns.len();
        let r = match cap.as_mut() {
            None => run_transfers(&mut sim, &mut fns, dir, size, count),
            Some(c) => {
                let label = format!(
                    "{} functions, {count} {} transfers of {size} B each",
                    fns.len(),
                    if dir == Dir::H2d {
                        "host-to-device"
                    } else {
                        "device-to-host"
                    }
                );
                let mut observe = capture_to(c);
                observe(&mut sim, RunStage::Begin(&label)).map_err(fail)?;
                let r = run_observed(&mut sim, &mut fns, dir, size, count, &mut observe);
                if r.is_ok() {
                    observe(&mut sim, RunStage::End).map_err(fail)?;
                }
                r
            }
        }
        .map_err(|e| fail(e.to_string()))?;
        let gbps: Vec<f64> = r.iter().map(|x| x.gbps).collect();
        // Together: every byte over the time until the last function finished.
        let end = r.iter().map(|x| x.elapsed).max().unwrap_or_default();
        let bytes: u64 = r.iter().map(|x| x.bytes).sum();
        let total = bytes as f64 * 8.0 / (end.as_ps().max(1) as f64 / 1000.0);
        rows.push(vec![
            size as f64,
            fns.len() as f64,
            total,
            gbps.iter().copied().fold(f64::INFINITY, f64::min),
            gbps.iter().copied().fold(0.0, f64::max),
            r.iter().map(|x| x.transfers).sum::<u64>() as f64,
            r.iter().map(|x| x.errors).sum::<u64>() as f64,
        ]);
    }
    bar.finish();
    let t = Table {
        cols: COLUMNS.to_vec(),
        prec: vec![0, 0, 3, 3, 3, 0, 0],
        rows,
    };
    let title = format!(
        "SR-IOV DMA engine {node:?} of {}: {functions} functions (PF and VFs{}) each running {count} {} transfers per size at once, MPS {} MRRS {}",
        topo.file,
        if a.vm { ", the VFs in VMs" } else { "" },
        if dir == Dir::H2d { "host-to-device" } else { "device-to-host" },
        a.mps,
        a.mrrs
    );
    let format = match a.out_format() {
        crate::format::Format::Table => crate::model_cmd::Format::Table,
        crate::format::Format::Csv => crate::model_cmd::Format::Csv,
        crate::format::Format::Json => crate::model_cmd::Format::Json,
    };
    print!("{}", t.render(format, &title));
    if let Some(c) = cap {
        eprintln!("{}", c.finish()?);
    }
    Ok(())
}

/// The DMA engine node: `--device`, or the topology's first `dma-engine`.
fn pick(t: &Topology, device: Option<&str>) -> Result<String, Failure> {
    let nodes: Vec<&str> = t
        .nodes
        .iter()
        .filter(|n| n.kind == "dma-engine")
        .map(|n| n.name.as_str())
        .collect();
    match device {
        Some(d) if nodes.contains(&d) => Ok(d.to_string()),
        Some(d) => Err(fail(format!(
            "--device {d:?}: not a dma-engine node of {}; dma-engine nodes: {}",
            t.file,
            if nodes.is_empty() {
                "none".to_string()
            } else {
                nodes.join(", ")
            }
        ))),
        None => nodes.first().map(|n| n.to_string()).ok_or_else(|| {
            fail(format!(
                "{}: --workload sriov needs a node of kind dma-engine; the topology has none",
                t.file
            ))
        }),
    }
}
