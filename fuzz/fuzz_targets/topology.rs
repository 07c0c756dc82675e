//! Any text: the topology loader never panics; whatever it accepts builds and enumerates
//! (or fails with an error), and every error names the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_fabric::functional::Fabric;
use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::topology::Topology;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let reg = KindRegistry::builtin();
    match Topology::parse(&text, "fuzz.toml", &reg) {
        Ok(topo) => {
            if let Ok(mut fabric) = Fabric::build(&topo, &reg) {
                let _ = enumerate(&mut fabric, &HostConfig::default());
                let _ = fabric.lspci_dump();
            }
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz.toml")),
    }
});
