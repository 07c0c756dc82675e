//! Compatibility mode against numbers printed by the published pcie-bench model.
//!
//! `pcie_bench_ref.csv` holds values that the published model (pcie-bench/pcie-model)
//! computed when run by hand with Python; they are data from an independent
//! implementation, not from this crate. Every value must agree to 1e-12 relative (the
//! published tools print 2 decimals; we hold ourselves to the last bits).

use pcielab_model::eth::Ethernet;
use pcielab_model::nic::{self, Batching, NicKind};
use pcielab_model::{link, AddrWidth, Lanes, Mode, Model, Mps, Mrrs, PcieConfig, Rcb};
use pcielab_wire::Generation;

const REF: &str = include_str!("pcie_bench_ref.csv");

fn close(ours: f64, theirs: f64, what: &str) {
    let tol = 1e-12 * theirs.abs().max(1.0);
    assert!(
        (ours - theirs).abs() <= tol,
        "{what}: ours {ours:?} published {theirs:?}"
    );
}

fn gen(s: &str) -> Generation {
    Generation::from_number(s.parse().unwrap()).unwrap()
}

#[test]
fn every_reference_value_matches() {
    let (mut links, mut bws, mut nics) = (0, 0, 0);
    for line in REF.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        match f[0] {
            "link" => {
                let (g, l, m) = (
                    gen(f[1]),
                    Lanes::new(f[2].parse().unwrap()).unwrap(),
                    Mps::new(f[3].parse().unwrap()).unwrap(),
                );
                close(
                    link::raw_gbps(Mode::Compat, g, l),
                    f[4].parse().unwrap(),
                    line,
                );
                close(
                    link::link_gbps(Mode::Compat, g, l, m),
                    f[5].parse().unwrap(),
                    line,
                );
                links += 2;
            }
            "bw" => {
                let mut c = PcieConfig::new(gen(f[1]), f[2].parse().unwrap()).unwrap();
                c.mps = Mps::new(f[3].parse().unwrap()).unwrap();
                c.mrrs = Mrrs::new(f[4].parse().unwrap()).unwrap();
                c.rcb = Rcb::new_compat(f[5].parse().unwrap()).unwrap();
                c.rcb_chunks = f[6] == "1";
                c.addr = AddrWidth::from_bits(f[7].parse().unwrap()).unwrap();
                c.ecrc = f[8] == "1";
                let m = Model::new(c).unwrap();
                let size: u64 = f[9].parse().unwrap();
                let p = m.point(size).unwrap();
                close(p.write_gbps, f[10].parse().unwrap(), line);
                close(p.read_gbps, f[11].parse().unwrap(), line);
                close(p.readwrite_gbps, f[12].parse().unwrap(), line);
                bws += 3;
            }
            "nic" => {
                let m = Model::new(PcieConfig::new(Generation::Gen3, 8).unwrap()).unwrap();
                let kind = match f[1] {
                    "simple" => NicKind::Simple,
                    "kernel" => NicKind::Batched(Batching::LINUX),
                    "dpdk" => NicKind::Batched(Batching::DPDK),
                    k => panic!("unknown kind {k}"),
                };
                let e = Ethernet::new(40).unwrap();
                let p = nic::evaluate(&m, kind, e, f[2].parse().unwrap()).unwrap();
                close(p.eth_gbps, f[3].parse().unwrap(), line);
                close(p.bidir_gbps, f[4].parse().unwrap(), line);
                close(p.tx_gbps, f[5].parse().unwrap(), line);
                close(p.rx_gbps, f[6].parse().unwrap(), line);
                nics += 4;
            }
            k => panic!("unknown line kind {k}"),
        }
    }
    // Guard against a truncated file silently checking nothing.
    assert_eq!((links, bws, nics), (432, 2190, 1260));
}
