//! Any bytes, read two ways by the D2D receiver's UDP/IP offload engine
//! (`pcielab_device::d2d::uoe`): as a frame to parse (never a panic: a frame or an
//! error naming the layer and byte), and, first 80 bytes as the offload registers and
//! the rest as payload, as a frame to build, which (when the registers are accepted)
//! parses back to the same ports and payload with good checksums.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_device::d2d::uoe::{parse, parse_with, Template, BLOCK};

fuzz_target!(|data: &[u8]| {
    if let Err(e) = parse(data) {
        assert!(e.offset <= data.len() + 20, "{e}");
    }
    let _ = parse_with(data, false);
    if data.len() < BLOCK {
        return;
    }
    let mut t = Template::default();
    t.bytes.copy_from_slice(&data[..BLOCK]);
    let payload = &data[BLOCK..];
    let mut frame = Vec::new();
    let n = data.len() as u64;
    if t.build(payload, n, n * 1000, &mut frame).is_ok() {
        let rtp = t.ctrl() & pcielab_device::d2d::uoe::CTRL_RTP != 0;
        let p = parse_with(&frame, rtp).expect("a frame the engine built parses");
        assert_eq!(p.payload, payload);
        assert_eq!(&frame[frame.len() - payload.len()..], payload);
    }
});
