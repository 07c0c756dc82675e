//! Whole-page DMA writes hand their buffer to host memory instead of copying it (see
//! `HostMemory` in the functional module): a TLP that links may still retransmit keeps
//! its bytes even when its page is overwritten before then.

use crate::timed::with_switch;
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig, TraceKind};
use pcielab_sim::SimTime;
use std::collections::HashMap;

/// `count` 4 KiB DMA writes over a two-page window through a switch, with MPS 4096
/// (one TLP per page) and `dllp_error_rate` of DLLPs lost: a lost ACK makes the
/// transmitter retransmit, when its replay timer expires, TLPs the receiver has
/// already taken (and the root complex already written to host memory).
fn run(dllp_error_rate: f64, count: u64) -> (FabricSim, u64) {
    let cfg = SimConfig {
        mps: 4096,
        dllp_error_rate,
        seed: Some(11),
        trace: true,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&with_switch(2, 4), &KindRegistry::builtin(), cfg).unwrap();
    let base = sim.alloc_dma(8192);
    let stream = DmaStream::new(
        DmaOpKind::Write,
        4096,
        8,
        count,
        base,
        8192,
        AddrPattern::Sequential,
    );
    sim.attach("ep", Box::new(stream)).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    (sim, base)
}

#[test]
fn retransmitted_whole_page_writes_carry_what_was_first_sent() {
    // Half the DLLPs lost: ACKs for several TLPs in a row go missing, so pages are
    // written again (the window is two pages) while links still hold the TLPs that
    // wrote them before, and then retransmit those.
    let (sim, base) = run(0.5, 96);
    let t = sim.trace().unwrap();
    // Per direction and sequence number: the bytes of the latest first transmission.
    let mut sent: HashMap<(u16, u16), Vec<u8>> = HashMap::new();
    let (mut replays, mut checked) = (0, 0);
    for r in &t.records {
        let TraceKind::Tlp { seq, replay, .. } = r.kind else {
            continue;
        };
        let bytes = t.bytes(r).to_vec();
        if replay {
            replays += 1;
            let first = &sent[&(r.dir, seq)];
            assert_eq!(
                &bytes,
                first,
                "{} seq {seq}: replayed bytes differ",
                t.dir_name(r)
            );
            checked += (bytes.len() > 4096) as u32;
        } else {
            sent.insert((r.dir, seq), bytes);
        }
    }
    assert!(checked > 20, "{replays} replays, {checked} of whole pages");
    // Host memory: each page holds the last write to it (DMA i writes page i % 2 with
    // byte k = k ^ 31 i; posted writes stay in order).
    for (page, last) in [(0u64, 94u64), (1, 95)] {
        let mut got = vec![0u8; 4096];
        sim.host_read(base + page * 4096, &mut got);
        let want: Vec<u8> = (0..4096u64)
            .map(|k| (k as u8) ^ (last as u8).wrapping_mul(31))
            .collect();
        assert_eq!(got, want, "page {page}");
    }
}

#[test]
fn whole_page_runs_are_deterministic() {
    for rate in [0.0, 0.5] {
        let (a, _) = run(rate, 32);
        let (b, _) = run(rate, 32);
        assert_eq!(a.trace().unwrap().hash(), b.trace().unwrap().hash());
    }
}
