//! Length and byte enables of one memory request.
//!
//! A request covers whole DWs. The First DW Byte Enables mark the bytes of the first DW
//! that belong to the transfer, the Last DW Byte Enables those of the last DW; every DW
//! in between is fully enabled. A 5-byte transfer starting at address `0x1003`:
//!
//! ```text
//!  address   0x1000            0x1004            0x1008
//!            ├──┬──┬──┬──┐     ├──┬──┬──┬──┐
//!  byte      │0 │1 │2 │3 │     │0 │1 │2 │3 │
//!            └──┴──┴──┴──┘     └──┴──┴──┴──┘
//!  enabled    .  .  .  X        X  X  X  X     ─► Length 2 DW
//!  BE bit     0  1  2  3        0  1  2  3        First BE 1000b (0x8)
//!                                                 Last BE  1111b (0xf)
//! ```
//!
//! Spec rules kept here (PCIe Base Specification, "First/Last DW Byte Enables Rules"):
//! * a 1-DW request has Last DW BE `0000b`, and its First DW BE holds all the enables;
//! * a request of more than 1 DW has non-zero First and Last DW BE, and (being built from
//!   one contiguous byte range) First BE ends at byte 3 and Last BE starts at byte 0;
//! * a zero-length read is a 1-DW read with First and Last BE `0000b` ([`Shape::zero_length`]);
//! * a request never crosses a 4 KiB boundary (so Length never exceeds 1024 DW).

use crate::error::{Error, Result};
use crate::types::ByteEnables;

/// Length and byte enables of one memory request: the header fields that follow from
/// its address and byte count.
///
/// ```
/// use pcielab_wire::dma::{request_shape, Shape};
/// let s = request_shape(0x1003, 5)?;
/// assert_eq!((s.length_dw, s.first_be.bits(), s.last_be.bits()), (2, 0x8, 0xf));
/// assert_eq!(s.byte_count(), 5);
/// assert_eq!(Shape::zero_length().byte_count(), 1); // what its completion reports
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// The Length field in DW, 1..=1024 (decoded: 1024 is encoded as 0 on the wire).
    pub length_dw: u16,
    /// First DW Byte Enables.
    pub first_be: ByteEnables,
    /// Last DW Byte Enables (`0000b` for 1-DW requests).
    pub last_be: ByteEnables,
}

impl Shape {
    /// The shape of a zero-length read: Length 1 DW, First and Last BE `0000b`.
    ///
    /// ```
    /// use pcielab_wire::dma::Shape;
    /// let z = Shape::zero_length();
    /// assert_eq!((z.length_dw, z.first_be.bits(), z.last_be.bits()), (1, 0, 0));
    /// assert!(z.is_zero_length());
    /// ```
    pub const fn zero_length() -> Shape {
        Shape {
            length_dw: 1,
            first_be: ByteEnables::NONE,
            last_be: ByteEnables::NONE,
        }
    }

    /// True for the zero-length read shape (1 DW, no byte enabled).
    pub const fn is_zero_length(self) -> bool {
        self.length_dw == 1 && self.first_be.bits() == 0 && self.last_be.bits() == 0
    }

    /// Payload bytes on the wire (`length_dw * 4`).
    pub const fn payload_len(self) -> u32 {
        self.length_dw as u32 * 4
    }

    /// Offset of the first enabled byte within the first DW (0 when none is enabled);
    /// these are bits \[1:0\] of the Lower Address of the first completion.
    pub const fn first_byte(self) -> u32 {
        match self.first_be.first() {
            Some(i) => i,
            None => 0,
        }
    }

    /// The Byte Count of the first completion of a read of this shape, as the spec
    /// computes it from Length and the byte enables:
    ///
    /// * 1 DW: the span from the first to the last enabled byte (so `1001b` counts 4 —
    ///   disabled bytes between enabled ones count), and `0000b` counts 1;
    /// * more DWs: `Length × 4` minus the disabled bytes at the start of the first DW
    ///   and at the end of the last DW.
    ///
    /// ```
    /// use pcielab_wire::dma::Shape;
    /// use pcielab_wire::ByteEnables;
    /// let be = |b| ByteEnables::new(b).unwrap();
    /// let one = |f| Shape { length_dw: 1, first_be: be(f), last_be: be(0) };
    /// assert_eq!(one(0b1001).byte_count(), 4);
    /// assert_eq!(one(0b0100).byte_count(), 1);
    /// let multi = Shape { length_dw: 3, first_be: be(0b1100), last_be: be(0b0001) };
    /// assert_eq!(multi.byte_count(), 12 - 2 - 3);
    /// ```
    pub const fn byte_count(self) -> u32 {
        if self.length_dw <= 1 {
            match (self.first_be.first(), self.first_be.last()) {
                (Some(f), Some(l)) => l - f + 1,
                _ => 1,
            }
        } else {
            let lead = match self.first_be.first() {
                Some(f) => f,
                None => 0,
            };
            let trail = match self.last_be.last() {
                Some(l) => 3 - l,
                None => 0,
            };
            self.length_dw as u32 * 4 - lead - trail
        }
    }
}

impl Shape {
    /// Checks the spec's Length and byte-enable rules for a memory request of this
    /// shape at `addr` — the receiver's side, for classifying a request as Malformed:
    ///
    /// * Length is 1..=1024 DW and the request does not cross a 4 KiB boundary;
    /// * 1 DW: Last DW BE is `0000b` (any First DW BE, `0000b` included);
    /// * more than 1 DW: neither First nor Last DW BE is `0000b`;
    /// * non-contiguous enables are allowed only in 1-DW requests and in QW-aligned
    ///   (`addr` bit 2 clear) 2-DW requests; every other request enables only bytes
    ///   contiguous with the DWs between its first and last DW, so First DW BE runs up to
    ///   byte 3 and Last DW BE starts at byte 0.
    ///
    /// Memory reads with TH set carry the Steering Tag in the byte-enable byte; do not
    /// check those. Errors are [`Error::Field`] naming the field and its header byte
    /// offset (Length: 2, byte enables: 7, address: 8).
    ///
    /// ```
    /// use pcielab_wire::dma::Shape;
    /// use pcielab_wire::ByteEnables;
    /// let be = |b| ByteEnables::new(b).unwrap();
    /// let two = Shape { length_dw: 2, first_be: be(0b0101), last_be: be(0b1010) };
    /// assert!(two.check(0x1000).is_ok()); // QW aligned: any non-zero pattern
    /// assert!(two.check(0x1004).is_err()); // not QW aligned: must be contiguous
    /// # Ok::<(), pcielab_wire::Error>(())
    /// ```
    pub fn check(self, addr: u64) -> Result<()> {
        let be_byte = ((self.last_be.bits() as u64) << 4) | self.first_be.bits() as u64;
        let bad = |field, reason| {
            Err(Error::Field {
                field,
                value: be_byte,
                offset: 7,
                reason,
            })
        };
        if self.length_dw == 0 || self.length_dw > 1024 {
            return Err(Error::Field {
                field: "Length",
                value: self.length_dw as u64,
                offset: 2,
                reason: "a memory request is 1..=1024 DW long",
            });
        }
        if (addr & 0xffc) + self.payload_len() as u64 > super::PAGE {
            return Err(Error::Field {
                field: "Address",
                value: addr,
                offset: 8,
                reason: "the request crosses a 4 KiB boundary",
            });
        }
        let (first, last) = (self.first_be.bits(), self.last_be.bits());
        if self.length_dw == 1 {
            if last != 0 {
                return bad("Last DW BE", "must be 0000b in a 1-DW request");
            }
            return Ok(());
        }
        if first == 0 {
            return bad(
                "First DW BE",
                "must not be 0000b in a request longer than 1 DW",
            );
        }
        if last == 0 {
            return bad(
                "Last DW BE",
                "must not be 0000b in a request longer than 1 DW",
            );
        }
        if self.length_dw == 2 && addr & 4 == 0 {
            return Ok(());
        }
        // Contiguous up to byte 3: the enabled bits are the top bits of the nibble.
        if (first | (first - 1)) & 0xf != 0xf {
            return bad(
                "First DW BE",
                "must enable a run of bytes ending at byte 3 (only 1-DW and QW-aligned 2-DW requests may do otherwise)",
            );
        }
        // Contiguous from byte 0: the enabled bits are the low bits of the nibble.
        if last & (last + 1) != 0 {
            return bad(
                "Last DW BE",
                "must enable a run of bytes starting at byte 0 (only 1-DW and QW-aligned 2-DW requests may do otherwise)",
            );
        }
        Ok(())
    }
}

/// Length and byte enables of a memory request moving `len` bytes (1..=4096) from
/// `addr`.
///
/// Fails when `len` is 0 (use [`Shape::zero_length`] for a zero-length read) or above
/// 4096, when the request would cross a 4 KiB boundary, or when `addr + len` runs past
/// the end of the 64-bit address space.
///
/// ```
/// use pcielab_wire::dma::request_shape;
/// let s = request_shape(0x2001, 2)?; // bytes 1 and 2 of one DW
/// assert_eq!((s.length_dw, s.first_be.bits(), s.last_be.bits()), (1, 0b0110, 0));
/// let s = request_shape(0x3000, 4096)?; // a whole page
/// assert_eq!((s.length_dw, s.first_be.bits(), s.last_be.bits()), (1024, 0xf, 0xf));
/// assert!(request_shape(0x3ffe, 4).is_err()); // crosses 0x4000
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
pub fn request_shape(addr: u64, len: u32) -> Result<Shape> {
    if len == 0 || len > 4096 {
        return Err(Error::Invalid {
            what: "request length in bytes (for a zero-length read use Shape::zero_length)",
            value: len as u64,
            allowed: "1..=4096",
        });
    }
    if addr.checked_add(len as u64 - 1).is_none() {
        return Err(Error::Invalid {
            what: "request address (address + length runs past 2^64)",
            value: addr,
            allowed: "address + length <= 2^64",
        });
    }
    if (addr & 0xfff) + len as u64 > super::PAGE {
        return Err(Error::Invalid {
            what: "request address (the request crosses a 4 KiB boundary)",
            value: addr,
            allowed: "address % 4096 + length <= 4096",
        });
    }
    Ok(shape_of(addr, len))
}

/// [`request_shape`] without the checks; `len` must be 1..=4096 within one page.
#[inline]
pub(crate) fn shape_of(addr: u64, len: u32) -> Shape {
    let first = (addr & 3) as u32;
    let last = first + len - 1; // offset of the last byte from the first DW's start
    let length_dw = (last / 4 + 1) as u16;
    let first_mask = (0xfu8 << first) & 0xf;
    let last_mask = 0xfu8 >> (3 - (last & 3));
    if length_dw == 1 {
        Shape {
            length_dw,
            first_be: ByteEnables::from_bits_truncate(first_mask & last_mask),
            last_be: ByteEnables::NONE,
        }
    } else {
        Shape {
            length_dw,
            first_be: ByteEnables::from_bits_truncate(first_mask),
            last_be: ByteEnables::from_bits_truncate(last_mask),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(s: Shape) -> (u16, u8, u8) {
        (s.length_dw, s.first_be.bits(), s.last_be.bits())
    }

    #[test]
    fn hand_computed_shapes() {
        // (addr, len) -> (Length, First BE, Last BE), worked out on paper.
        let cases: &[(u64, u32, (u16, u8, u8))] = &[
            (0x0, 1, (1, 0b0001, 0)),
            (0x1, 1, (1, 0b0010, 0)),
            (0x3, 1, (1, 0b1000, 0)),
            (0x0, 4, (1, 0b1111, 0)),
            (0x1, 3, (1, 0b1110, 0)),
            (0x1, 2, (1, 0b0110, 0)),
            (0x3, 2, (2, 0b1000, 0b0001)),
            (0x2, 4, (2, 0b1100, 0b0011)),
            (0x0, 8, (2, 0b1111, 0b1111)),
            (0x1, 8, (3, 0b1110, 0b0001)),
            (0x7, 9, (3, 0b1000, 0b1111)),
            (0xffc, 4, (1, 0b1111, 0)),
            (0xfff, 1, (1, 0b1000, 0)),
            (0x1, 4095, (1024, 0b1110, 0b1111)),
            (0x0, 4096, (1024, 0b1111, 0b1111)),
            (0xffff_ffff_ffff_fffc, 4, (1, 0b1111, 0)),
        ];
        for &(addr, len, want) in cases {
            assert_eq!(
                fields(request_shape(addr, len).unwrap()),
                want,
                "{addr:#x}+{len}"
            );
        }
    }

    #[test]
    fn byte_count_matches_spec_table() {
        // The spec's table for 1-DW reads: the span of the enables, 0000b counts 1.
        let one = |f: u8| Shape {
            length_dw: 1,
            first_be: ByteEnables::new(f).unwrap(),
            last_be: ByteEnables::NONE,
        };
        let table: [(u8, u32); 16] = [
            (0b0000, 1),
            (0b0001, 1),
            (0b0010, 1),
            (0b0011, 2),
            (0b0100, 1),
            (0b0101, 3),
            (0b0110, 2),
            (0b0111, 3),
            (0b1000, 1),
            (0b1001, 4),
            (0b1010, 3),
            (0b1011, 4),
            (0b1100, 2),
            (0b1101, 4),
            (0b1110, 3),
            (0b1111, 4),
        ];
        for (be, bc) in table {
            assert_eq!(one(be).byte_count(), bc, "BE {be:04b}");
        }
        // Multi-DW: Length*4 minus leading and trailing disabled bytes.
        let s = |n, f, l| Shape {
            length_dw: n,
            first_be: ByteEnables::new(f).unwrap(),
            last_be: ByteEnables::new(l).unwrap(),
        };
        assert_eq!(s(2, 0b1000, 0b0001).byte_count(), 2);
        assert_eq!(s(2, 0b1111, 0b1111).byte_count(), 8);
        assert_eq!(s(1024, 0b1110, 0b0111).byte_count(), 4096 - 2);
        assert_eq!(s(3, 0b1100, 0b0011).byte_count(), 12 - 4);
    }

    #[test]
    fn rejects_bad_requests() {
        assert!(matches!(
            request_shape(0, 0),
            Err(Error::Invalid { value: 0, .. })
        ));
        assert!(matches!(
            request_shape(0, 4097),
            Err(Error::Invalid { value: 4097, .. })
        ));
        match request_shape(0x1ffd, 4) {
            Err(Error::Invalid { what, value, .. }) => {
                assert!(what.contains("4 KiB"), "{what}");
                assert_eq!(value, 0x1ffd);
            }
            other => panic!("{other:?}"),
        }
        assert!(request_shape(0x1ffd, 3).is_ok());
        assert!(request_shape(u64::MAX, 1).is_ok());
        assert!(request_shape(u64::MAX, 2).is_err());
        assert!(request_shape(0x1, 4096).is_err());
    }

    #[test]
    fn check_rules_by_enumeration() {
        // Allowed First BE of multi-DW contiguous requests, Last BE likewise, by hand.
        const FIRST_OK: [u8; 4] = [0b1000, 0b1100, 0b1110, 0b1111];
        const LAST_OK: [u8; 4] = [0b0001, 0b0011, 0b0111, 0b1111];
        for n in [1u16, 2, 3, 1024] {
            for addr in [0x1000u64, 0x1004] {
                for f in 0..16u8 {
                    for l in 0..16u8 {
                        let s = Shape {
                            length_dw: n,
                            first_be: ByteEnables::new(f).unwrap(),
                            last_be: ByteEnables::new(l).unwrap(),
                        };
                        let fits = (addr & 0xfff) + 4 * n as u64 <= 4096;
                        let want = fits
                            && match n {
                                1 => l == 0,
                                2 if addr & 4 == 0 => f != 0 && l != 0,
                                _ => FIRST_OK.contains(&f) && LAST_OK.contains(&l),
                            };
                        assert_eq!(
                            s.check(addr).is_ok(),
                            want,
                            "n {n} addr {addr:#x} {f:04b} {l:04b}"
                        );
                    }
                }
            }
        }
        let s = Shape {
            length_dw: 0,
            ..Shape::zero_length()
        };
        assert!(matches!(
            s.check(0),
            Err(Error::Field {
                field: "Length",
                offset: 2,
                ..
            })
        ));
        let s = request_shape(0x10, 8).unwrap();
        assert!(matches!(
            s.check(0xffc),
            Err(Error::Field {
                field: "Address",
                offset: 8,
                ..
            })
        ));
        let s = Shape {
            last_be: ByteEnables::new(0b0110).unwrap(),
            ..request_shape(0x11, 16).unwrap()
        };
        assert!(matches!(
            s.check(0x11),
            Err(Error::Field {
                field: "Last DW BE",
                offset: 7,
                value: 0x6e,
                ..
            })
        ));
    }

    #[test]
    fn zero_length() {
        let z = Shape::zero_length();
        assert_eq!(fields(z), (1, 0, 0));
        assert!(z.is_zero_length());
        assert!(!request_shape(0, 1).unwrap().is_zero_length());
        assert_eq!(z.first_byte(), 0);
        assert_eq!(z.payload_len(), 4);
    }
}
