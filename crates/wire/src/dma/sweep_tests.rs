//! The length × offset sweep and property tests: split → complete → reassemble, with
//! every request and completion checked against the spec's rules by code written
//! independently of the code under test (byte-by-byte enumeration instead of masks).

use super::*;
use crate::types::{Bdf, Tag};
use proptest::prelude::*;

const ME: Bdf = Bdf::from_raw(0x0100);
const HOST: Bdf = Bdf::from_raw(0x0000);
const GUARD: usize = 8;

/// Host memory: a byte that depends on every bit of its address.
fn mem(a: u64) -> u8 {
    let x = a.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 56) as u8) ^ (a as u8) ^ ((a >> 32) as u8)
}

/// First/Last BE and DW count found by walking the bytes one at a time.
fn oracle_shape(addr: u64, len: u32) -> (u16, u8, u8) {
    let first_dw = addr / 4;
    let mut last_dw = first_dw;
    for i in 0..len as u64 {
        last_dw = (addr + i) / 4;
    }
    let (mut first_be, mut last_be) = (0u8, 0u8);
    for i in 0..len as u64 {
        let b = addr + i;
        if b / 4 == first_dw {
            first_be |= 1 << (b % 4);
        }
        if b / 4 == last_dw {
            last_be |= 1 << (b % 4);
        }
    }
    let n = (last_dw - first_dw + 1) as u16;
    if n == 1 {
        last_be = 0;
    }
    (n, first_be, last_be)
}

/// Rules every memory request must obey; `max` is MRRS or MPS.
fn check_request(c: &Chunk, max: u32) {
    let ctx = format!("{c:?} max {max}");
    assert!(c.len >= 1 && c.len <= 4096, "{ctx}");
    let last = c.addr as u128 + c.len as u128 - 1;
    assert!(last <= u64::MAX as u128, "{ctx}: past 2^64");
    assert_eq!(c.addr as u128 >> 12, last >> 12, "{ctx}: crosses 4 KiB");
    let s = c.shape;
    assert_eq!(
        (s.length_dw, s.first_be.bits(), s.last_be.bits()),
        oracle_shape(c.addr, c.len),
        "{ctx}"
    );
    assert!(s.length_dw as u32 * 4 <= max, "{ctx}: over the size limit");
    assert!(s.length_dw >= 1 && s.length_dw <= 1024, "{ctx}");
    if s.length_dw == 1 {
        assert_eq!(s.last_be.bits(), 0, "{ctx}: 1-DW request with Last BE");
        assert_ne!(s.first_be.bits(), 0, "{ctx}");
    } else {
        // Multi-DW: both non-zero; contiguous with the DWs between them.
        assert!(
            [0b1000, 0b1100, 0b1110, 0b1111].contains(&s.first_be.bits()),
            "{ctx}: First BE"
        );
        assert!(
            [0b0001, 0b0011, 0b0111, 0b1111].contains(&s.last_be.bits()),
            "{ctx}: Last BE"
        );
    }
    assert_eq!(s.byte_count(), c.len, "{ctx}");
    assert_eq!(s.check(c.addr), Ok(()), "{ctx}");
}

/// Rules of a split: contiguous cover of the DMA, and the policy's cut points.
fn check_split(chunks: &[Chunk], addr: u64, len: u64, max: u32, policy: SplitPolicy) {
    let mut next = addr;
    let mut off = 0u64;
    for (i, c) in chunks.iter().enumerate() {
        check_request(c, max);
        assert_eq!((c.addr, c.offset), (next, off), "chunk {i} not contiguous");
        let end = c.addr as u128 + c.len as u128;
        let is_last = i + 1 == chunks.len();
        match policy {
            SplitPolicy::Aligned => {
                if i > 0 {
                    assert_eq!(c.addr % max as u64, 0, "chunk {i} not aligned: {c:?}");
                }
                if !is_last {
                    assert_eq!(end % max as u128, 0, "chunk {i} ends unaligned: {c:?}");
                }
            }
            SplitPolicy::Naive => {
                if !is_last {
                    // Could not have been longer: the DW budget is full or the page ends.
                    let full = c.shape.length_dw as u32 * 4 == max && (end % 4 == 0);
                    assert!(full || end % 4096 == 0, "chunk {i} too short: {c:?}");
                }
            }
        }
        next = next.wrapping_add(c.len as u64);
        off += c.len as u64;
    }
    assert_eq!(off, len);
}

/// Rules of the completions answering one read.
fn check_completions(req: &Chunk, cpls: &[CplChunk], rcb: u32, mps: u32, policy: CplPolicy) {
    let ctx = format!("{req:?} rcb {rcb} mps {mps} {policy:?}");
    assert!(!cpls.is_empty(), "{ctx}");
    let total: u32 = cpls.iter().map(|c| c.len).sum();
    assert_eq!(total, req.len, "{ctx}");
    let req_end = req.addr as u128 + req.len as u128;
    let mut next = req.addr;
    let mut left = req.len;
    for (i, c) in cpls.iter().enumerate() {
        let cctx = format!("{ctx} cpl {i} {c:?}");
        assert!(c.len >= 1, "{cctx}");
        assert_eq!(c.addr, next, "{cctx}: not in address order");
        assert_eq!(c.offset as u64, c.addr.wrapping_sub(req.addr), "{cctx}");
        // Byte Count: everything still to come, this completion included.
        assert_eq!(c.byte_count as u32, left, "{cctx}: Byte Count");
        assert_eq!(c.byte_count_raw(), (left % 4096) as u16, "{cctx}");
        // Lower Address: the first byte returned; for the first completion that is the
        // DW address plus the index of the lowest enabled byte of First BE.
        let la = if i == 0 {
            let be = req.shape.first_be.bits();
            let mut k = 0u64;
            while be & (1 << k) == 0 {
                k += 1;
            }
            ((req.addr & !3) + k) & 0x7f
        } else {
            c.addr & 0x7f
        };
        assert_eq!(c.lower_address as u64, la, "{cctx}: Lower Address");
        // Length: the DWs the returned bytes touch.
        let mut dws = 0u16;
        let mut prev_dw = u64::MAX;
        for b in 0..c.len as u64 {
            let dw = c.addr.wrapping_add(b) / 4;
            if dw != prev_dw {
                dws += 1;
                prev_dw = dw;
            }
        }
        assert_eq!(c.length_dw, dws, "{cctx}: Length");
        assert_eq!(
            c.dw_offset as u64,
            (c.addr & !3) - (req.addr & !3),
            "{cctx}: payload offset"
        );
        assert!(c.length_dw as u32 * 4 <= mps, "{cctx}: over MPS");
        let end = c.addr as u128 + c.len as u128;
        let is_last = i + 1 == cpls.len();
        assert_eq!(c.is_last(), is_last, "{cctx}");
        if !is_last {
            assert_eq!(end % rcb as u128, 0, "{cctx}: not ended on RCB");
        } else {
            assert_eq!(end, req_end, "{cctx}");
        }
        match policy {
            CplPolicy::RcbChunks => {
                assert_eq!(
                    c.addr / rcb as u64,
                    (end - 1) as u64 / rcb as u64,
                    "{cctx}: spans two RCB blocks"
                );
            }
            CplPolicy::Maximal => {
                if !is_last {
                    let dw_start = (c.addr & !3) as u128;
                    // The rest did not fit in one completion …
                    assert!(
                        req_end.next_multiple_of(4) - dw_start > mps as u128,
                        "{cctx}"
                    );
                    // … and one more RCB block would have broken MPS.
                    assert!(end + rcb as u128 - dw_start > mps as u128, "{cctx}");
                }
            }
        }
        next = next.wrapping_add(c.len as u64);
        left -= c.len;
    }
}

/// The payload a completer sends for `c`: whole DWs from memory.
fn payload(req: &Chunk, c: &CplChunk, buf: &mut [u8; 4096]) -> usize {
    let dw_base = (req.addr & !3).wrapping_add(c.dw_offset as u64);
    let n = c.length_dw as usize * 4;
    for (i, b) in buf[..n].iter_mut().enumerate() {
        *b = mem(dw_base.wrapping_add(i as u64));
    }
    n
}

struct Params {
    mrrs: u32,
    mps: u32,
    rcb: u32,
    split: SplitPolicy,
    cpl: CplPolicy,
}

/// Split → complete → reassemble one DMA read, feeding completions of different tags in
/// the order `pick` chooses (an index into the tags that still have completions).
fn round_trip(addr: u64, len: u64, p: &Params, mut pick: impl FnMut(usize) -> usize) {
    let chunks: Vec<Chunk> = split_read(addr, len, p.mrrs, p.split).unwrap().collect();
    check_split(&chunks, addr, len, p.mrrs, p.split);
    let mut rx = Reassembler::new(ME, 1024).unwrap();
    assert!(
        chunks.len() <= 1024,
        "test sizes keep to one tag per request"
    );
    let mut queues: Vec<(Tag, Chunk, Vec<CplChunk>)> = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        let tag = Tag::new(i as u16).unwrap();
        rx.issue(tag, c.addr, c.len, c.offset as usize + GUARD, None)
            .unwrap();
        let mut cpls: Vec<CplChunk> = completions(c.addr, c.len, p.rcb, p.mps, p.cpl)
            .unwrap()
            .collect();
        check_completions(c, &cpls, p.rcb, p.mps, p.cpl);
        cpls.reverse(); // pop from the back = address order
        queues.push((tag, *c, cpls));
    }
    let mut dest = vec![0xeeu8; len as usize + 2 * GUARD];
    let mut buf = [0u8; 4096];
    let mut completed = 0;
    let mut live: Vec<usize> = (0..queues.len()).collect();
    while !live.is_empty() {
        let k = pick(live.len()) % live.len();
        let q = live[k];
        let (tag, req, cpls) = &mut queues[q];
        let c = cpls.pop().unwrap();
        let n = payload(req, &c, &mut buf);
        let out = rx
            .accept(&c.info(ME, HOST, *tag, &buf[..n]), &mut dest)
            .unwrap();
        assert_eq!(out.is_complete(), cpls.is_empty());
        if cpls.is_empty() {
            completed += 1;
            live.swap_remove(k);
        }
    }
    assert_eq!(completed, chunks.len());
    assert_eq!(rx.outstanding(), 0);
    assert!(dest[..GUARD].iter().all(|&b| b == 0xee), "guard before");
    assert!(
        dest[GUARD + len as usize..].iter().all(|&b| b == 0xee),
        "guard after"
    );
    for (i, &b) in dest[GUARD..GUARD + len as usize].iter().enumerate() {
        assert_eq!(
            b,
            mem(addr.wrapping_add(i as u64)),
            "byte {i} of {addr:#x}+{len}"
        );
    }
}

#[test]
fn length_offset_sweep() {
    let bases = [0u64, 0x0000_0008_7654_3000, 0xffff_ffff_ffff_e000];
    let offsets = (0..=7u64).chain(4088..=4095);
    let lengths: Vec<u64> = (1..=31).chain([1024]).collect();
    let mut runs = 0u32;
    for base in bases {
        for off in offsets.clone() {
            for &len in &lengths {
                // The same DMA as writes, split by MPS.
                for mps in [128, 256, 512] {
                    for policy in [SplitPolicy::Aligned, SplitPolicy::Naive] {
                        let w: Vec<Chunk> =
                            split_write(base + off, len, mps, policy).unwrap().collect();
                        check_split(&w, base + off, len, mps, policy);
                    }
                }
                for mrrs in [128, 512, 4096] {
                    for mps in [128, 256, 512] {
                        for rcb in [64, 128] {
                            for split in [SplitPolicy::Aligned, SplitPolicy::Naive] {
                                for cpl in [CplPolicy::Maximal, CplPolicy::RcbChunks] {
                                    let p = Params {
                                        mrrs,
                                        mps,
                                        rcb,
                                        split,
                                        cpl,
                                    };
                                    // Rotate through the tags: interleaved, not in order.
                                    let mut turn = 0usize;
                                    round_trip(base + off, len, &p, |n| {
                                        turn += 1;
                                        turn % n
                                    });
                                    runs += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(runs, 3 * 16 * 32 * 3 * 3 * 2 * 2 * 2);
}

#[test]
fn sweep_cases_by_hand() {
    // Two sweep corners worked out on paper.
    // 0xffd + 5 bytes crosses 0x1000: requests 0xffd..0x1000 (1 DW, BE 1110) and
    // 0x1000..0x1002 (1 DW, BE 0011).
    let v: Vec<Chunk> = split_read(0xffd, 5, 128, SplitPolicy::Naive)
        .unwrap()
        .collect();
    let f: Vec<_> = v
        .iter()
        .map(|c| {
            (
                c.addr,
                c.len,
                c.shape.first_be.bits(),
                c.shape.last_be.bits(),
            )
        })
        .collect();
    assert_eq!(f, [(0xffd, 3, 0b1110, 0), (0x1000, 2, 0b0011, 0)]);
    // 1024 bytes at 0x1007, MRRS 512 aligned: 0x1007..0x1200 (505 B, 127 DW),
    // 0x1200..0x1400 (512 B), 0x1400..0x1407 (7 B, 2 DW, BE 1111/0111).
    let v: Vec<Chunk> = split_read(0x1007, 1024, 512, SplitPolicy::Aligned)
        .unwrap()
        .collect();
    let f: Vec<_> = v
        .iter()
        .map(|c| {
            (
                c.len,
                c.shape.length_dw,
                c.shape.first_be.bits(),
                c.shape.last_be.bits(),
            )
        })
        .collect();
    assert_eq!(
        f,
        [
            (505, 127, 0b1000, 0b1111),
            (512, 128, 0b1111, 0b1111),
            (7, 2, 0b1111, 0b0111)
        ]
    );
}

fn params() -> impl Strategy<Value = Params> {
    (
        0u32..6,
        0u32..6,
        prop::bool::ANY,
        prop::bool::ANY,
        prop::bool::ANY,
    )
        .prop_map(|(r, m, rcb, s, c)| Params {
            mrrs: 128 << r,
            mps: 128 << m,
            rcb: if rcb { 128 } else { 64 },
            split: if s {
                SplitPolicy::Aligned
            } else {
                SplitPolicy::Naive
            },
            cpl: if c {
                CplPolicy::Maximal
            } else {
                CplPolicy::RcbChunks
            },
        })
}

fn addr_len() -> impl Strategy<Value = (u64, u64)> {
    let addr = prop_oneof![
        any::<u64>(),
        0u64..0x10_0000,
        (0u64..0x4000).prop_map(|a| u64::MAX - a),
    ];
    (addr, 1u64..40_000).prop_map(|(a, l)| {
        // Keep the range inside the address space.
        let l = l.min((u64::MAX - a).saturating_add(1)).max(1);
        (a, l)
    })
}

impl core::fmt::Debug for Params {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "mrrs {} mps {} rcb {} {:?} {:?}",
            self.mrrs, self.mps, self.rcb, self.split, self.cpl
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_round_trip_with_random_interleaving(
        (addr, len) in addr_len(),
        p in params(),
        picks in prop::collection::vec(any::<usize>(), 1..64),
    ) {
        let mut i = 0usize;
        round_trip(addr, len, &p, |_| {
            i += 1;
            picks[i % picks.len()]
        });
    }

    #[test]
    fn random_writes_obey_the_rules((addr, len) in addr_len(), m in 0u32..6, aligned in prop::bool::ANY) {
        let mps = 128 << m;
        let policy = if aligned { SplitPolicy::Aligned } else { SplitPolicy::Naive };
        let it = split_write(addr, len, mps, policy).unwrap();
        let (lo, hi) = it.size_hint();
        let chunks: Vec<Chunk> = it.collect();
        check_split(&chunks, addr, len, mps, policy);
        prop_assert!(lo <= chunks.len() && chunks.len() <= hi.unwrap());
    }

    #[test]
    fn shape_matches_byte_walk(addr in any::<u64>(), len in 1u32..=4096) {
        let fits = (addr & 0xfff) + len as u64 <= 4096 && addr.checked_add(len as u64 - 1).is_some();
        match request_shape(addr, len) {
            Ok(s) => {
                prop_assert!(fits);
                prop_assert_eq!((s.length_dw, s.first_be.bits(), s.last_be.bits()), oracle_shape(addr, len));
            }
            Err(_) => prop_assert!(!fits),
        }
    }
}
