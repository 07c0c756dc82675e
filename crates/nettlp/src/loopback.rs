//! Loopback addresses of a program's own, for tests, benchmarks and examples that run an
//! adapter and a device on one machine.
//!
//! NetTLP's ports are fixed, so two programs on 127.0.0.1 collide ("Address already in
//! use"). Linux answers the whole of 127.0.0.0/8, so each run can take a /24 of its own:
//! [`random_net`] gives one outside 127.0.0.0/24 (where other tools usually sit),
//! different for each call in a process and, with high probability, between processes.
//!
//! ```
//! use pcielab_nettlp::loopback;
//! let (adapter, device) = loopback::random_pair();
//! assert_eq!(adapter.octets()[0], 127);
//! assert_ne!(adapter.octets()[1], 0);
//! assert_ne!(adapter, device);
//! ```

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};

/// A random 127.b.c.0/24 with b in 1..=254, as `[127, b, c]`: from the clock, the process
/// ID and a per-process counter, mixed (the finaliser of SplitMix64).
pub fn random_net() -> [u8; 3] {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = t
        ^ (u64::from(std::process::id()) << 20)
        ^ N.fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    [127, 1 + (x % 254) as u8, (x >> 8) as u8]
}

/// `host` in a fresh [`random_net`]: 127.b.c.`host`.
pub fn in_net(net: [u8; 3], host: u8) -> Ipv4Addr {
    Ipv4Addr::new(net[0], net[1], net[2], host)
}

/// An (adapter, device) pair in a fresh [`random_net`]: 127.b.c.1 and 127.b.c.2.
pub fn random_pair() -> (Ipv4Addr, Ipv4Addr) {
    let n = random_net();
    (in_net(n, 1), in_net(n, 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nets_are_outside_127_0_0_and_differ_call_to_call() {
        let nets: Vec<[u8; 3]> = (0..200).map(|_| random_net()).collect();
        assert!(nets.iter().all(|n| n[0] == 127 && n[1] != 0 && n[1] != 255));
        let distinct: std::collections::HashSet<_> = nets.iter().collect();
        // 200 draws from 254 × 256 nets: a repeat is possible but rare.
        assert!(distinct.len() >= 195, "{}", distinct.len());
    }
}
