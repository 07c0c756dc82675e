//! Posted-write loss under load, and the acknowledgement extension that removes it.

use crate::{adapter, device, lock, wait_until};
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
