//! Advanced Error Reporting: functions log the errors they detect and signal them
//! with error messages; root ports log the messages they receive.

use super::engine::Engine;
use super::fault::FaultKind;
use super::packed::PackedEv;
use super::rc::state::ErrorMessage;
use super::regs::{err_caps, log_error, set_bits, ErrorSeverity, AER_UNSUPPORTED};
use super::tlp::Detail;
use super::tlp::{Kind, Tlp, NONE};
use crate::functional::{FnId, Origin};
use pcielab_config::ext_caps::{AER_CORR_HEADER_LOG_OVERFLOW, AER_CTL_MHR_ENABLE};
use pcielab_sim::Context;
use pcielab_wire::Bdf;

impl Engine {
    /// Function `f` detected the uncorrectable error `bit`: logs it (see [`log_error`])
    /// and sends the error message it calls for towards the root complex. A root port
    /// (or another function of the root complex) logs its own message directly.
    pub(crate) fn signal_error(
        &mut self,
        f: FnId,
        bit: u32,
        advisory: bool,
        tlp: Option<u32>,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let header = tlp.map(|id| self.tlp_header(id));
        let mut overflow = false;
        let sev = log_error(
            &mut self.fabric,
            &mut self.aer_records,
            f,
            bit,
            advisory,
            header,
            &mut overflow,
        );
        if overflow {
            self.signal_correctable(f, AER_CORR_HEADER_LOG_OVERFLOW, cx);
        }
        // A Downstream Port that contains the error (DPC) does not signal it.
        if !advisory && self.dpc_port_error(f, bit, cx) {
            return;
        }
        let Some(sev) = sev else {
            return;
        };
        self.send_error_message(f, sev, cx);
    }

    /// Function `f` detected the correctable error `bit` (AER Correctable Error Status:
    /// Bad TLP, Bad DLLP, REPLAY_NUM Rollover, Replay Timer Timeout): Correctable Error
    /// Detected in Device Status, and ERR_COR towards the root complex when the error
    /// is unmasked and Correctable Error Reporting is enabled (PCIe Base Spec 6.2.6).
    #[cold]
    #[inline(never)]
    pub(crate) fn signal_correctable(&mut self, f: FnId, bit: u32, cx: &mut Context<'_, PackedEv>) {
        let (pcie, aer) = err_caps(&self.fabric, f);
        let Some(func) = self.fabric.functions.get_mut(f.0 as usize) else {
            return;
        };
        let cs = &mut func.config;
        if let Some(a) = aer {
            set_bits(cs, a + 0x10, 4, bit);
        }
        let Some(p) = pcie else {
            return;
        };
        set_bits(cs, p + pcielab_config::caps::pcie_reg::DEVSTA, 2, 1);
        let masked = aer.is_some_and(|a| cs.read_u32(a + 0x14) & bit != 0);
        let enabled = cs.read_u16(p + pcielab_config::caps::pcie_reg::DEVCTL) & 1 != 0;
        if !masked && enabled {
            self.send_error_message(f, ErrorSeverity::Correctable, cx);
        }
    }

    /// Sends the error message `sev` of function `f` towards the root complex (a
    /// function of the root complex logs it directly).
    pub(crate) fn send_error_message(
        &mut self,
        f: FnId,
        sev: ErrorSeverity,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let me = self.fabric.bdf(f);
        let node = self.fabric.functions[f.0 as usize].node.0;
        if node == self.rc.node {
            self.root_error(f, me, sev.code(), cx);
            return;
        }
        // A switch's downstream port sends its message on the switch's internal bus:
        // the upstream port forwards it (from its secondary side) or not.
        if self.nodes[node as usize].func != Some(f) && !self.switch_forwards_error(node, NONE) {
            return;
        }
        let host = self.rc.bdf;
        let t = Tlp {
            detail: Detail::Msg(sev.code()),
            ..Tlp::new(Kind::ErrMsg, me, 0, 0)
        };
        if let Err(e) = self.inject(Origin::Function(f), t, host, cx) {
            self.fault(
                FaultKind::NotRoutable,
                format!("{me}: error message not routable: {e}"),
            );
        }
    }

    /// The device at `node` answers request `id` with Unsupported Request: its function
    /// logs the error (Unsupported Request Detected in Device Status, AER status bit
    /// 20); a completer sending a UR completion is an Advisory Non-Fatal case (PCIe
    /// Base Spec 6.2.3.2.4.1) while the severity is Non-Fatal.
    pub(crate) fn completer_ur(&mut self, node: u32, id: u32, cx: &mut Context<'_, PackedEv>) {
        if let Some(f) = self.nodes[node as usize].func {
            self.signal_error(f, AER_UNSUPPORTED, true, Some(id), cx);
        }
    }

    /// Root port `rp` logs an error message from `source` (Root Error Status, Error
    /// Source Identification: the first source of each kind is kept, later ones set the
    /// Multiple bits) and the simulator records it.
    #[cold]
    #[inline(never)]
    pub(crate) fn root_error(
        &mut self,
        rp: FnId,
        source: Bdf,
        code: u8,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let Some(sev) = ErrorSeverity::from_code(code) else {
            return;
        };
        let now = cx.now();
        let root_port = self.fabric.bdf(rp);
        self.error_messages.push((
            now,
            ErrorMessage {
                root_port,
                source,
                severity: sev,
            },
        ));
        let (_, Some(a)) = err_caps(&self.fabric, rp) else {
            return;
        };
        let cs = &mut self.fabric.functions[rp.0 as usize].config;
        let mut st = cs.read_u32(a + 0x30);
        let mut src = cs.read_u32(a + 0x34);
        let id = source.raw() as u32;
        if sev == ErrorSeverity::Correctable {
            if st & 1 != 0 {
                st |= 2;
            } else {
                st |= 1;
                src = (src & 0xffff_0000) | id;
            }
        } else {
            if st & 4 != 0 {
                st |= 8;
            } else {
                st |= 4;
                src = (src & 0xffff) | id << 16;
                if sev == ErrorSeverity::Fatal {
                    st |= 0x10; // First Uncorrectable Fatal
                }
            }
            st |= if sev == ErrorSeverity::Fatal {
                0x40
            } else {
                0x20
            };
        }
        cs.hw_write(a + 0x30, 4, st);
        cs.hw_write(a + 0x34, 4, src);
        self.root_port_interrupt(rp, cx);
    }

    /// After a configuration write to function `f`: with Multiple Header Recording,
    /// once software has cleared the status bit the First Error Pointer names, the
    /// next recorded error moves into the First Error Pointer and the Header Log
    /// (PCIe Base Spec 6.2.4.2). Clearing Multiple Header Recording Enable drops the
    /// records.
    pub(crate) fn aer_records_written(&mut self, f: FnId) {
        let Some(q) = self.aer_records.get_mut(&f.0) else {
            return;
        };
        if q.is_empty() {
            return;
        }
        let (_, Some(a)) = err_caps(&self.fabric, f) else {
            return;
        };
        let cs = &mut self.fabric.functions[f.0 as usize].config;
        let ctl = cs.read_u32(a + 0x18);
        if ctl & AER_CTL_MHR_ENABLE == 0 {
            q.clear();
            return;
        }
        if cs.read_u32(a + 4) & (1 << (ctl & 0x1f)) != 0 {
            return;
        }
        if let Some((bit, h)) = q.pop_front() {
            super::regs::load_header_log(cs, a, bit, Some(h));
        }
    }
}
