//! NetTLP (seed 000): the root complex's 64-byte split of peer-to-peer requests (§6.1.1,
//! Fig. 13), the encapsulation bound over 10 GbE (§3), and the shapes of the DMA read
//! saw-tooth (§5.1, Fig. 8) and the DMA write curve (§5.1, Fig. 10).
//!
//! NetTLP's Fig. 7-11 throughputs are those of LibTLP over the Linux network stack
//! (software bound: 3.6 Gb/s with 16 cores); pcielab's simulator has no such software,
//! so only the shapes, which come from PCIe packetization, are compared.

use crate::sim::{self, Stream};
use crate::{input, run_err, spec, Error, Experiment, Figure, Opts, Output, Row, Series};
use crate::{Spec, Status};
use pcielab_capture::encap::{self, Endpoints, NetTlpHeader};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimTime;
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::{Bdf, Tag};

const SEED: &str = "000 NetTLP";

/// The p2p rows.
pub const P2P: &[Spec] = &[
    Spec {
        id: "nettlp-p2p-split",
        seed: SEED,
        quantity: "MRd TLPs reaching the peer for one 512 B MRd through the root complex",
        unit: "TLPs",
        published: "8",
        citation: "seed 000 §6.1.1, Fig. 13(b)",
    },
    Spec {
        id: "nettlp-p2p-split-cpl",
        seed: SEED,
        quantity: "CplD TLPs from the peer, and CplD TLPs rebuilt for the requester, through the root complex",
        unit: "TLPs",
        published: "8 / 2",
        citation: "seed 000 §6.1.1, Fig. 13(b)",
    },
    Spec {
        id: "nettlp-p2p-switch",
        seed: SEED,
        quantity: "MRd TLPs reaching the peer / CplD TLPs back, one 512 B MRd through a PCIe switch",
        unit: "TLPs",
        published: "1 / 2",
        citation: "seed 000 §6.1.1, Fig. 13(a)",
    },
];

/// Two NetTLP adapters (psmem `a` and `b`, Gen2 x4) under the root complex
/// (`switch` false) or under a switch.
pub fn p2p_topology(switch: bool) -> Result<Topology, String> {
    let text = if switch {
        "seed = 1\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=1\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
         [[node]]\nname=\"a\"\nkind=\"psmem\"\n[[node]]\nname=\"b\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=2\nwidth=4\n\
         [[link]]\nup=\"sw.0\"\ndown=\"a\"\ngen=2\nwidth=4\n\
         [[link]]\nup=\"sw.1\"\ndown=\"b\"\ngen=2\nwidth=4\n"
    } else {
        "seed = 1\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=2\n\
         [[node]]\nname=\"a\"\nkind=\"psmem\"\n[[node]]\nname=\"b\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"a\"\ngen=2\nwidth=4\n\
         [[link]]\nup=\"rc.1\"\ndown=\"b\"\ngen=2\nwidth=4\n"
    };
    sim::topology(
        text,
        if switch {
            "p2p-switch.toml"
        } else {
            "p2p-rc.toml"
        },
    )
}

/// TLP counts of one 512-byte read by `a` of `b`'s BAR 0: (MRds towards `b`, CplDs
/// from `b`, CplDs to `a`).
pub fn p2p_read(t: &Topology, cfg: &SimConfig) -> Result<(u64, u64, u64), String> {
    let mut sim = FabricSim::new(t, &KindRegistry::builtin(), cfg.clone())
        .map_err(|e| format!("{}: {e}", t.file))?;
    let peer = sim.bar("b", 0).ok_or("b: no BAR 0")?;
    sim.attach(
        "a",
        Box::new(DmaStream::new(
            DmaOpKind::Read,
            512,
            1,
            1,
            peer,
            4096,
            AddrPattern::Sequential,
        )),
    )
    .map_err(|e| e.to_string())?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let rep = sim
        .model("a")
        .and_then(|m| m.report())
        .ok_or("a: no report")?;
    if rep["dmas"] != 1 || rep["failed"] != 0 {
        return Err(format!("the peer read failed: {rep} {:?}", sim.errors()));
    }
    let c = sim.counters();
    let dir = |n: &str| {
        c.iter()
            .find(|x| x.0 == n)
            .map(|x| x.1)
            .ok_or_else(|| format!("no link direction {n}"))
    };
    let (to_b, from_b, to_a) = if t.nodes.iter().any(|n| n.name == "sw") {
        ("sw.1->b", "b->sw.1", "sw.0->a")
    } else {
        ("rc.1->b", "b->rc.1", "rc.0->a")
    };
    Ok((
        dir(to_b)?.non_posted,
        dir(from_b)?.completions,
        dir(to_a)?.completions,
    ))
}

fn run_p2p(o: &Opts) -> Result<Output, Error> {
    let err = run_err("nettlp-p2p");
    let mut cfg = SimConfig {
        p2p_split: Some(64),
        ..SimConfig::default()
    };
    let host = sim::host(&mut cfg, None, &o.knobs).map_err(&err)?;
    let mut inputs = vec![
        input("topology", "two NetTLP adapters (Gen2 x4) on root ports", "seed 000 §6.1.1, Fig. 12(a)"),
        input("p2p_split_B", 64, "seed 000 §6.1.1: the Intel root complex's split, as observed (an input: the row checks the split and the rebuild, not why the root complex splits)"),
        input("read_B", 512, "seed 000 §6.1.1: a 512-byte MRd"),
        input("mps_B", cfg.mps, "simulator default; seed 000: the rebuilt CplDs are aligned with MPS (256)"),
        input("rcb_B", cfg.rcb, "simulator default"),
    ];
    inputs.extend(host.iter().cloned());
    let (mrd, cpl_b, cpl_a) = p2p_read(&p2p_topology(false).map_err(&err)?, &cfg).map_err(&err)?;
    let s = |id| spec(P2P, id);
    let mut rows = vec![
        Row::number(s("nettlp-p2p-split"), mrd as f64, 0, inputs.clone()).within(0.0, "the root complex's split differs"),
        Row::text(s("nettlp-p2p-split-cpl"), format!("{cpl_b} / {cpl_a}"), inputs.clone()).with(
            if (cpl_b, cpl_a) == (8, 2) { Status::Match } else { Status::Deviates },
            "the peer answers each 64-byte piece with one CplD; the root complex rebuilds them into MPS-sized CplDs",
        ),
    ];
    let sw_cfg = SimConfig {
        p2p_split: Some(64),
        ..cfg.clone()
    };
    let (mrd_s, _, cpl_s) = p2p_read(&p2p_topology(true).map_err(&err)?, &sw_cfg).map_err(&err)?;
    let mut sw_inputs = inputs.clone();
    sw_inputs[0] = input(
        "topology",
        "two NetTLP adapters (Gen2 x4) below a switch",
        "seed 000 §6.1.1, Fig. 12(a)",
    );
    rows.push(
        Row::text(s("nettlp-p2p-switch"), format!("{mrd_s} / {cpl_s}"), sw_inputs).with(
            if (mrd_s, cpl_s) == (1, 2) { Status::Match } else { Status::Deviates },
            "a switch forwards TLPs unchanged (the spec does not allow it to split them); completions are cut at MPS 256 by the peer",
        ),
    );
    Ok(Output {
        rows,
        figures: Vec::new(),
    })
}

/// The encapsulation row.
pub const ENCAP: &[Spec] = &[Spec {
    id: "nettlp-encap-bound",
    seed: SEED,
    quantity: "DMA throughput bound of NetTLP over 10 GbE, 256 B MWr with a 3DW header",
    unit: "Gb/s",
    published: "7.53",
    citation: "seed 000 §3 (Encapsulation Overhead)",
}];

/// The bytes on the wire of one NetTLP frame carrying a 3DW MWr with `data` bytes, as
/// pcielab's capture writer builds it (Ethernet, IPv4, UDP, NetTLP header, TLP),
/// plus the 4-byte FCS and the 20 bytes of preamble and inter-frame gap.
pub fn nettlp_wire_bytes(data: usize) -> Result<usize, String> {
    let payload = vec![0u8; data];
    let bdf = Bdf::new(0, 0, 0).map_err(|e| e.to_string())?;
    let tag = Tag::new(0).map_err(|e| e.to_string())?;
    let tlp = TlpRepr::mem_write(bdf, tag, 0x1000, &payload).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; tlp.buffer_len()];
    let n = tlp.emit(&mut buf).map_err(|e| e.to_string())?;
    let mut frame = Vec::new();
    let port = encap::tlp_port(&buf[..n]);
    encap::build_frame(
        &mut frame,
        &Endpoints::default(),
        port,
        port,
        &[&NetTlpHeader::at(0, 0).to_bytes(), &buf[..n]],
    );
    Ok(frame.len() + 4 + 20)
}

fn run_encap(_o: &Opts) -> Result<Output, Error> {
    let err = run_err("nettlp-encap");
    let wire = nettlp_wire_bytes(256).map_err(&err)?;
    let gbps = 10.0 * 256.0 / wire as f64;
    let model = pcielab_model::eth::nettlp_dma_gbps(10.0, 12, 256);
    let inputs = vec![
        input("eth_gbps", 10, "seed 000 §3: 10 Gbps Ethernet"),
        input("data_B", 256, "seed 000 §3: 256-byte TLP data (the usual MPS)"),
        input("tlp_hdr", "3DW MWr (12 B)", "seed 000 §3"),
        input("frame", format!("{} B on the wire: Ethernet 14 + IPv4 20 + UDP 8 + NetTLP 6 + TLP, as pcielab's capture writer builds it, + FCS 4 + preamble and gap 20", wire), "seed 000 §3 (headers); pcielab-capture (frame)"),
    ];
    let mut row = Row::number(spec(ENCAP, "nettlp-encap-bound"), gbps, 3, inputs)
        .within(0.001, "the frame is not the one the paper describes");
    row.note = format!(
        "{}; the model's formula (crates/model/src/eth.rs) gives {model:.3}",
        row.note
    );
    Ok(Output {
        rows: vec![row],
        figures: Vec::new(),
    })
}

/// The shape rows.
pub const SHAPES: &[Spec] = &[
    Spec {
        id: "nettlp-fig8-sawtooth",
        seed: SEED,
        quantity: "DMA read throughput drops just past multiples of 512 B (MRRS) and, slightly, of 256 B (MPS): sizes 16..2048 B in steps of 16",
        unit: "-",
        published: "saw-tooth: drops after multiples of 512; slight drops after multiples of 256",
        citation: "seed 000 §5.1, Fig. 8",
    },
    Spec {
        id: "nettlp-fig10-write-top",
        seed: SEED,
        quantity: "smallest DMA write size reaching the top throughput (within 0.1 %), sizes 16..2048 B in steps of 16",
        unit: "B",
        published: "256",
        citation: "seed 000 §5.1, Fig. 10",
    },
];

fn run_shapes(o: &Opts) -> Result<Output, Error> {
    let err = run_err("nettlp-shapes");
    let t = sim::one_link(2, 4).map_err(&err)?;
    let mut c = SimConfig::default();
    let host = sim::host(&mut c, None, &o.knobs).map_err(&err)?;
    let mut inputs = vec![
        input(
            "link",
            "Gen2 x4",
            "seed 000 §5: the NetTLP adapter's PCIe link",
        ),
        input("mps_B", c.mps, "seed 000 §5.1: MPS is 256-byte"),
        input("mrrs_B", c.mrrs, "seed 000 §5.1: MRRS is 512-byte"),
        input("size_B", "16..2048 in steps of 16", "seed 000 §5.1, Fig. 8"),
        input(
            "window",
            16,
            "assumption: enough DMAs in flight to saturate the link (NetTLP: 16 cores)",
        ),
        input("count", 200, "pcielab"),
    ];
    inputs.extend(host);
    let sizes: Vec<u64> = (16..=2048).step_by(16).collect();
    let mut rd = Vec::new();
    let mut wr = Vec::new();
    for &size in &sizes {
        for (op, v) in [(DmaOpKind::Read, &mut rd), (DmaOpKind::Write, &mut wr)] {
            let r = sim::dma(
                &t,
                &c,
                "mem0",
                Stream {
                    op,
                    size,
                    window: 16,
                    count: 200,
                    region: 1 << 20,
                },
            )
            .map_err(&err)?;
            v.push((size, r.report.gbps));
        }
    }
    let at = |v: &[(u64, f64)], s: u64| v.iter().find(|p| p.0 == s).map(|p| p.1).unwrap_or(0.0);
    let drop = |v: &[(u64, f64)], s: u64| (1.0 - at(v, s + 16) / at(v, s)) * 100.0;
    let d512: Vec<f64> = [512u64, 1024, 1536].iter().map(|&s| drop(&rd, s)).collect();
    let d256: Vec<f64> = [256u64, 768, 1280, 1792]
        .iter()
        .map(|&s| drop(&rd, s))
        .collect();
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join("/")
    };
    let all_drop = d512.iter().chain(&d256).all(|&x| x > 0.0);
    let mut rows = vec![Row::text(
        spec(SHAPES, "nettlp-fig8-sawtooth"),
        format!(
            "drop (%) after 512/1024/1536: {}; after 256/768/1280/1792: {}",
            fmt(&d512),
            fmt(&d256)
        ),
        inputs.clone(),
    )
    .with(
        if all_drop { Status::Shape } else { Status::Deviates },
        "the saw-tooth is there at both boundaries; on a saturated link what costs is the extra \
         completion (read data comes back in MPS-sized CplDs), so the drops after 256 and after 512 \
         are alike here, where LibTLP, bound by its per-request software cost, drops more after 512 \
         (one more request)",
    )];
    let max = wr.iter().map(|p| p.1).fold(0.0, f64::max);
    let top = wr
        .iter()
        .find(|p| p.1 >= 0.999 * max)
        .map(|p| p.0)
        .unwrap_or(0);
    let mut winputs = inputs.clone();
    winputs.retain(|i| i.name != "size_B");
    winputs.push(input(
        "size_B",
        "16..2048 in steps of 16",
        "seed 000 §5.1, Fig. 10",
    ));
    let mut row = Row::number(
        spec(SHAPES, "nettlp-fig10-write-top"),
        top as f64,
        0,
        winputs,
    )
    .within(0.0, "the write curve tops out elsewhere");
    row.note = format!(
        "{}; top {max:.2} Gb/s on the simulated Gen2 x4 link: MPS 256 caps every MWr, so larger \
         writes add TLPs of the same efficiency (NetTLP's own curve is LibTLP's socket rate)",
        row.note
    );
    rows.push(row);
    let figures = vec![
        Figure {
            name: "nettlp-fig8-read-sawtooth".into(),
            title: "NetTLP Fig. 8: DMA read throughput vs request size (pcielab, Gen2 x4)".into(),
            x_label: "Request size (B)".into(),
            y_label: "Throughput (Gb/s)".into(),
            series: vec![Series {
                label: "pcielab simulator, MRRS 512, MPS 256".into(),
                points: rd.iter().map(|p| (p.0 as f64, p.1)).collect(),
                published: false,
            }],
        },
        Figure {
            name: "nettlp-fig10-write".into(),
            title: "NetTLP Fig. 10: DMA write throughput vs request size (pcielab, Gen2 x4)".into(),
            x_label: "Request size (B)".into(),
            y_label: "Throughput (Gb/s)".into(),
            series: vec![Series {
                label: "pcielab simulator, MPS 256".into(),
                points: wr.iter().map(|p| (p.0 as f64, p.1)).collect(),
                published: false,
            }],
        },
    ];
    Ok(Output { rows, figures })
}

/// The NetTLP experiments.
pub fn experiments() -> Vec<Experiment> {
    vec![
        Experiment {
            name: "nettlp-p2p",
            specs: P2P,
            run: run_p2p,
        },
        Experiment {
            name: "nettlp-encap",
            specs: ENCAP,
            run: run_encap,
        },
        Experiment {
            name: "nettlp-shapes",
            specs: SHAPES,
            run: run_shapes,
        },
    ]
}
