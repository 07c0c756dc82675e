//! Posted-write loss under load, and the acknowledgement extension that removes it.

use crate::{adapter, dev_ip, device, lock, wait_until};
use std::time::{Duration, Instant};

const N: u64 = 20_000;

/// Blasts N 256-byte MWrs without acknowledgements and reports how many arrived; the
/// same with acknowledgements must deliver every one.
#[test]
fn posted_write_loss_and_acked_writes() {
    let _g = lock();
    let a = adapter(|c| c.ack_writes = true);
    let dev = device(|_| {});
    let data = [0xabu8; 256];
    let t0 = Instant::now();
    {
        let mut ch = dev.channel();
        for i in 0..N {
            ch.dma_write((i % 1024) * 256, &data).expect("send");
        }
    }
    let sent_in = t0.elapsed();
    wait_until(Duration::from_millis(500), || a.stats().mwr >= N);
    let got = a.stats().mwr;
    eprintln!(
        "posted writes: sent {N} in {:.1} ms, adapter applied {got} ({:.1} % lost)",
        sent_in.as_secs_f64() * 1e3,
        100.0 * (N - got.min(N)) as f64 / N as f64
    );
    assert!(got <= N);

    let before = a.stats().mwr;
    let dev2 = device(|c| {
        c.acked_writes = true;
        c.tags = 32..64;
    });
    let mut ch = dev2.channel();
    let t0 = Instant::now();
    for i in 0..N {
        ch.dma_write((i % 1024) * 256, &data).expect("acked write");
    }
    let took = t0.elapsed();
    let s = ch.stats();
    eprintln!(
        "acked writes: {N} in {:.1} ms, {} retransmits",
        took.as_secs_f64() * 1e3,
        s.retransmits
    );
    // Every write applied at least once (retransmissions may apply one twice).
    assert!(a.stats().mwr - before >= N);
    assert!(a.stats().acks_sent >= N);
}

/// Without adapter support, acknowledged writes fail with a clear error, not a hang.
#[test]
fn acked_writes_need_adapter_support() {
    let _g = lock();
    let _a = adapter(|_| {});
    let dev = device(|c| {
        c.acked_writes = true;
        c.ack_timeout = Duration::from_millis(5);
        c.ack_retries = 3;
    });
    let t0 = Instant::now();
    let e = dev.dma_write(0, &[1, 2, 3]).expect_err("no acks");
    assert!(e.to_string().contains("--ack-writes"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(1));
}

/// A NetTLP datagram with a 3DW MWr (fmt/type 0x40) or MRd (0x00) built by hand from the
/// PCIe layout: Length in DW, requester 01:00.0, tag 0, BEs `last << 4 | first`.
fn raw(write: bool, dw_addr: u32, first: u8, last: u8, payload: &[u8], len_dw: u16) -> Vec<u8> {
    let mut d = vec![0u8; 6];
    d.extend_from_slice(&[
        if write { 0x40 } else { 0 },
        0,
        (len_dw >> 8) as u8,
        len_dw as u8,
    ]);
    d.extend_from_slice(&[0x01, 0x00, 0x00, last << 4 | first]);
    d.extend_from_slice(&dw_addr.to_be_bytes());
    d.extend_from_slice(payload);
    d
}

#[test]
fn handle_datagram_without_sockets() {
    use pcielab_nettlp::adapter::Buffers;
    use pcielab_nettlp::sys::SendBatch;
    use std::net::SocketAddrV4;
    let _g = lock();
    let a = adapter(|_| {});
    let src = SocketAddrV4::new(dev_ip(), 0x3000);
    let (mut out, mut bufs) = (SendBatch::new(), Buffers::new());
    // All bytes enabled: 8 bytes at 0x2000.
    let d = raw(true, 0x2000, 0xf, 0xf, &[1, 2, 3, 4, 5, 6, 7, 8], 2);
    a.handle_datagram(0x3000, src, &d, &mut out, &mut bufs);
    // First DW bytes 1..3 and last DW bytes 0..2 only: 0x3001..=0x3006.
    let d = raw(
        true,
        0x3000,
        0b1110,
        0b0111,
        &[9, 10, 11, 12, 13, 14, 15, 16],
        2,
    );
    a.handle_datagram(0x3000, src, &d, &mut out, &mut bufs);
    let mut m = [0u8; 8];
    a.memory().read(0x2000, &mut m);
    assert_eq!(m, [1, 2, 3, 4, 5, 6, 7, 8]);
    a.memory().read(0x3000, &mut m);
    assert_eq!(m, [0, 10, 11, 12, 13, 14, 15, 0]);
    assert!(out.is_empty(), "posted writes queue nothing");
    // A 64-byte read: one CplD of 6 + 12 + 64 bytes carrying the memory.
    let d = raw(false, 0x2000, 0xf, 0xf, &[], 16);
    a.handle_datagram(0x3000, src, &d, &mut out, &mut bufs);
    let got: Vec<(SocketAddrV4, Vec<u8>)> = out.iter().map(|(d, b)| (d, b.to_vec())).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, src);
    assert_eq!(got[0].1.len(), 6 + 12 + 64);
    assert_eq!(got[0].1[6] >> 5, 0b010, "CplD: 3DW with data");
    assert_eq!(&got[0].1[18..26], &[1, 2, 3, 4, 5, 6, 7, 8]);
    let s = a.stats();
    assert_eq!(
        (s.rx_datagrams, s.rx_tlps, s.mwr, s.mrd, s.cpl_sent),
        (3, 3, 2, 1, 1)
    );
    assert_eq!(s.tlps_handled(), 4);
    out.clear();
    assert!(out.is_empty());
}

#[test]
fn adapter_counts_batches_and_cpu_time() {
    let _g = lock();
    let a = adapter(|_| {});
    let dev = device(|_| {});
    for k in 0..200u64 {
        dev.dma_write(0x10_0000 + k * 64, &[5u8; 64])
            .expect("write");
    }
    assert!(wait_until(Duration::from_secs(2), || a.stats().mwr == 200));
    // The idle wake-up (every 50 ms) brings the CPU counters up to date.
    assert!(wait_until(Duration::from_secs(2), || a.stats().cpu_ns() > 0));
    let s = a.stats();
    assert!(s.rx_datagrams >= 200, "{s:?}");
    assert!(s.rx_batches >= 1 && s.rx_batches <= s.rx_datagrams, "{s:?}");
    assert_eq!(s.cpu_ns(), s.cpu_user_ns + s.cpu_sys_ns);
}
