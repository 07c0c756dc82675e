//! The CRCs of PCIe: LCRC and ECRC (32-bit) and the DLLP CRC (16-bit).
//!
//! The LCRC and ECRC use the polynomial `04C1_1DB7` with seed `FFFF_FFFF`. The spec feeds
//! each byte into the LFSR starting with bit 0, complements the remainder and maps
//! remainder bit 31 to bit 0 of the first CRC byte. That is exactly the reflected
//! CRC-32 of IEEE 802.3 with its value stored little-endian, so the hardware-assisted
//! `crc32fast` computes it.

/// CRC-32 as the LCRC and ECRC define it, returned as the value whose little-endian bytes
/// are the four CRC bytes in transmission order.
///
/// ```
/// // The CRC-32 check value of the ASCII string "123456789".
/// assert_eq!(pcielab_wire::crc::crc32(b"123456789"), 0xcbf4_3926);
/// ```
#[inline]
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// CRC-32 over several slices, as if they were concatenated.
#[inline]
pub fn crc32_parts(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Bit-serial LFSR written from the spec's description: polynomial 04C11DB7, seed all
    /// ones, each byte fed bit 0 first, remainder complemented, remainder bit 31 mapped to
    /// bit 0 of CRC byte 0 (and so on down to bit 0 → bit 7 of byte 3).
    pub(crate) fn serial_reference(data: &[u8]) -> [u8; 4] {
        let mut lfsr: u32 = 0xffff_ffff;
        for &byte in data {
            for bit in 0..8 {
                let input = (byte >> bit) & 1;
                let top = (lfsr >> 31) as u8 & 1;
                lfsr <<= 1;
                if input ^ top == 1 {
                    lfsr ^= 0x04c1_1db7;
                }
            }
        }
        let rem = !lfsr;
        let mut out = [0u8; 4];
        for (i, o) in out.iter_mut().enumerate() {
            // CRC byte i, bit j  <-  remainder bit (31 - 8*i - j)
            for j in 0..8 {
                let b = (rem >> (31 - 8 * i - j)) & 1;
                *o |= (b as u8) << j;
            }
        }
        out
    }

    #[test]
    fn fast_matches_serial_lfsr() {
        let mut data = Vec::new();
        for len in 0..300usize {
            data.push((len as u8).wrapping_mul(37).wrapping_add(11));
            assert_eq!(
                crc32(&data).to_le_bytes(),
                serial_reference(&data),
                "len {len}"
            );
        }
    }

    #[test]
    fn parts_equal_whole() {
        let d: Vec<u8> = (0..100u8).collect();
        assert_eq!(crc32_parts(&[&d[..10], &d[10..]]), crc32(&d));
    }
}
