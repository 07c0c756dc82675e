//! Integration tests on loopback, on addresses of their own: the tests that share this
//! process's /24 ([`ad_ip`], [`dev_ip`]) take turns with [`lock`] because they bind the
//! fixed NetTLP ports; the others take a /24 each ([`Net::random`], [`own_addrs`]).

mod faults;
mod hardening;
mod integrity;
mod nic;
mod pipeline;
mod psmem_mmio;
mod sg;
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

/// This test process's loopback /24, outside 127.0.0.0/24 (so other NetTLP programs on
/// the machine do not clash with the tests).
pub fn net() -> [u8; 3] {
    static NET: std::sync::OnceLock<[u8; 3]> = std::sync::OnceLock::new();
    *NET.get_or_init(pcielab_nettlp::loopback::random_net)
}

/// The adapter's address in [`net`] (the tests that use it take turns: [`lock`]).
pub fn ad_ip() -> Ipv4Addr {
    pcielab_nettlp::loopback::in_net(net(), 1)
}

/// The device's address in [`net`].
pub fn dev_ip() -> Ipv4Addr {
    pcielab_nettlp::loopback::in_net(net(), 2)
}

/// A loopback address pair of the test's own: (adapter, device), random in 127.0.0.0/8
/// (never 127.0.0.x), so tests do not collide with each other or with other NetTLP
/// processes on the machine.
pub fn own_addrs() -> (Ipv4Addr, Ipv4Addr) {
    pcielab_nettlp::loopback::random_pair()
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

/// An adapter on [`ad_ip`] for a device on [`dev_ip`], changed by `f`.
pub fn adapter(f: impl FnOnce(&mut AdapterConfig)) -> Adapter {
    let mut c = AdapterConfig {
        listen: ad_ip(),
        device: dev_ip(),
        ..AdapterConfig::default()
    };
    f(&mut c);
    Adapter::start(c).expect("adapter starts")
}

/// A device on [`dev_ip`] for the adapter on [`ad_ip`], changed by `f`.
pub fn device(f: impl FnOnce(&mut DeviceConfig)) -> Device {
    let mut c = DeviceConfig {
        adapter: ad_ip(),
        local: dev_ip(),
        ..DeviceConfig::default()
    };
    f(&mut c);
    Device::open(c).expect("device opens")
}

/// Serves `handler` on [`dev_ip`] for the adapter on [`ad_ip`] with `threads` server
/// threads.
pub fn serve_dev<H: pcielab_nettlp::handler::Handler>(
    handler: std::sync::Arc<H>,
    threads: usize,
) -> pcielab_nettlp::handler::Server {
    pcielab_nettlp::handler::serve(
        pcielab_nettlp::handler::ServeConfig {
            adapter: ad_ip(),
            local: dev_ip(),
            threads,
            ..Default::default()
        },
        handler,
    )
    .expect("serve")
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
        let n = pcielab_nettlp::loopback::random_net();
        let at = |host| pcielab_nettlp::loopback::in_net(n, host);
        Net {
            adapter: at(10),
            device: at(20),
            stranger: at(30),
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
