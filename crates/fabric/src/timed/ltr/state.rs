//! Latency Tolerance Reporting values (below the engine): the encoding of a latency as an
//! LTR value and back, the messages the root ports received, and how two values combine.

use pcielab_sim::SimTime;
use pcielab_wire::Bdf;

/// Encodes a latency tolerance of `ns` nanoseconds as an LTR register value (the
/// smallest scale that fits; the value rounded down, which only makes the
/// requirement stricter). `None`: no requirement (0).
///
/// ```
/// use pcielab_fabric::timed::ltr_value;
/// assert_eq!(ltr_value(None), 0);
/// assert_eq!(ltr_value(Some(1000)), 0x8000 | 1000); // scale 1 ns
/// assert_eq!(ltr_value(Some(1500)), 0x8000 | 1 << 10 | 46); // 46 × 32 ns
/// ```
pub fn ltr_value(ns: Option<u64>) -> u16 {
    let Some(ns) = ns else {
        return 0;
    };
    let mut scale = 0u16;
    let mut unit = 1u64;
    while ns / unit > 1023 && scale < 5 {
        scale += 1;
        unit *= 32;
    }
    0x8000 | scale << 10 | (ns / unit).min(1023) as u16
}

/// The latency an LTR register value stands for, in ns (None: no requirement).
///
/// ```
/// use pcielab_fabric::timed::{ltr_ns, ltr_value};
/// assert_eq!(ltr_ns(ltr_value(Some(1500))), Some(1472));
/// assert_eq!(ltr_ns(0), None);
/// ```
pub fn ltr_ns(v: u16) -> Option<u64> {
    if v & 0x8000 == 0 {
        return None;
    }
    let scale = ((v >> 10) & 7).min(5) as u32;
    Some((v & 0x3ff) as u64 * 32u64.pow(scale))
}

/// An LTR message as a root port received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LtrMessage {
    /// The root port.
    pub root_port: Bdf,
    /// The sender: the device, or the upstream port of the switch below the root port.
    pub requester: Bdf,
    /// Snoop latency (register form).
    pub snoop: u16,
    /// No-snoop latency (register form).
    pub no_snoop: u16,
}

/// The more stringent of two LTR values (a value without Requirement loses).
pub(crate) fn stricter(a: u16, b: u16) -> u16 {
    match (ltr_ns(a), ltr_ns(b)) {
        (Some(x), Some(y)) => {
            if y < x {
                b
            } else {
                a
            }
        }
        (Some(_), None) => a,
        _ => b,
    }
}

/// Records of LTR messages the root complex received (see [`LtrMessage`]).
pub(crate) type LtrLog = Vec<(SimTime, LtrMessage)>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// An encoded tolerance never exceeds the latency asked for, and loses less
        /// than one unit of its scale (the smallest scale that fits 10 bits).
        #[test]
        fn an_ltr_value_is_the_tolerance_rounded_down(ns in 0u64..(1023 << 25)) {
            let back = ltr_ns(ltr_value(Some(ns))).unwrap();
            prop_assert!(back <= ns);
            let unit = 32u64.pow(((ltr_value(Some(ns)) >> 10) & 7) as u32);
            prop_assert!(ns - back < unit);
            prop_assert!(ns < 1024 || ns / unit >= 32, "a smaller scale would fit");
        }

        /// The stricter of two values is the smaller latency; no requirement loses.
        #[test]
        fn the_stricter_value_is_the_smaller_requirement(a in 0u64..1 << 30, b in 0u64..1 << 30) {
            let (va, vb) = (ltr_value(Some(a)), ltr_value(Some(b)));
            let s = stricter(va, vb);
            prop_assert_eq!(ltr_ns(s), ltr_ns(va).min(ltr_ns(vb)));
            prop_assert_eq!(stricter(va, 0), va);
            prop_assert_eq!(stricter(0, vb), vb);
        }
    }
}
