//! Link-level rates: the raw bit rate after line encoding, and the bandwidth left for
//! TLPs once ACK DLLPs, UpdateFC DLLPs and SKP ordered sets have taken their share.
//!
//! ```text
//!  raw    = GT/s × encoding × lanes                         (Gb/s)
//!  wire   = raw × (1 − SKP share)        TLPs and DLLPs together (spec mode)
//!  link   = raw − raw × (ACK share + UpdateFC share + SKP share)        pcie-bench
//!         = wire × (1 − 8 B / AckLimit_B − 8 B / FcLimit_B)             spec mode
//!  ACK share      = 8 B / AckLimit(gen, width, MPS)          pcie-bench
//!  AckLimit_B     = AckLimit × lanes × bytes per lane and symbol time × (1 − SKP share)
//! ```
//!
//! The ACK and UpdateFC limits are the spec's "Ack Transmission Latency Limit" and
//! "UpdateFC Transmission Latency Guidelines" tables, in symbol times. During one symbol
//! time an xN link carries N symbols, so an 8-byte DLLP every L symbol times costs
//! 8 / (L × N) of the link (at 128b/130b a symbol time of 8 bit times carries 128/130 of
//! a byte per lane); the published model charges 8 / L, N times too much on an xN link.
//! Spec mode charges it per lane.
//!
//! `link` is the rate left when one ACK and one UpdateFC go out every latency limit on
//! the direction (the `link` table, the NIC and latency models). Spec-mode DMA
//! bandwidth ([`crate::bw`]) does better: it starts from `wire` and charges each
//! direction the DLLPs it physically carries (see [`crate::bw::dllp_timers`]).

use crate::config::{Lanes, Mode, Mps};
use pcielab_wire::Generation;

/// Bytes of one DLLP on the wire: 6 bytes of DLLP plus 2 framing bytes (SDP/END
/// symbols at 8b/10b, the SDP token at 128b/130b).
pub const DLLP_BYTES: u32 = 8;

/// Gen1 ACK latency limits in symbol times, `[width][MPS]`, widths x1..x32, MPS 128..4096.
/// Gen2 adds 51 symbol times of internal delay, Gen3 and later 96 (spec tables 3-7..3-9;
/// the UpdateFC guideline tables 2-46..2-48 hold the same values).
const ACK_LIMIT_GEN1: [[u16; 6]; 6] = [
    [237, 416, 559, 1071, 2095, 4143],
    [128, 217, 289, 545, 1057, 2081],
    [73, 118, 154, 282, 538, 1050],
    [67, 107, 86, 150, 278, 534],
    [48, 72, 86, 150, 278, 534],
    [33, 45, 52, 84, 148, 276],
];

fn internal_delay(gen: Generation) -> u16 {
    match gen {
        Generation::Gen1 => 0,
        Generation::Gen2 => 51,
        _ => 96,
    }
}

/// ACK transmission latency limit (symbol times) as the published model tabulates it.
///
/// In [`Mode::Spec`] this is the specification value. In [`Mode::Compat`] one entry
/// differs, reproducing the published table: Gen2 x32 MPS 4096 is 237 there (the
/// spec's formula and the published UpdateFC table give 327).
pub fn ack_limit(mode: Mode, gen: Generation, lanes: Lanes, mps: Mps) -> u16 {
    if mode == Mode::Compat && gen == Generation::Gen2 && lanes.count() == 32 && mps.bytes() == 4096
    {
        return 237;
    }
    ACK_LIMIT_GEN1[lanes.index()][mps.index()] + internal_delay(gen)
}

/// UpdateFC transmission latency guideline (symbol times).
///
/// In [`Mode::Compat`] one entry differs, reproducing the published table: Gen1 x32
/// MPS 2048 is 248 there (the spec's formula and the published ACK table give 148).
pub fn fc_limit(mode: Mode, gen: Generation, lanes: Lanes, mps: Mps) -> u16 {
    if mode == Mode::Compat && gen == Generation::Gen1 && lanes.count() == 32 && mps.bytes() == 2048
    {
        return 248;
    }
    ACK_LIMIT_GEN1[lanes.index()][mps.index()] + internal_delay(gen)
}

/// Usable bits per transferred bit of one lane, and transfers per second (GT/s).
fn lane_gbps(mode: Mode, gen: Generation) -> f64 {
    // The expressions mirror the arithmetic order of the published model so that the
    // compatibility numbers are bit-identical to it.
    match gen {
        Generation::Gen1 => (8.0 / 10.0) * 2.5,
        Generation::Gen2 => (8.0 / 10.0) * 5.0,
        Generation::Gen3 => (128.0 / 130.0) * 8.0,
        Generation::Gen4 => (128.0 / 130.0) * 16.0,
        Generation::Gen5 => (128.0 / 130.0) * 32.0,
        Generation::Gen6 => match mode {
            // The published model approximates FLIT mode by a 242/256 "encoding".
            Mode::Compat => (242.0 / 256.0) * 64.0,
            // PAM4 at 32 GBd carries 64 Gb/s per lane with no line encoding (1b/1b);
            // the FLIT overhead is charged in `link_gbps`.
            Mode::Spec => 64.0,
        },
    }
}

/// Raw bandwidth of the link after line encoding, Gb/s.
///
/// ```
/// use pcielab_model::{link, Lanes, Mode};
/// use pcielab_wire::Generation;
/// // Gen3: 8 GT/s × 128/130 × 8 lanes = 63.015... Gb/s
/// let raw = link::raw_gbps(Mode::Compat, Generation::Gen3, Lanes::new(8).unwrap());
/// assert!((raw - 63.01538).abs() < 1e-4);
/// ```
pub fn raw_gbps(mode: Mode, gen: Generation, lanes: Lanes) -> f64 {
    lane_gbps(mode, gen) * lanes.count() as f64
}

/// In FLIT mode a 256-byte flit carries 236 bytes of TLP; the other 20 are 6 bytes of
/// DLP (which carries the ACKs and UpdateFCs), 8 of CRC and 6 of FEC.
pub const FLIT_BYTES: u32 = 256;
/// TLP bytes in one flit.
pub const FLIT_TLP_BYTES: u32 = 236;

/// Share of the link taken by SKP ordered sets.
///
/// pcie-bench: 4 symbols every 1538 symbol times for every generation (the 8b/10b rule).
/// Spec mode: the 8b/10b rule for Gen1/2; at 128b/130b one 16-symbol SKP block after at
/// most 375 data blocks, 1/376 of the blocks. FLIT mode is charged the same 1/376 (an
/// assumption: the PCIe 6.0 SKP interval in flits is not modelled separately).
pub fn skp_share(mode: Mode, gen: Generation) -> f64 {
    match (mode, gen) {
        (Mode::Compat, _) | (Mode::Spec, Generation::Gen1 | Generation::Gen2) => 4.0 / 1538.0,
        (Mode::Spec, _) => 1.0 / 376.0,
    }
}

/// Bandwidth of one direction for TLPs and DLLPs together (framing included), Gb/s:
/// the raw rate after SKP ordered sets; for Gen6 in spec mode, after the flit overhead
/// (236/256) too (DLLPs then ride in the flits and cost nothing more).
///
/// ```
/// use pcielab_model::{link, Lanes, Mode};
/// use pcielab_wire::Generation;
/// // Gen3 x8: 63.015385 × 375/376 = 62.847791 Gb/s
/// let w = link::wire_gbps(Mode::Spec, Generation::Gen3, Lanes::new(8).unwrap());
/// assert!((w - 62.847791).abs() < 1e-6);
/// ```
pub fn wire_gbps(mode: Mode, gen: Generation, lanes: Lanes) -> f64 {
    let raw = raw_gbps(mode, gen, lanes);
    let skp = 1.0 - skp_share(mode, gen);
    if mode == Mode::Spec && gen == Generation::Gen6 {
        raw * (FLIT_TLP_BYTES as f64 / FLIT_BYTES as f64) * skp
    } else {
        raw * skp
    }
}

/// Bytes one direction carries (after SKP ordered sets) in `symbols` symbol times:
/// `symbols × lanes × (1 at 8b/10b, 128/130 at 128b/130b) × (1 − SKP share)`. A symbol
/// time is 10 bit times at 8b/10b and 8 at 128b/130b; FLIT mode is counted like
/// 128b/130b (its DLLPs cost nothing, so the value is not used there).
///
/// ```
/// use pcielab_model::{link, Lanes};
/// use pcielab_wire::Generation;
/// // Gen1 x1: 237 symbol times carry 237 × 1534/1538 bytes of TLPs and DLLPs.
/// let b = link::symbol_time_bytes(Generation::Gen1, Lanes::new(1).unwrap(), 237);
/// assert!((b - 237.0 * 1534.0 / 1538.0).abs() < 1e-9);
/// ```
pub fn symbol_time_bytes(gen: Generation, lanes: Lanes, symbols: u16) -> f64 {
    let per_lane = match gen {
        Generation::Gen1 | Generation::Gen2 => 1.0,
        _ => 128.0 / 130.0,
    };
    symbols as f64 * lanes.count() as f64 * per_lane * (1.0 - skp_share(Mode::Spec, gen))
}

/// Bandwidth available to TLPs (framing included), Gb/s, after one ACK and one
/// UpdateFC DLLP per latency limit and SKP ordered sets; for Gen6 in spec mode, after
/// the flit overhead (236/256) alone.
///
/// ```
/// use pcielab_model::{link, Lanes, Mode, Mps};
/// use pcielab_wire::Generation;
/// // Gen3 x8 MPS 256, pcie-bench: 63.01538 × (1 − 8/203 − 8/203 − 4/1538) = 57.885 Gb/s
/// let l = Lanes::new(8).unwrap();
/// let m = Mps::new(256).unwrap();
/// let bw = link::link_gbps(Mode::Compat, Generation::Gen3, l, m);
/// assert!((bw - 57.8849).abs() < 1e-3);
/// ```
pub fn link_gbps(mode: Mode, gen: Generation, lanes: Lanes, mps: Mps) -> f64 {
    match mode {
        Mode::Compat => {
            // The published model's arithmetic, step by step (bit-identical numbers).
            let raw = raw_gbps(mode, gen, lanes);
            let ack = DLLP_BYTES as f64 / ack_limit(mode, gen, lanes, mps) as f64;
            let fc = DLLP_BYTES as f64 / fc_limit(mode, gen, lanes, mps) as f64;
            let overheads = ack + fc + skp_share(mode, gen);
            raw - raw * overheads
        }
        Mode::Spec if gen == Generation::Gen6 => wire_gbps(mode, gen, lanes),
        Mode::Spec => {
            let d = DLLP_BYTES as f64;
            let ack = d / symbol_time_bytes(gen, lanes, ack_limit(mode, gen, lanes, mps));
            let fc = d / symbol_time_bytes(gen, lanes, fc_limit(mode, gen, lanes, mps));
            wire_gbps(mode, gen, lanes) * (1.0 - ack - fc)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(n: u32) -> Lanes {
        Lanes::new(n).unwrap()
    }
    fn m(n: u32) -> Mps {
        Mps::new(n).unwrap()
    }

    #[test]
    fn tables_match_published_entries() {
        // Spot checks against entries of the published tables (pcie-bench/pcie-model,
        // model/pcie.py), read off by hand.
        use Generation::*;
        assert_eq!(ack_limit(Mode::Compat, Gen1, l(1), m(128)), 237);
        assert_eq!(ack_limit(Mode::Compat, Gen2, l(4), m(1024)), 333);
        assert_eq!(ack_limit(Mode::Compat, Gen3, l(8), m(256)), 203);
        assert_eq!(ack_limit(Mode::Compat, Gen3, l(8), m(512)), 182);
        assert_eq!(ack_limit(Mode::Compat, Gen5, l(32), m(4096)), 372);
        assert_eq!(ack_limit(Mode::Compat, Gen6, l(16), m(128)), 144);
        assert_eq!(ack_limit(Mode::Compat, Gen2, l(32), m(4096)), 237);
        assert_eq!(ack_limit(Mode::Spec, Gen2, l(32), m(4096)), 327);
        assert_eq!(fc_limit(Mode::Compat, Gen2, l(32), m(4096)), 327);
        assert_eq!(fc_limit(Mode::Compat, Gen1, l(32), m(2048)), 248);
        assert_eq!(fc_limit(Mode::Spec, Gen1, l(32), m(2048)), 148);
        assert_eq!(ack_limit(Mode::Compat, Gen1, l(32), m(2048)), 148);
        assert_eq!(fc_limit(Mode::Compat, Gen2, l(1), m(4096)), 4194);
    }

    #[test]
    fn raw_rates_by_hand() {
        use Generation::*;
        // Gen1 x1: 2.5 × 0.8 = 2 Gb/s; Gen2 x4: 5 × 0.8 × 4 = 16; Gen4 x16: 16 × 128/130 × 16
        assert_eq!(raw_gbps(Mode::Compat, Gen1, l(1)), 2.0);
        assert_eq!(raw_gbps(Mode::Compat, Gen2, l(4)), 16.0);
        assert!((raw_gbps(Mode::Compat, Gen4, l(16)) - 252.061_538).abs() < 1e-5);
        // Gen6: published 242/256 × 64 = 60.5 per lane; spec 64 per lane.
        assert_eq!(raw_gbps(Mode::Compat, Gen6, l(2)), 121.0);
        assert_eq!(raw_gbps(Mode::Spec, Gen6, l(2)), 128.0);
    }

    #[test]
    fn link_rate_by_hand() {
        use Generation::*;
        // Gen1 x1 MPS 128 pcie-bench: 2 × (1 − 8/237 − 8/237 − 4/1538)
        //   = 2 × (1 − 0.0337553 − 0.0337553 − 0.0026008) = 1.8597773
        let v = link_gbps(Mode::Compat, Gen1, l(1), m(128));
        assert!((v - 1.859_777).abs() < 1e-6, "{v}");
        // At x1 spec mode charges DLLPs the same, and SKP the same at 8b/10b:
        // 2 × 1534/1538 × (1 − 16/(237 × 1534/1538)) = 2 × (1 − 4/1538 − 16/237).
        assert!((v - link_gbps(Mode::Spec, Gen1, l(1), m(128))).abs() < 1e-12);
        // Gen3 x8 MPS 256 spec: wire = 63.015385 × 375/376 = 62.847791; the limit,
        // 203 symbol times, carries 203 × 8 × 128/130 × 375/376 = 1594.763 bytes:
        // 62.847791 × (1 − 16/1594.763) = 62.217249
        let s = link_gbps(Mode::Spec, Gen3, l(8), m(256));
        assert!((s - 62.217_249).abs() < 1e-5, "{s}");
        assert!((wire_gbps(Mode::Spec, Gen3, l(8)) - 62.847_791).abs() < 1e-5);
        // Gen6 x1 spec: 64 × 236/256 × 375/376 = 58.843085
        let f = link_gbps(Mode::Spec, Gen6, l(1), m(256));
        assert!((f - 58.843_085).abs() < 1e-5, "{f}");
    }
}
