//! `pcielab sim --workload nic`: pcie-bench's NIC with its driver in the timed
//! simulator, per frame size, beside what pcie-bench's model predicts.

use crate::model_cmd::{check_plot_path, parse_sizes, plot, series, Fail, Table};
use crate::sim_cmd::capture_to;
use crate::sim_cmd::{NicChoice, SimArgs};
use crate::{fail, Failure};
use pcielab_fabric::drivers::nic::{measure_in, measure_in_observed, NicVariant, MEASURE_QUANTUM};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::topology::Topology;
use pcielab_model::nic::{evaluate, Batching, NicKind};
use pcielab_model::plot::Plot;
use pcielab_model::{eth::Ethernet, Mode, Model, Mps, Mrrs, PcieConfig};
use pcielab_wire::Generation;

fn from_fail(e: Fail) -> Failure {
    match e {
        Fail::Input(m) | Fail::Output(m) => fail(m),
    }
}

/// Runs `pcielab sim --workload nic`.
pub fn run(a: &SimArgs) -> Result<(), Failure> {
    check_plot_path(&a.plot).map_err(from_fail)?;
    let reg = KindRegistry::builtin();
    // The topology: a file or example with a `nic` node (--device picks one), or the
    // root complex and one NIC on one link of --gen/--lanes.
    let (topo, nic) = match (&a.file, &a.example) {
        (None, None) => {
            let (gen, lanes) = (a.gen.unwrap_or(3), a.lanes.unwrap_or(8));
            let text = format!(
                "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n[[node]]\nname = \"nic\"\nkind = \"nic\"\n\
                 [[link]]\nup = \"rc.0\"\ndown = \"nic\"\ngen = {gen}\nwidth = {lanes}\n"
            );
            let t = Topology::parse(
                &text,
                &format!("one link (rc.0 - nic, Gen{gen} x{lanes})"),
                &reg,
            )
            .map_err(|e| fail(e.to_string()))?;
            let n = pick_nic(&t, a.device.as_deref())?;
            (t, n)
        }
        (_, Some(name)) => {
            let t = Topology::parse(crate::examples::get(name)?.text, name, &reg)
                .map_err(|e| fail(e.to_string()))?;
            let n = pick_nic(&t, a.device.as_deref())?;
            (t, n)
        }
        (Some(f), None) => {
            let t = Topology::load(f, &reg).map_err(|e| fail(e.to_string()))?;
            let n = pick_nic(&t, a.device.as_deref())?;
            (t, n)
        }
    };
    // The model's link: the NIC's own.
    let at = topo.nodes.iter().position(|n| n.name == nic).unwrap_or(0);
    let (gen, lanes) = topo
        .links
        .iter()
        .find(|l| l.down.index() == at)
        .map(|l| (l.gen.number(), l.width))
        .unwrap_or((3, 8));
    // What the topology file says of the NIC, where the flags do not: its `model`, and
    // its `eth_gbps` as the line rate of the eth_* and model columns.
    let params = &topo.nodes[at].params;
    let written = |key: &str| params.line(key) != 0;
    let choice = match params.str("model") {
        Some("batched") if !a.given("nic") && written("model") => NicChoice::Batched,
        _ => a.nic,
    };
    let eth_gbps = match params.int("eth_gbps") {
        Some(g) if g > 0 && !a.given("eth") && written("eth_gbps") => g as u32,
        _ => a.eth,
    };
    let variant = match (choice, a.dpdk) {
        (NicChoice::Simple, false) => NicVariant::Simple,
        (NicChoice::Simple, true) if !a.given("nic") && written("model") => {
            return Err(fail(format!(
                "--dpdk: node {nic:?} of {} is the simple NIC (model = \"simple\", line {}); \
                 DPDK polling mode needs the batched NIC (--nic batched)",
                topo.file,
                params.line("model")
            )))
        }
        (NicChoice::Simple, true) => {
            return Err(fail(
                "--dpdk with --nic simple: DPDK polling mode needs --nic batched",
            ))
        }
        (NicChoice::Batched, false) => NicVariant::Batched,
        (NicChoice::Batched, true) => NicVariant::Dpdk,
    };
    // Each run sets the receive source and the frame size itself.
    let unused: Vec<String> = ["rx", "frame", "cable"]
        .into_iter()
        .filter(|k| written(k))
        .map(|k| format!("{k} (line {})", params.line(k)))
        .collect();
    if !unused.is_empty() {
        eprintln!(
            "pcielab: note: --workload nic sets the receive source and frame size of each \
             run itself (--sizes; transmit only, receive only, loopback) and runs the NIC \
             alone, without a cable to another: {} of node {nic:?} not used",
            match unused.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => unused.join(""),
            }
        );
    }
    if a.packets == 0 || a.packets > 10_000_000 {
        return Err(fail(format!(
            "--packets {}: allowed 1..=10000000",
            a.packets
        )));
    }
    // The DMA workloads' default sizes make no sense for Ethernet frames: the NIC
    // default is `model nic`'s.
    let sizes_arg = if !a.given("sizes") {
        "64,128,256,512,1024,1518"
    } else {
        a.sizes.as_str()
    };
    let sizes = parse_sizes_list(sizes_arg)?;
    if let Some(&s) = sizes.iter().find(|&&s| !(64..=9018).contains(&s)) {
        return Err(fail(format!(
            "--sizes: frame size {s} is not allowed; allowed: 64..=9018 bytes (FCS included)"
        )));
    }
    let eth = Ethernet::new(eth_gbps).map_err(|e| {
        if a.given("eth") || !written("eth_gbps") {
            fail(format!("--eth: {e}"))
        } else {
            fail(format!(
                "{}:{}: eth_gbps = {eth_gbps} of node {nic:?} gives the line rate of the \
                 eth_* and model columns: {e}; or give --eth",
                topo.file,
                params.line("eth_gbps")
            ))
        }
    })?;
    let g = Generation::from_number(gen).map_err(|e| fail(format!("--gen: {e}")))?;
    let mut pc = PcieConfig::new(g, lanes as u32).map_err(|e| fail(format!("--lanes: {e}")))?;
    pc.mode = Mode::Spec;
    pc.mps = Mps::new(a.mps as u32).map_err(|e| fail(format!("--mps: {e}")))?;
    pc.mrrs = Mrrs::new(a.mrrs as u32).map_err(|e| fail(format!("--mrrs: {e}")))?;
    let model = Model::new(pc).map_err(|e| fail(e.to_string()))?;
    let kind = match variant {
        NicVariant::Simple => NicKind::Simple,
        NicVariant::Batched => NicKind::Batched(Batching::LINUX),
        NicVariant::Dpdk => NicKind::Batched(Batching::DPDK),
    };
    // The simulator's settings: the flags and host layers, as for every workload.
    let mut cfg = crate::sim_cmd::build_config(a, &topo)?;
    cfg.trace = a.captures();
    let packets = a.packets.div_ceil(MEASURE_QUANTUM) * MEASURE_QUANTUM;
    let mut cap = a.open_capture(&format!(
        "pcielab sim, workload nic ({}), topology {}, NIC {nic:?}, MPS {} MRRS {}, \
         frame sizes {sizes_arg}, {packets} packets per run",
        variant_name(variant),
        topo.file,
        a.mps,
        a.mrrs
    ))?;
    let mut rows = Vec::with_capacity(sizes.len());
    let mut bar = crate::progress::Progress::new("sizes", sizes.len() as u64);
    for (k, &frame) in sizes.iter().enumerate() {
        bar.set(k as u64);
        let m = match cap.as_mut() {
            None => measure_in(&topo, &nic, &cfg, variant, frame, packets),
            Some(c) => measure_in_observed(
                &topo,
                &nic,
                &cfg,
                variant,
                frame,
                packets,
                &mut capture_to(c),
            ),
        }
        .map_err(|e| fail(e.to_string()))?;
        let p = evaluate(&model, kind, eth, frame).map_err(|e| fail(e.to_string()))?;
        let mpps = |gbps: f64| p.mpps(gbps);
        rows.push(vec![
            frame as f64,
            p.eth_gbps,
            p.eth_mpps,
            m.tx_gbps,
            m.rx_gbps,
            m.bidir_gbps,
            mpps(m.tx_gbps),
            mpps(m.rx_gbps),
            mpps(m.bidir_gbps),
            m.down_bytes_per_pkt,
            m.up_bytes_per_pkt,
            p.tx_gbps,
            p.rx_gbps,
            p.bidir_gbps,
            p.down_bytes_per_pkt,
            p.up_bytes_per_pkt,
        ]);
    }
    bar.finish();
    let t = Table {
        cols: crate::model_cmd::NIC_COLUMNS
            .into_iter()
            .chain([
                "model_tx_gbps",
                "model_rx_gbps",
                "model_bidir_gbps",
                "model_down_B_per_pkt",
                "model_up_B_per_pkt",
            ])
            .collect(),
        prec: vec![0, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 3, 3, 3, 2, 2],
        rows,
    };
    let name = variant_name(variant);
    let title = format!(
        "{name} {nic:?} of {}, its link Gen{gen} x{lanes}, MPS {} MRRS {}, {packets} packets per run, MAC unthrottled; eth_* at {} GbE; model_*: pcie-bench's model (spec mode) on the NIC's link",
        topo.file, a.mps, a.mrrs, eth_gbps
    );
    let format = match a.out_format() {
        crate::format::Format::Table => crate::model_cmd::Format::Table,
        crate::format::Format::Csv => crate::model_cmd::Format::Csv,
        crate::format::Format::Json => crate::model_cmd::Format::Json,
    };
    let text = t.render(format, &title);
    print!("{text}");
    if let Some(c) = cap {
        eprintln!("{}", c.finish()?);
    }
    plot(
        &a.plot,
        Plot {
            title: format!("{name}, Gen{gen} x{lanes}, {eth_gbps} GbE"),
            x_label: "Ethernet frame size (bytes)".into(),
            y_label: "Packet data bandwidth (Gb/s)".into(),
            series: vec![
                series(format!("{eth_gbps} GbE line rate"), t.column(1)),
                series("transmit (simulated)", t.column(3)),
                series("receive (simulated)", t.column(4)),
                series("bidirectional (simulated)", t.column(5)),
                series("transmit (model)", t.column(11)),
                series("receive (model)", t.column(12)),
                series("bidirectional (model)", t.column(13)),
            ],
        },
    )
    .map_err(from_fail)
}

fn variant_name(v: NicVariant) -> &'static str {
    match v {
        NicVariant::Simple => "simple NIC",
        NicVariant::Batched => "batched NIC, Linux driver",
        NicVariant::Dpdk => "batched NIC, DPDK polling",
    }
}

/// The NIC node: `--device`, or the topology's first `nic`.
fn pick_nic(t: &Topology, device: Option<&str>) -> Result<String, Failure> {
    let nics: Vec<&str> = t
        .nodes
        .iter()
        .filter(|n| n.kind == "nic")
        .map(|n| n.name.as_str())
        .collect();
    match device {
        Some(d) if nics.contains(&d) => Ok(d.to_string()),
        Some(d) => Err(fail(format!(
            "--device {d:?}: not a nic node of {}; nic nodes: {}",
            t.file,
            if nics.is_empty() {
                "none".to_string()
            } else {
                nics.join(", ")
            }
        ))),
        None => nics.first().map(|n| n.to_string()).ok_or_else(|| {
            fail(format!(
                "{}: --workload nic needs a node of kind nic; the topology has none",
                t.file
            ))
        }),
    }
}

/// `--sizes`: a comma-separated list, or the range syntax of `model nic`.
fn parse_sizes_list(s: &str) -> Result<Vec<u64>, Failure> {
    let mut out = Vec::new();
    for part in s.split(',') {
        out.extend(parse_sizes(part.trim()).map_err(from_fail)?);
    }
    Ok(out)
}
