//! Data-link framing of a TLP: sequence number in front, LCRC behind.
//!
//! ```text
//!  byte 0          byte 1          bytes 2 .. n-4        bytes n-4 .. n
//! +-------+-------+---------------+---------------------+----------------+
//! | rsvd  | Seq[11:8] | Seq[7:0]  | TLP (opaque here)   | LCRC (32 bits) |
//! +-------+-------+---------------+---------------------+----------------+
//!  bits 7:4 = 0000b
//! ```
//!
//! The LCRC covers the two sequence bytes (reserved bits included) and the TLP; it is the
//! reflected CRC-32 of [`crate::crc::crc32`] stored little-endian. A transmitter that
//! *nullifies* a TLP (ends it with EDB) sends the bitwise complement of the LCRC; the
//! receiver then discards the TLP silently without a Nak. [`Frame::lcrc_status`] tells
//! the three cases apart.
//!
//! The TLP bytes are opaque: this module never looks inside them.
//!
//! With 128b/130b encoding (Gen3–5) the 4 reserved bits are not transmitted: the STP
//! token ([`crate::phy::StpToken`]) carries the sequence number and receivers take the
//! reserved bits as `0000b` when they check the LCRC, which is what [`DllFrameRepr::emit`]
//! writes.
//!
//! # Safety contract
//!
//! * [`Frame::check_len`] accepts any buffer of at least 6 bytes (2 sequence + 4 LCRC);
//!   after it succeeds **no getter or setter of [`Frame`] panics**.
//! * [`DllFrameRepr::parse`] never panics; it returns [`Error::Crc`] (offset of the LCRC)
//!   for a bad LCRC and [`Error::Field`] naming `"LCRC"` for a nullified TLP.
//! * [`DllFrameRepr::emit`] never panics; a short buffer gives [`Error::BufferTooSmall`].
//! * Parsing borrows the TLP from the input: no copy, no allocation.
//!
//! ```
//! use pcielab_wire::dll::{DllFrameRepr, Frame};
//! use pcielab_wire::SeqNum;
//!
//! let tlp = [0x40, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x0f, 0xfe, 0xdc, 0xba, 0x98,
//!            0xde, 0xad, 0xbe, 0xef];
//! let repr = DllFrameRepr { seq: SeqNum::new(7).unwrap(), tlp: &tlp };
//! let mut buf = vec![0u8; repr.buffer_len()];
//! repr.emit(&mut buf).unwrap();
//! let parsed = DllFrameRepr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap();
//! assert_eq!(parsed, repr);
//! ```

use crate::crc::crc32;
use crate::error::{Error, Result};
use crate::types::SeqNum;

/// Bytes in front of the TLP: 4 reserved bits and the 12-bit sequence number.
pub const SEQ_LEN: usize = 2;
/// Bytes of LCRC behind the TLP.
pub const LCRC_LEN: usize = 4;
/// Bytes the data link layer adds to a TLP.
pub const OVERHEAD: usize = SEQ_LEN + LCRC_LEN;

mod field {
    use core::ops::Range;
    /// Reserved (bits 7:4 of byte 0) and sequence number.
    pub const SEQ: Range<usize> = 0..2;
    /// First byte of the TLP.
    pub const TLP_START: usize = 2;
}

/// The outcome of checking a frame's LCRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LcrcStatus {
    /// The LCRC matches.
    Good,
    /// The LCRC is the complement of the computed value: a nullified TLP, to be discarded
    /// silently (no Nak, sequence number not advanced).
    Nullified,
    /// Neither: a corrupted TLP (the receiver Naks it).
    Bad {
        /// LCRC found in the frame.
        found: u32,
        /// LCRC computed over sequence bytes and TLP.
        computed: u32,
    },
}

/// A read/write view of a data-link frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer has room for the sequence number and the LCRC.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < OVERHEAD {
            Err(Error::Truncated {
                what: "DLL frame (2 sequence bytes + 4 LCRC bytes)",
                needed: OVERHEAD,
                available: len,
            })
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 4 reserved bits in front of the sequence number (0 when sent by the spec).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The TLP sequence number.
    #[inline]
    pub fn seq(&self) -> SeqNum {
        let d = &self.buffer.as_ref()[field::SEQ];
        SeqNum::from_bits_truncate(u16::from_be_bytes([d[0], d[1]]))
    }

    /// Byte offset of the LCRC.
    #[inline]
    pub fn lcrc_offset(&self) -> usize {
        self.buffer.as_ref().len() - LCRC_LEN
    }

    /// The TLP bytes (between the sequence number and the LCRC).
    #[inline]
    pub fn tlp(&self) -> &[u8] {
        let end = self.lcrc_offset();
        &self.buffer.as_ref()[field::TLP_START..end]
    }

    /// The LCRC as stored (the value whose little-endian bytes are the last 4 bytes).
    #[inline]
    pub fn lcrc(&self) -> u32 {
        let d = self.buffer.as_ref();
        let o = self.lcrc_offset();
        u32::from_le_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]])
    }

    /// The LCRC computed over the sequence bytes and the TLP.
    #[inline]
    pub fn compute_lcrc(&self) -> u32 {
        crc32(&self.buffer.as_ref()[..self.lcrc_offset()])
    }

    /// Classifies the LCRC: good, nullified (complemented) or bad.
    pub fn lcrc_status(&self) -> LcrcStatus {
        let (found, computed) = (self.lcrc(), self.compute_lcrc());
        if found == computed {
            LcrcStatus::Good
        } else if found == !computed {
            LcrcStatus::Nullified
        } else {
            LcrcStatus::Bad { found, computed }
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the sequence number and clears the reserved bits.
    #[inline]
    pub fn set_seq(&mut self, seq: SeqNum) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&seq.value().to_be_bytes());
    }

    /// The TLP bytes, writable.
    #[inline]
    pub fn tlp_mut(&mut self) -> &mut [u8] {
        let end = self.lcrc_offset();
        &mut self.buffer.as_mut()[field::TLP_START..end]
    }

    /// Writes the LCRC computed over the sequence bytes and the TLP.
    #[inline]
    pub fn fill_lcrc(&mut self) {
        let c = self.compute_lcrc();
        let o = self.lcrc_offset();
        self.buffer.as_mut()[o..].copy_from_slice(&c.to_le_bytes());
    }

    /// Writes the complemented LCRC that marks a nullified TLP.
    #[inline]
    pub fn fill_lcrc_nullified(&mut self) {
        let c = !self.compute_lcrc();
        let o = self.lcrc_offset();
        self.buffer.as_mut()[o..].copy_from_slice(&c.to_le_bytes());
    }
}

/// A TLP as the data link layer sends it: sequence number plus borrowed TLP bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DllFrameRepr<'a> {
    /// TLP sequence number.
    pub seq: SeqNum,
    /// The TLP, opaque.
    pub tlp: &'a [u8],
}

impl<'a> DllFrameRepr<'a> {
    /// Parses a frame whose LCRC is good; the TLP is borrowed from the buffer.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&'a T>) -> Result<DllFrameRepr<'a>> {
        frame.check_len()?;
        let buf: &'a [u8] = frame.buffer.as_ref();
        let f = Frame::new_unchecked(buf);
        match f.lcrc_status() {
            LcrcStatus::Good => Ok(DllFrameRepr {
                seq: f.seq(),
                tlp: &buf[field::TLP_START..buf.len() - LCRC_LEN],
            }),
            LcrcStatus::Nullified => Err(Error::Field {
                field: "LCRC",
                value: f.lcrc() as u64,
                offset: f.lcrc_offset(),
                reason: "nullified TLP (LCRC is the complement of the computed value)",
            }),
            LcrcStatus::Bad { found, computed } => Err(Error::Crc {
                what: "LCRC",
                found,
                computed,
                offset: f.lcrc_offset(),
            }),
        }
    }

    /// Parses a byte slice holding exactly one frame.
    pub fn from_bytes(bytes: &'a [u8]) -> Result<DllFrameRepr<'a>> {
        Self::parse(&Frame::new_checked(bytes)?)
    }

    /// Bytes needed to emit: TLP + 6.
    pub const fn buffer_len(&self) -> usize {
        self.tlp.len() + OVERHEAD
    }

    fn emit_common(&self, buf: &mut [u8], nullify: bool) -> Result<usize> {
        let n = self.buffer_len();
        if buf.len() < n {
            return Err(Error::BufferTooSmall {
                needed: n,
                available: buf.len(),
            });
        }
        let mut f = Frame::new_unchecked(&mut buf[..n]);
        f.set_seq(self.seq);
        f.tlp_mut().copy_from_slice(self.tlp);
        if nullify {
            f.fill_lcrc_nullified();
        } else {
            f.fill_lcrc();
        }
        Ok(n)
    }

    /// Writes the frame into the start of `buf`, returning the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_common(buf, false)
    }

    /// Writes the frame with a complemented LCRC, as a transmitter nullifies a TLP.
    pub fn emit_nullified(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_common(buf, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit-serial LCRC written from the spec, independent of crc32fast.
    fn serial_lcrc(data: &[u8]) -> [u8; 4] {
        crate::crc::tests::serial_reference(data)
    }

    #[test]
    fn hand_built_frame() {
        let tlp = [
            0x00u8, 0x00, 0x00, 0x01, 0xab, 0xcd, 0x12, 0x0f, 0x10, 0x00, 0x00, 0x40,
        ];
        let mut expected = vec![0x0a, 0xbc];
        expected.extend_from_slice(&tlp);
        let l = serial_lcrc(&expected);
        expected.extend_from_slice(&l);

        let repr = DllFrameRepr {
            seq: SeqNum::new(0xabc).unwrap(),
            tlp: &tlp,
        };
        let mut buf = vec![0xffu8; repr.buffer_len() + 3];
        assert_eq!(repr.emit(&mut buf).unwrap(), 18);
        assert_eq!(&buf[..18], &expected[..]);
        let parsed = DllFrameRepr::from_bytes(&expected).unwrap();
        assert_eq!(parsed, repr);
        // Zero copy: the TLP slice points into the input.
        assert_eq!(parsed.tlp.as_ptr(), expected[2..].as_ptr());
    }

    #[test]
    fn nullified_and_corrupt() {
        let tlp = [1u8, 2, 3, 4];
        let repr = DllFrameRepr {
            seq: SeqNum::new(1).unwrap(),
            tlp: &tlp,
        };
        let mut buf = [0u8; 10];
        repr.emit_nullified(&mut buf).unwrap();
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.lcrc_status(), LcrcStatus::Nullified);
        let l = serial_lcrc(&buf[..6]);
        assert_eq!(buf[6..], [!l[0], !l[1], !l[2], !l[3]]);
        assert!(matches!(
            DllFrameRepr::from_bytes(&buf),
            Err(Error::Field {
                field: "LCRC",
                offset: 6,
                ..
            })
        ));
        repr.emit(&mut buf).unwrap();
        for bit in 0..80 {
            let mut bad = buf;
            bad[bit / 8] ^= 1 << (bit % 8);
            match DllFrameRepr::from_bytes(&bad) {
                Err(Error::Crc {
                    what: "LCRC",
                    offset: 6,
                    found,
                    computed,
                }) => assert_ne!(found, computed),
                other => panic!("bit {bit}: {other:?}"),
            }
        }
    }

    #[test]
    fn short_buffers() {
        for n in 0..6 {
            assert_eq!(
                DllFrameRepr::from_bytes(&[0u8; 6][..n]),
                Err(Error::Truncated {
                    what: "DLL frame (2 sequence bytes + 4 LCRC bytes)",
                    needed: 6,
                    available: n
                })
            );
        }
        let repr = DllFrameRepr {
            seq: SeqNum::default(),
            tlp: &[0; 12],
        };
        assert_eq!(
            repr.emit(&mut [0u8; 17]),
            Err(Error::BufferTooSmall {
                needed: 18,
                available: 17
            })
        );
    }

    #[test]
    fn reserved_bits_are_covered_by_lcrc() {
        let repr = DllFrameRepr {
            seq: SeqNum::new(5).unwrap(),
            tlp: &[9; 4],
        };
        let mut buf = [0u8; 10];
        repr.emit(&mut buf).unwrap();
        buf[0] |= 0x50;
        let mut f = Frame::new_checked(&mut buf[..]).unwrap();
        assert_eq!(f.reserved(), 5);
        assert!(matches!(f.lcrc_status(), LcrcStatus::Bad { .. }));
        f.fill_lcrc();
        assert_eq!(f.lcrc_status(), LcrcStatus::Good);
        assert_eq!(f.seq().value(), 5);
    }

    proptest! {
        #[test]
        fn emit_then_parse(seq in 0u16..4096, tlp in proptest::collection::vec(any::<u8>(), 0..300)) {
            let repr = DllFrameRepr { seq: SeqNum::new(seq).unwrap(), tlp: &tlp };
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf).unwrap();
            prop_assert_eq!(&buf[buf.len() - 4..], &serial_lcrc(&buf[..buf.len() - 4])[..]);
            prop_assert_eq!(DllFrameRepr::from_bytes(&buf).unwrap(), repr);
        }

        #[test]
        fn parse_then_emit(mut bytes in proptest::collection::vec(any::<u8>(), 6..200)) {
            // Make a frame with a good LCRC and reserved bits clear, then round-trip it.
            bytes[0] &= 0x0f;
            let n = bytes.len();
            let l = serial_lcrc(&bytes[..n - 4]);
            bytes[n - 4..].copy_from_slice(&l);
            let repr = DllFrameRepr::from_bytes(&bytes).unwrap();
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut out).unwrap();
            prop_assert_eq!(out, bytes);
        }

        #[test]
        fn getters_never_panic_after_check(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(f) = Frame::new_checked(&bytes[..]) {
                let _ = (f.reserved(), f.seq(), f.tlp(), f.lcrc(), f.lcrc_status());
            } else {
                prop_assert!(bytes.len() < 6);
            }
            let _ = DllFrameRepr::from_bytes(&bytes);
        }
    }
}
