//! A small multiplicative hasher for integer keys (page numbers, route-cache keys, DMA
//! bookkeeping): one rotate, xor and multiply per word. SipHash's resistance to
//! adversarial keys buys nothing for a simulator's own integers.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// Builds [`IntHasher`]s.
pub(crate) type IntBuild = BuildHasherDefault<IntHasher>;

/// A `HashMap` with [`IntHasher`].
pub(crate) type IntMap<K, V> = HashMap<K, V, IntBuild>;
