//! Any bytes: the view, the receiver checks and the text/JSON forms never panic, and the
//! view agrees with the representation on every field both expose.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_wire::tlp::check::{check_rx, RxRules};
use pcielab_wire::tlp::{TlpPacket, TlpRepr};

fuzz_target!(|data: &[u8]| {
    let _ = check_rx(
        data,
        &RxRules {
            mps: 256,
            ..RxRules::default()
        },
    );
    if let Ok(p) = TlpPacket::new_checked(data) {
        let kind = p.kind().expect("checked packets have a kind");
        let _ = (
            p.tag(),
            p.requester_id(),
            p.address(),
            p.payload(),
            p.ecrc(),
            p.compute_ecrc(),
        );
        if let Ok(r) = TlpRepr::parse(&p) {
            assert_eq!(r.kind(), kind);
            assert_eq!(r.payload, p.payload());
            assert_eq!(r.tag(), p.tag());
            let _ = r.to_string();
            let _ = pcielab_wire::json::tlp_to_json(&r);
        }
    }
});
