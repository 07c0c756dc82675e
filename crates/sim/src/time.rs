//! Simulated time: a `u64` count of picoseconds.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in simulated time, in picoseconds since the start of the simulation.
///
/// ```
/// use pcielab_sim::{SimDuration, SimTime};
/// let t = SimTime::ZERO + SimDuration::from_ns(3);
/// assert_eq!(t.as_ps(), 3_000);
/// assert_eq!(t.to_string(), "3.000 ns");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(u64);

/// A span of simulated time, in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimDuration(u64);

impl SimTime {
    /// Time zero.
    pub const ZERO: SimTime = SimTime(0);
    /// The last representable instant (about 213 days).
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// From picoseconds.
    pub const fn from_ps(ps: u64) -> SimTime {
        SimTime(ps)
    }
    /// Picoseconds since time zero.
    pub const fn as_ps(self) -> u64 {
        self.0
    }
    /// Nanoseconds as a float (for reports only; never for scheduling).
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / 1_000.0
    }
    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
    /// `self + d`, or `None` on overflow.
    pub const fn checked_add(self, d: SimDuration) -> Option<SimTime> {
        match self.0.checked_add(d.0) {
            Some(v) => Some(SimTime(v)),
            None => None,
        }
    }
}

impl SimDuration {
    /// No time.
    pub const ZERO: SimDuration = SimDuration(0);
    /// From picoseconds.
    pub const fn from_ps(ps: u64) -> SimDuration {
        SimDuration(ps)
    }
    /// From nanoseconds.
    pub const fn from_ns(ns: u64) -> SimDuration {
        SimDuration(ns * 1_000)
    }
    /// From microseconds.
    pub const fn from_us(us: u64) -> SimDuration {
        SimDuration(us * 1_000_000)
    }
    /// From milliseconds.
    pub const fn from_ms(ms: u64) -> SimDuration {
        SimDuration(ms * 1_000_000_000)
    }
    /// Picoseconds.
    pub const fn as_ps(self) -> u64 {
        self.0
    }
    /// Nanoseconds as a float (for reports only).
    pub fn as_ns_f64(self) -> f64 {
        self.0 as f64 / 1_000.0
    }
}

/// Saturates at [`SimTime::MAX`] rather than wrapping.
impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
}
impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        *self = *self + d;
    }
}
/// Saturates at zero.
impl Sub<SimTime> for SimTime {
    type Output = SimDuration;
    fn sub(self, o: SimTime) -> SimDuration {
        self.saturating_since(o)
    }
}
impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, o: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(o.0))
    }
}

fn fmt_ps(ps: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    // Exact decimal printing (no float rounding): the unit keeps 1..=3 integer digits.
    let (div, unit) = if ps < 1_000 {
        return write!(f, "{ps} ps");
    } else if ps < 1_000_000 {
        (1_000, "ns")
    } else if ps < 1_000_000_000 {
        (1_000_000, "us")
    } else if ps < 1_000_000_000_000 {
        (1_000_000_000, "ms")
    } else {
        (1_000_000_000_000, "s")
    };
    let whole = ps / div;
    // Three decimals, truncated.
    let frac = (ps % div) / (div / 1_000);
    write!(f, "{whole}.{frac:03} {unit}")
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_ps(self.0, f)
    }
}
impl fmt::Display for SimDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_ps(self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_units() {
        assert_eq!(SimTime::from_ps(999).to_string(), "999 ps");
        assert_eq!(SimTime::from_ps(1_000).to_string(), "1.000 ns");
        assert_eq!(SimTime::from_ps(31_250).to_string(), "31.250 ns");
        assert_eq!(SimTime::from_ps(2_500_001).to_string(), "2.500 us");
        assert_eq!(SimTime::from_ps(7_000_000_000).to_string(), "7.000 ms");
        assert_eq!(SimTime::from_ps(12_345_000_000_000).to_string(), "12.345 s");
    }

    #[test]
    fn saturating() {
        assert_eq!(SimTime::MAX + SimDuration::from_ps(1), SimTime::MAX);
        assert_eq!(SimTime::ZERO - SimTime::from_ps(5), SimDuration::ZERO);
        assert_eq!(SimTime::MAX.checked_add(SimDuration::from_ps(1)), None);
        assert_eq!(SimDuration::from_us(2).as_ps(), 2_000_000);
    }
}
