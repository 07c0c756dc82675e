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
        Ok(Model {
            cfg,
            raw: link::raw_gbps(cfg.mode, cfg.gen, cfg.lanes),
            link: link::link_gbps(cfg.mode, cfg.gen, cfg.lanes, cfg.mps),
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
    /// Bandwidth available to TLPs, Gb/s (see [`link::link_gbps`]).
    pub fn link_gbps(&self) -> f64 {
        self.link
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
        // Same operation order as the published model: data × bw / raw bytes.
        Ok(size as f64 * self.link / t.req_bytes as f64)
    }

    /// DMA read bandwidth for transfers of `size` bytes at address 0, Gb/s.
    pub fn read(&self, size: u64) -> Result<f64> {
        self.read_at(0, size)
    }
    /// DMA read bandwidth for transfers of `size` bytes at `addr`, Gb/s.
    pub fn read_at(&self, addr: u64, size: u64) -> Result<f64> {
        Self::check_size(size)?;
        let t = self.read_traffic(addr, size);
        let (_, rx) = solve(self.link, self.link, t.req_bytes, t.cpl_bytes, size);
        Ok(rx)
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
        let (tx, _) = solve(
            self.link,
            self.link,
            w.req_bytes + r.req_bytes,
            r.cpl_bytes,
            size,
        );
        Ok(tx)
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
        let (_, read_gbps) = solve(self.link, self.link, r.req_bytes, r.cpl_bytes, size);
        let (readwrite_gbps, _) = solve(
            self.link,
            self.link,
            w.req_bytes + r.req_bytes,
            r.cpl_bytes,
            size,
        );
        Ok(BwPoint {
            size,
            read_gbps,
            write_gbps: size as f64 * self.link / w.req_bytes as f64,
            readwrite_gbps,
        })
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
