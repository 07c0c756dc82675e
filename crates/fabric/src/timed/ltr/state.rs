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
