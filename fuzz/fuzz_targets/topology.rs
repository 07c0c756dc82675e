//! Any text: the topology loader never panics; whatever it accepts builds and enumerates
//! (or fails with an error), its `[host]` table applies (the loader checked it), the
//! host model's latency tails sample, and every error names the file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_fabric::functional::Fabric;
use pcielab_fabric::host::enumerate::{enumerate, HostConfig};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::timed::SimConfig;
use pcielab_fabric::topology::Topology;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let reg = KindRegistry::builtin();
    match Topology::parse(&text, "fuzz.toml", &reg) {
        Ok(topo) => {
            let mut cfg = SimConfig::default();
            topo.host_config(&mut cfg)
                .expect("a [host] table the loader accepted applies");
            let mut rng = pcielab_sim::Rng::new(data.len() as u64);
            for _ in 0..4 {
                let _ = cfg.mem_tail.sample(&mut rng);
                let _ = cfg.mmio_tail.sample(&mut rng);
            }
            if let Ok(mut fabric) = Fabric::build(&topo, &reg) {
                let _ = enumerate(&mut fabric, &HostConfig::default());
                let _ = fabric.lspci_dump();
            }
        }
        Err(e) => assert!(e.to_string().starts_with("fuzz.toml")),
    }
});
