//! The nodes of the fabric (below the engine): the root complex, switches and device
//! slots, each with the FIFO stream of its events.

use crate::functional::FnId;
use crate::timed::slot::state::EpState;
use pcielab_sim::FifoId;

#[derive(Debug)]
pub(crate) enum NodeKind {
    Rc,
    Switch,
    Ep(Box<EpState>),
}

impl NodeKind {
    /// The device timing of an endpoint's model (none for other nodes).
    pub(crate) fn ep_timing(&self) -> pcielab_device::DeviceTiming {
        match self {
            NodeKind::Ep(ep) => ep.timing,
            _ => pcielab_device::DeviceTiming::NONE,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Node {
    pub name: String,
    /// FIFO stream of the node's Forward/Consume events.
    pub fifo: FifoId,
    /// FIFO stream of the Consume events that wait for an access latency on top of
    /// the node's (memory reads at the root complex, BAR reads at an endpoint): with
    /// their own stream they stay in order among themselves instead of falling back
    /// to the heap behind the writes that overtake them.
    pub read_fifo: FifoId,
    pub kind: NodeKind,
    /// Functional function of the node (endpoint function 0; switch upstream port).
    pub func: Option<FnId>,
}
