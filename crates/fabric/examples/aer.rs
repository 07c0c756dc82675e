//! Error reporting, end to end, the way a driver developer would watch it:
//!
//! 1. host software enables Correctable Error Reporting on a switch port and the root
//!    port, and the root port's AER interrupt (Root Error Command);
//! 2. a DMA write stream runs over lossy links (seeded LCRC and DLLP errors);
//! 3. the ports log Bad TLP / Bad DLLP / replay errors, ERR_COR messages travel to the
//!    root port, which logs them and raises one MSI;
//! 4. the "AER driver" reads Root Error Status and Error Source ID, then clears it;
//! 5. a Type 0 vendor-defined message to a device that does not support it comes back as
//!    an Unsupported Request the device logs, with the message's header in its AER
//!    Header Log (First Error Pointer: Unsupported Request);
//! 6. data poisoning: a line of host memory goes bad (an uncorrectable ECC error, say);
//!    the device's DMA read of it gets a poisoned completion and fails, and the device
//!    logs Poisoned TLP Received as an Advisory Non-Fatal Error; a poisoned MMIO write
//!    is dropped by the device, which sends ERR_NONFATAL.
//!
//! Run: `cargo run -p pcielab-fabric --example aer`

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{
    AddrPattern, DmaOpKind, DmaStream, FabricSim, SimConfig, VdmRoute, VendorMessage,
};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::Bdf;

const TOPOLOGY: &str = "seed = 3
[[node]]
name = \"rc\"
kind = \"root-complex\"
[[node]]
name = \"sw\"
kind = \"switch\"
ports = 1
[[node]]
name = \"nic\"
kind = \"psmem\"
[[link]]
up = \"rc.0\"
down = \"sw\"
gen = 3
width = 4
[[link]]
up = \"sw.0\"
down = \"nic\"
gen = 3
width = 4
";

/// (PCI Express capability, AER capability) of `f`, found as software does.
fn caps(sim: &mut FabricSim, f: Bdf) -> (u16, u16) {
    let (mut pcie, mut at) = (0, (sim.cfg_read(f, 0x34) & 0xfc) as u16);
    while at != 0 {
        let h = sim.cfg_read(f, at);
        if h & 0xff == 0x10 {
            pcie = at;
        }
        at = ((h >> 8) & 0xfc) as u16;
    }
    let mut aer = 0x100;
    while sim.cfg_read(f, aer) & 0xffff != 1 {
        aer = (sim.cfg_read(f, aer) >> 20) as u16;
    }
    (pcie, aer)
}

/// Names of the correctable error bits set in `v`.
fn correctable_names(v: u32) -> String {
    let names = [
        (0, "Receiver Error"),
        (6, "Bad TLP"),
        (7, "Bad DLLP"),
        (8, "REPLAY_NUM Rollover"),
        (12, "Replay Timer Timeout"),
        (13, "Advisory Non-Fatal"),
    ];
    let set: Vec<&str> = names
        .iter()
        .filter(|(b, _)| v & 1 << b != 0)
        .map(|(_, n)| *n)
        .collect();
    if set.is_empty() {
        "none".into()
    } else {
        set.join(", ")
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(TOPOLOGY, "aer.toml", &reg)?;
    let cfg = SimConfig {
        error_rate: 0.05,
        dllp_error_rate: 0.05,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&topo, &reg, cfg)?;
    let nic = sim.bdf("nic").ok_or("no nic")?;
    let port = sim
        .tree()
        .get(nic)
        .and_then(|f| f.parent)
        .ok_or("no port")?;
    let rp = Bdf::new(0, 1, 0)?;

    // 1. Correctable Error Reporting Enable (Device Control bit 0) on the switch port
    //    and the root port; Root Error Command: interrupt on ERR_COR received.
    for f in [port, rp] {
        let (p, _) = caps(&mut sim, f);
        let dc = sim.cfg_read(f, p + 8);
        sim.cfg_write(f, p + 8, (dc & 0xffff) | 1);
    }
    let (_, ra) = caps(&mut sim, rp);
    sim.cfg_write(rp, ra + 0x2c, 1);

    // 2. 200 DMA writes of 1 KiB over the lossy links.
    let base = sim.alloc_dma(1 << 20);
    let stream = DmaStream::new(
        DmaOpKind::Write,
        1024,
        16,
        200,
        base,
        1 << 20,
        AddrPattern::Sequential,
    );
    sim.attach("nic", Box::new(stream))?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    println!("after {} of simulated time:", sim.now());
    for (link, c) in sim.counters() {
        println!(
            "  {link:<12} TLPs {:>4}  corrupted {:>3}  replays {:>3}  replay timeouts {}",
            c.tlps, c.corrupted, c.replays, c.replay_timeouts
        );
    }

    // 3. What the ports logged, and what reached the root port.
    for (name, f) in [("nic", nic), ("switch port", port), ("root port", rp)] {
        let (_, a) = caps(&mut sim, f);
        let v = sim.cfg_read(f, a + 0x10);
        println!(
            "  {name:<12} {f}: correctable errors: {}",
            correctable_names(v)
        );
    }
    let msgs = sim.error_messages().len();
    let from_port = sim
        .error_messages()
        .iter()
        .filter(|(_, m)| m.source == port)
        .count();
    println!("  ERR_COR messages logged by the root port: {msgs} ({from_port} from {port})");
    let irqs: Vec<(SimTime, u64, u32)> = sim
        .interrupts()
        .iter()
        .filter(|(_, i)| i.from == rp)
        .map(|(t, i)| (*t, i.address, i.data))
        .collect();
    for (t, address, data) in &irqs {
        println!("  AER interrupt (MSI) from {rp} at {t}: address {address:#x} data {data:#x}");
    }

    // 4. The AER driver: Root Error Status, Error Source ID, then clear (RW1C).
    let st = sim.cfg_read(rp, ra + 0x30);
    let src = Bdf::from_raw((sim.cfg_read(rp, ra + 0x34) & 0xffff) as u16);
    println!(
        "  Root Error Status {st:#x} (ERR_COR received: {}, multiple: {}), first source {src}",
        st & 1,
        st >> 1 & 1
    );
    sim.cfg_write(rp, ra + 0x30, 0x7f);
    println!(
        "  after clearing: Root Error Status {:#x}",
        sim.cfg_read(rp, ra + 0x30)
    );

    // 5. A Type 0 vendor-defined message the device does not support.
    let mut m = VendorMessage::new(VdmRoute::Id(nic), 0x1ab4, 0, vec![0; 8]);
    m.type1 = false;
    sim.send_vendor_message(&m)?;
    sim.run_for(SimDuration::from_us(5));
    let (_, na) = caps(&mut sim, nic);
    let ur = sim.cfg_read(nic, na + 4) & 1 << 20 != 0;
    println!("  vendor-defined message (Type 0) to {nic}: Unsupported Request logged: {ur}");
    // The "AER driver" reads which error came first and the header of its TLP, as
    // Linux prints "TLP Header: …".
    let fep = sim.cfg_read(nic, na + 0x18) & 0x1f;
    let log: Vec<u32> = (0..4u16)
        .map(|i| sim.cfg_read(nic, na + 0x1c + 4 * i))
        .collect();
    let hdr: Vec<u8> = log.iter().flat_map(|w| w.to_be_bytes()).collect();
    let p = pcielab_wire::tlp::TlpPacket::new_unchecked(&hdr[..]);
    // The message carries data: MsgD, a 4-DW header.
    let logged_vdm = p.kind() == Some(pcielab_wire::tlp::TlpKind::MsgD)
        && p.header_len() == 16
        && p.msg_code().raw() == 0x7e;
    println!(
        "    First Error Pointer {fep}; Header Log {:08x} {:08x} {:08x} {:08x}: {:?} {:?} from {}",
        log[0],
        log[1],
        log[2],
        log[3],
        p.kind(),
        p.msg_code(),
        p.requester_id()
    );

    // 6. Data poisoning. The device reports Non-Fatal errors (Device Control bit 1).
    let (np, _) = caps(&mut sim, nic);
    let dc = sim.cfg_read(nic, np + 8);
    sim.cfg_write(nic, np + 8, (dc & 0xffff) | 2);
    sim.host_write(base, &[0x11; 4096]);
    sim.poison_host_memory(base + 0x100, 64);
    let read = DmaStream::new(
        DmaOpKind::Read,
        4096,
        1,
        1,
        base,
        4096,
        AddrPattern::Sequential,
    );
    sim.attach("nic", Box::new(read))?;
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let rep = sim
        .model("nic")
        .and_then(|m| m.report())
        .ok_or("no report")?;
    // Poisoned completions on the device's own link (the same one crossed the link
    // above it too).
    let poisoned_cpls: u64 = sim
        .counters()
        .iter()
        .filter(|(l, _)| l.ends_with("->nic"))
        .map(|(_, c)| c.poisoned)
        .sum();
    let unc = sim.cfg_read(nic, na + 4);
    println!(
        "  DMA read over a poisoned line: {} of {} failed; poisoned completions {poisoned_cpls}; \
         Poisoned TLP Received logged: {}, correctable: {}",
        rep["failed"],
        rep["dmas"],
        unc & 1 << 12 != 0,
        correctable_names(sim.cfg_read(nic, na + 0x10))
    );
    let before = sim.error_messages().len();
    let bar = sim.bar("nic", 0).ok_or("no BAR")?;
    sim.mmio_write_poisoned(bar, &[0xde, 0xad, 0xbe, 0xef])?;
    sim.run_for(SimDuration::from_us(5));
    let nonfatal: Vec<String> = sim.error_messages()[before..]
        .iter()
        .map(|(t, m)| format!("{:?} from {} at {t}", m.severity, m.source))
        .collect();
    println!("  poisoned MMIO write to {nic}: dropped; messages: {nonfatal:?}");

    // The walkthrough doubles as a check (it runs in CI).
    let poison_ok = rep["failed"] == 1 && poisoned_cpls == 1 && nonfatal.len() == 1;
    let log_ok = fep == 20 && logged_vdm;
    if msgs == 0 || from_port == 0 || irqs.len() != 1 || st & 1 == 0 || !ur || !log_ok || !poison_ok
    {
        return Err("the error-reporting walkthrough did not go as described".into());
    }
    Ok(())
}
