//! Data poisoning (PCIe Base Spec 2.7.2, 6.2): TLPs whose data is known to be bad
//! carry the EP bit; receivers log them and keep going.
//!
//! ```text
//!   source                             path                     ultimate receiver
//!   device: dma_write_poisoned,   ──► every link receiver   ──► AER Poisoned TLP Received
//!           ReadReply::Poisoned       sets Detected Parity       (bit 12) and what it does
//!   host:   mmio_write_poisoned,      Error (Status, or           with the data (below)
//!           poisoned host memory      Secondary Status of a
//!   SimConfig::poison_rate            downstream port);
//!                                     switches forward it
//! ```
//!
//! What the ultimate receiver does:
//! * **Root complex, memory write**: the data is written and the 64-byte lines it
//!   touches become poisoned (as a memory controller stores poison with the data).
//!   The root port that received it logs the error. An MSI write with poisoned data
//!   raises no interrupt.
//! * **Root complex, read completion** (an MMIO read): the root port logs the error;
//!   the read returns `HostRead::Poisoned` with the data as it came.
//! * **Device, memory write to a BAR**: the device logs the error and the data is
//!   dropped (the device model never sees it).
//! * **Device, read completion** (a DMA read): the DMA fails (`dma_done` with `ok`
//!   false); the device logs it as an Advisory Non-Fatal Error while the severity is
//!   Non-Fatal, since it reports the failure to its driver and goes on (PCIe Base Spec 6.2.3.2.4).
//!   Master Data Parity Error is set when Parity Error Response is enabled.
//! * **Configuration and I/O writes**: discarded, answered with Unsupported Request
//!   (2.7.2.2), which the completer logs instead (UR takes precedence over Poisoned
//!   TLP Received in the spec's order of precedence).
//!
//! Host memory keeps poison per 64-byte line: reads that touch a poisoned line return
//! poisoned completions (only the completions carrying bytes of such a line), a clean
//! write that covers a whole line clears it, a poisoned write poisons every line it
//! touches.
//!
//! Not modelled: Poisoned TLP Egress Blocking, Master Data Parity Error at the root
//! complex and on bridges' secondary sides, and a switch logging poisoned TLPs it
//! forwards in AER (optional in the spec).

use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::regs::set_bits;
use super::tlp::{Kind, Tlp};
use crate::functional::{FnId, Role};
use pcielab_config::header::{command, reg, status};
use pcielab_sim::Context;

pub(crate) mod state;
pub(crate) use state::*;

impl Engine {
    /// Marks the host-memory lines that `[addr, addr + len)` touches as poisoned.
    pub(crate) fn poison_host(&mut self, addr: u64, len: u64) {
        for l in lines(addr, len) {
            self.rc.poison_lines.insert(l);
        }
    }

    /// True if any line that `[addr, addr + len)` touches is poisoned.
    pub(crate) fn host_poisoned(&self, addr: u64, len: u64) -> bool {
        !self.rc.poison_lines.is_empty()
            && lines(addr, len).any(|l| self.rc.poison_lines.contains(&l))
    }

    /// A write of `len` bytes reached host memory at `addr`: poisoned data poisons the
    /// lines it touches; clean data clears the lines it covers whole.
    pub(crate) fn host_written(&mut self, addr: u64, len: u64, poisoned: bool) {
        if poisoned {
            self.poison_host(addr, len);
        } else if !self.rc.poison_lines.is_empty() && len > 0 {
            let first = addr.div_ceil(POISON_LINE);
            let end = (addr.saturating_add(len)) / POISON_LINE;
            for l in first..end {
                self.rc.poison_lines.remove(&l);
            }
        }
    }

    /// Whether the completion carrying `len` bytes at offset `off` of a read is
    /// poisoned.
    pub(crate) fn completion_poisoned(&self, poison: Poison, off: u64, len: u64) -> bool {
        match poison {
            Poison::Clean => false,
            Poison::All => true,
            Poison::HostLines(base) => self.host_poisoned(base.wrapping_add(off), len),
        }
    }

    /// With `SimConfig::poison_rate`, a TLP with data leaves its source poisoned with
    /// that probability (messages excepted).
    #[inline]
    pub(crate) fn maybe_poison(&mut self, t: &mut Tlp) {
        if self.cfg.poison_rate > 0.0
            && t.payload_bytes() > 0
            && t.kind != Kind::VendorMsg
            && self.err_rng.chance(self.cfg.poison_rate)
        {
            t.poisoned = true;
        }
    }

    /// A poisoned TLP arrived over the link of direction `d`: its receiving function
    /// sets Detected Parity Error, in Secondary Status for a downstream port (a root
    /// port or a switch's downstream port receives on its secondary side), else in
    /// Status.
    /// Set whatever Parity Error Response says.
    #[cold]
    #[inline(never)]
    pub(crate) fn parity_detected(&mut self, d: u16) {
        let Some(f) = self.dirs[d as usize].rx_func else {
            return;
        };
        let Some(func) = self.fabric.functions.get_mut(f.0 as usize) else {
            return;
        };
        let off = match func.role {
            Role::RootPort { .. } | Role::SwitchDownstream { .. } => reg::SEC_STATUS,
            _ => reg::STATUS,
        };
        set_bits(&mut func.config, off, 2, status::DETECTED_PARITY as u32);
    }

    /// Requester `f` received a poisoned completion or sent a poisoned write: Master
    /// Data Parity Error when its Parity Error Response bit is set.
    pub(crate) fn master_data_parity(&mut self, f: FnId) {
        let Some(func) = self.fabric.functions.get_mut(f.0 as usize) else {
            return;
        };
        if func.config.read_u16(reg::COMMAND) & command::PARITY == 0 {
            return;
        }
        set_bits(
            &mut func.config,
            reg::STATUS,
            2,
            status::MASTER_PARITY as u32,
        );
    }

    /// The ultimate receiver `f` (if any) of poisoned TLP `id` logs Poisoned TLP
    /// Received (its header in the Header Log); `advisory`: it deals with the data and goes on.
    #[cold]
    #[inline(never)]
    pub(crate) fn poisoned_received(
        &mut self,
        f: Option<FnId>,
        advisory: bool,
        what: &str,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let who = f.map_or_else(
            || "root complex".to_string(),
            |f| self.fabric.bdf(f).to_string(),
        );
        self.fault(
            FaultKind::Poisoned,
            format!("{who}: poisoned {what} received"),
        );
        if let Some(f) = f {
            self.signal_error(f, AER_POISONED, advisory, Some(id), cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_touched() {
        assert_eq!(lines(0, 64).collect::<Vec<_>>(), [0]);
        assert_eq!(lines(63, 2).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(lines(128, 0).collect::<Vec<_>>(), [2]);
        assert_eq!(lines(100, 200).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }
}
