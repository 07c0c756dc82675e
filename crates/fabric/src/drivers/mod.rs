//! Host drivers: host programs that drive a device model through the timed
//! simulator, as an operating system's driver would.

pub mod d2d;
pub mod dma_engine;
pub mod nic;

use crate::timed::FabricSim;

/// Where a driver's run is, for an [`Observer`] that looks at the simulation between
/// the run's steps (to stream its trace to a capture file, say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStage<'a> {
    /// A run on a fresh simulation starts (called once its driver is set up); the
    /// label says what it runs.
    Begin(&'a str),
    /// The run went on for a while: the driver handled an interrupt, polled, or let
    /// a bounded stretch of simulated time pass.
    Step,
    /// The run ended.
    End,
}

/// Looks at the simulation between the steps of a driver's run. An error stops the
/// run: the driver returns [`SimError::Observer`](crate::timed::SimError::Observer)
/// with its message.
///
/// ```
/// use pcielab_fabric::drivers::nic::{measure_observed, NicVariant};
/// use pcielab_fabric::drivers::RunStage;
/// use pcielab_fabric::timed::SimConfig;
/// let cfg = SimConfig { trace: true, ..SimConfig::default() };
/// let (mut runs, mut records) = (Vec::new(), 0);
/// measure_observed("gen = 3\nwidth = 8", &cfg, NicVariant::Dpdk, 64, 160, &mut |sim, stage| {
///     match stage {
///         RunStage::Begin(label) => runs.push(label.to_string()),
///         RunStage::Step | RunStage::End => {
///             records += sim.take_trace().map_or(0, |t| t.records.len());
///         }
///     }
///     Ok(())
/// })?;
/// assert_eq!(runs.len(), 3); // transmit only, receive only, both ways
/// assert!(records > 3 * 160);
/// # Ok::<(), pcielab_fabric::timed::SimError>(())
/// ```
pub type Observer<'a> = dyn FnMut(&mut FabricSim, RunStage<'_>) -> Result<(), String> + 'a;
