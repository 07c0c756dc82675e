//! `pcielab cfg decode` logic against the real `lspci -vvv` of this machine's devices.
//!
//! The test compares at least one function or fails. A machine that cannot show its
//! configuration spaces (no PCI bus, as in some containers, or not root, when lspci
//! shows only the first 64 bytes) fails with that reason unless `PCIELAB_NO_HOST_PCI=1`
//! declares it; the test then checks the declaration (it fails if the machine could
//! have compared a function after all), so it never passes having compared nothing
//! unnoticed.

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

/// The capability headers lspci lists for one function, as `(offset, extended)`, or
/// `None` when lspci could not read them ("access denied": not root).
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
        let inside = rest
            .split(']')
            .next()
            .unwrap_or_else(|| panic!("unreadable lspci capability line: {line}"));
        let (off, ext) = match inside.split_once(' ') {
            Some((o, _ver)) => (o, true),
            None => (inside, false),
        };
        let off = u16::from_str_radix(off, 16)
            .unwrap_or_else(|e| panic!("unreadable capability offset in `{line}`: {e}"));
        caps.push((off, ext || off > 0xff));
    }
    Some(caps)
}

/// Set to 1 on a machine that cannot show its configuration spaces to this test.
const OPT_OUT: &str = "PCIELAB_NO_HOST_PCI";

#[test]
fn our_walk_matches_lspci_on_this_machine() {
    let declared = std::env::var(OPT_OUT).is_ok_and(|v| v == "1");
    let has_bus = ["/sys/bus/pci/devices", "/proc/bus/pci"]
        .iter()
        .any(|p| std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some()));
    if !has_bus {
        assert!(
            declared,
            "this machine shows no PCI bus (/sys/bus/pci/devices and /proc/bus/pci are empty \
             or missing), so there is nothing to compare with lspci; on such a machine \
             (a container) set {OPT_OUT}=1 to declare it"
        );
        eprintln!("{OPT_OUT}=1 and no PCI bus: compared no function (declared)");
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
    // Functions lspci could not show in full, with the reason.
    let mut not_shown = Vec::new();
    for e in &entries {
        let vvv = lspci(&["-vvv", "-s", &e.bdf.to_string()]);
        let Some(expected) = lspci_caps(&vvv) else {
            not_shown.push(format!("{}: capabilities: access denied", e.bdf));
            continue;
        };
        if e.bytes.len() < 256 {
            // Not root: lspci shows only the first 64 bytes.
            not_shown.push(format!(
                "{}: lspci -xxxx shows {} bytes",
                e.bdf,
                e.bytes.len()
            ));
            continue;
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
    eprintln!(
        "compared {compared} of {} functions with lspci -vvv; not shown in full: {not_shown:?}",
        entries.len()
    );
    if declared {
        assert_eq!(
            compared, 0,
            "{OPT_OUT}=1 declares that this machine cannot show its configuration spaces, \
             but {compared} functions were compared: unset it"
        );
        return;
    }
    assert!(
        compared > 0,
        "compared no function: lspci showed none of the {} functions in full ({not_shown:?}); \
         run as root, or set {OPT_OUT}=1 on a machine that cannot show them",
        entries.len()
    );
}
