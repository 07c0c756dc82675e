//! Any text: the `lspci -xxxx` reader, the capability walker and the decoder never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_config::{caps::walk, decode::describe, lspci::parse_dump};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(entries) = parse_dump(&text) {
        for e in entries {
            assert!(matches!(e.bytes.len(), 64 | 256 | 4096));
            let _ = walk(&e.bytes);
            let _ = describe(&e.bytes);
        }
    }
    let _ = describe(data);
});
