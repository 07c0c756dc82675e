//! Host drivers: host programs that drive a device model through the timed
//! simulator, as an operating system's driver would.

pub mod d2d;
pub mod dma_engine;
pub mod nic;
