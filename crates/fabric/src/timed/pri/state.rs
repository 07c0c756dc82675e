//! What the Page Request Interface keeps (below the engine): the Page Requests the host
//! received, the ranges host software maps on demand, and the response codes.

use pcielab_sim::SimTime;
use pcielab_wire::Bdf;

/// PRG Response codes (PCIe Base Spec): Success, Invalid Request, Response Failure.
pub(crate) const PRG_SUCCESS: u8 = 0;

pub(crate) const PRG_INVALID: u8 = 1;

pub(crate) const PRG_FAILURE: u8 = 0xf;

/// A Page Request the host received, and how it was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequestRecord {
    /// The device that asked.
    pub device: Bdf,
    /// The page (I/O virtual address, 4 KiB aligned).
    pub page: u64,
    /// The PASID of its address space (the request's PASID prefix), or None.
    pub pasid: Option<u32>,
    /// Its Page Request Group index.
    pub prg_index: u16,
    /// Read and write access requested.
    pub read: bool,
    /// Write access requested.
    pub write: bool,
    /// When it reached the root complex.
    pub received: SimTime,
    /// When the PRG Response left (the mapping appears then).
    pub answered: Option<SimTime>,
    /// The response code: 0 Success, 1 Invalid Request.
    pub response: u8,
}

/// A range software maps when a device asks for its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OnDemand {
    pub device: Bdf,
    /// The PASID whose address space it belongs to, or NONE.
    pub pasid: u32,
    pub iova: u64,
    pub phys: u64,
    pub len: u64,
}
