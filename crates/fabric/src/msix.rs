//! MSI-X as the fabric keeps it: each function's table and Pending Bit Array live in
//! the BAR memory its MSI-X capability names, and host software programs them only
//! with memory requests to that BAR, as on hardware. A device model never sees those
//! requests; it raises a vector and the fabric sends the message, or sets the
//! pending bit while the vector or the whole function is masked (PCIe Base Spec
//! 6.1.4.5, 7.7.2). Unmasking a vector (in its Vector Control) or the function (the
//! Function Mask bit) sends the messages of pending vectors then.

use pcielab_config::caps::{find, id, MsixTable};
use pcielab_config::ConfigSpace;

/// One function's MSI-X table and PBA, and where they sit in its BARs.
///
/// ```
/// use pcielab_config::caps::{CapabilityList, MsixCap};
/// use pcielab_config::Type0;
/// use pcielab_fabric::msix::MsixRegion;
/// let mut cs = Type0::default().build().unwrap();
/// CapabilityList::new()
///     .with(MsixCap { table_size: 4, table_bir: 2, table_offset: 0, pba_bir: 2, pba_offset: 0x800 })
///     .install(&mut cs)
///     .unwrap();
/// let mut m = MsixRegion::from_config(&cs).unwrap();
/// assert!(m.write(2, 0x10, &0xfee0_0000u32.to_le_bytes())); // entry 1's address
/// assert!(!m.write(0, 0x10, &[0; 4]));                       // not the MSI-X BAR
/// let mut pba = [0u8; 8];
/// assert!(m.read(2, 0x800, &mut pba));
/// assert_eq!(m.table.entry(1), Some((0xfee0_0000, 0, true))); // masked after reset
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsixRegion {
    /// The table and pending bits.
    pub table: MsixTable,
    table_bar: u8,
    table_off: u64,
    pba_bar: u8,
    pba_off: u64,
}

impl MsixRegion {
    /// The region the MSI-X capability of `cs` describes, if it has one.
    pub fn from_config(cs: &ConfigSpace) -> Option<MsixRegion> {
        let cap = capability(cs)?;
        let n = (cs.read_u16(cap + 2) & 0x7ff) + 1;
        let t = cs.read_u32(cap + 4);
        let p = cs.read_u32(cap + 8);
        Some(MsixRegion {
            table: MsixTable::new(n),
            table_bar: (t & 7) as u8,
            table_off: (t & !7) as u64,
            pba_bar: (p & 7) as u8,
            pba_off: (p & !7) as u64,
        })
    }

    fn in_table(&self, bar: u8, off: u64, len: usize) -> bool {
        bar == self.table_bar
            && off >= self.table_off
            && off + len as u64 <= self.table_off + self.table.table_bytes() as u64
    }

    fn in_pba(&self, bar: u8, off: u64, len: usize) -> bool {
        bar == self.pba_bar
            && off >= self.pba_off
            && off + len as u64 <= self.pba_off + self.table.pba_bytes() as u64
    }

    /// A read of BAR `bar` at `off`: true (and `buf` filled) if it falls in the table
    /// or the PBA.
    pub fn read(&self, bar: u8, off: u64, buf: &mut [u8]) -> bool {
        if self.in_table(bar, off, buf.len()) {
            self.table.read(off - self.table_off, buf);
            true
        } else if self.in_pba(bar, off, buf.len()) {
            self.table.read_pba(off - self.pba_off, buf);
            true
        } else {
            false
        }
    }

    /// A write of BAR `bar` at `off`: true if it falls in the table (applied) or the
    /// PBA (read-only: dropped).
    pub fn write(&mut self, bar: u8, off: u64, data: &[u8]) -> bool {
        if self.in_table(bar, off, data.len()) {
            self.table.write(off - self.table_off, data);
            true
        } else {
            self.in_pba(bar, off, data.len())
        }
    }

    /// Back to the reset state: every vector masked, nothing pending.
    pub fn reset(&mut self) {
        self.table = MsixTable::new(self.table.len() as u16);
    }

    /// The messages `(address, data)` of pending vectors that may go now (MSI-X
    /// enabled in `cs`, the function and the vector unmasked); their pending bits
    /// clear. Called after software unmasks something.
    pub fn release_pending(&mut self, cs: &ConfigSpace) -> Vec<(u64, u32)> {
        let Some(cap) = capability(cs) else {
            return Vec::new();
        };
        let ctl = cs.read_u16(cap + 2);
        if ctl & 0x8000 == 0 || ctl & 0x4000 != 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for v in 0..self.table.len() {
            if !self.table.is_pending(v) {
                continue;
            }
            if let Some((address, data, false)) = self.table.entry(v) {
                self.table.set_pending(v, false);
                out.push((address, data));
            }
        }
        out
    }
}

/// The offset of the MSI-X capability in `cs`.
pub(crate) fn capability(cs: &ConfigSpace) -> Option<u16> {
    find(cs.bytes(), id::MSIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcielab_config::caps::{CapabilityList, MsixCap};
    use pcielab_config::Type0;
    use pcielab_wire::ByteEnables;

    fn space() -> (ConfigSpace, u16) {
        let mut cs = Type0::default().build().unwrap();
        let cap = MsixCap {
            table_size: 70,
            table_bir: 1,
            table_offset: 0x1000,
            pba_bir: 3,
            pba_offset: 0x40,
        };
        CapabilityList::new().with(cap).install(&mut cs).unwrap();
        let at = capability(&cs).unwrap();
        (cs, at)
    }

    #[test]
    fn regions_and_release() {
        let (mut cs, cap) = space();
        let mut m = MsixRegion::from_config(&cs).unwrap();
        assert_eq!(m.table.len(), 70);
        // Table: BAR1 0x1000..0x1000+70*16; PBA: BAR3 0x40..0x50 (two QWORDs).
        assert!(m.write(1, 0x1000 + 69 * 16, &0xfee0_0000u32.to_le_bytes()));
        assert!(!m.write(1, 0x1000 + 70 * 16, &[0; 4]));
        assert!(!m.write(1, 0xffc, &[0; 4]));
        let mut b = [0u8; 8];
        assert!(m.read(3, 0x48, &mut b));
        assert!(!m.read(3, 0x50, &mut b));
        m.table.set_pending(69, true);
        // Disabled: nothing goes.
        assert!(m.release_pending(&cs).is_empty());
        cs.write(cap, 0x8000 << 16, ByteEnables::ALL); // MSI-X Enable
                                                       // Still masked (reset state): nothing goes.
        assert!(m.release_pending(&cs).is_empty());
        assert!(m.write(1, 0x1000 + 69 * 16 + 8, &7u32.to_le_bytes()));
        assert!(m.write(1, 0x1000 + 69 * 16 + 12, &0u32.to_le_bytes()));
        // The PBA is read-only: a write is taken but changes nothing.
        assert!(m.write(3, 0x48, &[0; 8]));
        assert!(m.table.is_pending(69));
        assert_eq!(m.release_pending(&cs), vec![(0xfee0_0000, 7)]);
        assert!(!m.table.is_pending(69));
        // Function Mask holds it.
        m.table.set_pending(69, true);
        cs.write(cap, 0xc000 << 16, ByteEnables::ALL);
        assert!(m.release_pending(&cs).is_empty());
        m.reset();
        assert!(!m.table.is_pending(69));
        assert_eq!(m.table.entry(69), Some((0, 0, true)));
    }
}
