//! The software adapter's capacity per core, and the user-space part of its cost.
//!
//! * `adapter_capacity/*`: a raw sender on 127.0.0.2 blasts NetTLP datagrams (built by
//!   hand from the PCIe TLP layout) at an adapter with one worker thread on 127.0.0.1, in
//!   `sendmmsg` batches. The time criterion sees is **the adapter thread's own CPU time**
//!   (`getrusage(RUSAGE_THREAD)`, user + kernel), not wall-clock time, so the reported
//!   throughput is TLPs handled per second of one core fully spent on the adapter. "TLPs
//!   handled" are the adapter's own counters: TLPs received and parsed plus completions
//!   sent (requests lost in the kernel before the adapter read them cost it nothing and
//!   are not counted). A summary with the user/kernel split is printed on stderr.
//! * `adapter_user/*`: [`Adapter::handle_datagram`] on one datagram at a time, no sockets:
//!   parse, host-memory write, or completion build into a send batch.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pcielab_nettlp::adapter::{Adapter, AdapterConfig, AdapterStats, Buffers};
use pcielab_nettlp::sys::{self, RecvBatch, SendBatch};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const DEV: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ADAPTER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// Tags (and so adapter ports 0x3000 + tag) the sender spreads its requests over.
const TAGS: u8 = 4;
/// Requests per `iter_custom` iteration.
const PER_ITER: u64 = 1024;

/// A NetTLP datagram: 6-byte header (zero) + a 3DW MWr (fmt/type 0x40) or MRd (0x00) of
/// `len` bytes at the DW-aligned `addr` (below 4 GiB), requester 01:00.0.
fn datagram(write: bool, tag: u8, addr: u32, len: usize) -> Vec<u8> {
    assert!(len % 4 == 0 && (4..=4096).contains(&len) && addr % 4 == 0);
    let dw = (len / 4) as u16 & 0x3ff; // 1024 DW is encoded as 0
    let be = if len == 4 { 0x0f } else { 0xff };
    let mut d = vec![0u8; 6];
    d.extend_from_slice(&[
        if write { 0x40 } else { 0x00 },
        0,
        (dw >> 8) as u8,
        dw as u8,
    ]);
    d.extend_from_slice(&[0x01, 0x00, tag, be]);
    d.extend_from_slice(&addr.to_be_bytes());
    if write {
        d.extend((0..len).map(|i| i as u8));
    }
    d
}

#[derive(Debug, Default)]
struct Totals {
    tlps: u64,
    user_ns: u64,
    sys_ns: u64,
    /// Time spent sending (without the waits for the adapter to settle).
    wall: Duration,
    offered: u64,
    applied: u64,
    datagrams: u64,
    batches: u64,
}

impl Totals {
    fn report(&self, name: &str) {
        if self.tlps == 0 {
            return; // filtered out
        }
        let cpu = (self.user_ns + self.sys_ns).max(1) as f64;
        let t = self.tlps.max(1) as f64;
        eprintln!(
            "adapter capacity {name}: {} TLPs handled in {:.0} ms of adapter CPU \
             (user {:.0} ms, kernel {:.0} ms) = {:.2} M TLPs/s per core; \
             user {:.0} ns + kernel {:.0} ns per TLP; requests offered {}, taken {} \
             ({:.1} % lost before the adapter); sender {:.2} M requests/s; \
             {:.1} datagrams per recvmmsg",
            self.tlps,
            cpu / 1e6,
            self.user_ns as f64 / 1e6,
            self.sys_ns as f64 / 1e6,
            t / cpu * 1e3,
            self.user_ns as f64 / t,
            self.sys_ns as f64 / t,
            self.offered,
            self.applied,
            100.0 * (1.0 - self.applied as f64 / self.offered.max(1) as f64),
            self.offered as f64 / self.wall.as_secs_f64().max(1e-9) / 1e6,
            self.datagrams as f64 / self.batches.max(1) as f64,
        );
    }
}

/// Waits (bounded) until the adapter's TLP counter stops moving, then long enough for its
/// idle wake-up to bring the CPU counters up to date.
fn settle(a: &Adapter) -> AdapterStats {
    let mut last = a.stats().rx_tlps;
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(3));
        let now = a.stats().rx_tlps;
        if now == last {
            break;
        }
        last = now;
    }
    std::thread::sleep(Duration::from_millis(70));
    a.stats()
}

/// Pins the calling thread to the CPU it runs on; returns the previous CPU set.
fn pin_here() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain old data; the calls get valid pointers and sizes.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        libc::sched_getaffinity(0, size, &mut old);
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(libc::sched_getcpu().max(0) as usize, &mut one);
        assert_eq!(
            libc::sched_setaffinity(0, size, &one),
            0,
            "sched_setaffinity"
        );
        old
    }
}

fn unpin(old: &libc::cpu_set_t) {
    // SAFETY: as above.
    unsafe {
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), old);
    }
}

fn capacity(c: &mut Criterion) {
    capacity_on(c, false);
}

fn capacity_one_core(c: &mut Criterion) {
    let old = pin_here();
    capacity_on(c, true);
    unpin(&old);
}

/// Sets the calling thread's scheduling policy (`SCHED_OTHER` or `SCHED_BATCH`, both
/// allowed without privileges).
fn set_policy(policy: libc::c_int) {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: valid pointer to a live sched_param.
    unsafe {
        libc::sched_setscheduler(0, policy, &p);
    }
}

/// With `one_core`, the sender and the adapter (which inherits the sender's CPU set) share
/// one CPU, and the adapter runs as `SCHED_BATCH` (a woken batch thread does not preempt
/// the running one): the sender queues bursts of 256 requests and sleeps, so the adapter
/// drains full `recvmmsg` batches, as it would when saturated by a faster sender on
/// another core.
fn capacity_on(c: &mut Criterion, one_core: bool) {
    if one_core {
        set_policy(libc::SCHED_BATCH);
    }
    let a = Adapter::start(AdapterConfig::default()).expect("adapter on 127.0.0.1");
    if one_core {
        set_policy(libc::SCHED_OTHER);
    }
    // Device-side sockets on 127.0.0.2:0x3000+tag: requests leave from them and the
    // completions of reads come back to them.
    let socks: Vec<UdpSocket> = (0..TAGS)
        .map(|t| {
            let s = sys::udp_socket(SocketAddrV4::new(DEV, 0x3000 + t as u16), None)
                .expect("device socket on 127.0.0.2");
            s.set_nonblocking(true).expect("nonblocking");
            s
        })
        .collect();
    let mut rx = RecvBatch::new(64);
    let mut g = c.benchmark_group(if one_core {
        "adapter_capacity_1core"
    } else {
        "adapter_capacity"
    });
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    for (name, write, len) in [
        ("mwr_64B", true, 64usize),
        ("mwr_256B", true, 256),
        ("mrd_64B", false, 64),
        ("mrd_256B", false, 256),
    ] {
        // A read of `len` aligned bytes is one completion at MPS 256: 2 TLPs per request.
        let per_req = if write { 1 } else { 2 };
        let reqs: Vec<Vec<u8>> = (0..64u32)
            .map(|i| {
                datagram(
                    write,
                    (i % TAGS as u32) as u8,
                    0x10_0000 + i * len as u32,
                    len,
                )
            })
            .collect();
        let mut totals = Totals::default();
        let mut out = SendBatch::new();
        g.throughput(Throughput::Elements(PER_ITER * per_req));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| {
                let before = a.stats();
                let t0 = Instant::now();
                let total = iters * PER_ITER;
                let (mut sent, mut got) = (0u64, 0u64);
                while sent < total {
                    for (i, r) in reqs
                        .iter()
                        .enumerate()
                        .take((total - sent).min(64) as usize)
                    {
                        let s = &socks[i % TAGS as usize];
                        let port = 0x3000 + (i % TAGS as usize) as u16;
                        out.push(s.as_raw_fd(), SocketAddrV4::new(ADAPTER, port), r);
                    }
                    sent += out.len() as u64;
                    out.flush();
                    if one_core && sent % 256 == 0 {
                        std::thread::sleep(Duration::from_micros(1));
                    }
                    if !write {
                        // Drain completions; keep at most 512 reads outstanding.
                        let deadline = Instant::now() + Duration::from_millis(20);
                        loop {
                            let was = got;
                            for s in &socks {
                                got += rx.recv(s.as_raw_fd()).unwrap_or(0) as u64;
                            }
                            if sent - got.min(sent) <= 512 || Instant::now() > deadline {
                                break;
                            }
                            if got == was {
                                // Let the adapter run (it may share this CPU).
                                std::thread::sleep(Duration::from_micros(1));
                            }
                        }
                    }
                }
                let sending = t0.elapsed();
                let after = settle(&a);
                if !write {
                    for s in &socks {
                        while rx.recv(s.as_raw_fd()).unwrap_or(0) > 0 {}
                    }
                }
                let tlps = after.tlps_handled() - before.tlps_handled();
                let user = after.cpu_user_ns - before.cpu_user_ns;
                let kern = after.cpu_sys_ns - before.cpu_sys_ns;
                totals.tlps += tlps;
                totals.user_ns += user;
                totals.sys_ns += kern;
                totals.wall += sending;
                totals.datagrams += after.rx_datagrams - before.rx_datagrams;
                totals.batches += after.rx_batches - before.rx_batches;
                totals.offered += total;
                totals.applied += after.rx_tlps - before.rx_tlps;
                // Adapter CPU time, scaled to the TLPs a full iteration count stands for.
                let want = (total * per_req) as f64;
                Duration::from_nanos(user + kern).mul_f64(want / tlps.max(1) as f64)
            });
        });
        totals.report(&format!("{}{name}", if one_core { "1core/" } else { "" }));
    }
    g.finish();
    a.stop();
}

fn user_space(c: &mut Criterion) {
    let a = Adapter::start(AdapterConfig::default()).expect("adapter on 127.0.0.1");
    let src = SocketAddrV4::new(DEV, 0x3000);
    let mut g = c.benchmark_group("adapter_user");
    for (name, write, len) in [
        ("mwr_64B", true, 64usize),
        ("mwr_256B", true, 256),
        ("mrd_64B", false, 64),
        ("mrd_256B", false, 256),
    ] {
        let reqs: Vec<Vec<u8>> = (0..32u32)
            .map(|i| datagram(write, 0, 0x10_0000 + i * len as u32, len))
            .collect();
        let per_req = if write { 1 } else { 2 };
        let mut out = SendBatch::new();
        let mut bufs = Buffers::new();
        g.throughput(Throughput::Elements(32 * per_req));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                for r in &reqs {
                    a.handle_datagram(0x3000, src, r, &mut out, &mut bufs);
                }
                let n = out.len();
                out.clear();
                n
            });
        });
    }
    g.finish();
    a.stop();
}

criterion_group!(benches, user_space, capacity, capacity_one_core);
criterion_main!(benches);
