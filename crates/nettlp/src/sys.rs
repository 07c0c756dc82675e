//! UDP sockets with batched I/O (`recvmmsg`/`sendmmsg`), `poll` and `epoll`, TAP
//! interfaces (Linux).
//!
//! The only `unsafe` code of the crate lives here; every call checks its return value
//! and the buffers it hands to the kernel outlive the call.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Size of one receive slot: any NetTLP datagram fits; larger ones are flagged truncated.
pub const SLOT: usize = 4224;

/// Binds a UDP socket to `local` (optionally connected to `peer`), with a large receive
/// buffer.
pub fn udp_socket(local: SocketAddrV4, peer: Option<SocketAddrV4>) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(local)?;
    set_buffers(&s, 4 << 20);
    if let Some(p) = peer {
        s.connect(p)?;
    }
    Ok(s)
}

/// Asks for `bytes` of socket buffers each way (the kernel may grant less).
pub fn set_buffers(s: &UdpSocket, bytes: i32) {
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: valid fd, pointer to a live i32 and its size.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const i32).cast(),
                core::mem::size_of::<i32>() as libc::socklen_t,
            );
        }
    }
}

fn to_sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut s: libc::sockaddr_in = unsafe { core::mem::zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr = libc::in_addr {
        s_addr: u32::from_ne_bytes(a.ip().octets()),
    };
    s
}

fn from_sockaddr(s: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(s.sin_port),
    )
}

/// A batch of receive slots for `recvmmsg`. The kernel structures are kept between
/// calls (no allocation per call); their pointers are refreshed on every call.
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<u8>,
    lens: Vec<usize>,
    truncated: Vec<bool>,
    addrs: Vec<SocketAddrV4>,
    names: Vec<libc::sockaddr_in>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    n: usize,
}

// SAFETY: the raw pointers inside `iov`/`msgs` only ever point into this struct's own
// buffers and are rewritten before each use, so moving the batch to another thread is
// sound.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    /// A batch of `slots` datagrams.
    pub fn new(slots: usize) -> RecvBatch {
        let slots = slots.max(1);
        RecvBatch {
            bufs: vec![0; slots * SLOT],
            lens: vec![0; slots],
            truncated: vec![false; slots],
            addrs: vec![SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0); slots],
            // SAFETY: zeroed C structs are valid values.
            names: vec![unsafe { core::mem::zeroed() }; slots],
            iov: vec![
                libc::iovec {
                    iov_base: core::ptr::null_mut(),
                    iov_len: 0
                };
                slots
            ],
            // SAFETY: as above.
            msgs: vec![unsafe { core::mem::zeroed() }; slots],
            n: 0,
        }
    }

    /// Number of datagrams received by the last call.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when the last call received nothing.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Datagram `i`: (source, bytes, truncated).
    pub fn get(&self, i: usize) -> (SocketAddrV4, &[u8], bool) {
        (
            self.addrs[i],
            &self.bufs[i * SLOT..i * SLOT + self.lens[i]],
            self.truncated[i],
        )
    }

    /// Receives what is queued on `fd` without blocking (0 when nothing is).
    /// Errors other than "would block" and ICMP-reported ones are returned.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let slots = self.lens.len();
        let base = self.bufs.as_mut_ptr();
        for i in 0..slots {
            // SAFETY: i * SLOT is within `bufs` (slots * SLOT bytes).
            self.iov[i].iov_base = unsafe { base.add(i * SLOT) }.cast();
            self.iov[i].iov_len = SLOT;
        }
        let names = self.names.as_mut_ptr();
        let iov = self.iov.as_mut_ptr();
        for (i, m) in self.msgs.iter_mut().enumerate() {
            // SAFETY: i < slots for both arrays.
            m.msg_hdr.msg_name = unsafe { names.add(i) }.cast();
            m.msg_hdr.msg_namelen = core::mem::size_of::<libc::sockaddr_in>() as u32;
            // SAFETY: as above.
            m.msg_hdr.msg_iov = unsafe { iov.add(i) };
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = core::ptr::null_mut();
            m.msg_hdr.msg_controllen = 0;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: msgs/iov/names/bufs are valid for `slots` entries and outlive the call.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                slots as u32,
                libc::MSG_DONTWAIT,
                core::ptr::null_mut(),
            )
        };
        if r < 0 {
            self.n = 0;
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = r as usize;
        for i in 0..n {
            self.lens[i] = (self.msgs[i].msg_len as usize).min(SLOT);
            self.truncated[i] = self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            self.addrs[i] = from_sockaddr(&self.names[i]);
        }
        self.n = n;
        Ok(n)
    }
}

/// Datagrams queued for `sendmmsg`, each with its socket, destination and bytes.
#[derive(Debug, Default)]
pub struct SendBatch {
    data: Vec<u8>,
    items: Vec<(RawFd, SocketAddrV4, usize, usize)>,
    // Kernel structures of the last flush, kept so a flush allocates nothing once warm.
    names: Vec<libc::sockaddr_in>,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Control buffers (one UDP_SEGMENT cmsg each) of the messages that carry several
    /// datagrams, and for each message how many datagrams it carries.
    cmsgs: Vec<[u64; 4]>,
    segs: Vec<usize>,
    /// Segmented messages sent so far (each carrying several datagrams).
    segmented: u64,
}

/// Whether UDP generic segmentation offload (`UDP_SEGMENT`, Linux 4.18+) is used:
/// consecutive datagrams of one size to one destination leave in one message, which
/// the kernel routes once and cuts into datagrams (on loopback, at the receiving
/// socket). Off after the first refusal, or with `PCIELAB_NO_GSO=1`.
static GSO: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

fn gso_enabled() -> bool {
    use std::sync::atomic::Ordering;
    match GSO.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = std::env::var_os("PCIELAB_NO_GSO").map_or(true, |v| v.is_empty() || v == "0");
            GSO.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// Most datagrams one segmented message carries (the kernel's UDP_MAX_SEGMENTS is 64
/// on older kernels).
const GSO_MAX_SEGS: usize = 64;
/// Most bytes one segmented message carries (an IPv4 datagram's limit, less headers).
const GSO_MAX_BYTES: usize = 65_000;

// SAFETY: the raw pointers inside `iov`/`msgs` only ever point into this struct's own
// buffers and are rewritten before each use, so moving the batch to another thread is
// sound.
unsafe impl Send for SendBatch {}

impl SendBatch {
    /// An empty batch.
    pub fn new() -> SendBatch {
        SendBatch::default()
    }

    /// Messages sent so far that carried several datagrams (UDP_SEGMENT).
    pub fn segmented(&self) -> u64 {
        self.segmented
    }

    /// Number of queued datagrams.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Queues a datagram built by `fill` (which gets a buffer of `max` bytes and returns
    /// the length used).
    pub fn push_with<E>(
        &mut self,
        fd: RawFd,
        dst: SocketAddrV4,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<(), E> {
        let start = self.data.len();
        self.data.resize(start + max, 0);
        match fill(&mut self.data[start..]) {
            Ok(n) => {
                self.data.truncate(start + n);
                self.items.push((fd, dst, start, n));
                Ok(())
            }
            Err(e) => {
                self.data.truncate(start);
                Err(e)
            }
        }
    }

    /// Queues a copy of `bytes`.
    pub fn push(&mut self, fd: RawFd, dst: SocketAddrV4, bytes: &[u8]) {
        let _ = self.push_with::<()>(fd, dst, bytes.len(), |b| {
            b.copy_from_slice(bytes);
            Ok(bytes.len())
        });
    }

    /// Discards everything queued without sending it.
    pub fn clear(&mut self) {
        self.items.clear();
        self.data.clear();
    }

    /// Iterates over the queued datagrams (destination, bytes).
    pub fn iter(&self) -> impl Iterator<Item = (SocketAddrV4, &[u8])> + '_ {
        self.items
            .iter()
            .map(|&(_, d, s, n)| (d, &self.data[s..s + n]))
    }

    /// The queued datagrams with the socket each leaves from: (fd, destination, bytes).
    pub fn iter_fds(&self) -> impl Iterator<Item = (RawFd, SocketAddrV4, &[u8])> + '_ {
        self.items
            .iter()
            .map(|&(fd, d, s, n)| (fd, d, &self.data[s..s + n]))
    }

    /// Sends everything (one `sendmmsg` per run of datagrams on the same socket) and
    /// empties the batch. Returns how many datagrams the kernel refused (counted, not
    /// fatal: UDP may drop).
    pub fn flush(&mut self) -> usize {
        let mut failed = 0;
        let mut i = 0;
        while i < self.items.len() {
            let fd = self.items[i].0;
            let mut j = i;
            while j < self.items.len() && self.items[j].0 == fd {
                j += 1;
            }
            failed += self.send_run(fd, i, j);
            i = j;
        }
        self.items.clear();
        self.data.clear();
        failed
    }

    fn send_run(&mut self, fd: RawFd, from: usize, to: usize) -> usize {
        if gso_enabled() {
            if let Some(failed) = self.send_run_gso(fd, from, to) {
                return failed;
            }
        }
        self.send_run_plain(fd, from, to)
    }

    /// Sends `items[from..to]` with runs of equal-sized datagrams to one destination
    /// as single segmented messages. None (nothing sent) when there is no such run, or
    /// when the kernel refuses segmentation (which then stays off).
    fn send_run_gso(&mut self, fd: RawFd, from: usize, to: usize) -> Option<usize> {
        // Messages: (first item, datagram count).
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut i = from;
        let mut any = false;
        while i < to {
            let (_, dst, _, len) = self.items[i];
            let mut j = i + 1;
            let mut bytes = len;
            // Equal sizes; the last one may be shorter (the kernel allows that).
            while j < to
                && j - i < GSO_MAX_SEGS
                && self.items[j].1 == dst
                && self.items[j].3 <= len
                && self.items[j - 1].3 == len
                && bytes + self.items[j].3 <= GSO_MAX_BYTES
                && len > 0
            {
                bytes += self.items[j].3;
                j += 1;
            }
            any |= j - i > 1;
            groups.push((i, j - i));
            i = j;
        }
        if !any {
            return None;
        }
        let n = groups.len();
        self.names.clear();
        self.iov.clear();
        self.cmsgs.clear();
        self.segs.clear();
        let base = self.data.as_mut_ptr();
        for &(first, count) in &groups {
            let it = self.items[first];
            let last = self.items[first + count - 1];
            self.names.push(to_sockaddr(it.1));
            self.iov.push(libc::iovec {
                // SAFETY: the items of a group are contiguous in `data` (push_with
                // appends), so [it.2, last.2 + last.3) is inside it.
                iov_base: unsafe { base.add(it.2) }.cast(),
                iov_len: last.2 + last.3 - it.2,
            });
            self.cmsgs.push([0u64; 4]);
            self.segs.push(count);
        }
        self.msgs.clear();
        let names = self.names.as_mut_ptr();
        let iov = self.iov.as_mut_ptr();
        let cm = self.cmsgs.as_mut_ptr();
        for (k, &(first, count)) in groups.iter().enumerate() {
            // SAFETY: zeroed mmsghdr is valid; fields set next.
            let mut m: libc::mmsghdr = unsafe { core::mem::zeroed() };
            // SAFETY: k < n = names.len() = iov.len() = cmsgs.len().
            m.msg_hdr.msg_name = unsafe { names.add(k) }.cast();
            m.msg_hdr.msg_namelen = core::mem::size_of::<libc::sockaddr_in>() as u32;
            // SAFETY: as above.
            m.msg_hdr.msg_iov = unsafe { iov.add(k) };
            m.msg_hdr.msg_iovlen = 1;
            if count > 1 {
                let seg = self.items[first].3 as u16;
                // SAFETY: CMSG_SPACE(2) = 24 bytes fit the 32-byte, 8-aligned buffer;
                // the header and data are written through the CMSG macros.
                unsafe {
                    let buf = cm.add(k).cast::<libc::c_void>();
                    m.msg_hdr.msg_control = buf;
                    m.msg_hdr.msg_controllen = libc::CMSG_SPACE(2) as _;
                    let c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    core::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
            }
            self.msgs.push(m);
        }
        let mut sent = 0usize;
        let mut failed = 0usize;
        let mut tries = 0;
        while sent < n && tries < 64 {
            tries += 1;
            // SAFETY: msgs[sent..] are valid entries pointing at live buffers.
            let r =
                unsafe { libc::sendmmsg(fd, self.msgs[sent..].as_mut_ptr(), (n - sent) as u32, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                let gso_refused = matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                );
                if gso_refused && self.segs[sent] > 1 {
                    // No segmentation here: send the rest one datagram at a time.
                    GSO.store(2, std::sync::atomic::Ordering::Relaxed);
                    let first = groups[sent].0;
                    return Some(failed + self.send_run_plain(fd, first, to));
                }
                failed += self.segs[sent];
                sent += 1;
            } else {
                let r = r as usize;
                self.segmented +=
                    self.segs[sent..sent + r].iter().filter(|&&k| k > 1).count() as u64;
                sent += r;
            }
        }
        failed += self.segs[sent.min(n)..].iter().sum::<usize>();
        Some(failed)
    }

    fn send_run_plain(&mut self, fd: RawFd, from: usize, to: usize) -> usize {
        let n = to - from;
        self.names.clear();
        self.names
            .extend(self.items[from..to].iter().map(|it| to_sockaddr(it.1)));
        self.iov.clear();
        let base = self.data.as_mut_ptr();
        self.iov
            .extend(self.items[from..to].iter().map(|it| libc::iovec {
                // SAFETY: it.2 + it.3 <= data.len() (push_with keeps that invariant).
                iov_base: unsafe { base.add(it.2) }.cast(),
                iov_len: it.3,
            }));
        self.msgs.clear();
        let names = self.names.as_mut_ptr();
        let iov = self.iov.as_mut_ptr();
        self.msgs.extend((0..n).map(|i| {
            // SAFETY: zeroed mmsghdr is valid; fields set next.
            let mut m: libc::mmsghdr = unsafe { core::mem::zeroed() };
            // SAFETY: i < n = names.len() = iov.len().
            m.msg_hdr.msg_name = unsafe { names.add(i) }.cast();
            m.msg_hdr.msg_namelen = core::mem::size_of::<libc::sockaddr_in>() as u32;
            // SAFETY: as above.
            m.msg_hdr.msg_iov = unsafe { iov.add(i) };
            m.msg_hdr.msg_iovlen = 1;
            m
        }));
        let msgs = &mut self.msgs;
        let mut sent = 0usize;
        let mut failed = 0usize;
        let mut tries = 0;
        while sent < n && tries < 64 {
            tries += 1;
            // SAFETY: msgs[sent..] are valid entries pointing at live buffers.
            let r = unsafe { libc::sendmmsg(fd, msgs[sent..].as_mut_ptr(), (n - sent) as u32, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Skip the datagram the kernel refused (e.g. ECONNREFUSED, ENOBUFS).
                sent += 1;
                failed += 1;
            } else {
                sent += r as usize;
            }
        }
        failed + (n - sent)
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; returns the indices of the
/// readable ones in `ready` (cleared first).
pub fn poll_readable(fds: &[RawFd], timeout: Duration, ready: &mut Vec<usize>) -> io::Result<()> {
    ready.clear();
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let ms = if ms == 0 && !timeout.is_zero() { 1 } else { ms };
    // SAFETY: p is a valid array of p.len() pollfds.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(())
        } else {
            Err(e)
        };
    }
    for (i, x) in p.iter().enumerate() {
        if x.revents & (libc::POLLIN | libc::POLLERR) != 0 {
            ready.push(i);
        }
    }
    Ok(())
}

/// An epoll instance over a set of sockets, each registered with a `u64` key.
#[derive(Debug)]
pub struct Epoll {
    fd: RawFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        })
    }

    /// Registers `fd` for readability with `key`.
    pub fn add(&self, fd: RawFd, key: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: valid epoll fd and event pointer.
        let r = unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout`; returns the keys of ready sockets in `out` (cleared first).
    pub fn wait(&mut self, timeout: Duration, out: &mut Vec<u64>) -> io::Result<()> {
        out.clear();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: events has room for events.len() entries.
        let r = unsafe {
            libc::epoll_wait(
                self.fd,
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                ms,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        for e in &self.events[..r as usize] {
            let key = e.u64;
            out.push(key);
        }
        Ok(())
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// CPU time the calling thread has used so far: (user, system), as `getrusage(RUSAGE_THREAD)`
/// reports it (the scheduler's exact run time, split between user and kernel mode in the
/// proportion of the timer ticks that landed in each).
pub fn thread_cpu_times() -> (Duration, Duration) {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut r: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: valid pointer to a live rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) } != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    (tv(r.ru_utime), tv(r.ru_stime))
}

/// Sends one datagram on a socket, ignoring ICMP-induced errors reported on it.
pub fn send_to(s: &UdpSocket, dst: SocketAddrV4, bytes: &[u8]) -> io::Result<()> {
    match s.send_to(bytes, dst) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
        Err(e) => Err(e),
    }
}

/// Set by the handlers [`stop_on_signals`] installs.
static STOP_SIGNAL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop_signal(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_SIGNAL.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set the returned flag instead of killing the process, so a
/// long-running command can stop cleanly (flush its capture, print its counters). The
/// handlers are one-shot (`SA_RESETHAND`): a second signal kills the process as usual,
/// so a process that does not stop can still be interrupted.
///
/// ```no_run
/// let stop = pcielab_nettlp::sys::stop_on_signals()?;
/// while !stop.load(std::sync::atomic::Ordering::Relaxed) {
///     std::thread::sleep(std::time::Duration::from_millis(50));
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn stop_on_signals() -> io::Result<&'static std::sync::atomic::AtomicBool> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: sigaction is plain old data (all-zero is valid); the handler is an
        // `extern "C" fn(c_int)` that only does an atomic store.
        let r = unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, core::ptr::null_mut())
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(&STOP_SIGNAL)
}

/// `struct ifreq` with the flags member of its union (40 bytes on Linux).
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _rest: [u8; 22],
}

fn ifreq(name: &str) -> io::Result<IfReqFlags> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) || b.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{name:?} is not an interface name (1..={} bytes, no NUL or '/')",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    let mut r = IfReqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _rest: [0; 22],
    };
    r.name[..b.len()].copy_from_slice(b);
    Ok(r)
}

/// What [`tap_open`] could not do: which step failed, with the OS error.
#[derive(Debug)]
pub struct TapError {
    /// The step: "opening /dev/net/tun" or "TUNSETIFF".
    pub step: &'static str,
    /// The OS error (`PermissionDenied` for EPERM/EACCES, `NotFound` for a missing
    /// /dev/net/tun).
    pub source: io::Error,
}

impl std::fmt::Display for TapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.source)?;
        match self.source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                write!(f, " (a TAP interface needs CAP_NET_ADMIN, e.g. root)")
            }
            Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => {
                write!(
                    f,
                    " (no TUN/TAP driver here: modprobe tun, or a container without /dev/net/tun)"
                )
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for TapError {}

/// Opens (creating it if needed) the Linux TAP interface `name`, IFF_TAP | IFF_NO_PI:
/// every read of the returned file gives one Ethernet frame the kernel sent on the
/// interface, every write one frame the interface receives. Returns the file and the
/// name the kernel gave (the same as `name`, or the kernel's pick for a pattern such as
/// `tap%d`). The interface lives as long as the file unless it was made persistent.
pub fn tap_open(name: &str) -> Result<(std::fs::File, String), TapError> {
    let mut req = ifreq(name).map_err(|source| TapError {
        step: "TUNSETIFF",
        source,
    })?;
    req.flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|source| TapError {
            step: "opening /dev/net/tun",
            source,
        })?;
    // SAFETY: a valid fd and a pointer to a live, initialised ifreq-sized struct that
    // the kernel reads and writes back (the name) during the call.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::TUNSETIFF as _,
            &mut req as *mut IfReqFlags,
        )
    };
    if r < 0 {
        return Err(TapError {
            step: "TUNSETIFF",
            source: io::Error::last_os_error(),
        });
    }
    let end = req
        .name
        .iter()
        .position(|&c| c == 0)
        .unwrap_or(req.name.len());
    let got = String::from_utf8_lossy(&req.name[..end]).into_owned();
    Ok((file, got))
}

/// Sets the network interface `name` up (IFF_UP), as `ip link set NAME up` does.
pub fn iface_up(name: &str) -> io::Result<()> {
    let mut req = ifreq(name)?;
    let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))?;
    // SAFETY: a valid socket fd and a pointer to a live ifreq-sized struct.
    let r = unsafe {
        libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCGIFFLAGS as _,
            &mut req as *mut IfReqFlags,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    req.flags |= libc::IFF_UP as libc::c_short;
    // SAFETY: as above.
    let r = unsafe {
        libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCSIFFLAGS as _,
            &mut req as *mut IfReqFlags,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_roundtrip_on_loopback() {
        let a = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), None).unwrap();
        let b = udp_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0), None).unwrap();
        let SocketAddr4(bd) = SocketAddr4(match b.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        });
        let mut tx = SendBatch::new();
        for i in 0..5u8 {
            tx.push(a.as_raw_fd(), bd, &[i; 3][..(i as usize % 3) + 1]);
        }
        assert_eq!(tx.len(), 5);
        assert_eq!(tx.flush(), 0);
        let mut rx = RecvBatch::new(8);
        let mut got = Vec::new();
        let mut ready = Vec::new();
        for _ in 0..50 {
            poll_readable(&[b.as_raw_fd()], Duration::from_millis(20), &mut ready).unwrap();
            rx.recv(b.as_raw_fd()).unwrap();
            for i in 0..rx.len() {
                got.push(rx.get(i).1.to_vec());
            }
            if got.len() == 5 {
                break;
            }
        }
        let want: Vec<Vec<u8>> = vec![vec![0], vec![1, 1], vec![2, 2, 2], vec![3], vec![4, 4]];
        assert_eq!(got, want);
    }

    struct SocketAddr4(SocketAddrV4);

    fn bound(ip: Ipv4Addr) -> (UdpSocket, SocketAddrV4) {
        let s = udp_socket(SocketAddrV4::new(ip, 0), None).unwrap();
        let a = match s.local_addr().unwrap() {
            std::net::SocketAddr::V4(v) => v,
            _ => unreachable!(),
        };
        (s, a)
    }

    fn drain(s: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
        let mut rx = RecvBatch::new(64);
        let mut got = Vec::new();
        let mut ready = Vec::new();
        for _ in 0..100 {
            if got.len() >= want {
                break;
            }
            poll_readable(&[s.as_raw_fd()], Duration::from_millis(20), &mut ready).unwrap();
            if ready.is_empty() {
                continue;
            }
            rx.recv(s.as_raw_fd()).unwrap();
            for i in 0..rx.len() {
                got.push(rx.get(i).1.to_vec());
            }
        }
        got
    }

    /// Runs of equal-sized datagrams to one destination leave as one segmented message
    /// (UDP_SEGMENT): each still arrives as its own datagram, whole and in order,
    /// including a shorter last one, one of a single byte, interleaved destinations and
    /// a run longer than a message carries.
    #[test]
    fn segmented_batches_arrive_as_the_datagrams_queued() {
        let (net_a, net_b) = crate::loopback::random_pair();
        let (a, _) = bound(net_a);
        let (b, bd) = bound(net_b);
        let (c, cd) = bound(net_b);
        let mut tx = SendBatch::new();
        let mut want_b = Vec::new();
        let mut want_c = Vec::new();
        let q = |tx: &mut SendBatch, dst: SocketAddrV4, d: Vec<u8>, w: &mut Vec<Vec<u8>>| {
            tx.push(a.as_raw_fd(), dst, &d);
            w.push(d);
        };
        // 4 × 274 bytes (a 1 KiB read's CplDs), then a shorter one.
        for k in 0..4u8 {
            q(&mut tx, bd, vec![k; 274], &mut want_b);
        }
        q(&mut tx, bd, vec![9; 100], &mut want_b);
        q(&mut tx, cd, vec![7; 274], &mut want_c);
        q(&mut tx, bd, vec![8; 1], &mut want_b);
        // 100 equal datagrams: more than one message's 64 segments.
        for k in 0..100u8 {
            q(&mut tx, cd, vec![k; 64], &mut want_c);
        }
        assert_eq!(tx.flush(), 0);
        if gso_enabled() {
            // b: [4 × 274 + 100], c: [274], b: [1], c: [64 × 64], c: [36 × 64].
            assert_eq!(tx.segmented(), 3, "segmentation was used");
        }
        assert_eq!(drain(&b, want_b.len()), want_b);
        assert_eq!(drain(&c, want_c.len()), want_c);
    }
}
