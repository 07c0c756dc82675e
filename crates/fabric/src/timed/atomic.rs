//! AtomicOps (PCIe Base Spec 6.15): FetchAdd, Swap and CAS.
//!
//! * **A device** asks for one with [`super::EpCx::atomic`]: its DMA engine sends one
//!   non-posted request (routed by address, with a tag from its pool, under the
//!   completion timeout) whose payload is the operand (FetchAdd, Swap: 4 or 8 bytes)
//!   or the compare and swap values (CAS: 4, 8 or 16 bytes each); the completion's data
//!   is the target's original value, which [`super::Endpoint::dma_done`] receives. The
//!   function must have AtomicOp Requester Enable (Device Control 2 bit 6) and Bus
//!   Master Enable set, and the address must be aligned to the operand size; otherwise
//!   nothing is sent, the DMA fails and the simulator records which rule was broken.
//! * **The root complex** completes AtomicOps for host memory when the root port the
//!   request came in by advertises the size in Device Capabilities 2 (32-bit and
//!   64-bit AtomicOp Completer, 128-bit CAS Completer: every root port unless the
//!   topology says `atomics = false`). It reads the target (the host memory latency of
//!   a read of the operand size), writes the result — FetchAdd: the sum, wrapping;
//!   Swap: the operand; CAS: the swap value if the target equals the compare value,
//!   else nothing — and completes with the original value, all in one event, so no
//!   other access comes between. Operands and memory are little-endian. Otherwise (the
//!   size not advertised, an MSI address, an IOMMU fault) it completes with
//!   Unsupported Request; the root port logs the UR (advisory, as a completer does).
//!   Poisoned operands leave the target alone: Poisoned TLP Received, and a UR
//!   completion.
//! * **Endpoints**: psmem with `atomics = true` advertises the completer sizes and
//!   completes peer AtomicOps on its BAR memory; other devices (and device models with
//!   their own `Endpoint`) answer Unsupported Request, logged by the device.
//! * **Ports** route AtomicOps (AtomicOp Routing Supported). A switch or root port
//!   with AtomicOp Egress Blocking set (Device Control 2 bit 7) refuses one that would
//!   leave by it: Unsupported Request, and AtomicOp Egress Blocked (AER uncorrectable
//!   bit 24) logged with the header.
//! * **Host software** enables a device as Linux's `pci_enable_atomic_ops_to_root`
//!   does: [`super::FabricSim::enable_atomic_ops_to_root`] checks the path to the root
//!   port and sets the device's Requester Enable.
//!
//! CAS operand order in the payload (6.15.3.3): when the target address is aligned to
//! the size of both operands together, the compare value comes first; otherwise the
//! swap value does.

use super::endpoint::ReadReply;
use super::engine::Engine;
use super::fault::FaultKind;
use super::node::state::NodeKind;
use super::packed::PackedEv;
use super::poison::state::Poison;
use super::regs::{err_caps, AER_UNSUPPORTED};
use super::tlp::{operand_size, AtomicKind, Kind, Tlp};
use crate::functional::{FnId, Origin, Role, MSI_RANGE};
use pcielab_config::caps::{
    pcie_reg, DEVCAP2_ATOMIC_COMPLETER_32, DEVCAP2_ATOMIC_COMPLETER_64, DEVCAP2_ATOMIC_ROUTING,
    DEVCAP2_CAS_COMPLETER_128, DEVCTL2_ATOMIC_EGRESS_BLOCKING, DEVCTL2_ATOMIC_REQUESTER,
};
use pcielab_config::ext_caps::AER_UNCORR_ATOMIC_BLOCKED;
use pcielab_device::AtomicOp;
use pcielab_sim::Context;

use pcielab_wire::CplStatus;

/// The operation of AtomicOp `op`.
fn code(op: AtomicOp) -> AtomicKind {
    match op {
        AtomicOp::FetchAdd32(_) | AtomicOp::FetchAdd64(_) => AtomicKind::FetchAdd,
        AtomicOp::Swap32(_) | AtomicOp::Swap64(_) => AtomicKind::Swap,
        _ => AtomicKind::Cas,
    }
}

/// The new value of a target at `addr` holding `old` under operation `code` with
/// `payload`, or None when it stays (a CAS that does not match).
fn result(code: AtomicKind, addr: u64, old: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
    let n = old.len();
    let num = |b: &[u8]| {
        let mut x = [0u8; 16];
        x[..b.len()].copy_from_slice(b);
        u128::from_le_bytes(x)
    };
    match code {
        AtomicKind::FetchAdd => {
            let sum = num(old).wrapping_add(num(payload));
            Some(sum.to_le_bytes()[..n].to_vec())
        }
        AtomicKind::Swap => Some(payload[..n].to_vec()),
        _ => {
            let (first, second) = payload.split_at(n);
            let (compare, swap) = if addr % (2 * n as u64) == 0 {
                (first, second)
            } else {
                (second, first)
            };
            (old == compare).then(|| swap.to_vec())
        }
    }
}

/// The Device Capabilities 2 bit of a completer for operands of `size` bytes (16: only
/// CAS has them).
fn completer_bit(size: u64) -> Option<u32> {
    match size {
        4 => Some(DEVCAP2_ATOMIC_COMPLETER_32),
        8 => Some(DEVCAP2_ATOMIC_COMPLETER_64),
        16 => Some(DEVCAP2_CAS_COMPLETER_128),
        _ => None,
    }
}

/// AtomicOp request `t` as the completion code sees it: a read of its operand size at
/// its address; and that size.
fn as_read(t: &Tlp) -> (Tlp, u64) {
    let size = operand_size(t.atomic_kind(), t.len as u64);
    let req = Tlp {
        kind: Kind::MRd,
        len: size as u32,
        ..t.clone()
    };
    (req, size)
}

/// An AtomicOp's name for messages.
fn name(code: AtomicKind, size: u64) -> String {
    let op = match code {
        AtomicKind::FetchAdd => "FetchAdd",
        AtomicKind::Swap => "Swap",
        _ => "CAS",
    };
    format!("{}-bit {op}", size * 8)
}

impl Engine {
    /// The dword at `reg` of function `f`'s PCI Express capability (0 without one).
    fn pcie_dword(&self, f: Option<FnId>, reg: u16) -> u32 {
        f.and_then(|f| {
            let (p, _) = err_caps(&self.fabric, f);
            p.map(|p| self.fabric.functions[f.0 as usize].config.read_u32(p + reg))
        })
        .unwrap_or(0)
    }

    /// Device `node` asks for AtomicOp `op` at `addr` (DMA `id`).
    pub(crate) fn new_atomic(
        &mut self,
        node: u32,
        id: super::endpoint::DmaId,
        addr: u64,
        op: AtomicOp,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let size = op.operand_size() as u64;
        let name = self.nodes[node as usize].name.clone();
        // The AtomicOp Requester Enable of function 0 (a VF's AtomicOps follow its PF's
        // setting here).
        let ctl2 = self.pcie_dword(self.nodes[node as usize].func, pcie_reg::DEVCTL2);
        let enabled = ctl2 as u16 & DEVCTL2_ATOMIC_REQUESTER != 0;
        let problem = if addr % size != 0 {
            Some(format!(
                "{name}: AtomicOp at {addr:#x} not aligned to its {size}-byte operand: not issued"
            ))
        } else if !enabled {
            Some(format!(
                "{name}: AtomicOp while AtomicOp Requester Enable is clear: not issued"
            ))
        } else {
            None
        };
        if let Some(p) = problem {
            self.fault(FaultKind::Atomic, p);
            self.call_ep(node, cx, |m, cx| m.dma_done(id, false, &[], cx));
            return;
        }
        let dir = super::slot::state::DmaDir::Atomic(code(op));
        self.new_dma((node, 0), id, dir, (addr, size, None), op.payload(addr), cx);
    }

    /// A payload holding the operands of AtomicOp DMA `oi` of `node`.
    pub(crate) fn atomic_operands(&mut self, node: u32, oi: u32) -> u32 {
        let operands = match &self.nodes[node as usize].kind {
            NodeKind::Ep(ep) => ep.ops[oi as usize]
                .atomic
                .as_ref()
                .map(|(_, o)| o.clone())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        self.pool.alloc_payload(&operands)
    }

    /// AtomicOp `id` reached host memory: the root complex completes it (see the
    /// module notes).
    #[cold]
    #[inline(never)]
    pub(crate) fn host_atomic(&mut self, id: u32, cx: &mut Context<'_, PackedEv>) {
        let t = self.pool.tlps[id as usize].clone();
        let (req, size) = as_read(&t);
        let host = self.rc.bdf;
        let rp = self.last_rx_func;
        let need = completer_bit(size).unwrap_or(0);
        let caps = self.pcie_dword(rp, pcie_reg::DEVCAP2);
        let what = name(t.atomic_kind(), size);
        // Why the root complex refuses it (None: poisoned operands, which leave the
        // target alone; PCIe Base Spec 2.7.2.2), or the physical address.
        let target = if t.poisoned {
            Err(None)
        } else if need == 0 || caps & need == 0 {
            Err(Some(format!("the root port completes no {what}")))
        } else if (MSI_RANGE.0..=MSI_RANGE.1).contains(&t.addr) {
            Err(Some("the MSI address range is not memory".to_string()))
        } else {
            self.dma_target(id, cx.now())
                .ok_or_else(|| Some("IOMMU fault".to_string()))
        };
        let p = match target {
            Ok(p) => p,
            Err(why) => {
                match why {
                    None => self.poisoned_received(rp, false, "AtomicOp", id, cx),
                    Some(why) => {
                        self.fault(
                            FaultKind::Atomic,
                            format!(
                                "root complex: {what} at {:#x} from {}: {why}: Unsupported Request",
                                t.addr, t.requester
                            ),
                        );
                        if let Some(f) = rp {
                            self.signal_error(f, AER_UNSUPPORTED, true, Some(id), cx);
                        }
                    }
                }
                let clean = Poison::Clean;
                self.send_completions(Origin::Host, host, &req, CplStatus::Ur, &[], clean, cx);
                return;
            }
        };
        let mut old = vec![0u8; size as usize];
        self.fabric.host_memory.read(p, &mut old);
        let payload = self.payload(id).to_vec();
        // The completion first: a poisoned target poisons it (the write clears it).
        let poison = if self.rc.poison_lines.is_empty() {
            Poison::Clean
        } else {
            Poison::HostLines(p)
        };
        self.send_completions(Origin::Host, host, &req, CplStatus::Sc, &old, poison, cx);
        if let Some(new) = result(t.atomic_kind(), t.addr, &old, &payload) {
            self.fabric.host_memory.write(p, &new);
            if !self.rc.poison_lines.is_empty() {
                self.host_written(p, size, false);
            }
            if self.cfg.llc_lines > 0 {
                self.llc_insert(t.addr / 64);
            }
            if self.cfg.log_writes {
                self.write_log.push((t.requester, t.addr, size as u32));
            }
        }
    }

    /// AtomicOp `id` reached BAR `bar` of `node` at `offset`: a device without a timed
    /// model (psmem) completes it on its memory when its Device Capabilities 2 advertise
    /// the size (`atomics = true`); otherwise Unsupported Request, logged by the device.
    #[cold]
    #[inline(never)]
    pub(crate) fn device_atomic(
        &mut self,
        (node, func, bar, offset): (u32, u16, u8, u64),
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let t = self.pool.tlps[id as usize].clone();
        let (req, size) = as_read(&t);
        let (me, origin) = self.completer_of(node, func);
        let caps = self.pcie_dword(self.fn_of(node, func), pcie_reg::DEVCAP2);
        if t.poisoned {
            // Poisoned operands: the target is left alone (PCIe Base Spec 2.7.2.2).
            let f = self.fn_of(node, func);
            self.poisoned_received(f, false, "AtomicOp", id, cx);
            self.send_completions(origin, me, &req, CplStatus::Ur, &[], Poison::Clean, cx);
            return;
        }
        // A device that advertises the size completes it on its memory, read and
        // written through its model in one event (nothing comes between).
        let completes = completer_bit(size).is_some_and(|b| caps & b != 0);
        let mut old = vec![0u8; size as usize];
        let payload = self.payload(id).to_vec();
        let kind = t.atomic_kind();
        let done = completes
            && self
                .call_ep_fn(node, func, cx, |m, cx| {
                    if m.mem_read(bar, offset, &mut old, cx) != ReadReply::Now {
                        return false;
                    }
                    if let Some(new) = result(kind, t.addr, &old, &payload) {
                        m.mem_write(bar, offset, &new, cx);
                    }
                    true
                })
                .unwrap_or(false);
        if done {
            self.send_completions(origin, me, &req, CplStatus::Sc, &old, Poison::Clean, cx);
            return;
        }
        let dev = self.nodes[node as usize].name.clone();
        self.fault(
            FaultKind::Atomic,
            format!(
                "{dev}: {} at {:#x} from {}: the device does not complete it: Unsupported Request",
                name(t.atomic_kind(), size),
                t.addr,
                t.requester
            ),
        );
        self.completer_ur(node, id, cx);
        self.send_completions(origin, me, &req, CplStatus::Ur, &[], Poison::Clean, cx);
    }

    /// AtomicOp `id` was about to leave through direction `d`, whose transmitting port
    /// has AtomicOp Egress Blocking set: Unsupported Request, AtomicOp Egress Blocked.
    #[cold]
    #[inline(never)]
    pub(crate) fn atomic_egress_blocked(
        &mut self,
        d: u16,
        id: u32,
        cx: &mut Context<'_, PackedEv>,
    ) {
        let t = &self.pool.tlps[id as usize];
        let size = operand_size(t.atomic_kind(), t.len as u64);
        let port = self.dirs[(d ^ 1) as usize].rx_func;
        if let Some(p) = port {
            let who = self.fabric.bdf(p);
            let t = &self.pool.tlps[id as usize];
            self.fault(
                FaultKind::Atomic,
                format!(
                    "{who}: {} at {:#x} from {}: AtomicOp Egress Blocking: Unsupported Request",
                    name(t.atomic_kind(), size),
                    t.addr,
                    t.requester
                ),
            );
        }
        self.refuse_at_egress(d, id, AER_UNCORR_ATOMIC_BLOCKED, cx);
    }
}

impl super::sim::FabricSim {
    /// Lets device `name` issue AtomicOps to host memory, as Linux's
    /// `pci_enable_atomic_ops_to_root(dev, cap_mask)` does: every switch port on the
    /// way must route AtomicOps (and a switch's upstream port must not block them at
    /// its egress), and the root port must complete every size in `sizes` (4 and 8:
    /// FetchAdd, Swap and CAS of that size; 16: 128-bit CAS). Then it sets AtomicOp
    /// Requester Enable in the device's Device Control 2. Errors name the port that
    /// stops it (the device is left as it was).
    ///
    /// ```
    /// # use pcielab_fabric::kinds::KindRegistry;
    /// # use pcielab_fabric::timed::{FabricSim, SimConfig};
    /// # use pcielab_fabric::topology::Topology;
    /// let t = "[[node]]\nname=\"rc\"\nkind=\"root-complex\"\natomics=false\n\
    ///     [[node]]\nname=\"ep\"\nkind=\"psmem\"\n[[link]]\nup=\"rc.0\"\ndown=\"ep\"\ngen=3\nwidth=4\n";
    /// let reg = KindRegistry::builtin();
    /// let topo = Topology::parse(t, "t.toml", &reg).unwrap();
    /// let mut sim = FabricSim::new(&topo, &reg, SimConfig::default()).unwrap();
    /// let e = sim.enable_atomic_ops_to_root("ep", &[8]).unwrap_err();
    /// assert!(e.contains("completes no 64-bit AtomicOps"), "{e}");
    /// ```
    pub fn enable_atomic_ops_to_root(&mut self, name: &str, sizes: &[u32]) -> Result<(), String> {
        let dev = self
            .bdf(name)
            .ok_or_else(|| format!("no device named {name:?}"))?;
        let fabric = &self.sim.world().fabric;
        let pcie = |bdf| {
            let f = fabric
                .function_at(bdf)
                .ok_or_else(|| format!("{bdf}: no such function"))?;
            let p = err_caps(fabric, f)
                .0
                .ok_or_else(|| format!("{bdf}: no PCI Express capability"))?;
            Ok::<_, String>((f, p))
        };
        let (f, p) = pcie(dev)?;
        let mut at = self.tree().get(dev).and_then(|n| n.parent);
        while let Some(bridge) = at {
            let (bf, bp) = pcie(bridge)?;
            let cs = &fabric.functions[bf.0 as usize].config;
            let cap2 = cs.read_u32(bp + pcie_reg::DEVCAP2);
            match fabric.functions[bf.0 as usize].role {
                Role::RootPort { .. } => {
                    for &s in sizes {
                        let Some(bit) = completer_bit(s as u64) else {
                            return Err(format!("AtomicOp size {s}: 4, 8 or 16 bytes"));
                        };
                        if cap2 & bit == 0 {
                            let what = if s == 16 {
                                "128-bit CAS".to_string()
                            } else {
                                format!("{}-bit AtomicOps", s * 8)
                            };
                            return Err(format!("root port {bridge} completes no {what}"));
                        }
                    }
                    break;
                }
                role => {
                    if cap2 & DEVCAP2_ATOMIC_ROUTING == 0 {
                        return Err(format!("{bridge} does not route AtomicOps"));
                    }
                    let ctl2 = cs.read_u16(bp + pcie_reg::DEVCTL2);
                    if role == Role::SwitchUpstream && ctl2 & DEVCTL2_ATOMIC_EGRESS_BLOCKING != 0 {
                        return Err(format!("switch upstream port {bridge} blocks AtomicOps"));
                    }
                }
            }
            at = self.tree().get(bridge).and_then(|n| n.parent);
        }
        let _ = f;
        let v = self.cfg_read(dev, p + pcie_reg::DEVCTL2);
        self.cfg_write(
            dev,
            p + pcie_reg::DEVCTL2,
            v | DEVCTL2_ATOMIC_REQUESTER as u32,
        );
        Ok(())
    }
}
