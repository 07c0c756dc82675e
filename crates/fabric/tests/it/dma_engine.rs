//! The SR-IOV DMA engine of seed 003 (`kind = "dma-engine"`) with its PF and VF
//! drivers: every function moves its own stream with its own requester ID, the
//! reorder window fills and stalls, and nothing reaches another function.

use pcielab_device::dma_engine::{reg, STREAM_HASH_START};
use pcielab_fabric::drivers::dma_engine::{run, Dir, DmaDriverConfig, DmaFunction};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig, TraceKind};
use pcielab_fabric::topology::Topology;
use pcielab_wire::tlp::{MemOp, TlpHeader, TlpRepr};
use pcielab_wire::Bdf;
use std::collections::{BTreeMap, BTreeSet};

pub(crate) fn topo(keys: &str) -> Topology {
    let text = format!(
        "[[node]]\nname = \"rc\"\nkind = \"root-complex\"\n\
         [[node]]\nname = \"dma\"\nkind = \"dma-engine\"\n{keys}\n\
         [[link]]\nup = \"rc.0\"\ndown = \"dma\"\ngen = 3\nwidth = 8\n"
    );
    Topology::parse(&text, "dma.toml", &KindRegistry::builtin()).unwrap()
}

pub(crate) fn sim_with(keys: &str, cfg: SimConfig) -> FabricSim {
    FabricSim::new(&topo(keys), &KindRegistry::builtin(), cfg).unwrap()
}

fn gen3() -> SimConfig {
    SimConfig {
        mps: 256,
        mrrs: 512,
        ..SimConfig::default()
    }
}

fn open_all(s: &mut FabricSim, n: u16, cfg: DmaDriverConfig) -> Vec<DmaFunction> {
    (0..n)
        .map(|i| DmaFunction::open(s, "dma", i, cfg.clone()).unwrap())
        .collect()
}

/// The engine's counters of function `f` (its report).
fn report(s: &FabricSim, f: u16) -> serde_json::Value {
    let r = s.model("dma").unwrap().report().unwrap();
    r["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["function"] == f)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn four_vfs_and_the_pf_each_move_their_own_stream_with_their_own_id() {
    let cfg = SimConfig {
        trace: true,
        ..gen3()
    };
    let mut s = sim_with("vfs = 4\nchunk = 8192", cfg);
    let mut fns = open_all(&mut s, 5, DmaDriverConfig::default());
    let ids: Vec<Bdf> = fns.iter().map(|f| f.bdf()).collect();
    assert_eq!(
        ids.iter().map(|b| b.to_string()).collect::<Vec<_>>(),
        ["01:00.0", "01:00.1", "01:00.2", "01:00.3", "01:00.4"]
    );
    let h2d = run(&mut s, &mut fns, Dir::H2d, 48 * 1024, 3).unwrap();
    let d2h = run(&mut s, &mut fns, Dir::D2h, 40 * 1024 + 12, 3).unwrap();
    for (i, f) in fns.iter_mut().enumerate() {
        assert_eq!((h2d[i].bytes, h2d[i].errors), (3 * 48 * 1024, 0));
        assert_eq!((d2h[i].bytes, d2h[i].errors), (3 * (40 * 1024 + 12), 0));
        // The engine took exactly what this function's driver sent, in order, and the
        // driver found the function's own stream in its D2H buffer.
        assert_eq!(f.read_reg(&mut s, reg::H2D_HASH).unwrap(), f.h2d_hash());
        assert_ne!(f.h2d_hash(), STREAM_HASH_START);
        assert_eq!(f.read_reg(&mut s, reg::H2D_GAPS).unwrap(), 0);
        assert_eq!(f.d2h_mismatches(), 0);
        assert_eq!(report(&s, i as u16)["dma_errors"], 0);
    }
    // On the wire: the function's buffer is read and written by that function's ID
    // only, and completions go back to the ID that asked.
    let tr = s.trace().unwrap();
    let mut readers = BTreeMap::<Bdf, u64>::new();
    let mut writers = BTreeSet::new();
    let mut cpl_to = BTreeSet::new();
    for r in &tr.records {
        // What the device sends (the host's register accesses go the other way).
        if !matches!(r.kind, TraceKind::Tlp { replay: false, .. })
            || !tr.dir_name(r).starts_with("dma->")
        {
            continue;
        }
        let Ok(t) = TlpRepr::parse_bytes(tr.bytes(r)) else {
            continue;
        };
        match t.header {
            TlpHeader::Mem(m) if m.op == MemOp::Read => {
                *readers.entry(t.requester_id()).or_default() += 1
            }
            TlpHeader::Mem(m)
                if m.op == MemOp::Write && !(0xfee0_0000..0xfef0_0000).contains(&m.address) =>
            {
                writers.insert(t.requester_id());
            }
            _ => {}
        }
    }
    // Completions come down to the ID that asked.
    for r in &tr.records {
        if !matches!(r.kind, TraceKind::Tlp { replay: false, .. })
            || tr.dir_name(r).starts_with("dma->")
        {
            continue;
        }
        if let Ok(TlpRepr {
            header: TlpHeader::Cpl(c),
            ..
        }) = TlpRepr::parse_bytes(tr.bytes(r))
        {
            cpl_to.insert(c.requester_id);
        }
    }
    let all: BTreeSet<Bdf> = ids.iter().copied().collect();
    assert_eq!(readers.keys().copied().collect::<BTreeSet<_>>(), all);
    assert_eq!(writers, all);
    assert_eq!(cpl_to, all);
}

/// 1 MiB transfers on Gen3 x8, MPS 256: D2H is bounded by the link's posted-write
/// goodput, H2D by the completions'.
#[test]
fn one_mib_transfers_run_near_the_links_limit() {
    let mut s = sim_with("window = 65536", gen3());
    let mut f = open_all(&mut s, 1, DmaDriverConfig::default());
    let d2h = run(&mut s, &mut f, Dir::D2h, 1 << 20, 4).unwrap()[0].gbps;
    let h2d = run(&mut s, &mut f, Dir::H2d, 1 << 20, 4).unwrap()[0].gbps;
    eprintln!("1 MiB: D2H {d2h:.2} Gb/s, H2D {h2d:.2} Gb/s");
    // Gen3 x8: 8 GT/s × 8 lanes × 128/130 = 63.0 Gb/s; 256-byte writes carry
    // 256 of 256 + 24 bytes (header 16, sequence number and LCRC 6, framing 2): 57.6.
    assert!(d2h > 50.0 && d2h < 57.6, "{d2h}");
    assert!(h2d > 45.0 && h2d < 57.6, "{h2d}");
}

/// Completions of the engine's read requests come back out of order across tags
/// (host memory with a seeded latency tail); the reorder window keeps the data in
/// order, and a window smaller than the round trip fills and stalls.
#[test]
fn the_reorder_window_takes_completions_out_of_order_and_stalls_when_full() {
    let mut results = Vec::new();
    for window in [1024, 16384] {
        let mut c = SimConfig {
            trace: true,
            ..gen3()
        };
        pcielab_fabric::host::model::apply_knob(&mut c, "mem_tail", "exp:1:300").unwrap();
        let mut s = sim_with(&format!("window = {window}\nchunk = 65536"), c);
        let mut f = open_all(&mut s, 1, DmaDriverConfig::default());
        let r = run(&mut s, &mut f, Dir::H2d, 256 * 1024, 2).unwrap()[0].clone();
        assert_eq!(r.errors, 0);
        // In order at the FPGA application: no gap, and the driver's hash.
        assert_eq!(f[0].read_reg(&mut s, reg::H2D_GAPS).unwrap(), 0);
        assert_eq!(f[0].read_reg(&mut s, reg::H2D_HASH).unwrap(), f[0].h2d_hash());
        // On the wire: a completion for a later request (by address) ahead of one
        // for an earlier request still owed.
        let tr = s.trace().unwrap();
        let mut reqs = BTreeMap::new(); // tag -> address of the request in flight
        let mut out_of_order = 0;
        for r in &tr.records {
            if !matches!(r.kind, TraceKind::Tlp { replay: false, .. }) {
                continue;
            }
            let Ok(t) = TlpRepr::parse_bytes(tr.bytes(r)) else {
                continue;
            };
            match t.header {
                TlpHeader::Mem(m) if m.op == MemOp::Read && tr.dir_name(r) == "dma->rc.0" => {
                    reqs.insert(t.tag().value(), (m.address, 0u32));
                }
                TlpHeader::Cpl(c) if c.requester_id == f[0].bdf() => {
                    let tag = c.tag.value();
                    let Some(&(addr, _)) = reqs.get(&tag) else {
                        continue;
                    };
                    if reqs.values().any(|&(a, _)| a < addr) {
                        out_of_order += 1;
                    }
                    if u32::from(c.byte_count) == u32::from(t.length_dw()) * 4 {
                        reqs.remove(&tag); // the request's last completion
                    }
                }
                _ => {}
            }
        }
        let st = s.device_stats("dma").unwrap();
        eprintln!(
            "window {window}: {:.2} Gb/s, {out_of_order} completions ahead of an earlier request's, {} stalls, {} reads in flight at most",
            r.gbps, st.window_stalls, st.max_reads_in_flight
        );
        assert!(out_of_order > 0, "window {window}");
        results.push((r.gbps, st.window_stalls, st.max_reads_in_flight));
    }
    let ((small, small_stalls, small_max), (big, _, big_max)) = (results[0], results[1]);
    // 1 KiB: no more than 1 KiB asked for past the in-order point, so at most four
    // requests in flight (the window reopens by 256-byte completions, and a request
    // never asks past it); a full window stalls, and a round trip per KiB caps
    // throughput far below the 16 KiB window's.
    assert!(small_max <= 4 && big_max > 16, "{small_max} {big_max}");
    assert!(small_stalls > 100, "{small_stalls}");
    assert!(small < big / 2.0, "{small} vs {big}");
}
