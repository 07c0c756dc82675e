//! I/O requests (IORd/IOWr) in the timed simulator: round trips through a switch with
//! hand-computed latencies, Unsupported Request for unclaimed addresses and for devices
//! without I/O handlers, and traced TLPs that decode with the wire codec.

use crate::common::{hand_sim, hand_timing, latency, ser_gen3x4, switch_tree, trace_tlps};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::{EpCx, FabricSim, HostRead, ReadReply};
use pcielab_sim::SimDuration;
use pcielab_wire::tlp::TlpHeader;
use pcielab_wire::CplStatus;

/// psmem's BARs: 0 (64-bit memory, two slots), 2 (MSI-X), 3 (I/O).
const IO_BAR: u8 = 3;

fn io_base(sim: &FabricSim) -> u32 {
    let a = sim.bar("ep", IO_BAR).expect("ep has an I/O BAR");
    u32::try_from(a).unwrap()
}

/// (io_write latency, io_read latency, data read) of one run.
fn round_trip() -> (u64, u64, Vec<u8>, u64) {
    let mut sim = hand_sim(7, true);
    sim.run_for(SimDuration::from_us(5)); // links trained, idle
    let io = io_base(&sim);
    let w = sim.io_write(io + 4, &[0xde, 0xad, 0xbe, 0xef]).unwrap();
    let HostRead::Done { data, .. } = &w else {
        panic!("{w:?}")
    };
    assert!(data.is_empty());
    sim.run_for(SimDuration::from_us(5)); // ACKs and UpdateFCs settle
    let r = sim.io_read(io + 4, 4).unwrap();
    let HostRead::Done { data, .. } = &r else {
        panic!("{r:?}")
    };
    let data = data.clone();
    sim.run_for(SimDuration::from_us(5));
    // The MMIO read of the same size over the same path (a 64-bit BAR: 4DW header).
    let bar = sim.bar("ep", 0).unwrap();
    let m = sim.mmio_read(bar, 4).unwrap();
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    (latency(&w), latency(&r), data, latency(&m))
}

#[test]
fn io_write_then_read_round_trips_through_a_switch_in_the_hand_computed_time() {
    let (w, r, data, mmio) = round_trip();
    assert_eq!(data, [0xde, 0xad, 0xbe, 0xef]);
    // IOWr: 12-byte header + 1 DW + 8 bytes of framing, sequence number and LCRC = 24
    // wire bytes down; the Cpl: 12 + 8 = 20 up. IORd: 20 down; the CplD: 24 up.
    let want = 100_000 // RC out
        + 2 * (ser_gen3x4(24) + 5_000) + 150_000 // two links, switch
        + 40_000 // endpoint
        + 2 * (ser_gen3x4(20) + 5_000) + 150_000 // two links, switch
        + 100_000; // RC in
    assert_eq!(w, want);
    assert_eq!(r, want);
    // The MMIO read crosses the same path with a 16-byte header (24 wire bytes) down:
    // the I/O read is shorter by the 4 header bytes on each of the two links.
    assert_eq!(mmio, r + 2 * (ser_gen3x4(24) - ser_gen3x4(20)));
    assert!(mmio > r);
    // Deterministic.
    assert_eq!(round_trip(), (w, r, data, mmio));
}

#[test]
fn partial_dw_accesses_use_byte_enables() {
    let mut sim = hand_sim(7, true);
    let io = io_base(&sim);
    let w = sim.io_write(io + 0x10, &[1, 2, 3, 4]).unwrap();
    assert!(matches!(w, HostRead::Done { .. }), "{w:?}");
    let w = sim.io_write(io + 0x11, &[0xaa, 0xbb]).unwrap();
    assert!(matches!(w, HostRead::Done { .. }), "{w:?}");
    for (off, len, want) in [
        (0x10, 4, vec![1, 0xaa, 0xbb, 4]),
        (0x12, 2, vec![0xbb, 4]),
        (0x13, 1, vec![4]),
    ] {
        match sim.io_read(io + off, len).unwrap() {
            HostRead::Done { data, .. } => assert_eq!(data, want, "at +{off:#x}"),
            r => panic!("{r:?}"),
        }
    }
    // More than one DW, or crossing a DW boundary, is not an I/O request.
    assert!(sim.io_read(io, 5).is_err());
    assert!(sim.io_read(io + 3, 2).is_err());
    assert!(sim.io_write(io + 2, &[0; 3]).is_err());
    assert!(sim.io_read(io, 0).is_err());
}

#[test]
fn unclaimed_io_addresses_get_unsupported_request() {
    let mut sim = hand_sim(7, true);
    let io = io_base(&sim);
    // Below the host's I/O aperture, and above the only I/O BAR (ep2 has none).
    for a in [0x10u32, io + 0x1000, 0xfff0] {
        assert_eq!(
            sim.io_read(a, 4).unwrap(),
            HostRead::Failed(CplStatus::Ur),
            "{a:#x}"
        );
        assert_eq!(
            sim.io_write(a, &[1]).unwrap(),
            HostRead::Failed(CplStatus::Ur),
            "{a:#x}"
        );
    }
    // The host still works afterwards (no tag leaked).
    assert!(matches!(sim.io_read(io, 4).unwrap(), HostRead::Done { .. }));
}

/// A device model without I/O handlers (the Endpoint defaults).
#[derive(Debug)]
struct NoIo;
impl pcielab_fabric::timed::Endpoint for NoIo {}

/// A device model that completes I/O reads later and refuses I/O writes.
#[derive(Debug, Default)]
struct Slow {
    pending: Option<pcielab_fabric::timed::ReadTicket>,
}
impl pcielab_fabric::timed::Endpoint for Slow {
    fn io_read(&mut self, _bar: u8, off: u64, _buf: &mut [u8], cx: &mut EpCx<'_>) -> ReadReply {
        let t = pcielab_fabric::timed::ReadTicket(off);
        self.pending = Some(t);
        cx.timer(SimDuration::from_ns(500), 0);
        ReadReply::Later(t)
    }
    fn io_write(&mut self, _bar: u8, _off: u64, _data: &[u8], _cx: &mut EpCx<'_>) -> ReadReply {
        ReadReply::Unsupported
    }
    fn timer(&mut self, _token: u64, cx: &mut EpCx<'_>) {
        if let Some(t) = self.pending.take() {
            cx.complete(t, vec![0x11, 0x22, 0x33, 0x44]);
        }
    }
}

#[test]
fn device_models_answer_io_with_defaults_tickets_and_ur() {
    let mut sim = hand_sim(7, true);
    let io = io_base(&sim);
    sim.attach("ep", Box::new(NoIo)).unwrap();
    // The default io_read answers UR after the round trip; io_write completes.
    assert_eq!(sim.io_read(io, 4).unwrap(), HostRead::Failed(CplStatus::Ur));
    assert!(matches!(
        sim.io_write(io, &[1, 2]).unwrap(),
        HostRead::Done { .. }
    ));

    let mut sim = hand_sim(7, true);
    sim.run_for(SimDuration::from_us(5));
    let io = io_base(&sim);
    sim.attach("ep", Box::new(Slow::default())).unwrap();
    let r = sim.io_read(io + 2, 2).unwrap();
    let HostRead::Done { data, .. } = &r else {
        panic!("{r:?}")
    };
    // The device's completion data are the bytes asked for.
    assert_eq!(data, &[0x11, 0x22]);
    let (_, fast, _, _) = round_trip();
    assert_eq!(latency(&r), fast + 500_000);
    assert_eq!(
        sim.io_write(io, &[1]).unwrap(),
        HostRead::Failed(CplStatus::Ur)
    );
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

#[test]
fn traced_io_tlps_decode_as_iord_iowr_cpl_and_cpld() {
    let mut sim = FabricSim::new(
        &switch_tree(7, true),
        &KindRegistry::builtin(),
        hand_timing(true),
    )
    .unwrap();
    let io = io_base(&sim);
    let w = sim.io_write(io + 0x21, &[0x5a, 0xa5]).unwrap();
    assert!(matches!(w, HostRead::Done { .. }), "{w:?}");
    let r = sim.io_read(io + 0x20, 4).unwrap();
    assert!(
        matches!(&r, HostRead::Done { data, .. } if data[1..3] == [0x5a, 0xa5]),
        "{r:?}"
    );
    let t = sim.trace().unwrap();
    let (mut iord, mut iowr, mut cpl, mut cpld) = (0, 0, 0, 0);
    for (_, p) in trace_tlps(t) {
        match p.header {
            TlpHeader::Io(h) => {
                assert_eq!(h.address, io + 0x20);
                if h.write {
                    iowr += 1;
                    assert_eq!(h.first_be.bits(), 0b0110);
                    assert_eq!(p.payload.len(), 4);
                    assert_eq!(&p.payload[1..3], &[0x5a, 0xa5]);
                } else {
                    iord += 1;
                    assert_eq!(h.first_be.bits(), 0b1111);
                    assert!(p.payload.is_empty());
                }
            }
            TlpHeader::Cpl(h) => {
                assert_eq!(h.status, CplStatus::Sc);
                assert_eq!((h.byte_count, h.lower_address), (4, 0));
                if p.payload.is_empty() {
                    cpl += 1;
                } else {
                    cpld += 1;
                    assert_eq!(p.payload.len(), 4);
                    assert_eq!(&p.payload[1..3], &[0x5a, 0xa5]);
                }
            }
            h => panic!("unexpected TLP {h:?}"),
        }
    }
    // Each TLP crosses two links and is traced on each.
    assert_eq!((iowr, iord, cpl, cpld), (2, 2, 2, 2));
}
