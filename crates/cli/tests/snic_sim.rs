//! The `simple-nic` topology kind: in the timed simulator (a frame out by DMA and back
//! on the loopback MAC), and its configuration space as the real `lspci` reads it from
//! `pcielab topo lspci`.

mod common;

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;

const TOPO: &str = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
                    [[node]]\nname=\"nic\"\nkind=\"simple-nic\"\n\
                    [[link]]\nup=\"rc.0\"\ndown=\"nic\"\ngen=3\nwidth=8\n";

fn sim(topo: &str) -> FabricSim {
    let reg = KindRegistry::builtin();
    let t = Topology::parse(topo, "snic.toml", &reg).unwrap();
    FabricSim::new(&t, &reg, SimConfig::default()).unwrap()
}

fn desc(addr: u64, len: u64) -> Vec<u8> {
    let mut d = addr.to_le_bytes().to_vec();
    d.extend_from_slice(&len.to_le_bytes());
    d
}

/// Sets the rings up, posts RX buffer 0 and sends `frame` from TX descriptor 1; returns
/// the RX buffer's and RX ring's addresses.
fn send_one(sim: &mut FabricSim, frame: &[u8]) -> (u64, u64) {
    let bar4 = sim.bar("nic", 4).expect("BAR4 assigned");
    let mem = sim.alloc_dma(0x4000);
    let (tx_ring, rx_ring) = (mem, mem + 0x100);
    let (tx_buf, rx_buf) = (mem + 0x1000, mem + 0x2000);
    sim.host_write(tx_buf, frame);
    sim.host_write(tx_ring + 16, &desc(tx_buf, frame.len() as u64));
    sim.host_write(rx_ring, &desc(rx_buf, 2048));
    sim.mmio_write(bar4, &tx_ring.to_le_bytes()).unwrap();
    sim.mmio_write(bar4 + 8, &rx_ring.to_le_bytes()).unwrap();
    sim.mmio_write(bar4 + 24, &1u32.to_le_bytes()).unwrap();
    sim.mmio_write(bar4 + 20, &0u32.to_le_bytes()).unwrap();
    sim.mmio_write(bar4 + 16, &1u32.to_le_bytes()).unwrap();
    sim.run_for(SimDuration::from_us(200));
    (rx_buf, rx_ring)
}

/// The host sets up the rings, posts an RX buffer and rings the TX doorbell: the frame
/// goes out by DMA, comes back on the loopback MAC into the RX buffer, its descriptor is
/// written back with the length, and the TX and RX interrupts arrive, in that order.
#[test]
fn a_simple_nic_node_loops_a_frame_back_in_the_simulator() {
    let mut s = sim(TOPO);
    let frame: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 1) as u8).collect();
    let (rx_buf, rx_ring) = send_one(&mut s, &frame);
    let mut got = vec![0u8; frame.len()];
    s.host_read(rx_buf, &mut got);
    assert_eq!(got, frame);
    let mut d = [0u8; 16];
    s.host_read(rx_ring, &mut d);
    assert_eq!(d.to_vec(), desc(rx_buf, 1000), "descriptor written back");
    let irqs = s.interrupts();
    assert_eq!(irqs.len(), 2, "{irqs:?}");
    assert!(irqs[0].0 < irqs[1].0);
    assert_ne!(irqs[0].1.data, irqs[1].1.data, "two vectors");
    assert!(s.errors().is_empty(), "{:?}", s.errors());
}

/// With `mac = "none"` the frame is sent into the void: the TX interrupt still comes
/// (one per doorbell), nothing is received.
#[test]
fn with_no_mac_the_frame_is_not_received() {
    let mut s = sim(&TOPO.replace(
        "kind=\"simple-nic\"\n",
        "kind=\"simple-nic\"\nmac=\"none\"\n",
    ));
    let frame = vec![0x5au8; 300];
    let (rx_buf, _) = send_one(&mut s, &frame);
    let mut got = vec![0u8; frame.len()];
    s.host_read(rx_buf, &mut got);
    assert_eq!(got, vec![0; 300]);
    assert_eq!(s.interrupts().len(), 1);
}

/// `pcielab topo lspci` of a topology with a simple-nic, read by pciutils' `lspci`:
/// an Ethernet controller with MSI-X (2 vectors) in BAR2 and a 64-bit BAR4.
#[test]
fn real_lspci_reads_the_simple_nic() {
    let text = common::real_lspci("snic", TOPO, "01:00.0");
    assert!(text.contains("Ethernet controller"), "{text}");
    assert!(text.contains("MSI-X: Enable+ Count=2"), "{text}");
    assert!(
        text.contains("Vector table: BAR=2 offset=00000000"),
        "{text}"
    );
    // (a dump carries no BAR sizes, so lspci shows none)
    let region4 = text
        .lines()
        .find(|l| l.contains("Region 4: Memory at"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(region4.ends_with("(64-bit, non-prefetchable)"), "{text}");
}
