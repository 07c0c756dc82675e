//! Effective DMA bandwidth of reads, writes and simultaneous reads and writes.
//!
//! A transfer of `size` bytes becomes TLPs; each TLP costs framing, header, optional
//! ECRC and its payload on the link. The effective bandwidth is the link bandwidth
//! (after DLLPs and SKPs, see [`crate::link`]) times data bytes over link bytes, limited by
//! whichever direction saturates first:
//!
//! ```text
//!  device ──MWr (hdr+data)──▶ host      write:  eff = link × size / (TLPs × hdr + size)
//!  device ──MRd (hdr)──────▶ host       read:   requests out, completions in; the
//!  device ◀──CplD (hdr+data)─ host              direction that fills first sets the rate
//! ```
//!
//! ## DLLPs in spec mode
//!
//! pcie-bench charges every direction one ACK and one UpdateFC per latency limit
//! ([`link::link_gbps`]). Spec mode charges each direction the DLLPs it physically
//! carries: the ACKs for the TLPs received on the *other* direction, and an UpdateFC per
//! flow-control class for which the receiver there advertises finite credits. Both
//! follow the latency-timer rule of the specification (as the simulator implements it):
//! a timer starts when a TLP arrives (for UpdateFC: when its credits are freed) and no
//! timer is running; when it expires, after the Ack latency limit (UpdateFC latency
//! guideline) of [`link`], one DLLP covers everything received so far. So a direction
//! carries at most one ACK per limit, and never more than one per TLP it acknowledges.
//!
//! Where the TLPs arrive matters, so the traffic is taken as periodic: per transfer
//! period `T` (link bytes of the busier direction per transfer), each TLP class's TLPs
//! of one transfer leave back to back (evenly spaced by their mean wire size), as a DMA
//! engine issues a transfer's requests together and a saturated direction sends
//! completions or write data back to back. [`dllp_timers`] counts the timers per period
//! exactly for that pattern. Classes with DLLPs:
//!
//! * device → host TLPs (MWr, MRd): ACKs and UpdateFC(P), UpdateFC(NP) host → device
//!   (the host's posted and non-posted receive buffers are finite);
//! * host → device completions: ACKs device → host, and no UpdateFC (the requester
//!   advertises infinite completion credits, as the specification requires of
//!   endpoints).
//!
//! The period is the fixed point
//!
//! ```text
//!  T = max(up TLP bytes + 8 B × DLLPs_up(T), down TLP bytes + 8 B × DLLPs_down(T))
//!  eff = size × wire / T            (wire: link::wire_gbps, after SKP only)
//! ```
//!
//! The DLLP counts per period never decrease as `T` grows (sparser arrivals share
//! fewer timers) and take finitely many values, so iterating from the DLLP-free period
//! climbs to the least fixed point and stops there exactly, in two or three steps in
//! practice. A one-way write stream thus pays no DLLP at all on its data direction;
//! a read stream pays for the ACKs and UpdateFC(NP)s of its read requests, which come
//! at most as often as requests arrive (one per MRRS bytes, in bursts per transfer).
//! Credits are assumed never to run short (buffers cover the bandwidth-delay product),
//! and the spec's 30 µs periodic UpdateFC of idle classes is not charged (one DLLP per
//! 30 µs: ≤ 0.1 % at Gen1 x1).

use crate::config::{Mode, PcieConfig};
use crate::error::{Error, Result};
use crate::link;
use pcielab_wire::Generation;

/// Bytes of framing per TLP outside FLIT mode: STP/SDP start (with the sequence number)
/// plus LCRC and END — 8 bytes at both 8b/10b and 128b/130b.
pub const TLP_FRAMING_BYTES: u32 = 8;
/// Header bytes of a completion (3DW).
pub const CPL_HEADER_BYTES: u32 = 12;
/// Bytes of the optional ECRC digest.
pub const ECRC_BYTES: u32 = 4;
/// Bytes of the Orthogonal Header Content a FLIT-mode request needs when its first or
/// last DW is partially enabled (OHC-A1, 1 DW).
pub const FLIT_OHC_BYTES: u32 = 4;

const PAGE: u64 = 4096;

/// Largest transfer the model accepts, bytes (256 TiB). Byte counts stay far from `u64`
/// overflow below it; the traffic functions clamp larger sizes to it.
pub const MAX_TRANSFER_BYTES: u64 = 1 << 48;

/// Bytes (and TLP counts) one transfer puts on the link, split by direction as seen from
/// the requester: requests (and write data) go out, completions come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Traffic {
    /// TLPs sent by the requester (MWr or MRd).
    pub req_tlps: u64,
    /// Link bytes sent by the requester, framing and payload included.
    pub req_bytes: u64,
    /// Completion TLPs returned to the requester.
    pub cpl_tlps: u64,
    /// Link bytes of those completions.
    pub cpl_bytes: u64,
}

impl Traffic {
    /// The traffic of two transfers together.
    pub const fn plus(self, o: Traffic) -> Traffic {
        Traffic {
            req_tlps: self.req_tlps + o.req_tlps,
            req_bytes: self.req_bytes + o.req_bytes,
            cpl_tlps: self.cpl_tlps + o.cpl_tlps,
            cpl_bytes: self.cpl_bytes + o.cpl_bytes,
        }
    }
    /// The traffic of `n` such transfers.
    pub const fn times(self, n: u64) -> Traffic {
        Traffic {
            req_tlps: self.req_tlps * n,
            req_bytes: self.req_bytes * n,
            cpl_tlps: self.cpl_tlps * n,
            cpl_bytes: self.cpl_bytes * n,
        }
    }
}

/// One point of the bandwidth curve, all in Gb/s of data.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwPoint {
    /// Transfer size in bytes.
    pub size: u64,
    /// DMA read bandwidth (device reads host memory).
    pub read_gbps: f64,
    /// DMA write bandwidth.
    pub write_gbps: f64,
    /// Per-direction bandwidth when every read of `size` is paired with a write of `size`.
    pub readwrite_gbps: f64,
}

/// The bandwidth model for one configuration; cheap to build, cheaper to evaluate.
///
/// ```
/// use pcielab_model::{Model, PcieConfig};
/// use pcielab_wire::Generation;
/// // Gen3 x8, MPS 256, MRRS 512, 64-bit addresses (the pcie-bench reference setting).
/// let m = Model::new(PcieConfig::new(Generation::Gen3, 8)?)?;
/// let p = m.point(64)?;
/// assert_eq!(format!("{:.3} {:.3} {:.3}", p.write_gbps, p.read_gbps, p.readwrite_gbps),
///            "42.098 44.103 33.077");
/// # Ok::<(), pcielab_model::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Model {
    cfg: PcieConfig,
    raw: f64,
    link: f64,
    /// TLP + DLLP bandwidth of a direction (spec mode; `link` in compat mode).
    wire: f64,
    /// Bytes of one DLLP on the wire in spec mode (0 in FLIT mode).
    dllp: f64,
    /// Ack latency limit and UpdateFC latency guideline in link bytes (spec mode).
    ack_bytes: f64,
    fc_bytes: f64,
    flit: bool,
    /// Per-TLP bytes besides payload: MWr/MRd and CplD.
    req_overhead: u32,
    cpl_overhead: u32,
}

impl Model {
    /// Builds the model; fails if the configuration is not allowed in its mode.
    pub fn new(cfg: PcieConfig) -> Result<Model> {
        cfg.check()?;
        let flit = cfg.mode == Mode::Spec && cfg.gen == Generation::Gen6;
        let framing = if flit { 0 } else { TLP_FRAMING_BYTES };
        let ecrc = if cfg.ecrc { ECRC_BYTES } else { 0 };
        let link = link::link_gbps(cfg.mode, cfg.gen, cfg.lanes, cfg.mps);
        let (g, l, mode) = (cfg.gen, cfg.lanes, cfg.mode);
        Ok(Model {
            cfg,
            raw: link::raw_gbps(mode, g, l),
            link,
            wire: match mode {
                Mode::Compat => link,
                Mode::Spec => link::wire_gbps(mode, g, l),
            },
            dllp: if flit { 0.0 } else { link::DLLP_BYTES as f64 },
            ack_bytes: link::symbol_time_bytes(g, l, link::ack_limit(mode, g, l, cfg.mps)),
            fc_bytes: link::symbol_time_bytes(g, l, link::fc_limit(mode, g, l, cfg.mps)),
            flit,
            req_overhead: framing + cfg.addr.request_header_bytes() + ecrc,
            cpl_overhead: framing + CPL_HEADER_BYTES + ecrc,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PcieConfig {
        &self.cfg
    }
    /// Raw link bandwidth after line encoding, Gb/s.
    pub fn raw_gbps(&self) -> f64 {
        self.raw
    }
    /// Bandwidth available to TLPs with one ACK and one UpdateFC per latency limit,
    /// Gb/s (see [`link::link_gbps`]); what pcie-bench mode's bandwidths start from, and
    /// the NIC and latency models in both modes.
    pub fn link_gbps(&self) -> f64 {
        self.link
    }
    /// Bandwidth of a direction for TLPs and DLLPs together, Gb/s (see
    /// [`link::wire_gbps`]); what spec mode's DMA bandwidths start from. Equal to
    /// [`Model::link_gbps`] in pcie-bench mode.
    pub fn wire_gbps(&self) -> f64 {
        self.wire
    }
    /// Whether TLPs are accounted in FLIT mode (Gen6 in spec mode).
    pub fn flit_mode(&self) -> bool {
        self.flit
    }
    /// Link bytes of one request TLP (MWr or MRd) without its payload, in compat mode
    /// and for DW-aligned requests in spec mode.
    pub fn request_overhead_bytes(&self) -> u32 {
        self.req_overhead
    }
    /// Link bytes of one completion TLP without its payload.
    pub fn completion_overhead_bytes(&self) -> u32 {
        self.cpl_overhead
    }

    /// The TLPs of a DMA write of `size` bytes starting at `addr`.
    ///
    /// Compat mode ignores `addr` and counts `ceil(size / MPS)` TLPs carrying exactly
    /// `size` payload bytes. Spec mode splits at MPS and at 4 KiB boundaries and rounds
    /// each payload out to whole DWs. `size` 0 gives no traffic; sizes above
    /// [`MAX_TRANSFER_BYTES`] are clamped to it.
    pub fn write_traffic(&self, addr: u64, size: u64) -> Traffic {
        let (addr, size) = (addr % PAGE, size.min(MAX_TRANSFER_BYTES));
        let mps = self.cfg.mps.bytes() as u64;
        match self.cfg.mode {
            Mode::Compat => {
                let tlps = size.div_ceil(mps);
                Traffic {
                    req_tlps: tlps,
                    req_bytes: tlps * self.req_overhead as u64 + size,
                    ..Traffic::default()
                }
            }
            Mode::Spec => split_sum(addr, size, mps, |a, len| Traffic {
                req_tlps: 1,
                req_bytes: self.spec_request(a, len, true),
                ..Traffic::default()
            }),
        }
    }

    /// The TLPs of a DMA read of `size` bytes starting at `addr`: read requests out,
    /// completions back.
    ///
    /// Compat mode ignores `addr`: `ceil(size / MRRS)` requests, `ceil(size / MPS)`
    /// completions (`ceil(size / RCB)` with RCB chunks). Spec mode splits requests at
    /// MRRS and 4 KiB; each request's completions are cut at RCB boundaries (RCB chunks),
    /// or else returned whole when they fit in MPS and otherwise as a first completion up
    /// to the first RCB boundary followed by MPS-sized ones; payloads are whole DWs.
    /// Sizes above [`MAX_TRANSFER_BYTES`] are clamped to it.
    pub fn read_traffic(&self, addr: u64, size: u64) -> Traffic {
        // Every splitting rule depends on the address modulo 4 KiB only.
        let (addr, size) = (addr % PAGE, size.min(MAX_TRANSFER_BYTES));
        let mrrs = self.cfg.mrrs.bytes() as u64;
        match self.cfg.mode {
            Mode::Compat => {
                let req_tlps = size.div_ceil(mrrs);
                let chunk = if self.cfg.rcb_chunks {
                    self.cfg.rcb.bytes()
                } else {
                    self.cfg.mps.bytes()
                } as u64;
                let cpl_tlps = size.div_ceil(chunk);
                Traffic {
                    req_tlps,
                    req_bytes: req_tlps * self.req_overhead as u64,
                    cpl_tlps,
                    cpl_bytes: cpl_tlps * self.cpl_overhead as u64 + size,
                }
            }
            Mode::Spec => split_sum(addr, size, mrrs, |a, len| {
                let (cpl_tlps, cpl_bytes) = self.spec_completions(a, len);
                Traffic {
                    req_tlps: 1,
                    req_bytes: self.spec_request(a, len, false),
                    cpl_tlps,
                    cpl_bytes,
                }
            }),
        }
    }

    /// Link bytes of one spec-mode request TLP for bytes `[a, a + len)`.
    fn spec_request(&self, a: u64, len: u64, with_payload: bool) -> u64 {
        let mut bytes = self.req_overhead as u64;
        if with_payload {
            bytes += dw_span(a, len) * 4;
        }
        if self.flit && (a % 4 != 0 || (a + len) % 4 != 0) {
            bytes += FLIT_OHC_BYTES as u64;
        }
        bytes
    }

    /// Spec-mode completions for one read request of bytes `[a, a + len)`:
    /// (completion TLPs, link bytes).
    fn spec_completions(&self, a: u64, len: u64) -> (u64, u64) {
        let rcb = self.cfg.rcb.bytes() as u64;
        let mps = self.cfg.mps.bytes() as u64;
        let ovh = self.cpl_overhead as u64;
        let (mut tlps, mut bytes) = (0u64, 0u64);
        let mut emit = |x: u64, n: u64| {
            tlps += 1;
            bytes += ovh + dw_span(x, n) * 4;
        };
        let end = a + len;
        let mut x = a;
        if self.cfg.rcb_chunks {
            while x < end {
                let n = (rcb - x % rcb).min(end - x);
                emit(x, n);
                x += n;
            }
        } else if dw_span(a, len) * 4 <= mps {
            emit(a, len);
        } else {
            if x % rcb != 0 {
                let n = rcb - x % rcb;
                emit(x, n);
                x += n;
            }
            while x < end {
                let n = mps.min(end - x);
                emit(x, n);
                x += n;
            }
        }
        (tlps, bytes)
    }

    pub(crate) fn check_size(size: u64) -> Result<()> {
        if size == 0 {
            Err(Error::Zero {
                what: "transfer size",
            })
        } else if size > MAX_TRANSFER_BYTES {
            Err(Error::Invalid {
                what: "transfer size",
                value: size,
                allowed: "1..=281474976710656 bytes (256 TiB)",
            })
        } else {
            Ok(())
        }
    }

    /// DMA write bandwidth for transfers of `size` bytes at address 0, Gb/s.
    pub fn write(&self, size: u64) -> Result<f64> {
        self.write_at(0, size)
    }
    /// DMA write bandwidth for transfers of `size` bytes at `addr`, Gb/s.
    pub fn write_at(&self, addr: u64, size: u64) -> Result<f64> {
        Self::check_size(size)?;
        let t = self.write_traffic(addr, size);
        Ok(self.write_gbps(&t, size))
    }

    fn write_gbps(&self, w: &Traffic, size: u64) -> f64 {
        match self.cfg.mode {
            // Same operation order as the published model: data × bw / raw bytes.
            Mode::Compat => size as f64 * self.link / w.req_bytes as f64,
            Mode::Spec => {
                let up = [Flow::new(w.req_tlps, w.req_bytes, true)];
                size as f64 * self.wire / self.spec_period(&up, &[])
            }
        }
    }

    fn read_gbps(&self, r: &Traffic, size: u64) -> f64 {
        match self.cfg.mode {
            Mode::Compat => solve(self.link, self.link, r.req_bytes, r.cpl_bytes, size).1,
            Mode::Spec => {
                let up = [Flow::new(r.req_tlps, r.req_bytes, true)];
                let down = [Flow::new(r.cpl_tlps, r.cpl_bytes, false)];
                size as f64 * self.wire / self.spec_period(&up, &down)
            }
        }
    }

    fn read_write_gbps(&self, w: &Traffic, r: &Traffic, size: u64) -> f64 {
        match self.cfg.mode {
            Mode::Compat => {
                let tx = w.req_bytes + r.req_bytes;
                solve(self.link, self.link, tx, r.cpl_bytes, size).0
            }
            Mode::Spec => {
                let up = [
                    Flow::new(w.req_tlps, w.req_bytes, true),
                    Flow::new(r.req_tlps, r.req_bytes, true),
                ];
                let down = [Flow::new(r.cpl_tlps, r.cpl_bytes, false)];
                size as f64 * self.wire / self.spec_period(&up, &down)
            }
        }
    }

    /// Spec mode: link bytes per transfer of the busier direction, DLLPs included, for
    /// a transfer whose TLPs are `up` (device → host, one flow per class) and `down`;
    /// the least fixed point of the DLLP accounting (module documentation).
    fn spec_period(&self, up: &[Flow], down: &[Flow]) -> f64 {
        self.spec_period_iter(up, down).0
    }

    /// [`Model::spec_period`] and the number of iterations it took.
    fn spec_period_iter(&self, up: &[Flow], down: &[Flow]) -> (f64, u32) {
        let bytes = |f: &[Flow]| f.iter().map(|x| x.bytes).sum::<u64>() as f64;
        let (bu, bd) = (bytes(up), bytes(down));
        let mut t = bu.max(bd);
        if self.dllp == 0.0 {
            return (t, 0);
        }
        // DLLPs sent down acknowledge the TLPs sent up, and vice versa.
        let (mut on_down, mut on_up) = (self.timers_for(up), self.timers_for(down));
        // A timer sends at most one DLLP per arrival: a direction that cannot catch up
        // with the other even then never sets the period (its DLLPs need not be counted;
        // a write stream's reverse direction, a read stream's request direction).
        let most = |ts: &[Option<Timers>; 3]| ts.iter().flatten().map(|x| x.k).sum::<u64>();
        if bu + self.dllp * most(&on_up) as f64 <= bd {
            on_up = [None; 3];
        } else if bd + self.dllp * most(&on_down) as f64 <= bu {
            on_down = [None; 3];
        }
        let count = |ts: &[Option<Timers>; 3], t: f64| -> f64 {
            ts.iter().flatten().map(|x| x.per_period(t)).sum()
        };
        for i in 1..=MAX_FIXED_POINT_STEPS {
            let next = (bu + self.dllp * count(&on_up, t)).max(bd + self.dllp * count(&on_down, t));
            if next == t {
                return (t, i);
            }
            t = next;
        }
        (t, MAX_FIXED_POINT_STEPS + 1)
    }

    /// The latency timers that acknowledge (and return the credits of) the TLPs of
    /// `flows`, all received on one direction: one ACK timer for all of them, and one
    /// UpdateFC timer per flow whose receiver has finite credits (at most two flows).
    fn timers_for(&self, flows: &[Flow]) -> [Option<Timers>; 3] {
        let mut out = [None; 3];
        let (mut tlps, mut bytes) = (0u64, 0u64);
        for (f, slot) in flows.iter().zip(out[1..].iter_mut()) {
            tlps += f.tlps;
            bytes += f.bytes;
            if f.finite_credits && f.tlps > 0 {
                *slot = Some(Timers::new(
                    f.tlps,
                    f.bytes as f64 / f.tlps as f64,
                    self.fc_bytes,
                ));
            }
        }
        if tlps > 0 {
            out[0] = Some(Timers::new(
                tlps,
                bytes as f64 / tlps as f64,
                self.ack_bytes,
            ));
        }
        out
    }

    /// DLLPs per period `t` for the TLPs of `flows` (see [`Model::timers_for`]).
    #[cfg(test)]
    fn dllps_for(&self, flows: &[Flow], t: f64) -> f64 {
        self.timers_for(flows)
            .iter()
            .flatten()
            .map(|x| x.per_period(t))
            .sum()
    }

    /// DMA read bandwidth for transfers of `size` bytes at address 0, Gb/s.
    pub fn read(&self, size: u64) -> Result<f64> {
        self.read_at(0, size)
    }
    /// DMA read bandwidth for transfers of `size` bytes at `addr`, Gb/s.
    pub fn read_at(&self, addr: u64, size: u64) -> Result<f64> {
        Self::check_size(size)?;
        let t = self.read_traffic(addr, size);
        Ok(self.read_gbps(&t, size))
    }

    /// Per-direction bandwidth of alternating reads and writes of `size` bytes at
    /// address 0, Gb/s.
    pub fn read_write(&self, size: u64) -> Result<f64> {
        self.read_write_at(0, size)
    }
    /// Per-direction bandwidth of alternating reads and writes of `size` bytes at `addr`.
    pub fn read_write_at(&self, addr: u64, size: u64) -> Result<f64> {
        Self::check_size(size)?;
        let w = self.write_traffic(addr, size);
        let r = self.read_traffic(addr, size);
        Ok(self.read_write_gbps(&w, &r, size))
    }

    /// Read, write and read/write bandwidth for `size` bytes at address 0.
    pub fn point(&self, size: u64) -> Result<BwPoint> {
        self.point_at(0, size)
    }
    /// Read, write and read/write bandwidth for `size` bytes at `addr`.
    pub fn point_at(&self, addr: u64, size: u64) -> Result<BwPoint> {
        Self::check_size(size)?;
        // Each traffic computed once; the same arithmetic as `write_at`, `read_at` and
        // `read_write_at` (a unit test checks they agree).
        let w = self.write_traffic(addr, size);
        let r = self.read_traffic(addr, size);
        Ok(BwPoint {
            size,
            read_gbps: self.read_gbps(&r, size),
            write_gbps: self.write_gbps(&w, size),
            readwrite_gbps: self.read_write_gbps(&w, &r, size),
        })
    }
}

/// Iterations after which [`Model`]'s spec-mode fixed point gives up (never reached in
/// practice: it converges in a few steps; a unit test checks a wide grid).
const MAX_FIXED_POINT_STEPS: u32 = 64;

/// One flow-control class of a transfer's TLPs on one direction.
#[derive(Debug, Clone, Copy)]
struct Flow {
    tlps: u64,
    bytes: u64,
    /// The receiver advertises finite credits for the class (UpdateFCs flow back).
    finite_credits: bool,
}

impl Flow {
    fn new(tlps: u64, bytes: u64, finite_credits: bool) -> Flow {
        Flow {
            tlps,
            bytes,
            finite_credits,
        }
    }
}

/// Latency-timer DLLPs (ACKs, or one class's UpdateFCs) per period, exactly, for TLPs
/// that arrive `k` per period `period`, evenly spaced by `spacing` from the start of
/// each period (arrival `i` of period `m` at `m × period + i × spacing`), when a timer
/// starts at an arrival while none runs and sends one DLLP `limit` later, covering
/// every arrival up to then. All times in link bytes; `k × spacing ≤ period` is
/// expected (a direction cannot send more than a period's worth).
///
/// Inside a burst one timer covers `n = ⌊limit / spacing⌋ + 1` arrivals. The state
/// carried from one period to the next is the index of the arrival that starts the
/// period's first timer; it depends only on the previous one (through its value mod
/// `n`), so the sequence is eventually periodic, with at most `min(k, n)` states: the
/// cycle, found with Brent's algorithm, gives the exact long-run average.
///
/// ```
/// use pcielab_model::bw::dllp_timers;
/// // One TLP per period, period longer than the limit: one DLLP per TLP.
/// assert_eq!(dllp_timers(1, 24.0, 300.0, 237.0), 1.0);
/// // One TLP every 84 bytes, limit 237: a timer covers 3 TLPs (at 0, 84, 168).
/// assert_eq!(dllp_timers(1, 84.0, 84.0, 237.0), 1.0 / 3.0);
/// // Bursts of 8 back-to-back 24-byte requests every 4736 bytes: one per burst.
/// assert_eq!(dllp_timers(8, 24.0, 4736.0, 237.0), 1.0);
/// ```
pub fn dllp_timers(k: u64, spacing: f64, period: f64, limit: f64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    Timers::new(k, spacing, limit).per_period(period)
}

/// One latency timer over a periodic arrival pattern, with what does not depend on the
/// period worked out once (see [`dllp_timers`]).
#[derive(Debug, Clone, Copy)]
struct Timers {
    /// Arrivals per period (≥ 1).
    k: u64,
    /// Spacing of the arrivals, link bytes.
    s: f64,
    /// Arrivals one timer covers inside a burst.
    n: u64,
    limit: f64,
    /// Offset of the last arrival of a burst.
    burst: f64,
    /// Timers of a burst that starts with no timer running.
    c0: u64,
    /// When the last of those expires (from the start of its period).
    x0: f64,
}

impl Timers {
    fn new(k: u64, spacing: f64, limit: f64) -> Timers {
        let s = spacing.max(f64::MIN_POSITIVE);
        let n = ((limit / s).floor() as u64).saturating_add(1);
        let c0 = (k - 1) / n + 1;
        Timers {
            k,
            s,
            n,
            limit,
            burst: (k - 1) as f64 * s,
            c0,
            x0: ((c0 - 1) * n) as f64 * s + limit,
        }
    }

    /// From the period's first timer at arrival `i`: (next period's first index,
    /// timers in this period, periods advanced).
    fn step(&self, i: u64, period: f64) -> (u64, u64, u64) {
        let c = (self.k - 1 - i) / self.n + 1;
        let j = i + (c - 1) * self.n;
        // The last timer of the period expires at `x`; the next one starts at the first
        // arrival after it, in the first period `m` whose burst reaches past `x`.
        let x = j as f64 * self.s + self.limit;
        let m = ((x - self.burst) / period).floor().max(0.0) as u64 + 1;
        let y = x - m as f64 * period;
        let next = if y < 0.0 {
            0
        } else {
            ((y / self.s).floor() as u64 + 1).min(self.k - 1)
        };
        (next, c, m)
    }

    /// Timers per period, long-run average.
    fn per_period(&self, period: f64) -> f64 {
        // Shortcuts, equal to the general case: one arrival per period (a timer spans
        // ⌊limit / period⌋ + 1 periods), or bursts that each start with no timer running.
        if self.k == 1 {
            return 1.0 / ((self.limit / period).floor().max(0.0) + 1.0);
        }
        if self.x0 < period {
            return self.c0 as f64;
        }
        // The states seen so far, with the timers and periods before them: the first
        // repeat closes the cycle. Few states in practice; Brent's cycle detection (no
        // memory) past that.
        const SEEN: usize = 16;
        let mut seen = [(0u64, 0u64, 0u64); SEEN];
        let (mut i, mut timers, mut periods) = (0u64, 0u64, 0u64);
        for len in 0..SEEN {
            if let Some(&(_, t0, p0)) = seen[..len].iter().find(|e| e.0 == i) {
                return (timers - t0) as f64 / (periods - p0) as f64;
            }
            seen[len] = (i, timers, periods);
            let (next, c, m) = self.step(i, period);
            timers += c;
            periods += m;
            i = next;
        }
        // Brent's cycle detection, then one lap of the cycle.
        let (mut power, mut lam) = (1u64, 1u64);
        let mut tortoise = 0u64;
        let mut hare = self.step(0, period).0;
        while tortoise != hare {
            if power == lam {
                tortoise = hare;
                power *= 2;
                lam = 0;
            }
            hare = self.step(hare, period).0;
            lam += 1;
        }
        let (mut timers, mut periods) = (0u64, 0u64);
        let mut i = hare;
        for _ in 0..lam {
            let (next, c, m) = self.step(i, period);
            timers += c;
            periods += m;
            i = next;
        }
        timers as f64 / periods as f64
    }
}

/// Number of DWs that bytes `[a, a + len)` touch.
pub(crate) fn dw_span(a: u64, len: u64) -> u64 {
    (a + len).div_ceil(4) - a / 4
}

/// Splits `[addr, addr + size)` greedily into chunks of at most `max` bytes that never
/// cross a 4 KiB boundary, and sums `f(a, len)` over the chunks.
///
/// `f` must depend on `a` only through `a mod 4096` (true for every rule here: DW, RCB,
/// MPS and page alignment all divide 4096), which lets whole aligned pages be counted
/// once and multiplied: the cost is bounded by three pages of chunks whatever `size` is.
fn split_sum(addr: u64, size: u64, max: u64, f: impl Fn(u64, u64) -> Traffic) -> Traffic {
    let mut sum = Traffic::default();
    let (mut a, mut rem) = (addr, size);
    // Up to the first page boundary (or all of a transfer shorter than a page).
    while rem > 0 && (a % PAGE != 0 || rem < PAGE) {
        let len = max.min(PAGE - a % PAGE).min(rem);
        sum = sum.plus(f(a, len));
        a += len;
        rem -= len;
    }
    let pages = rem / PAGE;
    if pages > 0 {
        let mut page = Traffic::default();
        let mut x = 0;
        while x < PAGE {
            let len = max.min(PAGE - x);
            page = page.plus(f(x, len));
            x += len;
        }
        sum = sum.plus(page.times(pages));
        a += pages * PAGE;
        rem -= pages * PAGE;
    }
    while rem > 0 {
        let len = max.min(PAGE - a % PAGE).min(rem);
        sum = sum.plus(f(a, len));
        a += len;
        rem -= len;
    }
    sum
}

/// Effective bandwidth in each direction (tx, rx) of transactions that each move `data`
/// bytes and put `raw_tx` link bytes in the transmit and `raw_rx` in the receive direction,
/// when `avail_tx` / `avail_rx` Gb/s are available.
///
/// The receive direction is filled first; if the transmit direction cannot keep up, it
/// is the limit instead. The arithmetic follows the published model step by step, so
/// compatibility numbers are bit-identical. `raw_tx` or `raw_rx` may be 0 (that
/// direction then reports 0).
pub fn solve(avail_tx: f64, avail_rx: f64, raw_tx: u64, raw_rx: u64, data: u64) -> (f64, f64) {
    let raw_tx_b = (raw_tx * 8) as f64;
    let raw_rx_b = (raw_rx * 8) as f64;
    let avail_tx_b = avail_tx * 1e9;
    let avail_rx_b = avail_rx * 1e9;
    let (req_tx_b, req_rx_b) = if raw_rx == 0 {
        (avail_tx_b, 0.0)
    } else {
        let max_trans = avail_rx_b / raw_rx_b;
        let req_tx_b = max_trans * raw_tx_b;
        if req_tx_b > avail_tx_b {
            let max_trans = avail_tx_b / raw_tx_b;
            (avail_tx_b, max_trans * raw_rx_b)
        } else {
            (req_tx_b, avail_rx_b)
        }
    };
    let req_tx = req_tx_b / 1e9;
    let req_rx = req_rx_b / 1e9;
    let eff = |req: f64, raw: u64| {
        if raw == 0 {
            0.0
        } else {
            data as f64 * req / raw as f64
        }
    };
    (eff(req_tx, raw_tx), eff(req_rx, raw_rx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AddrWidth, Mps, Mrrs, Rcb};

    fn gen3x8() -> PcieConfig {
        PcieConfig::new(Generation::Gen3, 8).unwrap()
    }

    #[test]
    fn dw_span_by_hand() {
        assert_eq!(dw_span(0, 1), 1);
        assert_eq!(dw_span(3, 2), 2);
        assert_eq!(dw_span(4, 4), 1);
        assert_eq!(dw_span(2, 8), 3);
        assert_eq!(dw_span(0, 4096), 1024);
    }

    #[test]
    fn compat_traffic_by_hand() {
        let m = Model::new(gen3x8()).unwrap();
        // 64-bit MWr: 8 framing + 4 + 12 = 24 bytes per TLP; 1000 B = 4 TLPs at MPS 256.
        assert_eq!(
            m.write_traffic(12345, 1000),
            Traffic {
                req_tlps: 4,
                req_bytes: 4 * 24 + 1000,
                cpl_tlps: 0,
                cpl_bytes: 0
            }
        );
        // Read 1000 B: 2 MRd (MRRS 512) of 24 B; 4 CplD (MPS 256) of 20 B + data.
        assert_eq!(
            m.read_traffic(0, 1000),
            Traffic {
                req_tlps: 2,
                req_bytes: 48,
                cpl_tlps: 4,
                cpl_bytes: 4 * 20 + 1000
            }
        );
    }

    #[test]
    fn spec_traffic_by_hand() {
        let mut cfg = gen3x8();
        cfg.mode = Mode::Spec;
        let m = Model::new(cfg).unwrap();
        // Write 100 B at 4090: crosses the page at 4096: [4090,4096) 6 B = 2 DW, then
        // [4096,4190) 94 B = 24 DW. Two TLPs: 2×24 + (2+24)×4 = 152.
        assert_eq!(m.write_traffic(4090, 100).req_tlps, 2);
        assert_eq!(m.write_traffic(4090, 100).req_bytes, 152);
        // 1 byte: one DW of payload: 24 + 4.
        assert_eq!(m.write_traffic(0, 1).req_bytes, 28);
        // Read 512 B at 0x20: one request (no page crossing), 512 B > MPS so completions
        // are cut: [0x20,0x40) 32 B (first RCB boundary at 64), then 256, then 224.
        // CplD 8+12 = 20 B each: 3×20 + 512 = 572.
        let t = m.read_traffic(0x20, 512);
        assert_eq!(
            (t.req_tlps, t.req_bytes, t.cpl_tlps, t.cpl_bytes),
            (1, 24, 3, 572)
        );
        // Read 200 B at 0x20 fits one completion (52 DW ≤ MPS 256 B): 20 + 200.
        let t = m.read_traffic(0x20, 200);
        assert_eq!((t.cpl_tlps, t.cpl_bytes), (1, 220));
        // 3 pages + 16 B at 0, MRRS 512: 8 requests per page ×3 + 1 = 25; completions
        // 2 per request (512/256) ×24 + 1 = 49.
        let t = m.read_traffic(0, 3 * 4096 + 16);
        assert_eq!((t.req_tlps, t.cpl_tlps), (25, 49));
        assert_eq!(t.req_bytes, 25 * 24);
        assert_eq!(t.cpl_bytes, 49 * 20 + 3 * 4096 + 16);
    }

    #[test]
    fn spec_rcb_chunks_by_hand() {
        let mut cfg = gen3x8();
        cfg.mode = Mode::Spec;
        cfg.rcb_chunks = true;
        cfg.rcb = Rcb::new(128).unwrap();
        cfg.mrrs = Mrrs::new(4096).unwrap();
        cfg.mps = Mps::new(512).unwrap();
        cfg.addr = AddrWidth::Bits32;
        let m = Model::new(cfg).unwrap();
        // Read 300 B at 100: [100,128) 28 B = 7 DW, [128,256) 32 DW, [256,384) 32 DW,
        // [384,400) 4 DW; 4 CplD × 20 B + 75 DW × 4 = 380. One 3DW MRd: 8 + 12 = 20.
        let t = m.read_traffic(100, 300);
        assert_eq!(
            (t.req_tlps, t.req_bytes, t.cpl_tlps, t.cpl_bytes),
            (1, 20, 4, 380)
        );
    }

    #[test]
    fn gen6_flit_traffic_by_hand() {
        let mut cfg = PcieConfig::new(Generation::Gen6, 4).unwrap();
        cfg.mode = Mode::Spec;
        let m = Model::new(cfg).unwrap();
        assert!(m.flit_mode());
        // No framing in FLIT mode: aligned 64 B MWr = 16 + 64; unaligned start adds OHC.
        assert_eq!(m.write_traffic(0, 64).req_bytes, 80);
        assert_eq!(m.write_traffic(2, 64).req_bytes, 16 + 4 + 17 * 4);
        assert_eq!(m.read_traffic(0, 64).cpl_bytes, 12 + 64);
    }

    #[test]
    fn solve_by_hand() {
        // Write-like: nothing received.
        let (tx, rx) = solve(10.0, 10.0, 100, 0, 50);
        assert_eq!((tx, rx), (5.0, 0.0));
        // Receive-limited: rx 100 B per 80 B data, tx needs only 20 B.
        let (tx, rx) = solve(10.0, 10.0, 20, 100, 80);
        assert!((rx - 8.0).abs() < 1e-12 && (tx - 8.0).abs() < 1e-12);
        // Transmit-limited: tx 200 B per transaction, rx 100 B, 50 B data: tx full,
        // 10/200 × 50 = 2.5 Gb/s of data.
        let (tx, rx) = solve(10.0, 10.0, 200, 100, 50);
        assert!((tx - 2.5).abs() < 1e-12 && (rx - 2.5).abs() < 1e-12);
    }

    #[test]
    fn point_agrees_with_single_functions() {
        for mode in [Mode::Compat, Mode::Spec] {
            let mut c = gen3x8();
            c.mode = mode;
            let m = Model::new(c).unwrap();
            for (a, n) in [(0, 1), (3, 64), (100, 5000), (4095, 9000)] {
                let p = m.point_at(a, n).unwrap();
                assert_eq!(p.write_gbps, m.write_at(a, n).unwrap());
                assert_eq!(p.read_gbps, m.read_at(a, n).unwrap());
                assert_eq!(p.readwrite_gbps, m.read_write_at(a, n).unwrap());
            }
        }
    }

    /// The timer rule simulated arrival by arrival, for `periods` periods.
    fn timers_brute(k: u64, s: f64, t: f64, limit: f64, periods: u64) -> f64 {
        let (mut n, mut expiry) = (0u64, f64::NEG_INFINITY);
        for m in 0..periods {
            for i in 0..k {
                let a = m as f64 * t + i as f64 * s;
                if a > expiry {
                    n += 1;
                    expiry = a + limit;
                }
            }
        }
        n as f64 / periods as f64
    }

    #[test]
    fn dllp_timers_match_arrival_by_arrival_simulation() {
        // A deterministic spread of patterns: bursts shorter and longer than the limit,
        // periods shorter and longer than it.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for case in 0..600 {
            // Up to 40 arrivals a period: more than 16 states of the timer's phase
            // (the cycle search's table) happen too.
            let k = 1 + (next() * if case % 2 == 0 { 12.0 } else { 40.0 }) as u64;
            let s = 20.0 + next() * 300.0;
            let t = (k - 1) as f64 * s + 1.0 + next() * 3000.0;
            let limit = 100.0 + next() * 5000.0;
            let exact = dllp_timers(k, s, t, limit);
            // The brute force starts cold; over 4000 periods its average is within
            // (cycle length) / 4000 of the long-run one.
            let brute = timers_brute(k, s, t, limit, 4000);
            assert!(
                (exact - brute).abs() < 2e-3 * exact.max(1.0),
                "k {k} s {s} t {t} limit {limit}: {exact} vs {brute}"
            );
            assert!(exact <= k as f64 && exact > 0.0);
        }
    }

    #[test]
    fn spec_fixed_point_converges_quickly() {
        use crate::config::Lanes;
        let mut worst = 0;
        for g in 1..=5 {
            for lanes in Lanes::ALL {
                for mps in Mps::ALL {
                    for mrrs in [128, 512, 4096] {
                        let mut c =
                            PcieConfig::new(Generation::from_number(g).unwrap(), 1).unwrap();
                        c.lanes = lanes;
                        c.mps = mps;
                        c.mrrs = Mrrs::new(mrrs).unwrap();
                        c.mode = Mode::Spec;
                        let m = Model::new(c).unwrap();
                        for size in [1, 4, 64, 100, 256, 1500, 4096, 65536, 1 << 30] {
                            let w = m.write_traffic(0, size);
                            let r = m.read_traffic(0, size);
                            let up = [
                                Flow::new(w.req_tlps, w.req_bytes, true),
                                Flow::new(r.req_tlps, r.req_bytes, true),
                            ];
                            let down = [Flow::new(r.cpl_tlps, r.cpl_bytes, false)];
                            for (u, d) in [
                                (&up[..1], &[][..]),
                                (&up[1..], &down[..]),
                                (&up[..], &down[..]),
                            ] {
                                let (t, it) = m.spec_period_iter(u, d);
                                assert!(it <= MAX_FIXED_POINT_STEPS, "{c:?} {size}");
                                worst = worst.max(it);
                                // A fixed point: the DLLPs it implies give it back.
                                let bu: u64 = u.iter().map(|f| f.bytes).sum();
                                let bd: u64 = d.iter().map(|f| f.bytes).sum();
                                let again = (bu as f64 + 8.0 * m.dllps_for(d, t))
                                    .max(bd as f64 + 8.0 * m.dllps_for(u, t));
                                assert_eq!(again, t);
                            }
                        }
                    }
                }
            }
        }
        assert!(worst <= 8, "{worst} iterations");
    }

    #[test]
    fn zero_size_is_an_error() {
        let m = Model::new(gen3x8()).unwrap();
        assert!(m.point(MAX_TRANSFER_BYTES).is_ok());
        assert_eq!(
            m.point(u64::MAX).unwrap_err().to_string(),
            "invalid transfer size 18446744073709551615: allowed 1..=281474976710656 bytes (256 TiB)"
        );
        let mut s = gen3x8();
        s.mode = Mode::Spec;
        let s = Model::new(s).unwrap();
        assert!(s.point_at(u64::MAX, MAX_TRANSFER_BYTES).is_ok());
        assert_eq!(s.write_traffic(u64::MAX - 3, 8), s.write_traffic(4092, 8));
        assert_eq!(
            m.point(0).unwrap_err().to_string(),
            "invalid transfer size 0: must be at least 1"
        );
    }
}
