//! Property tests over random configurations.

use pcielab_model::{AddrWidth, Lanes, Mode, Model, Mps, Mrrs, PcieConfig, Rcb};
use pcielab_wire::Generation;
use proptest::prelude::*;

fn any_gen() -> impl Strategy<Value = Generation> {
    (1u8..=6).prop_map(|n| Generation::from_number(n).unwrap())
}
fn pow2(lo: u32, hi: u32) -> impl Strategy<Value = u32> {
    (lo..=hi).prop_map(|e| 1u32 << e)
}

prop_compose! {
    /// Any configuration valid in both modes (RCB 64 or 128).
    fn any_cfg()(gen in any_gen(), lanes in pow2(0, 5), mps in pow2(7, 12), mrrs in pow2(7, 12),
                 rcb in pow2(6, 7), chunks in any::<bool>(), a64 in any::<bool>(), ecrc in any::<bool>())
                 -> PcieConfig {
        let mut c = PcieConfig::new(gen, lanes).unwrap();
        c.mps = Mps::new(mps).unwrap();
        c.mrrs = Mrrs::new(mrrs).unwrap();
        c.rcb = Rcb::new(rcb).unwrap();
        c.rcb_chunks = chunks;
        c.addr = if a64 { AddrWidth::Bits64 } else { AddrWidth::Bits32 };
        c.ecrc = ecrc;
        c
    }
}

fn with(mut c: PcieConfig, mode: Mode) -> Model {
    c.mode = mode;
    Model::new(c).unwrap()
}

proptest! {
    /// No mode, configuration, size or address gives more than the raw rate (or less than 0).
    #[test]
    fn never_above_raw(c in any_cfg(), spec in any::<bool>(), size in 1u64..(1 << 22), addr in any::<u32>()) {
        let m = with(c, if spec { Mode::Spec } else { Mode::Compat });
        let p = m.point_at(addr as u64, size).unwrap();
        for v in [p.read_gbps, p.write_gbps, p.readwrite_gbps] {
            prop_assert!(v.is_finite() && v > 0.0);
            prop_assert!(v <= m.wire_gbps() && m.wire_gbps() <= m.raw_gbps());
            prop_assert!(m.link_gbps() <= m.wire_gbps());
        }
    }

    /// Spec mode ≥ compatibility mode wherever spec mode only removes over-charging:
    /// Gen1–5, DW-multiple transfers at address 0, MRRS ≥ MPS; x2 or wider at 128b/130b
    /// (at x1 a DLLP per limit costs the same in both modes, except that a 128b/130b
    /// symbol time carries 128/130 of a byte, and the SKP block is dearer, 1/376 vs
    /// 4/1538, see tables.rs); and for read/write, x2 or wider (a read/write mix puts
    /// up to three DLLP streams — ACK, UpdateFC(P), UpdateFC(NP) — on the host → device
    /// direction, which at x1 can cost more than pcie-bench's two).
    #[test]
    fn spec_at_least_compat(c in any_cfg(), dws in 1u64..(1 << 18)) {
        prop_assume!(c.gen != Generation::Gen6);
        prop_assume!(c.mrrs.bytes() >= c.mps.bytes());
        prop_assume!(c.lanes.count() >= 2 || matches!(c.gen, Generation::Gen1 | Generation::Gen2));
        let size = dws * 4;
        let s = with(c, Mode::Spec).point(size).unwrap();
        let k = with(c, Mode::Compat).point(size).unwrap();
        prop_assert!(s.read_gbps >= k.read_gbps, "{s:?} {k:?}");
        prop_assert!(s.write_gbps >= k.write_gbps, "{s:?} {k:?}");
        if c.lanes.count() >= 2 {
            prop_assert!(s.readwrite_gbps >= k.readwrite_gbps, "{s:?} {k:?}");
        }
    }

    /// Wider links and newer generations never lose bandwidth, in either mode.
    #[test]
    fn monotone_in_lanes_and_generation(c in any_cfg(), spec in any::<bool>(), size in 1u64..(1 << 16)) {
        let mode = if spec { Mode::Spec } else { Mode::Compat };
        let base = with(c, mode).point(size).unwrap();
        if c.lanes.count() < 32 {
            let mut w = c;
            w.lanes = Lanes::new(c.lanes.count() * 2).unwrap();
            let wide = with(w, mode).point(size).unwrap();
            prop_assert!(wide.read_gbps >= base.read_gbps);
            prop_assert!(wide.write_gbps >= base.write_gbps);
            prop_assert!(wide.readwrite_gbps >= base.readwrite_gbps);
        }
        if c.gen != Generation::Gen6 {
            let mut n = c;
            n.gen = Generation::from_number(c.gen.number() + 1).unwrap();
            let next = with(n, mode).point(size).unwrap();
            prop_assert!(next.read_gbps >= base.read_gbps);
            prop_assert!(next.write_gbps >= base.write_gbps);
            prop_assert!(next.readwrite_gbps >= base.readwrite_gbps);
        }
    }

    /// The page shortcut of spec-mode splitting equals TLP-by-TLP accounting: the traffic
    /// of a transfer is the sum of the traffic of its two halves split at a page boundary.
    #[test]
    fn spec_split_is_additive(c in any_cfg(), addr in 0u64..(1 << 20), pages in 1u64..6, tail in 0u64..5000) {
        let m = with(c, Mode::Spec);
        let cut = (addr / 4096 + 1) * 4096; // first page boundary after addr
        let head = cut - addr;
        let body = pages * 4096 + tail;
        let whole = m.read_traffic(addr, head + body);
        let parts = m.read_traffic(addr, head).plus(m.read_traffic(cut, body));
        prop_assert_eq!(whole, parts);
        let whole = m.write_traffic(addr, head + body);
        let parts = m.write_traffic(addr, head).plus(m.write_traffic(cut, body));
        prop_assert_eq!(whole, parts);
    }
}

proptest! {
    /// NIC models never exceed the link bandwidth and give positive rates for any
    /// batching, frame size and mode.
    #[test]
    fn nic_within_link(c in any_cfg(), spec in any::<bool>(), frame in 5u64..20_000,
                       bs in proptest::array::uniform6(1u32..64), dpdk in any::<bool>(), simple in any::<bool>()) {
        use pcielab_model::eth::Ethernet;
        use pcielab_model::nic::{evaluate, Batching, NicKind};
        let m = with(c, if spec { Mode::Spec } else { Mode::Compat });
        let kind = if simple {
            NicKind::Simple
        } else {
            NicKind::Batched(Batching {
                tx_desc_fetch: bs[0], tx_writeback: bs[1], host_tx_batch: bs[2],
                host_free_batch: bs[3], host_rx_batch: bs[4], irq_every: bs[5], dpdk,
            })
        };
        match evaluate(&m, kind, Ethernet::new(100).unwrap(), frame) {
            Ok(p) => {
                for v in [p.tx_gbps, p.rx_gbps, p.bidir_gbps] {
                    prop_assert!(v.is_finite() && v > 0.0 && v <= m.link_gbps());
                }
                prop_assert!(p.bidir_gbps <= p.tx_gbps.min(p.rx_gbps) + 1e-9);
            }
            // Only an over-large batch LCM may be refused.
            Err(e) => prop_assert!(e.to_string().contains("least common multiple"), "{e}"),
        }
    }

    /// LAT_RD never decreases with size, and LAT_WRRD is never below LAT_RD.
    #[test]
    fn latency_monotone(c in any_cfg(), spec in any::<bool>(), size in 1u64..100_000, more in 0u64..5000) {
        use pcielab_model::latency::{evaluate, LatencyParams};
        let m = with(c, if spec { Mode::Spec } else { Mode::Compat });
        let p = LatencyParams::default();
        let a = evaluate(&m, &p, size).unwrap();
        let b = evaluate(&m, &p, size + more).unwrap();
        prop_assert!(b.lat_rd_ns >= a.lat_rd_ns);
        prop_assert!(a.lat_wrrd_ns >= a.lat_rd_ns);
        prop_assert!(a.lat_rd_ns >= p.rc_ns + p.mem_ns);
    }
}
