//! Any bytes: DLLP parsing never panics; whatever parses re-emits to the same bytes
//! (reserved bits aside) and parses back to the same representation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_wire::dllp::{DllpRepr, Packet};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    let _ = (p.dllp_type(), p.crc(), p.compute_crc());
    if let Ok(r) = DllpRepr::parse_ignoring_crc(&p) {
        let _ = r.to_string();
        let bytes = r.to_bytes().expect("a parsed DLLP emits");
        assert_eq!(
            DllpRepr::from_bytes(&bytes).expect("emitted DLLP parses"),
            r
        );
        let _ = pcielab_wire::dllp::json::to_json(&r);
    }
});
