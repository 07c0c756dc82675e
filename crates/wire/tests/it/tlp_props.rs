use crate::strategies::tlp;
use pcielab_wire::json::{tlp_from_json, tlp_to_json};
use pcielab_wire::tlp::*;
use proptest::prelude::*;

/// Clears the header bits that the representation does not keep (reserved fields).
fn clear_reserved(bytes: &mut [u8]) {
    let p = TlpPacket::new_unchecked(&*bytes);
    let h = p.header_offset();
    let kind = p.kind().unwrap();
    match kind {
        TlpKind::IORd | TlpKind::IOWr => {
            bytes[h + 7] &= 0x0f;
            bytes[h + 11] &= !3;
        }
        TlpKind::CfgRd0 | TlpKind::CfgWr0 | TlpKind::CfgRd1 | TlpKind::CfgWr1 => {
            bytes[h + 7] &= 0x0f;
            bytes[h + 10] &= 0x0f;
            bytes[h + 11] &= !3;
        }
        TlpKind::Msg | TlpKind::Cpl | TlpKind::CplLk => {
            bytes[h + 2] &= !3;
            bytes[h + 3] = 0;
            if kind != TlpKind::Msg {
                bytes[h + 11] &= 0x7f;
            }
        }
        TlpKind::CplD | TlpKind::CplDLk => bytes[h + 11] &= 0x7f,
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// parse(emit(r)) == r.
    #[test]
    fn emit_then_parse_is_identity(t in tlp()) {
        let r = t.repr();
        let mut buf = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let back = TlpRepr::parse_bytes(&buf).unwrap();
        prop_assert_eq!(back, r);
    }

    /// emit(parse(b)) == b for bytes that parse (reserved bits cleared).
    #[test]
    fn parse_then_emit_is_identity(t in tlp(), flips in proptest::collection::vec((0usize..64, 0u8..8), 0..4)) {
        let mut bytes = t.repr().to_vec().unwrap();
        // Disturb a few header bits; whatever still parses must re-emit unchanged.
        for (i, bit) in flips {
            let i = i % bytes.len().min(20);
            bytes[i] ^= 1 << bit;
        }
        if let Ok(r) = TlpRepr::parse_with(&TlpPacket::new_unchecked(&bytes[..]), ParseOptions { check_ecrc: false }) {
            let mut expect = bytes.clone();
            clear_reserved(&mut expect);
            let mut out = r.to_vec().unwrap();
            // The ECRC is recomputed on emit; compare it separately.
            if r.td {
                let n = out.len();
                let pkt = TlpPacket::new_checked(&expect[..]).unwrap();
                prop_assert_eq!(u32::from_le_bytes(out[n-4..].try_into().unwrap()), pkt.compute_ecrc());
                out.truncate(n - 4);
                expect.truncate(n - 4);
            }
            prop_assert_eq!(out, expect);
        }
    }

    /// JSON decode → encode is lossless.
    #[test]
    fn json_round_trip(t in tlp()) {
        let r = t.repr();
        let bytes = r.to_vec().unwrap();
        let v = tlp_to_json(&r);
        let text = serde_json::to_string(&v).unwrap();
        let v2: serde_json::Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(tlp_from_json(&v2).unwrap(), bytes);
    }

    /// Parsing arbitrary bytes never panics, and anything that parses displays and re-emits.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        if let Ok(r) = TlpRepr::parse_bytes(&bytes) {
            let _ = r.to_string();
            prop_assert!(r.to_vec().is_ok());
        }
        let _ = check::check_rx(&bytes, &check::RxRules::default());
    }

    /// Every prefix of a valid TLP is rejected with a length error, never a panic.
    #[test]
    fn truncation_is_reported(t in tlp()) {
        let bytes = t.repr().to_vec().unwrap();
        for cut in 0..bytes.len() {
            let e = TlpRepr::parse_bytes(&bytes[..cut]).unwrap_err();
            let is_len_error = matches!(e, pcielab_wire::Error::Truncated { .. });
            prop_assert!(is_len_error, "cut {} gave {:?}", cut, e);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

    /// The contract of the view: after `new_checked` succeeds, no getter panics — on any
    /// bytes, including every kind's fields read from every other kind's header.
    #[test]
    fn getters_never_panic_after_check(mut bytes in proptest::collection::vec(any::<u8>(), 12..80), prefix in 0u8..3) {
        // Steer a good share of inputs to a valid Length/TD for their Fmt.
        for i in 0..prefix as usize {
            if bytes.len() > 4 * i { bytes[4 * i] = 0x80 | (bytes[4 * i] & 0x1f); }
        }
        if let Ok(p) = TlpPacket::new_checked(&bytes[..]) {
            let _ = (p.kind(), p.fmt(), p.tc(), p.attr(), p.ln(), p.th(), p.td(), p.ep(), p.at());
            let _ = (p.length_dw(), p.tag(), p.requester_id(), p.completer_id(), p.first_be(), p.last_be());
            let _ = (p.address(), p.ph(), p.status(), p.bcm(), p.byte_count(), p.lower_address());
            let _ = (p.cfg_target(), p.cfg_register(), p.msg_code(), p.msg_routing(), p.msg_fields());
            let _ = (p.header(), p.payload(), p.ecrc(), p.compute_ecrc(), p.check_ecrc());
            let _: Vec<_> = p.prefixes().collect();
        }
    }
}
