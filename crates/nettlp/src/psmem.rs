//! psmem: a pseudo memory device behind BAR4, served over NetTLP. The memory is
//! `pcielab_device::PsMem`, the same device the simulator runs; this host adds the
//! BAR4 address decode (NetTLP has no BAR decoder in front of the device) and lets
//! several server threads read at once. Accesses outside the memory get Completer
//! Abort (upstream psmem sends nothing, so the host times out).
//!
//! ```no_run
//! use pcielab_nettlp::handler::{serve, ServeConfig};
//! use pcielab_nettlp::psmem::Psmem;
//! use std::sync::Arc;
//! let mem = Arc::new(Psmem::new(0x2_0000_0000, 1 << 20));
//! let server = serve(ServeConfig::default(), mem.clone())?;
//! # server.stop();
//! # Ok::<(), std::io::Error>(())
//! ```

use crate::handler::Handler;
use pcielab_device::{PsMem, PsMemLayout};
use pcielab_wire::CplStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// The pseudo memory.
#[derive(Debug)]
pub struct Psmem {
    base: u64,
    mem: RwLock<PsMem>,
    /// Reads served.
    pub reads: AtomicU64,
    /// Writes applied.
    pub writes: AtomicU64,
    /// Accesses outside the memory.
    pub aborts: AtomicU64,
}

impl Psmem {
    /// `size` bytes of zeroed memory mapped at BAR4 address `base`.
    pub fn new(base: u64, size: usize) -> Psmem {
        Psmem {
            base,
            mem: RwLock::new(PsMem::new(PsMemLayout {
                mem_bar: BAR,
                size: size as u64,
                io: None,
            })),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
        }
    }

    /// The offset of `addr` in BAR4, if the address is at or above its base.
    fn offset(&self, addr: u64) -> Option<u64> {
        addr.checked_sub(self.base)
    }

    /// Copies memory at BAR4 offset `off` (for inspection).
    pub fn peek(&self, off: usize, out: &mut [u8]) -> bool {
        let m = self.mem.read().unwrap_or_else(|p| p.into_inner());
        m.read(BAR, off as u64, out).is_ok()
    }
}

/// psmem's memory BAR.
const BAR: u8 = 4;

impl Handler for Psmem {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), CplStatus> {
        let m = self.mem.read().unwrap_or_else(|p| p.into_inner());
        match self.offset(addr).map(|off| m.read(BAR, off, out)) {
            Some(Ok(())) => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            _ => {
                self.aborts.fetch_add(1, Ordering::Relaxed);
                Err(CplStatus::Ca)
            }
        }
    }

    fn write(&self, addr: u64, data: &[u8]) {
        let mut m = self.mem.write().unwrap_or_else(|p| p.into_inner());
        match self.offset(addr).map(|off| m.write(BAR, off, data)) {
            Some(Ok(())) => {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.aborts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let p = Psmem::new(0x1000, 16);
        p.write(0x100e, &[1, 2]);
        let mut b = [0u8; 3];
        assert!(p.read(0x100e, &mut b).is_err()); // one byte past the end
        let mut b = [0u8; 2];
        assert!(p.read(0x100e, &mut b).is_ok());
        assert_eq!(b, [1, 2]);
        assert!(p.read(0xfff, &mut b).is_err());
        assert_eq!(p.aborts.load(Ordering::Relaxed), 2);
    }
}
