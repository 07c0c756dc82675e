//! `adapter --pcap`, `psmem --pcap` and `tlpperf --pcap` stopped by SIGINT or SIGTERM:
//! the capture holds every datagram seen, and the final counters are printed. Each test
//! runs on a random loopback address pair of its own and is bounded in time.

use std::io::Read;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pcielab");

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// (adapter, device): random in 127.0.0.0/8, outside 127.0.0.x.
fn own_addrs() -> (Ipv4Addr, Ipv4Addr) {
    pcielab_nettlp::loopback::random_pair()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcielab-cli-signals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn spawn(args: &[String]) -> Kill {
    Kill(
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pcielab"),
    )
}

fn run(args: &[String]) -> Output {
    Command::new(BIN).args(args).output().expect("run pcielab")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Retries a command until it succeeds (bounded: 15 s).
/// An adapter on `a` for a device on `d`, with its control socket on `ctl`, running
/// (for at most 60 s) once it answers `stats`.
fn adapter_ready(a: &str, d: &str, ctl: &str) -> Kill {
    let adapter = spawn(&s(&[
        "adapter",
        "--listen",
        a,
        "--device",
        d,
        "--control",
        ctl,
        "--duration",
        "60",
    ]));
    let o = eventually(&s(&["adapter", "stats", "--control", ctl]));
    assert!(o.status.success(), "{}", text(&o));
    adapter
}

fn eventually(args: &[String]) -> Output {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let o = run(args);
        if o.status.success() || Instant::now() > end {
            return o;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `sig` to the child and waits (at most 10 s) for it to exit; returns its output.
fn signal_and_wait(k: &mut Kill, sig: &str) -> (std::process::ExitStatus, String) {
    let st = Command::new("kill")
        .args([sig, &k.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig}");
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = k.0.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < end, "did not exit within 10 s of {sig}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    if let Some(mut o) = k.0.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = k.0.stderr.take() {
        let _ = e.read_to_string(&mut out);
    }
    (status, out)
}

/// One record of a classic pcap file: (UDP source port, UDP destination port, UDP
/// payload), parsed by hand from the Ethernet/IPv4/UDP layout.
type Rec = (u16, u16, Vec<u8>);

fn read_pcap(p: &Path) -> Vec<Rec> {
    let f = std::fs::read(p).expect("read the capture");
    assert!(
        f.len() >= 24,
        "{}: {} bytes, no pcap header",
        p.display(),
        f.len()
    );
    assert_eq!(
        &f[0..4],
        &[0x4d, 0x3c, 0xb2, 0xa1],
        "nanosecond pcap, little endian"
    );
    let mut v = Vec::new();
    let mut i = 24;
    while i + 16 <= f.len() {
        let incl = u32::from_le_bytes([f[i + 8], f[i + 9], f[i + 10], f[i + 11]]) as usize;
        let fr = &f[i + 16..i + 16 + incl];
        assert_eq!(&fr[12..14], &[0x08, 0x00], "IPv4");
        let ihl = (fr[14] & 0xf) as usize * 4;
        let udp = &fr[14 + ihl..];
        let sp = u16::from_be_bytes([udp[0], udp[1]]);
        let dp = u16::from_be_bytes([udp[2], udp[3]]);
        let len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
        v.push((sp, dp, udp[8..len].to_vec()));
        i += 16 + incl;
    }
    assert_eq!(i, f.len(), "the capture ends on a record boundary");
    v
}

#[test]
fn adapter_pcap_survives_sigint() {
    let (ad, dv) = own_addrs();
    let (a, d) = (ad.to_string(), dv.to_string());
    let ctl = format!("{ad}:12286");
    let pcap = tmp("adapter.pcap");
    let mut adapter = spawn(&s(&[
        "adapter",
        "--listen",
        &a,
        "--device",
        &d,
        "--control",
        &ctl,
        "--duration",
        "60",
        "--pcap",
        pcap.to_str().expect("utf-8"),
    ]));
    let dev = |extra: &[&str]| {
        let mut v = s(&["dma"]);
        v.extend(s(extra));
        v.extend(s(&["-r", &a, "-l", &d, "-b", "1b:00"]));
        v
    };
    let o = eventually(&s(&["adapter", "stats", "--control", &ctl]));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&dev(&["write", "-a", "0x1000", "--hex", "a1b2c3d4"]));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&dev(&["read", "-a", "0x1000", "-s", "4"]));
    assert!(
        o.status.success() && text(&o).contains("a1 b2 c3 d4"),
        "{}",
        text(&o)
    );
    let (status, out) = signal_and_wait(&mut adapter, "-INT");
    assert!(status.success(), "{status}: {out}");
    assert!(out.contains("stopped by a signal"), "{out}");
    assert!(
        out.contains("\"mwr\":1") && out.contains("\"mrd\":1"),
        "{out}"
    );
    // Exactly the three datagrams: MWr in, MRd in, CplD out, in that order.
    let r = read_pcap(&pcap);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!((0x3000..=0x30ff).contains(&r[0].1));
    assert_eq!(r[0].2[6], 0x40, "3DW MWr");
    assert_eq!(&r[0].2[r[0].2.len() - 4..], &[0xa1, 0xb2, 0xc3, 0xd4]);
    assert_eq!(r[1].2[6], 0x00, "3DW MRd");
    assert_eq!(r[2].2[6], 0x4a, "CplD");
    assert_eq!(&r[2].2[18..22], &[0xa1, 0xb2, 0xc3, 0xd4]);
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn psmem_pcap_survives_sigterm() {
    let (ad, dv) = own_addrs();
    let (a, d) = (ad.to_string(), dv.to_string());
    let ctl = format!("{ad}:12286");
    let pcap = tmp("psmem.pcap");
    let _adapter = adapter_ready(&a, &d, &ctl);
    let mut psmem = spawn(&s(&[
        "psmem",
        "-r",
        &a,
        "-l",
        &d,
        "-a",
        "0x200000000",
        "-b",
        "1b:00",
        "--threads",
        "1",
        "--pcap",
        pcap.to_str().expect("utf-8"),
    ]));
    // The first write may come before psmem listens; retry until a read returns it.
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let w = run(&s(&[
            "adapter",
            "write",
            "0x40",
            "0badcafe",
            "--control",
            &ctl,
        ]));
        let r = run(&s(&["adapter", "read", "0x40", "4", "--control", &ctl]));
        if w.status.success() && text(&r).contains("0badcafe") {
            break;
        }
        assert!(Instant::now() < end, "psmem never answered: {}", text(&r));
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, out) = signal_and_wait(&mut psmem, "-TERM");
    assert!(status.success(), "{status}: {out}");
    assert!(out.contains("stopped by a signal"), "{out}");
    let writes: u64 = out
        .split("psmem: ")
        .find_map(|l| l.split(" writes").next()?.rsplit(' ').next()?.parse().ok())
        .expect("psmem counters line");
    assert!(writes >= 1, "{out}");
    // Every MWr psmem applied is in the capture, and the last one carries our bytes.
    let r = read_pcap(&pcap);
    // MWr: Fmt 010 or 011 (3DW or 4DW header; BAR4 is above 4 GiB), Type 0.
    let mwr: Vec<&Rec> = r
        .iter()
        .filter(|x| x.2.len() > 6 && x.2[6] & 0xdf == 0x40)
        .collect();
    assert_eq!(mwr.len() as u64, writes, "{out}");
    let last = mwr.last().expect("an MWr");
    assert!((0x4000..=0x400f).contains(&last.1), "host-issued port");
    assert_eq!(&last.2[last.2.len() - 4..], &[0x0b, 0xad, 0xca, 0xfe]);
    // And the read's completion, sent by psmem.
    assert!(r
        .iter()
        .any(|x| x.2.len() > 6 && x.2[6] == 0x4a && x.2.ends_with(&[0x0b, 0xad, 0xca, 0xfe])));
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn tlpperf_pcap_survives_sigint() {
    let (ad, dv) = own_addrs();
    let (a, d) = (ad.to_string(), dv.to_string());
    let ctl = format!("{ad}:12286");
    let pcap = tmp("tlpperf.pcap");
    let _adapter = adapter_ready(&a, &d, &ctl);
    let t0 = Instant::now();
    let mut perf = spawn(&s(&[
        "tlpperf",
        "-r",
        &a,
        "-l",
        &d,
        "-b",
        "1b:00",
        "-d",
        "read",
        "-L",
        "64",
        "-t",
        "5",
        "--pcap",
        pcap.to_str().expect("utf-8"),
    ]));
    std::thread::sleep(Duration::from_millis(1500));
    let (status, out) = signal_and_wait(&mut perf, "-INT");
    assert!(
        t0.elapsed() < Duration::from_millis(4500),
        "stopped early: {out}"
    );
    assert!(status.success(), "{status}: {out}");
    assert!(out.contains("stopped by a signal"), "{out}");
    // "device counters: N MRd, 0 MWr, C completions, 0 stale, ..."
    let counters = out
        .lines()
        .find_map(|l| l.strip_prefix("tlpperf: device counters: "))
        .expect("counters line");
    let nums: Vec<u64> = counters
        .split(", ")
        .map(|f| {
            f.split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("number")
        })
        .collect();
    let (mrd, cpl, stale) = (nums[0], nums[2], nums[3]);
    assert!(mrd > 0 && stale == 0, "{out}");
    // Every MRd sent and every completion taken is in the capture.
    let r = read_pcap(&pcap);
    let rd = r.iter().filter(|x| x.2[6] == 0x00).count() as u64;
    let cp = r.iter().filter(|x| x.2[6] == 0x4a).count() as u64;
    assert_eq!((rd, cp), (mrd, cpl), "{out}");
    let _ = std::fs::remove_file(&pcap);
}

/// `pcielab snic` without a simple-nic device: the driver's first send waits for the TX
/// interrupt and fails with a clear message, in bounded time.
#[test]
fn snic_without_a_device_says_so() {
    let (ad, dv) = own_addrs();
    let t0 = Instant::now();
    let o = run(&s(&[
        "snic",
        "--listen",
        &ad.to_string(),
        "--device",
        &dv.to_string(),
        "--send",
        "00112233445566778899aabb0800",
        "--timeout-ms",
        "300",
    ]));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("no TX interrupt within 300 ms"),
        "{}",
        text(&o)
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
}

/// `tlpperf -d write --control`: posted writes from two threads, counted by the adapter;
/// the JSON reports how many it applied and how many were lost (none).
#[test]
fn tlpperf_counts_posted_write_loss() {
    let (ad, dv) = own_addrs();
    let (a, d) = (ad.to_string(), dv.to_string());
    let ctl = format!("{ad}:12286");
    let _adapter = adapter_ready(&a, &d, &ctl);
    let o = run(&s(&[
        "tlpperf",
        "-r",
        &a,
        "-l",
        &d,
        "-b",
        "1b:00",
        "-d",
        "write",
        "-L",
        "1024",
        "-N",
        "2",
        "-c",
        "2000",
        "--control",
        &ctl,
        "--format",
        "json",
    ]));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    // 2 threads × 2000 writes × 4 MWr (1024 B at MPS 256).
    assert_eq!(v["device"]["mwr"], 16000, "{out}");
    assert_eq!(v["adapter_mwr_applied"], 16000, "{out}");
    assert_eq!(v["mwr_lost"], 0, "{out}");
    assert_eq!(v["result"]["ops"], 4000, "{out}");
}
