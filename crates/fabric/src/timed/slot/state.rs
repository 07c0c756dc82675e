//! A device slot's state (below the engine): its model, functions, DMA operations, tags and
//! counters.

use crate::functional::FnId;
use crate::inthash::IntMap;
use crate::timed::endpoint::{DmaId, Endpoint};
use crate::timed::tlp::{AtomicKind, Kind};
use pcielab_sim::{EventKey, SimTime};
use pcielab_wire::Bdf;
use std::collections::VecDeque;

/// A DMA read request in flight: (op, offset in op, length, bytes received, the
/// request's address as sent — translated when the DMA holds an ATS translation).
pub(crate) type TagEntry = (u32, u64, u32, u32, u64);

#[derive(Debug)]
pub(crate) struct EpState {
    /// An Assert_INTx message went out and no Deassert since.
    pub intx_sent: bool,
    /// The device model; `None`: BAR accesses go to the functional fabric's model
    /// (e.g. psmem with its MSI-X table), in zero device time.
    pub model: Option<Box<dyn Endpoint>>,
    pub bdf: Bdf,
    pub free_tags: Vec<u16>,
    /// tag → the DMA read request it was given to.
    pub tag_map: Vec<Option<TagEntry>>,
    pub ops: Vec<DmaOp>,
    pub free_ops: Vec<u32>,
    /// Scatter-gather DMAs in progress (see [`SgDma`]), and their free slots.
    pub sg: Vec<SgDma>,
    pub free_sg: Vec<u32>,
    pub read_queue: VecDeque<u32>,
    /// Burst mode: holds of its read requests (while its model's calls of one
    /// instant run, and while a completion burst is taken), so that the reads they
    /// ask for go out together, as scatter bursts (see the `burst` module).
    pub rd_hold: u32,
    /// The read requests built while held, in order, to send when the hold ends.
    pub held_reads: Vec<HeldRead>,
    /// The model's own state that its context carries (DMA numbers, RNG stream).
    pub state: pcielab_device::DeviceState,
    /// ticket → (requester, tag, address, length, request kind, completing function)
    pub tickets: IntMap<u64, (Bdf, u16, u64, u32, Kind, u16)>,
    pub up_dir: u16,
    /// A completion-timeout sweep is pending.
    pub timeout_armed: bool,
    /// The pending sweep event (cancelled when no read is left, so an idle device
    /// keeps no event alive).
    pub timeout_key: Option<EventKey>,
    /// Bus Master Enable of function 0 (cached; see the `bus_master` module).
    pub bus_master: bool,
    /// tag → bytes still expected, for reads the device sent as raw TLPs (see the
    /// `raw` module): their completions go to [`Endpoint::raw_completion`].
    pub raw_reads: IntMap<u16, u32>,
    /// How the model's DMA engine works (asked when it is attached).
    pub policy: pcielab_device::DmaPolicy,
    /// The model's timing (asked when it is attached).
    pub timing: pcielab_device::DeviceTiming,
    /// When the device's receive datapath is free again (device timing).
    pub rx_free: SimTime,
    /// When its transmit datapath is free again (device timing).
    pub tx_free: SimTime,
    /// Requests the model refused ([`Endpoint::accept`]), oldest first: they keep
    /// their receive-buffer credits until the model takes them.
    pub held: VecDeque<u32>,
    /// The held requests are being offered again (a `Ready` within that is moot).
    pub draining: bool,
    /// Counters for [`crate::timed::DeviceStats`].
    pub stats: crate::timed::stats::DeviceStats,
    /// With a reorder window, per DMA op (by index): the bytes from its start handed
    /// to the device in order, and the ranges `[start, end)` that arrived past them.
    /// Empty without a window (kept out of `DmaOp`, which every DMA writes).
    pub reorder: Vec<(u64, Vec<(u64, u64)>)>,
    /// The device's functions by index, as [`EpCx::function`] numbers them: its own
    /// functions in order (function 0 first), then the VFs of each PF in order.
    pub funcs: Vec<FnId>,
    /// The node at the other end of its Ethernet cable (`NONE`: no cable).
    pub cable: u32,
    /// Tag ranges per function ([`pcielab_device::DmaPolicy::tags_per_function`]):
    /// one read queue and tag pool per function. `None`: `free_tags` and
    /// `read_queue` serve the whole device.
    pub part: Option<Box<TagPartition>>,
    /// Counters per function (by index), grown as functions are counted.
    pub fn_stats: Vec<crate::timed::stats::FunctionDmaStats>,
}

impl EpState {
    /// Gives `tag` back to its pool (its function's, when partitioned).
    #[inline]
    pub fn free_tag(&mut self, tag: u16) {
        match &mut self.part {
            None => self.free_tags.push(tag),
            Some(p) => {
                if let Some(i) = p.owner(tag) {
                    p.free[i as usize].push(tag);
                }
            }
        }
    }

    /// Takes read DMA `oi` out of the read queue(s).
    pub fn unqueue(&mut self, oi: u32) {
        self.read_queue.retain(|&x| x != oi);
        if let Some(p) = &mut self.part {
            for q in &mut p.queues {
                q.retain(|&x| x != oi);
            }
        }
    }

    /// Function `i`'s counters (grown on demand).
    pub fn fn_stats_mut(&mut self, i: u16) -> &mut crate::timed::stats::FunctionDmaStats {
        if self.fn_stats.len() <= i as usize {
            self.fn_stats.resize(
                i as usize + 1,
                crate::timed::stats::FunctionDmaStats::default(),
            );
        }
        &mut self.fn_stats[i as usize]
    }
}

/// The DMA engine's state with tag ranges per function: function `i` owns tags
/// `first + i*per .. first + (i+1)*per`.
#[derive(Debug, Default)]
pub(crate) struct TagPartition {
    pub first: u16,
    pub per: u16,
    /// Free tags of each function (popped from the end).
    pub free: Vec<Vec<u16>>,
    /// Read DMAs of each function waiting to send requests, in order.
    pub queues: Vec<VecDeque<u32>>,
    /// The function whose turn is next (round-robin).
    pub next: u16,
    /// Calls of the issuing loop so far (a function's stall is counted once a call).
    pub calls: u64,
    /// The call in which each function's last window stall was counted.
    pub stall_call: Vec<u64>,
    /// Calls into the model under way: read requests wait until they return.
    pub holds: u32,
}

impl TagPartition {
    /// The partition of `functions` functions of `per` tags from `first`, every tag
    /// free.
    pub fn new(first: u16, per: u16, functions: u16) -> TagPartition {
        let n = functions.max(1);
        TagPartition {
            first,
            per,
            free: (0..n)
                .map(|i| {
                    let a = first + i * per;
                    (a..a + per).rev().collect()
                })
                .collect(),
            queues: vec![VecDeque::new(); n as usize],
            next: 0,
            calls: 0,
            stall_call: vec![u64::MAX; n as usize],
            holds: 0,
        }
    }

    /// The function that owns `tag`, if any.
    #[inline]
    pub fn owner(&self, tag: u16) -> Option<u16> {
        let i = tag.checked_sub(self.first)? / self.per;
        ((i as usize) < self.free.len()).then_some(i)
    }

    /// Makes every tag of function `i` free except those `held` says are in use.
    pub fn refill(&mut self, i: u16, held: impl Fn(u16) -> bool) {
        let a = self.first + i * self.per;
        self.free[i as usize] = (a..a + self.per).rev().filter(|&t| !held(t)).collect();
    }
}

/// What a new DMA does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmaDir {
    Read,
    /// A write; `poisoned`: its TLPs carry EP.
    Write {
        poisoned: bool,
    },
    /// An AtomicOp (`atomic::FETCH_ADD`, `SWAP`, `CAS`); its operands come as the data.
    Atomic(AtomicKind),
}

#[derive(Debug)]
pub(crate) struct DmaOp {
    pub id: DmaId,
    pub write: bool,
    pub addr: u64,
    pub len: u64,
    pub issued: u64,
    pub done_bytes: u64,
    pub buf: Vec<u8>,
    pub last_progress: SimTime,
    pub ok: bool,
    pub live: bool,
    /// Read requests in flight.
    pub outstanding: u32,
    /// A write whose TLPs carry poisoned data.
    pub poisoned: bool,
    /// ATS translations the DMA uses: (untranslated base, translated base, size).
    pub xlate: Vec<(u64, u64, u64)>,
    /// Translations it still waits for before it starts.
    pub xlate_wait: u32,
    /// The PASID its requests carry (a PASID TLP prefix), or NONE.
    pub pasid: u32,
    /// An AtomicOp: its operation and operands (see the `atomic` module); the DMA is a
    /// read of the original value (`len` bytes).
    pub atomic: Option<(AtomicKind, Vec<u8>)>,
    /// The function (its index on the device) whose requester ID the DMA uses.
    pub func: u16,
    /// Dropped by a Function Level Reset of its function: it ends without
    /// `dma_done` once nothing of it is in flight (see the `flr` module).
    pub reset: bool,
    /// The scatter-gather DMA it is a segment of (index into `EpState::sg`), or
    /// NONE; and where its bytes sit in that DMA's data.
    pub sg: u32,
    pub sg_off: u32,
}

/// A scatter-gather DMA (`Command::DmaReadSg`, `Command::DmaWriteSg`): each segment
/// runs as a DMA of its own (the same requests, tags and timing as separate DMAs
/// given in the same call), and the device hears once, when the last one is done.
#[derive(Debug)]
pub(crate) struct SgDma {
    /// The device's number for it.
    pub id: DmaId,
    /// Segments not finished yet.
    pub left: u32,
    /// Every segment finished well so far.
    pub ok: bool,
    /// A segment was dropped by a Function Level Reset: the DMA ends silently.
    pub reset: bool,
    /// A read's data, the segments back to back.
    pub buf: Vec<u8>,
    /// The function that gave it.
    pub func: u16,
}

impl DmaOp {
    /// Waits for completions, so the completion timeout applies: a read, or any DMA
    /// still waiting for ATS translations.
    pub(crate) fn awaits_completions(&self) -> bool {
        !self.write || self.xlate_wait > 0
    }
}

/// Frames on the Ethernet cables between devices, and their counters.
#[derive(Debug, Default)]
pub(crate) struct EthCables {
    /// Frames on their way: (the receiving node, the frame); `None`: a free slot.
    pub frames: Vec<Option<(u32, Vec<u8>)>>,
    pub free: Vec<u32>,
    /// Frames a device took.
    pub delivered: u64,
    /// Frames out of a MAC with no cable, or that the receiving device did not take.
    pub dropped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_owns_its_own_range_of_tags() {
        let p = TagPartition::new(100, 8, 3);
        // Function i's free tags are 100 + 8i .. 100 + 8i + 7, lowest taken first.
        for (i, free) in p.free.iter().enumerate() {
            let lo = 100 + 8 * i as u16;
            assert_eq!(free.last(), Some(&lo));
            assert_eq!(free.len(), 8);
            assert!(free.iter().all(|&t| (lo..lo + 8).contains(&t)));
        }
        assert_eq!(p.owner(99), None);
        assert_eq!(p.owner(100), Some(0));
        assert_eq!(p.owner(107), Some(0));
        assert_eq!(p.owner(108), Some(1));
        assert_eq!(p.owner(123), Some(2));
        assert_eq!(p.owner(124), None, "past the last function");
    }

    #[test]
    fn a_refill_frees_a_functions_tags_except_those_still_in_use() {
        let mut p = TagPartition::new(0, 4, 2);
        p.free[1].clear();
        p.refill(1, |t| t == 5);
        assert_eq!(p.free[1], [7, 6, 4]);
        assert_eq!(p.free[0], [3, 2, 1, 0], "the other function is untouched");
        // A device with no functions still has one partition.
        assert_eq!(TagPartition::new(0, 4, 0).free.len(), 1);
    }
}

/// A read request a DMA engine built while its reads were held (see
/// `EpState::rd_hold`): DMA `oi`'s request `t`, from function `f` with ID `me`.
#[derive(Debug, Clone)]
pub(crate) struct HeldRead {
    pub oi: u32,
    pub f: crate::functional::FnId,
    pub me: pcielab_wire::Bdf,
    pub t: crate::timed::tlp::Tlp,
}
