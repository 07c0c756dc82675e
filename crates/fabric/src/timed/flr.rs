//! Function Level Reset (PCIe Base Spec 6.6.2) in the timed simulator: host software
//! writes Initiate FLR (Device Control bit 15) to one function, a PF or a VF, through
//! `FabricSim::cfg_write` or `FabricSim::config_write`.
//!
//! * Its configuration space returns to its defaults (the functional fabric's
//!   `Fabric::config_write_fn_flr`): Bus Master Enable clear, MSI-X disabled; a VF
//!   stays a VF. A PF's FLR clears its VF Enable, so its VFs go, and their DMAs with
//!   them.
//! * Its DMAs in flight are dropped: they never finish and the model gets no
//!   `dma_done` for them ([`super::FunctionDmaStats::flr_dropped_dmas`]). Read
//!   requests not yet sent are never sent; a write whose TLPs are leaving finishes
//!   leaving (posted writes cannot be recalled).
//! * **Tags**: the tags of its read requests in flight return to the pool only once
//!   their completions can no longer arrive: when every completion of the request has
//!   come (discarded, counted in `flr_late_completions`, never delivered), or, for
//!   completions that never come, after the completion timeout (then silently: no
//!   Completion Timeout error is logged for a reset function). So a tag is never
//!   reused while an old completion for it may still be on its way, and a new DMA of
//!   the function can never receive the old one's data.
//! * The device model hears of it through `DeviceModel::function_reset`, called about
//!   that function; the device's other functions keep running.
//! * After a PF's FLR its VFs no longer exist, and the fabric routes completions only
//!   to functions that exist: the root complex records the completions of the gone
//!   VFs' requests as not routable (`FaultKind::NotRoutable`), none reaches the
//!   device, and those DMAs end silently at the completion timeout.

use super::engine::Engine;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use crate::functional::FnId;
use pcielab_sim::Context;

/// The functions a Function Level Reset of one function concerns: its device's node,
/// its index there, and the indices of the VFs that go with it (a PF's).
#[derive(Debug, Clone)]
pub(crate) struct FlrScope {
    node: u32,
    index: Option<u16>,
    vfs: Vec<u16>,
}

impl Engine {
    /// What a Function Level Reset of `f` would concern, taken before the write that
    /// starts it (a PF's VFs and their indices go with the write).
    pub(crate) fn flr_scope(&self, f: FnId) -> FlrScope {
        let Some(func) = self.fabric.functions.get(f.0 as usize) else {
            return FlrScope {
                node: u32::MAX,
                index: None,
                vfs: Vec::new(),
            };
        };
        let node = func.node.0;
        let vfs = self
            .fabric
            .vfs_of(f)
            .iter()
            .filter_map(|&v| self.fn_index(node, v))
            .collect();
        FlrScope {
            node,
            index: self.fn_index(node, f),
            vfs,
        }
    }

    /// A Function Level Reset of the function `scope` describes ran (its
    /// configuration space is reset already): its DMAs, and those of the VFs that
    /// went with it, are dropped, and the model is told (see the module notes).
    pub(crate) fn function_level_reset(&mut self, scope: FlrScope, cx: &mut Context<'_, PackedEv>) {
        let Some(index) = scope.index else {
            return;
        };
        let node = scope.node;
        let now = cx.now();
        let mut free_now = Vec::new();
        {
            let Some(NodeKind::Ep(ep)) = self.nodes.get_mut(node as usize).map(|n| &mut n.kind)
            else {
                return;
            };
            let ep = &mut **ep;
            ep.fn_stats_mut(index).flrs += 1;
            for oi in 0..ep.ops.len() as u32 {
                let op = &mut ep.ops[oi as usize];
                if !op.live || op.reset || (op.func != index && !scope.vfs.contains(&op.func)) {
                    continue;
                }
                op.reset = true;
                op.ok = false;
                op.buf = Vec::new();
                // Its tags wait at most one completion timeout from now.
                op.last_progress = now;
                let func = op.func;
                // A read with nothing in flight ends now; one with requests in flight
                // ends when they are answered or time out; a write ends when its last
                // TLP has left; a DMA waiting for ATS translations ends when they come
                // (or time out).
                let idle_read = !op.write && op.outstanding == 0 && op.xlate_wait == 0;
                ep.fn_stats_mut(func).flr_dropped_dmas += 1;
                ep.unqueue(oi);
                if idle_read {
                    free_now.push(oi);
                }
            }
        }
        for oi in free_now {
            self.finish_dma(node, oi, cx);
        }
        self.call_ep_fn(node, index, cx, |m, cx| m.function_reset(cx));
    }
}
