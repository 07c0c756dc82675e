//! Builds the C test programs in `tests/c/` with the system compiler against
//! `libtlp.a` (made API-only by `scripts/libtlp-archive.sh`) and `libtlp.so`, and runs
//! them against an in-process software adapter on loopback. Every test takes a random
//! 127.x.y.z pair of its own (so it collides with no other NetTLP process), the C
//! programs stop at their first failed check, and each run is bounded in time.

mod abi;

use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one C test program may run.
const LIMIT: Duration = Duration::from_secs(120);

/// A loopback address pair of the test's own: (adapter, device), random in
/// 127.0.0.0/8 outside 127.0.0.x.
pub fn own_addrs() -> (Ipv4Addr, Ipv4Addr) {
    pcielab_nettlp::loopback::random_pair()
}

/// Runs `cmd` to completion, killing it (and failing) after `limit`.
fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = Kill(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the C program"),
    );
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < end, "the C program ran past {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut o) = child.0.stdout.take() {
        let _ = std::io::Read::read_to_end(&mut o, &mut stdout);
    }
    if let Some(mut e) = child.0.stderr.take() {
        let _ = std::io::Read::read_to_end(&mut e, &mut stderr);
    }
    Output {
        status,
        stdout,
        stderr,
    }
}

/// `libtlp.a` reduced to the API symbols, in a temp dir (built once per test process).
pub fn api_archive() -> PathBuf {
    static A: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    A.get_or_init(|| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out_dir = std::env::temp_dir().join(format!("pcielab-capi-{}", std::process::id()));
        std::fs::create_dir_all(&out_dir).expect("temp dir");
        let out = out_dir.join("libtlp.a");
        let o = Command::new("sh")
            .arg(crate_dir.join("scripts/libtlp-archive.sh"))
            .arg(lib_dir().join("libtlp.a"))
            .arg(&out)
            .output()
            .expect("run scripts/libtlp-archive.sh");
        assert!(
            o.status.success(),
            "libtlp-archive.sh failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
    .clone()
}

/// target/<profile>, where cargo put libtlp.a and libtlp.so.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/..")
        .to_path_buf()
}

fn build(src: &str, shared: bool) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = std::env::temp_dir().join(format!("pcielab-capi-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).expect("temp dir");
    let out = out_dir.join(format!("{src}{}", if shared { "-so" } else { "" }));
    let lib = lib_dir();
    let mut c = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    c.args(["-std=gnu99", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("tests/c").join(format!("{src}.c")))
        .arg("-o")
        .arg(&out);
    if shared {
        c.arg("-L")
            .arg(&lib)
            .arg("-ltlp")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    } else {
        c.arg(api_archive());
    }
    c.args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"]);
    let o = c.output().expect("run the C compiler (cc)");
    assert!(
        o.status.success(),
        "compiling {src}.c failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Kills the child process if the test fails before it exits.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn adapter(ad: Ipv4Addr, dv: Ipv4Addr) -> Adapter {
    Adapter::start(AdapterConfig {
        listen: ad,
        device: dv,
        // The messaging API is called from an unbound socket: its source is 127.0.0.1.
        allow: vec![Ipv4Addr::LOCALHOST],
        ..AdapterConfig::default()
    })
    .expect("adapter starts")
}

fn run_dma_test(shared: bool) {
    let bin = build("dma_test", shared);
    let (ad, dv) = own_addrs();
    let a = adapter(ad, dv);
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("{:x}", a.config().bar4))
        .arg(ad.to_string())
        .arg(dv.to_string());
    let out = output_within(cmd, LIMIT);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "dma_test failed:\n{text}");
    assert!(text.contains("dma_test: OK"), "{text}");
    // The C compiler's struct layouts equal the Rust ones, which equal the sizes worked
    // out by hand from the C declarations (24/56/12/12). The last two structs exist only
    // in C, packed over the wire header: tlp_mr_hdr is DW0, Requester ID, Tag and the
    // byte enables (2 DW; the address is read apart), tlp_cpl_hdr a completion's 3 DW.
    let rust = [
        std::mem::size_of::<tlp::nettlp>(),
        std::mem::size_of::<tlp::nettlp_cb>(),
        std::mem::size_of::<tlp::nettlp_pcie_cfg>(),
        std::mem::size_of::<tlp::nettlp_msix>(),
    ];
    assert_eq!(rust, [24, 56, 12, 12]);
    let (mr_hdr, cpl_hdr) = (2 * 4, 3 * 4);
    let sizes = format!(
        "sizes {} {} {} {} {mr_hdr} {cpl_hdr}",
        rust[0], rust[1], rust[2], rust[3]
    );
    assert!(text.contains(&sizes), "{text}");
    // Checked here, independently of the program: its marker and its interrupt. The
    // marker is a posted write, so the adapter may apply it after the program exits:
    // wait for it, within a bound (a lost write still fails).
    let mut m = [0u8; 6];
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        a.memory().read(0x30000, &mut m);
        if &m == b"C-DONE" || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(&m, b"C-DONE");
    let irq = a
        .wait_interrupt(Duration::from_secs(1))
        .expect("MSI-X from dma_test");
    assert_eq!(irq.vector, Some(2));
    // And one of the 2400 writes: 300 B at 0x10000 + 7 + 300 * 512.
    let a0 = 0x10000u64 + 7 + 300 * 512;
    let mut b = vec![0u8; 300];
    a.memory().read(a0, &mut b);
    let want: Vec<u8> = (0..300u64)
        .map(|i| {
            let x = a0 + i;
            ((x.wrapping_mul(31)) ^ (x >> 8) ^ 300) as u8
        })
        .collect();
    assert_eq!(b, want);
}

#[test]
fn dma_test_static() {
    run_dma_test(false);
}

#[test]
fn dma_test_shared() {
    run_dma_test(true);
}

#[test]
fn psmem_cb_by_host_mmio() {
    let bin = build("psmem_cb", false);
    let (ad, dv) = own_addrs();
    let a = adapter(ad, dv);
    a.memory().write(0x103, b"host-mem");
    let size = 64 * 1024u64;
    let mut child = Kill(
        Command::new(&bin)
            .arg(format!("{:x}", a.config().bar4))
            .arg(size.to_string())
            .arg(ad.to_string())
            .arg(dv.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start psmem_cb"),
    );
    let child = &mut child.0;
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert_eq!(first, "psmem_cb: ready");
    let t0 = Instant::now();
    for off in 0..8u64 {
        for size in [1usize, 2, 3, 4, 5, 8, 15, 16, 64, 100, 128, 129, 256, 1000] {
            let o = off + 0x400 * size as u64 % 0x8000;
            let data: Vec<u8> = (0..size).map(|i| (i as u8) ^ 0x5a ^ off as u8).collect();
            a.mmio_write(o, &data).expect("mmio write");
            let mut back = vec![0u8; size];
            a.mmio_read(o, &mut back)
                .unwrap_or_else(|e| panic!("mmio read {size} at {o:#x}: {e}"));
            assert_eq!(back, data, "{size} B at BAR4+{o:#x}");
        }
    }
    // Out of range: the C device answers Completer Abort.
    let mut b = [0u8; 4];
    let e = a.mmio_read(size + 64, &mut b).expect_err("CA");
    assert!(e.to_string().contains("Completer Abort"), "{e}");
    a.mmio_write(size - 16, b"STOP").expect("stop write");
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("psmem_cb did not stop");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    assert!(
        status.success(),
        "psmem_cb: {status}\n{}\n{err}",
        rest.join("\n")
    );
    assert!(
        rest.iter()
            .any(|l| l.contains("cpld 1 cpl 1") && l.contains("failures 0")),
        "{rest:?}"
    );
}

/// Every exported function is declared in the committed headers (drift check).
#[test]
fn headers_declare_every_export() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(dir.join("src/lib.rs")).expect("lib.rs");
    let headers = std::fs::read_to_string(dir.join("include/libtlp.h")).expect("libtlp.h")
        + &std::fs::read_to_string(dir.join("include/tlp.h")).expect("tlp.h");
    let mut n = 0;
    for line in src.lines() {
        let l = line.trim();
        let Some(rest) = l
            .strip_prefix("pub unsafe extern \"C\" fn ")
            .or_else(|| l.strip_prefix("pub extern \"C\" fn "))
        else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or("");
        assert!(
            headers.contains(&format!("{name}(")),
            "{name} is exported but not declared in include/"
        );
        n += 1;
    }
    assert_eq!(
        n, 21,
        "number of exported functions (counted in libtlp.h and tlp.h)"
    );
}

/// `scripts/install-libtlp.sh` installs the libraries, the headers and `libtlp.pc`
/// under a prefix, and a LibTLP program builds with nothing but what
/// `pkg-config libtlp` says, linking the installed `libtlp.so`.
#[test]
fn pkg_config_file_installs_and_builds_a_program() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefix = std::env::temp_dir().join(format!("pcielab-libtlp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let o = Command::new("bash")
        .arg(crate_dir.join("../../scripts/install-libtlp.sh"))
        .arg(&prefix)
        .arg(lib_dir())
        .output()
        .expect("run bash");
    assert!(
        o.status.success(),
        "install-libtlp.sh failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let pc = |args: &[&str]| -> String {
        let o = Command::new("pkg-config")
            .args(args)
            .arg("libtlp")
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .output()
            .expect("run pkg-config (Debian package pkg-config)");
        assert!(
            o.status.success(),
            "pkg-config {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(pc(&["--modversion"]), env!("CARGO_PKG_VERSION"));
    let cflags = pc(&["--cflags"]);
    let libs = pc(&["--libs"]);
    let p = prefix.display();
    assert_eq!(cflags, format!("-I{p}/include"));
    assert_eq!(libs, format!("-L{p}/lib -ltlp"));
    assert!(pc(&["--static", "--libs"]).ends_with("-lpthread -ldl -lm -lrt -lutil"));
    for f in [
        "lib/libtlp.a",
        "lib/libtlp.so",
        "include/libtlp.h",
        "include/tlp.h",
    ] {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }
    let exe = prefix.join("dma_test");
    let mut c = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    c.args(["-std=gnu99", "-Wall", "-Werror"])
        .arg(crate_dir.join("tests/c/dma_test.c"))
        .args(cflags.split_whitespace())
        .args(libs.split_whitespace())
        .arg(format!("-Wl,-rpath,{p}/lib"))
        .arg("-o")
        .arg(&exe);
    let o = c.output().expect("run the C compiler (cc)");
    assert!(
        o.status.success(),
        "cc with pkg-config flags failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Without cargo's LD_LIBRARY_PATH (target/<profile>), which would win over the rpath.
    let ldd = Command::new("ldd")
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run ldd");
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.contains(&format!("{p}/lib/libtlp.so")),
        "not linked to the installed libtlp.so:\n{ldd}"
    );
    let _ = std::fs::remove_dir_all(&prefix);
}
