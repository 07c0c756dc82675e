//! Any datagram on any port, as the software adapter and the device library see it: the
//! NetTLP header, lenient TLP parsing, messaging and configuration packets, the CplD and
//! MWr extents, and completion matching never panic; a parsed TLP re-emits to the bytes
//! it was parsed from (after the leniency fix-ups); the adapter's exact parse accepts a
//! subset of the lenient one and pads only LibTLP's short 1-DW write; adapter command
//! packets (0x5002) round-trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pcielab_nettlp::frame::{self, CfgPacket, CmdPacket, MsgRequest, NetTlpHeader, HEADER_LEN};
use pcielab_nettlp::handler::read_extent;
use pcielab_wire::dma::Reassembler;
use pcielab_wire::tlp::{TlpHeader, TlpRepr};
use pcielab_wire::Bdf;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let port = u16::from_be_bytes([data[0], data[1]]);
    let d = &data[2..];
    let _ = frame::classify_port(port);
    let _ = MsgRequest::parse(d);
    if let Ok(p) = CfgPacket::parse(d) {
        assert_eq!(CfgPacket::parse(&p.to_bytes()).ok(), Some(p));
    }
    let _ = frame::decode_msix_table(d);
    if let Ok(c) = CmdPacket::parse(d) {
        assert_eq!(CmdPacket::parse(&c.to_bytes()).ok(), Some(c));
    }
    let _ = NetTlpHeader::parse(d);
    if d.len() < HEADER_LEN {
        return;
    }
    let mut scratch = Vec::new();
    let tlp_bytes = &d[HEADER_LEN..];
    let mut exact_scratch = Vec::new();
    if let Ok((t, fix)) = frame::parse_tlp_exact(tlp_bytes, &mut exact_scratch) {
        assert_eq!(fix.trailing, 0, "exact parse leaves no trailing bytes");
        if fix.padded > 0 {
            // Only LibTLP's 1-DW MWr of 3 bytes (First BE bit 3 clear) is completed.
            assert!(fix.padded == 1 && t.payload.len() == 4, "{fix:?}");
        }
        let mut s2 = Vec::new();
        assert!(frame::parse_tlp_lenient(tlp_bytes, &mut s2).is_ok());
    }
    if let Ok((tlp, fix)) = frame::parse_tlp_lenient(tlp_bytes, &mut scratch) {
        if let TlpHeader::Mem(m) = tlp.header {
            let len_dw = if tlp.payload.is_empty() {
                m.read_len_dw as u32
            } else {
                (tlp.payload.len() / 4) as u32
            };
            let (lo, n) = read_extent(m.first_be, m.last_be, len_dw.max(1));
            assert!(lo + n <= len_dw.max(1) * 4);
        }
        if let Some(info) = tlp.cpl_info() {
            let mut rx = Reassembler::new(Bdf::from_raw(0x1b00), 256).expect("capacity");
            let _ = rx.issue(info.tag, 0x1000, 64, 0, None);
            let mut dest = [0u8; 64];
            let _ = rx.accept(&info, &mut dest);
        }
        if fix.padded == 0 {
            if let Ok(v) = tlp.to_vec() {
                let _ = TlpRepr::parse_bytes(&v).expect("re-emitted TLP parses");
            }
        }
    }
});
