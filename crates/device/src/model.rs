//! The device-model trait and the context through which a device acts.
//!
//! A device implements [`DeviceModel`]. Its host (the timed simulator, the functional
//! fabric or the NetTLP device runtime) calls it for requests that reach its BARs
//! (memory and I/O), for the completions of its DMAs, for its timers and for
//! vendor-defined messages routed to it, always with a [`Cx`] through which the device
//! acts: DMA reads and writes of any size (the host's DMA engine splits them at
//! MPS/MRRS and 4 KiB with `wire::dma`, keeps a pool of tags, reassembles completions
//! and times out), delayed read completions, MSI-X/MSI/INTx, vendor-defined messages,
//! timers. What the device asks for is queued as [`Command`]s that the host applies
//! after the call returns.
//!
//! ```
//! use pcielab_device::{Cx, DeviceModel, DmaId, ReadReply};
//! /// A device with one 32-bit scratch register at BAR0 + 0 that DMAs 64 bytes from
//! /// host address 0x1000 when written, then raises MSI-X vector 0.
//! #[derive(Debug, Default)]
//! struct Scratch { reg: u32 }
//! impl DeviceModel for Scratch {
//!     fn mem_read(&mut self, _bar: u8, _off: u64, buf: &mut [u8], _cx: &mut Cx<'_>) -> ReadReply {
//!         for (b, v) in buf.iter_mut().zip(self.reg.to_le_bytes()) { *b = v; }
//!         ReadReply::Now
//!     }
//!     fn mem_write(&mut self, _bar: u8, _off: u64, data: &[u8], cx: &mut Cx<'_>) {
//!         self.reg = data.iter().rev().fold(0, |a, &b| a << 8 | b as u32);
//!         cx.dma_read(0x1000, 64);
//!     }
//!     fn dma_done(&mut self, _id: DmaId, _ok: bool, _data: &[u8], cx: &mut Cx<'_>) {
//!         cx.msix(0);
//!     }
//! }
//! ```

use crate::atomic::AtomicOp;
use crate::message::VendorMessage;
use crate::timing::DeviceTiming;
use pcielab_sim::{Rng, SimDuration, SimTime};
use pcielab_wire::Bdf;

/// Identifies one DMA of a device (unique per device, in issue order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DmaId(pub u64);

/// Identifies a read that the device will complete later with [`Cx::complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadTicket(pub u64);

/// How a device answers a read of its BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadReply {
    /// `buf` holds the data; the completion leaves after the device latency.
    Now,
    /// The device will call [`Cx::complete`] with this ticket.
    Later(ReadTicket),
    /// The access is not supported: Completion with Unsupported Request status.
    Unsupported,
    /// `buf` holds the data, known to be bad: the completions leave poisoned (EP set;
    /// for an I/O write, the same as [`ReadReply::Now`]).
    Poisoned,
}

/// How the DMA engine of a device works, as the device chooses
/// ([`DeviceModel::dma_policy`]). The host's engine splits DMAs with `wire::dma`
/// (MPS, MRRS, 4 KiB), reassembles completions and times out.
///
/// ```
/// use pcielab_device::DmaPolicy;
/// // Tags 32..48 (say, one function's share of a tag space), completions one by one,
/// // released in order through a 2 KiB reorder window.
/// let p = DmaPolicy {
///     tags: Some((32, 16)),
///     per_completion: true,
///     reorder: Some(2048),
///     ..DmaPolicy::DEFAULT
/// };
/// assert!(p.check(768, 1).is_ok());
/// assert!(DmaPolicy { tags: Some((760, 16)), ..p }.check(768, 1).is_err());
/// // Tag ranges per function: a PF and up to 63 VFs, 8 tags each from tag 0
/// // (the PF 0..8, VF 1 8..16, ...): 512 tags in all.
/// let sriov = DmaPolicy { tags_per_function: Some(8), ..DmaPolicy::DEFAULT };
/// assert!(sriov.check(768, 64).is_ok());
/// let e = sriov.check(256, 64).unwrap_err();
/// assert!(e.contains("64 functions") && e.contains("512") && e.contains("256"), "{e}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DmaPolicy {
    /// The tags the device's read requests use: `count` tags from `first`; `None`:
    /// the host's default pool (the timed simulator: `SimConfig::dma_tags` from 0).
    pub tags: Option<(u16, u16)>,
    /// Call [`DeviceModel::completion`] for every completion, in arrival order.
    pub per_completion: bool,
    /// A reorder window of this many bytes per DMA: [`DeviceModel::completion`] gets
    /// the data in address order, completions that arrive early wait in the window,
    /// and the engine sends no read request for data more than the window's depth
    /// past the in-order point (a full window stalls). `None`: no window.
    pub reorder: Option<u32>,
    /// Tag ranges per function (`k` tags each): function `i` (numbered as
    /// [`Cx::function`] numbers them: 0 the PF, then its VFs) uses tags
    /// `first + i*k .. first + (i+1)*k`, where `first` is the first tag of `tags`
    /// (0 without it). The tag then tells which function a completion is for, as
    /// in SR-IOV DMA engines that redirect completions to PFs and VFs by tag. With
    /// it the host's engine keeps one read queue and tag pool per function: a
    /// function out of tags or with a full reorder window does not hold up the
    /// others, read requests go out round-robin across functions (one per function
    /// in turn, in order within each), and a completion whose tag is not one of the
    /// receiving function's is an Unexpected Completion. The layout must cover
    /// every function the device can have, VFs up to TotalVFs included (see
    /// [`DmaPolicy::check`]). Reads a model queues in one call are all seen before
    /// the first request leaves. The timed simulator sends no read bursts for such a
    /// device (its write bursts are unchanged). `None`: one pool and one queue for
    /// the whole device.
    pub tags_per_function: Option<u16>,
}

impl DmaPolicy {
    /// The host's tags, no per-completion calls, no window.
    pub const DEFAULT: DmaPolicy = DmaPolicy {
        tags: None,
        per_completion: false,
        reorder: None,
        tags_per_function: None,
    };

    /// Checks the policy against a host with `tag_space` tags for device DMA, for a
    /// device that can have `functions` functions (its own, plus TotalVFs of each
    /// of its PFs): with [`DmaPolicy::tags_per_function`], every function's range
    /// must fit in the tag space (and in `tags` when it is given).
    pub fn check(&self, tag_space: u16, functions: u16) -> Result<(), String> {
        if let Some(k) = self.tags_per_function {
            let first = self.tags.map_or(0, |t| t.0);
            let end = u32::from(first) + u32::from(k) * u32::from(functions.max(1));
            let limit = self
                .tags
                .map_or(u32::from(tag_space), |(f, c)| u32::from(f) + u32::from(c))
                .min(u32::from(tag_space));
            if k == 0 || end > limit {
                return Err(format!(
                    "{functions} functions with {k} tags each need tags {first}..{end}, \
                     past the {limit} the device may use ({tag_space} host tags{}; at least one tag each)",
                    match self.tags {
                        Some((f, c)) => format!(", device tags {f}..{}", u32::from(f) + u32::from(c)),
                        None => String::new(),
                    }
                ));
            }
        }
        if let Some((first, count)) = self.tags {
            if count == 0 || u32::from(first) + u32::from(count) > u32::from(tag_space) {
                return Err(format!(
                    "DMA tags {first}..{} do not fit the host's {tag_space} tags (and must be at least one)",
                    u32::from(first) + u32::from(count)
                ));
            }
        }
        if self.reorder == Some(0) {
            return Err("a reorder window of 0 bytes can hold nothing".to_string());
        }
        Ok(())
    }
}

impl Default for DmaPolicy {
    fn default() -> Self {
        DmaPolicy::DEFAULT
    }
}

/// A request that arrived for a device, as [`DeviceModel::accept`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A memory write of `len` bytes at `offset` in BAR `bar` (posted).
    Write {
        /// BAR number.
        bar: u8,
        /// Offset in the BAR.
        offset: u64,
        /// Bytes.
        len: u32,
    },
    /// A memory read of `len` bytes at `offset` in BAR `bar` (non-posted).
    Read {
        /// BAR number.
        bar: u8,
        /// Offset in the BAR.
        offset: u64,
        /// Bytes.
        len: u32,
    },
}

/// Why a host refuses a scatter-gather DMA ([`Cx::dma_read_sg`], [`Cx::dma_write_sg`])
/// whole, before any of it runs (see [`sg_total`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SgError {
    /// The segments add up to more than 4 GiB (or past 2^64).
    TooLarge,
    /// A write's segments add up to `segments` bytes, its data has `data`.
    DataMismatch {
        /// The segments' total length.
        segments: u64,
        /// The write data's length.
        data: usize,
    },
}

impl std::fmt::Display for SgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SgError::TooLarge => write!(f, "its segments add up to more than 4 GiB"),
            SgError::DataMismatch { segments, data } => {
                write!(
                    f,
                    "its segments add up to {segments} bytes, its data has {data}"
                )
            }
        }
    }
}

impl std::error::Error for SgError {}

/// The total length of a scatter-gather DMA's segments `(addr, len)`, as every host
/// checks it before running any segment: at most 4 GiB, and for a write (`data`: the
/// length of its data) equal to the data's length.
///
/// ```
/// use pcielab_device::{sg_total, SgError};
/// assert_eq!(sg_total(&[(0x1000, 64), (0x2000, 100)], None), Ok(164));
/// assert_eq!(
///     sg_total(&[(0x1000, 64)], Some(60)),
///     Err(SgError::DataMismatch { segments: 64, data: 60 })
/// );
/// assert_eq!(sg_total(&[(0, u64::MAX), (0, 1)], None), Err(SgError::TooLarge));
/// ```
pub fn sg_total(segs: &[(u64, u64)], data: Option<usize>) -> Result<u64, SgError> {
    let total = segs
        .iter()
        .try_fold(0u64, |a, &(_, l)| a.checked_add(l))
        .filter(|&t| t <= u32::MAX as u64)
        .ok_or(SgError::TooLarge)?;
    match data {
        Some(d) if d as u64 != total => Err(SgError::DataMismatch {
            segments: total,
            data: d,
        }),
        _ => Ok(total),
    }
}

/// A command a device gave through its context; its host applies the commands in
/// order after the call returns. Device authors use the methods of [`Cx`]; hosts
/// match on this.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum Command {
    /// The commands that follow act as function `0` of the device (index into the
    /// functions it declared; see [`Cx::act_as`]) until the next `As`.
    As(u16),
    /// The device can take a request it refused in [`DeviceModel::accept`] again.
    Ready,
    DmaRead {
        id: DmaId,
        addr: u64,
        len: u64,
        pasid: Option<u32>,
    },
    DmaWrite {
        id: DmaId,
        addr: u64,
        data: Vec<u8>,
        poisoned: bool,
        pasid: Option<u32>,
    },
    Complete {
        ticket: ReadTicket,
        data: Vec<u8>,
        poisoned: bool,
    },
    Timer {
        at: SimTime,
        token: u64,
    },
    Msix(u16),
    Msi(u8),
    /// An Ethernet frame out of the device's MAC, to the device at the other end of
    /// its cable (topology key `cable`).
    Ethernet(Vec<u8>),
    Intx(bool),
    Vendor(VendorMessage),
    Pme,
    PmeToAck,
    Ltr(u16, u16),
    Raw(Vec<u8>),
    Atomic {
        id: DmaId,
        addr: u64,
        /// Boxed: its 128-bit operands would double the size of every command.
        op: Box<AtomicOp>,
    },
    /// A scatter-gather read ([`Cx::dma_read_sg`]): the segments `(addr, len)` in
    /// order, their data concatenated in one `dma_done`.
    DmaReadSg {
        id: DmaId,
        segs: Vec<(u64, u64)>,
    },
    /// A scatter-gather write ([`Cx::dma_write_sg`]): `data` holds the segments'
    /// bytes back to back.
    DmaWriteSg {
        id: DmaId,
        segs: Vec<(u64, u64)>,
        data: Vec<u8>,
    },
}

/// What a device sees while its host calls it.
#[derive(Debug)]
pub struct Cx<'a> {
    now: SimTime,
    bdf: Bdf,
    function: u16,
    acting: u16,
    emitted: u16,
    cmds: &'a mut Vec<Command>,
    state: &'a mut DeviceState,
    config: Option<&'a mut pcielab_config::ConfigSpace>,
    spare: &'a mut Vec<Vec<u8>>,
}

/// The device's own state that its [`Cx`] carries from call to call: the next DMA
/// number and its seeded RNG stream (a host keeps one per device).
#[derive(Debug, Clone)]
pub struct DeviceState {
    /// The number the next DMA gets.
    pub next_dma: u64,
    /// The device's RNG stream.
    pub rng: Rng,
}

impl<'a> Cx<'a> {
    /// For hosts: the context of one call to a device at time `now`, about function
    /// `function` (0 for a single-function device) whose requester ID is `bdf` and
    /// whose configuration space is `config`. Commands go to `cmds`; `state` is the
    /// device's (one per device, kept from call to call); `spare` holds buffers the
    /// host can hand out again ([`Cx::buffer`]).
    pub fn new(
        now: SimTime,
        (function, bdf): (u16, Bdf),
        cmds: &'a mut Vec<Command>,
        state: &'a mut DeviceState,
        config: Option<&'a mut pcielab_config::ConfigSpace>,
        spare: &'a mut Vec<Vec<u8>>,
    ) -> Cx<'a> {
        Cx {
            now,
            bdf,
            function,
            acting: function,
            emitted: function,
            cmds,
            state,
            config,
            spare,
        }
    }
}

impl Cx<'_> {
    fn push(&mut self, c: Command) {
        if self.acting != self.emitted {
            self.cmds.push(Command::As(self.acting));
            self.emitted = self.acting;
        }
        self.cmds.push(c);
    }
    /// The function this call is about: 0 for function 0 (a single-function device
    /// has only it). Functions are numbered the same way by every host: the
    /// device's own functions by function number, then the SR-IOV VFs of each
    /// physical function in order (a PF with 4 VFs: 0 is the PF, 1–4 its VFs). A BAR
    /// access is about the function whose BAR it hit; a DMA's calls (`completion`,
    /// `dma_done`) are about the function that issued it.
    pub fn function(&self) -> u16 {
        self.function
    }
    /// Makes the commands that follow act as function `index` (its requester ID for
    /// DMA, its MSI-X table for interrupts), until the next `act_as`. A call starts
    /// acting as [`Cx::function`].
    ///
    /// ```
    /// use pcielab_device::{Command, Cx, DeviceState};
    /// use pcielab_sim::{Rng, SimTime};
    /// use pcielab_wire::Bdf;
    /// let (mut cmds, mut spare) = (Vec::new(), Vec::new());
    /// let mut st = DeviceState { next_dma: 0, rng: Rng::new(1) };
    /// let bdf = Bdf::new(1, 0, 0).unwrap();
    /// let mut cx = Cx::new(SimTime::ZERO, (0, bdf), &mut cmds, &mut st, None, &mut spare);
    /// cx.msix(0); // function 0's vector 0
    /// cx.act_as(2);
    /// cx.msix(0); // function 2's vector 0
    /// assert_eq!(cmds, [Command::Msix(0), Command::As(2), Command::Msix(0)]);
    /// ```
    pub fn act_as(&mut self, index: u16) {
        self.acting = index;
    }
    /// Tells the host that the device can take requests again after it refused one
    /// in [`DeviceModel::accept`]: the host offers the held requests again, oldest
    /// first, and returns their flow-control credits as the device takes them.
    pub fn ready(&mut self) {
        self.push(Command::Ready);
    }
    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }
    /// The device's requester ID (after enumeration).
    pub fn bdf(&self) -> Bdf {
        self.bdf
    }
    /// The device's configuration space (function 0), as host software programmed it:
    /// read Command (Bus Master), MSI-X control or device registers; write status bits.
    pub fn config(&mut self) -> Option<&mut pcielab_config::ConfigSpace> {
        self.config.as_deref_mut()
    }
    /// The device's seeded RNG stream.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.state.rng
    }
    fn dma_id(&mut self) -> DmaId {
        let id = DmaId(self.state.next_dma);
        self.state.next_dma += 1;
        id
    }
    /// Reads `len` bytes of host (or peer) memory at `addr`; [`DeviceModel::dma_done`]
    /// receives the data. `len` 0 finishes at once with no data.
    pub fn dma_read(&mut self, addr: u64, len: u64) -> DmaId {
        self.read(addr, len, None)
    }
    fn read(&mut self, addr: u64, len: u64, pasid: Option<u32>) -> DmaId {
        let id = self.dma_id();
        self.push(Command::DmaRead {
            id,
            addr,
            len,
            pasid,
        });
        id
    }
    fn write(&mut self, addr: u64, data: Vec<u8>, poisoned: bool, pasid: Option<u32>) -> DmaId {
        let id = self.dma_id();
        self.push(Command::DmaWrite {
            id,
            addr,
            data,
            poisoned,
            pasid,
        });
        id
    }
    /// Like [`Cx::dma_read`], in the address space of process `pasid`: every read
    /// request carries a PASID TLP prefix (4 more bytes on the wire), and an IOMMU
    /// with PASID support translates it by that PASID's table (see the `pasid` notes
    /// in the crate README). The function's PASID capability must be enabled and
    /// `pasid` below `1 << Max PASID Width`; otherwise nothing is sent, the DMA fails
    /// and the simulator records the error.
    pub fn dma_read_pasid(&mut self, addr: u64, len: u64, pasid: u32) -> DmaId {
        self.read(addr, len, Some(pasid))
    }
    /// An empty buffer for the data of a DMA write, with room for at least `len`
    /// bytes: a buffer of an earlier write when the simulator has one spare (a DMA
    /// write whose data goes in one TLP or burst hands its buffer on without copying
    /// it), so that a stream of writes allocates nothing once it runs.
    ///
    /// ```
    /// # use pcielab_device::{DeviceModel, Cx};
    /// #[derive(Debug)]
    /// struct Writer;
    /// impl DeviceModel for Writer {
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         let mut data = cx.buffer(4096);
    ///         data.extend((0..4096).map(|i| i as u8));
    ///         cx.dma_write(0x1000_0000, data);
    ///     }
    /// }
    /// ```
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        match self.spare.pop() {
            Some(mut b) => {
                b.clear();
                b.reserve(len);
                b
            }
            None => Vec::with_capacity(len),
        }
    }
    /// Writes `data` to host (or peer) memory at `addr`; [`DeviceModel::dma_done`] is
    /// called once the last MWr has left the device.
    pub fn dma_write(&mut self, addr: u64, data: Vec<u8>) -> DmaId {
        self.write(addr, data, false, None)
    }
    /// A scatter-gather read: one DMA of several segments `(addr, len)`, each split
    /// into read requests as its own [`Cx::dma_read`] would be (the same TLPs on the
    /// wire), with one [`DeviceModel::dma_done`] once every segment is in: the data
    /// of all segments back to back, and `ok` only if every segment succeeded.
    /// What a DMA engine with descriptor lists does. A host refuses it whole, `ok`
    /// false, where [`sg_total`] does.
    ///
    /// ```
    /// use pcielab_device::{Command, Cx, DeviceState};
    /// use pcielab_sim::{Rng, SimTime};
    /// use pcielab_wire::Bdf;
    /// let (mut cmds, mut spare) = (Vec::new(), Vec::new());
    /// let mut st = DeviceState { next_dma: 0, rng: Rng::new(1) };
    /// let bdf = Bdf::new(1, 0, 0).unwrap();
    /// let mut cx = Cx::new(SimTime::ZERO, (0, bdf), &mut cmds, &mut st, None, &mut spare);
    /// let id = cx.dma_read_sg(&[(0x1000, 64), (0x1800, 64)]);
    /// assert_eq!(cmds, [Command::DmaReadSg { id, segs: vec![(0x1000, 64), (0x1800, 64)] }]);
    /// ```
    pub fn dma_read_sg(&mut self, segs: &[(u64, u64)]) -> DmaId {
        let id = self.dma_id();
        self.push(Command::DmaReadSg {
            id,
            segs: segs.to_vec(),
        });
        id
    }
    /// A scatter-gather write: `data` goes to the segments `(addr, len)` in order
    /// (their lengths add up to `data.len()`; a host refuses the DMA, `ok` false,
    /// when they do not, see [`sg_total`]). Each segment is split as its own
    /// [`Cx::dma_write`] would be, and one [`DeviceModel::dma_done`] follows the last.
    pub fn dma_write_sg(&mut self, segs: &[(u64, u64)], data: Vec<u8>) -> DmaId {
        let id = self.dma_id();
        self.push(Command::DmaWriteSg {
            id,
            segs: segs.to_vec(),
            data,
        });
        id
    }
    /// Like [`Cx::dma_write`], in the address space of process `pasid` (see
    /// [`Cx::dma_read_pasid`]): every MWr carries a PASID TLP prefix.
    pub fn dma_write_pasid(&mut self, addr: u64, data: Vec<u8>, pasid: u32) -> DmaId {
        self.write(addr, data, false, Some(pasid))
    }
    /// Like [`Cx::dma_write`], with data the device knows to be bad: every MWr
    /// carries the EP bit (data poisoning, PCIe Base Spec 2.7.2). The device sets
    /// Master Data Parity Error when its Parity Error Response bit is set.
    pub fn dma_write_poisoned(&mut self, addr: u64, data: Vec<u8>) -> DmaId {
        self.write(addr, data, true, None)
    }
    /// Sends a vendor-defined message (posted). A payload that is not whole DWs or
    /// exceeds MPS is not sent (the simulator records the error).
    pub fn vendor_message(&mut self, msg: VendorMessage) {
        self.push(Command::Vendor(msg));
    }
    /// Signals a power-management event (a wake-up request; PCIe Base Spec 5.3.3):
    /// the function sets PME_Status in its PMCSR. While PME_Status and PME_En are
    /// both set, a PM_PME message goes to the root complex, and again after every
    /// PME service timeout (`SimConfig::pme_service_timeout`) until software clears
    /// PME_Status. A function whose PM capability does not advertise PME support
    /// (psmem: `pme = true`) signals nothing: the simulator records the error.
    pub fn pme(&mut self) {
        self.push(Command::Pme);
    }
    /// Acknowledges the PME_Turn_Off that [`DeviceModel::pme_turn_off`] held (returned
    /// false for): PME_TO_Ack goes up from the device's upstream port. Without one
    /// held, nothing is sent and the simulator records the error.
    pub fn pme_to_ack(&mut self) {
        self.push(Command::PmeToAck);
    }
    /// Reports the device's latency tolerance with an LTR message: `snoop` and
    /// `no_snoop` in the registers' form (see `pcielab_fabric::timed::ltr_value`; 0: no
    /// requirement). Sent only while LTR Mechanism Enable (Device Control 2) is set.
    pub fn ltr(&mut self, snoop: u16, no_snoop: u16) {
        self.push(Command::Ltr(snoop, no_snoop));
    }
    /// Completes a read answered with [`ReadReply::Later`].
    pub fn complete(&mut self, ticket: ReadTicket, data: Vec<u8>) {
        self.push(Command::Complete {
            ticket,
            data,
            poisoned: false,
        });
    }
    /// Completes a read answered with [`ReadReply::Later`] with data known to be bad:
    /// the completions carry the EP bit.
    pub fn complete_poisoned(&mut self, ticket: ReadTicket, data: Vec<u8>) {
        self.push(Command::Complete {
            ticket,
            data,
            poisoned: true,
        });
    }
    /// Calls [`DeviceModel::timer`] with `token` after `delay`.
    pub fn timer(&mut self, delay: SimDuration, token: u64) {
        let at = self.now + delay;
        self.push(Command::Timer { at, token });
    }
    /// Sends an Ethernet frame (its bytes, FCS not included) out of the device's MAC
    /// to the device at the other end of its cable (`cable = "NODE"` in the topology);
    /// the peer's [`DeviceModel::ethernet_receive`] gets it. Timing on the wire is the
    /// sender's: send when the frame has left the MAC. Hosts without cables count the
    /// frame as dropped.
    pub fn ethernet_send(&mut self, frame: Vec<u8>) {
        self.push(Command::Ethernet(frame));
    }
    /// Raises MSI-X vector `vector` (as the function's MSI-X table describes it).
    pub fn msix(&mut self, vector: u16) {
        self.push(Command::Msix(vector));
    }
    /// Raises MSI vector `vector`.
    pub fn msi(&mut self, vector: u8) {
        self.push(Command::Msi(vector));
    }
    /// Asserts (`true`) or deasserts the function's INTx pin (the Interrupt Pin
    /// register says which). The Interrupt Status bit follows; an Assert_INTx message
    /// goes upstream unless the Command register's Interrupt Disable bit is set, and a
    /// Deassert_INTx follows when the device deasserts. Switches aggregate and swizzle
    /// the virtual wires; the host sees them in `FabricSim::intx_events`.
    pub fn intx(&mut self, assert: bool) {
        self.push(Command::Intx(assert));
    }
    /// An AtomicOp on host (or peer) memory at `addr`, which must be aligned to the
    /// operand size: [`DeviceModel::dma_done`] receives the target's original value
    /// (little-endian, the operand size). The function needs AtomicOp Requester Enable
    /// (Device Control 2 bit 6, see `FabricSim::enable_atomic_ops_to_root`) and Bus
    /// Master Enable; otherwise, or when misaligned, nothing is sent and the DMA fails
    /// at once (the simulator records why). The completer is the root complex for host
    /// memory (its root port must advertise the size in Device Capabilities 2, or it
    /// answers Unsupported Request); a port with AtomicOp Egress Blocking set refuses
    /// it on the way.
    ///
    /// ```
    /// use pcielab_device::{AtomicOp, DmaId, DeviceModel, Cx};
    /// /// A device that counts events in host memory at 0x1000 (a 64-bit counter).
    /// #[derive(Debug)]
    /// struct Counter;
    /// impl DeviceModel for Counter {
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         cx.atomic(0x1000, AtomicOp::FetchAdd64(1));
    ///     }
    ///     fn dma_done(&mut self, _id: DmaId, ok: bool, old: &[u8], _cx: &mut Cx<'_>) {
    ///         if ok {
    ///             let before = u64::from_le_bytes(old.try_into().unwrap());
    ///             let _ = before; // the counter's value before this event
    ///         }
    ///     }
    /// }
    /// ```
    pub fn atomic(&mut self, addr: u64, op: AtomicOp) -> DmaId {
        let id = self.dma_id();
        self.push(Command::Atomic {
            id,
            addr,
            op: Box::new(op),
        });
        id
    }
    /// Sends one TLP the device built itself, as its bytes on the wire (prefixes,
    /// header, data, an ECRC digest if TD is set), on the device's link: the way to
    /// model a device that gets a TLP wrong, or to send one the DMA engine does not
    /// make. The port at the other end of the link checks it as a receiver does
    /// (`wire::tlp::check::check_rx` with the fabric's Max_Payload_Size):
    ///
    /// * **Malformed** (undecodable, payload over MPS, crossing 4 KiB, illegal byte
    ///   enables, …): the port discards it and logs a Malformed TLP in its AER
    ///   registers, the header in its Header Log (an ERR_FATAL by default).
    /// * **A memory read or write, an AtomicOp, a completion, a vendor-defined
    ///   message**: it goes
    ///   on as one of the fabric's own TLPs, with the device's requester ID, tag,
    ///   address, byte enables, EP and TD (a wrong ECRC digest fails the check where
    ///   the TLP ends, if that function checks ECRC). Completions of a read sent
    ///   this way come back through [`DeviceModel::raw_completion`] unless the DMA
    ///   engine holds the tag (a device that reuses its engine's tags gets what such
    ///   a device would).
    /// * **A valid TLP the simulator does not carry** (I/O, configuration and locked
    ///   requests from below, other messages, a write with non-contiguous
    ///   byte enables): the port answers a non-posted request with Unsupported Request
    ///   and logs it; a posted one is dropped; the simulator records the error.
    ///
    /// The fabric's trace shows a Malformed or uncarried TLP byte for byte, and one
    /// that goes on in the fabric's own encoding of it (its byte enables, TC 0).
    ///
    /// ```
    /// use pcielab_device::{DeviceModel, Cx};
    /// use pcielab_wire::tlp::TlpRepr;
    /// use pcielab_wire::Tag;
    /// /// A device that writes 512 bytes in one TLP, past a Max_Payload_Size of 256.
    /// #[derive(Debug)]
    /// struct TooLong;
    /// impl DeviceModel for TooLong {
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         let data = [0xabu8; 512];
    ///         let tag = Tag::new(0).unwrap();
    ///         let t = TlpRepr::mem_write(cx.bdf(), tag, 0x1000, &data).unwrap();
    ///         cx.send_raw(t.to_vec().unwrap());
    ///     }
    /// }
    /// ```
    pub fn send_raw(&mut self, tlp: Vec<u8>) {
        self.push(Command::Raw(tlp));
    }
}

/// A device model: what a PCIe device does behind its functions. Every method has a default, so a device
/// implements only what it does.
pub trait DeviceModel: core::fmt::Debug {
    /// Called once when the simulation starts (links are training).
    fn start(&mut self, _cx: &mut Cx<'_>) {}
    /// A memory read of `buf.len()` bytes at `offset` in BAR `bar`.
    fn mem_read(&mut self, _bar: u8, _offset: u64, _buf: &mut [u8], _cx: &mut Cx<'_>) -> ReadReply {
        ReadReply::Unsupported
    }
    /// A memory write at `offset` in BAR `bar`.
    fn mem_write(&mut self, _bar: u8, _offset: u64, _data: &[u8], _cx: &mut Cx<'_>) {}
    /// An I/O read (IORd) of `buf.len()` bytes (1..=4, within one DW) at `offset` in
    /// I/O BAR `bar`. The default answers Unsupported Request.
    fn io_read(&mut self, _bar: u8, _offset: u64, _buf: &mut [u8], _cx: &mut Cx<'_>) -> ReadReply {
        ReadReply::Unsupported
    }
    /// An I/O write (IOWr) of `data` (1..=4 bytes, within one DW) at `offset` in I/O
    /// BAR `bar`. I/O writes are non-posted: [`ReadReply::Now`] sends a Cpl with
    /// Successful Completion status after the device latency, [`ReadReply::Later`] waits
    /// for [`Cx::complete`] (its data is ignored), [`ReadReply::Unsupported`] answers
    /// Unsupported Request. The default ignores the data and completes successfully.
    fn io_write(&mut self, _bar: u8, _offset: u64, _data: &[u8], _cx: &mut Cx<'_>) -> ReadReply {
        ReadReply::Now
    }
    /// A DMA finished: `ok` false after a completion timeout, an error completion or
    /// a poisoned completion; `data` holds a read's bytes (empty for writes; the bytes
    /// of a failed read are zero where no good data came).
    fn dma_done(&mut self, _id: DmaId, _ok: bool, _data: &[u8], _cx: &mut Cx<'_>) {}
    /// Data of read DMA `id` arrived: `data` holds the bytes at `offset` from the start
    /// of the DMA. Called only when the device's [`DmaPolicy`] asks for it: for every
    /// good completion in the order the completions arrive (which, across tags, need
    /// not be address order), or, with a reorder window, in address order as the
    /// window releases it; always before [`DeviceModel::dma_done`] for the whole DMA.
    /// A device that streams data on as it comes in works here; a device that keeps
    /// its own window across DMAs can use [`crate::ReorderWindow`]. For a
    /// scatter-gather read ([`Cx::dma_read_sg`]) `offset` counts in the data of all
    /// its segments, and a reorder window keeps each segment in order on its own.
    /// Default: nothing.
    fn completion(&mut self, _id: DmaId, _offset: u64, _data: &[u8], _cx: &mut Cx<'_>) {}
    /// Asked before the device is given a request that arrived for it (`what`): return
    /// false to refuse it for now. The host then holds it, with every later request,
    /// in the receive buffer of the device's port, whose flow-control credits do not
    /// return, so the sender slows down; [`Cx::ready`] makes the host offer it again.
    /// Default: always true.
    fn accept(&mut self, _what: Incoming, _cx: &mut Cx<'_>) -> bool {
        true
    }
    /// The device's timing: core clock, datapath width and per-operation latencies,
    /// which the timed simulator charges. Default: [`DeviceTiming::NONE`] (the
    /// simulator's fixed endpoint latency only).
    fn timing(&self) -> DeviceTiming {
        DeviceTiming::NONE
    }
    /// How the device's DMA engine works (asked once, when the host attaches the
    /// device). Default: [`DmaPolicy::DEFAULT`].
    fn dma_policy(&self) -> DmaPolicy {
        DmaPolicy::DEFAULT
    }
    /// A timer set with [`Cx::timer`] fired.
    fn timer(&mut self, _token: u64, _cx: &mut Cx<'_>) {}
    /// An Ethernet frame arrived from the device at the other end of the cable
    /// ([`Cx::ethernet_send`]). Return false if the device has no MAC to take it (the
    /// host counts it as dropped).
    fn ethernet_receive(&mut self, _frame: Vec<u8>, _cx: &mut Cx<'_>) -> bool {
        false
    }
    /// A vendor-defined message from `from` reached the device (routed by ID to one of
    /// its functions: `msg.route`). Return true if the device supports it; false (the
    /// default) makes a Type 0 message an Unsupported Request (logged by the function
    /// it was routed to) and drops a Type 1 message silently.
    fn vendor_message(&mut self, _from: Bdf, _msg: &VendorMessage, _cx: &mut Cx<'_>) -> bool {
        false
    }
    /// PME_Turn_Off reached the device (the root complex prepares to remove power):
    /// return true (the default) to answer PME_TO_Ack at once, or false to finish
    /// first (outstanding DMA, say) and answer later with [`Cx::pme_to_ack`].
    fn pme_turn_off(&mut self, _cx: &mut Cx<'_>) -> bool {
        true
    }
    /// The device was reset because its link went down (a DL_Down Upstream Port, see
    /// the `link_down` notes in the crate README): its configuration space is back to
    /// its defaults and its DMAs in flight are gone without [`DeviceModel::dma_done`]. A
    /// model forgets what it had in flight here. Default: nothing.
    fn reset(&mut self, _cx: &mut Cx<'_>) {}
    /// Host software started a Function Level Reset of function [`Cx::function`]
    /// (Initiate FLR, Device Control bit 15, written to that PF or VF): the
    /// function's configuration space is back to its defaults (Bus Master Enable
    /// clear, MSI-X disabled; a VF stays a VF), and its DMAs in flight are gone
    /// without [`DeviceModel::dma_done`] (their late completions are discarded and
    /// counted, never delivered). The device's other functions keep running. A
    /// model forgets what that function had in flight here. Default: nothing.
    fn function_reset(&mut self, _cx: &mut Cx<'_>) {}
    /// Host software set (`true`) or cleared Bus Master Enable in the Command register
    /// of the device's function 0 (a reset clears it too, without this call: see
    /// [`DeviceModel::reset`]). While it is clear the function may issue no memory
    /// requests (PCIe Base Spec 7.5.1.1.3): a DMA asked for then fails at once and the
    /// simulator records the error; MSI and MSI-X writes are not sent. A device that
    /// was reset resumes here, once host software has configured it again (see
    /// `FabricSim::recover`). Default: nothing.
    fn bus_master(&mut self, _enabled: bool, _cx: &mut Cx<'_>) {}
    /// A completion for a read the device sent with [`Cx::send_raw`], as its bytes
    /// (the fabric's encoding: header and data, no prefix or digest). Completions
    /// keep coming until the read's bytes are all there or one has an error status;
    /// the device times out such reads itself, if it wants to. Default: nothing.
    fn raw_completion(&mut self, _tlp: &[u8], _cx: &mut Cx<'_>) {}
    /// A summary for reports (workload results), if the device has one.
    fn report(&self) -> Option<serde_json::Value> {
        None
    }
    /// Units of work done so far (a DMA stream: DMAs finished), for progress bars: a
    /// cheap counter, unlike `report`. Default: none.
    fn progress(&self) -> Option<u64> {
        None
    }
}
