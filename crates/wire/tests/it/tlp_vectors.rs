//! Fixed byte vectors written by hand from the header layouts of the PCIe Base
//! Specification (not produced by this codec).

use pcielab_wire::tlp::*;
use pcielab_wire::*;

fn parse(b: &[u8]) -> TlpRepr<'_> {
    TlpRepr::parse_bytes(b).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn mwr_4dw_one_dw() {
    // Fmt 011 Type 00000; Length 1; 01:00.0 tag 5; BE last 0 first f; 64-bit address.
    let b = [
        0x60, 0x00, 0x00, 0x01, 0x01, 0x00, 0x05, 0x0f, 0x00, 0x00, 0x00, 0x01, 0x23, 0x45, 0x67,
        0x80, 0xde, 0xad, 0xbe, 0xef,
    ];
    let t = parse(&b);
    assert_eq!(t.kind(), TlpKind::MWr);
    let TlpHeader::Mem(m) = t.header else {
        panic!()
    };
    assert_eq!(m.address, 0x1_2345_6780);
    assert_eq!(m.requester_id.to_string(), "01:00.0");
    assert_eq!((m.first_be.bits(), m.last_be.bits()), (0xf, 0));
    assert_eq!(t.payload, &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(t.to_vec().unwrap(), b);
}

#[test]
fn cpld_with_4096_byte_count_and_1024_dw() {
    // Fmt 010 Type 01010, Length 0 (=1024 DW); completer 02:00.0, SC, Byte Count 0 (=4096);
    // requester 00:00.0 tag 0x3ff (T9 T8 set), lower address 0.
    let mut b = vec![
        0x4a, 0x88, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x00,
    ];
    b.extend(std::iter::repeat_n(0x11, 4096));
    let t = parse(&b);
    assert_eq!(t.kind(), TlpKind::CplD);
    assert_eq!(t.length_dw(), 1024);
    assert_eq!(t.tag().value(), 0x3ff);
    let TlpHeader::Cpl(c) = t.header else {
        panic!()
    };
    assert_eq!(c.byte_count, 4096);
    assert_eq!(c.status, CplStatus::Sc);
    assert_eq!(c.completer_id.to_string(), "02:00.0");
    assert_eq!(t.to_vec().unwrap(), b);
}

#[test]
fn cfgrd0_register_numbers() {
    // CfgRd0 from 00:00.0 tag 1 to 03:04.5, Ext Reg 0x2, Reg 0x05 => DW 0x085 => byte 0x214.
    let b = [
        0x04, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x0f, 0x03, 0x25, 0x02, 0x14,
    ];
    let t = parse(&b);
    let TlpHeader::Cfg(c) = t.header else {
        panic!()
    };
    assert_eq!(c.target.to_string(), "03:04.5");
    assert_eq!(c.register, 0x85);
    assert_eq!(
        t.to_string(),
        "CfgRd0 00:00.0 tag 1 -> 03:04.5 reg 133 (0x214) BE f TC0"
    );
    assert_eq!(t.to_vec().unwrap(), b);
}

#[test]
fn messages() {
    // ERR_COR routed to RC (Type 10000), Msg 4 DW.
    let b = [
        0x30, 0, 0, 0, 0x01, 0x00, 0x00, 0x30, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let t = parse(&b);
    let TlpHeader::Msg(m) = t.header else {
        panic!()
    };
    assert_eq!((m.code, m.routing), (MsgCode::ErrCor, MsgRouting::ToRc));
    // Vendor_Defined Type 1 by ID (Type 10010) to 05:00.0, vendor 0x1af4, MsgD 1 DW.
    let b = [
        0x72, 0, 0, 1, 0x01, 0x00, 0x00, 0x7f, 0x05, 0x00, 0x1a, 0xf4, 0, 0, 0, 9, 1, 2, 3, 4,
    ];
    let t = parse(&b);
    assert_eq!(t.kind(), TlpKind::MsgD);
    let TlpHeader::Msg(m) = t.header else {
        panic!()
    };
    assert_eq!(m.routing, MsgRouting::ById);
    assert_eq!(m.fields.destination_id().to_string(), "05:00.0");
    assert_eq!(m.fields.vendor_id(), 0x1af4);
    assert_eq!(m.fields.vendor_data(), 9);
    // Reserved routing 110b is rejected, naming the field.
    let mut bad = [0x36, 0, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0];
    assert!(matches!(
        TlpRepr::parse_bytes(&bad),
        Err(Error::Field {
            field: "Fmt/Type",
            offset: 0,
            ..
        })
    ));
    bad[0] = 0x34; // local, fine
    assert!(TlpRepr::parse_bytes(&bad).is_ok());
}

#[test]
fn prefix_then_header() {
    // PASID prefix (Fmt 100, E=1 type 0001) then a 3 DW MRd of 1 DW.
    let b = [
        0x91, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x10,
        0x00,
    ];
    let t = parse(&b);
    assert_eq!(t.prefix_list().len(), 1);
    assert_eq!(t.prefix_list()[0].pasid(), Some((0x1234, false, false)));
    assert_eq!(t.to_vec().unwrap(), b);
}

#[test]
fn ecrc_is_checked() {
    let data = [1u8, 2, 3, 4];
    let mut t =
        TlpRepr::mem_write(Bdf::from_raw(0x100), Tag::new(0).unwrap(), 0x40, &data).unwrap();
    t.td = true;
    let mut v = t.to_vec().unwrap();
    assert_eq!(v.len(), 12 + 4 + 4);
    assert_eq!(parse(&v), t);
    // EP and Type bit 0 are variant: flipping them keeps the ECRC valid.
    v[2] |= 0x40;
    assert!(TlpRepr::parse_bytes(&v).is_ok());
    v[6] ^= 0x01; // the tag is covered
    assert!(matches!(
        TlpRepr::parse_bytes(&v),
        Err(Error::Crc {
            what: "ECRC",
            offset: 16,
            ..
        })
    ));
}

#[test]
fn errors_name_field_and_place() {
    let e = TlpRepr::parse_bytes(&[0x00, 0x00, 0x00, 0x01, 0x01]).unwrap_err();
    assert_eq!(
        e,
        Error::Truncated {
            what: "3 DW TLP header",
            needed: 12,
            available: 5
        }
    );
    let e = TlpRepr::parse_bytes(&[0xe0, 0, 0, 0]).unwrap_err();
    assert!(matches!(
        e,
        Error::Field {
            field: "Fmt/Type",
            value: 0xe0,
            offset: 0,
            ..
        }
    ));
    // MWr Length 2 with one DW of payload.
    let e =
        TlpRepr::parse_bytes(&[0x40, 0, 0, 2, 0, 0, 0, 0xff, 0, 0, 0, 0, 1, 2, 3, 4]).unwrap_err();
    assert_eq!(
        e,
        Error::Truncated {
            what: "payload of the Length field",
            needed: 20,
            available: 16
        }
    );
    // Trailing bytes after a complete MRd.
    let e = TlpRepr::parse_bytes(&[0, 0, 0, 1, 0, 0, 0, 0xf, 0, 0, 0, 0, 9]).unwrap_err();
    assert!(matches!(
        e,
        Error::Trailing {
            expected: 12,
            available: 13,
            ..
        }
    ));
    assert!(e.to_string().contains("12"));
}

#[test]
fn display_lines() {
    let b = [
        0x4a, 0, 0, 1, 0x00, 0x00, 0x00, 0x04, 0x01, 0x00, 0x07, 0x40, 1, 2, 3, 4,
    ];
    assert_eq!(
        parse(&b).to_string(),
        "CplD 00:00.0 -> 01:00.0 tag 7 SC bc 4 la 0x40 len 1DW TC0"
    );
}
