//! What Downstream Port Containment records (below the engine): each containment, when and
//! why it was triggered.

use pcielab_sim::SimTime;
use pcielab_wire::Bdf;

/// Why DPC triggered (DPC Status: Trigger Reason and Trigger Reason Extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DpcReason {
    /// An unmasked uncorrectable error the port detected (Reason 00b).
    PortError,
    /// An ERR_NONFATAL message the port received (Reason 01b).
    NonFatalMessage,
    /// An ERR_FATAL message the port received (Reason 10b).
    FatalMessage,
    /// DPC Software Trigger (Reason 11b, Extension 01b).
    Software,
}

impl DpcReason {
    /// (Trigger Reason, Trigger Reason Extension) as DPC Status holds them.
    pub fn bits(self) -> (u16, u16) {
        match self {
            DpcReason::PortError => (0, 0),
            DpcReason::NonFatalMessage => (1, 0),
            DpcReason::FatalMessage => (2, 0),
            DpcReason::Software => (3, 1),
        }
    }
}

/// One containment: a port's DPC triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpcEvent {
    /// When it triggered.
    pub at: SimTime,
    /// The Downstream Port.
    pub port: Bdf,
    /// Why.
    pub reason: DpcReason,
    /// Error Source ID (the requester of the error message; 0 otherwise).
    pub source: Bdf,
}
