//! Device timing: a core clock, a datapath width and per-operation latencies.

use pcielab_sim::SimDuration;

/// How fast a device works, as it declares it ([`crate::DeviceModel::timing`]). The
/// timed simulator charges these on top of its fixed endpoint latency:
///
/// * a BAR read completes after `read_cycles` plus the data's datapath cycles;
/// * a BAR write occupies the device's receive datapath for `write_cycles` plus the
///   data's cycles before the device sees it (and the port's credits for it return);
/// * each completion of a DMA read occupies the receive datapath for
///   `completion_cycles` plus its data's cycles before the device sees it;
/// * each request or write TLP of a DMA occupies the transmit datapath for
///   `request_cycles` plus its data's cycles before it leaves.
///
/// A datapath of `datapath_bits` moves that many bits per cycle; a TLP's data takes
/// `ceil(bytes × 8 / datapath_bits)` cycles.
///
/// ```
/// use pcielab_device::DeviceTiming;
/// // A 250 MHz core with a 256-bit datapath (an FPGA design such as NetFPGA SUME's).
/// let t = DeviceTiming { clock_mhz: 250, datapath_bits: 256, ..DeviceTiming::NONE };
/// assert_eq!(t.cycle().as_ps(), 4_000);
/// assert_eq!(t.data_cycles(256), 8); // 256 B = 2048 bits = 8 cycles
/// assert_eq!(t.data_cycles(4), 1);
/// assert_eq!(t.time(t.data_cycles(256)).as_ps(), 32_000);
/// assert!(DeviceTiming::NONE.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceTiming {
    /// Core clock in MHz (0: the device takes no time).
    pub clock_mhz: u32,
    /// Datapath width in bits (0: data takes no cycles).
    pub datapath_bits: u32,
    /// Cycles from a BAR read's arrival to its completion leaving, besides data.
    pub read_cycles: u32,
    /// Cycles to take a BAR write, besides data.
    pub write_cycles: u32,
    /// Cycles to take one completion of a DMA read, besides data.
    pub completion_cycles: u32,
    /// Cycles to send one DMA request or write TLP, besides data.
    pub request_cycles: u32,
}

impl DeviceTiming {
    /// No device time at all.
    pub const NONE: DeviceTiming = DeviceTiming {
        clock_mhz: 0,
        datapath_bits: 0,
        read_cycles: 0,
        write_cycles: 0,
        completion_cycles: 0,
        request_cycles: 0,
    };

    /// True if the device takes no time (no clock).
    pub fn is_none(&self) -> bool {
        self.clock_mhz == 0
    }

    /// One clock cycle (zero without a clock).
    pub fn cycle(&self) -> SimDuration {
        if self.clock_mhz == 0 {
            SimDuration::ZERO
        } else {
            SimDuration::from_ps(1_000_000 / self.clock_mhz as u64)
        }
    }

    /// Cycles the datapath takes to move `bytes` bytes.
    pub fn data_cycles(&self, bytes: u64) -> u64 {
        if self.datapath_bits == 0 {
            0
        } else {
            (bytes * 8).div_ceil(self.datapath_bits as u64)
        }
    }

    /// The time of `cycles` cycles.
    pub fn time(&self, cycles: u64) -> SimDuration {
        SimDuration::from_ps(self.cycle().as_ps() * cycles)
    }

    /// Checks the declaration: a datapath width that is a positive multiple of 8
    /// when there is a clock, and a clock of at most 100 GHz.
    pub fn check(&self) -> Result<(), String> {
        if self.clock_mhz > 100_000 {
            return Err(format!(
                "device clock of {} MHz: at most 100000 MHz",
                self.clock_mhz
            ));
        }
        if self.clock_mhz != 0 && (self.datapath_bits == 0 || self.datapath_bits % 8 != 0) {
            return Err(format!(
                "datapath of {} bits: must be a positive multiple of 8",
                self.datapath_bits
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_hand() {
        // 125 MHz (seed 004's datapath clock): 8 ns a cycle; 64-bit datapath: 256 B
        // is 32 cycles.
        let t = DeviceTiming {
            clock_mhz: 125,
            datapath_bits: 64,
            ..DeviceTiming::NONE
        };
        assert_eq!(t.cycle().as_ps(), 8_000);
        assert_eq!(t.data_cycles(256), 32);
        assert_eq!(t.data_cycles(257), 33);
        assert_eq!(t.data_cycles(0), 0);
        assert_eq!(DeviceTiming::NONE.time(1000), SimDuration::ZERO);
        assert!(t.check().is_ok());
        let bad = DeviceTiming {
            datapath_bits: 12,
            ..t
        };
        assert!(bad.check().unwrap_err().contains("12 bits"));
    }
}
