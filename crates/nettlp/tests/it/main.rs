//! Integration tests on loopback: the adapter on 127.0.0.1, devices on 127.0.0.2.
//!
//! Every test takes [`lock`] because all of them bind the fixed NetTLP ports, except
//! those of `hardening`, which take loopback addresses of their own ([`Net::random`]).

mod faults;
mod hardening;
mod integrity;
mod pipeline;
mod psmem_mmio;
mod snic;
mod writes;

use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::device::{Device, DeviceConfig};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static PORTS: Mutex<()> = Mutex::new(());

/// Serialises tests that bind the NetTLP ports.
pub fn lock() -> MutexGuard<'static, ()> {
    PORTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A loopback address pair of the test's own: (adapter, device), random in 127.0.0.0/8
/// (never 127.0.0.x), so tests do not collide with each other or with other NetTLP
/// processes on the machine.
pub fn own_addrs() -> (Ipv4Addr, Ipv4Addr) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t
        ^ (u64::from(std::process::id()) << 20)
        ^ N.fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    let b = 1 + (x % 254) as u8; // 1..=254: never 127.0.x.x
    let c = (x >> 8) as u8;
    let d = 1 + ((x >> 16) % 127) as u8 * 2; // odd: the device is d + 1
    (Ipv4Addr::new(127, b, c, d), Ipv4Addr::new(127, b, c, d + 1))
}

/// Independent oracle for memory contents: a byte function of the address.
pub fn pattern(addr: u64) -> u8 {
    (addr.wrapping_mul(0x9e37_79b1) >> 13) as u8 ^ (addr as u8)
}

/// Fills `[base, base+len)` of the adapter's memory with [`pattern`].
pub fn fill(a: &Adapter, base: u64, len: u64) {
    let v: Vec<u8> = (base..base + len).map(pattern).collect();
    a.memory().write(base, &v);
}

/// An adapter with the default loopback configuration, changed by `f`.
pub fn adapter(f: impl FnOnce(&mut AdapterConfig)) -> Adapter {
    let mut c = AdapterConfig::default();
    f(&mut c);
    Adapter::start(c).expect("adapter starts")
}

/// A device with the default loopback configuration, changed by `f`.
pub fn device(f: impl FnOnce(&mut DeviceConfig)) -> Device {
    let mut c = DeviceConfig::default();
    f(&mut c);
    Device::open(c).expect("device opens")
}

/// Waits (bounded) until `cond` holds.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    cond()
}

/// Loopback addresses of one test's own: adapter, device and a stranger (not on the
/// allow-list), in a random 127.x.y.0/24 (never 127.0.0.0/24, where the fixed-address
/// tests and other NetTLP programs live).
#[derive(Debug, Clone, Copy)]
pub struct Net {
    /// The adapter's address.
    pub adapter: Ipv4Addr,
    /// The device's address.
    pub device: Ipv4Addr,
    /// A peer on no allow-list.
    pub stranger: Ipv4Addr,
}

impl Net {
    /// Fresh addresses (random per process, different per call).
    pub fn random() -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let mut h = (std::process::id() as u64) << 32 | (t as u64 ^ (n as u64) << 20);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        let x = 1 + (h % 254) as u8;
        let y = 1 + ((h >> 8) % 254) as u8;
        Net {
            adapter: Ipv4Addr::new(127, x, y, 10),
            device: Ipv4Addr::new(127, x, y, 20),
            stranger: Ipv4Addr::new(127, x, y, 30),
        }
    }

    /// An adapter on these addresses, changed by `f`.
    pub fn adapter(&self, f: impl FnOnce(&mut AdapterConfig)) -> Adapter {
        let mut c = AdapterConfig {
            listen: self.adapter,
            device: self.device,
            ..AdapterConfig::default()
        };
        f(&mut c);
        Adapter::start(c).expect("adapter starts")
    }
}
