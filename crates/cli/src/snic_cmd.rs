//! `pcielab snic`: the software adapter host with the simple-nic host driver
//! (`pcielab_nettlp::snic`), so a simple-nic device on the device host can be driven
//! without scripting the control socket.

use crate::{fail, Failure};
use clap::Args;
use pcielab_nettlp::adapter::{Adapter, AdapterConfig};
use pcielab_nettlp::control::{parse_hex, to_hex};
use pcielab_nettlp::memory::parse_num;
use pcielab_nettlp::snic::{SnicConfig, SnicDriver};
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
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Milliseconds to wait for each TX interrupt.
    #[arg(long, default_value_t = 1000)]
    pub timeout_ms: u64,
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
    let adapter = Adapter::start(AdapterConfig {
        listen: a.listen,
        device: a.device,
        allow: a.allow.clone(),
        ..AdapterConfig::default()
    })
    .map_err(|e| fail(format!("adapter: {e}")))?;
    let mut nic = SnicDriver::open(
        &adapter,
        SnicConfig {
            base,
            entries: a.entries,
            buf_size: a.buf_size,
            timeout: Duration::from_millis(a.timeout_ms),
            ..SnicConfig::default()
        },
    )
    .map_err(|e| fail(e.to_string()))?;
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
    let end = Instant::now() + Duration::from_secs_f64(a.duration.clamp(0.0, 86_400.0));
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
