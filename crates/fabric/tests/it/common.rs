//! Shared helpers.

use pcielab_fabric::functional::Fabric;
use pcielab_fabric::host::enumerate::{enumerate, EnumeratedTree, HostConfig};
use pcielab_fabric::kinds::KindRegistry;
use pcielab_fabric::topology::Topology;
use std::path::PathBuf;

/// The example topologies directory of the repository.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/topologies")
}

/// Every example topology file.
pub fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/topologies exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    assert!(v.len() >= 3, "expected the example topologies, found {v:?}");
    v
}

/// Parses, builds and enumerates topology text.
pub fn bring_up(text: &str) -> (Topology, Fabric, EnumeratedTree) {
    let reg = KindRegistry::builtin();
    let topo = Topology::parse(text, "test.toml", &reg).unwrap_or_else(|e| panic!("{e}"));
    let mut fabric = Fabric::build(&topo, &reg).unwrap_or_else(|e| panic!("{e}"));
    let tree = enumerate(&mut fabric, &HostConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    (topo, fabric, tree)
}

/// Same for an example file.
pub fn bring_up_file(name: &str) -> (Topology, Fabric, EnumeratedTree) {
    let text = std::fs::read_to_string(examples_dir().join(name)).expect("example exists");
    bring_up(&text)
}
