//! Physical-layer framing per generation, for byte and bit accounting in timing models.
//!
//! | Generation | encoding  | TLP framing                          | DLLP framing        |
//! |------------|-----------|--------------------------------------|---------------------|
//! | Gen1, Gen2 | 8b/10b    | STP (K27.7) … END (K29.7): 1 + 1     | SDP (K28.2) … END   |
//! | Gen3–Gen5  | 128b/130b | 4-byte STP token (carries the seq)   | 2-byte SDP token    |
//! | Gen6       | 1b/1b PAM4, Flit mode: 256-byte flits (236 TLP, 6 DLP, 8 CRC, 6 FEC) |
//!
//! A TLP on the wire in non-Flit mode is therefore
//!
//! ```text
//! Gen1/2:  STP | seq(2) | TLP | LCRC(4) | END          = TLP + 8 bytes
//! Gen3-5:  STP token(4, includes seq) | TLP | LCRC(4)  = TLP + 8 bytes
//! ```
//!
//! and a DLLP is 8 bytes (SDP + 6 + END, or SDP token + 6). In Flit mode TLPs carry no
//! sequence number or LCRC of their own and DLLPs travel in the 6 DLP bytes of each flit,
//! so the per-packet overheads are 0 and the cost is accounted per flit
//! ([`flits_for_tlp_bytes`]).
//!
//! All functions are exact integer arithmetic. SKP ordered sets are not folded into
//! the byte counts; their cadence is given by [`skp_cadence`] for a model that wants them.
//!
//! ```
//! use pcielab_wire::{phy, Generation};
//! assert_eq!(phy::tlp_framing_overhead(Generation::Gen3), 8);
//! assert_eq!(phy::encoding(Generation::Gen3), (128, 130));
//! // 16 bytes at 128b/130b are one block: 130 bits.
//! assert_eq!(phy::bits_on_wire(Generation::Gen4, 16), 130);
//! ```

use crate::error::{Error, Result};
use crate::types::{Generation, SeqNum};

/// 8b/10b special symbols, as the data byte value `y << 5 | x` of `Kx.y`.
pub mod k {
    /// K27.7 STP: start of TLP.
    pub const STP: u8 = 0xfb;
    /// K28.2 SDP: start of DLLP.
    pub const SDP: u8 = 0x5c;
    /// K29.7 END: end of TLP or DLLP.
    pub const END: u8 = 0xfd;
    /// K30.7 EDB: end of a nullified TLP.
    pub const EDB: u8 = 0xfe;
    /// K28.5 COM: comma.
    pub const COM: u8 = 0xbc;
    /// K28.0 SKP.
    pub const SKP: u8 = 0x1c;
    /// K23.7 PAD.
    pub const PAD: u8 = 0xf7;
    /// K28.1 FTS.
    pub const FTS: u8 = 0x3c;
    /// K28.3 IDL (in the Electrical Idle ordered set).
    pub const IDL: u8 = 0x7c;
    /// K28.7 EIE.
    pub const EIE: u8 = 0xfc;
}

/// 128b/130b framing tokens (non-Flit mode), bytes in transmission order.
pub mod token {
    /// SDP token: start of a DLLP.
    pub const SDP: [u8; 2] = [0xf0, 0xac];
    /// IDL token: logical idle.
    pub const IDL: u8 = 0x00;
    /// EDB token: ends a nullified TLP.
    pub const EDB: [u8; 4] = [0xc0; 4];
    /// EDS token: end of data stream (next block is an ordered set).
    pub const EDS: [u8; 4] = [0x1f, 0x80, 0x90, 0x00];
}

/// Bytes of a flit (Gen6, Flit mode).
pub const FLIT_BYTES: u32 = 256;
/// TLP bytes in a flit.
pub const FLIT_TLP_BYTES: u32 = 236;
/// Data Link Payload bytes in a flit.
pub const FLIT_DLP_BYTES: u32 = 6;
/// CRC bytes in a flit.
pub const FLIT_CRC_BYTES: u32 = 8;
/// FEC (ECC) bytes in a flit.
pub const FLIT_FEC_BYTES: u32 = 6;

/// Line encoding as `(payload bits, line bits)`: 8/10, 128/130, or 1/1 for Gen6 PAM4.
pub const fn encoding(gen: Generation) -> (u32, u32) {
    match gen {
        Generation::Gen1 | Generation::Gen2 => (8, 10),
        Generation::Gen3 | Generation::Gen4 | Generation::Gen5 => (128, 130),
        Generation::Gen6 => (1, 1),
    }
}

/// True for generations that run in Flit mode in this model (Gen6 only).
pub const fn is_flit_mode(gen: Generation) -> bool {
    matches!(gen, Generation::Gen6)
}

/// Bytes the physical layer adds around a data-link frame (sequence + TLP + LCRC):
/// STP and END for Gen1/2; for Gen3–5 the 4-byte STP token replaces the 2 sequence bytes,
/// so it adds 2; 0 in Flit mode.
pub const fn phy_tlp_framing_bytes(gen: Generation) -> u32 {
    match gen {
        Generation::Gen6 => 0,
        _ => 2,
    }
}

/// Bytes on the wire beyond the TLP itself: data-link sequence + LCRC (6) plus physical
/// framing. 8 for Gen1–5; 0 for Gen6 (Flit mode, accounted per flit).
pub const fn tlp_framing_overhead(gen: Generation) -> u32 {
    match gen {
        Generation::Gen6 => 0,
        _ => crate::dll::OVERHEAD as u32 + phy_tlp_framing_bytes(gen),
    }
}

/// Bytes one DLLP occupies on the wire: 8 for Gen1–5 (SDP + 6 + END, or SDP token + 6);
/// 0 for Gen6 (DLLPs ride in the DLP bytes every flit already carries).
pub const fn dllp_wire_bytes(gen: Generation) -> u32 {
    match gen {
        Generation::Gen1 | Generation::Gen2 => 1 + crate::dllp::DLLP_LEN as u32 + 1,
        Generation::Gen3 | Generation::Gen4 | Generation::Gen5 => {
            token::SDP.len() as u32 + crate::dllp::DLLP_LEN as u32
        }
        Generation::Gen6 => 0,
    }
}

/// Bytes a TLP of `tlp_bytes` occupies before line encoding (TLP + framing overhead).
/// For Gen6 this is whole flits: `flits_for_tlp_bytes(tlp_bytes) × 256`.
pub const fn tlp_wire_bytes(gen: Generation, tlp_bytes: u64) -> u64 {
    if is_flit_mode(gen) {
        flits_for_tlp_bytes(tlp_bytes) * FLIT_BYTES as u64
    } else {
        tlp_bytes + tlp_framing_overhead(gen) as u64
    }
}

/// Flits needed to carry `tlp_bytes` bytes of TLPs (236 per flit), rounded up.
pub const fn flits_for_tlp_bytes(tlp_bytes: u64) -> u64 {
    tlp_bytes.div_ceil(FLIT_TLP_BYTES as u64)
}

/// Line bits needed to send `bytes` bytes (summed over all lanes): `bytes × 8 × den / num`,
/// rounded up to a whole bit. Exact for 8b/10b and 1b/1b, and for 128b/130b whenever
/// `bytes` is a multiple of 8 (a whole 16-byte block is 130 bits).
pub const fn bits_on_wire(gen: Generation, bytes: u64) -> u64 {
    let (num, den) = encoding(gen);
    (bytes * 8 * den as u64).div_ceil(num as u64)
}

/// Unit of a SKP cadence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkpUnit {
    /// Symbol times (8b/10b).
    Symbols,
    /// 130-bit blocks (128b/130b).
    Blocks,
}

/// How often a transmitter sends a SKP ordered set, and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SkpCadence {
    /// Shortest interval between SKP ordered sets.
    pub interval_min: u32,
    /// Longest interval between SKP ordered sets.
    pub interval_max: u32,
    /// Unit of the interval.
    pub unit: SkpUnit,
    /// Length of one SKP ordered set in symbols per lane (the nominal length for
    /// 128b/130b, which retimers may grow or shrink by 4).
    pub os_symbols: u32,
}

/// SKP ordered-set cadence with common reference clocks (not SRIS), per the Base Spec:
///
/// * 8b/10b: COM + 3 SKP (4 symbols) every 1180–1538 symbol times;
/// * 128b/130b: a 16-symbol standard SKP ordered set (one 130-bit block) every 370–375
///   blocks;
/// * Gen6 (1b/1b, Flit mode): not modelled here, `None`.
///
/// With SRIS the intervals shrink to 154 symbol times and 37 blocks ([`SRIS_SKP_INTERVAL`]).
pub const fn skp_cadence(gen: Generation) -> Option<SkpCadence> {
    match gen {
        Generation::Gen1 | Generation::Gen2 => Some(SkpCadence {
            interval_min: 1180,
            interval_max: 1538,
            unit: SkpUnit::Symbols,
            os_symbols: 4,
        }),
        Generation::Gen3 | Generation::Gen4 | Generation::Gen5 => Some(SkpCadence {
            interval_min: 370,
            interval_max: 375,
            unit: SkpUnit::Blocks,
            os_symbols: 16,
        }),
        Generation::Gen6 => None,
    }
}

/// SKP interval with separate reference clocks (SRIS): `(8b/10b symbol times, 128b/130b
/// blocks)`.
pub const SRIS_SKP_INTERVAL: (u32, u32) = (154, 37);

/// Frame CRC of an STP token's 11-bit TLP Length, by the spec's equations:
///
/// ```text
/// C[0] = L10^L7^L6^L4^L2^L1^L0     C[2] = L9^L8^L6^L4^L3^L2^L1
/// C[1] = L10^L9^L7^L5^L4^L3^L2     C[3] = L8^L7^L5^L3^L2^L1^L0
/// ```
pub const fn frame_crc(length: u16) -> u8 {
    let b = length as u32;
    let l = [
        (b & 1) as u8,
        ((b >> 1) & 1) as u8,
        ((b >> 2) & 1) as u8,
        ((b >> 3) & 1) as u8,
        ((b >> 4) & 1) as u8,
        ((b >> 5) & 1) as u8,
        ((b >> 6) & 1) as u8,
        ((b >> 7) & 1) as u8,
        ((b >> 8) & 1) as u8,
        ((b >> 9) & 1) as u8,
        ((b >> 10) & 1) as u8,
    ];
    let c0 = l[10] ^ l[7] ^ l[6] ^ l[4] ^ l[2] ^ l[1] ^ l[0];
    let c1 = l[10] ^ l[9] ^ l[7] ^ l[5] ^ l[4] ^ l[3] ^ l[2];
    let c2 = l[9] ^ l[8] ^ l[6] ^ l[4] ^ l[3] ^ l[2] ^ l[1];
    let c3 = l[8] ^ l[7] ^ l[5] ^ l[3] ^ l[2] ^ l[1] ^ l[0];
    c0 | (c1 << 1) | (c2 << 2) | (c3 << 3)
}

/// Frame Parity: even parity over the TLP Length and the Frame CRC.
pub const fn frame_parity(length: u16) -> bool {
    ((length & 0x7ff).count_ones() + frame_crc(length).count_ones()) % 2 == 1
}

/// The 128b/130b STP framing token.
///
/// ```text
///  byte 0                byte 1             byte 2               byte 3
/// +-------------+-------+---+-------------+-----------+---------+---------------+
/// | Length[3:0] | 1111b | FP| Length[10:4]| FCRC[3:0] | Seq[11:8]| Seq[7:0]     |
/// +-------------+-------+---+-------------+-----------+---------+---------------+
/// ```
///
/// Length counts DWs of everything from the token to the LCRC: `TLP DWs + 2`.
///
/// ```
/// use pcielab_wire::phy::StpToken;
/// use pcielab_wire::SeqNum;
/// // A 3 DW header + 1 DW payload TLP: Length = 1 + 3 + 1 + 1 = 6 (the spec's example).
/// let t = StpToken::for_tlp(16, SeqNum::new(0).unwrap()).unwrap();
/// assert_eq!(t.length_dw, 6);
/// assert_eq!(StpToken::decode(&t.encode()).unwrap(), t);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StpToken {
    /// TLP Length in DW (11 bits), token and LCRC included.
    pub length_dw: u16,
    /// TLP sequence number.
    pub seq: SeqNum,
}

impl StpToken {
    /// The largest TLP Length of a TLP (1152..=1535 are reserved, above is PMUX).
    pub const MAX_LENGTH_DW: u16 = 1151;

    /// The token for a TLP of `tlp_bytes` bytes (a multiple of 4).
    pub const fn for_tlp(tlp_bytes: usize, seq: SeqNum) -> Result<StpToken> {
        if tlp_bytes % 4 != 0 || tlp_bytes / 4 + 2 > Self::MAX_LENGTH_DW as usize {
            return Err(Error::Invalid {
                what: "TLP size for an STP token",
                value: tlp_bytes as u64,
                allowed: "a multiple of 4 up to 4596 bytes",
            });
        }
        Ok(StpToken {
            length_dw: (tlp_bytes / 4 + 2) as u16,
            seq,
        })
    }

    /// The 4 token bytes in transmission order. Only the low 11 bits of `length_dw` count.
    pub const fn encode(&self) -> [u8; 4] {
        let len = self.length_dw & 0x7ff;
        let seq = self.seq.value();
        [
            (((len & 0xf) as u8) << 4) | 0xf,
            ((frame_parity(len) as u8) << 7) | (len >> 4) as u8,
            (frame_crc(len) << 4) | (seq >> 8) as u8,
            seq as u8,
        ]
    }

    /// Decodes and checks a token: STP identifier, Frame CRC, Frame Parity, and that the
    /// Length is not 1 (which is the EDS token).
    pub fn decode(bytes: &[u8]) -> Result<StpToken> {
        if bytes.len() < 4 {
            return Err(Error::Truncated {
                what: "STP token",
                needed: 4,
                available: bytes.len(),
            });
        }
        if bytes[0] & 0xf != 0xf {
            return Err(Error::Field {
                field: "STP token identifier",
                value: (bytes[0] & 0xf) as u64,
                offset: 0,
                reason: "bits 3:0 of an STP token are 1111b",
            });
        }
        let len = ((bytes[1] as u16 & 0x7f) << 4) | (bytes[0] >> 4) as u16;
        let fcrc = bytes[2] >> 4;
        if fcrc != frame_crc(len) {
            return Err(Error::Crc {
                what: "STP Frame CRC",
                found: fcrc as u32,
                computed: frame_crc(len) as u32,
                offset: 2,
            });
        }
        let fp = bytes[1] >> 7 == 1;
        if fp != frame_parity(len) {
            return Err(Error::Crc {
                what: "STP Frame Parity",
                found: fp as u32,
                computed: frame_parity(len) as u32,
                offset: 1,
            });
        }
        if len == 1 {
            return Err(Error::Field {
                field: "TLP Length",
                value: 1,
                offset: 0,
                reason: "Length 1 is the EDS token, not an STP token",
            });
        }
        Ok(StpToken {
            length_dw: len,
            seq: SeqNum::from_bits_truncate(u16::from_be_bytes([bytes[2] & 0xf, bytes[3]])),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's implementation note: FCRC = (L0·x^14 + L1·x^13 + … + L10·x^4) mod
    /// (x^4 + x + 1), computed here by polynomial long division.
    fn fcrc_by_division(length: u16) -> u8 {
        let mut v: u32 = 0;
        for i in 0..11 {
            if (length >> i) & 1 == 1 {
                v |= 1 << (14 - i);
            }
        }
        for bit in (4..15).rev() {
            if (v >> bit) & 1 == 1 {
                v ^= 0b10011 << (bit - 4);
            }
        }
        v as u8
    }

    #[test]
    fn frame_crc_equals_polynomial_remainder_and_parity_reduces() {
        for len in 0..2048u16 {
            assert_eq!(frame_crc(len), fcrc_by_division(len), "len {len}");
            // The spec's reduced parity: L10^L9^L8^L6^L5^L2^L0.
            let l = |i: u16| (len >> i) & 1;
            let reduced = l(10) ^ l(9) ^ l(8) ^ l(6) ^ l(5) ^ l(2) ^ l(0);
            assert_eq!(frame_parity(len) as u16, reduced, "len {len}");
        }
    }

    #[test]
    fn eds_is_an_stp_shape_with_length_1() {
        // The EDS token of the spec is exactly what the STP encoding gives for Length 1
        // with sequence bits 0: an independent check of bit placement.
        let t = StpToken {
            length_dw: 1,
            seq: SeqNum::default(),
        };
        assert_eq!(t.encode(), token::EDS);
        assert!(matches!(
            StpToken::decode(&token::EDS),
            Err(Error::Field {
                field: "TLP Length",
                ..
            })
        ));
    }

    #[test]
    fn stp_token_round_trip_and_errors() {
        for len in [2u16, 5, 6, 7, 258, 1151, 0x7ff] {
            for seq in [0u16, 1, 0x800, 0xfff] {
                let t = StpToken {
                    length_dw: len,
                    seq: SeqNum::new(seq).unwrap(),
                };
                let b = t.encode();
                assert_eq!(b[0] & 0xf, 0xf);
                assert_eq!(StpToken::decode(&b).unwrap(), t);
                // Any single-bit error in the length/FCRC/FP bits is detected.
                for bit in (4..16).chain(20..24) {
                    let mut bad = b;
                    bad[bit / 8] ^= 1 << (bit % 8);
                    assert!(StpToken::decode(&bad).is_err(), "len {len} bit {bit}");
                }
            }
        }
        assert!(matches!(
            StpToken::decode(&[0xfe, 0, 0, 0]),
            Err(Error::Field { offset: 0, .. })
        ));
        assert!(matches!(
            StpToken::decode(&[0xff, 0]),
            Err(Error::Truncated { needed: 4, .. })
        ));
        assert!(StpToken::for_tlp(13, SeqNum::default()).is_err());
        assert!(StpToken::for_tlp(4 * 1150, SeqNum::default()).is_err());
        assert_eq!(
            StpToken::for_tlp(4 * 1149, SeqNum::default())
                .unwrap()
                .length_dw,
            1151
        );
    }

    #[test]
    fn overheads() {
        use Generation::*;
        for g in [Gen1, Gen2, Gen3, Gen4, Gen5] {
            assert_eq!(tlp_framing_overhead(g), 8, "{g}");
            assert_eq!(dllp_wire_bytes(g), 8, "{g}");
            assert_eq!(tlp_wire_bytes(g, 24), 32);
        }
        assert_eq!(tlp_framing_overhead(Gen6), 0);
        assert_eq!(dllp_wire_bytes(Gen6), 0);
        assert_eq!(
            FLIT_TLP_BYTES + FLIT_DLP_BYTES + FLIT_CRC_BYTES + FLIT_FEC_BYTES,
            FLIT_BYTES
        );
        assert_eq!(flits_for_tlp_bytes(0), 0);
        assert_eq!(flits_for_tlp_bytes(236), 1);
        assert_eq!(flits_for_tlp_bytes(237), 2);
        assert_eq!(tlp_wire_bytes(Gen6, 300), 512);
    }

    #[test]
    fn bits() {
        use Generation::*;
        assert_eq!(bits_on_wire(Gen1, 1), 10);
        assert_eq!(bits_on_wire(Gen2, 100), 1000);
        assert_eq!(bits_on_wire(Gen3, 16), 130);
        assert_eq!(bits_on_wire(Gen5, 8), 65);
        assert_eq!(bits_on_wire(Gen5, 1), 9); // 8.125 rounded up
        assert_eq!(bits_on_wire(Gen6, 256), 2048);
        assert_eq!(bits_on_wire(Gen3, 0), 0);
        assert_eq!(
            skp_cadence(Gen3).map(|c| (c.interval_min, c.interval_max)),
            Some((370, 375))
        );
        assert_eq!(skp_cadence(Gen1).map(|c| c.os_symbols), Some(4));
        assert_eq!(skp_cadence(Gen6), None);
    }

    #[test]
    fn k_codes_are_kx_y() {
        let kxy = |x: u8, y: u8| (y << 5) | x;
        assert_eq!(k::STP, kxy(27, 7));
        assert_eq!(k::SDP, kxy(28, 2));
        assert_eq!(k::END, kxy(29, 7));
        assert_eq!(k::EDB, kxy(30, 7));
        assert_eq!(k::COM, kxy(28, 5));
        assert_eq!(k::SKP, kxy(28, 0));
        assert_eq!(k::PAD, kxy(23, 7));
        assert_eq!(k::FTS, kxy(28, 1));
        assert_eq!(k::IDL, kxy(28, 3));
        assert_eq!(k::EIE, kxy(28, 7));
    }
}
