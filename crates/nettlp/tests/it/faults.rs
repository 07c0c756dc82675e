//! Faults: no adapter, UR windows, lost and duplicated completions, garbage input.

use crate::{ad_ip, adapter, dev_ip, device, fill, lock, pattern, wait_until};
use pcielab_nettlp::adapter::Faults;
use pcielab_nettlp::device::DmaError;
use pcielab_nettlp::frame::{self, CfgPacket};
use pcielab_nettlp::memory::Window;
use std::net::{SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

#[test]
fn no_adapter_times_out() {
    let _g = lock();
    let dev = device(|c| c.timeout = Duration::from_millis(100));
    let t0 = Instant::now();
    let mut b = vec![0u8; 3000];
    let e = dev.dma_read(0x1000, &mut b).expect_err("nobody answers");
    let took = t0.elapsed();
    assert!(matches!(e, DmaError::Timeout { .. }), "{e}");
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(e.to_string().contains("completion timeout"), "{e}");
}

#[test]
fn adapter_stopped_midway() {
    let _g = lock();
    let a = adapter(|_| {});
    let dev = device(|c| c.timeout = Duration::from_millis(100));
    let mut b = [0u8; 64];
    dev.dma_read(0, &mut b).expect("adapter up");
    a.stop();
    let t0 = Instant::now();
    for _ in 0..3 {
        assert!(matches!(
            dev.dma_read(0, &mut b),
            Err(DmaError::Timeout { .. })
        ));
    }
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn unsupported_request_outside_windows() {
    let _g = lock();
    let a = adapter(|c| {
        c.windows = vec![Window {
            base: 0x1000,
            size: 0x1000,
        }]
    });
    let dev = device(|_| {});
    let mut b = [0u8; 16];
    assert!(dev.dma_read(0x1ff0, &mut b).is_ok());
    // Crosses the window's end.
    // Crosses the window's end: the second MRd (at 0x2000) gets UR.
    let e = dev.dma_read(0x1ff8, &mut b).expect_err("outside");
    assert!(
        matches!(e, DmaError::UnsupportedRequest { addr: 0x2000, .. }),
        "{e}"
    );
    let e = dev.dma_read(0x0, &mut b).expect_err("outside");
    assert!(
        matches!(e, DmaError::UnsupportedRequest { addr: 0, .. }),
        "{e}"
    );
    assert_eq!(a.stats().ur_sent, 2);
    // The channel still works afterwards.
    assert!(dev.dma_read(0x1000, &mut b).is_ok());
}

/// Every 7th completion is lost: reads either succeed with the right bytes or fail
/// (timeout when a read's only or last completion is lost; a Byte Count error when a
/// middle one is), never with wrong data.
#[test]
fn lost_completions_never_give_wrong_data() {
    let _g = lock();
    let a = adapter(|c| {
        c.mps = 128;
        c.faults = Faults {
            drop_cpl_every: 7,
            dup_cpl_every: 0,
        };
    });
    fill(&a, 0, 0x10000);
    let dev = device(|c| {
        c.timeout = Duration::from_millis(30);
        c.mrrs = 256;
    });
    let (mut ok, mut timeouts, mut bad) = (0, 0, 0);
    for i in 0..200u64 {
        let addr = (i * 331) % 0xe000;
        let mut b = vec![0u8; 1 + (i as usize * 37) % 1500];
        match dev.dma_read(addr, &mut b) {
            Ok(_) => {
                ok += 1;
                let bad: Vec<usize> = (0..b.len())
                    .filter(|&k| b[k] != pattern(addr + k as u64))
                    .collect();
                assert!(
                    bad.is_empty(),
                    "wrong data at {addr:#x} len {}: {} bytes from offset {:?} to {:?}",
                    b.len(),
                    bad.len(),
                    bad.first(),
                    bad.last()
                );
            }
            Err(DmaError::Timeout { .. }) => timeouts += 1,
            Err(DmaError::Completion { .. }) => bad += 1,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(a.stats().fault_dropped > 0);
    assert!(
        ok > 0 && timeouts > 0,
        "ok {ok} timeouts {timeouts} bad {bad}"
    );
}

/// Every 3rd completion is sent twice: every read succeeds, duplicates are counted.
#[test]
fn duplicated_completions_are_ignored() {
    let _g = lock();
    let a = adapter(|c| {
        c.faults = Faults {
            drop_cpl_every: 0,
            dup_cpl_every: 3,
        }
    });
    fill(&a, 0, 0x10000);
    let dev = device(|c| c.mrrs = 128);
    let mut ch = dev.channel();
    for i in 0..300u64 {
        let addr = (i * 173) % 0xe000;
        let mut b = vec![0u8; 1 + (i as usize * 53) % 2000];
        ch.dma_read(addr, &mut b).unwrap_or_else(|e| panic!("{e}"));
        assert!(b
            .iter()
            .enumerate()
            .all(|(k, x)| *x == pattern(addr + k as u64)));
    }
    assert!(a.stats().fault_duplicated > 0);
    assert!(ch.stats().stale > 0, "duplicates are seen and dropped");
}

/// Garbage of every kind: counted by the adapter, nothing crashes, service continues.
#[test]
fn malformed_datagrams_are_counted() {
    let _g = lock();
    let a = adapter(|_| {});
    fill(&a, 0, 0x1000);
    let dev_ip = dev_ip();
    let s = UdpSocket::bind(SocketAddrV4::new(dev_ip, 0)).expect("bind");
    let to = |p: u16| SocketAddrV4::new(ad_ip(), p);
    // Random bytes on TLP ports (xorshift; every length 0..200).
    let mut x = 0x1234_5678u64;
    let mut sent = 0u64;
    for len in 0..200usize {
        let mut b = vec![0u8; len];
        for v in b.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *v = x as u8;
        }
        s.send_to(&b, to(0x3000 + (len as u16 % 256)))
            .expect("send");
        sent += 1;
    }
    // Truncated TLPs: an MRd cut short and a CplD missing payload.
    s.send_to(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x1b, 0], to(0x3000))
        .expect("send");
    s.send_to(
        &[
            0, 0, 0, 0, 0, 0, 0x4a, 0, 0, 4, 0, 0, 0, 16, 0x1b, 0, 0, 0, 1, 2, 3,
        ],
        to(0x3001),
    )
    .expect("send");
    // A completion on a device-side port (wrong port), a Msg (not bridged).
    s.send_to(
        &[0, 0, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0, 0, 4, 0x1b, 0, 0, 0],
        to(0x3002),
    )
    .expect("send");
    s.send_to(
        &[
            0, 0, 0, 0, 0, 0, 0x30, 0, 0, 0, 0x1b, 0, 0, 0x14, 0, 0, 0, 0, 0, 0, 0, 0,
        ],
        to(0x3003),
    )
    .expect("send");
    // Bad messaging and configuration requests.
    s.send_to(&[9, 0, 0, 0], to(frame::MSG_PORT)).expect("send");
    s.send_to(&[0xc0, 0, 0, 0, 0, 0], to(frame::CFG_PORT_ADAPTER))
        .expect("send");
    sent += 6;
    // A peer not on the allow-list.
    let stranger = UdpSocket::bind(SocketAddrV4::new(
        pcielab_nettlp::loopback::in_net(crate::net(), 3),
        0,
    ))
    .expect("bind");
    let mrd = [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x1b, 0, 0, 0x0f, 0, 0, 0, 0];
    stranger.send_to(&mrd, to(0x3000)).expect("send");
    sent += 1;
    assert!(
        wait_until(Duration::from_secs(2), || a.stats().rx_datagrams >= sent),
        "{:?}",
        a.stats()
    );
    let st = a.stats();
    assert_eq!(st.drop_not_allowed, 1);
    // Random bytes may happen to form completions on device ports, too.
    assert!(st.drop_wrong_port >= 1);
    assert_eq!(st.drop_bad_request, 2);
    assert!(st.drop_unsupported >= 1);
    assert!(st.drop_truncated >= 2);
    // Every datagram is either served or counted as dropped.
    assert_eq!(
        st.rx_datagrams,
        st.dropped() + st.mrd + st.mwr + st.ur_sent + st.interrupts,
        "{st:?}"
    );
    // Still serving.
    let dev = device(|_| {});
    let mut b = [0u8; 100];
    dev.dma_read(5, &mut b).expect("adapter still serves");
    assert!(b
        .iter()
        .enumerate()
        .all(|(k, x)| *x == pattern(5 + k as u64)));
    // The stranger got nothing back.
    stranger
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    assert!(stranger.recv(&mut [0u8; 64]).is_err());
}

/// The device ignores datagrams that are not completions and completions for others.
#[test]
fn device_ignores_foreign_completions() {
    let _g = lock();
    let a = adapter(|_| {});
    fill(&a, 0, 0x1000);
    let dev = device(|c| c.tags = 0..1);
    // A CplD for another requester and random junk, sent from the adapter's port.
    let s = UdpSocket::bind(SocketAddrV4::new(
        pcielab_nettlp::loopback::in_net(crate::net(), 9),
        0,
    ))
    .expect("bind");
    let _ = s;
    let mut ch = dev.channel();
    let mut b = [0u8; 40];
    ch.dma_read(8, &mut b).expect("read");
    assert!(b
        .iter()
        .enumerate()
        .all(|(k, x)| *x == pattern(8 + k as u64)));
    // Config packets on 0x4001 are not TLPs: answered as configuration reads.
    let c = UdpSocket::bind(SocketAddrV4::new(dev_ip(), 0)).expect("bind");
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let p = CfgPacket {
        write: false,
        byte_mask: 0xf,
        dw_addr: 0,
        data: 0,
    };
    c.send_to(
        &p.to_bytes(),
        SocketAddrV4::new(ad_ip(), frame::CFG_PORT_LIBTLP),
    )
    .expect("send");
    let mut r = [0u8; 16];
    let n = c.recv(&mut r).expect("config reply");
    assert_eq!(&r[..n], &[0x3c, 0, 0x80, 0x22, 0x37, 0x76]);
}

/// A hand-made completer on the adapter's address, port 0x3000 (no adapter): answers the device's one MRd
/// with the completion `make` builds from the request's tag.
fn fake_completer(
    make: impl Fn(pcielab_wire::Tag) -> Vec<u8> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let s = UdpSocket::bind(SocketAddrV4::new(ad_ip(), 0x3000)).expect("bind fake adapter");
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    std::thread::spawn(move || {
        let mut b = [0u8; 64];
        if let Ok((n, from)) = s.recv_from(&mut b) {
            let tlp = pcielab_wire::tlp::TlpRepr::parse_bytes(&b[6..n]).expect("MRd");
            let reply = make(tlp.tag());
            s.send_to(&reply, from).expect("send");
        }
    })
}

fn cpl_bytes(status: u8, requester: u16, tag: u8, data: &[u8], poisoned: bool) -> Vec<u8> {
    // NetTLP header, then Cpl/CplD by hand: DW0 Fmt/Type, EP bit, Length; DW1 completer,
    // status, Byte Count; DW2 requester, tag, Lower Address 0.
    let len_dw = data.len() / 4;
    let mut v = vec![0u8; 6];
    v.push(if data.is_empty() { 0x0a } else { 0x4a });
    v.push(0);
    v.push(if poisoned { 0x40 } else { 0 });
    v.push(len_dw as u8);
    v.extend_from_slice(&[0x00, 0x00, status << 5, 16]);
    v.extend_from_slice(&requester.to_be_bytes());
    v.push(tag);
    v.push(0);
    v.extend_from_slice(data);
    v
}

#[test]
fn completer_abort_poison_and_foreign_requester() {
    let _g = lock();
    let dev = device(|c| {
        c.tags = 0..1;
        c.timeout = Duration::from_millis(100);
    });
    let mut b = [0u8; 16];
    // Completer Abort: a Cpl without data, status 100b.
    let h = fake_completer(|t| cpl_bytes(0b100, 0x1b00, t.value() as u8, &[], false));
    let e = dev.dma_read(0x2000, &mut b).expect_err("CA");
    assert!(
        matches!(
            e,
            DmaError::CompleterAbort {
                addr: 0x2000,
                tag: 0
            }
        ),
        "{e}"
    );
    h.join().expect("fake");
    // Poisoned data: an error, and the data is not delivered.
    std::thread::sleep(Duration::from_millis(120)); // the tag's quarantine
    let h = fake_completer(|t| cpl_bytes(0, 0x1b00, t.value() as u8, &[0xaa; 16], true));
    b.fill(0);
    let e = dev.dma_read(0x2000, &mut b).expect_err("poisoned");
    assert!(
        matches!(
            e,
            DmaError::Completion {
                error: pcielab_wire::dma::CplError::Poisoned { .. },
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(b, [0u8; 16], "poisoned data is not written");
    h.join().expect("fake");
    // A completion for another requester (1c:00) is not ours: ignored, then a timeout.
    std::thread::sleep(Duration::from_millis(120));
    let h = fake_completer(|t| cpl_bytes(0, 0x1c00, t.value() as u8, &[0xbb; 16], false));
    let e = dev
        .dma_read(0x2000, &mut b)
        .expect_err("foreign completion");
    assert!(matches!(e, DmaError::Timeout { .. }), "{e}");
    assert_eq!(b, [0u8; 16]);
    h.join().expect("fake");
}
