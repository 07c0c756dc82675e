//! `pcielab snic`: the software adapter host with the simple-nic host driver
//! (`pcielab_nettlp::snic`), so a simple-nic device on the device host can be driven
//! without scripting the control socket; `pcielab snic-device`: the simple-nic device
//! itself (`pcielab_nettlp::snic_device`), its MAC side a loopback plug, a TAP interface
//! or nothing.

use crate::nettlp_cmd::{bdf, num};
use crate::{fail, Failure};
use clap::Args;
use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::control::{parse_hex, to_hex};
use pcielab_nettlp::memory::parse_num;
use pcielab_nettlp::snic::{SnicConfig, SnicDriver, ENABLED};
use pcielab_nettlp::snic_device::{Mac, SnicDevice, SnicDeviceConfig, SnicDeviceError};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `pcielab snic`: send and receive packets through a simple-nic device.
#[derive(Args, Debug)]
pub struct SnicArgs {
    /// Address to bind (the adapter's side).
    #[arg(long, default_value = "127.0.0.1")]
    pub listen: Ipv4Addr,
    /// The device host (where the simple-nic device runs).
    #[arg(long, default_value = "127.0.0.2")]
    pub device: Ipv4Addr,
    /// Further peers to accept (e.g. 127.0.0.1 for tools whose sockets are unbound).
    #[arg(long)]
    pub allow: Vec<Ipv4Addr>,
    /// Host memory for the driver's rings and buffers.
    #[arg(long, default_value = "0x8000000")]
    pub base: String,
    /// Descriptors per ring.
    #[arg(long, default_value_t = 64)]
    pub entries: u32,
    /// Bytes per packet buffer.
    #[arg(long, default_value_t = 2048)]
    pub buf_size: u32,
    /// Send this packet (hex; repeatable, in order).
    #[arg(long)]
    pub send: Vec<String>,
    /// Receive this many packets (printed as hex), then stop.
    #[arg(long, default_value_t = 0)]
    pub recv: u64,
    /// Stop receiving after this many seconds.
    #[arg(long, default_value = "10", value_parser = crate::units::parse_seconds)]
    pub duration: f64,
    /// Milliseconds to wait for each TX interrupt.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
    /// Before anything else, wait up to this many seconds for the device to answer a
    /// read of BAR4 (`enabled`): for a device started after this command. Needs a
    /// device that answers BAR4 reads, as `pcielab snic-device` does (upstream's
    /// simple-nic answers none).
    #[arg(long, value_name = "SECONDS", value_parser = crate::units::parse_seconds)]
    pub wait_device: Option<f64>,
    /// BAR4 address reported by the messaging API (a device given its own, as with
    /// `snic-device -a`, must be given this one).
    #[arg(long, default_value = "0x200000000")]
    pub bar4: String,
    /// The adapter's device ID (bus:devfn or bb:dd.f): the messaging API reports it,
    /// and the device's completions must carry it (`snic-device -b`).
    #[arg(long, default_value = "1b:00")]
    pub devid: String,
}

/// Runs `pcielab snic`.
pub fn run_snic(a: &SnicArgs) -> Result<(), Failure> {
    let packets: Vec<Vec<u8>> = a
        .send
        .iter()
        .map(|h| parse_hex(h).map_err(|e| fail(format!("--send: {e}"))))
        .collect::<Result<_, _>>()?;
    let base =
        parse_num(&a.base).ok_or_else(|| fail(format!("--base {:?}: not a number", a.base)))?;
    let stop = pcielab_nettlp::sys::stop_on_signals()
        .map_err(|e| fail(format!("installing the SIGINT/SIGTERM handlers: {e}")))?;
    let bar4 = num(&a.bar4).map_err(|e| fail(format!("--bar4: {e}")))?;
    let device_id = bdf(&a.devid).map_err(|e| fail(format!("--devid: {e}")))?;
    let adapter = Adapter::start(AdapterConfig {
        listen: a.listen,
        device: a.device,
        allow: a.allow.clone(),
        bar4,
        device_id,
        ..AdapterConfig::default()
    })
    .map_err(|e| fail(format!("adapter: {e}")))?;
    // The layout and the packets are checked before anything waits for the device.
    let cfg = SnicConfig {
        base,
        entries: a.entries,
        buf_size: a.buf_size,
        timeout: Duration::from_millis(a.timeout_ms),
        ..SnicConfig::default()
    };
    cfg.check(adapter.memory())
        .map_err(|e| fail(format!("--base, --entries, --buf-size: {e}")))?;
    if let Some((k, p)) = packets
        .iter()
        .enumerate()
        .find(|(_, p)| p.is_empty() || p.len() > a.buf_size as usize)
    {
        return Err(fail(format!(
            "--send #{}: a packet of {} bytes; allowed 1..={} (--buf-size)",
            k + 1,
            p.len(),
            a.buf_size
        )));
    }
    if let Some(w) = a.wait_device {
        let end = Instant::now() + Duration::from_secs_f64(w);
        let mut b = [0u8; 4];
        loop {
            match adapter.mmio_read(ENABLED, &mut b) {
                Ok(()) => break,
                Err(e) if Instant::now() >= end || stop.load(Ordering::Relaxed) => {
                    return Err(fail(format!(
                        "--wait-device: no answer from the device at {} within {w} s: {e}",
                        a.device
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    let mut nic = SnicDriver::open(&adapter, cfg).map_err(|e| fail(e.to_string()))?;
    println!(
        "snic: adapter on {}, device {}, BAR4 {:#x}; rings at {base:#x}, {} entries, {}-byte buffers",
        a.listen,
        a.device,
        adapter.config().bar4,
        a.entries,
        a.buf_size
    );
    for p in &packets {
        nic.send(p).map_err(|e| fail(e.to_string()))?;
        println!("snic: sent {} B", p.len());
    }
    let end = Instant::now() + Duration::from_secs_f64(a.duration);
    let mut got = 0;
    while got < a.recv && !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if let Some(p) = nic
            .recv(left.min(Duration::from_millis(200)))
            .map_err(|e| fail(e.to_string()))?
        {
            got += 1;
            println!("snic: received {} B {}", p.len(), to_hex(&p));
        }
    }
    let s = nic.stats();
    println!(
        "snic: {} sent, {} received, {} other interrupts",
        s.tx_packets, s.rx_packets, s.other_irqs
    );
    if got < a.recv {
        return Err(fail(format!("received {got} of {} packets", a.recv)));
    }
    Ok(())
}

/// `pcielab snic-device`: the simple-nic device behind BAR4.
#[derive(Args, Debug)]
pub struct SnicDeviceArgs {
    /// The adapter's address.
    #[arg(short = 'r', long, default_value = "127.0.0.1")]
    pub adapter: Ipv4Addr,
    /// The local address.
    #[arg(short = 'l', long, default_value = "127.0.0.2")]
    pub local: Ipv4Addr,
    /// BAR4 address (default: ask the messaging API).
    #[arg(short = 'a', long)]
    pub bar4: Option<String>,
    /// The device's ID, bus:devfn (e.g. 1b:00) or bb:dd.f (default: ask the messaging
    /// API). Its completions carry it: it must be the adapter's device ID.
    #[arg(short = 'b', long)]
    pub id: Option<String>,
    /// Frames sent come back as received frames.
    #[arg(long, conflicts_with = "tap")]
    pub loopback: bool,
    /// The MAC side is this Linux TAP interface (created if needed, and set up; needs
    /// CAP_NET_ADMIN). Without --loopback or --tap, frames sent are counted and dropped.
    #[arg(long, value_name = "NAME")]
    pub tap: Option<String>,
    /// Descriptors per ring: indexes at or past it are refused (counted).
    #[arg(long, default_value_t = 1024)]
    pub ring_entries: u32,
    /// The largest frame in bytes (longer TX descriptors and received frames are
    /// refused, counted).
    #[arg(long, default_value_t = 4096)]
    pub max_frame: u32,
    /// Frames kept while no RX buffer is posted (0: dropped at once, as upstream).
    #[arg(long, default_value_t = 64)]
    pub rx_fifo: usize,
    /// DMA completion timeout in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub timeout_ms: u64,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_parser = crate::units::parse_seconds)]
    pub duration: Option<f64>,
    /// Output format: table (text lines), csv (the final counters, one row) or json (one
    /// object per line: "start", then "stop" with the counters).
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::format::Format,
}

/// Runs `pcielab snic-device`.
pub fn run_snic_device(a: &SnicDeviceArgs) -> Result<(), Failure> {
    use crate::format::Format;
    let bar4 = match &a.bar4 {
        Some(s) => Some(parse_num(s).ok_or_else(|| fail(format!("--bar4 {s:?}: not a number")))?),
        None => None,
    };
    let id =
        a.id.as_deref()
            .map(|s| bdf(s).map_err(|e| fail(format!("-b: {e}"))))
            .transpose()?;
    if a.ring_entries == 0 || a.max_frame == 0 {
        return Err(fail("--ring-entries and --max-frame must be at least 1"));
    }
    let mac = match (&a.tap, a.loopback) {
        (Some(t), _) => Mac::Tap(t.clone()),
        (None, true) => Mac::Loopback,
        (None, false) => Mac::None,
    };
    let dev = SnicDevice::start(SnicDeviceConfig {
        adapter: a.adapter,
        local: a.local,
        bar4,
        id,
        mac: mac.clone(),
        params: pcielab_nettlp::snic_device::SnicParams {
            ring_entries: a.ring_entries,
            max_frame: a.max_frame,
            rx_fifo: a.rx_fifo,
            ..Default::default()
        },
        dma_timeout: Duration::from_millis(a.timeout_ms),
        ..SnicDeviceConfig::default()
    })
    .map_err(|e| match e {
        SnicDeviceError::Tap(t) => fail(format!("snic-device: --tap: {t}")),
        other => fail(format!("snic-device: {other}")),
    })?;
    let mac_text = match (&mac, dev.tap()) {
        (Mac::Tap(_), Some(n)) => format!("TAP {n}"),
        (Mac::Loopback, _) => "loopback".to_string(),
        _ => "none (frames sent are dropped, counted)".to_string(),
    };
    match a.format {
        Format::Table => println!(
            "snic-device: BAR4 {:#x}, device {}, MAC {mac_text}; serving on {} for the adapter at {}",
            dev.bar4(),
            dev.id(),
            a.local,
            a.adapter
        ),
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "event": "start", "bar4": format!("{:#x}", dev.bar4()),
                "device": dev.id().to_string(), "mac": mac_text,
                "local": a.local.to_string(), "adapter": a.adapter.to_string(),
            })
        ),
        Format::Csv => {}
    }
    let stop = pcielab_nettlp::sys::stop_on_signals()
        .map_err(|e| fail(format!("installing the SIGINT/SIGTERM handlers: {e}")))?;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(d) = a.duration {
            if start.elapsed().as_secs_f64() >= d {
                break;
            }
        }
    }
    let mut r = dev.report();
    let signalled = stop.load(Ordering::Relaxed);
    dev.stop();
    match a.format {
        Format::Table => {
            if signalled {
                println!("snic-device: stopped by a signal");
            }
            println!(
                "snic-device: {} frames sent ({} B), {} received ({} B); {} doorbells, {} RX buffers posted; dropped: {} by the MAC side, {} with no RX buffer, {} of a bad size; {} still waiting for an RX buffer; {} errors in all",
                r["tx_frames"], r["tx_bytes"], r["rx_frames"], r["rx_bytes"], r["tx_doorbells"],
                r["rx_posts"], r["tx_mac_dropped"], r["rx_dropped_no_buffer"],
                r["rx_dropped_bad_size"], r["rx_fifo_frames"], r["errors"]
            );
            if let Some(e) = r["last_error"].as_str() {
                println!("snic-device: last problem: {e}");
            }
            println!("snic-device: counters {r}");
        }
        Format::Json => {
            r["event"] = "stop".into();
            r["signal"] = signalled.into();
            println!("{r}");
        }
        Format::Csv => print!("{}", crate::format::records_to_csv(&[r])),
    }
    Ok(())
}
