//! Raw TLPs from a device model (`EpCx::send_raw`): what the port at the other end of
//! its link does with Malformed bytes (discarded, Malformed TLP logged with the header,
//! ERR_FATAL), with valid TLPs the fabric carries (memory writes with odd byte
//! enables, reads whose completions come back raw, completions for the host) and with
//! valid TLPs it does not (Unsupported Request); a wrong ECRC digest; bad lengths.

use crate::common::fault_text;
use crate::common::{caps, dev_status, hand_timing, parent, switch_tree, trained_sim};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::FaultKind;
use pcielab_fabric::timed::{Endpoint, EpCx, FabricSim, SimConfig, TraceKind};
use pcielab_sim::{SimDuration, SimTime};
use pcielab_wire::tlp::{CfgHeader, MsgCode, TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, ByteEnables, CplStatus, Tag};
use std::sync::{Arc, Mutex};

/// AER Uncorrectable Error Status bits.
const UNEXPECTED_CPL: u32 = 1 << 16;
const MALFORMED: u32 = 1 << 18;
const ECRC_ERROR: u32 = 1 << 19;
const UNSUPPORTED: u32 = 1 << 20;

/// A device that sends `send` (built once its requester ID is known) when attached and
/// keeps the raw completions it receives.
#[derive(Default)]
struct Raw {
    send: Vec<Box<dyn Fn(Bdf) -> Vec<u8> + Send>>,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Raw")
            .field("send", &self.send.len())
            .finish()
    }
}

impl Endpoint for Raw {
    fn start(&mut self, cx: &mut EpCx<'_>) {
        for s in &self.send {
            let b = s(cx.bdf());
            cx.send_raw(b);
        }
    }
    fn raw_completion(&mut self, tlp: &[u8], _cx: &mut EpCx<'_>) {
        self.got.lock().unwrap().push(tlp.to_vec());
    }
}

/// Runs the trained switch tree with `ep` sending `send`: the simulation and the raw
/// completions the device received.
fn run(
    mut sim: FabricSim,
    send: Vec<Box<dyn Fn(Bdf) -> Vec<u8> + Send>>,
) -> (FabricSim, Vec<Vec<u8>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    sim.attach(
        "ep",
        Box::new(Raw {
            send,
            got: got.clone(),
        }),
    )
    .unwrap();
    sim.run_until_idle(SimTime::from_ps(u64::MAX / 2));
    let g = got.lock().unwrap().clone();
    (sim, g)
}

fn uncorrectable(sim: &mut FabricSim, f: Bdf) -> u32 {
    let (_, a) = caps(sim, f);
    sim.cfg_read(f, a + 4)
}

/// The Header Log of `f` as bytes.
fn header_log(sim: &mut FabricSim, f: Bdf) -> Vec<u8> {
    let (_, a) = caps(sim, f);
    (0..4)
        .flat_map(|i| sim.cfg_read(f, a + 0x1c + 4 * i).to_be_bytes())
        .collect()
}

fn tag(t: u16) -> Tag {
    Tag::new(t).unwrap()
}

/// The wire bytes of a TLP the codec built (or is asked to build).
fn bytes(r: pcielab_wire::Result<TlpRepr<'_>>) -> Vec<u8> {
    r.and_then(|r| r.to_vec()).unwrap()
}

#[test]
fn a_write_over_max_payload_size_is_malformed_at_the_port_above() {
    let mut sim = trained_sim(5, true);
    let base = sim.alloc_dma(4096);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let sent = bytes(TlpRepr::mem_write(ep, tag(3), base, &[0xab; 512]));
    let b = sent.clone();
    let (mut sim, got) = run(sim, vec![Box::new(move |_| b.clone())]);
    assert!(got.is_empty());
    // Discarded: host memory untouched.
    let mut mem = vec![0u8; 512];
    sim.host_read(base, &mut mem);
    assert!(mem.iter().all(|&b| b == 0), "nothing written");
    // The switch's downstream port logged it: Malformed TLP, its header in the log.
    assert_eq!(uncorrectable(&mut sim, dsp) & MALFORMED, MALFORMED);
    assert_eq!(header_log(&mut sim, dsp), sent[..16].to_vec());
    // Fatal by default: Fatal Error Detected in Device Status.
    assert_eq!(dev_status(&mut sim, dsp) & 0x4, 0x4);
    let e = fault_text(&sim, FaultKind::RawTlp);
    assert!(
        e.contains("MaxPayloadSize") && e.contains("discarded"),
        "{e}"
    );
    // The trace shows the device's bytes as they crossed the link, once.
    let t = sim.trace().unwrap();
    let n = t
        .records
        .iter()
        .filter(|r| matches!(r.kind, TraceKind::Tlp { .. }) && t.bytes(r) == &sent[..])
        .count();
    assert_eq!(n, 1);
}

#[test]
fn a_read_crossing_4kib_and_a_truncated_tlp_are_malformed_too() {
    let sim = trained_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let (mut sim, got) = run(
        sim,
        vec![Box::new(|ep| {
            bytes(TlpRepr::mem_read(ep, tag(1), 0x1_0000_0f00, 128))
        })],
    );
    assert!(got.is_empty(), "no completion for a discarded read");
    assert_eq!(uncorrectable(&mut sim, dsp) & MALFORMED, MALFORMED);
    let e = fault_text(&sim, FaultKind::RawTlp);
    assert!(e.contains("Crosses4KiB"), "{e}");

    // An MWr whose Length says 4 DW with 2 DW of data.
    let sim = trained_sim(6, false);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let (mut sim, _) = run(
        sim,
        vec![Box::new(|ep| {
            let mut b = bytes(TlpRepr::mem_write(ep, tag(1), 0x1000, &[1; 16]));
            b.truncate(b.len() - 8);
            b
        })],
    );
    assert_eq!(uncorrectable(&mut sim, dsp) & MALFORMED, MALFORMED);
    assert!(fault_text(&sim, FaultKind::RawTlp).contains("Undecodable"));
}

#[test]
fn a_valid_write_with_its_own_byte_enables_writes_exactly_those_bytes() {
    let mut sim = trained_sim(5, false);
    let base = sim.alloc_dma(4096);
    sim.host_write(base, &[0x11; 16]);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    // Two DWs at base + 4: First BE 1110b, Last BE 0011b (bytes 5..=10).
    let (mut sim, _) = run(
        sim,
        vec![Box::new(move |ep| {
            let mut r = TlpRepr::mem_write(
                ep,
                tag(9),
                base + 4,
                &[0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7],
            )
            .unwrap();
            if let TlpHeader::Mem(h) = &mut r.header {
                h.first_be = ByteEnables::new(0b1110).unwrap();
                h.last_be = ByteEnables::new(0b0011).unwrap();
            }
            r.to_vec().unwrap()
        })],
    );
    let mut mem = [0u8; 16];
    sim.host_read(base, &mut mem);
    assert_eq!(
        mem,
        [
            0x11, 0x11, 0x11, 0x11, 0x11, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0x11, 0x11, 0x11, 0x11,
            0x11, 0x11
        ]
    );
    assert_eq!(uncorrectable(&mut sim, dsp), 0);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

#[test]
fn a_raw_read_gets_its_completions_raw_and_a_zero_length_read_gets_one_byte() {
    let mut sim = trained_sim(5, false);
    let base = sim.alloc_dma(4096);
    let data: Vec<u8> = (0..=255).collect();
    sim.host_write(base + 0x100, &data);
    // 256 bytes at base + 0x100, tag 200 (beyond the DMA engine's pool); then a
    // zero-length read (Length 1, no byte enabled), tag 201.
    let (sim, got) = run(
        sim,
        vec![
            Box::new(move |ep| bytes(TlpRepr::mem_read(ep, tag(200), base + 0x100, 64))),
            Box::new(move |ep| {
                let mut r = TlpRepr::mem_read(ep, tag(201), base, 1).unwrap();
                if let TlpHeader::Mem(h) = &mut r.header {
                    h.first_be = ByteEnables::new(0).unwrap();
                }
                r.to_vec().unwrap()
            }),
        ],
    );
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let cpls: Vec<_> = got
        .iter()
        .map(|b| TlpRepr::parse_bytes(b).unwrap())
        .collect();
    let mut back = Vec::new();
    let mut zero = Vec::new();
    for c in &cpls {
        let TlpHeader::Cpl(h) = c.header else {
            panic!("{c}")
        };
        assert_eq!(h.status, CplStatus::Sc);
        match h.tag.value() {
            200 => back.extend_from_slice(c.payload),
            201 => zero.push(h.byte_count),
            t => panic!("tag {t}"),
        }
    }
    assert_eq!(back, data, "the read's data, in order");
    assert_eq!(
        zero,
        [1],
        "a zero-length read: one completion, Byte Count 1"
    );
}

#[test]
fn a_completion_nobody_asked_for_is_unexpected_at_the_root_port() {
    let sim = trained_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let rp = parent(&sim, parent(&sim, parent(&sim, ep)));
    let (mut sim, _) = run(
        sim,
        vec![Box::new(|ep| {
            bytes(TlpRepr::completion(
                ep,
                Bdf::from_raw(0),
                tag(7),
                CplStatus::Sc,
                4,
                0,
                &[1, 2, 3, 4],
            ))
        })],
    );
    assert_eq!(uncorrectable(&mut sim, rp) & UNEXPECTED_CPL, UNEXPECTED_CPL);
    assert!(sim
        .errors()
        .iter()
        .any(|e| e.is(FaultKind::UnexpectedCompletion)
            && e.message.contains("unexpected completion for tag 7")));
}

#[test]
fn a_configuration_request_from_below_is_an_unsupported_request() {
    let sim = trained_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let (mut sim, got) = run(
        sim,
        vec![Box::new(|ep| {
            bytes(Ok(TlpRepr::with_header(
                TlpHeader::Cfg(CfgHeader {
                    write: false,
                    type1: false,
                    requester_id: ep,
                    tag: tag(5),
                    first_be: ByteEnables::new(0xf).unwrap(),
                    target: Bdf::from_raw(0),
                    register: 0,
                }),
                &[],
            )))
        })],
    );
    // The port completed it with UR, and logged it (advisory: a completer's UR).
    assert_eq!(got.len(), 1);
    let c = TlpRepr::parse_bytes(&got[0]).unwrap();
    let TlpHeader::Cpl(h) = c.header else {
        panic!("{c}")
    };
    assert_eq!(
        (h.status, h.tag.value(), h.completer_id),
        (CplStatus::Ur, 5, dsp)
    );
    assert_eq!(uncorrectable(&mut sim, dsp) & UNSUPPORTED, UNSUPPORTED);
    let e = fault_text(&sim, FaultKind::RawTlp);
    assert!(
        e.contains("configuration requests travel only downstream"),
        "{e}"
    );
}

#[test]
fn an_unmodelled_message_is_dropped_with_a_note() {
    let sim = trained_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let (mut sim, got) = run(
        sim,
        vec![Box::new(|ep| {
            bytes(Ok(TlpRepr::with_header(
                TlpHeader::Msg(pcielab_wire::tlp::MsgHeader {
                    requester_id: ep,
                    tag: tag(0),
                    code: MsgCode::Obff,
                    routing: pcielab_wire::tlp::MsgRouting::Local,
                    fields: pcielab_wire::tlp::MsgFields([0; 8]),
                }),
                &[],
            )))
        })],
    );
    assert!(got.is_empty());
    assert_eq!(
        uncorrectable(&mut sim, dsp),
        0,
        "a posted TLP: no completion, no error bit"
    );
    let e = fault_text(&sim, FaultKind::RawTlp);
    assert!(
        e.contains("OBFF messages sent raw are not carried") && e.contains("dropped"),
        "{e}"
    );
}

#[test]
fn a_wrong_ecrc_digest_fails_where_the_write_ends() {
    let cfg = SimConfig {
        ecrc: true,
        completion_timeout: SimDuration::from_us(20),
        ..hand_timing(false)
    };
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let base = sim.alloc_dma(4096);
    let ep = sim.bdf("ep").unwrap();
    let rp = parent(&sim, parent(&sim, parent(&sim, ep)));
    let build = move |ep, bad: bool| {
        let mut r = TlpRepr::mem_write(ep, tag(1), base, &[0x5a; 64]).unwrap();
        r.td = true;
        let mut b = r.to_vec().unwrap();
        if bad {
            let n = b.len();
            b[n - 1] ^= 0xff;
        }
        b
    };
    let (mut sim, _) = run(sim, vec![Box::new(move |ep| build(ep, true))]);
    assert_eq!(uncorrectable(&mut sim, rp) & ECRC_ERROR, ECRC_ERROR);
    let mut mem = [0u8; 64];
    sim.host_read(base, &mut mem);
    assert_eq!(mem, [0; 64], "discarded where it ends");

    // The same write with the right digest lands.
    let cfg = SimConfig {
        ecrc: true,
        ..hand_timing(false)
    };
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let base2 = sim.alloc_dma(4096);
    assert_eq!(base2, base);
    let (mut sim, _) = run(sim, vec![Box::new(move |ep| build(ep, false))]);
    assert_eq!(uncorrectable(&mut sim, rp), 0);
    sim.host_read(base, &mut mem);
    assert_eq!(mem, [0x5a; 64]);
}

#[test]
fn raw_tlps_too_short_or_too_long_are_not_sent() {
    let sim = trained_sim(5, false);
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let (mut sim, _) = run(
        sim,
        vec![Box::new(|_| vec![0; 8]), Box::new(|_| vec![0x60; 5000])],
    );
    let e = fault_text(&sim, FaultKind::RawTlp);
    assert!(e.contains("a raw TLP of 8 bytes"), "{e}");
    assert!(e.contains("a raw TLP of 5000 bytes"), "{e}");
    assert_eq!(uncorrectable(&mut sim, dsp), 0);
}

#[test]
fn a_raw_tlp_bigger_than_the_ports_buffer_is_never_sent() {
    // The port above holds 16 posted data credits (256 bytes): a 512-byte write
    // (Malformed too, over MPS) could never get its credits.
    let mut cfg = hand_timing(false);
    cfg.port_buffer.data[0] = 16;
    let mut sim = FabricSim::new(&switch_tree(5, false), &KindRegistry::builtin(), cfg).unwrap();
    sim.run_for(SimDuration::from_us(5));
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let (mut sim, _) = run(
        sim,
        vec![
            Box::new(|ep| bytes(TlpRepr::mem_write(ep, tag(1), 0x1000, &[7; 512]))),
            // One that fits still goes (and is Malformed: 4 KiB crossing).
            Box::new(|ep| bytes(TlpRepr::mem_write(ep, tag(2), 0xff8, &[7; 16]))),
        ],
    );
    let e = fault_text(&sim, FaultKind::RawTlp);
    assert!(
        e.contains("a raw TLP of 524 bytes needs 33 posted data credits; the port above holds 16: never sent"),
        "{e}"
    );
    assert!(e.contains("Crosses4KiB"), "{e}");
    assert_eq!(uncorrectable(&mut sim, dsp) & MALFORMED, MALFORMED);
}

#[test]
fn a_raw_fetch_add_is_completed_and_a_cas_of_odd_length_is_malformed() {
    use pcielab_wire::tlp::{MemHeader, MemOp};
    let mut sim = trained_sim(5, false);
    let base = sim.alloc_dma(4096);
    sim.host_write(base, &41u32.to_le_bytes());
    let ep = sim.bdf("ep").unwrap();
    let dsp = parent(&sim, ep);
    let atomic = move |ep, op, addr, data: Vec<u8>| {
        let last = if data.len() > 4 {
            ByteEnables::ALL
        } else {
            ByteEnables::NONE
        };
        let h = MemHeader::new(op, ep, tag(33), addr, ByteEnables::ALL, last, 0);
        bytes(Ok(TlpRepr::with_header(TlpHeader::Mem(h), &data)))
    };
    let (mut sim, got) = run(
        sim,
        vec![
            Box::new(move |ep| atomic(ep, MemOp::FetchAdd, base, 1u32.to_le_bytes().to_vec())),
            Box::new(move |ep| atomic(ep, MemOp::Cas, base + 16, vec![0; 12])),
        ],
    );
    let mut m = [0u8; 4];
    sim.host_read(base, &mut m);
    assert_eq!(u32::from_le_bytes(m), 42);
    assert_eq!(got.len(), 1, "the FetchAdd's completion");
    let c = TlpRepr::parse_bytes(&got[0]).unwrap();
    let TlpHeader::Cpl(h) = c.header else {
        panic!("{c}")
    };
    assert_eq!(
        (h.tag.value(), h.byte_count, c.payload),
        (33, 4, &41u32.to_le_bytes()[..])
    );
    assert_eq!(uncorrectable(&mut sim, dsp) & MALFORMED, MALFORMED);
    assert!(fault_text(&sim, FaultKind::RawTlp).contains("AtomicOperand"));
}
