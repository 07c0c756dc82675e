//! The length × offset sweep through real TLP bytes: split a DMA read into MRds, emit and
//! parse each, let a completer split its completions at RCB/MPS, emit and parse those,
//! check each against the receiver rules, and reassemble. Writes go the same way.

use pcielab_wire::dma::{
    completions, split_read, split_write, CplPolicy, Reassembler, SplitPolicy,
};
use pcielab_wire::tlp::check::{check_rx, RxRules};
use pcielab_wire::tlp::{chunk_payload, TlpHeader, TlpRepr};
use pcielab_wire::{Bdf, Tag};

fn lengths() -> impl Iterator<Item = u64> {
    (1..=31).chain([1024])
}

fn offsets() -> impl Iterator<Item = u64> {
    (0..=7).chain(4088..=4095)
}

#[test]
fn read_sweep_through_tlp_bytes() {
    let (host, dev) = (Bdf::from_raw(0x0000), Bdf::from_raw(0x0300));
    let memory: Vec<u8> = (0..3 * 4096u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for (mrrs, mps, rcb) in [(128, 128, 64), (512, 256, 128), (4096, 512, 64)] {
        let rules = RxRules {
            mps,
            ..RxRules::default()
        };
        for len in lengths() {
            for off in offsets() {
                let addr = 4096 + off;
                let mut dest = vec![0u8; len as usize];
                let mut rx = Reassembler::new(dev, 256).unwrap();
                for (i, chunk) in split_read(addr, len, mrrs as u32, SplitPolicy::Aligned)
                    .unwrap()
                    .enumerate()
                {
                    let tag = Tag::new(i as u16).unwrap();
                    let mrd = TlpRepr::mem_read_chunk(dev, tag, &chunk).to_vec().unwrap();
                    check_rx(&mrd, &rules)
                        .unwrap_or_else(|e| panic!("MRd len {len} off {off}: {e}"));
                    let req = TlpRepr::parse_bytes(&mrd).unwrap();
                    let TlpHeader::Mem(m) = req.header else {
                        panic!("not a memory request")
                    };
                    rx.issue_chunk(tag, &chunk, Some(host)).unwrap();
                    // The completer recovers the byte range from the MRd header alone.
                    let first = m.first_be.first().unwrap_or(0) as u64;
                    let last_pad = if m.read_len_dw == 1 {
                        3 - m.first_be.last().unwrap_or(3) as u64
                    } else {
                        3 - m.last_be.last().unwrap_or(3) as u64
                    };
                    let start = m.address + first;
                    let nbytes = m.read_len_dw as u64 * 4 - first - last_pad;
                    assert_eq!((start, nbytes as u32), (chunk.addr, chunk.len));
                    let policy = if (len + off + i as u64) % 2 == 0 {
                        CplPolicy::Maximal
                    } else {
                        CplPolicy::RcbChunks
                    };
                    for c in completions(start, nbytes as u32, rcb, mps as u32, policy).unwrap() {
                        let base = (start & !3) as usize;
                        let data = &memory[base..][c.payload_range()];
                        let cpl = TlpRepr::completion_chunk(
                            host,
                            req.requester_id(),
                            req.tag(),
                            &c,
                            data,
                        )
                        .unwrap();
                        let bytes = cpl.to_vec().unwrap();
                        check_rx(&bytes, &rules).unwrap();
                        let info = TlpRepr::parse_bytes(&bytes).unwrap().cpl_info().unwrap();
                        rx.accept(&info, &mut dest)
                            .unwrap_or_else(|e| panic!("len {len} off {off}: {e}"));
                    }
                }
                assert_eq!(rx.outstanding(), 0);
                assert_eq!(
                    dest,
                    memory[addr as usize..(addr + len) as usize],
                    "len {len} off {off}"
                );
            }
        }
    }
}

#[test]
fn write_sweep_through_tlp_bytes() {
    let dev = Bdf::from_raw(0x0300);
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
    for mps in [128u16, 256, 512] {
        let rules = RxRules {
            mps,
            ..RxRules::default()
        };
        for len in lengths() {
            for off in offsets() {
                let addr = 0x1_0000_0000 + 4096 + off;
                let mut memory = vec![0u8; 3 * 4096];
                let mut scratch = [0u8; 4096];
                for chunk in split_write(addr, len, mps as u32, SplitPolicy::Aligned).unwrap() {
                    let n = chunk_payload(&chunk, &src, &mut scratch).unwrap();
                    let bytes =
                        TlpRepr::mem_write_chunk(dev, Tag::new(0).unwrap(), &chunk, &scratch[..n])
                            .unwrap()
                            .to_vec()
                            .unwrap();
                    check_rx(&bytes, &rules)
                        .unwrap_or_else(|e| panic!("MWr len {len} off {off}: {e}"));
                    // The receiver writes the enabled bytes only.
                    let t = TlpRepr::parse_bytes(&bytes).unwrap();
                    let TlpHeader::Mem(m) = t.header else {
                        panic!()
                    };
                    let ndw = t.payload.len() / 4;
                    for (i, b) in t.payload.iter().enumerate() {
                        let dw = i / 4;
                        let be = if dw == 0 {
                            m.first_be
                        } else if dw == ndw - 1 {
                            m.last_be
                        } else {
                            pcielab_wire::ByteEnables::ALL
                        };
                        if be.bits() >> (i % 4) & 1 == 1 {
                            memory[(m.address - 0x1_0000_0000) as usize + i] = *b;
                        }
                    }
                }
                let lo = (addr - 0x1_0000_0000) as usize;
                assert_eq!(
                    &memory[lo..lo + len as usize],
                    &src[..len as usize],
                    "len {len} off {off}"
                );
                assert!(
                    memory[..lo].iter().all(|&b| b == 0)
                        && memory[lo + len as usize..].iter().all(|&b| b == 0)
                );
            }
        }
    }
}
