//! stub
#![warn(missing_docs)]

pub mod bw;
pub mod config;
pub mod error;
pub mod link;

pub use bw::{BwPoint, Model, Traffic};
pub use config::{AddrWidth, Lanes, Mode, Mps, Mrrs, PcieConfig, Rcb};
pub use error::{Error, Result};
pub mod eth;
pub mod latency;
pub mod nic;
#[cfg(feature = "plot")]
pub mod plot;
