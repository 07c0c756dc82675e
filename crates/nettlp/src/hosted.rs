//! Any [`DeviceModel`] served over NetTLP: [`ModelHandler`] is the NetTLP device
//! runtime's host for the device-model API, as `FabricSim` is the simulator's.
//!
//! Host reads and writes that fall in the device's BAR (NetTLP exposes one, BAR4, at
//! the adapter's address) are handed to the model with a [`Cx`] whose clock is the
//! wall clock since the handler was made.
//!
//! With a NetTLP [`Device`] ([`ModelHandler::with_device`]) the runtime carries out the
//! model's DMA reads and writes over UDP (the `device` module's library, split and
//! reassembled as on hardware) and calls `dma_done` with the result, and sends MSI-X
//! vectors as memory writes to the table the adapter reported. The calls happen in
//! the server thread that got the request, one model call at a time. Timers run on a
//! thread of their own once [`ModelHandler::start_timers`] has started it, at the wall
//! clock's time. What the runtime does not carry out (timers without that thread,
//! other messages; DMA without a device) is counted in
//! [`ModelHandler::commands_dropped`] and the last such command kept
//! ([`ModelHandler::last_dropped`]): never lost silently; writes that fall outside the
//! BAR are counted in [`ModelHandler::writes_outside`]. Something other than the host
//! (a network interface's reader thread) acts on the model through
//! [`ModelHandler::call`].
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

use crate::device::Device;
use crate::frame::MsixEntry;
use crate::handler::Handler;
use pcielab_device::{sg_total, Command, Cx, DeviceModel, DeviceState, ReadReply};
use pcielab_sim::{Rng, SimTime};
use pcielab_wire::{Bdf, CplStatus};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Hosted<M> {
    model: M,
    state: DeviceState,
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
    outside: AtomicU64,
    device: Option<(Device, Vec<MsixEntry>)>,
    /// Timers due: (when, order of arrival, token).
    timers: Mutex<BinaryHeap<Reverse<(SimTime, u64, u64)>>>,
    timer_wake: Condvar,
    timer_seq: AtomicU64,
    timers_on: AtomicBool,
    timers_stop: AtomicBool,
}

/// The thread that runs a [`ModelHandler`]'s timers ([`ModelHandler::start_timers`]);
/// stopped and joined when dropped.
pub struct TimerThread {
    stop: Box<dyn Fn() + Send>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for TimerThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerThread")
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl TimerThread {
    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        (self.stop)();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TimerThread {
    fn drop(&mut self) {
        self.halt();
    }
}

impl<M: DeviceModel + Send + 'static> ModelHandler<M> {
    /// Hosts `model`, its BAR `bar` at `base` with `size` bytes.
    pub fn new(model: M, bar: u8, base: u64, size: u64) -> ModelHandler<M> {
        ModelHandler {
            inner: Mutex::new(Hosted {
                model,
                state: DeviceState {
                    next_dma: 0,
                    rng: Rng::new(0x6e65_7474_6c70),
                },
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
            outside: AtomicU64::new(0),
            device: None,
            timers: Mutex::new(BinaryHeap::new()),
            timer_wake: Condvar::new(),
            timer_seq: AtomicU64::new(0),
            timers_on: AtomicBool::new(false),
            timers_stop: AtomicBool::new(false),
        }
    }

    /// Starts the thread that carries out the model's timers ([`Cx::timer`]): each
    /// fires at the wall clock's time it names and calls the model's `timer`. Without
    /// it, timers are counted as dropped commands.
    pub fn start_timers(self: &Arc<Self>) -> TimerThread {
        self.timers_on.store(true, Ordering::SeqCst);
        self.timers_stop.store(false, Ordering::SeqCst);
        let me = Arc::clone(self);
        let thread = std::thread::Builder::new()
            .name("model-timers".into())
            .spawn(move || me.timer_loop())
            .ok();
        let me = Arc::clone(self);
        TimerThread {
            stop: Box::new(move || {
                me.timers_stop.store(true, Ordering::SeqCst);
                me.timers_on.store(false, Ordering::SeqCst);
                let _g = me.timers.lock().unwrap_or_else(|p| p.into_inner());
                me.timer_wake.notify_all();
            }),
            thread,
        }
    }

    fn timer_loop(&self) {
        let mut q = self.timers.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.timers_stop.load(Ordering::SeqCst) {
                return;
            }
            let now = self.start.elapsed();
            let next = q
                .peek()
                .map(|Reverse((at, ..))| Duration::from_nanos(at.as_ps() / 1000));
            match next {
                Some(at) if at <= now => {
                    let Some(Reverse((_, _, token))) = q.pop() else {
                        continue;
                    };
                    drop(q);
                    self.call(|m, cx| m.timer(token, cx));
                    q = self.timers.lock().unwrap_or_else(|p| p.into_inner());
                }
                Some(at) => {
                    q = self
                        .timer_wake
                        .wait_timeout(q, at - now)
                        .map(|r| r.0)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                None => {
                    q = self.timer_wake.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
    }

    /// Carries out the model's DMA over `device` and its MSI-X vectors with `msix`
    /// (the table the adapter reports: `client::get_msix_table`). The model's requester
    /// ID is the device's.
    pub fn with_device(mut self, device: Device, msix: &[MsixEntry]) -> Self {
        self.requester = device.config().requester;
        self.device = Some((device, msix.to_vec()));
        self
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

    /// Writes that fell outside the BAR (posted: nobody to answer, so counted here).
    pub fn writes_outside(&self) -> u64 {
        self.outside.load(Ordering::Relaxed)
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

    /// Calls `f` on the model with a context, as a request from the host does, and
    /// carries out what the model asks for (DMA, MSI-X) before returning: the way for
    /// something other than the host to act on the device (a frame arriving from a
    /// network interface, say).
    pub fn call<R>(&self, f: impl FnOnce(&mut M, &mut Cx<'_>) -> R) -> R {
        let now = SimTime::from_ps(self.start.elapsed().as_nanos() as u64 * 1000);
        let mut g = self.lock();
        let h = &mut *g;
        let r = self.invoke(h, now, f);
        self.carry_out(h, now);
        r
    }

    /// Calls the model with a context at `now`; its commands are left in `h.cmds`.
    fn invoke<R>(
        &self,
        h: &mut Hosted<M>,
        now: SimTime,
        f: impl FnOnce(&mut M, &mut Cx<'_>) -> R,
    ) -> R {
        let mut cx = Cx::new(
            now,
            (0, self.requester),
            &mut h.cmds,
            &mut h.state,
            None,
            &mut h.spare,
        );
        f(&mut h.model, &mut cx)
    }

    /// Carries out the commands the model gave (and those its `dma_done` calls give).
    fn carry_out(&self, h: &mut Hosted<M>, now: SimTime) {
        let mut todo: std::collections::VecDeque<Command> = h.cmds.drain(..).collect();
        while let Some(c) = todo.pop_front() {
            let done = match (&self.device, c) {
                (Some((dev, _)), Command::DmaRead { id, addr, len, .. }) => {
                    let mut buf = vec![0u8; len as usize];
                    let ok = dev.dma_read(addr, &mut buf).is_ok();
                    Some((id, ok, buf))
                }
                (Some((dev, _)), Command::DmaWrite { id, addr, data, .. }) => {
                    let ok = dev.dma_write(addr, &data).is_ok();
                    Some((id, ok, Vec::new()))
                }
                // Scatter-gather: the segments in turn, one `dma_done` for all.
                // (Refused whole, as the simulator refuses it, where `sg_total` does.)
                (Some((dev, _)), Command::DmaReadSg { id, segs }) => {
                    let mut ok = sg_total(&segs, None).is_ok();
                    let mut buf = Vec::new();
                    let segs = if ok { segs } else { Vec::new() };
                    for (addr, len) in segs {
                        let at = buf.len();
                        buf.resize(at + len as usize, 0);
                        ok &= dev.dma_read(addr, &mut buf[at..]).is_ok();
                    }
                    Some((id, ok, buf))
                }
                (Some((dev, _)), Command::DmaWriteSg { id, segs, data }) => {
                    let mut ok = sg_total(&segs, Some(data.len())).is_ok();
                    let mut at = 0usize;
                    let segs = if ok { segs } else { Vec::new() };
                    for (addr, len) in segs {
                        ok &= dev.dma_write(addr, &data[at..at + len as usize]).is_ok();
                        at += len as usize;
                    }
                    Some((id, ok, Vec::new()))
                }
                (Some((dev, table)), Command::Msix(v)) => {
                    match table.get(v as usize) {
                        Some(e) => {
                            if dev.dma_write(e.addr, &e.data.to_le_bytes()).is_err() {
                                self.drop_command(h, Command::Msix(v));
                            }
                        }
                        None => self.drop_command(h, Command::Msix(v)),
                    }
                    None
                }
                // A device of one function: acting as it changes nothing.
                (_, Command::As(0)) => None,
                (_, Command::Timer { at, token }) if self.timers_on.load(Ordering::SeqCst) => {
                    let seq = self.timer_seq.fetch_add(1, Ordering::Relaxed);
                    let mut q = self.timers.lock().unwrap_or_else(|p| p.into_inner());
                    q.push(Reverse((at, seq, token)));
                    self.timer_wake.notify_all();
                    None
                }
                (_, other) => {
                    self.drop_command(h, other);
                    None
                }
            };
            if let Some((id, ok, data)) = done {
                self.invoke(h, now, |m, cx| m.dma_done(id, ok, &data, cx));
                todo.extend(h.cmds.drain(..));
            }
        }
    }

    fn drop_command(&self, h: &mut Hosted<M>, c: Command) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        h.last_dropped = Some(c);
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
        } else {
            self.outside.fetch_add(1, Ordering::Relaxed);
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
        h.write(0x10fe, &b);
        assert_eq!((h.writes_outside(), h.commands_dropped()), (1, 1));
    }
}
