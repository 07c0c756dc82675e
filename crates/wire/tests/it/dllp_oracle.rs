//! DLLPs checked against vectors packed by an independent encoder, cocotbext-pcie.
//!
//! `tests/oracle/dllp_vectors.txt` is produced by `tests/oracle/dllp_vectors.py` with
//! cocotbext-pcie alone; CI regenerates it (`--check`) to prove it still is. Here every
//! good vector must parse to cocotbext's fields and re-emit to cocotbext's bytes, and
//! every corrupted vector must fail the CRC check.

use pcielab_wire::dllp::{DllpRepr, FcClass, FcDllp, FcKind, FcScale};
use pcielab_wire::{Error, SeqNum};

const VECTORS: &str = include_str!("../oracle/dllp_vectors.txt");

struct Vector {
    bytes: [u8; 6],
    crc_ok: bool,
    repr: DllpRepr,
}

fn hex6(s: &str) -> [u8; 6] {
    assert_eq!(s.len(), 12, "{s}");
    let mut b = [0u8; 6];
    for (i, o) in b.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
    }
    b
}

/// Builds our representation from cocotbext's field values (not from the bytes).
fn repr_from_fields(name: &str, f: &[u32]) -> DllpRepr {
    let [seq, vc, hdr_scale, hdr_fc, data_scale, data_fc, support, ack] = f else {
        panic!("expected 8 fields, got {f:?}");
    };
    let fc = |kind, class| {
        DllpRepr::Fc(FcDllp {
            kind,
            class,
            vc: *vc as u8,
            hdr_scale: FcScale::from_raw(*hdr_scale as u8),
            hdr_fc: *hdr_fc as u8,
            data_scale: FcScale::from_raw(*data_scale as u8),
            data_fc: *data_fc as u16,
        })
    };
    match name {
        "ACK" => DllpRepr::Ack {
            seq: SeqNum::new(*seq as u16).unwrap(),
        },
        "NAK" => DllpRepr::Nak {
            seq: SeqNum::new(*seq as u16).unwrap(),
        },
        "INIT_FC1_P" => fc(FcKind::InitFc1, FcClass::P),
        "INIT_FC1_NP" => fc(FcKind::InitFc1, FcClass::Np),
        "INIT_FC1_CPL" => fc(FcKind::InitFc1, FcClass::Cpl),
        "INIT_FC2_P" => fc(FcKind::InitFc2, FcClass::P),
        "INIT_FC2_NP" => fc(FcKind::InitFc2, FcClass::Np),
        "INIT_FC2_CPL" => fc(FcKind::InitFc2, FcClass::Cpl),
        "UPDATE_FC_P" => fc(FcKind::UpdateFc, FcClass::P),
        "UPDATE_FC_NP" => fc(FcKind::UpdateFc, FcClass::Np),
        "UPDATE_FC_CPL" => fc(FcKind::UpdateFc, FcClass::Cpl),
        "PM_ENTER_L1" => DllpRepr::PmEnterL1,
        "PM_ENTER_L23" => DllpRepr::PmEnterL23,
        "PM_ACT_ST_REQ_L1" => DllpRepr::PmActiveStateRequestL1,
        "PM_REQ_ACK" => DllpRepr::PmRequestAck,
        "NOP" => DllpRepr::Nop,
        "DATA_LINK_FEATURE" => DllpRepr::DataLinkFeature {
            ack: *ack != 0,
            support: *support,
        },
        other => panic!("unknown cocotbext DLLP type {other}"),
    }
}

fn vectors() -> Vec<Vector> {
    VECTORS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let fields: Vec<u32> = cols[3..].iter().map(|c| c.parse().unwrap()).collect();
            Vector {
                bytes: hex6(cols[0]),
                crc_ok: cols[1] == "1",
                repr: repr_from_fields(cols[2], &fields),
            }
        })
        .collect()
}

#[test]
fn cocotbext_vectors_parse_and_emit_identically() {
    let vs = vectors();
    let (mut good, mut bad) = (0, 0);
    for v in &vs {
        if v.crc_ok {
            assert_eq!(
                DllpRepr::from_bytes(&v.bytes),
                Ok(v.repr),
                "parse {:02x?}",
                v.bytes
            );
            assert_eq!(v.repr.to_bytes(), Ok(v.bytes), "emit {:?}", v.repr);
            good += 1;
        } else {
            assert!(
                matches!(
                    DllpRepr::from_bytes(&v.bytes),
                    Err(Error::Crc { offset: 4, .. })
                ),
                "corrupt {:02x?} accepted",
                v.bytes
            );
            bad += 1;
        }
    }
    // The file must hold what the generator promises, so an empty or cut file fails.
    assert_eq!((good, bad), (2000, 500));
}
