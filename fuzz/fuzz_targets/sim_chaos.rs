//! Any bytes, read as a script of host actions on a simulated fabric under DMA traffic
//! (see `host_script.rs`): the simulator never panics and comes to rest once the script
//! ends.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/fabric/tests/it/host_script.rs"]
mod host_script;

fuzz_target!(|data: &[u8]| {
    let (_, pending, _) = host_script::run(data);
    assert_eq!(pending, 0, "events pending 20 ms after the script");
});
