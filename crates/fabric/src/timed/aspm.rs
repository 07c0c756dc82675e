//! Active State Power Management (PCIe Base Spec 5.4.1): L0s per transmitter, L1 per
//! link.
//!
//! ```text
//!   transmitter idle ≥ aspm_l0s_entry ──► L0s ──(something to send)──► L0 after
//!                                                   EIEOS + N_FTS × FTS + SDS (Gen3–5)
//!                                                   or N_FTS × FTS + SKP (Gen1/2)
//!   both directions idle ≥ aspm_l1_entry ──► L1 ──(either side sends)──► L0 after
//!   (above a switch: and every link below    aspm_l1_exit, both directions (+ T_POWER_ON
//!    the switch in L1)                        + Common_Mode_Restore_Time from L1.2)
//! ```
//!
//! The states are evaluated lazily: whether a direction is in L0s or its link in L1 is
//! a function of how long the wires have been idle, so it is computed only when a
//! transmission is about to start (and for the counters). Entering a state schedules no
//! event; an idle link costs nothing, and a busy one pays one test of a flag. The
//! entry handshakes (EIOS, PM_Active_State_Request_L1 and PM_Request_Ack) are not on
//! the wire or in the trace: their time is part of the entry idle time.
//!
//! What enables a state is the ASPM Control field of Link Control, masked by the ASPM
//! Support of Link Capabilities:
//! * L0s for a direction when the port that transmits on it enables L0s (Flit mode,
//!   Gen6, has no L0s);
//! * L1 for the link when both of its ports enable L1.
//!
//! A device's function 0 governs it (the rule for ARI devices; a non-ARI multi-function
//! device would take what all its functions enable). With L0s enabled on the other
//! direction, a transmitter's replay timeout grows by that direction's L0s exit time,
//! the spec formula's RxL0sAdjustment: an ACK may have to wake its wire first.
//! The periodic UpdateFC (`fc_update_period`) is deferred while its direction is in a
//! low-power state, so an idle link stays asleep.

use super::engine::Engine;
use crate::functional::FnId;
use pcielab_config::caps::{self, l0s_exit_code, l1_exit_code, pcie_reg, ASPM_L0S, ASPM_L1};
use pcielab_config::ext_caps::{t_power_on_code, t_power_on_us, L1SS_ASPM_L11, L1SS_ASPM_L12};
use pcielab_sim::SimDuration;
use pcielab_wire::Generation;

/// Default [`SimConfig::aspm_l0s_entry`](super::SimConfig::aspm_l0s_entry): the spec's
/// upper bound.
pub(crate) const DEFAULT_L0S_ENTRY: SimDuration = SimDuration::from_us(7);
/// Default [`SimConfig::aspm_l1_entry`](super::SimConfig::aspm_l1_entry).
pub(crate) const DEFAULT_L1_ENTRY: SimDuration = SimDuration::from_us(8);
/// Default [`SimConfig::aspm_l1_propagation`](super::SimConfig::aspm_l1_propagation):
/// the spec's bound.
pub(crate) const DEFAULT_L1_PROPAGATION: SimDuration = SimDuration::from_us(1);

/// Where a direction stands at some time: since when its transmitter is in L0s, and
/// since when its link is in L1 (picoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LowPower {
    pub l0s: Option<u64>,
    pub l1: Option<u64>,
}

impl LowPower {
    pub(crate) fn any(&self) -> bool {
        self.l0s.is_some() || self.l1.is_some()
    }
}

/// The PCI Express capability's offset in function `f`'s configuration space.
pub(crate) fn pcie_cap(fabric: &crate::functional::Fabric, f: FnId) -> Option<u16> {
    super::regs::std_cap(fabric, f, caps::id::PCIE)
}

impl Engine {
    /// When the last bit sent either way on the link of `d` arrived (or the link's
    /// wires are free again, whichever is later).
    fn link_idle_since(&self, d: usize) -> u64 {
        let (a, b) = (&self.dirs[d], &self.dirs[d ^ 1]);
        a.free_at_ps
            .max(a.last_arrive_ps)
            .max(b.free_at_ps)
            .max(b.last_arrive_ps)
    }

    /// When the link of `d` enters L1 as things stand (ps), or None if it cannot: after
    /// its idle time, and, above a switch, not before every link below the switch is
    /// in L1 (a switch's upstream port requests L1 only then; a link that is down
    /// counts as asleep).
    fn l1_entry_at(&self, d: usize) -> Option<u64> {
        if self.dirs[d].aspm & ASPM_L1 == 0 {
            return None;
        }
        let mut at = self.link_idle_since(d) + self.cfg.aspm_l1_entry.as_ps();
        let below = self.dirs[d & !1].to;
        if matches!(
            self.nodes[below as usize].kind,
            super::node::state::NodeKind::Switch
        ) {
            for c in (0..self.dirs.len()).step_by(2) {
                if self.dirs[c].from == below && !self.dirs[c].down {
                    at = at.max(self.l1_entry_at(c)?);
                }
            }
        }
        Some(at)
    }

    /// The low-power states of direction `d` at `now` (ps).
    pub(crate) fn low_power(&self, d: usize, now: u64) -> LowPower {
        let dir = &self.dirs[d];
        let l1 = self.l1_entry_at(d).filter(|&at| at <= now);
        let l0s = if dir.aspm & ASPM_L0S != 0 {
            let at = dir.free_at_ps + self.cfg.aspm_l0s_entry.as_ps();
            (at <= now && l1.map_or(true, |l| at < l)).then_some(at)
        } else {
            None
        };
        LowPower { l0s, l1 }
    }

    /// Direction `d` is about to transmit at `now`: if it is in L0s, or its link in
    /// L1, the state ends now (counted) and the wire is held for the exit latency.
    #[cold]
    #[inline(never)]
    pub(crate) fn aspm_wake(&mut self, d: u16, now: u64) {
        let di = d as usize;
        let st = self.low_power(di, now);
        if st.l1.is_some() {
            self.l1_exit(di, now);
        } else if let Some(l0s_at) = st.l0s {
            let dir = &mut self.dirs[di];
            dir.counters.l0s_entries += 1;
            dir.counters.l0s_ps += now - l0s_at;
            let until = now + dir.l0s_exit_ps;
            self.hold_wire(di, until);
        }
    }

    /// The link of direction `d` leaves L1, beginning at `now` (it is in L1 then):
    /// Recovery brings both directions back after `aspm_l1_exit`. Below a switch, the
    /// switch begins the exit of its upstream link `aspm_l1_propagation` later if that
    /// link is in L1 then (and so on up the tree).
    fn l1_exit(&mut self, di: usize, now: u64) {
        // The links whose exits this one starts, decided before any of them wakes (a
        // switch's upstream link sleeps only while every link below it does): this
        // link, then through each switch above it the upstream link, if asleep when
        // the exit reaches it.
        let mut chain = Vec::new();
        let (mut d, mut t) = (di, now);
        loop {
            let (st, other) = (self.low_power(d, t), self.low_power(d ^ 1, t));
            let Some(l1_at) = st.l1 else {
                break;
            };
            chain.push((d, t, l1_at, [st, other]));
            let below_switch = [d, d ^ 1].into_iter().find(|&x| {
                self.dirs[x].rx_func.is_some_and(|f| {
                    matches!(
                        self.fabric.functions[f.0 as usize].role,
                        crate::functional::Role::SwitchDownstream { .. }
                    )
                })
            });
            let Some(up) = below_switch.and_then(|x| self.up_dir(self.dirs[x].to)) else {
                break;
            };
            d = up as usize;
            t += self.cfg.aspm_l1_propagation.as_ps();
        }
        for (d, t, l1_at, states) in chain {
            for (x, s) in [(d, states[0]), (d ^ 1, states[1])] {
                let c = &mut self.dirs[x].counters;
                if let Some(l0s_at) = s.l0s {
                    c.l0s_entries += 1;
                    c.l0s_ps += l1_at - l0s_at;
                }
                c.l1_entries += 1;
                c.l1_ps += t - l1_at;
            }
            let mut until = t + self.cfg.aspm_l1_exit.as_ps();
            if let Some(extra) = self.l12_exit_extra(d) {
                until += extra;
                for x in [d, d ^ 1] {
                    self.dirs[x].counters.l1_2_exits += 1;
                }
            }
            self.hold_wire(d, until);
            self.hold_wire(d ^ 1, until);
        }
    }

    /// If the link of `d` sleeps in L1.2 while in L1 (both ends enable ASPM L1.2 and
    /// the latency the device below last reported over it, the more restrictive of
    /// snoop and no-snoop, is at least LTR_L1.2_THRESHOLD; no report is no
    /// requirement): the extra time its exit takes (T_POWER_ON +
    /// Common_Mode_Restore_Time).
    fn l12_exit_extra(&self, d: usize) -> Option<u64> {
        let down = d & !1;
        let (extra, threshold_ns) = self.dirs[down].l12?;
        let tolerated = self
            .ltr_link
            .get(&((down | 1) as u32))
            .map_or(u64::MAX, |&(s, n)| {
                let f = |v| super::ltr::ltr_ns(v).unwrap_or(u64::MAX);
                f(s).min(f(n))
            });
        (tolerated >= threshold_ns).then_some(extra)
    }

    /// The L1.2 parameters of a link whose ports are `up` and `down` (the
    /// downstream port above it and the device's upstream port), if both enable ASPM
    /// L1.2: the downstream port's programmed T_POWER_ON + Common_Mode_Restore_Time
    /// (ps) and LTR_L1.2_THRESHOLD (ns).
    fn l12_params(&self, up: FnId, down: FnId) -> Option<(u64, u64)> {
        let reg = |f: FnId, off: u16| {
            let at = super::ats::ext_cap(self, f, caps::id::EXT_L1SS)?;
            Some(
                self.fabric.functions[f.0 as usize]
                    .config
                    .read_u32(at + off),
            )
        };
        let (c1, c2) = (reg(up, 8)?, reg(up, 0xc)?);
        if c1 & L1SS_ASPM_L12 == 0 || reg(down, 8)? & L1SS_ASPM_L12 == 0 {
            return None;
        }
        let t_power_on = t_power_on_us(c2 & 3, (c2 >> 3) & 0x1f) as u64;
        let cmrt = ((c1 >> 8) & 0xff) as u64;
        let threshold = ((c1 >> 16) & 0x3ff) as u64 * 32u64.pow((c1 >> 29).min(5));
        Some(((t_power_on + cmrt) * 1_000_000, threshold))
    }

    /// Linux's L1 PM Substates programming for the link of downward direction `d`
    /// (both ports have the capability): T_POWER_ON and Common_Mode_Restore_Time the
    /// larger of the two ends', LTR_L1.2_THRESHOLD = 2 + 4 µs + both, then ASPM L1.1
    /// and L1.2 enabled at both ends.
    fn program_l1ss(&mut self, up: FnId, down: FnId) {
        let at = |e: &Self, f: FnId| super::ats::ext_cap(e, f, caps::id::EXT_L1SS);
        let (Some(au), Some(ad)) = (at(self, up), at(self, down)) else {
            return;
        };
        let cap =
            |e: &Self, f: FnId, a: u16| e.fabric.functions[f.0 as usize].config.read_u32(a + 4);
        let (cu, cd) = (cap(self, up, au), cap(self, down, ad));
        let t_on = |c: u32| t_power_on_us((c >> 16) & 3, (c >> 19) & 0x1f);
        let t_power_on = t_on(cu).max(t_on(cd));
        let cmrt = ((cu >> 8) & 0xff).max((cd >> 8) & 0xff);
        let (scale, value) = t_power_on_code(t_power_on);
        let threshold_ns = (2 + 4 + cmrt + t_power_on) as u64 * 1000;
        let thr = super::ltr::ltr_value(Some(threshold_ns)) as u32;
        let (thr_scale, thr_value) = ((thr >> 10) & 7, thr & 0x3ff);
        let ctl1 = L1SS_ASPM_L11 | L1SS_ASPM_L12 | thr_value << 16 | thr_scale << 29;
        for (f, a, cm) in [(up, au, cmrt), (down, ad, 0)] {
            let cs = &mut self.fabric.functions[f.0 as usize].config;
            cs.write_u32(a + 0xc, scale | value << 3);
            cs.write_u32(a + 8, ctl1 | cm << 8);
        }
    }

    /// The wire of `d` carries nothing before `ps`.
    fn hold_wire(&mut self, d: usize, ps: u64) {
        let t = &mut self.dirs[d];
        let u = t.timing.ps_to_units(ps);
        if u > t.free_at {
            t.free_at = u;
            t.free_at_ps = t.timing.units_to_ps_ceil(u);
        }
    }

    /// The ASPM states port function `f` enables (ASPM Control of Link Control, masked
    /// by the ASPM Support of Link Capabilities).
    fn port_aspm(&self, f: FnId) -> u8 {
        let Some(o) = pcie_cap(&self.fabric, f) else {
            return 0;
        };
        let cs = &self.fabric.functions[f.0 as usize].config;
        cs.read_u16(o + pcie_reg::LNKCTL) as u8 & self.port_support(f)
    }

    /// The ASPM states port function `f` supports (Link Capabilities; 0 without one).
    fn port_support(&self, f: FnId) -> u8 {
        pcie_cap(&self.fabric, f).map_or(0, |o| {
            let cs = &self.fabric.functions[f.0 as usize].config;
            (cs.read_u32(o + pcie_reg::LNKCAP) >> 10) as u8 & 3
        })
    }

    /// Re-reads what every link's ports enable: which directions may enter L0s and
    /// which links L1, and the replay timeouts (with their RxL0sAdjustment).
    pub(crate) fn refresh_aspm(&mut self) {
        for d in 0..self.dirs.len() {
            let tx = self.dirs[d ^ 1].rx_func.map_or(0, |f| self.port_aspm(f));
            let rx = self.dirs[d].rx_func.map_or(0, |f| self.port_aspm(f));
            let dir = &mut self.dirs[d];
            let mut bits = 0;
            if tx & ASPM_L0S != 0 && dir.timing.gen != Generation::Gen6 {
                bits |= ASPM_L0S;
            }
            if tx & rx & ASPM_L1 != 0 {
                bits |= ASPM_L1;
            }
            dir.aspm = bits;
            dir.l0s_exit_ps = dir.timing.l0s_exit_ps(self.cfg.n_fts);
        }
        for d in (0..self.dirs.len()).step_by(2) {
            let l12 = match (self.dirs[d | 1].rx_func, self.dirs[d].rx_func) {
                (Some(up), Some(down)) if self.dirs[d].aspm & ASPM_L1 != 0 => {
                    self.l12_params(up, down)
                }
                _ => None,
            };
            self.dirs[d].l12 = l12;
        }
        for d in 0..self.dirs.len() {
            let rev = &self.dirs[d ^ 1];
            let adjust = if rev.aspm & ASPM_L0S != 0 {
                rev.l0s_exit_ps
            } else {
                0
            };
            let dir = &mut self.dirs[d];
            let ps = dir.timing.replay_timeout_ps(self.cfg.mps) + adjust;
            dir.replay.set_timeout(SimDuration::from_ps(ps));
        }
    }

    /// True if `f` is a port of a link (its ASPM Control matters).
    pub(crate) fn is_link_port(&self, f: FnId) -> bool {
        self.dirs.iter().any(|x| x.rx_func == Some(f))
    }

    /// At start: every link's ports advertise the exit latencies this configuration
    /// gives them (Link Capabilities), and the host enables `cfg.aspm` where both
    /// ends support it.
    pub(crate) fn init_aspm(&mut self) {
        let l1 = l1_exit_code(self.cfg.aspm_l1_exit.as_ps()) as u32;
        for d in (0..self.dirs.len()).step_by(2) {
            let l0s = l0s_exit_code(self.dirs[d].timing.l0s_exit_ps(self.cfg.n_fts)) as u32;
            let ports = [self.dirs[d].rx_func, self.dirs[d ^ 1].rx_func];
            for f in ports.into_iter().flatten() {
                if let Some(o) = pcie_cap(&self.fabric, f) {
                    let cs = &mut self.fabric.functions[f.0 as usize].config;
                    cs.hw_update(o + pcie_reg::LNKCAP, 4, 0x3f000, l0s << 12 | l1 << 15);
                }
            }
            let want = self.cfg.aspm & 3;
            if want == 0 {
                continue;
            }
            let support = |f: Option<FnId>| f.map_or(0, |f| self.port_support(f));
            let both = support(ports[0]) & support(ports[1]) & want;
            for f in ports.into_iter().flatten() {
                if let Some(o) = pcie_cap(&self.fabric, f) {
                    let cs = &mut self.fabric.functions[f.0 as usize].config;
                    let v = cs.read_u16(o + pcie_reg::LNKCTL);
                    cs.write_u16(o + pcie_reg::LNKCTL, (v & !3) | both as u16);
                }
            }
            if self.cfg.aspm_l1ss && both & ASPM_L1 != 0 {
                if let [Some(down), Some(up)] = ports {
                    self.program_l1ss(up, down);
                }
            }
        }
        self.refresh_aspm();
    }
}
