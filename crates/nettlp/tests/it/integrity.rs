//! Data integrity of DMA reads and writes through the software adapter.

use crate::{adapter, device, fill, lock, pattern, wait_until};
use pcielab_nettlp::device::DmaError;
use std::time::Duration;

/// Every size 1..=8192 at offsets 0..7, many reads in flight (MRRS 128, 16 tags).
#[test]
fn read_every_size_and_offset() {
    let _g = lock();
    let a = adapter(|_| {});
    let base = 0x10_0000u64;
    fill(&a, base, 0x6000);
    let dev = device(|c| {
        c.mrrs = 128;
        c.tags_per_channel = 16;
    });
    let mut ch = dev.channel();
    let mut buf = vec![0u8; 8192];
    for off in 0..8u64 {
        for size in 1..=8192usize {
            let addr = base + off;
            let b = &mut buf[..size];
            b.fill(0xee);
            ch.dma_read(addr, b)
                .unwrap_or_else(|e| panic!("read {size} B at {addr:#x}: {e}"));
            for (i, x) in b.iter().enumerate() {
                assert_eq!(
                    *x,
                    pattern(addr + i as u64),
                    "read {size} B at {addr:#x}, byte {i}"
                );
            }
        }
    }
    let s = ch.stats();
    assert_eq!(s.stale, 0);
    assert_eq!(s.junk, 0);
}

/// Reads that start just below a 4 KiB boundary and cross one or two of them.
#[test]
fn read_across_page_boundaries() {
    let _g = lock();
    let a = adapter(|c| c.mps = 128);
    let page = 0x20_0000u64;
    fill(&a, page - 0x1000, 0x5000);
    let dev = device(|c| c.mrrs = 512);
    for back in 1..=8u64 {
        for size in (1..=8192usize).step_by(13).chain([4096, 4097, 8192]) {
            let addr = page - back;
            let mut b = vec![0u8; size];
            dev.dma_read(addr, &mut b)
                .unwrap_or_else(|e| panic!("read {size} at {addr:#x}: {e}"));
            assert!(
                b.iter()
                    .enumerate()
                    .all(|(i, x)| *x == pattern(addr + i as u64)),
                "{size} at {addr:#x}"
            );
        }
    }
}

/// Acknowledged writes of every size 1..=600 at offsets 0..7, then sizes across pages;
/// checked in the adapter's memory against the written bytes.
#[test]
fn acked_writes_every_size_and_offset() {
    let _g = lock();
    let a = adapter(|c| c.ack_writes = true);
    let dev = device(|c| c.acked_writes = true);
    let mut ch = dev.channel();
    let base = 0x30_0000u64;
    for off in 0..8u64 {
        for size in (1..=600usize).chain([4095, 4096, 4097, 8191, 8192]) {
            let addr = base + off + ((size as u64 * 8 + off) << 16) % 0x100_0000;
            let data: Vec<u8> = (0..size as u64).map(|i| pattern(i + size as u64)).collect();
            ch.dma_write(addr, &data)
                .unwrap_or_else(|e| panic!("write {size} at {addr:#x}: {e}"));
            let mut back = vec![0u8; size + 2];
            a.memory().read(addr - 1, &mut back);
            assert_eq!(&back[1..=size], &data[..], "write {size} B at {addr:#x}");
            // Bytes next to the written range stay untouched (zero).
            assert_eq!(
                (back[0], back[size + 1]),
                (0, 0),
                "write {size} B at {addr:#x} spilled"
            );
            a.memory().write(addr, &vec![0u8; size]);
        }
    }
    // Retransmissions may happen under load (an ack later than 20 ms); data is checked above.
    eprintln!("acked writes: {} retransmits", ch.stats().retransmits);
}

/// An acknowledged write the adapter drops (outside its memory windows) is answered as
/// refused: the device reports it, and nothing is written; one inside is acknowledged.
#[test]
fn acked_write_outside_the_windows_is_refused() {
    let _g = lock();
    let a = adapter(|c| c.ack_writes = true);
    let dev = device(|c| {
        c.acked_writes = true;
        c.ack_retries = 2;
    });
    let mut ch = dev.channel();
    let outside = 0x7ff_ffff_f000u64;
    assert!(!a.memory().contains(outside, 4));
    match ch.dma_write(outside, b"AAAA") {
        Err(pcielab_nettlp::device::DmaError::WriteRefused { addr }) => assert_eq!(addr, outside),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        ch.dma_write(0x1000, b"BBBB").expect("inside: acknowledged"),
        4
    );
    let mut back = [0u8; 4];
    a.memory().read(0x1000, &mut back);
    assert_eq!(&back, b"BBBB");
    assert_eq!(a.stats().drop_mwr_outside, 1);
}

/// Posted (unacknowledged) writes arrive when sent at a modest rate.
#[test]
fn posted_writes_then_read_back() {
    let _g = lock();
    let a = adapter(|_| {});
    let dev = device(|_| {});
    let base = 0x40_0003u64;
    let data: Vec<u8> = (0..5000u64).map(pattern).collect();
    dev.dma_write(base, &data).expect("write");
    // 5000 B from ...3 at MPS 256: the chunks end on 256-byte boundaries: 20 MWrs.
    assert!(
        wait_until(Duration::from_secs(2), || a.stats().mwr == 20),
        "{:?}",
        a.stats()
    );
    let mut back = vec![0u8; 5000];
    dev.dma_read(base, &mut back).expect("read");
    assert_eq!(back, data);
}

/// Four threads read different regions at once over one device.
#[test]
fn threads_share_a_device() {
    let _g = lock();
    let a = adapter(|c| c.threads = 2);
    fill(&a, 0x50_0000, 0x40000);
    let dev = device(|c| {
        c.tags = 0..64;
        c.tags_per_channel = 8;
    });
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let dev = &dev;
            s.spawn(move || {
                for i in 0..300u64 {
                    let addr = 0x50_0000 + t * 0x10000 + (i * 97) % 0xf000;
                    let size = 1 + ((i * 131 + t) % 3000) as usize;
                    let mut b = vec![0u8; size];
                    dev.dma_read(addr, &mut b)
                        .unwrap_or_else(|e| panic!("thread {t}: {e}"));
                    assert!(b
                        .iter()
                        .enumerate()
                        .all(|(k, x)| *x == pattern(addr + k as u64)));
                }
            });
        }
    });
}

/// 64-bit addresses use 4DW headers and work the same.
#[test]
fn high_addresses() {
    let _g = lock();
    let hi = 0x1_0000_0000u64 - 0x800;
    let a = adapter(|c| {
        c.windows = vec![pcielab_nettlp::memory::Window {
            base: hi,
            size: 0x2000,
        }]
    });
    fill(&a, hi, 0x2000);
    let dev = device(|_| {});
    let mut b = vec![0u8; 0x1000];
    dev.dma_read(hi + 3, &mut b).expect("read across 4 GiB");
    assert!(b
        .iter()
        .enumerate()
        .all(|(k, x)| *x == pattern(hi + 3 + k as u64)));
}

/// A minimal executor: polls `fut`, parking the thread until its waker fires (bounded).
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        assert!(
            std::time::Instant::now() < end,
            "future did not finish in 10 s"
        );
        std::thread::park_timeout(Duration::from_millis(200));
    }
}

/// Polls two futures until both are ready.
async fn join2<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    use std::task::Poll;
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    match (ra, rb) {
        (Some(x), Some(y)) => (x, y),
        _ => unreachable!("both are ready"),
    }
}

/// The async flavour: same data as the blocking one; two reads on two channels in one
/// task; errors and timeouts come out of the future too.
#[test]
fn async_reads() {
    let _g = lock();
    let a = adapter(|c| {
        c.windows = vec![pcielab_nettlp::memory::Window {
            base: 0,
            size: 0x10_0000,
        }]
    });
    fill(&a, 0, 0x10_0000);
    let dev = device(|c| {
        c.tags = 0..32;
        c.mrrs = 256;
        c.timeout = Duration::from_millis(100);
    });
    let mut c1 = dev.channel();
    let mut c2 = dev.channel();
    for (i, size) in [1usize, 3, 100, 4096, 4097, 9000].into_iter().enumerate() {
        let addr = 0x1000 * i as u64 + 0xffd;
        let mut b1 = vec![0u8; size];
        let mut b2 = vec![0u8; size];
        // Both reads in flight at once, polled by one task.
        let (r1, r2) = block_on(join2(
            c1.dma_read_async(addr, &mut b1),
            c2.dma_read_async(addr + 0x8000, &mut b2),
        ));
        assert_eq!(r1.expect("read 1"), size);
        assert_eq!(r2.expect("read 2"), size);
        assert!(
            b1.iter()
                .enumerate()
                .all(|(k, x)| *x == pattern(addr + k as u64)),
            "{size} at {addr:#x}"
        );
        assert!(b2
            .iter()
            .enumerate()
            .all(|(k, x)| *x == pattern(addr + 0x8000 + k as u64)));
    }
    // Outside the window: UR through the future.
    let mut b = [0u8; 8];
    let e = block_on(c1.dma_read_async(0x10_0000, &mut b)).expect_err("UR");
    assert!(matches!(e, DmaError::UnsupportedRequest { .. }), "{e}");
    // Adapter gone: the future resolves to a timeout (woken by the poller's deadline).
    drop(a);
    let t0 = std::time::Instant::now();
    let e = block_on(c2.dma_read_async(0, &mut b)).expect_err("timeout");
    assert!(matches!(e, DmaError::Timeout { .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}
