//! ECRC, the end-to-end CRC (PCIe Base Spec 2.7.1, 6.2.7): the TLP Digest an
//! originator appends and the ultimate receiver checks, as AER's Advanced Error
//! Capabilities and Control enables them; and the switch-internal data errors that
//! only ECRC can catch (each link's LCRC is recomputed by every switch).
//!
//! ```text
//!   originator                     switch                         ultimate receiver
//!   ECRC Generation Enable ──► TD set, 4 digest bytes ──► forwards; may corrupt ──► ECRC Check Enable:
//!   (its own, or the root port's     on every link            the data (rate         ECRC Error (AER bit 19),
//!   for the root complex)                                     switch_error_rate)     TLP discarded; a request
//!                                                                                     answered with CA
//! ```
//!
//! * **Generation.** A TLP carries a digest (TD, 4 more bytes on every link) when its
//!   originating function has ECRC Generation Enable set; for the root complex, the
//!   root port it leaves by. The digest counts in the TLP's wire size, not in its data
//!   credits.
//! * **Internal errors.** With [`SimConfig::switch_error_rate`](super::SimConfig) a
//!   switch corrupts the data of a TLP it forwards (the lowest bit of its first payload
//!   byte flips) with that probability. The link CRC cannot see it: the switch sends
//!   the corrupted TLP with a correct LCRC. Counted per link direction the TLP then
//!   leaves by ([`DirCounters::internal_errors`](super::DirCounters)).
//! * **Checking.** The ultimate receiver (the function a request targets, the
//!   requester of a completion, the root port for the root complex) checks the digest
//!   when its ECRC Check Enable is set. A corrupted TLP then fails: ECRC Error is logged
//!   (uncorrectable bit 19, Non-Fatal by default, with its header in the Header Log)
//!   and the TLP is discarded, as receivers do; a non-posted request is answered with
//!   Completer Abort. A discarded completion leaves its request to time out. Without a
//!   digest, or without checking, the corrupted data is delivered as it is: silent
//!   data corruption, which the counters still show.
//! * In the trace and captures, a corrupted TLP keeps the digest of its original data,
//!   so Wireshark (with our dissector) and `pcielab dump` flag its ECRC.
//!
//! Not modelled: ECRC checks by switches on the way (optional), ECRC in TLP prefixes,
//! and a switch that regenerates ECRC.

use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::tlp::{Dest, Kind, Tlp, NONE};
use crate::functional::{FnId, Origin};
use pcielab_sim::Context;
use pcielab_wire::CplStatus;

/// AER Uncorrectable Error Status: ECRC Error.
pub(crate) const AER_ECRC: u32 = 1 << 19;
/// Advanced Error Capabilities and Control: ECRC Generation Enable.
pub(crate) const ECRC_GEN_EN: u32 = 1 << 6;
/// Advanced Error Capabilities and Control: ECRC Check Enable.
pub(crate) const ECRC_CHECK_EN: u32 = 1 << 8;
/// Per-function flags of [`Engine::ecrc`].
const GEN: u8 = 1;
const CHECK: u8 = 2;

impl Engine {
    /// Sets ECRC Generation Enable and ECRC Check Enable on every function with AER
    /// (`SimConfig::ecrc`).
    pub(crate) fn enable_ecrc(&mut self) {
        for i in 0..self.fabric.functions.len() {
            let f = FnId(i as u32);
            if let (_, Some(a)) = super::regs::err_caps(&self.fabric, f) {
                let cs = &mut self.fabric.functions[i].config;
                let v = cs.read_u32(a + 0x18);
                cs.hw_write(a + 0x18, 4, v | ECRC_GEN_EN | ECRC_CHECK_EN);
                self.refresh_ecrc(f);
            }
        }
    }

    /// Re-reads the ECRC enables of function `f` (after a configuration write).
    pub(crate) fn refresh_ecrc(&mut self, f: FnId) {
        let (_, aer) = super::regs::err_caps(&self.fabric, f);
        let ctl = aer.map_or(0, |a| {
            self.fabric.functions[f.0 as usize]
                .config
                .read_u32(a + 0x18)
        });
        let i = f.0 as usize;
        if self.ecrc.len() <= i {
            self.ecrc.resize(i + 1, 0);
        }
        self.ecrc[i] = if ctl & ECRC_GEN_EN != 0 { GEN } else { 0 }
            | if ctl & ECRC_CHECK_EN != 0 { CHECK } else { 0 };
        self.ecrc_any = self.ecrc.iter().any(|&x| x != 0);
    }

    fn ecrc_flags(&self, f: Option<FnId>) -> u8 {
        f.and_then(|f| self.ecrc.get(f.0 as usize).copied())
            .unwrap_or(0)
    }

    /// What a TLP gets where it is made: poison (`poison_rate`) and, when its
    /// originator generates ECRC, TD; `first`: the first direction of its path.
    #[inline(always)]
    pub(crate) fn at_source(&mut self, origin: Origin, t: &mut Tlp, first: Option<u16>) {
        self.maybe_poison(t);
        if self.ecrc_any {
            self.ecrc_mark(origin, t, first);
        }
    }

    /// Sets TD on `t` when its originator generates ECRC; `first`: the first direction
    /// of its path (the root complex generates by its root port's enable).
    fn ecrc_mark(&self, origin: Origin, t: &mut Tlp, first: Option<u16>) {
        let f = match origin {
            Origin::Function(f) => Some(f),
            Origin::Host => first.and_then(|d| self.dirs[(d ^ 1) as usize].rx_func),
        };
        t.td = self.ecrc_flags(f) & GEN != 0;
    }

    /// Switch `node` forwards TLP `id` on direction `d`: it corrupts the TLP's data with
    /// probability `switch_error_rate`.
    #[cold]
    #[inline(never)]
    pub(crate) fn maybe_corrupt_inside(&mut self, id: u32, d: u16) {
        let t = &self.pool.tlps[id as usize];
        if t.data == NONE || t.corrupted {
            return;
        }
        let p = t.data as usize;
        if self.pool.payloads[p].is_empty() || !self.err_rng.chance(self.cfg.switch_error_rate) {
            return;
        }
        self.pool.payloads[p][0] ^= 1;
        self.pool.tlps[id as usize].corrupted = true;
        self.dirs[d as usize].counters.internal_errors += 1;
    }

    /// TLP `id` reached its ultimate receiver with data corrupted on the way. With a
    /// digest and the receiver's ECRC Check Enable set, the check fails: ECRC Error is
    /// logged, the TLP discarded (a request answered with Completer Abort) and true
    /// returned; otherwise false (the data is delivered as it is).
    #[cold]
    #[inline(never)]
    pub(crate) fn ecrc_failed(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) -> bool {
        let t = self.pool.tlps[id as usize].clone();
        if !t.td {
            return false;
        }
        let receiver = match t.dest {
            Dest::HostMemory | Dest::Rc | Dest::Refused => self.last_rx_func,
            Dest::Bar { node, .. }
            | Dest::Dma { node }
            | Dest::Intx { node }
            | Dest::Hop { node } => self.nodes[node as usize].func,
            Dest::Config { func, .. } if func != NONE => Some(FnId(func)),
            Dest::Config { .. } => self.last_rx_func,
        };
        if self.ecrc_flags(receiver) & CHECK == 0 {
            return false;
        }
        let who = receiver.map_or_else(
            || "root complex".to_string(),
            |f| self.fabric.bdf(f).to_string(),
        );
        self.fault(
            FaultKind::Ecrc,
            format!(
                "{who}: ECRC check failed: {:?} from {}",
                t.kind, t.requester
            ),
        );
        if let Some(f) = receiver {
            self.signal_error(f, AER_ECRC, false, Some(id), cx);
        }
        if t.class() == super::tlp::NP {
            // The completer answers Completer Abort with its own ID.
            let (origin, completer) = match t.dest {
                Dest::Bar { node, .. } => (self.origin_of(node), self.ep_bdf(node)),
                Dest::Config { node, func, .. } if func != NONE => {
                    let f = FnId(func);
                    let origin = if node == self.rc.node {
                        Origin::Host
                    } else {
                        Origin::Function(f)
                    };
                    (origin, self.fabric.bdf(f))
                }
                _ => (Origin::Host, self.rc.bdf),
            };
            if t.kind == Kind::MRd {
                self.send_completions(origin, completer, &t, CplStatus::Ca, &[], Poison::Clean, cx);
            } else {
                self.send_io_completion(origin, completer, &t, CplStatus::Ca, None, false, cx);
            }
        }
        true
    }
}
