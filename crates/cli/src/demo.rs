//! `pcielab demo`: the built-in default — a bundled set of packets covering every TLP kind
//! (and, once encoded, every DLLP kind), emitted to bytes, decoded back and printed.

use crate::Failure;
use clap::Args;
use pcielab_wire::dllp::DllpRepr;
use pcielab_wire::json::{hex, tlp_to_json};
use pcielab_wire::tlp::*;
use pcielab_wire::{Bdf, ByteEnables, CplStatus, Error, SeqNum, Tag, TrafficClass};

/// Arguments of `demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Output format: table (text lines), csv (one record per packet) or json (one
    /// object per line).
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<crate::format::Format>,
    /// Same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Also print each packet's bytes in hex.
    #[arg(long)]
    pub hex: bool,
    /// Also write the set as a pcapng capture (open it in Wireshark with dissector/pcielab.lua).
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<String>,
}

fn id(s: &str) -> Bdf {
    s.parse().unwrap_or_default()
}

fn tag(t: u16) -> Tag {
    Tag::from_bits_truncate(t)
}

fn mem(op: MemOp, rid: &str, t: u16, addr: u64, first: u8, last: u8, rlen: u16) -> TlpHeader {
    let (first, last) = (
        ByteEnables::from_bits_truncate(first),
        ByteEnables::from_bits_truncate(last),
    );
    TlpHeader::Mem(MemHeader::new(op, id(rid), tag(t), addr, first, last, rlen))
}

fn msg(code: MsgCode, routing: MsgRouting, rid: &str, fields: [u8; 8]) -> TlpHeader {
    TlpHeader::Msg(MsgHeader {
        requester_id: id(rid),
        tag: tag(0),
        code,
        routing,
        fields: MsgFields(fields),
    })
}

fn cpl(
    locked: bool,
    cid: &str,
    rid: &str,
    t: u16,
    status: CplStatus,
    bc: u16,
    la: u8,
) -> TlpHeader {
    TlpHeader::Cpl(CplHeader {
        locked,
        completer_id: id(cid),
        status,
        bcm: false,
        byte_count: bc,
        requester_id: id(rid),
        tag: tag(t),
        lower_address: la,
    })
}

/// The demonstration TLPs, in sections, as emitted bytes.
pub fn demo_tlps() -> Result<Vec<(&'static str, Vec<u8>)>, Error> {
    let data64: Vec<u8> = (0..64u8).collect();
    let d4 = [0x78, 0x56, 0x34, 0x12];
    let d8 = [1u8, 0, 0, 0, 0, 0, 0, 0];
    let d16 = [0u8; 16];
    let cfg = |write: bool, type1: bool, target: &str, reg: u16| {
        TlpHeader::Cfg(CfgHeader {
            write,
            type1,
            requester_id: id("00:00.0"),
            tag: tag(1),
            first_be: ByteEnables::ALL,
            target: id(target),
            register: reg,
        })
    };
    let io = |write: bool| {
        TlpHeader::Io(IoHeader {
            write,
            requester_id: id("00:00.0"),
            tag: tag(2),
            first_be: ByteEnables::from_bits_truncate(0x3),
            address: 0xe000,
        })
    };
    let mut list: Vec<(&'static str, TlpRepr<'_>)> = vec![
        (
            "enumeration: read Vendor/Device ID",
            TlpRepr::with_header(cfg(false, false, "01:00.0", 0), &[]),
        ),
        (
            "enumeration: size BAR0",
            TlpRepr::with_header(cfg(true, false, "01:00.0", 4), &[0xff; 4]),
        ),
        (
            "enumeration: probe below a switch",
            TlpRepr::with_header(cfg(false, true, "02:00.0", 0), &[]),
        ),
        (
            "enumeration: program a bridge",
            TlpRepr::with_header(cfg(true, true, "02:01.0", 6), &d4),
        ),
        ("legacy I/O read", TlpRepr::with_header(io(false), &[])),
        ("legacy I/O write", TlpRepr::with_header(io(true), &d4)),
        (
            "MMIO read of a BAR register",
            TlpRepr::with_header(mem(MemOp::Read, "00:00.0", 3, 0xf780_0010, 0xf, 0, 1), &[]),
        ),
        (
            "MMIO doorbell write",
            TlpRepr::with_header(mem(MemOp::Write, "00:00.0", 0, 0xf780_0040, 0xf, 0, 0), &d4),
        ),
        (
            "DMA read above 4 GiB, 10-bit tag",
            TlpRepr::with_header(
                mem(MemOp::Read, "01:00.0", 0x2a5, 0x1_0000_1000, 0xf, 0xf, 32),
                &[],
            ),
        ),
        (
            "DMA write 64 B",
            TlpRepr::with_header(
                mem(MemOp::Write, "01:00.0", 0, 0x8000_0040, 0xf, 0xf, 0),
                &data64,
            ),
        ),
        (
            "locked read",
            TlpRepr::with_header(mem(MemOp::ReadLocked, "00:00.0", 4, 0x1000, 0xf, 0, 1), &[]),
        ),
        (
            "AtomicOp FetchAdd 64-bit",
            TlpRepr::with_header(mem(MemOp::FetchAdd, "01:00.0", 5, 0x9000, 0xf, 0xf, 0), &d8),
        ),
        (
            "AtomicOp Swap 32-bit",
            TlpRepr::with_header(mem(MemOp::Swap, "01:00.0", 6, 0x9008, 0xf, 0, 0), &d4),
        ),
        (
            "AtomicOp CAS 64-bit",
            TlpRepr::with_header(mem(MemOp::Cas, "01:00.0", 7, 0x9010, 0xf, 0xf, 0), &d16),
        ),
        (
            "completion: first part of a split read",
            TlpRepr::with_header(
                cpl(false, "00:00.0", "01:00.0", 0x2a5, CplStatus::Sc, 128, 0),
                &data64,
            ),
        ),
        (
            "completion: Unsupported Request",
            TlpRepr::with_header(
                cpl(false, "01:00.0", "00:00.0", 3, CplStatus::Ur, 4, 0x10),
                &[],
            ),
        ),
        (
            "completion: Configuration Retry",
            TlpRepr::with_header(
                cpl(false, "01:00.0", "00:00.0", 1, CplStatus::Crs, 4, 0),
                &[],
            ),
        ),
        (
            "completion for a locked read",
            TlpRepr::with_header(cpl(true, "00:00.0", "00:00.0", 4, CplStatus::Sc, 4, 0), &d4),
        ),
        (
            "completion for a locked read, failed",
            TlpRepr::with_header(cpl(true, "00:00.0", "00:00.0", 4, CplStatus::Ca, 4, 0), &[]),
        ),
        (
            "MSI-X interrupt (a posted write)",
            TlpRepr::with_header(
                mem(MemOp::Write, "01:00.0", 0, 0xfee0_0000, 0xf, 0, 0),
                &[0x21, 0, 0, 0],
            ),
        ),
        (
            "INTx assert",
            TlpRepr::with_header(
                msg(MsgCode::AssertIntA, MsgRouting::Local, "01:00.0", [0; 8]),
                &[],
            ),
        ),
        (
            "error report",
            TlpRepr::with_header(
                msg(MsgCode::ErrNonFatal, MsgRouting::ToRc, "01:00.0", [0; 8]),
                &[],
            ),
        ),
        (
            "power management: PME_Turn_Off",
            TlpRepr::with_header(
                msg(
                    MsgCode::PmeTurnOff,
                    MsgRouting::Broadcast,
                    "00:00.0",
                    [0; 8],
                ),
                &[],
            ),
        ),
        (
            "power management: PME_TO_Ack",
            TlpRepr::with_header(
                msg(MsgCode::PmeToAck, MsgRouting::Gathered, "01:00.0", [0; 8]),
                &[],
            ),
        ),
        (
            "LTR",
            TlpRepr::with_header(
                msg(
                    MsgCode::Ltr,
                    MsgRouting::Local,
                    "01:00.0",
                    [0, 0, 0, 0, 0x88, 0x05, 0x88, 0x05],
                ),
                &[],
            ),
        ),
        (
            "Set_Slot_Power_Limit",
            TlpRepr::with_header(
                msg(
                    MsgCode::SetSlotPowerLimit,
                    MsgRouting::Local,
                    "00:01.0",
                    [0; 8],
                ),
                &[0x19, 0x01, 0, 0],
            ),
        ),
        (
            "vendor-defined message by ID",
            TlpRepr::with_header(
                msg(
                    MsgCode::VendorDefinedType1,
                    MsgRouting::ById,
                    "01:00.0",
                    [0x02, 0x00, 0x1a, 0xf4, 0, 0, 0, 1],
                ),
                &d4,
            ),
        ),
        (
            "ATS invalidate request",
            TlpRepr::with_header(
                msg(
                    MsgCode::AtsInvalidateRequest,
                    MsgRouting::ById,
                    "00:00.0",
                    [0x01, 0x00, 0, 0, 0, 0, 0, 3],
                ),
                &d8,
            ),
        ),
        (
            "page request",
            TlpRepr::with_header(
                msg(
                    MsgCode::PageRequest,
                    MsgRouting::ToRc,
                    "01:00.0",
                    // Page 0x12345000, group 5, last, read and write.
                    [0, 0, 0, 0, 0x12, 0x34, 0x50, 0x2f],
                ),
                &[],
            ),
        ),
        (
            "message routed by address",
            TlpRepr::with_header(
                msg(
                    MsgCode::Unknown(0x99),
                    MsgRouting::ByAddress,
                    "01:00.0",
                    [0, 0, 0, 0, 0xf0, 0, 0, 0],
                ),
                &[],
            ),
        ),
    ];
    // A DMA read with a PASID prefix, an ECRC, and relaxed ordering.
    let mut r = TlpRepr::with_header(mem(MemOp::Read, "01:00.0", 9, 0x2000, 0xf, 0xf, 16), &[]);
    r.prefixes = Prefixes::from_slice(&[Prefix::new_pasid(0x42, false, false)])?;
    r.td = true;
    r.attr.ro = true;
    list.push(("DMA read with PASID prefix, ECRC and RO", r));
    let mut p = TlpRepr::with_header(mem(MemOp::Write, "01:00.0", 0, 0x3000, 0xf, 0, 0), &d4);
    p.ep = true;
    p.tc = TrafficClass::new(2)?;
    list.push(("poisoned write on TC2", p));
    list.into_iter()
        .map(|(what, r)| Ok((what, r.to_vec()?)))
        .collect()
}

/// The demonstration DLLPs: every DLLP kind.
pub fn demo_dllps() -> Result<Vec<(&'static str, [u8; 6])>, Error> {
    use pcielab_wire::dllp::{FcClass, FcDllp, FcKind, FcScale};
    let fc = |kind, class, hdr_fc, data_fc| {
        DllpRepr::Fc(FcDllp {
            kind,
            class,
            vc: 0,
            hdr_scale: FcScale::NotActive,
            hdr_fc,
            data_scale: FcScale::NotActive,
            data_fc,
        })
    };
    let list = vec![
        (
            "link init: posted credits",
            fc(FcKind::InitFc1, FcClass::P, 32, 512),
        ),
        (
            "link init: non-posted credits",
            fc(FcKind::InitFc1, FcClass::Np, 16, 0),
        ),
        (
            "link init: completion credits (infinite)",
            fc(FcKind::InitFc1, FcClass::Cpl, 0, 0),
        ),
        (
            "link init, second phase",
            fc(FcKind::InitFc2, FcClass::P, 32, 512),
        ),
        (
            "link init, second phase",
            fc(FcKind::InitFc2, FcClass::Np, 16, 0),
        ),
        (
            "link init, second phase",
            fc(FcKind::InitFc2, FcClass::Cpl, 0, 0),
        ),
        (
            "credits returned",
            fc(FcKind::UpdateFc, FcClass::P, 40, 640),
        ),
        ("credits returned", fc(FcKind::UpdateFc, FcClass::Np, 17, 1)),
        (
            "credits returned",
            fc(FcKind::UpdateFc, FcClass::Cpl, 3, 48),
        ),
        (
            "acknowledge up to a TLP",
            DllpRepr::Ack {
                seq: SeqNum::new(41)?,
            },
        ),
        (
            "ask for a replay",
            DllpRepr::Nak {
                seq: SeqNum::new(4095)?,
            },
        ),
        ("power management", DllpRepr::PmEnterL1),
        ("power management", DllpRepr::PmEnterL23),
        ("power management", DllpRepr::PmActiveStateRequestL1),
        ("power management", DllpRepr::PmRequestAck),
        (
            "vendor-specific",
            DllpRepr::VendorSpecific { data: 0x00c0de },
        ),
        ("no operation", DllpRepr::Nop),
        (
            "scaled flow control supported",
            DllpRepr::DataLinkFeature {
                ack: false,
                support: 1,
            },
        ),
    ];
    list.into_iter()
        .map(|(w, d)| Ok((w, d.to_bytes()?)))
        .collect()
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<(), Failure> {
    use crate::format::Format;
    let format = crate::format::effective(args.format, args.json, false);
    let text = format == Format::Table;
    let mut records = Vec::new();
    let mut record = |v: serde_json::Value| {
        if format == Format::Json {
            println!("{v}");
        } else {
            records.push(v);
        }
    };
    let tlps = demo_tlps().map_err(|e| crate::fail(format!("building the demo set: {e}")))?;
    let mut kinds = std::collections::BTreeSet::new();
    if text {
        println!(
            "pcielab demo: {} TLPs, emitted to bytes and decoded back",
            tlps.len()
        );
    }
    for (what, bytes) in &tlps {
        let repr = TlpRepr::parse_bytes(bytes).map_err(|e| crate::fail(format!("{what}: {e}")))?;
        kinds.insert(repr.kind().name());
        if !text {
            let mut v = tlp_to_json(&repr);
            v["what"] = serde_json::Value::from(*what);
            record(v);
        } else {
            println!("  {what:<40} {repr}");
            if args.hex {
                println!("  {:<40} {}", "", hex(bytes));
            }
        }
    }
    let dllps = demo_dllps().map_err(|e| crate::fail(format!("building the demo set: {e}")))?;
    if text {
        println!(
            "TLP kinds covered: {} of {}",
            kinds.len(),
            TlpKind::ALL.len()
        );
        println!();
        println!(
            "{} DLLPs, emitted to bytes (with their CRC) and decoded back",
            dllps.len()
        );
    }
    for (what, bytes) in &dllps {
        let d = DllpRepr::from_bytes(bytes).map_err(|e| crate::fail(format!("{what}: {e}")))?;
        if !text {
            let mut v = pcielab_wire::dllp::json::to_json(&d);
            v["what"] = serde_json::Value::from(*what);
            record(v);
        } else {
            println!("  {what:<40} {d}");
            if args.hex {
                println!("  {:<40} {}", "", hex(bytes));
            }
        }
    }
    if format == Format::Csv {
        print!("{}", crate::format::records_to_csv(&records));
    }
    if let Some(path) = &args.pcap {
        crate::dump_cmd::write_demo(path, &tlps, &dllps)?;
    }
    Ok(())
}
