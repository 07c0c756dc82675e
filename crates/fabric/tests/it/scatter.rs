//! Scatter bursts (burst mode): the small DMA reads a device asks for at one instant
//! travel as one record whose pieces each have their own address and tag, and the
//! root complex answers them with scatter bursts of completions. Against the exact
//! model: the same TLPs in the same order on every link, the same bytes delivered,
//! fewer kernel events, and the same end within the burst's own delays.

use crate::burst::tlps_by_dir;
use crate::timed::{one_link, with_switch};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{DmaId, Endpoint, EpCx, FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// What [`Reader`] got: per read (its index in the reads asked for, follow-ups after
/// the first round), whether it succeeded and its bytes.
type Got = Rc<RefCell<BTreeMap<usize, (bool, Vec<u8>)>>>;

/// Two microseconds after start, DMA-reads every `(addr, len)` of `first` and then writes `write`; when
/// read `i` of the first round is done, reads `follow[i]` (if there is one), so that
/// a burst of completions leads to reads of its own.
#[derive(Debug, Default)]
struct Reader {
    first: Vec<(u64, u64)>,
    follow: Vec<(u64, u64)>,
    write: Option<(u64, Vec<u8>)>,
    ids: HashMap<DmaId, usize>,
    got: Got,
}

impl Endpoint for Reader {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        // Once the links have exchanged their initial credits.
        cx.timer(SimDuration::from_us(2), 0);
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        for (i, &(addr, len)) in self.first.iter().enumerate() {
            let id = cx.dma_read(addr, len);
            self.ids.insert(id, i);
        }
        if let Some((addr, data)) = self.write.take() {
            cx.dma_write(addr, data);
        }
    }
    fn dma_done(&mut self, id: DmaId, ok: bool, data: &[u8], cx: &mut EpCx<'_>) {
        let Some(i) = self.ids.remove(&id) else {
            return; // the write
        };
        self.got.borrow_mut().insert(i, (ok, data.to_vec()));
        if let Some(&(addr, len)) = self.follow.get(i) {
            let id = cx.dma_read(addr, len);
            self.ids.insert(id, self.first.len() + i);
        }
    }
}

/// Host memory's byte at `a`, written before the run (independent of the simulator).
fn pattern(a: u64) -> u8 {
    (a.wrapping_mul(0x9e37_79b9) >> 7) as u8
}

/// Reads, each `(address, length)`.
type Reads = Vec<(u64, u64)>;

/// The reads of the tests: 64-byte and 16-byte reads spread over many pages (each
/// DMA one request, as a NIC's packet and descriptor reads are), some above 4 GiB.
fn reads(high: bool) -> (Reads, Reads) {
    let base = 0x4000_0000u64;
    let mut first: Reads = (0..40u64)
        .map(|i| (base + i * 0x3040 % 0x10_0000, 64))
        .collect();
    first.extend((0..24u64).map(|i| (base + 0x20_0000 + i * 16, 16)));
    if high {
        // Above 4 GiB (4-DW headers) between reads below: never in one burst with them.
        for i in 0..6u64 {
            first.insert(10 + 3 * i as usize, (0x1_2000_0000 + i * 0x1000, 64));
        }
    }
    let follow = (0..32u64)
        .map(|i| (base + 0x30_0000 + i * 0x2100, 64))
        .collect();
    (first, follow)
}

/// Runs [`Reader`] on `t` with burst size `burst` (1: the exact model) and `tags`
/// DMA tags; returns the simulation and what the device got.
fn run(t: &Topology, burst: u8, tags: u16, high: bool) -> (FabricSim, Got) {
    let cfg = SimConfig {
        trace: true,
        burst,
        dma_tags: tags,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(t, &KindRegistry::builtin(), cfg).unwrap();
    let (first, follow) = reads(high);
    for &(a, l) in first.iter().chain(&follow) {
        let bytes: Vec<u8> = (a..a + l).map(pattern).collect();
        sim.host_write(a, &bytes);
    }
    let got = Got::default();
    let dev = Reader {
        first,
        follow,
        write: Some((0x5000_0000, vec![0xa5; 200])),
        got: got.clone(),
        ..Reader::default()
    };
    sim.attach("ep", Box::new(dev)).unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    (sim, got)
}

#[test]
fn scatter_bursts_carry_the_exact_models_tlps_and_bytes() {
    let cases = [
        ("one link", one_link(3, 8), 64u16, false),
        ("one link, 8 tags", one_link(3, 8), 8, false),
        ("one link, reads above 4 GiB", one_link(3, 8), 64, true),
        ("through a switch", with_switch(3, 4), 64, false),
    ];
    for (what, t, tags, high) in cases {
        let (exact, got_e) = run(&t, 1, tags, high);
        let (burst, got_b) = run(&t, 16, tags, high);
        // Every read returned host memory's bytes, computed here, not by the simulator.
        let (first, follow) = reads(high);
        let all: Vec<(u64, u64)> = first.iter().chain(&follow).copied().collect();
        let got = got_b.borrow();
        assert_eq!(got.len(), all.len(), "{what}: reads finished");
        for (i, &(a, l)) in all.iter().enumerate() {
            let want: Vec<u8> = (a..a + l).map(pattern).collect();
            assert_eq!(got[&i], (true, want), "{what}: read {i} at {a:#x}");
        }
        assert!(
            *got == *got_e.borrow(),
            "{what}: the exact model got other bytes"
        );
        let mut w = vec![0u8; 200];
        burst.host_read(0x5000_0000, &mut w);
        assert_eq!(w, vec![0xa5; 200], "{what}: the write");
        // The same TLPs, bytes and sequence numbers, in the same order, on every link.
        let (a, b) = (tlps_by_dir(&exact), tlps_by_dir(&burst));
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        for (dir, tlps) in &a {
            assert_eq!(tlps.len(), b[dir].len(), "{what}, {dir}");
            if let Some(k) = (0..tlps.len()).find(|&k| tlps[k] != b[dir][k]) {
                panic!(
                    "{what}: TLPs differ on {dir} from the {k}th: exact {:?}, burst {:?}",
                    &tlps[k..(k + 3).min(tlps.len())],
                    &b[dir][k..(k + 3).min(tlps.len())]
                );
            }
        }
        // Grouped: far fewer events (the test fails if no scatter burst formed).
        assert!(
            burst.events() * 10 < exact.events() * 8,
            "{what}: {} events in burst mode, {} exact",
            burst.events(),
            exact.events()
        );
        // The end moves by no more than the bursts' store-and-forward delays: here
        // under a microsecond either way (the exact run takes several).
        let (e, s) = (exact.now().as_ps() as i64, burst.now().as_ps() as i64);
        assert!(
            (e - s).abs() < 1_000_000,
            "{what}: ends at {s} ps, exact {e} ps"
        );
    }
}

#[test]
fn scatter_bursts_are_off_with_the_exact_model_and_sized_by_credits() {
    // Exact model: nothing held, nothing grouped.
    let (exact, _) = run(&one_link(3, 8), 1, 64, false);
    assert_eq!(exact.scatter_burst_sizes(64), (1, 1));
    // Burst mode at Gen3 x8: 64-byte reads and their completions go in bursts of up
    // to 16 (the burst size) where the root port's buffers allow.
    let (burst, _) = run(&one_link(3, 8), 16, 64, false);
    let (rd, cpl) = burst.scatter_burst_sizes(64);
    assert!(rd > 1 && cpl > 1 && rd <= 16 && cpl <= 16, "{rd} {cpl}");
}
