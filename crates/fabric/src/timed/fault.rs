//! What the simulator records when something goes wrong: a protocol error at a port,
//! a device model or host program asking for what cannot be done, a TLP that routing
//! cannot deliver. Nothing panics and nothing is dropped silently: each case is a
//! [`SimFault`] in [`super::FabricSim::errors`], in the order it happened, with a
//! [`FaultKind`] to match on and a message that names who and what.

use core::fmt;

/// The class of a [`SimFault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultKind {
    /// A TLP that routing could not deliver (it was dropped, or its sender failed).
    NotRoutable,
    /// A DMA or a read's completions that cannot be split (a length or address the
    /// rules refuse).
    Split,
    /// A completion for a tag nobody waits for (PCIe Base Spec 2.3.2).
    UnexpectedCompletion,
    /// A completion with more data than asked, or data outside the request.
    MalformedCompletion,
    /// A read's completions did not all come in time.
    CompletionTimeout,
    /// The IOMMU refused a DMA (no mapping, or no permission).
    IommuFault,
    /// A request or interrupt while Bus Master Enable is clear (7.5.1.1.3).
    BusMasterDisabled,
    /// A DMA with a PASID the function may not use.
    Pasid,
    /// An ECRC check failed where the TLP ended.
    Ecrc,
    /// Poisoned data was received.
    Poisoned,
    /// An AtomicOp refused (not supported, misaligned, egress blocked).
    Atomic,
    /// ATS: a translation refused, an invalidation nobody waits for.
    Ats,
    /// PRI: a page request answered with a failure code.
    PageRequest,
    /// Power management: PME, PME_Turn_Off/PME_TO_Ack, a message in the wrong
    /// direction.
    PowerManagement,
    /// LTR not sent (LTR Mechanism Enable clear).
    Ltr,
    /// An interrupt that could not be raised.
    Interrupt,
    /// A raw TLP a device built: refused before sending, or handled by the port.
    RawTlp,
    /// A vendor-defined message refused.
    VendorMessage,
    /// A device model asked for something the simulator cannot do (a completion for
    /// an unknown ticket, a command it does not carry out).
    DeviceCommand,
}

/// One recorded fault: its class and a message naming who and what.
///
/// ```
/// use pcielab_fabric::timed::{FaultKind, SimFault};
/// let f = SimFault::new(FaultKind::CompletionTimeout, "mem0: DMA read completion timeout");
/// assert_eq!(f.to_string(), "mem0: DMA read completion timeout");
/// assert!(f.is(FaultKind::CompletionTimeout));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFault {
    /// The class.
    pub kind: FaultKind,
    /// Who and what, for people.
    pub message: String,
}

impl SimFault {
    /// A fault of `kind`.
    pub fn new(kind: FaultKind, message: impl Into<String>) -> SimFault {
        SimFault {
            kind,
            message: message.into(),
        }
    }

    /// True if it is of class `kind`.
    pub fn is(&self, kind: FaultKind) -> bool {
        self.kind == kind
    }
}

impl fmt::Display for SimFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SimFault {}
