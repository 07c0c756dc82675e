//! `pcielab adapter`, `pcielab psmem`, `pcielab tlpperf`, `pcielab dma read|write`:
//! glue around `pcielab-nettlp`.

use crate::{fail, Failure};
use clap::{Args, Subcommand, ValueEnum};
use pcielab_nettlp::adapter::{Adapter, AdapterConfig, Compat, Faults};
use pcielab_nettlp::capture::{Capture, CaptureFile};
use pcielab_nettlp::client;
use pcielab_nettlp::control::{self, parse_hex, to_hex};
use pcielab_nettlp::device::{Device, DeviceConfig};
use pcielab_nettlp::handler::{serve, Handler, ServeConfig};
use pcielab_nettlp::memory::{parse_num, Window};
use pcielab_nettlp::perf::{self, Direction, Pattern, PerfConfig};
use pcielab_nettlp::psmem::Psmem;
use pcielab_wire::{Bdf, CplStatus};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn num(s: &str) -> Result<u64, String> {
    parse_num(s).ok_or_else(|| format!("{s:?} is not a byte size (decimal, 0x hex, or with K, M, G, T: 4096, 0x1000, 4K, 4KiB)"))
}

/// Parses a requester/completer ID: `BB:DF` (bus and devfn byte, as LibTLP's `-b`) or
/// `bb:dd.f`.
pub(crate) fn bdf(s: &str) -> Result<Bdf, String> {
    let bad = || format!("{s:?} is not a bus:devfn (e.g. 1b:00) or bb:dd.f");
    let (b, rest) = s.split_once(':').ok_or_else(bad)?;
    let bus = u8::from_str_radix(b, 16).map_err(|_| bad())?;
    if let Some((d, f)) = rest.split_once('.') {
        let d = u8::from_str_radix(d, 16).map_err(|_| bad())?;
        let f = u8::from_str_radix(f, 16).map_err(|_| bad())?;
        Bdf::new(bus, d, f).map_err(|e| format!("{s:?}: {e}"))
    } else {
        let devfn = u8::from_str_radix(rest, 16).map_err(|_| bad())?;
        Ok(Bdf::from_raw((bus as u16) << 8 | devfn as u16))
    }
}

/// Opens the `--pcap` file; every command flushes it with [`flush_pcap`] before exiting.
fn pcap(path: &Option<String>, wallclock: bool) -> Result<Option<Arc<dyn Capture>>, Failure> {
    match path {
        None => Ok(None),
        Some(p) => {
            let f = if wallclock {
                CaptureFile::create_wallclock(Path::new(p))
            } else {
                CaptureFile::create(Path::new(p))
            };
            let f = Arc::new(f.map_err(|e| fail(format!("{p}: {e}")))?);
            OPEN_CAPTURES
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(f.clone());
            Ok(Some(f))
        }
    }
}

static OPEN_CAPTURES: std::sync::Mutex<Vec<Arc<CaptureFile>>> = std::sync::Mutex::new(Vec::new());

/// SIGINT/SIGTERM stop the long-running commands cleanly (capture flushed, counters
/// printed); a second signal kills the process.
fn stop_flag() -> Result<&'static std::sync::atomic::AtomicBool, Failure> {
    pcielab_nettlp::sys::stop_on_signals()
        .map_err(|e| fail(format!("installing the SIGINT/SIGTERM handlers: {e}")))
}

/// Flushes the capture files at most once per `every` (`last` remembers when).
fn flush_pcap_every(last: &mut Instant, every: Duration) -> Result<(), Failure> {
    if last.elapsed() >= every {
        *last = Instant::now();
        flush_pcap()?;
    }
    Ok(())
}

/// Flushes the capture files (the process may exit with threads still holding them).
fn flush_pcap() -> Result<(), Failure> {
    for c in OPEN_CAPTURES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        c.flush()
            .map_err(|e| fail(format!("writing the capture: {e}")))?;
    }
    Ok(())
}

/// Completion shaping.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CompatArg {
    /// Like a real root complex (RCB/MPS splits).
    Strict,
    /// Single CplD for unaligned reads (upstream LibTLP reassembly bug).
    Libtlp,
}

/// `pcielab adapter`: the software adapter host, or a command to a running one.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AdapterArgs {
    /// Send a command to a running adapter's control socket instead of starting one.
    #[command(subcommand)]
    pub ctl: Option<AdapterCtl>,
    #[command(flatten)]
    pub run: AdapterRun,
}

/// Where a running adapter's control socket is, and its token.
#[derive(Args, Debug)]
pub struct CtlAt {
    /// Control socket.
    #[arg(long, default_value = "127.0.0.1:12286")]
    pub control: SocketAddr,
    /// The adapter's control token file (default: the one the adapter writes for
    /// --control, under $XDG_RUNTIME_DIR or a private per-user temporary directory).
    #[arg(long)]
    pub control_token: Option<String>,
}

/// Commands for a running adapter.
#[derive(Subcommand, Debug)]
pub enum AdapterCtl {
    /// Host MMIO read of BAR4: OFFSET LEN.
    Read {
        /// BAR4 offset.
        offset: String,
        /// Bytes (up to 1M).
        len: String,
        #[command(flatten)]
        at: CtlAt,
    },
    /// Host MMIO write to BAR4: OFFSET HEX.
    Write {
        /// BAR4 offset.
        offset: String,
        /// Data as hex.
        hex: String,
        #[command(flatten)]
        at: CtlAt,
    },
    /// Counters as JSON.
    Stats {
        #[command(flatten)]
        at: CtlAt,
    },
    /// Interrupts seen since the last call (removed once printed).
    Irqs {
        #[command(flatten)]
        at: CtlAt,
    },
    /// Stop the adapter.
    Stop {
        #[command(flatten)]
        at: CtlAt,
    },
}

/// Options of a running adapter.
#[derive(Args, Debug)]
pub struct AdapterRun {
    /// Address to bind (the adapter's side).
    #[arg(long, default_value = "127.0.0.1")]
    pub listen: Ipv4Addr,
    /// The device host (receives host-issued requests; always allowed).
    #[arg(long, default_value = "127.0.0.2")]
    pub device: Ipv4Addr,
    /// Further peers to accept (the device is always accepted, and with a loopback
    /// --listen also the listen address and 127.0.0.1, the source of unbound sockets).
    #[arg(long)]
    pub allow: Vec<Ipv4Addr>,
    /// Host memory window BASE:SIZE (repeatable; default 0x0:1G).
    #[arg(long)]
    pub window: Vec<String>,
    /// Load FILE at ADDR into host memory: FILE@ADDR (repeatable).
    #[arg(long)]
    pub image: Vec<String>,
    /// Max_Payload_Size of completions.
    #[arg(long, default_value_t = 256)]
    pub mps: u32,
    /// Read Completion Boundary.
    #[arg(long, default_value_t = 64)]
    pub rcb: u32,
    /// Completion shaping.
    #[arg(long, value_enum, default_value = "strict")]
    pub compat: CompatArg,
    /// BAR4 address reported by the messaging API.
    #[arg(long, default_value = "0x200000000")]
    pub bar4: String,
    /// BAR4 size in the adapter function's configuration space (a power of two ≥ 16K;
    /// BAR4 must be aligned to it).
    #[arg(long, default_value = "1M")]
    pub bar4_size: String,
    /// The adapter's device ID (bus:devfn).
    #[arg(long, default_value = "1b:00")]
    pub devid: String,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Acknowledge writes that ask for it (pcielab extension).
    #[arg(long)]
    pub ack_writes: bool,
    /// Control socket address (TCP, loopback only; allow-listed sources with the token).
    #[arg(long, default_value = "127.0.0.1:12286")]
    pub control: SocketAddr,
    /// Where to write the control token (mode 0600; default: under $XDG_RUNTIME_DIR, or
    /// a private per-user temporary directory).
    #[arg(long)]
    pub control_token: Option<String>,
    /// Run the control commands of FILE (one per line; `sleep MS` waits), then exit
    /// unless --duration is given.
    #[arg(long)]
    pub script: Option<String>,
    /// Stop after this many seconds (default: until `adapter stop`).
    #[arg(long, value_parser = crate::units::parse_seconds)]
    pub duration: Option<f64>,
    /// Print counters every this many seconds.
    #[arg(long, value_parser = crate::units::parse_period)]
    pub stats_every: Option<f64>,
    /// Log dropped datagrams and interrupts.
    #[arg(long)]
    pub log: bool,
    /// Record every datagram to this capture file (pcapng if it ends in .pcapng, else pcap).
    #[arg(long)]
    pub pcap: Option<String>,
    /// Wall-clock capture timestamps (seconds since 1970) instead of time since start.
    #[arg(long)]
    pub pcap_wallclock: bool,
    /// Fault injection: drop every N-th completion.
    #[arg(long, default_value_t = 0)]
    pub drop_cpl_every: u32,
    /// Fault injection: duplicate every N-th completion.
    #[arg(long, default_value_t = 0)]
    pub dup_cpl_every: u32,
}

fn ctl(at: &CtlAt, line: &str) -> Result<(), Failure> {
    let token = at.control_token.as_deref().map(Path::new);
    let r = control::request(at.control, token, line, Duration::from_secs(30))
        .map_err(|e| fail(e.to_string()))?;
    match r.strip_prefix("ok") {
        Some(rest) => {
            let rest = rest.trim_start();
            if !rest.is_empty() {
                println!("{rest}");
            }
            Ok(())
        }
        None => Err(fail(r.trim_start_matches("err ").to_string())),
    }
}

/// Runs `pcielab adapter`.
pub fn run_adapter(args: &AdapterArgs) -> Result<(), Failure> {
    if let Some(c) = &args.ctl {
        return match c {
            AdapterCtl::Read { offset, len, at } => ctl(at, &format!("read {offset} {len}")),
            AdapterCtl::Write { offset, hex, at } => ctl(at, &format!("write {offset} {hex}")),
            AdapterCtl::Stats { at } => ctl(at, "stats"),
            AdapterCtl::Irqs { at } => ctl(at, "irqs"),
            AdapterCtl::Stop { at } => ctl(at, "stop"),
        };
    }
    let r = &args.run;
    if !r.control.ip().is_loopback() {
        return Err(fail(format!(
            "--control {}: must be a loopback address",
            r.control
        )));
    }
    let mut cfg = AdapterConfig {
        listen: r.listen,
        device: r.device,
        allow: r.allow.clone(),
        mps: r.mps,
        rcb: r.rcb,
        compat: match r.compat {
            CompatArg::Strict => Compat::Strict,
            CompatArg::Libtlp => Compat::Libtlp,
        },
        bar4: num(&r.bar4).map_err(|e| fail(format!("--bar4: {e}")))?,
        bar4_size: num(&r.bar4_size).map_err(|e| fail(format!("--bar4-size: {e}")))?,
        device_id: bdf(&r.devid).map_err(|e| fail(format!("--devid: {e}")))?,
        threads: r.threads,
        ack_writes: r.ack_writes,
        faults: Faults {
            drop_cpl_every: r.drop_cpl_every,
            dup_cpl_every: r.dup_cpl_every,
        },
        log: r.log,
        capture: pcap(&r.pcap, r.pcap_wallclock)?,
        ..AdapterConfig::default()
    };
    if !r.window.is_empty() {
        cfg.windows = r
            .window
            .iter()
            .map(|w| Window::parse(w).map_err(|e| fail(format!("--window: {e}"))))
            .collect::<Result<_, _>>()?;
    }
    let windows: Vec<String> = cfg
        .windows
        .iter()
        .map(|w| format!("{:#x}+{:#x}", w.base, w.size))
        .collect();
    let a = Arc::new(Adapter::start(cfg).map_err(|e| fail(format!("adapter: {e}")))?);
    for img in &r.image {
        let (file, at) = img
            .rsplit_once('@')
            .ok_or_else(|| fail(format!("--image {img:?}: expected FILE@ADDR")))?;
        let addr = num(at).map_err(|e| fail(format!("--image: {e}")))?;
        let n = a
            .memory()
            .load_file(addr, Path::new(file))
            .map_err(|e| fail(format!("--image {file}: {e}")))?;
        println!("adapter: loaded {n} B from {file} at {addr:#x}");
    }
    let ctl_server = control::serve(
        a.clone(),
        r.control,
        r.control_token.as_deref().map(Path::new),
    )
    .map_err(|e| fail(format!("control socket {}: {e}", r.control)))?;
    println!(
        "adapter: listening on {} (TLP ports 0x3000-0x30ff, 0x4000-0x400f; messaging 0x2fff; config 0x4001/0x5001; commands 0x5002), device {}, BAR4 {:#x}, devid {}, windows [{}], MPS {}, RCB {}, {:?} completions, control {} (token in {})",
        r.listen,
        r.device,
        a.config().bar4,
        r.devid,
        windows.join(", "),
        r.mps,
        r.rcb,
        a.config().compat,
        ctl_server.addr(),
        ctl_server.token_file().display()
    );
    let stop = stop_flag()?;
    let start = Instant::now();
    if let Some(script) = &r.script {
        let text = std::fs::read_to_string(script).map_err(|e| fail(format!("{script}: {e}")))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(ms) = line.strip_prefix("sleep ") {
                let ms = num(ms).map_err(|e| fail(format!("{script}:{}: {e}", i + 1)))?;
                std::thread::sleep(Duration::from_millis(ms.min(600_000)));
                continue;
            }
            let reply = control::execute(&a, line);
            println!("> {line}\n{reply}");
            if reply.starts_with("err") {
                return Err(fail(format!(
                    "{script}:{}: {}",
                    i + 1,
                    reply.trim_start_matches("err ")
                )));
            }
        }
        if r.duration.is_none() {
            a.request_stop();
        }
    }
    let mut last = (Instant::now(), a.stats());
    // Printed as they come, without taking them: `adapter irqs` still lists them.
    let mut irq_seen = 0;
    let mut flushed = Instant::now();
    while !a.stop_requested() && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        flush_pcap_every(&mut flushed, Duration::from_secs(1))?;
        let (new, next) = a.interrupts_since(irq_seen);
        irq_seen = next;
        for irq in new {
            println!("adapter: interrupt: {irq}");
        }
        if let Some(d) = r.duration {
            if start.elapsed().as_secs_f64() >= d {
                break;
            }
        }
        if let Some(every) = r.stats_every {
            if last.0.elapsed().as_secs_f64() >= every {
                let s = a.stats();
                let dt = last.0.elapsed().as_secs_f64();
                println!(
                    "adapter: {:.0} TLPs/s in, {:.0} completions/s out, {} dropped",
                    (s.rx_tlps - last.1.rx_tlps) as f64 / dt,
                    (s.cpl_sent - last.1.cpl_sent) as f64 / dt,
                    s.dropped()
                );
                last = (Instant::now(), s);
            }
        }
    }
    let s = a.stats();
    if stop.load(Ordering::Relaxed) {
        println!("adapter: stopped by a signal");
    }
    println!("adapter: stopped; counters {}", s.to_json());
    a.request_stop();
    drop(ctl_server);
    flush_pcap()
}

/// `pcielab psmem`: the pseudo memory device.
#[derive(Args, Debug)]
pub struct PsmemArgs {
    /// The adapter's address.
    #[arg(short = 'r', long, default_value = "127.0.0.1")]
    pub adapter: Ipv4Addr,
    /// The local address.
    #[arg(short = 'l', long, default_value = "127.0.0.2")]
    pub local: Ipv4Addr,
    /// BAR4 address (default: ask the messaging API).
    #[arg(short = 'a', long)]
    pub bar4: Option<String>,
    /// Completer ID (bus:devfn; default: ask the messaging API).
    #[arg(short = 'b', long)]
    pub completer: Option<String>,
    /// Memory size.
    #[arg(long, default_value = "1M")]
    pub size: String,
    /// Threads (1..=16) over the 16 host-side ports.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Max_Payload_Size of completions.
    #[arg(long, default_value_t = 256)]
    pub mps: u32,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_parser = crate::units::parse_seconds)]
    pub duration: Option<f64>,
    /// Print every access.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Record every datagram to this capture file (pcapng if it ends in .pcapng, else pcap).
    #[arg(long)]
    pub pcap: Option<String>,
    /// Wall-clock capture timestamps (seconds since 1970) instead of time since start.
    #[arg(long)]
    pub pcap_wallclock: bool,
    /// Output format: table (text lines), csv (the final counters, one row) or json (one
    /// object per line: "start", then "stop" with the counters).
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::format::Format,
}

#[derive(Debug)]
struct Verbose(Arc<Psmem>);

impl Handler for Verbose {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), CplStatus> {
        let r = self.0.read(addr, out);
        match r {
            Ok(()) => println!(
                "psmem: MRd {addr:#x} {} B -> {}",
                out.len(),
                to_hex(&out[..out.len().min(32)])
            ),
            Err(s) => println!("psmem: MRd {addr:#x} {} B -> {}", out.len(), s.name()),
        }
        r
    }
    fn write(&self, addr: u64, data: &[u8]) {
        println!(
            "psmem: MWr {addr:#x} {} B {}",
            data.len(),
            to_hex(&data[..data.len().min(32)])
        );
        self.0.write(addr, data)
    }
}

/// Runs `pcielab psmem`.
pub fn run_psmem(args: &PsmemArgs) -> Result<(), Failure> {
    let bar4 = match &args.bar4 {
        Some(s) => num(s).map_err(|e| fail(format!("--bar4: {e}")))?,
        None => client::get_bar4(args.adapter, args.local)
            .map_err(|e| fail(format!("BAR4 from the messaging API: {e}")))?,
    };
    let completer = match &args.completer {
        Some(s) => bdf(s).map_err(|e| fail(format!("-b: {e}")))?,
        None => Bdf::from_raw(
            client::get_dev_id(args.adapter, args.local)
                .map_err(|e| fail(format!("device ID from the messaging API: {e}")))?,
        ),
    };
    let size = num(&args.size).map_err(|e| fail(format!("--size: {e}")))?;
    if size == 0 || size > 1 << 32 {
        return Err(fail("--size must be 1..=4G"));
    }
    let mem = Arc::new(Psmem::new(bar4, size as usize));
    let cfg = ServeConfig {
        adapter: args.adapter,
        local: args.local,
        completer,
        threads: args.threads,
        mps: args.mps,
        capture: pcap(&args.pcap, args.pcap_wallclock)?,
        ..ServeConfig::default()
    };
    let server = if args.verbose {
        serve(cfg, Arc::new(Verbose(mem.clone())))
    } else {
        serve(cfg, mem.clone())
    }
    .map_err(|e| fail(format!("psmem: {e}")))?;
    let fmt = args.format;
    let start_text = format!(
        "psmem: {} B at BAR4 {bar4:#x}, completer {completer}, {} threads on {}:0x4000-0x400f",
        size, args.threads, args.local
    );
    match fmt {
        crate::format::Format::Table => println!("{start_text}"),
        crate::format::Format::Json => println!(
            "{}",
            serde_json::json!({
                "event": "start", "size": size, "bar4": format!("{bar4:#x}"),
                "completer": completer.to_string(), "threads": args.threads,
                "local": args.local.to_string(),
            })
        ),
        crate::format::Format::Csv => {}
    }
    let stop = stop_flag()?;
    let start = Instant::now();
    let mut flushed = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        flush_pcap_every(&mut flushed, Duration::from_secs(1))?;
        if let Some(d) = args.duration {
            if start.elapsed().as_secs_f64() >= d {
                break;
            }
        }
    }
    let st = server.stats();
    let signalled = stop.load(Ordering::Relaxed);
    let counters = serde_json::json!({
        "event": "stop", "signal": signalled,
        "reads": mem.reads.load(Ordering::Relaxed),
        "writes": mem.writes.load(Ordering::Relaxed),
        "aborted": mem.aborts.load(Ordering::Relaxed),
        "mrd": st.mrd.load(Ordering::Relaxed),
        "mwr": st.mwr.load(Ordering::Relaxed),
        "malformed": st.malformed.load(Ordering::Relaxed),
        "foreign": st.foreign.load(Ordering::Relaxed),
    });
    match fmt {
        crate::format::Format::Table => {
            if signalled {
                println!("psmem: stopped by a signal");
            }
            println!(
                "psmem: {} reads, {} writes, {} aborted; {} MRd, {} MWr, {} malformed, {} foreign datagrams",
                counters["reads"], counters["writes"], counters["aborted"], counters["mrd"],
                counters["mwr"], counters["malformed"], counters["foreign"]
            );
        }
        crate::format::Format::Json => println!("{counters}"),
        crate::format::Format::Csv => {
            print!("{}", crate::format::records_to_csv(&[counters]))
        }
    }
    server.stop();
    flush_pcap()
}

/// Common device options.
#[derive(Args, Debug)]
pub struct DevArgs {
    /// The adapter's address.
    #[arg(short = 'r', long, default_value = "127.0.0.1")]
    pub adapter: Ipv4Addr,
    /// The local address.
    #[arg(short = 'l', long, default_value = "127.0.0.2")]
    pub local: Ipv4Addr,
    /// Requester ID (bus:devfn; default: ask the messaging API, else 1b:00).
    #[arg(short = 'b', long)]
    pub requester: Option<String>,
    /// Max_Read_Request_Size.
    #[arg(long, default_value_t = 512)]
    pub mrrs: u32,
    /// Max_Payload_Size.
    #[arg(long, default_value_t = 256)]
    pub mps: u32,
    /// Completion timeout in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub timeout_ms: u64,
    /// Wait for write acknowledgements (needs `adapter --ack-writes`).
    #[arg(long)]
    pub acked: bool,
    /// Record every datagram to this capture file (pcapng if it ends in .pcapng, else pcap).
    #[arg(long)]
    pub pcap: Option<String>,
    /// Wall-clock capture timestamps (seconds since 1970) instead of time since start.
    #[arg(long)]
    pub pcap_wallclock: bool,
}

impl DevArgs {
    fn device(&self, tags: u16, per_channel: u16) -> Result<Device, Failure> {
        let requester = match &self.requester {
            Some(s) => bdf(s).map_err(|e| fail(format!("-b: {e}")))?,
            None => Bdf::from_raw(client::get_dev_id(self.adapter, self.local).unwrap_or(0x1b00)),
        };
        Device::open(DeviceConfig {
            adapter: self.adapter,
            local: self.local,
            requester,
            tags: 0..tags,
            tags_per_channel: per_channel,
            max_in_flight: (per_channel / 2).max(1),
            mrrs: self.mrrs,
            mps: self.mps,
            timeout: Duration::from_millis(self.timeout_ms),
            acked_writes: self.acked,
            capture: pcap(&self.pcap, self.pcap_wallclock)?,
            ..DeviceConfig::default()
        })
        .map_err(|e| fail(e.to_string()))
    }
}

/// Direction of tlpperf.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum DirArg {
    /// DMA reads.
    Read,
    /// DMA writes.
    Write,
}

/// Pattern of tlpperf.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum PatArg {
    /// Always the region start.
    Fix,
    /// Sequential.
    Seq,
    /// Random 4 KiB-aligned.
    Random,
}

/// `pcielab tlpperf`: DMA throughput and latency.
#[derive(Args, Debug)]
pub struct TlpperfArgs {
    #[command(flatten)]
    pub dev: DevArgs,
    /// Direction.
    #[arg(short = 'd', long, value_enum, default_value = "read")]
    pub direction: DirArg,
    /// Region start.
    #[arg(short = 'a', long, default_value = "0x0")]
    pub region: String,
    /// Region size.
    #[arg(short = 's', long, default_value = "8M")]
    pub region_size: String,
    /// Bytes per DMA.
    #[arg(short = 'L', long, default_value = "256")]
    pub len: String,
    /// Threads.
    #[arg(short = 'N', long, default_value_t = 1)]
    pub threads: usize,
    /// Pattern.
    #[arg(short = 'P', long, value_enum, default_value = "seq")]
    pub pattern: PatArg,
    /// Seconds to run.
    #[arg(short = 't', long, default_value = "2", value_parser = crate::units::parse_seconds)]
    pub time: f64,
    /// DMAs per thread (0: until --time).
    #[arg(short = 'c', long, default_value_t = 0)]
    pub count: u64,
    /// Tags per thread (MRds in flight = half of them).
    #[arg(long, default_value_t = 16)]
    pub tags: u16,
    /// Reads in flight per thread (pipelined); 1 waits one round trip per read, as
    /// upstream tlpperf (default: half the tags). At most half of --tags MRds are in
    /// flight (the spare tags let late completions drain), so raise --tags with it.
    #[arg(long)]
    pub window: Option<usize>,
    /// Output format: table (text lines), json (one object with the settings, the
    /// results and the device's counters) or csv (the same, one row; nested keys as a.b).
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::format::Format,
    /// The adapter's control socket: for writes, compare the MWrs the adapter applied
    /// with those sent and report the loss.
    #[arg(long)]
    pub control: Option<SocketAddr>,
}

/// MWrs the adapter applied so far, from its `stats` on the control socket.
fn adapter_mwr(addr: SocketAddr) -> Result<u64, Failure> {
    let r = control::request(addr, None, "stats", Duration::from_secs(3))
        .map_err(|e| fail(format!("--control {addr}: {e}")))?;
    let json = r
        .strip_prefix("ok ")
        .ok_or_else(|| fail(format!("--control {addr}: {r}")))?;
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| fail(format!("--control {addr}: {e}")))?;
    v.get("mwr")
        .and_then(|m| m.as_u64())
        .ok_or_else(|| fail(format!("--control {addr}: no mwr counter in {json}")))
}

/// Runs `pcielab tlpperf`.
pub fn run_tlpperf(a: &TlpperfArgs) -> Result<(), Failure> {
    if !(1..=16).contains(&a.threads) {
        return Err(fail("-N: threads must be 1..=16"));
    }
    if a.tags == 0 || a.tags as usize * a.threads > 256 {
        return Err(fail("--tags × threads must be 1..=256"));
    }
    let size = num(&a.len).map_err(|e| fail(format!("-L: {e}")))? as usize;
    if size == 0 || size > 1 << 24 {
        return Err(fail("-L must be 1..=16M"));
    }
    if !(a.time > 0.0 && a.time <= 3600.0) && a.count == 0 {
        return Err(fail(format!(
            "-t {}: seconds to run must be above 0 and at most 3600 (or give --count)",
            a.time
        )));
    }
    let window = a.window.unwrap_or((a.tags as usize / 2).max(1));
    if window == 0 || window > 4096 {
        return Err(fail("--window must be 1..=4096"));
    }
    let dev = a.dev.device(a.tags * a.threads as u16, a.tags)?;
    let stop = stop_flag()?;
    let cfg = PerfConfig {
        direction: match a.direction {
            DirArg::Read => Direction::Read,
            DirArg::Write => Direction::Write,
        },
        size,
        region: num(&a.region).map_err(|e| fail(format!("-a: {e}")))?,
        region_size: num(&a.region_size).map_err(|e| fail(format!("-s: {e}")))?,
        pattern: match a.pattern {
            PatArg::Fix => Pattern::Fix,
            PatArg::Seq => Pattern::Seq,
            PatArg::Random => Pattern::Random,
        },
        threads: a.threads,
        duration: Duration::from_secs_f64(a.time.clamp(0.0, 3600.0)),
        count: a.count,
        window,
        stop: Some(stop),
    };
    let before = match a.control {
        Some(c) if cfg.direction == Direction::Write => Some((c, adapter_mwr(c)?)),
        _ => None,
    };
    let r = perf::run(&dev, &cfg).map_err(|e| fail(e.to_string()))?;
    let st = dev.stats();
    // Posted writes: wait (at most 2 s) for the adapter to apply what is in flight.
    let mut loss = None;
    if let Some((c, b)) = before {
        let end = Instant::now() + Duration::from_secs(2);
        let mut applied = adapter_mwr(c)? - b;
        while applied < st.mwr && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
            applied = adapter_mwr(c)? - b;
        }
        loss = Some((applied, st.mwr.saturating_sub(applied)));
    }
    match a.format {
        crate::format::Format::Table => {
            println!(
                "tlpperf: {:?} {} B x {} thread(s), {:?}, MRRS {} MPS {}, window {}",
                cfg.direction, size, a.threads, cfg.pattern, a.dev.mrrs, a.dev.mps, window
            );
            if r.interrupted {
                println!("tlpperf: stopped by a signal");
            }
            println!("tlpperf: {r}");
            println!(
                "tlpperf: device counters: {} MRd, {} MWr, {} completions, {} stale, {} junk, {} send failures",
                st.mrd, st.mwr, st.cpl, st.stale, st.junk, st.send_failures
            );
            if let Some((applied, lost)) = loss {
                println!(
                    "tlpperf: adapter applied {applied} of {} MWr sent ({lost} lost)",
                    st.mwr
                );
            }
        }
        fmt => {
            let text = format!(
            "{{\"direction\":\"{}\",\"size\":{},\"threads\":{},\"window\":{},\"mrrs\":{},\"mps\":{},\"result\":{},\"device\":{{\"mrd\":{},\"mwr\":{},\"cpl\":{},\"stale\":{},\"junk\":{},\"send_failures\":{}}},\"adapter_mwr_applied\":{},\"mwr_lost\":{}}}",
            match cfg.direction {
                Direction::Read => "read",
                Direction::Write => "write",
            },
            size,
            a.threads,
            window,
            a.dev.mrrs,
            a.dev.mps,
            r.to_json(),
            st.mrd,
            st.mwr,
            st.cpl,
            st.stale,
            st.junk,
            st.send_failures,
            loss.map_or("null".to_string(), |l| l.0.to_string()),
            loss.map_or("null".to_string(), |l| l.1.to_string())
            );
            if fmt == crate::format::Format::Json {
                println!("{text}");
            } else {
                let mut v: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| fail(format!("tlpperf: result record: {e}")))?;
                crate::format::round_floats(&mut v, 3);
                print!("{}", crate::format::records_to_csv(&[v]));
            }
        }
    }
    flush_pcap()?;
    let first = r.first_error.clone().unwrap_or_default();
    if r.ops == 0 {
        return Err(fail(format!("no DMA completed: {first}")));
    }
    // A run with failures is not a success, whatever it measured.
    if r.errors > 0 {
        return Err(fail(format!(
            "{} of {} DMAs failed (first: {first})",
            r.errors,
            r.ops + r.errors
        )));
    }
    if st.send_failures > 0 {
        return Err(fail(format!(
            "{} of {} datagrams could not be sent (the kernel refused them: is an adapter \
             listening on {}?); posted writes are not confirmed, so the rate above counts \
             writes that went nowhere",
            st.send_failures,
            st.mrd + st.mwr,
            a.dev.adapter
        )));
    }
    if let Some((_, lost)) = loss.filter(|l| l.1 > 0) {
        return Err(fail(format!(
            "{lost} of {} posted writes were not applied by the adapter",
            st.mwr
        )));
    }
    Ok(())
}

/// `pcielab dma read|write`.
#[derive(Subcommand, Debug)]
pub enum DmaCmd {
    /// One DMA read; prints a hex dump (or writes --out).
    Read {
        #[command(flatten)]
        dev: DevArgs,
        /// Host address.
        #[arg(short = 'a', long)]
        addr: String,
        /// Bytes.
        #[arg(short = 's', long)]
        len: String,
        /// Write the bytes to this file instead of a hex dump.
        #[arg(long)]
        out: Option<String>,
        /// Output format: table (a hex dump), csv or json (one record: op, address,
        /// bytes, data as hex).
        #[arg(long, value_enum, default_value = "table")]
        format: crate::format::Format,
    },
    /// One DMA write of --hex, --string or --file.
    Write {
        #[command(flatten)]
        dev: DevArgs,
        /// Host address.
        #[arg(short = 'a', long)]
        addr: String,
        /// Data as hex.
        #[arg(long, conflicts_with_all = ["string", "file"])]
        hex: Option<String>,
        /// Data as a string.
        #[arg(short = 'p', long, conflicts_with = "file")]
        string: Option<String>,
        /// Data from a file.
        #[arg(long)]
        file: Option<String>,
        /// Output format: table (a line), csv or json (one record: op, address, bytes,
        /// acknowledged).
        #[arg(long, value_enum, default_value = "table")]
        format: crate::format::Format,
    },
}

/// Prints one result record of `dma` as `format` asks (the table's line is `text`).
fn print_record(format: crate::format::Format, text: &str, v: serde_json::Value) {
    match format {
        crate::format::Format::Table => println!("{text}"),
        crate::format::Format::Json => println!("{v}"),
        crate::format::Format::Csv => print!("{}", crate::format::records_to_csv(&[v])),
    }
}

fn hexdump(addr: u64, b: &[u8]) {
    for (i, row) in b.chunks(16).enumerate() {
        let hex: Vec<String> = row.iter().map(|x| format!("{x:02x}")).collect();
        let asc: String = row
            .iter()
            .map(|&c| {
                if (0x20..0x7f).contains(&c) {
                    c as char
                } else {
                    '.'
                }
            })
            .collect();
        println!(
            "{:016x}  {:<47}  {asc}",
            addr + 16 * i as u64,
            hex.join(" ")
        );
    }
}

/// Runs `pcielab dma`.
pub fn run_dma(c: &DmaCmd) -> Result<(), Failure> {
    match c {
        DmaCmd::Read {
            dev,
            addr,
            len,
            out,
            format,
        } => {
            let addr = num(addr).map_err(|e| fail(format!("-a: {e}")))?;
            let len = num(len).map_err(|e| fail(format!("-s: {e}")))?;
            if len > 1 << 30 {
                return Err(fail("-s must be ≤ 1G"));
            }
            let d = dev.device(16, 16)?;
            let mut b = vec![0u8; len as usize];
            let n = d.dma_read(addr, &mut b).map_err(|e| fail(e.to_string()))?;
            if let Some(p) = out {
                std::fs::write(p, &b).map_err(|e| fail(format!("{p}: {e}")))?;
            }
            let hex_data = || b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            match (format, out) {
                (crate::format::Format::Table, Some(_)) => {}
                (crate::format::Format::Table, None) => {
                    println!("dma read: {n} B at {addr:#x}");
                    hexdump(addr, &b);
                }
                (f, _) => print_record(
                    *f,
                    "",
                    serde_json::json!({
                        "op": "read", "address": format!("{addr:#x}"), "bytes": n,
                        "data": if out.is_some() { serde_json::Value::Null } else { hex_data().into() },
                    }),
                ),
            }
            flush_pcap()
        }
        DmaCmd::Write {
            dev,
            addr,
            hex,
            string,
            file,
            format,
        } => {
            let addr = num(addr).map_err(|e| fail(format!("-a: {e}")))?;
            let data = match (hex, string, file) {
                (Some(h), _, _) => parse_hex(h).map_err(|e| fail(format!("--hex: {e}")))?,
                (_, Some(s), _) => s.as_bytes().to_vec(),
                (_, _, Some(f)) => std::fs::read(f).map_err(|e| fail(format!("{f}: {e}")))?,
                _ => return Err(fail("give --hex, --string or --file")),
            };
            let d = dev.device(16, 16)?;
            let n = d.dma_write(addr, &data).map_err(|e| fail(e.to_string()))?;
            let text = format!(
                "dma write: {n} B at {addr:#x}{}",
                if dev.acked {
                    " (acknowledged)"
                } else {
                    " (posted)"
                }
            );
            print_record(
                *format,
                &text,
                serde_json::json!({
                    "op": "write", "address": format!("{addr:#x}"), "bytes": n,
                    "acknowledged": dev.acked,
                }),
            );
            flush_pcap()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_forms() {
        assert_eq!(bdf("1b:00").unwrap().raw(), 0x1b00);
        assert_eq!(bdf("1b:08").unwrap().raw(), 0x1b08);
        assert_eq!(bdf("1b:01.1").unwrap().raw(), 0x1b09);
        assert!(bdf("1b").is_err());
        assert!(bdf("zz:00").is_err());
    }
}
