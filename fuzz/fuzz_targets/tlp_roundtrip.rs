//! Bytes that parse re-emit to a TLP that parses to the same representation, and its
//! JSON form encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_wire::json::{tlp_from_json, tlp_to_json};
use pcielab_wire::tlp::{ParseOptions, TlpPacket, TlpRepr};

fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions { check_ecrc: false };
    let Ok(r) = TlpRepr::parse_with(&TlpPacket::new_unchecked(data), opts) else {
        return;
    };
    let mut buf = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut buf).expect("a parsed TLP emits");
    assert_eq!(n, data.len());
    let again = TlpRepr::parse_bytes(&buf).expect("emitted bytes parse");
    assert_eq!(again, r);
    let json = tlp_to_json(&again);
    assert_eq!(tlp_from_json(&json).expect("JSON encodes"), buf);
});
