//! The C ABI called from Rust: failed initialisation, descriptors that are no socket,
//! the read request size, and the symbols the libraries export.

use crate::{api_archive, lib_dir, own_addrs};
use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use std::collections::BTreeSet;
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tlp::{nettlp, nettlp_pcie_cfg, DMA_ISSUED_BY_LIBTLP};

fn errno() -> i32 {
    // SAFETY: errno is thread-local and always readable.
    unsafe { *libc::__errno_location() }
}

fn in_addr(ip: std::net::Ipv4Addr) -> libc::in_addr {
    libc::in_addr {
        s_addr: u32::from(ip).to_be(),
    }
}

fn ctx(ad: std::net::Ipv4Addr, dv: std::net::Ipv4Addr, tag: u8) -> nettlp {
    nettlp {
        remote_addr: in_addr(ad),
        local_addr: in_addr(dv),
        requester: 0x1b00,
        tag,
        dir: DMA_ISSUED_BY_LIBTLP,
        sockfd: 0,
        port: 0,
    }
}

/// `nettlp_init` fails on a port in use (EADDRINUSE); every later call on that context
/// fails at once with EBADF instead of waiting for completion timeouts.
#[test]
fn failed_init_fails_every_call_at_once() {
    let (ad, dv) = own_addrs();
    let _taken = UdpSocket::bind(SocketAddrV4::new(dv, 0x3005)).expect("bind 0x3005 first");
    let mut nt = ctx(ad, dv, 5);
    // SAFETY: a valid context.
    let r = unsafe { tlp::nettlp_init(&mut nt) };
    assert_eq!((r, errno()), (-1, libc::EADDRINUSE));
    assert_eq!(nt.sockfd, -1, "a failed init leaves no descriptor behind");
    let mut buf = [0u8; 64];
    let p = buf.as_mut_ptr().cast();
    let t0 = Instant::now();
    // SAFETY: valid context and 64-byte buffer.
    unsafe {
        assert_eq!(tlp::dma_read(&mut nt, 0x1000, p, 64), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(tlp::dma_write(&mut nt, 0x1000, p, 64), -1);
        assert_eq!(errno(), libc::EBADF);
        assert_eq!(tlp::dma_read_aligned(&mut nt, 0x1000, p, 64, 256), -1);
        assert_eq!(errno(), libc::EBADF);
        let mut one = [&mut nt as *mut nettlp];
        let mut cb: tlp::nettlp_cb = std::mem::zeroed();
        assert_eq!(
            tlp::nettlp_run_cb(one.as_mut_ptr(), 1, &mut cb, std::ptr::null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EBADF);
    }
    // The completion timeout is 500 ms: none of the calls waited for it.
    assert!(
        t0.elapsed() < Duration::from_millis(400),
        "{:?}",
        t0.elapsed()
    );

    // The configuration API likewise.
    let _cfg_taken = UdpSocket::bind(SocketAddrV4::new(dv, 0x4001)).expect("bind 0x4001 first");
    let mut c = nettlp_pcie_cfg {
        remote_addr: in_addr(ad),
        local_addr: in_addr(dv),
        sockfd: 0,
    };
    // SAFETY: a valid context and buffer.
    unsafe {
        assert_eq!(tlp::nettlp_pcie_cfg_init(&mut c), -1);
        assert_eq!(errno(), libc::EADDRINUSE);
        assert_eq!(c.sockfd, -1);
        assert_eq!(tlp::nettlp_pcie_cfg_read(&mut c, 0, p, 4), -1);
        assert_eq!(errno(), libc::EBADF);
    }
}

/// A context holding a descriptor that is no socket (never initialised, or a file) fails
/// at once with ENOTSOCK.
#[test]
fn descriptor_that_is_no_socket() {
    let (ad, dv) = own_addrs();
    let f = std::fs::File::open("/dev/null").expect("open /dev/null");
    let mut nt = ctx(ad, dv, 9);
    nt.sockfd = f.as_raw_fd();
    let mut buf = [0u8; 8];
    let t0 = Instant::now();
    // SAFETY: valid context and buffer.
    unsafe {
        assert_eq!(tlp::dma_read(&mut nt, 0, buf.as_mut_ptr().cast(), 8), -1);
    }
    assert_eq!(errno(), libc::ENOTSOCK);
    assert!(t0.elapsed() < Duration::from_millis(400));
}

/// Reads go out as upstream LibTLP sends them: one MRd per call up to 4 KiB (MRRS 4096),
/// one more only where the read crosses a 4 KiB boundary; the bytes are the adapter's.
#[test]
fn one_read_request_per_page() {
    let (ad, dv) = own_addrs();
    let a = Adapter::start(AdapterConfig::on(ad, dv)).expect("adapter starts");
    let mem: Vec<u8> = (0..0x3000u32).map(|i| (i * 7 + (i >> 8)) as u8).collect();
    a.memory().write(0x10000, &mem);
    let mut nt = ctx(ad, dv, 11);
    // SAFETY: valid context.
    assert_eq!(unsafe { tlp::nettlp_init(&mut nt) }, 0, "errno {}", errno());
    for (off, len, mrds) in [
        (0usize, 1024usize, 1u64),
        (0x10, 64, 1),
        (0x0, 4096, 1),
        (0x10, 4096, 2),
        (0xffd, 8, 2),
    ] {
        let before = a.stats().mrd;
        let mut buf = vec![0u8; len];
        // SAFETY: valid context and buffer of `len` bytes.
        let n = unsafe { tlp::dma_read(&mut nt, 0x10000 + off, buf.as_mut_ptr().cast(), len) };
        assert_eq!(n, len as isize, "errno {}", errno());
        assert_eq!(buf, mem[off..off + len], "{len} B at +{off:#x}");
        assert_eq!(a.stats().mrd - before, mrds, "{len} B at +{off:#x}");
    }
    // SAFETY: the descriptor nettlp_init opened.
    unsafe { libc::close(nt.sockfd) };
}

fn exported_in_source() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(dir.join("src/lib.rs")).expect("lib.rs");
    src.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub unsafe extern \"C\" fn ")
                .or_else(|| l.strip_prefix("pub extern \"C\" fn "))
                .map(|r| r.split('(').next().unwrap_or("").to_string())
        })
        .collect()
}

fn nm(args: &[&str], file: &Path) -> BTreeSet<String> {
    let o = Command::new("nm")
        .args(args)
        .arg(file)
        .output()
        .expect("run nm (binutils)");
    assert!(
        o.status.success(),
        "nm: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| f[2].to_string())
        })
        .collect()
}

/// The only global symbols of libtlp.so and of the API archive are the LibTLP functions
/// declared in include/ (and listed in libtlp.syms for the archive script).
#[test]
fn only_the_api_is_exported() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let api = exported_in_source();
    assert_eq!(api.len(), 21);
    let headers = std::fs::read_to_string(dir.join("include/libtlp.h")).expect("libtlp.h")
        + &std::fs::read_to_string(dir.join("include/tlp.h")).expect("tlp.h");
    for f in &api {
        assert!(
            headers.contains(&format!("{f}(")),
            "{f} not declared in include/"
        );
    }
    let listed: BTreeSet<String> = std::fs::read_to_string(dir.join("libtlp.syms"))
        .expect("libtlp.syms")
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert_eq!(listed, api, "libtlp.syms lists the exported functions");
    let so = nm(&["-D", "--defined-only"], &lib_dir().join("libtlp.so"));
    assert_eq!(so, api, "libtlp.so exports");
    let a = nm(&["-g", "--defined-only"], &api_archive());
    assert_eq!(a, api, "API archive exports");
    // The raw cargo archive is what the script fixes: it has many more.
    let raw = nm(
        &["-g", "--defined-only", "--plugin", "/dev/null"],
        &lib_dir().join("libtlp.a"),
    );
    assert!(raw.len() > api.len());
}
