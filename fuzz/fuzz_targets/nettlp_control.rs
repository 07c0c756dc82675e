//! Any request line of the adapter's control socket: `parse_command` (and the hex and
//! number parsers under it) never panics, and a parsed command written back with
//! `to_line` parses to the same command.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_nettlp::control::{parse_command, parse_hex};

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let _ = parse_hex(&line);
    if let Ok(c) = parse_command(&line) {
        assert_eq!(parse_command(&c.to_line()), Ok(c));
    }
});
