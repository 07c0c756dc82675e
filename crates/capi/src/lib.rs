//! A LibTLP-compatible C ABI on `pcielab-nettlp`: `libtlp.so` / `libtlp.a` with the
//! headers `include/libtlp.h` and `include/tlp.h`, so LibTLP programs compile and link
//! unchanged, and behave correctly:
//!
//! * `dma_read`/`dma_write` split requests (MRRS 4096 as upstream, so one MRd per 4 KiB
//!   page, and MPS 256 by default; environment `PCIELAB_MRRS` / `PCIELAB_MPS`) and never
//!   cross 4 KiB; reassembly checks tag,
//!   requester, completer, Byte Count and Lower Address; `_aligned` variants return the
//!   total byte count; UR gives `EOPNOTSUPP`, CA `ECONNABORTED`, a timeout `ETIME`, a bad
//!   completion `EBADMSG`;
//! * `nettlp_run_cb` takes a 4 KiB + header receive buffer, passes correct data pointers
//!   and lengths, and calls `other` for TLPs without a callback;
//! * the messaging calls return -1/0 with `errno` on failure, never uninitialised data;
//! * a context whose `nettlp_init` failed (`sockfd` -1) fails every call at once with
//!   `EBADF`, one holding a descriptor that is no IPv4 socket with `ENOTSOCK`.
//!
//! Every exported function runs inside a panic guard: a panic becomes an error return
//! with `errno = EFAULT`; panics never unwind into C.
//!
//! ```
//! // The TLP helpers compute byte enables like LibTLP (checked against its captures).
//! assert_eq!(tlp::tlp_calculate_length(0x1_0000_0003, 7), 3);
//! assert_eq!(tlp::tlp_calculate_fstdw(0x1_0000_0003, 7), 0x8);
//! assert_eq!(tlp::tlp_calculate_lstdw(0x1_0000_0003, 7), 0x3);
//! ```

#![warn(missing_docs)]
#![allow(non_camel_case_types)]

use libc::{c_int, c_void, in_addr, size_t, ssize_t};
use pcielab_nettlp::client;
use pcielab_nettlp::device::{Channel, DeviceConfig, DmaError};
use pcielab_nettlp::frame::{self, HEADER_LEN};
use pcielab_nettlp::handler::read_extent;
use pcielab_wire::dma::CplError;
use pcielab_wire::{Bdf, ByteEnables};
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// `enum dma_direction`: requests issued by LibTLP (port 0x3000 + tag).
pub const DMA_ISSUED_BY_LIBTLP: c_int = 0;
/// `enum dma_direction`: requests issued by the adapter side (port 0x4000 + (tag & 0xF)).
pub const DMA_ISSUED_BY_ADAPTER: c_int = 1;
/// Most contexts `nettlp_run_cb` takes.
pub const NETTLP_CB_MAX_NTS: c_int = 16;

/// `struct nettlp`: one NetTLP context (layout as LibTLP's).
#[repr(C)]
#[derive(Debug)]
pub struct nettlp {
    /// Adapter address (network order).
    pub remote_addr: in_addr,
    /// Local address (network order).
    pub local_addr: in_addr,
    /// Requester ID, host order `bus << 8 | devfn`.
    pub requester: u16,
    /// Tag.
    pub tag: u8,
    /// `enum dma_direction`.
    pub dir: c_int,
    /// The context's UDP socket (set by `nettlp_init`).
    pub sockfd: c_int,
    /// The context's UDP port (set by `nettlp_init`).
    pub port: u16,
}

/// Callback for an MRd: `(nt, mh, arg)`.
pub type MrdCb = unsafe extern "C" fn(*mut nettlp, *mut c_void, *mut c_void) -> c_int;
/// Callback for an MWr: `(nt, mh, data, len, arg)`.
pub type MwrCb =
    unsafe extern "C" fn(*mut nettlp, *mut c_void, *mut c_void, size_t, *mut c_void) -> c_int;
/// Callback for a Cpl / other TLP: `(nt, header, arg)`.
pub type HdrCb = unsafe extern "C" fn(*mut nettlp, *mut c_void, *mut c_void) -> c_int;

/// `struct nettlp_cb` (layout as LibTLP's).
#[repr(C)]
#[derive(Debug)]
pub struct nettlp_cb {
    /// Unused (kept for layout).
    pub start: usize,
    /// Unused (kept for layout).
    pub end: usize,
    /// MRd.
    pub mrd: Option<MrdCb>,
    /// MWr.
    pub mwr: Option<MwrCb>,
    /// Cpl without data.
    pub cpl: Option<HdrCb>,
    /// CplD.
    pub cpld: Option<MwrCb>,
    /// Anything else, or a TLP whose callback is NULL.
    pub other: Option<HdrCb>,
}

/// `struct nettlp_msix` (packed, 12 bytes).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy)]
pub struct nettlp_msix {
    /// Message address.
    pub addr: u64,
    /// Message data.
    pub data: u32,
}

/// `struct nettlp_pcie_cfg`.
#[repr(C)]
#[derive(Debug)]
pub struct nettlp_pcie_cfg {
    /// Adapter address.
    pub remote_addr: in_addr,
    /// Local address.
    pub local_addr: in_addr,
    /// Socket (set by `nettlp_pcie_cfg_init`).
    pub sockfd: c_int,
}

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local and always valid to write.
    unsafe {
        *libc::__errno_location() = e;
    }
}

/// Runs `f`, turning a panic into `fail` with `errno = EFAULT`.
fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(libc::EFAULT);
            fail
        }
    }
}

fn ip(a: in_addr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from_be(a.s_addr))
}

fn io_errno(e: &std::io::Error) -> c_int {
    e.raw_os_error().unwrap_or(match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => libc::ETIME,
        std::io::ErrorKind::InvalidInput => libc::EINVAL,
        _ => libc::EIO,
    })
}

fn dma_errno(e: &DmaError) -> c_int {
    match e {
        DmaError::Io { source, .. } => io_errno(source),
        DmaError::Invalid(_) => libc::EINVAL,
        DmaError::Timeout { .. } | DmaError::WriteNotAcked { .. } => libc::ETIME,
        DmaError::WriteRefused { .. } => libc::EFAULT,
        DmaError::UnsupportedRequest { .. } => libc::EOPNOTSUPP,
        DmaError::CompleterAbort { .. } => libc::ECONNABORTED,
        DmaError::Completion {
            error: CplError::ConfigRetry { .. },
            ..
        } => libc::EINVAL,
        DmaError::Completion { .. } => libc::EBADMSG,
    }
}

fn env_size(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Key = (c_int, u8, u16, u32);
type Registry = Mutex<HashMap<c_int, (Key, Arc<Mutex<Channel>>)>>;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Default Max_Read_Request_Size: 4096, as upstream LibTLP, which sends one MRd per
/// call (here: one per 4 KiB page, the most one request may span).
pub const DEFAULT_MRRS: u32 = 4096;
/// Default Max_Payload_Size of writes.
pub const DEFAULT_MPS: u32 = 256;

/// Checks that `fd` is an IPv4 socket (a context that was never initialised holds some
/// other descriptor, often 0: stdin). `ENOTSOCK` or `EBADF` otherwise, at once.
fn check_socket(fd: c_int) -> Result<(), c_int> {
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: sockaddr_storage is plain old data; getsockname gets a valid pointer and
    // its size.
    let family = unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) != 0
        {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOTSOCK));
        }
        ss.ss_family
    };
    if family as c_int != libc::AF_INET {
        return Err(libc::ENOTSOCK);
    }
    Ok(())
}

/// The channel for a context (created on first use over a duplicate of its socket).
/// A context whose `nettlp_init` failed has `sockfd == -1`: `EBADF` at once.
fn channel(nt: &nettlp) -> Result<Arc<Mutex<Channel>>, c_int> {
    if nt.sockfd < 0 {
        return Err(libc::EBADF);
    }
    let key = (nt.sockfd, nt.tag, nt.requester, nt.remote_addr.s_addr);
    let mut r = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((k, ch)) = r.get(&nt.sockfd) {
        if *k == key {
            return Ok(ch.clone());
        }
    }
    check_socket(nt.sockfd)?;
    // SAFETY: dup of a descriptor the caller owns; we own the duplicate.
    let fd = unsafe { libc::dup(nt.sockfd) };
    if fd < 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: fd is a fresh descriptor we own.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    let tx = sock.try_clone().map_err(|e| io_errno(&e))?;
    let cfg = DeviceConfig {
        adapter: ip(nt.remote_addr),
        local: ip(nt.local_addr),
        requester: Bdf::from_raw(nt.requester),
        tags: nt.tag as u16..nt.tag as u16 + 1,
        tags_per_channel: 1,
        max_in_flight: 1,
        mrrs: env_size("PCIELAB_MRRS", DEFAULT_MRRS),
        mps: env_size("PCIELAB_MPS", DEFAULT_MPS),
        timeout: Duration::from_millis(500),
        ..DeviceConfig::default()
    };
    let ch = Channel::from_sockets(&cfg, vec![(nt.tag, sock)], tx).map_err(|e| dma_errno(&e))?;
    let ch = Arc::new(Mutex::new(ch));
    r.insert(nt.sockfd, (key, ch.clone()));
    Ok(ch)
}

/// `nettlp_init`: binds `local:port` and connects to `remote:port`, where port is
/// `0x3000 + tag` (`DMA_ISSUED_BY_LIBTLP`) or `0x4000 + (tag & 0xF)`. Returns 0, or -1
/// with errno; on failure `sockfd` is -1, so every later call on the context fails at
/// once with `EBADF`.
///
/// # Safety
/// `nt` must point to a valid `struct nettlp`.
#[no_mangle]
pub unsafe extern "C" fn nettlp_init(nt: *mut nettlp) -> c_int {
    guard(-1, || {
        // SAFETY: the caller passes a valid pointer or NULL.
        let Some(nt) = (unsafe { nt.as_mut() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        nt.sockfd = -1;
        let port = match nt.dir {
            DMA_ISSUED_BY_LIBTLP => frame::device_port(nt.tag),
            DMA_ISSUED_BY_ADAPTER => frame::host_port(nt.tag as u16),
            _ => {
                set_errno(libc::EINVAL);
                return -1;
            }
        };
        let s = match UdpSocket::bind(SocketAddrV4::new(ip(nt.local_addr), port)).and_then(|s| {
            s.connect(SocketAddrV4::new(ip(nt.remote_addr), port))
                .map(|_| s)
        }) {
            Ok(s) => s,
            Err(e) => {
                set_errno(io_errno(&e));
                return -1;
            }
        };
        nt.port = port;
        nt.sockfd = s.into_raw_fd();
        0
    })
}

unsafe fn dma(
    nt: *mut nettlp,
    addr: usize,
    buf: *mut c_void,
    count: size_t,
    write: bool,
    size: Option<size_t>,
) -> ssize_t {
    guard(-1, || {
        // SAFETY: the caller passes a valid pointer or NULL.
        let Some(nt) = (unsafe { nt.as_ref() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if count == 0 {
            return 0;
        }
        if buf.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let ch = match channel(nt) {
            Ok(c) => c,
            Err(e) => {
                set_errno(e);
                return -1;
            }
        };
        let mut ch = ch.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = size {
            let Ok(s) = u32::try_from(s) else {
                set_errno(libc::EINVAL);
                return -1;
            };
            if !(s.is_power_of_two() && (128..=4096).contains(&s)) {
                set_errno(libc::EINVAL);
                return -1;
            }
            if write {
                ch.set_mps(s);
            } else {
                ch.set_mrrs(s);
            }
        }
        let r = if write {
            // SAFETY: the caller guarantees `count` readable bytes at `buf`.
            let data = unsafe { std::slice::from_raw_parts(buf as *const u8, count) };
            ch.dma_write(addr as u64, data)
        } else {
            // SAFETY: the caller guarantees `count` writable bytes at `buf`.
            let data = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, count) };
            ch.dma_read(addr as u64, data)
        };
        if size.is_some() {
            ch.set_mps(env_size("PCIELAB_MPS", DEFAULT_MPS));
            ch.set_mrrs(env_size("PCIELAB_MRRS", DEFAULT_MRRS));
        }
        match r {
            Ok(n) => n as ssize_t,
            Err(e) => {
                set_errno(dma_errno(&e));
                -1
            }
        }
    })
}

/// `dma_read`: reads `count` bytes of host memory at `addr` into `buf`; any size and
/// alignment. Returns `count`, or -1 with errno.
///
/// # Safety
/// `nt` must be an initialised context and `buf` must hold `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn dma_read(
    nt: *mut nettlp,
    addr: usize,
    buf: *mut c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { dma(nt, addr, buf, count, false, None) }
}

/// `dma_write`: writes `count` bytes from `buf` to host memory at `addr` (posted).
/// Returns `count`, or -1 with errno.
///
/// # Safety
/// `nt` must be an initialised context and `buf` must hold `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn dma_write(
    nt: *mut nettlp,
    addr: usize,
    buf: *mut c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { dma(nt, addr, buf, count, true, None) }
}

/// `dma_read_aligned`: as `dma_read` with Max_Read_Request_Size `mrrs` (128..=4096, a
/// power of two). Returns the total bytes read (LibTLP returned the last chunk's).
///
/// # Safety
/// As `dma_read`.
#[no_mangle]
pub unsafe extern "C" fn dma_read_aligned(
    nt: *mut nettlp,
    addr: usize,
    buf: *mut c_void,
    count: size_t,
    mrrs: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { dma(nt, addr, buf, count, false, Some(mrrs)) }
}

/// `dma_write_aligned`: as `dma_write` with Max_Payload_Size `mps`; never crosses 4 KiB.
/// Returns the total bytes written.
///
/// # Safety
/// As `dma_write`.
#[no_mangle]
pub unsafe extern "C" fn dma_write_aligned(
    nt: *mut nettlp,
    addr: usize,
    buf: *mut c_void,
    count: size_t,
    mps: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { dma(nt, addr, buf, count, true, Some(mps)) }
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Header length of the TLP starting at `t` (12 or 16), from its Fmt.
fn hdr_len(t0: u8) -> usize {
    if t0 & 0x20 != 0 {
        16
    } else {
        12
    }
}

/// `nettlp_run_cb`: receives TLPs on up to 16 contexts and calls `cb` for each, until
/// `nettlp_stop_cb`. Returns 0 when stopped, -1 with errno on bad arguments.
///
/// # Safety
/// `nt` must point to `nnts` initialised contexts, `cb` to a valid `struct nettlp_cb`.
#[no_mangle]
pub unsafe extern "C" fn nettlp_run_cb(
    nt: *mut *mut nettlp,
    nnts: c_int,
    cb: *mut nettlp_cb,
    arg: *mut c_void,
) -> c_int {
    guard(-1, || {
        if nt.is_null() || cb.is_null() || !(1..=NETTLP_CB_MAX_NTS).contains(&nnts) {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller passes `nnts` valid context pointers and a valid `cb`.
        let nts: Vec<*mut nettlp> =
            unsafe { std::slice::from_raw_parts(nt, nnts as usize) }.to_vec();
        // SAFETY: as above.
        let cb = unsafe { &*cb };
        let mut pfd: Vec<libc::pollfd> = Vec::with_capacity(nts.len());
        for &p in &nts {
            // SAFETY: as above.
            let Some(n) = (unsafe { p.as_ref() }) else {
                set_errno(libc::EINVAL);
                return -1;
            };
            if let Err(e) = check_socket(n.sockfd) {
                set_errno(e);
                return -1;
            }
            pfd.push(libc::pollfd {
                fd: n.sockfd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        STOP.store(false, Ordering::SeqCst);
        let mut buf = vec![0u8; frame::MAX_DATAGRAM + 64];
        while !STOP.load(Ordering::SeqCst) {
            // SAFETY: pfd is a valid array.
            let r = unsafe { libc::poll(pfd.as_mut_ptr(), pfd.len() as libc::nfds_t, 50) };
            if r <= 0 {
                continue;
            }
            for i in 0..pfd.len() {
                if pfd[i].revents & libc::POLLIN == 0 {
                    continue;
                }
                // SAFETY: buf is writable for its length.
                let n = unsafe {
                    libc::recv(
                        pfd[i].fd,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n < (HEADER_LEN + 12) as isize {
                    continue;
                }
                let n = n as usize;
                // SAFETY: dispatch reads only within buf[..n].
                unsafe { dispatch(nts[i], cb, &mut buf[..n], arg) };
            }
        }
        0
    })
}

unsafe fn dispatch(nt: *mut nettlp, cb: &nettlp_cb, dgram: &mut [u8], arg: *mut c_void) {
    let n = dgram.len();
    let t = &mut dgram[HEADER_LEN..];
    let hl = hdr_len(t[0]);
    if t.len() < hl {
        return;
    }
    let ty = t[0] & 0x1f;
    let data = t[0] & 0x40 != 0;
    let p = t.as_mut_ptr();
    let avail = n - HEADER_LEN - hl;
    // SAFETY (all calls below): C callbacks get pointers into `dgram`, valid for the call.
    unsafe {
        match (ty, data) {
            (0x00, false) if cb.mrd.is_some() => {
                if let Some(f) = cb.mrd {
                    f(nt, p.cast(), arg);
                }
            }
            (0x00, true) if cb.mwr.is_some() => {
                let (lo, len) = mr_extent(t);
                let lo = (lo as usize).min(avail);
                let len = (len as usize).min(avail - lo);
                if let Some(f) = cb.mwr {
                    f(nt, p.cast(), p.add(hl + lo).cast(), len, arg);
                }
            }
            (0x0a, false) if cb.cpl.is_some() => {
                if let Some(f) = cb.cpl {
                    f(nt, p.cast(), arg);
                }
            }
            (0x0a, true) if cb.cpld.is_some() => {
                let lo = ((t[11] & 3) as usize).min(avail);
                let len = (cpld_len(t) as usize).min(avail - lo);
                if let Some(f) = cb.cpld {
                    f(nt, p.cast(), p.add(12 + lo).cast(), len, arg);
                }
            }
            _ => {
                if let Some(f) = cb.other {
                    f(nt, p.cast(), arg);
                }
            }
        }
    }
}

/// `nettlp_stop_cb`: makes every running `nettlp_run_cb` return (within ~50 ms).
#[no_mangle]
pub extern "C" fn nettlp_stop_cb() {
    STOP.store(true, Ordering::SeqCst);
}

/// `nettlp_msg_get_bar4_start`: BAR4 address from the messaging API, 0 on failure.
#[no_mangle]
pub extern "C" fn nettlp_msg_get_bar4_start(addr: in_addr) -> usize {
    guard(0, || {
        match client::get_bar4(ip(addr), Ipv4Addr::UNSPECIFIED) {
            Ok(v) => v as usize,
            Err(e) => {
                set_errno(io_errno(&e));
                0
            }
        }
    })
}

/// `nettlp_msg_get_dev_id`: the adapter's `bus << 8 | devfn`, 0 on failure.
#[no_mangle]
pub extern "C" fn nettlp_msg_get_dev_id(addr: in_addr) -> u16 {
    guard(0, || {
        match client::get_dev_id(ip(addr), Ipv4Addr::UNSPECIFIED) {
            Ok(v) => v,
            Err(e) => {
                set_errno(io_errno(&e));
                0
            }
        }
    })
}

/// `nettlp_msg_get_msix_table`: copies up to `msix_count` (≤ 16) entries. Returns 0, or
/// -1 with errno.
///
/// # Safety
/// `msix` must hold `msix_count` entries.
#[no_mangle]
pub unsafe extern "C" fn nettlp_msg_get_msix_table(
    addr: in_addr,
    msix: *mut nettlp_msix,
    msix_count: c_int,
) -> c_int {
    guard(-1, || {
        if msix.is_null() || msix_count < 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        match client::get_msix_table(ip(addr), Ipv4Addr::UNSPECIFIED) {
            Ok(t) => {
                for (i, e) in t.iter().take(msix_count as usize).enumerate() {
                    // SAFETY: i < msix_count entries the caller provided.
                    unsafe {
                        msix.add(i).write_unaligned(nettlp_msix {
                            addr: e.addr,
                            data: e.data,
                        })
                    };
                }
                0
            }
            Err(e) => {
                set_errno(io_errno(&e));
                -1
            }
        }
    })
}

/// `nettlp_pcie_cfg_init`: binds and connects the configuration API socket (port
/// 0x4001, or `PCIELAB_CFG_PORT`). Returns 0, or -1 with errno.
///
/// # Safety
/// `ntpc` must point to a valid `struct nettlp_pcie_cfg`.
#[no_mangle]
pub unsafe extern "C" fn nettlp_pcie_cfg_init(ntpc: *mut nettlp_pcie_cfg) -> c_int {
    guard(-1, || {
        // SAFETY: valid pointer or NULL.
        let Some(c) = (unsafe { ntpc.as_mut() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        c.sockfd = -1;
        let port = std::env::var("PCIELAB_CFG_PORT")
            .ok()
            .and_then(|v| pcielab_nettlp::memory::parse_num(&v))
            .map(|v| v as u16)
            .unwrap_or(frame::CFG_PORT_LIBTLP);
        match UdpSocket::bind(SocketAddrV4::new(ip(c.local_addr), port)).and_then(|s| {
            s.connect(SocketAddrV4::new(ip(c.remote_addr), port))
                .map(|_| s)
        }) {
            Ok(s) => {
                c.sockfd = s.into_raw_fd();
                0
            }
            Err(e) => {
                set_errno(io_errno(&e));
                -1
            }
        }
    })
}

unsafe fn cfg_io(
    ntpc: *mut nettlp_pcie_cfg,
    addr: u16,
    buf: *mut c_void,
    count: size_t,
    write: bool,
) -> ssize_t {
    guard(-1, || {
        // SAFETY: valid pointer or NULL.
        let Some(c) = (unsafe { ntpc.as_ref() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if count == 0 {
            return 0;
        }
        if buf.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        if let Err(e) = check_socket(c.sockfd) {
            set_errno(e);
            return -1;
        }
        // SAFETY: borrow the caller's descriptor without taking ownership.
        let s = ManuallyDrop::new(unsafe { UdpSocket::from_raw_fd(c.sockfd) });
        let r = if write {
            // SAFETY: `count` readable bytes at `buf`.
            client::cfg_write_on(&s, addr, unsafe {
                std::slice::from_raw_parts(buf as *const u8, count)
            })
        } else {
            // SAFETY: `count` writable bytes at `buf`.
            client::cfg_read_on(&s, addr, unsafe {
                std::slice::from_raw_parts_mut(buf as *mut u8, count)
            })
        };
        match r {
            Ok(n) => n as ssize_t,
            Err(e) => {
                set_errno(io_errno(&e));
                -1
            }
        }
    })
}

/// `nettlp_pcie_cfg_read`: reads `count` bytes of configuration space at `addr`.
///
/// # Safety
/// `ntpc` initialised; `buf` holds `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn nettlp_pcie_cfg_read(
    ntpc: *mut nettlp_pcie_cfg,
    addr: u16,
    buf: *mut c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { cfg_io(ntpc, addr, buf, count, false) }
}

/// `nettlp_pcie_cfg_write`: writes `count` bytes of configuration space at `addr`.
///
/// # Safety
/// `ntpc` initialised; `buf` holds `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn nettlp_pcie_cfg_write(
    ntpc: *mut nettlp_pcie_cfg,
    addr: u16,
    buf: *mut c_void,
    count: size_t,
) -> ssize_t {
    // SAFETY: forwarded contract.
    unsafe { cfg_io(ntpc, addr, buf, count, true) }
}

/// Length in DW of a request for `count` bytes at `addr`.
#[no_mangle]
pub extern "C" fn tlp_calculate_length(addr: usize, count: size_t) -> c_int {
    if count == 0 {
        return 1;
    }
    ((addr & 3) + count).div_ceil(4).min(c_int::MAX as usize) as c_int
}

/// First DW Byte Enables of a request for `count` bytes at `addr`.
#[no_mangle]
pub extern "C" fn tlp_calculate_fstdw(addr: usize, count: size_t) -> c_int {
    if count == 0 {
        return 0;
    }
    let lo = addr & 3;
    let mut be = (0xf << lo) & 0xf;
    if lo + count < 4 {
        be &= (1 << (lo + count)) - 1;
    }
    be as c_int
}

/// Last DW Byte Enables (0 for a single-DW request).
#[no_mangle]
pub extern "C" fn tlp_calculate_lstdw(addr: usize, count: size_t) -> c_int {
    if tlp_calculate_length(addr, count) <= 1 {
        return 0;
    }
    let end = (addr + count) & 3;
    if end == 0 {
        0xf
    } else {
        ((1 << end) - 1) as c_int
    }
}

/// (first enabled byte offset, byte count) of a memory request header.
fn mr_extent(t: &[u8]) -> (u32, u32) {
    let raw = (((t[2] & 3) as u32) << 8) | t[3] as u32;
    let len = if raw == 0 { 1024 } else { raw };
    read_extent(
        ByteEnables::from_bits_truncate(t[7] & 0xf),
        ByteEnables::from_bits_truncate(t[7] >> 4),
        len,
    )
}

fn cpld_len(t: &[u8]) -> u32 {
    let raw = (((t[2] & 3) as u32) << 8) | t[3] as u32;
    let len = if raw == 0 { 1024 } else { raw };
    let bc = (((t[6] & 0xf) as u32) << 8) | t[7] as u32;
    let bc = if bc == 0 { 4096 } else { bc };
    bc.min((len * 4).saturating_sub((t[11] & 3) as u32))
}

/// The address of the first enabled byte of a memory request.
///
/// # Safety
/// `mh` must point to a complete memory request header (12 or 16 bytes).
#[no_mangle]
pub unsafe extern "C" fn tlp_mr_addr(mh: *mut c_void) -> usize {
    guard(0, || {
        if mh.is_null() {
            return 0;
        }
        // SAFETY: the caller guarantees a full header.
        let t = unsafe { std::slice::from_raw_parts(mh as *const u8, hdr_len(*(mh as *const u8))) };
        let dw = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]) as u64;
        let a = if t.len() == 16 {
            (dw(8) << 32) | (dw(12) & !3)
        } else {
            dw(8) & !3
        };
        (a + mr_extent(t).0 as u64) as usize
    })
}

/// Bytes a memory request reads or writes (from Length and the byte enables).
///
/// # Safety
/// `mh` must point to a complete memory request header.
#[no_mangle]
pub unsafe extern "C" fn tlp_mr_data_length(mh: *mut c_void) -> c_int {
    guard(0, || {
        if mh.is_null() {
            return 0;
        }
        // SAFETY: the caller guarantees a full header.
        let t = unsafe { std::slice::from_raw_parts(mh as *const u8, 12) };
        mr_extent(t).1 as c_int
    })
}

/// Pointer to the first enabled byte of an MWr's payload.
///
/// # Safety
/// `mh` must point to a complete MWr.
#[no_mangle]
pub unsafe extern "C" fn tlp_mwr_data(mh: *mut c_void) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        if mh.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller guarantees a full header.
        let t = unsafe { std::slice::from_raw_parts(mh as *const u8, 12) };
        let off = hdr_len(t[0]) + mr_extent(t).0 as usize;
        // SAFETY: within the caller's TLP.
        unsafe { (mh as *mut u8).add(off).cast() }
    })
}

/// Bytes of data this CplD carries (Lower Address alignment and Byte Count considered).
///
/// # Safety
/// `ch` must point to a complete completion header.
#[no_mangle]
pub unsafe extern "C" fn tlp_cpld_data_length(ch: *mut c_void) -> c_int {
    guard(0, || {
        if ch.is_null() {
            return 0;
        }
        // SAFETY: the caller guarantees a full header.
        let t = unsafe { std::slice::from_raw_parts(ch as *const u8, 12) };
        cpld_len(t) as c_int
    })
}

/// Pointer to the first data byte of a CplD.
///
/// # Safety
/// `ch` must point to a complete CplD.
#[no_mangle]
pub unsafe extern "C" fn tlp_cpld_data(ch: *mut c_void) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        if ch.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller guarantees a full header.
        let la = unsafe { *(ch as *const u8).add(11) } & 3;
        // SAFETY: within the caller's TLP.
        unsafe { (ch as *mut u8).add(12 + la as usize).cast() }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_enables_by_hand() {
        // From the captures: 0x2011, 6 B → len 2, first 0xE, last 0x7.
        assert_eq!(tlp_calculate_length(0x2011, 6), 2);
        assert_eq!(tlp_calculate_fstdw(0x2011, 6), 0xe);
        assert_eq!(tlp_calculate_lstdw(0x2011, 6), 0x7);
        // 2 bytes at 0x3001: one DW, first 0x6, last 0.
        assert_eq!(tlp_calculate_length(0x3001, 2), 1);
        assert_eq!(tlp_calculate_fstdw(0x3001, 2), 0x6);
        assert_eq!(tlp_calculate_lstdw(0x3001, 2), 0);
        assert_eq!(tlp_calculate_lstdw(0x3000, 8), 0xf);
    }

    #[test]
    fn header_helpers() {
        // MWr 3DW, len 2, first 0xE last 0x7 at 0x2010.
        let mut t = [
            0x40u8, 0, 0, 2, 0x1b, 0, 0, 0x7e, 0, 0, 0x20, 0x10, 9, 1, 2, 3, 4, 5, 6, 7,
        ];
        let p = t.as_mut_ptr().cast();
        // SAFETY: a complete TLP.
        unsafe {
            assert_eq!(tlp_mr_addr(p), 0x2011);
            assert_eq!(tlp_mr_data_length(p), 6);
            assert_eq!(*(tlp_mwr_data(p) as *const u8), 1);
        }
        // CplD len 2, BC 5, lower address 0x13: data starts 3 bytes in, 5 bytes.
        let mut c = [
            0x4au8, 0, 0, 2, 0, 0, 0, 5, 0x1b, 0, 0, 0x13, 0, 0, 0, 0xaa, 1, 2, 3, 4,
        ];
        let p = c.as_mut_ptr().cast();
        // SAFETY: a complete TLP.
        unsafe {
            assert_eq!(tlp_cpld_data_length(p), 5);
            assert_eq!(*(tlp_cpld_data(p) as *const u8), 0xaa);
        }
        // NULL is handled.
        // SAFETY: NULL is accepted.
        unsafe {
            assert_eq!(tlp_mr_addr(std::ptr::null_mut()), 0);
        }
    }
}
