//! Integration tests on loopback: the adapter on 127.0.0.1, devices on 127.0.0.2.
//!
//! Every test takes [`lock`] because all of them bind the fixed NetTLP ports.

mod faults;
mod integrity;
mod pipeline;
mod psmem_mmio;
mod snic;
mod writes;

use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::device::{Device, DeviceConfig};
use std::net::Ipv4Addr;
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
