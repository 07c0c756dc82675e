//! Emulated host memory: sparse 4 KiB pages, allocated on first write, inside
//! configured windows.
//!
//! ```
//! use pcielab_nettlp::memory::{HostMemory, Window};
//! let m = HostMemory::new(vec![Window { base: 0x1000, size: 0x10000 }]);
//! m.write(0x1ffe, &[1, 2, 3, 4]); // crosses a page
//! let mut b = [0u8; 6];
//! m.read(0x1ffd, &mut b);
//! assert_eq!(b, [0, 1, 2, 3, 4, 0]);
//! assert!(m.contains(0x1000, 0x10000));
//! assert!(!m.contains(0x0fff, 2));
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::path::Path;
use std::sync::RwLock;

const PAGE: u64 = 4096;

/// A range of host addresses devices may access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// First address.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
}

impl Window {
    /// Parses `BASE:SIZE` (hex with 0x or decimal; SIZE may end in K, M or G).
    pub fn parse(s: &str) -> Result<Window, String> {
        let (b, z) = s
            .split_once(':')
            .ok_or_else(|| format!("window {s:?}: expected BASE:SIZE, e.g. 0x0:1G"))?;
        let base = parse_num(b).ok_or_else(|| format!("window {s:?}: bad base {b:?}"))?;
        let size = parse_num(z).ok_or_else(|| format!("window {s:?}: bad size {z:?}"))?;
        if size == 0 || base.checked_add(size).is_none() {
            return Err(format!(
                "window {s:?}: size must be > 0 and base+size must fit in 64 bits"
            ));
        }
        Ok(Window { base, size })
    }
}

/// Parses a number or byte size: the project's one rule, [`pcielab_wire::size::parse_size`]
/// (`0x` hex or decimal, K/KiB, M/MiB, G/GiB, T/TiB in any case).
pub fn parse_num(s: &str) -> Option<u64> {
    pcielab_wire::size::parse_size(s)
}

/// Hashes page numbers with one multiplication (Fibonacci hashing): page numbers are
/// not attacker-chosen keys worth SipHash's cost, and consecutive pages spread well.
#[derive(Debug, Default, Clone, Copy)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type Pages = HashMap<u64, Box<[u8; PAGE as usize]>, BuildHasherDefault<PageHasher>>;

/// Sparse host memory.
#[derive(Debug)]
pub struct HostMemory {
    windows: Vec<Window>,
    pages: RwLock<Pages>,
}

impl HostMemory {
    /// Memory made of `windows` (all zero).
    pub fn new(windows: Vec<Window>) -> HostMemory {
        HostMemory {
            windows,
            pages: RwLock::new(Pages::default()),
        }
    }

    /// The windows.
    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// True when `[addr, addr+len)` lies inside one window.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.windows
            .iter()
            .any(|w| addr >= w.base && end <= w.base + w.size)
    }

    /// Copies memory at `addr` into `out` (never-written bytes read as zero).
    pub fn read(&self, addr: u64, out: &mut [u8]) {
        let pages = self.pages.read().unwrap_or_else(|p| p.into_inner());
        let mut done = 0usize;
        while done < out.len() {
            let a = addr.wrapping_add(done as u64);
            let off = (a % PAGE) as usize;
            let n = (PAGE as usize - off).min(out.len() - done);
            match pages.get(&(a / PAGE)) {
                Some(p) => out[done..done + n].copy_from_slice(&p[off..off + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Writes `data` at `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) {
        let mut pages = self.pages.write().unwrap_or_else(|p| p.into_inner());
        let mut done = 0usize;
        while done < data.len() {
            let a = addr.wrapping_add(done as u64);
            let off = (a % PAGE) as usize;
            let n = (PAGE as usize - off).min(data.len() - done);
            let p = pages
                .entry(a / PAGE)
                .or_insert_with(|| Box::new([0u8; PAGE as usize]));
            p[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }

    /// Loads a file's bytes at `addr`.
    pub fn load_file(&self, addr: u64, path: &Path) -> io::Result<usize> {
        let b = std::fs::read(path)?;
        self.write(addr, &b);
        Ok(b.len())
    }

    /// Number of pages allocated.
    pub fn pages(&self) -> usize {
        self.pages.read().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_num("0x10"), Some(16));
        assert_eq!(parse_num("4K"), Some(4096));
        assert_eq!(parse_num("1G"), Some(1 << 30));
        assert_eq!(parse_num("0x1_0000"), Some(65536));
        assert_eq!(parse_num("zz"), None);
        assert_eq!(parse_num(""), None);
        assert_eq!(
            Window::parse("0x100000:2M").unwrap(),
            Window {
                base: 0x100000,
                size: 2 << 20
            }
        );
        assert!(Window::parse("0x10").is_err());
        assert!(Window::parse("0x10:0").is_err());
        assert!(Window::parse("0xffffffffffffffff:2").is_err());
    }

    #[test]
    fn windows_and_overflow() {
        let m = HostMemory::new(vec![Window {
            base: 0,
            size: 8192,
        }]);
        assert!(m.contains(0, 8192));
        assert!(!m.contains(1, 8192));
        assert!(!m.contains(u64::MAX, 2));
        assert_eq!(m.pages(), 0);
        m.write(4095, &[7, 8]);
        assert_eq!(m.pages(), 2);
    }

    #[test]
    fn many_scattered_pages_keep_their_bytes() {
        let m = HostMemory::new(vec![]);
        // Pages far apart and adjacent ones, so the page hash sees varied keys.
        let addr = |i: u64| (i * 0x1_0000_1000) ^ ((i & 7) << 12);
        for i in 0..3000u64 {
            m.write(addr(i) + 5, &(i as u32).to_le_bytes());
        }
        assert_eq!(m.pages(), 3000);
        for i in 0..3000u64 {
            let mut b = [0u8; 6];
            m.read(addr(i) + 4, &mut b);
            let v = i as u32;
            assert_eq!(
                b,
                [
                    0,
                    v as u8,
                    (v >> 8) as u8,
                    (v >> 16) as u8,
                    (v >> 24) as u8,
                    0
                ]
            );
        }
    }
}
