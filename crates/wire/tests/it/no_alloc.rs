//! The parse paths of DLLPs and DLL frames never touch the heap.
//!
//! A counting global allocator records allocations made by the current thread; the
//! parsers run between two readings of that counter.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pcielab_wire::dll::DllFrameRepr;
use pcielab_wire::dllp::DllpRepr;
use pcielab_wire::SeqNum;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn dllp_and_dll_frame_parse_do_not_allocate() {
    let dllps: Vec<[u8; 6]> = (0..4096u16)
        .map(|s| {
            DllpRepr::Ack {
                seq: SeqNum::new(s).unwrap(),
            }
            .to_bytes()
            .unwrap()
        })
        .collect();
    let tlp = [0x5au8; 256];
    let repr = DllFrameRepr {
        seq: SeqNum::new(3).unwrap(),
        tlp: &tlp,
    };
    let mut frame = vec![0u8; repr.buffer_len()];
    repr.emit(&mut frame).unwrap();
    let mut corrupt = frame.clone();
    corrupt[10] ^= 1;

    // The counter itself must work, or this test proves nothing.
    let before = allocs();
    drop(std::hint::black_box(vec![1u8; 8]));
    assert!(allocs() > before, "allocation counter is not counting");

    let before = allocs();
    let mut n = 0u32;
    for d in &dllps {
        if let Ok(DllpRepr::Ack { seq }) = DllpRepr::from_bytes(d) {
            n += seq.value() as u32;
        }
        n += DllpRepr::from_bytes(&d[..5]).is_err() as u32;
    }
    let parsed = DllFrameRepr::from_bytes(&frame).unwrap();
    let bad = DllFrameRepr::from_bytes(&corrupt);
    let after = allocs();
    assert_eq!(after, before, "parsing allocated");
    assert_eq!(n, (0..4096u32).sum::<u32>() + 4096);
    assert_eq!(parsed, repr);
    assert!(bad.is_err());
}

#[test]
fn tlp_parse_and_emit_do_not_allocate() {
    use pcielab_wire::tlp::{check, TlpPacket, TlpRepr};
    use pcielab_wire::{Bdf, CplStatus, Tag};
    let rid = Bdf::from_raw(0x0100);
    let tag = Tag::new(0x2a5).unwrap();
    let data = [0x11u8; 256];
    let mut wr = TlpRepr::mem_write(rid, tag, 0x1_0000_0000, &data).unwrap();
    wr.td = true;
    let tlps: Vec<Vec<u8>> = vec![
        TlpRepr::mem_read(rid, tag, 0x1000, 32)
            .unwrap()
            .to_vec()
            .unwrap(),
        wr.to_vec().unwrap(),
        TlpRepr::completion(Bdf::from_raw(0), rid, tag, CplStatus::Sc, 256, 0, &data)
            .unwrap()
            .to_vec()
            .unwrap(),
    ];
    let mut out = vec![0u8; 512];
    let before = allocs();
    for t in &tlps {
        let p = TlpPacket::new_checked(&t[..]).unwrap();
        let r = TlpRepr::parse(&p).unwrap();
        check::check_rx(t, &check::RxRules::default()).unwrap();
        let n = r.emit(&mut out).unwrap();
        assert_eq!(&out[..n], &t[..]);
    }
    assert_eq!(allocs(), before, "TLP parse/check/emit allocated");
}
