//! The simulator's error type for building a simulation and making host requests.

/// Why a simulation could not be built or a host request could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// A parameter is out of range.
    Param {
        /// Which.
        what: &'static str,
        /// Its value.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The topology could not be built or enumerated.
    Build(String),
    /// A name that is not in the topology.
    UnknownNode(String),
    /// A request no one claims.
    Route(String),
    /// Host software's recovery of a reset component could not proceed (see
    /// [`FabricSim::recover`](super::FabricSim::recover)).
    Recovery(String),
    /// An observer of a driver's run stopped it (see
    /// [`drivers::Observer`](crate::drivers::Observer)); its message.
    Observer(String),
}

impl core::fmt::Display for SimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SimError::Param {
                what,
                value,
                allowed,
            } => write!(f, "{what} {value} is not allowed; allowed: {allowed}"),
            SimError::Build(e) => write!(f, "cannot build the simulation: {e}"),
            SimError::UnknownNode(n) => write!(f, "no node named {n:?} in the topology"),
            SimError::Route(e) => write!(f, "{e}"),
            SimError::Recovery(e) => write!(f, "recovery: {e}"),
            SimError::Observer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SimError {}
