//! Any [`DeviceModel`] served over NetTLP: [`ModelHandler`] is the NetTLP device
//! runtime's host for the device-model API, as `FabricSim` is the simulator's.
//!
//! Host reads and writes that fall in the device's BAR (NetTLP exposes one, BAR4, at
//! the adapter's address) are handed to the model with a [`Cx`] whose clock is the
//! wall clock since the handler was made. What a model asks for through its context
//! (DMA, interrupts, timers) is not carried out by this runtime yet: each such command
//! is counted in [`ModelHandler::commands_dropped`] and the last one is kept for the
//! error report ([`ModelHandler::last_dropped`]), never lost silently. A completer
//! device such as psmem needs none.
//!
//! ```
//! use pcielab_device::{PsMem, PsMemLayout};
//! use pcielab_nettlp::handler::Handler;
//! use pcielab_nettlp::hosted::ModelHandler;
//! let mem = PsMem::new(PsMemLayout { mem_bar: 4, size: 4096, io: None });
//! let h = ModelHandler::new(mem, 4, 0x2_0000_0000, 4096);
//! h.write(0x2_0000_0010, &[1, 2, 3]);
//! let mut b = [0u8; 3];
//! h.read(0x2_0000_0010, &mut b).unwrap();
//! assert_eq!(b, [1, 2, 3]);
//! assert!(h.read(0x2_0000_1000, &mut b).is_err()); // outside the BAR
//! ```

use crate::handler::Handler;
use pcielab_device::{Command, Cx, DeviceModel, ReadReply};
use pcielab_sim::{Rng, SimTime};
use pcielab_wire::{Bdf, CplStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug)]
struct Hosted<M> {
    model: M,
    next_dma: u64,
    rng: Rng,
    cmds: Vec<Command>,
    spare: Vec<Vec<u8>>,
    last_dropped: Option<Command>,
}

/// Serves a [`DeviceModel`]'s BAR `bar` at `[base, base + size)` (see the module
/// documentation). Calls into the model are serialized by a mutex.
#[derive(Debug)]
pub struct ModelHandler<M> {
    inner: Mutex<Hosted<M>>,
    bar: u8,
    base: u64,
    size: u64,
    start: Instant,
    requester: Bdf,
    dropped: AtomicU64,
}

impl<M: DeviceModel + Send + 'static> ModelHandler<M> {
    /// Hosts `model`, its BAR `bar` at `base` with `size` bytes.
    pub fn new(model: M, bar: u8, base: u64, size: u64) -> ModelHandler<M> {
        ModelHandler {
            inner: Mutex::new(Hosted {
                model,
                next_dma: 0,
                rng: Rng::new(0x6e65_7474_6c70),
                cmds: Vec::new(),
                spare: Vec::new(),
                last_dropped: None,
            }),
            bar,
            base,
            size,
            start: Instant::now(),
            requester: Bdf::default(),
            dropped: AtomicU64::new(0),
        }
    }

    /// The device's requester ID as the model sees it ([`Cx::bdf`]).
    pub fn with_requester(mut self, bdf: Bdf) -> Self {
        self.requester = bdf;
        self
    }

    /// Commands the model gave that this runtime does not carry out.
    pub fn commands_dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The last such command.
    pub fn last_dropped(&self) -> Option<Command> {
        self.lock().last_dropped.clone()
    }

    /// Runs `f` on the model (for inspection).
    pub fn with_model<R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        f(&mut self.lock().model)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hosted<M>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn offset(&self, addr: u64, len: usize) -> Option<u64> {
        let off = addr.checked_sub(self.base)?;
        (off.checked_add(len as u64)? <= self.size).then_some(off)
    }

    fn call<R>(&self, f: impl FnOnce(&mut M, &mut Cx<'_>) -> R) -> R {
        let now = SimTime::from_ps(self.start.elapsed().as_nanos() as u64 * 1000);
        let mut g = self.lock();
        let h = &mut *g;
        let r = {
            let mut cx = Cx::new(
                now,
                (0, self.requester),
                &mut h.cmds,
                (&mut h.next_dma, &mut h.rng),
                None,
                &mut h.spare,
            );
            f(&mut h.model, &mut cx)
        };
        if let Some(last) = h
            .cmds
            .drain(..)
            .inspect(|_| {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            })
            .last()
        {
            h.last_dropped = Some(last);
        }
        r
    }
}

impl<M: DeviceModel + Send + 'static> Handler for ModelHandler<M> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), CplStatus> {
        // NetTLP has no BAR decoder in front of the device: outside the BAR, Completer
        // Abort (as psmem answers).
        let Some(off) = self.offset(addr, out.len()) else {
            return Err(CplStatus::Ca);
        };
        let bar = self.bar;
        match self.call(|m, cx| m.mem_read(bar, off, out, cx)) {
            ReadReply::Now => Ok(()),
            ReadReply::Unsupported => Err(CplStatus::Ur),
            // No deferred or poisoned completions over this runtime: a completer abort
            // tells the host the data is not good.
            ReadReply::Later(_) | ReadReply::Poisoned => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Err(CplStatus::Ca)
            }
        }
    }

    fn write(&self, addr: u64, data: &[u8]) {
        if let Some(off) = self.offset(addr, data.len()) {
            let bar = self.bar;
            self.call(|m, cx| m.mem_write(bar, off, data, cx));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcielab_device::DmaId;

    /// A device that asks for a DMA on every write: the runtime counts it as dropped.
    #[derive(Debug)]
    struct Asks;
    impl DeviceModel for Asks {
        fn mem_write(&mut self, _bar: u8, _off: u64, _data: &[u8], cx: &mut Cx<'_>) {
            let id = cx.dma_read(0x1000, 64);
            assert_eq!(id, DmaId(0));
        }
    }

    #[test]
    fn commands_are_counted_not_lost() {
        let h = ModelHandler::new(Asks, 4, 0x1000, 0x100);
        h.write(0x1000, &[1]);
        assert_eq!(h.commands_dropped(), 1);
        assert!(matches!(
            h.last_dropped(),
            Some(Command::DmaRead { len: 64, .. })
        ));
        let mut b = [0u8; 4];
        assert_eq!(h.read(0x1000, &mut b), Err(CplStatus::Ur)); // no mem_read: UR
        assert_eq!(h.read(0x10fe, &mut b), Err(CplStatus::Ca)); // past the BAR
    }
}
