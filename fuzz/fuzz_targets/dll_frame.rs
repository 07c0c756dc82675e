//! Any bytes as a data-link frame (sequence number + TLP + LCRC): parsing never panics, a
//! good frame re-emits identically, and the TLP inside goes through the TLP parser.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_wire::dll::DllFrameRepr;
use pcielab_wire::tlp::TlpRepr;

fuzz_target!(|data: &[u8]| {
    // Half the inputs get a valid LCRC so the fuzzer reaches past the CRC check.
    let mut owned;
    let bytes = if data.first().is_some_and(|b| b & 1 == 1) && data.len() >= 6 {
        owned = data.to_vec();
        let n = owned.len();
        let crc = pcielab_wire::crc::crc32(&owned[..n - 4]);
        owned[n - 4..].copy_from_slice(&crc.to_le_bytes());
        &owned[..]
    } else {
        data
    };
    if let Ok(f) = DllFrameRepr::from_bytes(bytes) {
        let mut out = vec![0u8; f.buffer_len()];
        f.emit(&mut out).expect("a parsed frame emits");
        let _ = TlpRepr::parse_bytes(f.tlp);
        assert_eq!(
            DllFrameRepr::from_bytes(&out).expect("emitted frame parses"),
            f
        );
    }
});
