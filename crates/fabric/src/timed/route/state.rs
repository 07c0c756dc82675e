//! Routing state (below the engine): the link direction between two adjacent nodes,
//! and the routes already computed, by (origin, page).

use crate::inthash::IntMap;
use crate::timed::tlp::Route;

/// Routing state: the direction between adjacent nodes and the routes computed so far.
#[derive(Debug)]
pub(crate) struct Routes {
    pub(crate) pair_dir: IntMap<(u32, u32), u16>,
    pub(crate) route_cache: IntMap<(u32, u64), Route>,
    /// The last route looked up, with its key (consecutive TLPs of a DMA share a page).
    pub(crate) route_last: ((u32, u64), Route),
}
