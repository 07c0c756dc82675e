//! Device-to-device streaming (seed 004): a `d2d-ssd` streams into a `d2d-nic` by
//! peer-to-peer writes under the credit protocol; the NIC's frames carry every byte
//! once, in order, across a switch, through the root complex (ACS redirection, the
//! root complex's P2P splitting), under credit starvation and link errors; failures
//! end in typed errors with counters; real tshark decodes the frames as UDP and RTP.

use pcielab_device::d2d::uoe::{parse_with, Template};
use pcielab_device::d2d::{self, D2dNic, D2dNicConfig, RxState, StreamError, TappedFrame};
use pcielab_fabric::drivers::d2d::{Credits, D2dError, D2dStream, StreamSpec};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{FabricSim, SimConfig};
use pcielab_fabric::topology::Topology;
use pcielab_sim::SimDuration;
use proptest::prelude::*;

/// Where the two devices sit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    /// Both below one switch: P2P across it (or up through the root complex with ACS).
    Switch,
    /// Each on its own root port: P2P routed by the root complex.
    RootPorts,
}

fn topology(place: Place, nic_extra: &str) -> Topology {
    let s = match place {
        Place::Switch => format!(
            "seed = 4\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
             [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=2\n\
             [[node]]\nname=\"ssd\"\nkind=\"d2d-ssd\"\nseed=77\n\
             [[node]]\nname=\"nic\"\nkind=\"d2d-nic\"\n{nic_extra}\
             [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=2\nwidth=4\n\
             [[link]]\nup=\"sw.0\"\ndown=\"ssd\"\ngen=2\nwidth=4\n\
             [[link]]\nup=\"sw.1\"\ndown=\"nic\"\ngen=2\nwidth=4\n"
        ),
        Place::RootPorts => format!(
            "seed = 4\n[[node]]\nname=\"rc\"\nkind=\"root-complex\"\nports=2\n\
             [[node]]\nname=\"ssd\"\nkind=\"d2d-ssd\"\nseed=77\n\
             [[node]]\nname=\"nic\"\nkind=\"d2d-nic\"\n{nic_extra}\
             [[link]]\nup=\"rc.0\"\ndown=\"ssd\"\ngen=2\nwidth=4\n\
             [[link]]\nup=\"rc.1\"\ndown=\"nic\"\ngen=2\nwidth=4\n"
        ),
    };
    Topology::parse(&s, "d2d.toml", &KindRegistry::builtin()).unwrap()
}

/// A simulator with the NIC's frames tapped.
fn sim(place: Place, cfg: SimConfig) -> (FabricSim, d2d::FrameTap) {
    let mut sim = FabricSim::new(&topology(place, ""), &KindRegistry::builtin(), cfg).unwrap();
    let tap = d2d::FrameTap::default();
    let nic = D2dNic::new(D2dNicConfig::default()).with_tap(tap.clone());
    sim.attach("nic", Box::new(nic)).unwrap();
    (sim, tap)
}

/// The payloads of `frames` in order, each frame checked (IPv4 and UDP checksums,
/// lengths, ports), against the media bytes of the SSD's stream 0 (seed 77).
fn check_frames(frames: &[TappedFrame], bytes: u64, rtp: bool) {
    let mut got = Vec::with_capacity(bytes as usize);
    for (i, f) in frames.iter().enumerate() {
        let p = parse_with(&f.bytes, rtp).unwrap_or_else(|e| panic!("frame {i}: {e}"));
        assert_eq!((p.src_port, p.dst_port), (5000, 5004), "frame {i}");
        if rtp {
            assert_eq!(p.rtp.unwrap().seq, i as u16, "frame {i}: RTP sequence");
        }
        got.extend_from_slice(p.payload);
    }
    let mut want = vec![0u8; bytes as usize];
    d2d::media_fill(77, 0, &mut want);
    assert_eq!(got.len(), want.len(), "payload bytes in frames");
    if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!("payload differs from the media at byte {at}");
    }
}

fn run_ok(
    mut sim: FabricSim,
    tap: &d2d::FrameTap,
    spec: StreamSpec,
) -> (FabricSim, Vec<TappedFrame>) {
    let bytes = spec.bytes;
    let mut s = D2dStream::open(&mut sim, spec).unwrap();
    let c = s.run(&mut sim).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (c.sent, c.taken, c.payload_sent, c.dropped),
        (bytes, bytes, bytes, 0),
        "{c:?}"
    );
    (sim, tap.take())
}

#[test]
fn a_stream_across_a_switch_arrives_whole_and_skips_the_root_complex() {
    let cfg = SimConfig {
        trace: true,
        ..SimConfig::default()
    };
    let (sim, tap) = sim(Place::Switch, cfg);
    let (sim, frames) = run_ok(sim, &tap, StreamSpec::new("ssd", "nic", 100_000));
    check_frames(&frames, 100_000, false);
    assert_eq!(frames.len(), 100_000usize.div_ceil(1472));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    // Peer-to-peer: the stream's writes never cross the switch's upstream link.
    let up: u64 = sim
        .counters()
        .iter()
        .filter(|(n, _)| n.starts_with("sw->"))
        .map(|(_, c)| c.tlp_bytes)
        .sum();
    assert!(up < 2_000, "{up} TLP bytes went up to the root complex");
}

#[test]
fn rtp_frames_count_their_sequence_and_the_byte_count_ends_the_stream() {
    let (sim, tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 7 * 188 * 10 + 5);
    spec.uoe.set_rtp(33, 0xfeed, 0);
    spec.uoe.set_payload(7 * 188); // MPEG-TS aligned, as the paper's VoD frames
    let (_, frames) = run_ok(sim, &tap, spec);
    assert_eq!(frames.len(), 11);
    assert_eq!(
        parse_with(&frames[10].bytes, true).unwrap().payload.len(),
        5
    );
    check_frames(&frames, 7 * 188 * 10 + 5, true);
}

#[test]
fn the_mac_sends_at_line_rate() {
    let (sim, tap) = sim(Place::Switch, SimConfig::default());
    let (_, frames) = run_ok(sim, &tap, StreamSpec::new("ssd", "nic", 400 * 1472));
    // 1,514-byte frames + FCS at 10 Gb/s: (1518 + 8 + 12) × 0.8 ns = 1,230.4 ns apart
    // when the MAC is the bottleneck (PCIe at 256 B per 392 ns delivers 5.2 Gb/s, so
    // it is not: the gap is the PCIe rate's, at least the line rate's).
    for w in frames.windows(2) {
        let gap = (w[1].sent - w[0].sent).as_ps();
        assert!(gap >= 1_230_400, "frames {gap} ps apart, faster than 10GbE");
    }
}

#[test]
fn host_credits_and_a_single_credit_still_deliver_everything() {
    let (sim, tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 30_000);
    spec.mode = Credits::Host;
    spec.credits = Some(spec.least_credits()); // 2 chunks of 4 KiB for 1,472-byte frames
    assert_eq!(spec.credits, Some(2));
    let bytes = spec.bytes;
    let (mut sim, tap2) = (sim, tap);
    let mut s = D2dStream::open(&mut sim, spec).unwrap();
    let c = s.run(&mut sim).unwrap();
    assert_eq!(c.payload_sent, bytes);
    assert!(c.stalls > 0, "one credit makes the sender wait: {c:?}");
    assert!(c.host_grants > 0, "{c:?}");
    check_frames(&tap2.take(), bytes, false);
}

#[test]
fn a_stream_to_an_address_no_device_claims_is_refused_before_it_starts() {
    let (mut sim, _tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 10_000);
    spec.target = Some(0x7_0000_0000);
    assert_eq!(
        D2dStream::open(&mut sim, spec.clone()).unwrap_err(),
        D2dError::NoPeer {
            addr: 0x7_0000_0000
        }
    );
    // Unchecked, the writes go up to the root complex, which takes an address no
    // device claims as host memory: the driver finds the bytes the receiver never
    // took, and they are in host memory, not lost.
    spec.check_target = false;
    spec.stall_timeout = SimDuration::from_us(50);
    let mut s = D2dStream::open(&mut sim, spec).unwrap();
    match s.run(&mut sim) {
        Err(D2dError::Lost(c)) => {
            assert_eq!((c.sent, c.taken, c.dropped), (10_000, 0, 0));
        }
        other => panic!("{other:?}"),
    }
    let mut landed = vec![0u8; 4096];
    sim.host_read(0x7_0000_0000, &mut landed);
    let mut want = vec![0u8; 4096];
    d2d::media_fill(77, 0, &mut want);
    assert_eq!(
        landed, want,
        "the stray stream's first chunk is in host memory"
    );
    // Too few credits to ever hold a frame are refused too.
    let mut spec = StreamSpec::new("ssd", "nic", 10_000);
    spec.credits = Some(1);
    assert!(matches!(
        D2dStream::open(&mut sim, spec),
        Err(D2dError::Config {
            what: "credits",
            ..
        })
    ));
}

#[test]
fn withheld_credits_end_in_credit_starvation() {
    let (mut sim, _tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 100_000);
    spec.mode = Credits::Host;
    spec.credits = Some(2);
    spec.stall_timeout = SimDuration::from_us(50);
    let mut s = D2dStream::open(&mut sim, spec).unwrap();
    s.start(&mut sim).unwrap();
    // A host that never grants: wait without servicing the receiver.
    sim.run_for(SimDuration::from_us(100));
    let c = s.counters(&mut sim).unwrap();
    assert_eq!(c.tx_state, d2d::TxState::Stalled as u32);
    assert_eq!((c.sent, c.taken), (8192, 8192));
    assert!(
        c.granted > c.credit_limit,
        "the receiver has credits to give: {c:?}"
    );
}

#[test]
fn a_receiver_reset_mid_stream_is_a_peer_reset_with_every_byte_accounted() {
    let (mut sim, tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 1_000_000);
    spec.stall_timeout = SimDuration::from_us(100);
    let saved = sim.save_below("nic").unwrap();
    let mut s = D2dStream::open(&mut sim, spec).unwrap();
    s.start(&mut sim).unwrap();
    sim.run_for(SimDuration::from_us(20));
    sim.link_down("nic").unwrap();
    sim.run_for(SimDuration::from_us(5));
    sim.link_up("nic").unwrap();
    sim.recover("nic", &saved).unwrap();
    match s.run(&mut sim) {
        Err(D2dError::PeerReset(c)) => {
            assert_eq!(c.rx_state, RxState::Idle as u32);
            assert!(c.sent > 0 && c.sent < 1_000_000, "{c:?}");
            // What the sender wrote went into frames, was refused by the reset stream
            // (counted), or was lost with the link (each write recorded by the fabric).
            let framed: u64 = tap
                .take()
                .iter()
                .map(|f| parse_with(&f.bytes, false).unwrap().payload.len() as u64)
                .sum();
            assert!(framed < c.sent);
            assert!(!sim.errors().is_empty() || c.dropped > 0, "{c:?}");
        }
        other => panic!("{other:?}"),
    }
}

fn read64(sim: &mut FabricSim, addr: u64) -> u64 {
    match sim.mmio_read(addr, 8).unwrap() {
        pcielab_fabric::timed::HostRead::Done { data, .. } => {
            u64::from_le_bytes(data[..8].try_into().unwrap())
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn teardown_stops_the_sender_and_empties_the_receiver_counted() {
    let (mut sim, _tap) = sim(Place::Switch, SimConfig::default());
    let mut s = D2dStream::open(&mut sim, StreamSpec::new("ssd", "nic", 10_000_000)).unwrap();
    s.start(&mut sim).unwrap();
    sim.run_for(SimDuration::from_us(30));
    let c = s.teardown(&mut sim).unwrap();
    assert_eq!(c.tx_state, d2d::TxState::Paused as u32);
    assert!(c.sent > 0 && c.sent < 10_000_000);
    // (The receiver's queue was emptied, its bytes counted as refused; writes still in
    // flight from the sender keep arriving.)
    // The sender stays stopped: what it had in flight lands, then nothing more.
    sim.run_for(SimDuration::from_us(20));
    let ssd = sim.bar("ssd", 0).unwrap();
    let sent = read64(&mut sim, ssd + d2d::reg::status(0, d2d::reg::BYTES));
    sim.run_for(SimDuration::from_us(100));
    assert_eq!(
        read64(&mut sim, ssd + d2d::reg::status(0, d2d::reg::BYTES)),
        sent
    );
    // Every byte the receiver took went out in a frame, was refused (counted) or is
    // still queued: nothing lost unseen.
    let nic = sim.bar("nic", 0).unwrap();
    let r = |sim: &mut FabricSim, reg| read64(sim, nic + d2d::reg::status(0, reg));
    let taken = r(&mut sim, d2d::reg::BYTES);
    let framed = r(&mut sim, d2d::reg::SENT);
    let refused = r(&mut sim, d2d::reg::DROPPED);
    let queued = r(&mut sim, d2d::reg::QUEUED);
    assert_eq!(taken, sent, "every write the sender made arrived");
    assert_eq!(taken, framed + refused + queued);
}

#[test]
fn bad_settings_are_typed_errors() {
    let (mut sim, _tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 1000);
    spec.chunk = 0;
    assert!(matches!(
        D2dStream::open(&mut sim, spec.clone()),
        Err(D2dError::Config { what: "chunk", .. })
    ));
    spec.chunk = 4096;
    spec.stream = 9;
    assert!(matches!(
        D2dStream::open(&mut sim, spec.clone()),
        Err(D2dError::Config { what: "stream", .. })
    ));
    spec.stream = 0;
    spec.uoe.bytes[0x21] = 6; // TCP: not offloaded
    assert!(matches!(
        D2dStream::open(&mut sim, spec.clone()),
        Err(D2dError::Config { .. })
    ));
    spec.uoe = Template::default();
    spec.producer = "rc".into();
    assert!(D2dStream::open(&mut sim, spec).is_err());
}

#[test]
fn a_receiver_started_with_bad_headers_reports_them() {
    let (mut sim, _tap) = sim(Place::Switch, SimConfig::default());
    let nic = sim.bar("nic", 0).unwrap();
    // Chunk and byte count, but no offload registers: IP_HDR1 reads 0, not 0x45.
    sim.mmio_write(
        nic + d2d::reg::stream(1, d2d::reg::RATE_GRAN),
        &(4096u64 << 32).to_le_bytes(),
    )
    .unwrap();
    sim.mmio_write(
        nic + d2d::reg::stream(1, d2d::reg::BYTE_COUNT),
        &100u64.to_le_bytes(),
    )
    .unwrap();
    sim.mmio_write(
        nic + d2d::reg::stream(1, d2d::reg::TX_ADDR),
        &1u64.to_le_bytes(),
    )
    .unwrap();
    sim.run_for(SimDuration::from_us(2));
    let st = match sim
        .mmio_read(nic + d2d::reg::status(1, d2d::reg::STATE), 8)
        .unwrap()
    {
        pcielab_fabric::timed::HostRead::Done { data, .. } => {
            u64::from_le_bytes(data[..8].try_into().unwrap())
        }
        r => panic!("{r:?}"),
    };
    assert_eq!(st as u32, RxState::Error as u32);
    assert_eq!(
        StreamError::from_code((st >> 32) as u32),
        Some(StreamError::BadHeaders)
    );
}

#[test]
fn frames_go_out_on_the_cable_at_line_rate() {
    // The D2D NIC's MAC cabled to pcie-bench's NIC: every frame crosses the cable.
    let text = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\n\
         [[node]]\nname=\"sw\"\nkind=\"switch\"\nports=3\n\
         [[node]]\nname=\"ssd\"\nkind=\"d2d-ssd\"\nseed=77\n\
         [[node]]\nname=\"nic\"\nkind=\"d2d-nic\"\ncable=\"peer\"\n\
         [[node]]\nname=\"peer\"\nkind=\"nic\"\neth_gbps=10\ncable=\"nic\"\n\
         [[link]]\nup=\"rc.0\"\ndown=\"sw\"\ngen=2\nwidth=4\n\
         [[link]]\nup=\"sw.0\"\ndown=\"ssd\"\ngen=2\nwidth=4\n\
         [[link]]\nup=\"sw.1\"\ndown=\"nic\"\ngen=2\nwidth=4\n\
         [[link]]\nup=\"sw.2\"\ndown=\"peer\"\ngen=2\nwidth=4\n";
    let reg = KindRegistry::builtin();
    let t = Topology::parse(text, "cable.toml", &reg).unwrap();
    let mut sim = FabricSim::new(&t, &reg, SimConfig::default()).unwrap();
    let mut s = D2dStream::open(&mut sim, StreamSpec::new("ssd", "nic", 20 * 1472)).unwrap();
    let c = s.run(&mut sim).unwrap();
    assert_eq!(c.frames, 20);
    // Delivered to the peer's MAC (no driver enabled it, so it counts them as its own
    // drops: received, not lost on the cable).
    assert_eq!(sim.ethernet_stats(), (20, 0));
}

/// Runs one stream in `place` with the property test's knobs; returns the frames.
fn stream_case(
    place: Place,
    acs: bool,
    split: bool,
    ber: bool,
    spec: StreamSpec,
) -> Vec<TappedFrame> {
    let cfg = SimConfig {
        acs,
        p2p_split: split.then_some(64),
        error_rate: if ber { 0.02 } else { 0.0 },
        ..SimConfig::default()
    };
    let bytes = spec.bytes;
    let (sim, tap) = sim(place, cfg);
    let (sim, frames) = run_ok(sim, &tap, spec);
    let counters = sim.counters();
    let sum =
        |f: &dyn Fn(&str) -> bool, g: &dyn Fn(&pcielab_fabric::timed::DirCounters) -> u64| -> u64 {
            counters
                .iter()
                .filter(|(n, _)| f(n))
                .map(|(_, c)| g(c))
                .sum()
        };
    // The path really is the one asked for: with ACS (or between root ports) the
    // stream's data crosses the root complex; across a plain switch it does not.
    let via_rc = sum(
        &|n| n.starts_with("sw->") || n.starts_with("ssd->rc"),
        &|c| c.payload_bytes,
    );
    if acs || place == Place::RootPorts {
        assert!(
            via_rc >= bytes,
            "{via_rc} payload bytes went up to the root complex"
        );
    } else {
        // Only the host's register reads (8-byte completions) and MSI-X writes (4
        // bytes) go up.
        let host = sum(&|n| n.starts_with("sw->"), &|c| {
            8 * c.completions + 4 * c.posted
        });
        assert!(
            via_rc <= host,
            "{via_rc} payload bytes went up to the root complex"
        );
    }
    if ber {
        let replays = sum(&|_| true, &|c| c.replays + c.naks);
        let tlps = sum(&|_| true, &|c| c.tlps);
        assert!(
            replays > 0 || tlps < 50,
            "2 % LCRC errors in {tlps} TLPs and no replay"
        );
    }
    frames
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every byte the sender streams arrives once, in order, in the receiver's frames,
    /// whatever the path (across a switch, redirected up through the root complex by
    /// ACS, between root ports with the root complex splitting writes into 64-byte
    /// pieces), the credits (starved: the fewest that can hold a frame, so the sender
    /// waits for nearly every chunk), host or peer grants, link
    /// errors (2 % of TLPs fail their LCRC and are replayed) and frame size.
    #[test]
    fn every_byte_arrives_once_in_order(
        bytes in 1u64..40_000,
        chunk in prop::sample::select(vec![256u32, 1000, 1472, 4096, 8192]),
        starve in any::<bool>(),
        host in any::<bool>(),
        path in 0u8..3,
        ber in any::<bool>(),
        payload in prop::sample::select(vec![0u16, 64, 1316]),
        rate_limited in any::<bool>(),
    ) {
        let (place, acs, split) = match path {
            0 => (Place::Switch, false, false),
            1 => (Place::Switch, true, false),
            _ => (Place::RootPorts, false, true),
        };
        let mut spec = StreamSpec::new("ssd", "nic", bytes);
        spec.chunk = chunk;
        spec.uoe.set_payload(payload);
        if starve {
            spec.credits = Some(spec.least_credits());
        }
        spec.mode = if host { Credits::Host } else { Credits::Peer };
        if rate_limited {
            spec.rate = 200_000_000; // 1.6 Gb/s: the sender waits for its time slots
        }
        let frames = stream_case(place, acs, split, ber, spec);
        check_frames(&frames, bytes, false);
    }

    /// Random register programs never panic either device (and never stop the
    /// simulator): every value of every stream register, start bits included.
    #[test]
    fn random_register_programs_do_not_panic(
        writes in prop::collection::vec(
            (prop_oneof![0u64..0x1400, 0x1_0000u64..0x5_0000], any::<u64>(), prop::sample::select(vec![4u32, 8])),
            1..40,
        ),
    ) {
        let (mut sim, _tap) = sim(Place::Switch, SimConfig::default());
        for node in ["ssd", "nic"] {
            let bar = sim.bar(node, 0).unwrap();
            let size = if node == "ssd" { d2d::SSD_BAR_SIZE } else { d2d::NIC_BAR_SIZE };
            for &(off, v, len) in &writes {
                let off = (off % size) & !(len as u64 - 1);
                sim.mmio_write(bar + off, &v.to_le_bytes()[..len as usize]).unwrap();
            }
        }
        sim.run_for(SimDuration::from_us(300));
    }
}

/// Whether tshark tests run: tshark must be installed unless PCIELAB_SKIP_TSHARK=1.
fn tshark_wanted() -> bool {
    if std::env::var_os("PCIELAB_SKIP_TSHARK").is_some_and(|v| v == "1") {
        eprintln!("PCIELAB_SKIP_TSHARK=1: tshark checks skipped");
        return false;
    }
    true
}

#[test]
fn tshark_decodes_the_frames_as_udp_and_rtp() {
    if !tshark_wanted() {
        return;
    }
    use pcielab_capture::writer::{CaptureWriter, Format};
    let (sim, tap) = sim(Place::Switch, SimConfig::default());
    let mut spec = StreamSpec::new("ssd", "nic", 7 * 188 * 20);
    spec.uoe.set_rtp(33, 0xabcd, 1000);
    spec.uoe.set_payload(7 * 188);
    let (_, frames) = run_ok(sim, &tap, spec);
    let dir = std::env::temp_dir().join(format!("pcielab-d2d-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("d2d.pcapng");
    let mut w = CaptureWriter::create(&path, Format::Pcapng, "d2d stream").unwrap();
    let id = w.add_interface("nic.mac").unwrap();
    for f in &frames {
        w.write_frame(id, f.sent.as_ps(), &f.bytes).unwrap();
    }
    w.finish().unwrap();
    let out = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(&path)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-d",
            "udp.port==5004,rtp",
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "ip.checksum.status",
            "-e",
            "udp.checksum.status",
            "-e",
            "udp.dstport",
            "-e",
            "rtp.seq",
            "-e",
            "rtp.p_type",
            "-e",
            "rtp.ssrc",
            "-e",
            "udp.length",
        ])
        .output()
        .expect("tshark is needed (apt-get install tshark), or set PCIELAB_SKIP_TSHARK=1");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20, "{text}");
    for (i, l) in lines.iter().enumerate() {
        // Checksum status 1: good. RTP payload type 33: MP2T; UDP length 8 + 12 + 1316.
        let want = format!("1,1,5004,{},33,0x0000abcd,1336", 1000 + i);
        assert_eq!(*l, want, "frame {i}");
    }
}
