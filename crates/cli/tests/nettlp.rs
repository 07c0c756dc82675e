//! `pcielab adapter`, `psmem`, `dma`, `tlpperf` end to end on loopback (adapter
//! 127.0.0.1, devices 127.0.0.2).

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pcielab");

/// Loopback addresses of one test's own in a random 127.x.y.0/24: (adapter, device,
/// stranger, control socket), so that other NetTLP programs on 127.0.0.1 do not clash.
fn net() -> (String, String, String, String) {
    let n = pcielab_nettlp::loopback::random_net();
    let at = |host| pcielab_nettlp::loopback::in_net(n, host).to_string();
    (at(10), at(20), at(30), format!("{}:12286", at(10)))
}

/// The tests bind the same loopback ports (some of the bad-argument runs bind them
/// before they fail): they take turns.
static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn ports() -> std::sync::MutexGuard<'static, ()> {
    PORTS.lock().unwrap_or_else(|p| p.into_inner())
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run pcielab")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn spawn(args: &[&str]) -> Kill {
    Kill(
        Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn pcielab"),
    )
}

/// Retries a command until it succeeds (the background processes need a moment to bind).
fn eventually(args: &[&str]) -> Output {
    until(args, |o| o.status.success())
}

/// Retries a command until its output satisfies `done` (or 15 s have passed: a loaded
/// machine may be slow to schedule the background processes).
fn until(args: &[&str], done: impl Fn(&Output) -> bool) -> Output {
    let end = Instant::now() + Duration::from_secs(15);
    loop {
        let o = run(args);
        if done(&o) || Instant::now() > end {
            return o;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn adapter_psmem_dma_tlpperf_session() {
    let _ports = ports();
    let dir = std::env::temp_dir().join(format!("pcielab-cli-nettlp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("tlpperf.pcap");
    let pcap = pcap.to_str().expect("utf-8 path");
    let (ad, dev, _, ctl) = net();
    let (ad, dev, ctl) = (ad.as_str(), dev.as_str(), ctl.as_str());
    let _adapter = spawn(&[
        "adapter",
        "--duration",
        "30",
        "--listen",
        ad,
        "--device",
        dev,
        "--control",
        ctl,
    ]);
    let o = eventually(&["adapter", "stats", "--control", ctl]);
    assert!(o.status.success(), "{}", text(&o));
    let _psmem = spawn(&[
        "psmem",
        "--duration",
        "30",
        "--size",
        "64K",
        "-r",
        ad,
        "-l",
        dev,
    ]);
    // Host MMIO through psmem (the first read also waits for psmem to be up).
    let o = eventually(&["adapter", "read", "0x0", "4", "--control", ctl]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "00000000",
        "{}",
        text(&o)
    );
    let o = run(&["adapter", "write", "0x21", "cafe0042", "--control", ctl]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["adapter", "read", "0x20", "6", "--control", ctl]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "00cafe004200",
        "{}",
        text(&o)
    );
    // A reply over 64 KiB (32 KiB as hex) arrives whole.
    let o = run(&["adapter", "read", "0x0", "32768", "--control", ctl]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(t.trim().len(), 65536);
    assert_eq!(&t[64..76], "00cafe004200"); // bytes 0x20..0x26
                                            // Outside psmem's 64 KiB: Completer Abort, exit status 2.
    let o = run(&["adapter", "read", "0x10000", "4", "--control", ctl]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("Completer Abort"), "{}", text(&o));
    // Device-side DMA into host memory.
    let o = run(&[
        "dma", "write", "-r", ad, "-l", dev, "-a", "0x1003", "-p", "hello",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "dma", "read", "-r", ad, "-l", dev, "-a", "0x1002", "-s", "7",
    ]);
    assert!(text(&o).contains("00 68 65 6c 6c 6f 00"), "{}", text(&o));
    // tlpperf with a capture.
    let o = run(&[
        "tlpperf", "-r", ad, "-l", dev, "-d", "read", "-L", "300", "-t", "0.3", "--pcap", pcap,
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("Gb/s") && t.contains("latency p50") && t.contains("p999"),
        "{t}"
    );
    let cap = std::fs::read(pcap).expect("pcap written");
    assert_eq!(&cap[..4], &[0x4d, 0x3c, 0xb2, 0xa1]); // pcap, nanosecond timestamps
                                                      // First record: a 3DW MRd → 14 + 20 + 8 + 6 + 12 = 60 bytes.
    assert_eq!(&cap[24 + 8..24 + 12], &60u32.to_le_bytes());
    // The capture crate's reader decodes it and pairs each CplD with its MRd.
    let o = run(&["dump", pcap]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("MRd 3DW 1b:00.0") && t.contains("CplD 00:00.0 -> 1b:00.0"),
        "{t}"
    );
    assert!(t.contains("(reply to #"), "{t}");
    // An MSI-X write is an interrupt: vector 1 is 0xfee01000 / 0x4021 by default.
    let o = run(&[
        "dma",
        "write",
        "-r",
        ad,
        "-l",
        dev,
        "-a",
        "0xfee01000",
        "--hex",
        "21400000",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // The write is posted: the adapter records the interrupt when the datagram arrives,
    // which may be after `dma write` has exited.
    let o = until(&["adapter", "irqs", "--control", ctl], |o| {
        text(o).contains("MSI-X vector 1")
    });
    assert!(text(&o).contains("MSI-X vector 1"), "{}", text(&o));
    let o = run(&["adapter", "stop", "--control", ctl]);
    assert!(o.status.success(), "{}", text(&o));
    // A script run: commands, then exit.
    let script = dir.join("s.txt");
    std::fs::write(
        &script,
        "# host memory\nmem-write 0x100 a1b2c3\nsleep 1\nmem-read 0xff 5\n",
    )
    .expect("script");
    let end = Instant::now() + Duration::from_secs(5);
    let o = loop {
        // The first adapter may still be releasing its ports.
        let o = run(&[
            "adapter",
            "--script",
            script.to_str().expect("utf-8"),
            "--listen",
            ad,
            "--device",
            dev,
            "--control",
            ctl,
        ]);
        if o.status.success() || Instant::now() > end {
            break o;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("ok 00a1b2c300"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_exit_2() {
    let _ports = ports();
    for args in [
        &["adapter", "--window", "0x10"][..],
        &["adapter", "--control", "192.0.2.1:12286", "--duration", "1"],
        &["tlpperf", "-N", "17"],
        &["dma", "read", "-a", "zz", "-s", "4"],
        &["psmem", "--bar4", "0x0", "-b", "1b", "--duration", "0"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).starts_with("pcielab: "),
            "{args:?}"
        );
    }
}

#[test]
fn refused_source_is_logged_once_and_loopback_needs_no_allow() {
    let (ad, dev, stranger, ctl) = net();
    let mut adapter = spawn(&[
        "adapter",
        "--duration",
        "20",
        "--listen",
        &ad,
        "--device",
        &dev,
        "--control",
        &ctl,
    ]);
    let o = eventually(&["adapter", "stats", "--control", &ctl]);
    assert!(o.status.success(), "{}", text(&o));
    let to: std::net::SocketAddr = format!("{ad}:12287").parse().expect("addr");
    let x = std::net::UdpSocket::bind(format!("{stranger}:0")).expect("bind");
    for _ in 0..3 {
        x.send_to(&1u32.to_le_bytes(), to).expect("send");
    }
    // An unbound socket (source 127.0.0.1) is answered without --allow.
    let u = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
    u.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    u.send_to(&1u32.to_le_bytes(), to).expect("send");
    let mut b = [0u8; 8];
    assert_eq!(u.recv(&mut b).expect("BAR4 reply"), 8);
    let o = until(&["adapter", "stats", "--control", &ctl], |o| {
        text(o).contains("\"drop_not_allowed\":3")
    });
    assert!(text(&o).contains("\"drop_not_allowed\":3"), "{}", text(&o));
    let o = run(&["adapter", "stop", "--control", &ctl]);
    assert!(o.status.success(), "{}", text(&o));
    let _ = adapter.0.wait();
    let mut err = String::new();
    use std::io::Read;
    adapter
        .0
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    let line = format!("refusing datagrams from {stranger} ");
    assert_eq!(err.matches(&line).count(), 1, "{err}");
    assert!(err.contains(&format!("--allow {stranger}")), "{err}");
}

/// tlpperf and dma say when a run failed, with exit status 2: nothing to run (`-t 0`),
/// posted writes to no adapter (the kernel refuses them), an acknowledged write the
/// adapter refused.
#[test]
fn failed_runs_exit_2_and_say_why() {
    let (ad, dv, _, _) = net();
    let o = run(&["tlpperf", "-r", &ad, "-l", &dv, "-t", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("-t 0: seconds to run must be above 0"),
        "{}",
        text(&o)
    );
    // No adapter: every write is refused by the kernel (port unreachable).
    let o = run(&["tlpperf", "-r", &ad, "-l", &dv, "-d", "write", "-t", "0.3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("could not be sent"), "{}", text(&o));
    let _g = ports();
    let _a = spawn(&[
        "adapter",
        "--listen",
        &ad,
        "--device",
        &dv,
        "--ack-writes",
        "--duration",
        "20",
    ]);
    let o = eventually(&[
        "dma",
        "write",
        "--adapter",
        &ad,
        "--local",
        &dv,
        "--acked",
        "-a",
        "0x1000",
        "--hex",
        "41414141",
    ]);
    assert!(text(&o).contains("(acknowledged)"), "{}", text(&o));
    let o = run(&[
        "dma",
        "write",
        "--adapter",
        &ad,
        "--local",
        &dv,
        "--acked",
        "-a",
        "0x7fffffff000",
        "--hex",
        "41414141",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("refused the write"), "{}", text(&o));
    assert!(!text(&o).contains("(acknowledged)"), "{}", text(&o));
}

/// Machine-readable output of the NetTLP commands: `dma` (a record), `psmem` (a start
/// and a stop object per line), `tlpperf` (one object, or one CSV row).
#[test]
fn nettlp_commands_print_json_and_csv() {
    let (ad, dv, _, _) = net();
    let _g = ports();
    let _a = spawn(&[
        "adapter",
        "--listen",
        &ad,
        "--device",
        &dv,
        "--duration",
        "20",
    ]);
    let o = until(
        &[
            "psmem",
            "-r",
            &ad,
            "-l",
            &dv,
            "--duration",
            "0.2",
            "--format",
            "json",
        ],
        |o| o.status.success(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", text(&o));
    assert_eq!(lines[0]["event"], "start");
    assert_eq!(lines[1]["event"], "stop");
    assert_eq!(lines[1]["reads"], 0);
    let o = eventually(&[
        "dma",
        "write",
        "--adapter",
        &ad,
        "--local",
        &dv,
        "-a",
        "0x2000",
        "--hex",
        "a1b2c3",
        "--format",
        "json",
    ]);
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(w["op"], "write");
    assert_eq!(w["bytes"], 3);
    assert_eq!(w["address"], "0x2000");
    let o = eventually(&[
        "dma",
        "read",
        "--adapter",
        &ad,
        "--local",
        &dv,
        "-a",
        "0x2000",
        "-s",
        "3",
        "--format",
        "json",
    ]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["data"], "a1b2c3", "{r}");
    let o = run(&[
        "dma",
        "read",
        "--adapter",
        &ad,
        "--local",
        &dv,
        "-a",
        "0x2000",
        "-s",
        "3",
        "--format",
        "csv",
    ]);
    let csv = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(csv, "address,bytes,data,op\n0x2000,3,a1b2c3,read\n");
    let o = run(&[
        "tlpperf", "-r", &ad, "-l", &dv, "-t", "0.3", "-L", "64", "--format", "csv",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let csv = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut l = csv.lines();
    let head: Vec<&str> = l.next().unwrap().split(',').collect();
    let row: Vec<&str> = l.next().unwrap().split(',').collect();
    assert_eq!(head.len(), row.len(), "{csv}");
    let at = |c: &str| row[head.iter().position(|x| *x == c).unwrap()];
    assert_eq!(at("direction"), "read");
    assert_eq!(at("size"), "64");
}

/// Waits (bounded) for a spawned command to exit; returns its status and its standard
/// output and error.
fn finish(k: &mut Kill, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    use std::io::Read;
    let end = Instant::now() + limit;
    let status = loop {
        match k.0.try_wait().expect("try_wait") {
            Some(s) => break Some(s),
            None if Instant::now() > end => {
                let _ = k.0.kill();
                let _ = k.0.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
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

/// `pcielab snic-device --loopback` served, driven by `pcielab snic`: the frames sent
/// come back, byte for byte and in order, and the device prints its counters when
/// stopped by SIGTERM.
#[test]
fn snic_device_on_loopback_returns_the_frames_of_pcielab_snic() {
    let (ad, dev, _, _) = net();
    let frames: Vec<String> = [14usize, 60, 1514]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| format!("{:02x}", (i * 7 + k * 91) as u8))
                .collect()
        })
        .collect();
    let mut args = vec![
        "snic",
        "--listen",
        &ad,
        "--device",
        &dev,
        "--wait-device",
        "20",
        "--recv",
        "3",
        "--duration",
        "20",
        "--timeout-ms",
        "2000",
    ];
    for f in &frames {
        args.extend(["--send", f.as_str()]);
    }
    // The adapter host first (`pcielab snic` is one): the device asks its messaging
    // API for BAR4 and the MSI-X table when it starts.
    let mut host = spawn(&args);
    let t0 = Instant::now();
    // The device is up once it prints its start line (it exits at once, saying why,
    // when the adapter's messaging API does not answer yet: then start it again).
    let (mut device, mut device_out, first) = loop {
        use std::io::BufRead;
        let mut d = spawn(&[
            "snic-device",
            "-r",
            &ad,
            "-l",
            &dev,
            "--loopback",
            "--duration",
            "30",
        ]);
        let mut r = std::io::BufReader::new(d.0.stdout.take().expect("piped"));
        let mut first = String::new();
        let _ = r.read_line(&mut first);
        if first.starts_with("snic-device: BAR4") {
            break (d, r, first);
        }
        let (_, out) = finish(&mut d, Duration::from_secs(5));
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "snic-device never started: {first}{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (status, out) = finish(&mut host, Duration::from_secs(25));
    assert!(status.is_some_and(|s| s.success()), "pcielab snic: {out}");
    let got: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("snic: received "))
        .map(|l| l.split(' ').nth(2).unwrap_or(""))
        .collect();
    assert_eq!(
        got,
        frames.iter().map(String::as_str).collect::<Vec<_>>(),
        "{out}"
    );
    assert!(out.contains("snic: 3 sent, 3 received"), "{out}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(device.0.id() as i32, libc::SIGTERM) };
    let (status, err) = finish(&mut device, Duration::from_secs(10));
    let mut out = first;
    {
        use std::io::Read;
        let _ = device_out.read_to_string(&mut out);
    }
    out.push_str(&err);
    assert!(status.is_some_and(|s| s.success()), "snic-device: {out}");
    assert!(out.contains("MAC loopback"), "{out}");
    assert!(
        out.contains("3 frames sent (1588 B), 3 received (1588 B)"),
        "{out}"
    );
    assert!(
        out.contains(
            "dropped: 0 by the MAC side, 0 with no RX buffer, 0 of a bad size; 0 still waiting"
        ),
        "{out}"
    );
    let counters: serde_json::Value = out
        .lines()
        .find_map(|l| l.strip_prefix("snic-device: counters "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_else(|| panic!("no counters line: {out}"));
    assert_eq!(counters["commands_dropped"], 0, "{out}");
    // `pcielab snic` posts one more RX buffer after the last frame and exits: the
    // device's read of that descriptor may find the adapter gone (counted, at most once).
    let dma = counters["rx_dma_errors"].as_u64().unwrap();
    assert!(dma <= 1, "{out}");
    assert_eq!(counters["errors"].as_u64(), Some(dma), "{out}");
}

/// Starts `pcielab snic-device --loopback` with `extra` arguments for the adapter at
/// `ad` (retrying while the adapter's messaging API is not up yet, bounded).
fn start_snic_device(ad: &str, dev: &str, extra: &[&str]) -> Kill {
    use std::io::BufRead;
    let t0 = Instant::now();
    loop {
        let mut args = vec!["snic-device", "-r", ad, "-l", dev, "--loopback"];
        args.extend(["--duration", "20"]);
        args.extend(extra);
        let mut d = spawn(&args);
        let mut r = std::io::BufReader::new(d.0.stdout.take().expect("piped"));
        let mut first = String::new();
        let _ = r.read_line(&mut first);
        if first.starts_with("snic-device: BAR4") {
            return d;
        }
        let (_, out) = finish(&mut d, Duration::from_secs(5));
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "snic-device never started: {first}{out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A simple-nic device started with its own BAR4 and ID (`-a`, `-b`) works with
/// `pcielab snic --bar4 --devid` set to the same; with another ID than the adapter's,
/// `pcielab snic` fails naming the Completer ID of the completions it dropped.
#[test]
fn snic_takes_the_bar4_and_device_id_of_a_device_given_its_own() {
    let (ad, dev, _, _) = net();
    let mut args = vec!["snic", "--listen", &ad, "--device", &dev];
    args.extend(["--wait-device", "10", "--duration", "10"]);
    args.extend(["--send", "0011223344", "--recv", "1"]);
    args.extend(["--bar4", "0x100000", "--devid", "01:00.0"]);
    let mut h = spawn(&args);
    let d = start_snic_device(&ad, &dev, &["-a", "0x100000", "-b", "01:00"]);
    let (status, out) = finish(&mut h, Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "pcielab snic: {out}");
    assert!(out.contains("BAR4 0x100000;"), "{out}");
    assert!(out.contains("snic: received 5 B 0011223344"), "{out}");
    drop(d);
    // The device completes as 01:00.0, the adapter expects its default 1b:00.0.
    let (ad, dev, _, _) = net();
    let mut args = vec!["snic", "--listen", &ad, "--device", &dev];
    args.extend(["--wait-device", "2", "--recv", "1"]);
    let mut h = spawn(&args);
    let _d = start_snic_device(&ad, &dev, &["-b", "01:00"]);
    let (status, out) = finish(&mut h, Duration::from_secs(20));
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{out}");
    assert!(
        out.contains("dropped a completion meanwhile: tag")
            && out.contains("Completer ID 01:00.0, expected 1b:00.0"),
        "{out}"
    );
}

/// `pcielab snic` checks its ring layout and its packets before it waits for the
/// device: each bad one exits 2 naming what is wrong (and no device is needed).
#[test]
fn snic_refuses_a_bad_layout_or_packet_before_waiting_for_the_device() {
    let (ad, dev, _, _) = net();
    for (args, want) in [
        (&["--entries", "0"][..], "entries 0 and buf_size 2048 must be non-zero"),
        (&["--buf-size", "0"][..], "entries 64 and buf_size 0 must be non-zero"),
        (
            &["--entries", "100000000"][..],
            "0x8000000..0x6024cc2000 (the rings and buffers) is outside the adapter's host memory windows",
        ),
        (
            &["--base", "0xffffffffffffff00"][..],
            "the rings and buffers of 64 entries of 2048 bytes from 0xffffffffffffff00 run past 2^64",
        ),
        (&["--send", ""][..], "--send #1: a packet of 0 bytes; allowed 1..=2048"),
        (
            &["--buf-size", "4", "--send", "00", "--send", "0011223344"][..],
            "--send #2: a packet of 5 bytes; allowed 1..=4 (--buf-size)",
        ),
    ] {
        let mut v = vec!["snic", "--listen", &ad, "--device", &dev, "--wait-device", "1"];
        v.extend(args);
        let o = run(&v);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(want), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("--wait-device"), "{args:?}: {}", text(&o));
    }
}

/// Spans of seconds that are not a finite number from 0 to a day are refused when the
/// flags are parsed (exit 2, naming the flag). `--wait-device nan` and `tlpperf -t nan
/// -c 5` used to panic making a `Duration`, `--duration nan` ran forever.
#[test]
fn seconds_flags_refuse_nan_infinity_and_out_of_range_values() {
    for (args, flag) in [
        (&["snic", "--wait-device", "nan"][..], "--wait-device"),
        (&["snic", "--duration", "inf"][..], "--duration"),
        (&["snic-device", "--duration", "nan"][..], "--duration"),
        (&["adapter", "--duration", "1e9"][..], "--duration"),
        (&["adapter", "--stats-every", "0"][..], "--stats-every"),
        (&["psmem", "--duration", "NaN"][..], "--duration"),
        (&["tlpperf", "-t", "nan", "-c", "5"][..], "--time"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(
            text(&o).contains(&format!("for '{flag} <")) && text(&o).contains("seconds"),
            "{args:?}: {}",
            text(&o)
        );
    }
}

/// `pcielab snic-device --tap` where a TAP interface cannot be had says why and exits
/// 2 (here: a name the kernel refuses; where /dev/net/tun is missing or the user lacks
/// CAP_NET_ADMIN, the message names that instead).
#[test]
fn snic_device_tap_failure_says_why() {
    let (ad, dev, _, _) = net();
    let o = run(&[
        "snic-device",
        "-r",
        &ad,
        "-l",
        &dev,
        "--tap",
        "a/b",
        "--duration",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--tap: TUNSETIFF"), "{}", text(&o));
    assert!(text(&o).contains("not an interface name"), "{}", text(&o));
    let o = run(&["snic-device", "--tap", "t0", "--loopback"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Without CAP_NET_ADMIN, `snic-device --tap` exits 2 naming the step that failed and
/// why (as root the test drops the capability with `setpriv`; a user without it needs
/// nothing dropped).
#[test]
fn snic_device_tap_without_cap_net_admin_says_so() {
    let (ad, dev, _, _) = net();
    let args = [
        "snic-device",
        "-r",
        &ad,
        "-l",
        &dev,
        "--tap",
        "pltapnocap",
        "--duration",
        "1",
    ];
    // SAFETY: geteuid(2) has no preconditions.
    let o = if unsafe { libc::geteuid() } == 0 {
        match Command::new("setpriv")
            .args([
                "--bounding-set",
                "-net_admin",
                "--inh-caps",
                "-net_admin",
                BIN,
            ])
            .args(args)
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                println!("skipped: running as root, and no setpriv to drop CAP_NET_ADMIN: {e}");
                return;
            }
        }
    } else {
        run(&args)
    };
    let t = text(&o);
    if !t.contains("--tap: ") {
        println!("skipped: this user can create TAP interfaces (CAP_NET_ADMIN): {t}");
        return;
    }
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("needs CAP_NET_ADMIN"), "{t}");
    assert!(
        t.contains("--tap: TUNSETIFF: Operation not permitted")
            || t.contains("--tap: opening /dev/net/tun: Permission denied"),
        "{t}"
    );
}
