//! Poisoned host memory (below the engine): what a read of host memory finds, and the
//! 64-byte lines poisoning marks.

/// AER Uncorrectable Error Status: Poisoned TLP Received.
pub(crate) const AER_POISONED: u32 = 1 << 12;

/// Bytes per line of host-memory poison.
pub(crate) const POISON_LINE: u64 = 64;

/// Which completions of a read carry poisoned data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Poison {
    /// None of them.
    Clean,
    /// Every one.
    All,
    /// Those whose bytes touch a poisoned line of host memory; the read's first byte
    /// is at this (physical) address.
    HostLines(u64),
}

impl Poison {
    /// [`Poison::All`] if `poisoned`, else [`Poison::Clean`].
    pub(crate) fn all_if(poisoned: bool) -> Poison {
        if poisoned {
            Poison::All
        } else {
            Poison::Clean
        }
    }
}

/// The poison lines `[addr, addr + len)` touches (at least the one `addr` is in).
pub(crate) fn lines(addr: u64, len: u64) -> impl Iterator<Item = u64> {
    let first = addr / POISON_LINE;
    let last = addr.saturating_add(len.max(1) - 1) / POISON_LINE;
    first..=last
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The lines a range touches are exactly those holding one of its bytes.
        #[test]
        fn a_range_touches_the_lines_of_its_bytes(addr in 0u64..1 << 20, len in 0u64..1000) {
            let got: Vec<u64> = lines(addr, len).collect();
            let mut want: Vec<u64> = (addr..addr + len.max(1)).map(|a| a / POISON_LINE).collect();
            want.dedup();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_range_at_the_top_of_memory_does_not_wrap() {
        let top: Vec<u64> = lines(u64::MAX - 10, 100).collect();
        assert_eq!(top, [u64::MAX / POISON_LINE]);
        assert_eq!(Poison::all_if(true), Poison::All);
        assert_eq!(Poison::all_if(false), Poison::Clean);
    }
}
