//! What the simulator counts about device models and their functions.

/// What the simulator counted about one function of a device model
/// ([`FabricSim::function_dma_stats`](super::FabricSim::function_dma_stats)): its DMA engine's work with tag ranges per
/// function (`DmaPolicy::tags_per_function`), and its Function Level Resets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionDmaStats {
    /// DMA read requests it sent (with tag ranges per function).
    pub requests: u64,
    /// Times its next read request waited for room in its reorder window (counted
    /// once each time the engine looked for work).
    pub window_stalls: u64,
    /// Times its next read request waited for one of its tags (counted the same way).
    pub tag_stalls: u64,
    /// Completions that reached it whose tag is not one of its requests in flight
    /// (Unexpected Completions: discarded, logged in its AER registers).
    pub unexpected_completions: u64,
    /// Function Level Resets it went through.
    pub flrs: u64,
    /// Its DMAs dropped by a Function Level Reset (never finished, no `dma_done`).
    pub flr_dropped_dmas: u64,
    /// Completions of its requests from before a Function Level Reset that arrived
    /// after it: discarded, never delivered.
    pub flr_late_completions: u64,
}

/// What the simulator counted about one device model ([`FabricSim::device_stats`](super::FabricSim::device_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Times the model refused a request ([`Endpoint::accept`](super::Endpoint::accept) returned false).
    pub refusals: u64,
    /// Requests held for it now (refused, or behind a refused one).
    pub held: u64,
    /// Times a read request waited for room in the reorder window.
    pub window_stalls: u64,
    /// The most read requests one of its DMAs had in flight at once.
    pub max_reads_in_flight: u32,
    /// Completions with data handed to its per-completion or reorder path.
    pub completions: u64,
}
