//! A human-readable decoding of a configuration-space dump: header and capabilities.
//!
//! ```
//! use pcielab_config::{decode::describe, Type1};
//! let cs = Type1::default().build().unwrap();
//! let text = describe(cs.bytes());
//! assert!(text.contains("Header type 1 (PCI-to-PCI bridge)"));
//! ```

use crate::caps::{id, pcie_reg, size_from_code, walk, PortType};
use crate::header::{reg, BridgeWindows};
use core::fmt::Write;

/// The name of a base class / subclass.
pub fn class_name(class_code: u32) -> &'static str {
    let (base, sub) = ((class_code >> 16) as u8, (class_code >> 8) as u8);
    match (base, sub) {
        (0x01, 0x08) => "Non-Volatile memory controller",
        (0x01, _) => "Mass storage controller",
        (0x02, 0x00) => "Ethernet controller",
        (0x02, _) => "Network controller",
        (0x03, _) => "Display controller",
        (0x04, _) => "Multimedia controller",
        (0x05, 0x00) => "RAM memory",
        (0x05, _) => "Memory controller",
        (0x06, 0x00) => "Host bridge",
        (0x06, 0x04) => "PCI bridge",
        (0x06, _) => "Bridge",
        (0x07, _) => "Communication controller",
        (0x08, _) => "System peripheral",
        (0x0c, _) => "Serial bus controller",
        (0x11, _) => "Signal processing controller",
        (0x12, _) => "Processing accelerators",
        (0xff, _) => "Unassigned class",
        _ => "Device",
    }
}

fn speed_name(code: u32) -> &'static str {
    match code {
        1 => "2.5GT/s",
        2 => "5GT/s",
        3 => "8GT/s",
        4 => "16GT/s",
        5 => "32GT/s",
        6 => "64GT/s",
        _ => "unknown",
    }
}

/// The ASPM states in support (Link Capabilities) or control (Link Control) bits:
/// L0s (1), L1 (2); `None` for neither.
fn aspm_states(bits: u32) -> Option<&'static str> {
    [None, Some("L0s"), Some("L1"), Some("L0s L1")][(bits & 3) as usize]
}

/// The exit latencies of the ASPM states Link Capabilities `lc` supports, in the
/// wording of the field's ranges: ", Exit Latency L0s <1us, L1 <4us".
fn exit_latencies(lc: u32) -> String {
    const L0S: [&str; 8] = [
        "<64ns",
        "<128ns",
        "<256ns",
        "<512ns",
        "<1us",
        "<2us",
        "<4us",
        "unlimited",
    ];
    const L1: [&str; 8] = [
        "<1us",
        "<2us",
        "<4us",
        "<8us",
        "<16us",
        "<32us",
        "<64us",
        "unlimited",
    ];
    let support = (lc >> 10) & 3;
    let mut parts = Vec::new();
    if support & 1 != 0 {
        parts.push(format!("L0s {}", L0S[((lc >> 12) & 7) as usize]));
    }
    if support & 2 != 0 {
        parts.push(format!("L1 {}", L1[((lc >> 15) & 7) as usize]));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(", Exit Latency {}", parts.join(", "))
    }
}

fn flag(b: bool) -> char {
    if b {
        '+'
    } else {
        '-'
    }
}

/// Decodes one function's dump (64, 256 or 4096 bytes) into text.
pub fn describe(bytes: &[u8]) -> String {
    let rd = |o: u16, n: usize| -> u32 {
        (0..n).fold(0u32, |v, i| {
            v | (bytes.get(o as usize + i).copied().unwrap_or(0) as u32) << (8 * i)
        })
    };
    let mut s = String::new();
    let ht = rd(reg::HEADER_TYPE, 1);
    let class = rd(reg::CLASS, 3);
    let _ = writeln!(
        s,
        "Vendor {:04x} Device {:04x} Rev {:02x} Class {:06x} ({})",
        rd(0, 2),
        rd(2, 2),
        rd(reg::REVISION, 1),
        class,
        class_name(class)
    );
    let kind = match ht & 0x7f {
        0 => "endpoint",
        1 => "PCI-to-PCI bridge",
        2 => "CardBus bridge",
        _ => "unknown",
    };
    let _ = writeln!(
        s,
        "Header type {} ({kind}){}",
        ht & 0x7f,
        if ht & 0x80 != 0 {
            ", multi-function"
        } else {
            ""
        }
    );
    let cmd = rd(reg::COMMAND, 2);
    let sta = rd(reg::STATUS, 2);
    let _ = writeln!(
        s,
        "Command {cmd:04x}: I/O{} Mem{} BusMaster{} SERR{} DisINTx{}",
        flag(cmd & 1 != 0),
        flag(cmd & 2 != 0),
        flag(cmd & 4 != 0),
        flag(cmd & 0x100 != 0),
        flag(cmd & 0x400 != 0)
    );
    let _ = writeln!(
        s,
        "Status {sta:04x}: CapList{} <TAbort{} <MAbort{} >SERR{} DetParErr{}",
        flag(sta & 0x10 != 0),
        flag(sta & 0x1000 != 0),
        flag(sta & 0x2000 != 0),
        flag(sta & 0x4000 != 0),
        flag(sta & 0x8000 != 0)
    );
    let nbars = match ht & 0x7f {
        0 => 6,
        1 => 2,
        _ => 0,
    };
    let mut i = 0;
    while i < nbars {
        let off = reg::BAR0 + 4 * i as u16;
        let lo = rd(off, 4);
        if lo & 1 == 1 {
            let _ = writeln!(s, "BAR{i}: I/O at {:x}", lo & !3);
            i += 1;
        } else if (lo >> 1) & 3 == 2 {
            let hi = rd(off + 4, 4);
            let _ = writeln!(
                s,
                "BAR{i}: Memory at {:x} (64-bit, {}prefetchable)",
                ((hi as u64) << 32) | (lo & !0xf) as u64,
                if lo & 8 != 0 { "" } else { "non-" }
            );
            i += 2;
        } else {
            if lo != 0 {
                let _ = writeln!(
                    s,
                    "BAR{i}: Memory at {:x} (32-bit, {}prefetchable)",
                    lo & !0xf,
                    if lo & 8 != 0 { "" } else { "non-" }
                );
            }
            i += 1;
        }
    }
    if ht & 0x7f == 1 {
        let _ = writeln!(
            s,
            "Bus: primary={:02x}, secondary={:02x}, subordinate={:02x}",
            rd(reg::PRIMARY_BUS, 1),
            rd(reg::SECONDARY_BUS, 1),
            rd(reg::SUBORDINATE_BUS, 1)
        );
        let mut cs = crate::ConfigSpace::new();
        for o in 0..0x40u16 {
            cs.hw_write(o, 1, rd(o, 1));
        }
        let w = BridgeWindows::read(&cs);
        let show = |r: Option<(u64, u64)>| match r {
            Some((b, l)) => format!("{b:x}-{l:x}"),
            None => "[disabled]".to_string(),
        };
        let _ = writeln!(
            s,
            "I/O behind bridge: {}",
            show(w.io.map(|(b, l)| (b as u64, l as u64)))
        );
        let _ = writeln!(s, "Memory behind bridge: {}", show(w.mem));
        let _ = writeln!(s, "Prefetchable memory behind bridge: {}", show(w.pref));
    }
    let pin = rd(reg::INT_PIN, 1);
    if pin != 0 {
        let _ = writeln!(
            s,
            "Interrupt: pin {}",
            (b'A' + (pin as u8 - 1).min(3)) as char
        );
    }
    let (found, err) = walk(bytes);
    for f in &found {
        let o = f.offset;
        if f.extended {
            let _ = writeln!(
                s,
                "Capabilities: [{o:03x} v{}] {}",
                f.version,
                id::ext_name(f.id)
            );
            describe_ext(&mut s, f.id, o, &rd);
        } else {
            let _ = writeln!(s, "Capabilities: [{o:02x}] {}", id::name(f.id as u8));
            describe_cap(&mut s, f.id as u8, o, &rd);
        }
    }
    if let Some(e) = err {
        let _ = writeln!(s, "Capabilities: <broken list: {e}>");
    }
    s
}

fn describe_cap(s: &mut String, cap: u8, o: u16, rd: &dyn Fn(u16, usize) -> u32) {
    match cap {
        id::PM => {
            let pmc = rd(o + 2, 2);
            let csr = rd(o + 4, 2);
            let _ = writeln!(
                s,
                "\tVersion {}, PowerState D{}, PME-Enable{} PME{}",
                pmc & 7,
                csr & 3,
                flag(csr & 0x100 != 0),
                flag(csr & 0x8000 != 0)
            );
        }
        id::MSI => {
            let ctl = rd(o + 2, 2);
            let a64 = ctl & 0x80 != 0;
            let addr = if a64 {
                (rd(o + 8, 4) as u64) << 32 | rd(o + 4, 4) as u64
            } else {
                rd(o + 4, 4) as u64
            };
            let data = rd(o + if a64 { 0xc } else { 8 }, 2);
            let _ = writeln!(
                s,
                "\tEnable{} Count={}/{} Maskable{} 64bit{} Address={addr:x} Data={data:04x}",
                flag(ctl & 1 != 0),
                1 << ((ctl >> 4) & 7),
                1 << ((ctl >> 1) & 7),
                flag(ctl & 0x100 != 0),
                flag(a64)
            );
        }
        id::MSIX => {
            let ctl = rd(o + 2, 2);
            let t = rd(o + 4, 4);
            let p = rd(o + 8, 4);
            let _ = writeln!(
                s,
                "\tEnable{} Count={} Masked{} Vector table: BAR={} offset={:08x} PBA: BAR={} offset={:08x}",
                flag(ctl & 0x8000 != 0),
                (ctl & 0x7ff) + 1,
                flag(ctl & 0x4000 != 0),
                t & 7,
                t & !7,
                p & 7,
                p & !7
            );
        }
        id::PCIE => {
            let caps = rd(o + pcie_reg::CAPS, 2);
            let t = ((caps >> 4) & 0xf) as u8;
            let name = PortType::from_raw(t).map_or("unknown type", |p| p.name());
            let _ = writeln!(s, "\tv{} {name}", caps & 0xf);
            let devcap = rd(o + pcie_reg::DEVCAP, 4);
            let devctl = rd(o + pcie_reg::DEVCTL, 2);
            let _ = writeln!(
                s,
                "\tDevCap: MaxPayload {} bytes, ExtTag{} FLReset{}",
                size_from_code((devcap & 7) as u8),
                flag(devcap & 0x20 != 0),
                flag(devcap & (1 << 28) != 0)
            );
            let _ = writeln!(
                s,
                "\tDevCtl: MaxPayload {} bytes, MaxReadReq {} bytes, RlxdOrd{} ExtTag{} NoSnoop{}",
                size_from_code(((devctl >> 5) & 7) as u8),
                size_from_code(((devctl >> 12) & 7) as u8),
                flag(devctl & 0x10 != 0),
                flag(devctl & 0x100 != 0),
                flag(devctl & 0x800 != 0)
            );
            if PortType::from_raw(t).is_some_and(|p| p.has_link()) {
                let lc = rd(o + pcie_reg::LNKCAP, 4);
                let ls = rd(o + pcie_reg::LNKSTA, 2);
                let _ = writeln!(
                    s,
                    "\tLnkCap: Port #{}, Speed {}, Width x{}, ASPM {}{}",
                    lc >> 24,
                    speed_name(lc & 0xf),
                    (lc >> 4) & 0x3f,
                    aspm_states(lc >> 10).unwrap_or("not supported"),
                    exit_latencies(lc)
                );
                let lctl = rd(o + pcie_reg::LNKCTL, 2);
                let ctl = aspm_states(lctl).map_or("Disabled".into(), |x| format!("{x} Enabled"));
                let _ = writeln!(s, "\tLnkCtl: ASPM {ctl}");
                let _ = writeln!(
                    s,
                    "\tLnkSta: Speed {}, Width x{}, DLActive{}",
                    speed_name(ls & 0xf),
                    (ls >> 4) & 0x3f,
                    flag(ls & 0x2000 != 0)
                );
            }
            if PortType::from_raw(t) == Some(PortType::RootPort) {
                let rc = rd(o + pcie_reg::RTCTL, 2);
                let rs = rd(o + pcie_reg::RTSTA, 4);
                let rcap = rd(o + pcie_reg::RTCAP, 2);
                let _ = writeln!(
                    s,
                    "\tRootCap: CRSVisible{}\n\tRootCtl: ErrCorrectable{} ErrNon-Fatal{} ErrFatal{} PMEIntEna{} CRSVisible{}",
                    flag(rcap & 1 != 0),
                    flag(rc & 1 != 0),
                    flag(rc & 2 != 0),
                    flag(rc & 4 != 0),
                    flag(rc & 8 != 0),
                    flag(rc & 16 != 0)
                );
                let _ = writeln!(
                    s,
                    "\tRootSta: PME ReqID {:04x}, PMEStatus{} PMEPending{}",
                    rs & 0xffff,
                    flag(rs & 0x1_0000 != 0),
                    flag(rs & 0x2_0000 != 0)
                );
            }
            if caps & 0x100 != 0 {
                describe_slot(s, o, rd);
            }
            let dc2 = rd(o + pcie_reg::DEVCAP2, 4);
            let _ = writeln!(
                s,
                "\tDevCap2: CTO ranges {:x}, ARIFwd{} AtomicOpsCap 32bit{} 64bit{} 128bitCAS{} LTR{} 10BitTagReq{} EETLPPrefix{}",
                dc2 & 0xf,
                flag(dc2 & 0x20 != 0),
                flag(dc2 & 0x80 != 0),
                flag(dc2 & 0x100 != 0),
                flag(dc2 & 0x200 != 0),
                flag(dc2 & 0x800 != 0),
                flag(dc2 & 0x20000 != 0),
                flag(dc2 & 0x20_0000 != 0)
            );
        }
        _ => {}
    }
}

/// Slot Capabilities, Control and Status with lspci's words.
fn describe_slot(s: &mut String, o: u16, rd: &dyn Fn(u16, usize) -> u32) {
    let sc = rd(o + pcie_reg::SLTCAP, 4);
    let ctl = rd(o + pcie_reg::SLTCTL, 2);
    let sta = rd(o + pcie_reg::SLTSTA, 2);
    let b = |v: u32, bit: u32| flag(v & (1 << bit) != 0);
    let indicator = |v: u32| ["Unknown", "On", "Blink", "Off"][(v & 3) as usize];
    let _ = writeln!(
        s,
        "\tSltCap: AttnBtn{} PwrCtrl{} MRL{} AttnInd{} PwrInd{} HotPlug{} Surprise{}",
        b(sc, 0),
        b(sc, 1),
        b(sc, 2),
        b(sc, 3),
        b(sc, 4),
        b(sc, 6),
        b(sc, 5)
    );
    let _ = writeln!(
        s,
        "\t\tSlot #{}, PowerLimit {}W; Interlock{} NoCompl{}",
        sc >> 19,
        (sc >> 7) & 0xff,
        b(sc, 17),
        b(sc, 18)
    );
    let _ = writeln!(
        s,
        "\tSltCtl: Enable: AttnBtn{} PwrFlt{} MRL{} PresDet{} CmdCplt{} HPIrq{} LinkChg{}",
        b(ctl, 0),
        b(ctl, 1),
        b(ctl, 2),
        b(ctl, 3),
        b(ctl, 4),
        b(ctl, 5),
        b(ctl, 12)
    );
    let _ = writeln!(
        s,
        "\t\tControl: AttnInd {}, PwrInd {}, Power{} Interlock{}",
        indicator(ctl >> 6),
        indicator(ctl >> 8),
        b(ctl, 10),
        b(ctl, 11)
    );
    let _ = writeln!(
        s,
        "\tSltSta: Status: AttnBtn{} PowerFlt{} MRL{} CmdCplt{} PresDet{} Interlock{}",
        b(sta, 0),
        b(sta, 1),
        b(sta, 5),
        b(sta, 4),
        b(sta, 6),
        b(sta, 7)
    );
    let _ = writeln!(
        s,
        "\t\tChanged: MRL{} PresDet{} LinkState{}",
        b(sta, 2),
        b(sta, 3),
        b(sta, 8)
    );
}

fn describe_ext(s: &mut String, cap: u16, o: u16, rd: &dyn Fn(u16, usize) -> u32) {
    match cap {
        id::EXT_AER => {
            let _ = writeln!(
                s,
                "\tUESta {:08x} UEMsk {:08x} UESvrt {:08x} CESta {:08x} CEMsk {:08x}",
                rd(o + 4, 4),
                rd(o + 8, 4),
                rd(o + 0xc, 4),
                rd(o + 0x10, 4),
                rd(o + 0x14, 4)
            );
            // As lspci words them: the first error's bit and its TLP's header.
            let cc = rd(o + 0x18, 4);
            let b = |bit: u32| flag(cc & (1 << bit) != 0);
            let _ = writeln!(
                s,
                "\tAERCap: First Error Pointer: {:02x}, ECRCGenCap{} ECRCGenEn{} ECRCChkCap{} ECRCChkEn{}\n\t\tMultHdrRecCap{} MultHdrRecEn{} TLPPfxPres{} HdrLogCap{}",
                cc & 0x1f,
                b(5),
                b(6),
                b(7),
                b(8),
                b(9),
                b(10),
                b(11),
                b(12)
            );
            let _ = writeln!(
                s,
                "\tHeaderLog: {:08x} {:08x} {:08x} {:08x}",
                rd(o + 0x1c, 4),
                rd(o + 0x20, 4),
                rd(o + 0x24, 4),
                rd(o + 0x28, 4)
            );
        }
        id::EXT_DSN => {
            let sn = (rd(o + 8, 4) as u64) << 32 | rd(o + 4, 4) as u64;
            let b = sn.to_be_bytes();
            let _ = writeln!(
                s,
                "\tSerial number: {}",
                b.iter()
                    .rev()
                    .map(|x| format!("{x:02x}"))
                    .collect::<Vec<_>>()
                    .join("-")
            );
        }
        id::EXT_SRIOV => {
            let _ = writeln!(
                s,
                "\tInitialVFs: {}, TotalVFs: {}, NumVFs: {}, VF offset: {}, stride: {}, Device ID: {:04x}",
                rd(o + 0xc, 2),
                rd(o + 0xe, 2),
                rd(o + 0x10, 2),
                rd(o + 0x14, 2),
                rd(o + 0x16, 2),
                rd(o + 0x1a, 2)
            );
        }
        id::EXT_ARI => {
            let _ = writeln!(s, "\tNext function: {}", (rd(o + 4, 2) >> 8) & 0xff);
        }
        id::EXT_PRI => {
            // As lspci words them.
            let ctl = rd(o + 4, 2);
            let sta = rd(o + 6, 2);
            let _ = writeln!(
                s,
                "\tPRICtl: Enable{} Reset{}",
                flag(ctl & 1 != 0),
                flag(ctl & 2 != 0)
            );
            let _ = writeln!(
                s,
                "\tPRISta: RF{} UPRGI{} Stopped{}",
                flag(sta & 1 != 0),
                flag(sta & 2 != 0),
                flag(sta & 0x100 != 0)
            );
            let _ = writeln!(
                s,
                "\tPage Request Capacity: {:08x}, Page Request Allocation: {:08x}",
                rd(o + 8, 4),
                rd(o + 0xc, 4)
            );
        }
        id::EXT_L1SS => {
            // As lspci words them.
            let cap = rd(o + 4, 4);
            let c1 = rd(o + 8, 4);
            let c2 = rd(o + 0xc, 4);
            let _ = writeln!(
                s,
                "\tL1SubCap: PCI-PM_L1.2{} PCI-PM_L1.1{} ASPM_L1.2{} ASPM_L1.1{} L1_PM_Substates{}",
                flag(cap & 1 != 0),
                flag(cap & 2 != 0),
                flag(cap & 4 != 0),
                flag(cap & 8 != 0),
                flag(cap & 0x10 != 0)
            );
            let _ = writeln!(
                s,
                "\t\t  PortCommonModeRestoreTime={}us PortTPowerOnTime={}us",
                (cap >> 8) & 0xff,
                crate::ext_caps::t_power_on_us((cap >> 16) & 3, (cap >> 19) & 0x1f)
            );
            let _ = writeln!(
                s,
                "\tL1SubCtl1: PCI-PM_L1.2{} PCI-PM_L1.1{} ASPM_L1.2{} ASPM_L1.1{}",
                flag(c1 & 1 != 0),
                flag(c1 & 2 != 0),
                flag(c1 & 4 != 0),
                flag(c1 & 8 != 0)
            );
            let threshold = ((c1 >> 16) & 0x3ff) as u64 * 32u64.pow((c1 >> 29).min(5));
            let _ = writeln!(
                s,
                "\t\t   T_CommonMode={}us LTR1.2_Threshold={}ns",
                (c1 >> 8) & 0xff,
                threshold
            );
            let _ = writeln!(
                s,
                "\tL1SubCtl2: T_PwrOn={}us",
                crate::ext_caps::t_power_on_us(c2 & 3, (c2 >> 3) & 0x1f)
            );
        }
        id::EXT_DPC => {
            // As lspci words them.
            let cap = rd(o + 4, 2);
            let ctl = rd(o + 6, 2);
            let sta = rd(o + 8, 2);
            let _ = writeln!(
                s,
                "\tDpcCap:\tINT Msg #{}, RPExt{} PoisonedTLP{} SwTrigger{} RP PIO Log {}, DL_ActiveErr{}",
                cap & 0x1f,
                flag(cap & 0x20 != 0),
                flag(cap & 0x40 != 0),
                flag(cap & 0x80 != 0),
                (cap >> 8) & 0xf,
                flag(cap & 0x1000 != 0)
            );
            let _ = writeln!(
                s,
                "\tDpcCtl:\tTrigger:{:x} Cmpl{} INT{} ErrCor{} PoisonedTLP{} SwTrigger{} DL_ActiveErr{}",
                ctl & 3,
                flag(ctl & 4 != 0),
                flag(ctl & 8 != 0),
                flag(ctl & 0x10 != 0),
                flag(ctl & 0x20 != 0),
                flag(ctl & 0x40 != 0),
                flag(ctl & 0x80 != 0)
            );
            let _ = writeln!(
                s,
                "\tDpcSta:\tTrigger{} Reason:{:02x} INT{} RPBusy{} TriggerExt:{:02x} RP PIO ErrPtr:{:02x}",
                flag(sta & 1 != 0),
                (sta >> 1) & 3,
                flag(sta & 8 != 0),
                flag(sta & 0x10 != 0),
                (sta >> 5) & 3,
                (sta >> 8) & 0x1f
            );
            let _ = writeln!(s, "\tSource:\t{:04x}", rd(o + 0xa, 2));
        }
        id::EXT_PASID => {
            // As lspci words them.
            let cap = rd(o + 4, 2);
            let ctl = rd(o + 6, 2);
            let _ = writeln!(
                s,
                "\tPASIDCap: Exec{} Priv{}, Max PASID Width: {:02x}",
                flag(cap & 2 != 0),
                flag(cap & 4 != 0),
                (cap >> 8) & 0x1f
            );
            let _ = writeln!(
                s,
                "\tPASIDCtl: Enable{} Exec{} Priv{}",
                flag(ctl & 1 != 0),
                flag(ctl & 2 != 0),
                flag(ctl & 4 != 0)
            );
        }
        id::EXT_ATS => {
            // As lspci words them.
            let _ = writeln!(
                s,
                "\tATSCap:\tInvalidate Queue Depth: {:02x}",
                rd(o + 4, 2) & 0x1f
            );
            let ctl = rd(o + 6, 2);
            let _ = writeln!(
                s,
                "\tATSCtl:\tEnable{}, Smallest Translation Unit: {:02x}",
                flag(ctl & 0x8000 != 0),
                ctl & 0x1f
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::{CapabilityList, PcieCap};
    use crate::Type0;
    use pcielab_wire::Generation;

    #[test]
    fn describes_pcie_link() {
        let mut cs = Type0::default().build().unwrap();
        let mut pcie = PcieCap::new(PortType::Endpoint);
        pcie.max_speed = Generation::Gen4;
        pcie.link = Some((Generation::Gen3, 4));
        CapabilityList::new().with(pcie).install(&mut cs).unwrap();
        let t = describe(cs.bytes());
        assert!(t.contains("Capabilities: [40] PCI Express"), "{t}");
        assert!(
            t.contains("LnkCap: Port #0, Speed 16GT/s, Width x16, ASPM not supported\n"),
            "{t}"
        );
        assert!(t.contains("LnkCtl: ASPM Disabled"), "{t}");
        assert!(t.contains("LnkSta: Speed 8GT/s, Width x4"), "{t}");
        assert!(t.contains("MaxReadReq 512 bytes"), "{t}");
    }

    #[test]
    fn describes_aspm() {
        let mut cs = Type0::default().build().unwrap();
        let mut pcie = PcieCap::new(PortType::Endpoint);
        pcie.aspm = 3;
        pcie.l0s_exit = 5;
        pcie.l1_exit = 2;
        let list = CapabilityList::new().with(pcie);
        list.install(&mut cs).unwrap();
        let t = describe(cs.bytes());
        assert!(
            t.contains("Width x16, ASPM L0s L1, Exit Latency L0s <2us, L1 <4us\n"),
            "{t}"
        );
        // Link Control sits 0x10 into the capability (at 0x40 here).
        cs.write_u16(0x50, 2);
        assert!(describe(cs.bytes()).contains("LnkCtl: ASPM L1 Enabled"));
        pcie.aspm = 2;
        let mut cs = Type0::default().build().unwrap();
        CapabilityList::new().with(pcie).install(&mut cs).unwrap();
        let t = describe(cs.bytes());
        assert!(t.contains("ASPM L1, Exit Latency L1 <4us\n"), "{t}");
    }

    #[test]
    fn describes_ats() {
        use crate::ext_caps::AtsCap;
        let mut cs = Type0::default().build().unwrap();
        let placed = CapabilityList::new()
            .with_ext(AtsCap {
                invalidate_queue_depth: 5,
            })
            .install(&mut cs)
            .unwrap();
        let t = describe(cs.bytes());
        assert!(t.contains("Address Translation Services"), "{t}");
        assert!(t.contains("\tATSCap:\tInvalidate Queue Depth: 05\n"), "{t}");
        assert!(
            t.contains("\tATSCtl:\tEnable-, Smallest Translation Unit: 00\n"),
            "{t}"
        );
        cs.write_u16(placed[0].offset + 6, 0x8003);
        let t = describe(cs.bytes());
        assert!(
            t.contains("\tATSCtl:\tEnable+, Smallest Translation Unit: 03\n"),
            "{t}"
        );
    }

    #[test]
    fn broken_list_is_reported_not_panicked() {
        let mut b = vec![0u8; 256];
        b[6] = 0x10;
        b[0x34] = 0x40;
        b[0x40] = 0x05;
        b[0x41] = 0x40; // points to itself
        let t = describe(&b);
        assert!(t.contains("broken list"), "{t}");
        // Truncated input does not panic either.
        let _ = describe(&b[..10]);
    }
}
