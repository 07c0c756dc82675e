//! # pcielab-model — what bandwidth and latency will this PCIe setting give me?
//!
//! An analytic model of PCIe DMA, after pcie-bench (Neugebauer et al., SIGCOMM'18): it
//! answers in microseconds, before any simulation, how fast a device can read and write
//! host memory for a transfer size, link generation, width, MPS, MRRS and RCB; how much
//! PCIe traffic a NIC generates per packet and whether that keeps up with Ethernet; and
//! how long single DMA reads take.
//!
//! ```text
//!   PcieConfig ──▶ Model ──▶ point(size) ─▶ read / write / read-write Gb/s
//!   (gen, lanes,    │
//!    MPS, MRRS,     ├──▶ nic::evaluate(model, NIC, Ethernet, frame) ─▶ Gb/s, Mpps, bytes/pkt
//!    RCB, mode)     └──▶ latency::evaluate(model, params, size)     ─▶ LAT_RD, LAT_WRRD ns
//! ```
//!
//! ```
//! use pcielab_model::{Mode, Model, PcieConfig};
//! use pcielab_wire::Generation;
//!
//! let mut cfg = PcieConfig::new(Generation::Gen3, 8)?; // MPS 256, MRRS 512, 64-bit
//! let m = Model::new(cfg)?;
//! assert_eq!(format!("{:.3}", m.write(64)?), "42.098");   // the published model's value
//! cfg.mode = Mode::Spec;
//! let s = Model::new(cfg)?;
//! assert!(s.write(64)? > m.write(64)?);                    // DLLPs charged as sent
//! # Ok::<(), pcielab_model::Error>(())
//! ```
//!
//! ## Two modes
//!
//! [`Mode::Compat`] reproduces the published model (`pcie-bench/pcie-model`) exactly —
//! the crate's tests check 3882 values printed by it, bit for bit — including its
//! simplifications. [`Mode::Spec`] follows the PCIe Base Specification and is what the
//! simulator is validated against. Every difference, and why:
//!
//! | aspect | pcie-bench (compat) | spec |
//! |---|---|---|
//! | ACK / UpdateFC DLLPs | 8 B each per table interval (symbol times) on every direction, i.e. N× too much on xN | charged per direction as sent (see [`bw`](crate::bw#dllps-in-spec-mode)): ACKs for the TLPs received on the other direction, UpdateFCs only for classes with finite credits (host P/NP; device completions are infinite), each by the latency-timer rule — at most one per limit, never more than one per TLP, with TLPs arriving back to back per transfer; the period is a fixed point. A one-way write stream's data direction carries none; a read's carries the ACKs/UpdateFC(NP)s of its requests. The interval is *per lane* (an xN link moves N symbols per symbol time; 128/130 B per lane at 128b/130b) |
//! | DLLP tables | published tables, incl. two typos (ACK Gen2 x32 MPS 4096 = 237; UpdateFC Gen1 x32 MPS 2048 = 248) | spec values (327, 148) |
//! | SKP ordered sets | 4/1538 for every generation | 4/1538 at 8b/10b; one 16-symbol block per 375 data blocks (1/376) at 128b/130b |
//! | Gen6 | 242/256 "encoding" and non-FLIT framing | FLIT mode: 64 Gb/s per lane, 236 TLP bytes per 256-byte flit, DLLPs in the flit's DLP bytes, no per-TLP framing/LCRC; partially-enabled requests add a 1-DW OHC |
//! | payload | exactly `size` bytes | whole DWs touched by `[addr, addr+size)` |
//! | splitting | `ceil(size/MPS)` writes; `ceil(size/MRRS)` reads; `ceil(size/MPS)` (or `/RCB`) completions | greedy at MPS/MRRS and 4 KiB boundaries from the start address; completions per request (never larger than the request) |
//! | unaligned reads | not modelled | first completion cut at the first RCB boundary when a request needs more than one completion |
//! | NIC receive path | descriptor-read request dropped (an `=` for `+=` in the published code) | counted |
//! | Ethernet "line rate − FCS" | `(frame−4)` bytes at the rate of a `(frame−4)`-byte frame | `(frame−4)` bytes at the rate of a `frame`-byte frame |
//!
//! So spec mode is at least compat mode for Gen1–5 DW-multiple transfers at aligned
//! addresses with MRRS ≥ MPS on x2 and wider links (a property test checks it); it is
//! lower where the published model is generous: non-DW sizes, MRRS < MPS, unaligned
//! addresses, x1 at 128b/130b (SKP and the 128/130-byte symbol time), read/write mixes
//! at x1 (three DLLP streams on the completion direction where pcie-bench charges two)
//! and Gen6 with large MPS (FLIT overhead).
//!
//! The NIC and latency models use [`Model::link_gbps`] (one ACK and one UpdateFC per
//! latency limit) in both modes: their traffic mixes are not given the per-direction
//! DLLP accounting.
//!
//! ## Features
//! * `plot` — [`plot::Plot`] draws PNG/SVG line plots (plotters, with DejaVu Sans embedded:
//!   no system fonts needed).
#![warn(missing_docs)]

pub mod bw;
pub mod config;
pub mod error;
pub mod eth;
pub mod latency;
pub mod link;
pub mod nic;
#[cfg(feature = "plot")]
pub mod plot;

pub use bw::{BwPoint, Model, Traffic};
pub use config::{AddrWidth, Lanes, Mode, Mps, Mrrs, PcieConfig, Rcb};
pub use error::{Error, Result};
