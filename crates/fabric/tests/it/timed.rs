//! The timed simulator: MMIO latency by hand, throughput against the analytic model,
//! errors with zero data loss, determinism, bad input, misbehaving devices.

use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{AddrPattern, DmaOpKind, DmaStream, FabricSim, HostRead, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::{SimDuration, SimTime};

pub fn one_link(gen: u8, width: u8) -> Topology {
    let s = format!(
        "seed = 7\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"ep\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n"
    );
    Topology::parse(&s, "t.toml", &KindRegistry::builtin()).unwrap()
}

pub fn with_switch(gen: u8, width: u8) -> Topology {
    let s = format!(
        "seed = 7\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n[[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
         [[node]]\nname=\"ep\"\nkind=\"psmem\"\n[[node]]\nname=\"ep2\"\nkind=\"psmem\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen={gen}\nwidth={width}\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ep\"\ngen={gen}\nwidth={width}\n\
         [[link]]\nup=\"sw.1\"\ndown=\"ep2\"\ngen={gen}\nwidth={width}\n"
    );
    Topology::parse(&s, "t.toml", &KindRegistry::builtin()).unwrap()
}

#[test]
fn mmio_read_latency_is_the_hand_computed_sum() {
    // RC ─ Gen3 x4 ─ switch ─ Gen3 x4 ─ endpoint. The BAR lies above 4 GiB (64-bit
    // prefetchable window), so the MRd of 4 bytes has a 16-byte header: + 8 bytes of
    // framing, sequence number and LCRC = 24 wire bytes; the CplD: 12 + 4 + 8 = 24.
    // One byte on x4 Gen3: 8 bits × 125 ps × 130/128 × 376/375 / 4 lanes.
    let cfg = SimConfig {
        rc_latency: SimDuration::from_ns(100),
        switch_latency: SimDuration::from_ns(150),
        propagation: SimDuration::from_ns(5),
        ep_latency: SimDuration::from_ns(40),
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&with_switch(3, 4), &KindRegistry::builtin(), cfg).unwrap();
    sim.run_for(SimDuration::from_us(5)); // links trained, idle
    let bar = sim.bar("ep", 0).unwrap();
    let r = sim.mmio_read(bar, 4).unwrap();
    let HostRead::Done { issued, done, .. } = r else {
        panic!("{r:?}")
    };
    // Serialization in ps, rounded up per transmission (each starts on an idle wire at
    // a whole picosecond): bytes × 1000 × 130 × 376 / (128 × 375 × 4) = bytes × 254.58...
    let ser = |bytes: u64| (bytes * 1000 * 130 * 376).div_ceil(128 * 375 * 4);
    let want = 100_000 // RC out
        + 2 * (ser(24) + 5_000) + 150_000 // two links down, switch
        + 40_000 // endpoint
        + 2 * (ser(24) + 5_000) + 150_000 // two links up, switch
        + 100_000; // RC in
    assert_eq!((done - issued).as_ps(), want, "issued {issued} done {done}");
}

const BIG: pcielab_fabric::timed::BufferCredits = pcielab_fabric::timed::BufferCredits {
    hdr: [128; 3],
    data: [2048; 3],
};

fn stream_gbps(gen: u8, width: u8, mps: u16, op: DmaOpKind, size: u64) -> f64 {
    let cfg = SimConfig {
        mps,
        mrrs: 512,
        dma_tags: 256,
        rc_latency: SimDuration::from_ns(10),
        mem_latency: SimDuration::from_ns(10),
        // Finite buffers (so UpdateFCs flow, as the model assumes), large enough never
        // to stall the link.
        port_buffer: BIG,
        ep_buffer: BIG,
        replay_buffer: 256,
        ..SimConfig::default()
    };
    let mut sim = FabricSim::new(&one_link(gen, width), &KindRegistry::builtin(), cfg).unwrap();
    // Enough transfers for ~60 KiB after the ramp, at least 64.
    let count = (65536 / size).max(64) + 64;
    let window = (8192 / size).clamp(16, 256) as u32;
    let base = sim.alloc_dma(1 << 20);
    sim.attach(
        "ep",
        Box::new(DmaStream::new(
            op,
            size,
            window,
            count,
            base,
            1 << 20,
            AddrPattern::Sequential,
        )),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let rep = sim.model("ep").unwrap().report().unwrap();
    assert_eq!(rep["failed"], 0);
    rep["gbps"].as_f64().unwrap()
}

#[test]
fn saturated_throughput_matches_the_spec_mode_model() {
    use pcielab_model::{link, Lanes, Mode, Model, Mps, PcieConfig};
    use pcielab_wire::Generation;
    let mut worst: f64 = 0.0;
    let mut saw = Vec::new();
    let mut fails = Vec::new();
    let mut read_dev = Vec::new();
    for (gen, width) in [(1u8, 1u8), (2, 4), (3, 8), (4, 16), (5, 2), (3, 1)] {
        for mps in [128u16, 256, 512] {
            for size in [64u64, 256, 500, 1024, 1500, 4096] {
                let g = Generation::from_number(gen).unwrap();
                let mut c = PcieConfig::new(g, width as u32).unwrap();
                c.mode = Mode::Spec;
                c.mps = Mps::new(mps as u32).unwrap();
                c.mrrs = pcielab_model::Mrrs::new(512).unwrap();
                let m = Model::new(c).unwrap();
                // The model charges ACK and UpdateFC DLLPs on the data direction; a
                // one-way write stream sends them on the other direction, so the
                // simulator's write data direction carries only TLPs and SKPs.
                let lanes = Lanes::new(width as u32).unwrap();
                let mpsv = Mps::new(mps as u32).unwrap();
                let ack = 8.0 / (link::ack_limit(Mode::Spec, g, lanes, mpsv) as f64 * width as f64);
                let fc = 8.0 / (link::fc_limit(Mode::Spec, g, lanes, mpsv) as f64 * width as f64);
                let skp = link::skp_share(Mode::Spec, g);
                let w_model = m.write(size).unwrap() * (1.0 - skp) / (1.0 - ack - fc - skp);
                let w_sim = stream_gbps(gen, width, mps, DmaOpKind::Write, size);
                let err = (w_sim - w_model).abs() / w_model;
                worst = worst.max(err);
                if err >= 0.01 {
                    fails.push(format!("write gen{gen} x{width} mps{mps} size {size}: sim {w_sim:.3} model {w_model:.3} ({:+.2}%)", (w_sim / w_model - 1.0) * 100.0));
                }
                if gen == 3 && width == 8 && mps == 256 {
                    saw.push((size, w_sim));
                }
                // Reads: the data direction carries the completions plus the ACKs and
                // UpdateFCs of the read requests, which physically come only as often as
                // requests arrive; the model charges one of each per latency limit. So
                // the simulator must lie between the model (every DLLP charged) and the
                // model with no DLLP at all on the data direction.
                let r_model = m.read(size).unwrap();
                let r_free = r_model * (1.0 - skp) / (1.0 - ack - fc - skp);
                let r_sim = stream_gbps(gen, width, mps, DmaOpKind::Read, size);
                read_dev.push((r_sim / r_model - 1.0) * 100.0);
                if r_sim < r_model * 0.99 || r_sim > r_free * 1.01 {
                    fails.push(format!("read gen{gen} x{width} mps{mps} size {size}: sim {r_sim:.3} outside [{r_model:.3}, {r_free:.3}]"));
                }
            }
        }
    }
    eprintln!("writes: worst relative difference {worst:.5}");
    eprintln!(
        "reads: sim vs model from {:+.2}% to {:+.2}%",
        read_dev.iter().cloned().fold(f64::MAX, f64::min),
        read_dev.iter().cloned().fold(f64::MIN, f64::max)
    );
    assert!(
        fails.is_empty(),
        "{} of 216 points off by 1 % or more:\n{}",
        fails.len(),
        fails.join("\n")
    );
    // Saw-tooth: 1500 bytes need 6 TLPs of MPS 256 where 1536 would fit, so 1500 is
    // less efficient than 1024 (4 full TLPs).
    let at = |s: u64| saw.iter().find(|x| x.0 == s).unwrap().1;
    assert!(at(1500) < at(1024), "{saw:?}");
}
