//! What users install with the binary: shell completions, the manual page and the
//! built-in example topologies.

mod common;
use common::{example, pcielab};
use std::io::Write;
use std::process::{Command, Stdio};

/// The subcommands as `pcielab --help` lists them (clap's own help, not the code under
/// test), less `help`.
fn subcommands() -> Vec<String> {
    let (rc, out, _) = pcielab(&["--help"]);
    assert_eq!(rc, 0);
    let list: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    for must in ["sim", "topo", "dump", "completions", "man"] {
        assert!(list.iter().any(|c| c == must), "{must} missing in {list:?}");
    }
    list
}

#[test]
fn completions_cover_every_subcommand_in_every_shell() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (rc, out, err) = pcielab(&["completions", shell]);
        assert_eq!(rc, 0, "{shell}: {err}");
        assert!(out.len() > 500, "{shell}: {} bytes", out.len());
        for s in &subs {
            assert!(out.contains(s.as_str()), "{shell} completions lack {s}");
        }
    }
    let (rc, _, err) = pcielab(&["completions", "tcsh"]);
    assert_eq!(rc, 2);
    assert!(err.starts_with("pcielab: "), "{err}");
}

#[test]
fn bash_accepts_the_bash_completions_and_they_complete() {
    let (_, script, _) = pcielab(&["completions", "bash"]);
    let mut sh = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .spawn()
        .expect("bash runs");
    sh.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    assert!(sh.wait().unwrap().success(), "bash -n rejects the script");
    // Sourced, the function completes `pcielab si` to `sim` and `pcielab topo l`
    // to its two subcommands starting with l.
    let dir = std::env::temp_dir().join(format!("pcielab-compl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pcielab.bash");
    std::fs::write(&file, &script).unwrap();
    let probe = format!(
        "source {}\n\
         COMP_WORDS=(pcielab si); COMP_CWORD=1; _pcielab pcielab si pcielab; echo \"${{COMPREPLY[*]}}\"\n\
         COMP_WORDS=(pcielab topo l); COMP_CWORD=2; _pcielab pcielab l topo; echo \"${{COMPREPLY[*]}}\"\n",
        file.display()
    );
    let out = Command::new("bash")
        .args(["-c", &probe])
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"sim"), "{text}");
    let mut topo_l: Vec<&str> = lines.get(1).unwrap_or(&"").split(' ').collect();
    topo_l.sort();
    assert_eq!(topo_l, ["list-examples", "lspci"], "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn man_page_is_roff_naming_every_subcommand() {
    let (rc, out, err) = pcielab(&["man"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains(".TH pcielab 1"),
        "{}",
        &out[..out.len().min(300)]
    );
    assert!(out.contains(".SH SUBCOMMANDS"));
    for s in subcommands() {
        // roff writes a hyphen-minus as `\-` (snic-device: `pcielab\-snic\-device(1)`).
        let roff = s.replace('-', "\\-");
        assert!(
            out.contains(&format!("pcielab\\-{roff}(1)")),
            "man page lacks {s}"
        );
    }
    // --dir writes that page and one per subcommand (pcielab-sim.1 …).
    // (a directory that does not exist yet is made)
    let dir = std::env::temp_dir().join(format!("pcielab-man-{}/man1", std::process::id()));
    let (rc, _, err) = pcielab(&["man", "--dir", dir.to_str().unwrap()]);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("pcielab.1")).unwrap(), out);
    for s in subcommands() {
        let page = std::fs::read_to_string(dir.join(format!("pcielab-{s}.1")))
            .unwrap_or_else(|e| panic!("pcielab-{s}.1: {e}"));
        assert!(page.contains(&format!(".TH pcielab-{s} 1")), "{s}");
    }
    let sim = std::fs::read_to_string(dir.join("pcielab-sim.1")).unwrap();
    assert!(
        sim.contains("\\-\\-example"),
        "pcielab-sim.1 lacks --example"
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    // A place that cannot be a directory is an error naming it.
    let (rc, _, err) = pcielab(&["man", "--dir", "/dev/null/man1"]);
    assert_eq!(rc, 2);
    assert!(err.starts_with("pcielab: /dev/null/man1: "), "{err}");
}

/// `pcielab topo list-examples` names every file of examples/topologies/, and only them.
#[test]
fn list_examples_lists_every_example_file() {
    let dir = std::path::Path::new(&example(""))
        .canonicalize()
        .expect("examples/topologies");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".toml").map(str::to_string)
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let (rc, out, err) = pcielab(&["topo", "list-examples"]);
    assert_eq!(rc, 0, "{err}");
    let mut listed: Vec<String> = out
        .lines()
        .map(|l| {
            let (name, about) = l.split_once("  ").unwrap_or((l, ""));
            assert!(!about.trim().is_empty(), "no description: {l:?}");
            name.to_string()
        })
        .collect();
    listed.sort();
    assert_eq!(listed, files);
    // Each embedded text is the file's text: `topo lspci --example` and `topo lspci FILE`
    // print the same bytes.
    for name in &files {
        let (rc, by_name, err) = pcielab(&["topo", "lspci", "--example", name]);
        assert_eq!(rc, 0, "{name}: {err}");
        let (_, by_file, _) = pcielab(&["topo", "lspci", &example(&format!("{name}.toml"))]);
        assert_eq!(by_name, by_file, "{name}");
    }
}

/// `sim --example NAME` runs the embedded file: the same output as
/// `sim examples/topologies/NAME.toml`, but for the topology's name in the header.
#[test]
fn sim_example_equals_sim_file() {
    for (name, args) in [
        (
            "sim-default",
            &["--workload", "mmio-lat", "--count", "2"][..],
        ),
        ("sim-default", &["--sizes", "64:128"][..]),
        ("design", &["--workload", "dma", "--count", "40"][..]),
        ("nested-switches", &["--workload", "enumerate"][..]),
    ] {
        let path = example(&format!("{name}.toml"));
        let mut a = vec!["sim", "--example", name];
        a.extend_from_slice(args);
        let (rc, by_name, err) = pcielab(&a);
        assert_eq!(rc, 0, "{name}: {err}");
        let mut b = vec!["sim", path.as_str()];
        b.extend_from_slice(args);
        let (rc, by_file, err) = pcielab(&b);
        assert_eq!(rc, 0, "{name}: {err}");
        let label = format!("example {name} (examples/topologies/{name}.toml)");
        assert!(by_name.starts_with(&format!("{label}: ")), "{by_name}");
        assert_eq!(
            by_name.replacen(&label, &path, 1),
            by_file,
            "{name} {args:?}"
        );
        // Machine-readable output carries no name at all: identical.
        let (_, j1, _) = pcielab(&[&a[..], &["--json"]].concat());
        let (_, j2, _) = pcielab(&[&b[..], &["--json"]].concat());
        assert_eq!(j1, j2, "{name} {args:?} --json");
    }
    let (rc, _, err) = pcielab(&["sim", "--example", "nope"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("no such example") && err.contains("sim-default"),
        "{err}"
    );
    let (rc, _, err) = pcielab(&["sim", &example("design.toml"), "--example", "design"]);
    assert_eq!(rc, 2, "{err}");
}
