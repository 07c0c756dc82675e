//! What switches keep (below the engine): the PME_Turn_Off handshakes they wait on, the
//! LTR values their ports received and reported, and their ports' hot-plug interrupt
//! conditions.

use crate::inthash::IntMap;
use std::collections::HashMap;

/// What switches keep: PME_Turn_Off handshakes, LTR values of their ports, hot-plug
/// interrupt conditions.
#[derive(Debug)]
pub(crate) struct Switches {
    /// Per switch node that forwarded PME_Turn_Off: the directions (upstream, from its
    /// downstream ports) whose PME_TO_Ack it still waits for.
    pub(crate) turn_off_wait: IntMap<u32, Vec<u16>>,
    /// Per switch downstream port (function index): its hot-plug interrupt condition
    /// as last evaluated.
    pub(crate) hotplug_irq: IntMap<u32, bool>,
    /// Per (switch node, upward direction of a downstream port's link): the last LTR
    /// values received there; per switch: the values it last reported.
    pub(crate) ltr_ports: HashMap<(u32, u32), (u16, u16)>,
    pub(crate) ltr_sent: IntMap<u32, (u16, u16)>,
}
