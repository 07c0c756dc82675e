//! The 4 KiB register file of one function and the access semantics of every bit.
//!
//! Each bit of the space has one [`Access`] type and may be sticky. Writes from
//! configuration requests go through [`ConfigSpace::write`], which applies the byte
//! enables and the access type of every bit; the device model (hardware) changes
//! read-only state such as status bits with [`ConfigSpace::hw_write`], which ignores
//! access types. A reset returns every non-sticky bit to its initial value.
//!
//! | access | config write of 1 | config write of 0 | reset |
//! |--------|-------------------|-------------------|-------|
//! | RO, HwInit, RsvdP, RsvdZ | ignored | ignored | initial value |
//! | RW     | sets              | clears            | initial value |
//! | RW1C   | clears            | no effect         | initial value |
//! | RW1S   | sets              | no effect         | initial value |
//! | any, sticky | as above     | as above          | kept (only a power-on reset restores it) |
//!
//! Reads and writes outside 0..4096 touch nothing: reads return zero bytes.

use pcielab_wire::ByteEnables;

/// Size of a PCI Express function's configuration space in bytes.
pub const CONFIG_SPACE_SIZE: usize = 4096;

/// Access type of a register field, as the PCI Express Base Specification names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read-only; the value is set by the device.
    Ro,
    /// Read-write.
    Rw,
    /// Read, write 1 to clear.
    Rw1c,
    /// Read, write 1 to set (cleared only by hardware or reset).
    Rw1s,
    /// Hardware-initialised: set by hardware or firmware, read-only to software.
    HwInit,
    /// Reserved and preserved: reads zero, writes ignored (software must preserve it).
    RsvdP,
    /// Reserved and zero: reads zero, writes ignored (software must write zero).
    RsvdZ,
}

impl Access {
    /// The short spec name (`RO`, `RW`, `RW1C`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Access::Ro => "RO",
            Access::Rw => "RW",
            Access::Rw1c => "RW1C",
            Access::Rw1s => "RW1S",
            Access::HwInit => "HwInit",
            Access::RsvdP => "RsvdP",
            Access::RsvdZ => "RsvdZ",
        }
    }
}

/// A function's 4 KiB configuration space with per-bit access semantics.
///
/// ```
/// use pcielab_config::{Access, ConfigSpace};
/// use pcielab_wire::ByteEnables;
///
/// let mut cs = ConfigSpace::new();
/// // A 16-bit register at 0x40: low byte RW, bit 15 RW1C and set.
/// cs.define(0x40, 2, 0x00ff, Access::Rw, 0x0000);
/// cs.define(0x40, 2, 0x8000, Access::Rw1c, 0x8000);
/// cs.write(0x40, 0xffff_ffff, ByteEnables::new(0b0011).unwrap());
/// assert_eq!(cs.read_u16(0x40), 0x00ff); // RW bits set, RW1C bit cleared
/// ```
#[derive(Clone)]
pub struct ConfigSpace {
    value: Box<[u8; CONFIG_SPACE_SIZE]>,
    initial: Box<[u8; CONFIG_SPACE_SIZE]>,
    rw: Box<[u8; CONFIG_SPACE_SIZE]>,
    w1c: Box<[u8; CONFIG_SPACE_SIZE]>,
    w1s: Box<[u8; CONFIG_SPACE_SIZE]>,
    sticky: Box<[u8; CONFIG_SPACE_SIZE]>,
}

impl core::fmt::Debug for ConfigSpace {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "ConfigSpace {{ vendor: {:04x}, device: {:04x}, header: {:02x} }}",
            self.read_u16(0),
            self.read_u16(2),
            self.read_u8(0x0e)
        )
    }
}

impl Default for ConfigSpace {
    fn default() -> Self {
        Self::new()
    }
}

fn zeroed() -> Box<[u8; CONFIG_SPACE_SIZE]> {
    Box::new([0u8; CONFIG_SPACE_SIZE])
}

impl ConfigSpace {
    /// An all-zero, all read-only space.
    pub fn new() -> ConfigSpace {
        ConfigSpace {
            value: zeroed(),
            initial: zeroed(),
            rw: zeroed(),
            w1c: zeroed(),
            w1s: zeroed(),
            sticky: zeroed(),
        }
    }

    /// Defines the bits `mask` of the `len`-byte (1..=4) little-endian register at
    /// `offset`: their access type and their initial (and reset) value `value & mask`.
    /// Bytes past the end of the space are ignored. Reserved types force the value to 0.
    pub fn define(&mut self, offset: u16, len: usize, mask: u32, access: Access, value: u32) {
        let value = match access {
            Access::RsvdP | Access::RsvdZ => 0,
            _ => value,
        };
        for i in 0..len.min(4) {
            let Some(at) = index(offset, i) else { continue };
            let m = (mask >> (8 * i)) as u8;
            let v = (value >> (8 * i)) as u8 & m;
            self.rw[at] &= !m;
            self.w1c[at] &= !m;
            self.w1s[at] &= !m;
            match access {
                Access::Rw => self.rw[at] |= m,
                Access::Rw1c => self.w1c[at] |= m,
                Access::Rw1s => self.w1s[at] |= m,
                _ => {}
            }
            self.value[at] = (self.value[at] & !m) | v;
            self.initial[at] = (self.initial[at] & !m) | v;
        }
    }

    /// Marks the bits `mask` of the register at `offset` as sticky: a reset keeps them.
    pub fn set_sticky(&mut self, offset: u16, len: usize, mask: u32) {
        for i in 0..len.min(4) {
            if let Some(at) = index(offset, i) {
                self.sticky[at] |= (mask >> (8 * i)) as u8;
            }
        }
    }

    /// The access type of the bit `bit` (0..=7) of the byte at `offset`.
    pub fn access_of(&self, offset: u16, bit: u8) -> Access {
        let Some(at) = index(offset, 0) else {
            return Access::RsvdZ;
        };
        let m = 1u8 << (bit & 7);
        if self.rw[at] & m != 0 {
            Access::Rw
        } else if self.w1c[at] & m != 0 {
            Access::Rw1c
        } else if self.w1s[at] & m != 0 {
            Access::Rw1s
        } else {
            Access::Ro
        }
    }

    /// A configuration write: the dword at `offset` (aligned down to 4) with byte
    /// enables, applying every bit's access type.
    pub fn write(&mut self, offset: u16, value: u32, be: ByteEnables) {
        let base = offset & !3;
        for i in 0..4 {
            if be.bits() & (1 << i) == 0 {
                continue;
            }
            let Some(at) = index(base, i) else { continue };
            let b = (value >> (8 * i)) as u8;
            let mut v = self.value[at];
            v = (v & !self.rw[at]) | (b & self.rw[at]);
            v &= !(b & self.w1c[at]);
            v |= b & self.w1s[at];
            self.value[at] = v;
        }
    }

    /// A configuration write of `len` (1, 2 or 4) bytes at `offset`, which must not
    /// cross a dword; the byte enables are derived from the offset and length.
    /// Returns false (and writes nothing) when the access crosses a dword or `len` is bad.
    pub fn write_sized(&mut self, offset: u16, len: usize, value: u32) -> bool {
        let lane = (offset & 3) as usize;
        if !matches!(len, 1 | 2 | 4) || lane + len > 4 {
            return false;
        }
        let be = ((1u8 << len) - 1) << lane;
        self.write(
            offset,
            value << (8 * lane),
            ByteEnables::from_bits_truncate(be),
        );
        true
    }

    /// Writes a 32-bit register (all byte enables).
    pub fn write_u32(&mut self, offset: u16, value: u32) {
        self.write(offset, value, ByteEnables::ALL);
    }

    /// Writes a 16-bit register at an even offset.
    pub fn write_u16(&mut self, offset: u16, value: u16) {
        self.write_sized(offset, 2, value as u32);
    }

    /// Writes an 8-bit register.
    pub fn write_u8(&mut self, offset: u16, value: u8) {
        self.write_sized(offset, 1, value as u32);
    }

    /// A hardware-side write: sets `len` bytes at `offset` to `value`, ignoring access
    /// types (for status bits, link status and other state the device owns).
    pub fn hw_write(&mut self, offset: u16, len: usize, value: u32) {
        for i in 0..len.min(4) {
            if let Some(at) = index(offset, i) {
                self.value[at] = (value >> (8 * i)) as u8;
            }
        }
    }

    /// A hardware-side write of the bits `mask` only.
    pub fn hw_update(&mut self, offset: u16, len: usize, mask: u32, value: u32) {
        let old = self.read(offset, len);
        self.hw_write(offset, len, (old & !mask) | (value & mask));
    }

    /// Reads `len` (1..=4) bytes at `offset`, little endian; bytes past the end read 0.
    pub fn read(&self, offset: u16, len: usize) -> u32 {
        let mut v = 0u32;
        for i in 0..len.min(4) {
            if let Some(at) = index(offset, i) {
                v |= (self.value[at] as u32) << (8 * i);
            }
        }
        v
    }

    /// Reads one byte.
    pub fn read_u8(&self, offset: u16) -> u8 {
        self.read(offset, 1) as u8
    }

    /// Reads a 16-bit register.
    pub fn read_u16(&self, offset: u16) -> u16 {
        self.read(offset, 2) as u16
    }

    /// Reads a 32-bit register.
    pub fn read_u32(&self, offset: u16) -> u32 {
        self.read(offset, 4)
    }

    /// The whole space as bytes.
    pub fn bytes(&self) -> &[u8; CONFIG_SPACE_SIZE] {
        &self.value
    }

    /// A conventional (hot, warm, FLR-like) reset: every non-sticky bit returns to its
    /// initial value; sticky bits keep theirs.
    pub fn reset(&mut self) {
        for at in 0..CONFIG_SPACE_SIZE {
            let s = self.sticky[at];
            self.value[at] = (self.value[at] & s) | (self.initial[at] & !s);
        }
    }

    /// A power-on (cold) reset: every bit, sticky or not, returns to its initial value.
    pub fn power_on_reset(&mut self) {
        self.value.copy_from_slice(&self.initial[..]);
    }
}

fn index(offset: u16, i: usize) -> Option<usize> {
    let at = offset as usize + i;
    (at < CONFIG_SPACE_SIZE).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(b: u8) -> ByteEnables {
        ByteEnables::new(b).unwrap()
    }

    /// One row: access type, initial byte, written byte, expected byte after the write.
    #[test]
    fn access_table() {
        let rows: &[(Access, u8, u8, u8)] = &[
            (Access::Ro, 0xa5, 0xff, 0xa5),
            (Access::Ro, 0xa5, 0x00, 0xa5),
            (Access::HwInit, 0x3c, 0x00, 0x3c),
            (Access::Rw, 0xa5, 0x0f, 0x0f),
            (Access::Rw, 0x00, 0xff, 0xff),
            (Access::Rw1c, 0xf0, 0x30, 0xc0),
            (Access::Rw1c, 0xf0, 0x0f, 0xf0),
            (Access::Rw1s, 0x01, 0x80, 0x81),
            (Access::Rw1s, 0x81, 0x00, 0x81),
            (Access::RsvdP, 0xff, 0xff, 0x00),
            (Access::RsvdZ, 0xff, 0x55, 0x00),
        ];
        for &(access, init, wr, expect) in rows {
            let mut cs = ConfigSpace::new();
            cs.define(0x44, 1, 0xff, access, init as u32);
            cs.write(0x44, wr as u32, be(0b0001));
            assert_eq!(
                cs.read_u8(0x44),
                expect,
                "{access:?} init {init:#x} write {wr:#x}"
            );
        }
    }

    #[test]
    fn byte_enables_select_bytes() {
        let mut cs = ConfigSpace::new();
        cs.define(0x80, 4, 0xffff_ffff, Access::Rw, 0x1122_3344);
        cs.write(0x80, 0xaabb_ccdd, be(0b1010));
        assert_eq!(cs.read_u32(0x80), 0xaa22_cc44);
        cs.write(0x83, 0x0000_0000, be(0)); // no byte enabled: nothing changes
        assert_eq!(cs.read_u32(0x80), 0xaa22_cc44);
        // Unaligned offsets are aligned down to the dword.
        cs.write(0x82, 0x0000_00ee, be(0b0001));
        assert_eq!(cs.read_u32(0x80), 0xaa22_ccee);
        assert!(cs.write_sized(0x82, 2, 0x5566));
        assert_eq!(cs.read_u32(0x80), 0x5566_ccee);
        assert!(!cs.write_sized(0x83, 2, 0));
        assert!(!cs.write_sized(0x80, 3, 0));
    }

    #[test]
    fn sticky_survives_conventional_reset_only() {
        let mut cs = ConfigSpace::new();
        cs.define(0x100, 4, 0x0000_00ff, Access::Rw, 0);
        cs.define(0x100, 4, 0x0000_ff00, Access::Rw, 0x1200);
        cs.set_sticky(0x100, 4, 0x0000_ff00);
        cs.define(0x104, 4, 0xffff_ffff, Access::Rw1c, 0);
        cs.set_sticky(0x104, 4, 0x0000_0001);
        cs.write_u32(0x100, 0x0000_abcd);
        cs.hw_write(0x104, 4, 0x3);
        cs.reset();
        assert_eq!(cs.read_u32(0x100), 0x0000_ab00);
        assert_eq!(cs.read_u32(0x104), 0x1);
        cs.power_on_reset();
        assert_eq!(cs.read_u32(0x100), 0x0000_1200);
        assert_eq!(cs.read_u32(0x104), 0);
    }

    #[test]
    fn out_of_range_is_harmless() {
        let mut cs = ConfigSpace::new();
        cs.define(0xffe, 4, 0xffff_ffff, Access::Rw, 0);
        cs.write(0xffc, 0xffff_ffff, ByteEnables::ALL);
        assert_eq!(cs.read_u32(0xffc), 0xffff_0000);
        assert_eq!(cs.read(0x1000, 4), 0);
        assert_eq!(cs.read(0xfff, 4), 0xff);
        cs.write(0xffff, 1, ByteEnables::ALL);
        assert_eq!(cs.access_of(0x2000, 0), Access::RsvdZ);
    }
}
