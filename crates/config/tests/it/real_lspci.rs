//! `pcielab cfg decode` logic against the real `lspci -vvv` of this machine's devices.

use pcielab_config::caps::walk;
use pcielab_config::lspci::parse_dump;
use std::process::Command;

fn lspci(args: &[&str]) -> String {
    let out = Command::new("lspci")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `lspci` ({e}); install it (Debian/Ubuntu: apt-get install pciutils)")
        });
    assert!(
        out.status.success(),
        "lspci {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("lspci prints UTF-8")
}

/// The capability headers lspci lists for one function, as `(offset, extended)`.
fn lspci_caps(vvv: &str) -> Option<Vec<(u16, bool)>> {
    let mut caps = Vec::new();
    for line in vvv.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("Capabilities: [") else {
            continue;
        };
        if line.contains("access denied") {
            return None;
        }
        let inside = rest.split(']').next()?;
        let (off, ext) = match inside.split_once(' ') {
            Some((o, _ver)) => (o, true),
            None => (inside, false),
        };
        caps.push((u16::from_str_radix(off, 16).ok()?, ext || off.len() > 2));
    }
    Some(caps)
}

#[test]
fn our_walk_matches_lspci_on_this_machine() {
    // A machine without a PCI bus to read (some containers) has nothing to compare.
    if !std::path::Path::new("/sys/bus/pci/devices").exists()
        && !std::path::Path::new("/proc/bus/pci").exists()
    {
        eprintln!("no PCI bus visible on this machine; nothing to compare");
        return;
    }
    let dump = lspci(&["-xxxx"]);
    let entries = parse_dump(&dump).expect("our reader reads lspci -xxxx");
    let listed = lspci(&[]).lines().count();
    assert_eq!(
        entries.len(),
        listed,
        "one dump entry per device lspci lists"
    );
    let mut compared = 0;
    for e in &entries {
        let vvv = lspci(&["-vvv", "-s", &e.bdf.to_string()]);
        let Some(expected) = lspci_caps(&vvv) else {
            continue;
        };
        if e.bytes.len() < 256 {
            continue; // not root: lspci only shows 64 bytes
        }
        let (found, err) = walk(&e.bytes);
        assert_eq!(err, None, "{}", e.bdf);
        let ours: Vec<(u16, bool)> = found.iter().map(|f| (f.offset, f.extended)).collect();
        assert_eq!(ours, expected, "capabilities of {}", e.bdf);
        let text = pcielab_config::decode::describe(&e.bytes);
        for (off, ext) in &expected {
            let tag = if *ext {
                format!("[{off:03x} v")
            } else {
                format!("[{off:02x}]")
            };
            assert!(text.contains(&tag), "{}: decode lacks {tag}\n{text}", e.bdf);
        }
        compared += 1;
    }
    eprintln!("compared {compared} functions with lspci -vvv");
}
