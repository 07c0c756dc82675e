//! Pipelined DMA reads (`Channel::dma_read_stream`) through the software adapter, on a
//! loopback address pair of their own.

use crate::{fill, own_addrs, pattern};
use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::device::{Device, DeviceConfig, DmaError};
use std::collections::HashSet;
use std::time::Duration;

fn pair(mrrs: u32, tags: u16, in_flight: u16) -> (Adapter, Device) {
    let (ad, dv) = own_addrs();
    let a = Adapter::start(AdapterConfig::on(ad, dv)).expect("adapter starts");
    let d = Device::open(DeviceConfig {
        adapter: ad,
        local: dv,
        tags: 0..tags,
        tags_per_channel: tags,
        max_in_flight: in_flight,
        mrrs,
        timeout: Duration::from_millis(300),
        ..DeviceConfig::default()
    })
    .expect("device opens");
    (a, d)
}

/// Every read of a stream returns the bytes at its own address (an independent pattern),
/// exactly once, for one-piece and many-piece reads (crossing 4 KiB) and windows smaller
/// and larger than the tag pool.
#[test]
fn stream_reads_are_exact() {
    let (a, dev) = pair(512, 16, 8);
    let base = 0x40_0000u64;
    fill(&a, base, 0x4_0000);
    let mut ch = dev.channel();
    for (size, window, n) in [
        (64usize, 1usize, 200u64),
        (64, 8, 2000),
        (61, 32, 2000),
        (1024, 8, 500),
        (3001, 4, 200),
        (4096, 16, 100),
    ] {
        let mut k = 0u64;
        let mut next = || {
            if k == n {
                return None;
            }
            // Odd offsets, and every read of 3001 B crosses a 4 KiB boundary.
            let a = base + 3 + k * (size as u64 + 5) % 0x3_0000;
            k += 1;
            Some(a)
        };
        let mut seen = HashSet::new();
        let done = ch
            .dma_read_stream(size, window, &mut next, |r| {
                assert_eq!(r.data.len(), size);
                for (i, x) in r.data.iter().enumerate() {
                    assert_eq!(
                        *x,
                        pattern(r.addr + i as u64),
                        "{size} B window {window}: read at {:#x}, byte {i}",
                        r.addr
                    );
                }
                assert!(r.latency > Duration::ZERO);
                assert!(seen.insert(r.addr), "{:#x} finished twice", r.addr);
                true
            })
            .unwrap_or_else(|e| panic!("{size} B window {window}: {e}"));
        assert_eq!(done, n, "{size} B window {window}");
        assert_eq!(seen.len() as u64, n);
    }
    let s = ch.stats();
    assert_eq!((s.stale, s.junk), (0, 0));
    // MRds: at least ceil(size / 512) per read (MRRS 512); unaligned reads take one more.
    assert!(s.mrd >= 200 + 2000 + 2000 + 500 * 2 + 200 * 6 + 100 * 8);
    assert_eq!(a.stats().mrd, s.mrd);
}

/// `done` returning false stops issuing: the reads already in flight finish, no more.
#[test]
fn stream_stops_when_asked() {
    let (a, dev) = pair(512, 16, 8);
    fill(&a, 0x1000, 0x10000);
    let mut ch = dev.channel();
    let mut issued = 0u64;
    let mut finished = 0u64;
    let n = ch
        .dma_read_stream(
            64,
            8,
            || {
                issued += 1;
                Some(0x1000 + 64 * (issued % 512))
            },
            |_| {
                finished += 1;
                finished < 100
            },
        )
        .expect("stream");
    assert_eq!(n, finished);
    assert!((100..=108).contains(&n), "{n} reads finished");
    assert_eq!(issued, n, "every issued read finished");
}

/// An Unsupported Request ends the stream with that error; the channel works afterwards.
#[test]
fn stream_error_then_recovers() {
    let (a, dev) = pair(512, 16, 8);
    fill(&a, 0x2000, 0x1000);
    let mut ch = dev.channel();
    let mut k = 0u64;
    let mut good = 0u64;
    let e = ch
        .dma_read_stream(
            64,
            8,
            || {
                k += 1;
                // The 50th read is outside the adapter's memory (1 GiB window).
                Some(if k == 50 {
                    0x7ff_0000_0000
                } else {
                    0x2000 + 64 * (k % 64)
                })
            },
            |_| {
                good += 1;
                true
            },
        )
        .expect_err("UR");
    assert!(
        matches!(
            e,
            DmaError::UnsupportedRequest {
                addr: 0x7ff_0000_0000,
                ..
            }
        ),
        "{e}"
    );
    assert!(good >= 40, "{good} reads finished before the UR");
    let mut b = [0u8; 64];
    ch.dma_read(0x2000, &mut b).expect("read after the error");
    assert!(b
        .iter()
        .enumerate()
        .all(|(i, x)| *x == pattern(0x2000 + i as u64)));
}

/// Posted writes under load: every MWr sent is applied by the adapter (none lost).
#[test]
fn posted_writes_lose_nothing() {
    let (a, dev) = pair(512, 32, 8);
    let mut ch = dev.channel();
    let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    for k in 0..500u64 {
        ch.dma_write(0x10_0000 + 4096 * (k % 64), &data)
            .expect("write");
    }
    let sent = ch.stats().mwr;
    assert_eq!(sent, 500 * 16, "MPS 256: 16 MWr per 4 KiB");
    assert!(
        crate::wait_until(Duration::from_secs(5), || a.stats().mwr == sent),
        "adapter applied {} of {sent} MWr",
        a.stats().mwr
    );
}

fn pair_with_faults(faults: pcielab_nettlp::adapter::Faults) -> (Adapter, Device) {
    let (ad, dv) = own_addrs();
    let a = Adapter::start(AdapterConfig {
        listen: ad,
        device: dv,
        faults,
        ..AdapterConfig::default()
    })
    .expect("adapter starts");
    let d = Device::open(DeviceConfig {
        adapter: ad,
        local: dv,
        tags: 0..16,
        tags_per_channel: 16,
        max_in_flight: 8,
        timeout: Duration::from_millis(200),
        ..DeviceConfig::default()
    })
    .expect("device opens");
    (a, d)
}

/// Duplicated completions (every 7th sent twice) never complete a later read on the same
/// tag: every read of the stream is exact and the duplicates are counted as stale.
#[test]
fn stream_survives_duplicate_completions() {
    let (a, dev) = pair_with_faults(pcielab_nettlp::adapter::Faults {
        dup_cpl_every: 7,
        ..Default::default()
    });
    fill(&a, 0x8000, 0x10000);
    let mut ch = dev.channel();
    let mut k = 0u64;
    let n = ch
        .dma_read_stream(
            200,
            8,
            || {
                k += 1;
                (k <= 3000).then(|| 0x8000 + (k * 200) % 0xf000)
            },
            |r| {
                assert!(
                    r.data
                        .iter()
                        .enumerate()
                        .all(|(i, x)| *x == pattern(r.addr + i as u64)),
                    "read at {:#x}",
                    r.addr
                );
                true
            },
        )
        .expect("stream");
    assert_eq!(n, 3000);
    let dups = a.stats().fault_duplicated;
    assert!(dups > 0);
    // Every duplicate was either drained before its tag's reuse or found stale.
    assert!(
        ch.stats().stale > 0 && ch.stats().stale <= dups,
        "{:?} vs {dups}",
        ch.stats()
    );
}

/// A dropped completion ends the stream with a completion timeout naming the read (the
/// other tags go on reading meanwhile); the next stream on the channel works.
#[test]
fn stream_reports_a_lost_completion() {
    let (a, dev) = pair_with_faults(pcielab_nettlp::adapter::Faults {
        drop_cpl_every: 500,
        ..Default::default()
    });
    fill(&a, 0x8000, 0x1000);
    let mut ch = dev.channel();
    let mut done = 0u64;
    let e = ch
        .dma_read_stream(
            64,
            8,
            || Some(0x8000),
            |_| {
                done += 1;
                true
            },
        )
        .expect_err("timeout");
    assert!(
        matches!(
            e,
            DmaError::Timeout {
                addr: 0x8000,
                len: 64,
                ..
            }
        ),
        "{e}"
    );
    // The 500th completion was lost; the other tags kept reading until its timeout.
    assert!(done >= 499, "{done} reads finished");
    assert!(a.stats().fault_dropped >= 1);
    // Completions the adapter can still send before its next injected drop (it counts
    // the completions it sent and dropped): the next stream stays below that.
    let st = a.stats();
    let room = 499 - (st.cpl_sent + st.fault_dropped) % 500;
    let m = room.min(100);
    let mut k = 0;
    let n = ch
        .dma_read_stream(
            64,
            8,
            || {
                k += 1;
                (k <= m).then_some(0x8000)
            },
            |r| {
                assert!(r
                    .data
                    .iter()
                    .enumerate()
                    .all(|(i, x)| *x == pattern(0x8000 + i as u64)));
                true
            },
        )
        .expect("the next stream");
    assert_eq!(n, m);
}
