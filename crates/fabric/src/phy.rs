//! Link timing: exact serialization time of bytes on a link direction, and the
//! data-link timer values (ACK latency limit, UpdateFC latency, replay timeout).
//!
//! Time is kept in *units* of `1 / (256 × width × skp_den)` picoseconds: one data byte
//! on one lane costs an integer number of units for every generation (Gen5's bit time,
//! 31.25 ps, is 8000/256 ps; 128b/130b multiplies by 130/128; the SKP share by
//! `skp_num/skp_den`), so a link's busy time is an exact integer and rounding happens
//! only when an event time is derived from it (ceiling to the picosecond), never
//! accumulating.
//!
//! SKP ordered sets are charged as the long-run share at the longest interval the spec
//! allows (Gen1/2: 4 symbols every 1538 symbol times, i.e. ×1538/1534; Gen3–5: one
//! block after 375 data blocks, ×376/375), the same share as the spec-mode analytic
//! model. Gen6 (Flit mode) charges TLP bytes ×256/236 (a flit carries 236 TLP bytes)
//! and DLLPs nothing (they ride in the flits' DLP bytes).

use pcielab_sim::SimDuration;
use pcielab_wire::{phy, Generation};

/// Bit time of one lane in 1/256 ps: 2.5, 5, 8, 16, 32, 64 GT/s.
const fn bit_units(gen: Generation) -> u64 {
    match gen {
        Generation::Gen1 => 102_400,
        Generation::Gen2 => 51_200,
        Generation::Gen3 => 32_000,
        Generation::Gen4 => 16_000,
        Generation::Gen5 => 8_000,
        Generation::Gen6 => 4_000,
    }
}

/// Gen1 ACK transmission latency limits (symbol times), `[width x1..x32][MPS 128..4096]`,
/// PCIe Base Spec tables; Gen2 adds 51 and Gen3+ 96 symbol times of internal delay.
const ACK_LIMIT_GEN1: [[u32; 6]; 6] = [
    [237, 416, 559, 1071, 2095, 4143],
    [128, 217, 289, 545, 1057, 2081],
    [73, 118, 154, 282, 538, 1050],
    [67, 107, 86, 150, 278, 534],
    [48, 72, 86, 150, 278, 534],
    [33, 45, 52, 84, 148, 276],
];

/// Exact timing of one link direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkTiming {
    /// Generation.
    pub gen: Generation,
    /// Lanes.
    pub width: u8,
    units_per_byte: u64,
    units_per_ps: u128,
}

impl LinkTiming {
    /// Timing for `gen` × `width` lanes.
    pub fn new(gen: Generation, width: u8) -> LinkTiming {
        let width = width.max(1);
        let (num, den) = phy::encoding(gen);
        let (skp_num, skp_den) = match gen {
            Generation::Gen1 | Generation::Gen2 => (1538u64, 1534u64),
            Generation::Gen6 => (256, 236),
            _ => (376, 375),
        };
        // per byte per lane: 8 bits × bit time × den/num × skp_num / skp_den
        // expressed in units of 1/(256 × skp_den) ps per lane.
        let upb = 8 * bit_units(gen) * den as u64 / num as u64 * skp_num;
        LinkTiming {
            gen,
            width,
            units_per_byte: upb,
            units_per_ps: 256u128 * width as u128 * skp_den as u128,
        }
    }

    /// Units of wire time `bytes` take (exact).
    #[inline]
    pub fn units(&self, bytes: u64) -> u128 {
        bytes as u128 * self.units_per_byte as u128
    }

    /// Units in one picosecond.
    #[inline]
    pub fn units_per_ps(&self) -> u128 {
        self.units_per_ps
    }

    /// `ps` expressed in units.
    #[inline]
    pub fn ps_to_units(&self, ps: u64) -> u128 {
        ps as u128 * self.units_per_ps
    }

    /// Units rounded up to whole picoseconds.
    #[inline]
    pub fn units_to_ps_ceil(&self, units: u128) -> u64 {
        if units <= u64::MAX as u128 {
            // The common case (the first seconds of simulated time): a 64-bit division.
            return (units as u64).div_ceil(self.units_per_ps as u64);
        }
        units.div_ceil(self.units_per_ps).min(u64::MAX as u128) as u64
    }

    /// Wire bytes of a TLP of `tlp_bytes` (header + payload + ECRC): framing, sequence
    /// number and LCRC added (Gen6: the TLP bytes alone; the flit share is in the rate).
    #[inline]
    pub fn tlp_wire_bytes(&self, tlp_bytes: u64) -> u64 {
        tlp_bytes + phy::tlp_framing_overhead(self.gen) as u64
    }

    /// Wire bytes of one DLLP (0 in Flit mode).
    #[inline]
    pub fn dllp_wire_bytes(&self) -> u64 {
        phy::dllp_wire_bytes(self.gen) as u64
    }

    /// One symbol time in 1/256 ps (10 bit times at 8b/10b, 8 at 128b/130b and later).
    pub fn symbol_units_256(&self) -> u64 {
        let bits = match self.gen {
            Generation::Gen1 | Generation::Gen2 => 10,
            _ => 8,
        };
        bits * bit_units(self.gen)
    }

    /// `symbols` symbol times in picoseconds (rounded up).
    pub fn symbols_ps(&self, symbols: u64) -> u64 {
        (symbols * self.symbol_units_256()).div_ceil(256)
    }

    /// The spec's ACK transmission latency limit in symbol times for MPS `mps`.
    pub fn ack_limit_symbols(&self, mps: u16) -> u64 {
        let wi = match self.width {
            0..=1 => 0,
            2 => 1,
            3..=4 => 2,
            5..=8 => 3,
            9..=16 => 4,
            _ => 5,
        };
        let mi = match mps {
            0..=128 => 0,
            129..=256 => 1,
            257..=512 => 2,
            513..=1024 => 3,
            1025..=2048 => 4,
            _ => 5,
        };
        let extra = match self.gen {
            Generation::Gen1 => 0,
            Generation::Gen2 => 51,
            _ => 96,
        };
        (ACK_LIMIT_GEN1[wi][mi] + extra) as u64
    }

    /// How long this transmitter takes to leave L0s with `n_fts` Fast Training
    /// Sequences, in picoseconds (rounded up). At 8b/10b (Gen1/2) it sends `n_fts` FTS
    /// ordered sets and then one SKP ordered set, 4 symbols each; at 128b/130b (Gen3–5)
    /// an EIEOS, `n_fts` FTS ordered sets and an SDS, one 130-bit block each. All lanes
    /// send in parallel, so the width does not matter. Flit mode (Gen6) has no L0s: 0.
    ///
    /// ```
    /// use pcielab_fabric::timed::LinkTiming;
    /// use pcielab_wire::Generation;
    /// // Gen1: 65 ordered sets × 4 symbols × 4 ns.
    /// assert_eq!(LinkTiming::new(Generation::Gen1, 4).l0s_exit_ps(64), 1_040_000);
    /// // Gen3: 66 blocks × 130 bits × 125 ps.
    /// assert_eq!(LinkTiming::new(Generation::Gen3, 8).l0s_exit_ps(64), 1_072_500);
    /// ```
    pub fn l0s_exit_ps(&self, n_fts: u8) -> u64 {
        let n = n_fts as u64;
        match self.gen {
            Generation::Gen1 | Generation::Gen2 => self.symbols_ps((n + 1) * 4),
            Generation::Gen6 => 0,
            _ => ((n + 2) * 130 * bit_units(self.gen)).div_ceil(256),
        }
    }

    /// The replay timeout in picoseconds: the spec formula (quoted in seed 002)
    /// `((MPS + TLPOverhead) / Width × AckFactor + InternalDelay) × 3 + RxL0sAdjustment`
    /// symbol times, i.e. three times the ACK latency limit with RxL0sAdjustment 0.
    pub fn replay_timeout_ps(&self, mps: u16) -> u64 {
        self.symbols_ps(3 * self.ack_limit_symbols(mps))
    }
}

/// Default [`SimConfig::n_fts`](crate::timed::SimConfig::n_fts): the N_FTS a receiver asks for in training.
pub const DEFAULT_N_FTS: u8 = 64;

/// Default [`SimConfig::aspm_l1_exit`](crate::timed::SimConfig::aspm_l1_exit): the L1 exit latency.
pub const DEFAULT_L1_EXIT: SimDuration = SimDuration::from_us(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gen3_x8_byte_times_hand_computed() {
        let t = LinkTiming::new(Generation::Gen3, 8);
        // 264 wire bytes of a 256-byte MWr at Gen3 x8: 264 × 8 bits × 130/128 / 8 lanes
        // × 125 ps × 376/375 = 33515.625 × 376/375 ps... exact: 264*8*125*130/128/8*376/375
        let exact_num = 264u128 * 8 * 125 * 130 * 376;
        let exact_den = 128u128 * 8 * 375;
        let ps = t.units_to_ps_ceil(t.units(264));
        assert_eq!(ps as u128, exact_num.div_ceil(exact_den));
    }

    #[test]
    fn gen5_bit_time_is_31_25_ps_without_drift() {
        let t = LinkTiming::new(Generation::Gen5, 1);
        // 1 million bytes one at a time sum exactly to the time of 1 million bytes.
        let one = t.units(1);
        let total: u128 = (0..1_000_000u64).map(|_| one).sum();
        assert_eq!(total, t.units(1_000_000));
        // 1e6 bytes × 8 bits × 31.25 ps × 130/128 × 376/375
        let want = (1_000_000u128 * 8 * 3125 * 130 * 376).div_ceil(100 * 128 * 375);
        assert_eq!(t.units_to_ps_ceil(total) as u128, want);
    }

    #[test]
    fn gen1_symbol_and_timer_values() {
        let t = LinkTiming::new(Generation::Gen1, 1);
        assert_eq!(t.symbols_ps(1), 4_000); // 10 bits × 400 ps
        assert_eq!(t.ack_limit_symbols(128), 237);
        assert_eq!(t.replay_timeout_ps(128), 3 * 237 * 4_000);
        let t2 = LinkTiming::new(Generation::Gen2, 4);
        assert_eq!(t2.ack_limit_symbols(256), 118 + 51);
        assert_eq!(t2.symbols_ps(1), 2_000);
    }
}
