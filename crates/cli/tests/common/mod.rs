//! Helpers shared by the CLI's end-to-end tests.
#![allow(dead_code)] // each test binary uses a subset

use std::path::PathBuf;
use std::process::Command;

/// Runs the built `pcielab` with `args`: (exit status, stdout, stderr).
pub fn pcielab(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pcielab"))
        .args(args)
        .output()
        .expect("run pcielab");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Path of `examples/topologies/<name>`.
pub fn example(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/topologies")
        .join(name)
        .display()
        .to_string()
}

/// What pciutils' real `lspci -F DUMP -vvv -s BDF` prints for the function `bdf` of
/// `topology` (TOML text), the dump made by `pcielab topo lspci`. `tag` names the
/// temporary directory. Panics, naming why, when pciutils is missing or either step
/// fails.
pub fn real_lspci(tag: &str, topology: &str, bdf: &str) -> String {
    let dir = std::env::temp_dir().join(format!("pcielab-{tag}-lspci-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let topo = dir.join("t.toml");
    std::fs::write(&topo, topology).unwrap();
    let (rc, dump, err) = pcielab(&["topo", "lspci", topo.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    let file = dir.join("t.lspci");
    std::fs::write(&file, dump).unwrap();
    let out = match Command::new("lspci")
        .arg("-F")
        .arg(&file)
        .args(["-vvv", "-s", bdf])
        .output()
    {
        Ok(x) => x,
        Err(e) => panic!("cannot run `lspci` ({e}); this test needs pciutils"),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
    text
}
