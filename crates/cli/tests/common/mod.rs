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
