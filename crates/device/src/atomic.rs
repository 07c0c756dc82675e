//! AtomicOps (PCIe Base Spec 6.15) a device asks for: FetchAdd, Swap and CAS.

/// An AtomicOp a device asks for with [`crate::Cx::atomic`]; the number is the
/// operand size in bits.
///
/// ```
/// use pcielab_device::AtomicOp;
/// let cas = AtomicOp::Cas64 { compare: 1, swap: 2 };
/// assert_eq!(cas.operand_size(), 8);
/// // Aligned to 16 bytes: compare first; at 8 mod 16: swap first.
/// assert_eq!(cas.payload(0x1000)[..8], 1u64.to_le_bytes());
/// assert_eq!(cas.payload(0x1008)[..8], 2u64.to_le_bytes());
/// assert_eq!(AtomicOp::FetchAdd32(5).payload(0x1000), 5u32.to_le_bytes());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// Adds the value to a 32-bit target (wrapping); returns the original.
    FetchAdd32(u32),
    /// Adds the value to a 64-bit target (wrapping); returns the original.
    FetchAdd64(u64),
    /// Writes the value to a 32-bit target; returns the original.
    Swap32(u32),
    /// Writes the value to a 64-bit target; returns the original.
    Swap64(u64),
    /// Writes `swap` to a 32-bit target if it holds `compare`; returns the original.
    Cas32 {
        /// The value the target must hold.
        compare: u32,
        /// The value written if it does.
        swap: u32,
    },
    /// Writes `swap` to a 64-bit target if it holds `compare`; returns the original.
    Cas64 {
        /// The value the target must hold.
        compare: u64,
        /// The value written if it does.
        swap: u64,
    },
    /// Writes `swap` to a 128-bit target if it holds `compare`; returns the original.
    Cas128 {
        /// The value the target must hold.
        compare: u128,
        /// The value written if it does.
        swap: u128,
    },
}

impl AtomicOp {
    /// The operand (and target) size in bytes: 4, 8 or 16.
    pub fn operand_size(self) -> u32 {
        match self {
            AtomicOp::FetchAdd32(_) | AtomicOp::Swap32(_) | AtomicOp::Cas32 { .. } => 4,
            AtomicOp::FetchAdd64(_) | AtomicOp::Swap64(_) | AtomicOp::Cas64 { .. } => 8,
            AtomicOp::Cas128 { .. } => 16,
        }
    }

    /// The request's payload for a target at `addr`: the operand, or for CAS the
    /// compare and swap values in the order the spec gives for that address.
    pub fn payload(self, addr: u64) -> Vec<u8> {
        let le = |v: u128, n: u32| v.to_le_bytes()[..n as usize].to_vec();
        let n = self.operand_size();
        let (a, b) = match self {
            AtomicOp::FetchAdd32(v) | AtomicOp::Swap32(v) => return le(v as u128, 4),
            AtomicOp::FetchAdd64(v) | AtomicOp::Swap64(v) => return le(v as u128, 8),
            AtomicOp::Cas32 { compare, swap } => (compare as u128, swap as u128),
            AtomicOp::Cas64 { compare, swap } => (compare as u128, swap as u128),
            AtomicOp::Cas128 { compare, swap } => (compare, swap),
        };
        let (first, second) = if addr % (2 * n as u64) == 0 {
            (a, b)
        } else {
            (b, a)
        };
        let mut p = le(first, n);
        p.extend(le(second, n));
        p
    }
}
