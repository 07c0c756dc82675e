//! The simple-nic device served over NetTLP: `pcielab_device::snic::SimpleNic` hosted by
//! [`ModelHandler`] on the device side, its DMA and MSI-X carried out over UDP, its MAC
//! side wired to nothing, a loopback plug, or a Linux TAP interface. This is the device
//! [`crate::snic::SnicDriver`] drives from the adapter host (and what `pcielab
//! snic-device` runs).
//!
//! ```text
//!   adapter host                         device side (this module)
//!   SnicDriver ── BAR4 MWr (doorbells) ─► handler::serve ─► ModelHandler<SimpleNic>
//!   HostMemory ◄─ DMA MRd/MWr, MSI-X ──── device::Device ◄─┘        │ MAC side
//!                                                          none / loopback / TAP fd
//!                                          TAP reader thread ─► ModelHandler::call(receive)
//! ```
//!
//! ```no_run
//! use pcielab_nettlp::snic_device::{Mac, SnicDevice, SnicDeviceConfig};
//! let dev = SnicDevice::start(SnicDeviceConfig { mac: Mac::Loopback, ..SnicDeviceConfig::default() })?;
//! // ... drive it with pcielab_nettlp::snic::SnicDriver on the adapter host ...
//! println!("{}", dev.report());
//! dev.stop();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::client;
use crate::device::{Device, DeviceConfig};
use crate::frame::MsixEntry;
use crate::handler::{serve, ServeConfig, Server};
use crate::hosted::ModelHandler;
use crate::sys;
use pcielab_device::snic::{Loopback, NoMac, SimpleNic, SnicMac};
pub use pcielab_device::snic::{SnicParams, SnicStats};
use pcielab_device::DeviceModel;
use pcielab_wire::Bdf;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Where the device's MAC side goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mac {
    /// Nothing: frames sent are dropped and counted (`tx_mac_dropped`).
    None,
    /// Frames sent come back as received frames.
    Loopback,
    /// The Linux TAP interface of this name (created if needed, and set up).
    Tap(String),
}

/// A TAP interface as a simple-nic MAC side: frames the device sends are written to
/// it; a reader thread ([`SnicDevice`]) hands the frames the kernel sends on it to the
/// device.
#[derive(Debug)]
pub struct TapMac {
    file: File,
    name: String,
}

impl TapMac {
    /// Opens TAP interface `name` (see [`sys::tap_open`]) and sets it up.
    pub fn open(name: &str) -> Result<TapMac, SnicDeviceError> {
        let (file, name) = sys::tap_open(name).map_err(SnicDeviceError::Tap)?;
        sys::iface_up(&name)
            .map_err(|e| SnicDeviceError::Setup(format!("setting {name} up: {e}")))?;
        Ok(TapMac { file, name })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Another handle on the same interface (for the reader thread).
    pub fn try_clone(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }
}

impl SnicMac for TapMac {
    fn transmit(&mut self, frame: &[u8]) -> Result<(), String> {
        match self.file.write(frame) {
            Ok(n) if n == frame.len() => Ok(()),
            Ok(n) => Err(format!(
                "TAP {}: wrote {n} of {} bytes",
                self.name,
                frame.len()
            )),
            Err(e) => Err(format!("TAP {}: {e}", self.name)),
        }
    }
}

/// Why the device could not start.
#[derive(Debug)]
pub enum SnicDeviceError {
    /// The TAP interface could not be opened (no /dev/net/tun, no permission, ...).
    Tap(sys::TapError),
    /// Another step failed (messaging API, sockets, interface setup).
    Setup(String),
}

impl fmt::Display for SnicDeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnicDeviceError::Tap(e) => write!(f, "TAP interface: {e}"),
            SnicDeviceError::Setup(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for SnicDeviceError {}

/// How to serve a simple-nic.
#[derive(Debug, Clone)]
pub struct SnicDeviceConfig {
    /// The adapter's address.
    pub adapter: Ipv4Addr,
    /// The device's (local) address.
    pub local: Ipv4Addr,
    /// BAR4's address (None: ask the adapter's messaging API).
    pub bar4: Option<u64>,
    /// BAR4's size (the handler answers inside it; the registers are its first 28 bytes).
    pub bar_size: u64,
    /// The device's ID: completer of BAR4 reads, requester of its DMA (None: ask the
    /// messaging API).
    pub id: Option<Bdf>,
    /// The MSI-X table (None: ask the messaging API).
    pub msix: Option<Vec<MsixEntry>>,
    /// The model's parameters (vectors, ring size, largest frame, receive FIFO).
    pub params: SnicParams,
    /// The MAC side.
    pub mac: Mac,
    /// DMA completion timeout.
    pub dma_timeout: Duration,
}

impl Default for SnicDeviceConfig {
    fn default() -> Self {
        SnicDeviceConfig {
            adapter: Ipv4Addr::new(127, 0, 0, 1),
            local: Ipv4Addr::new(127, 0, 0, 2),
            bar4: None,
            bar_size: 1 << 20,
            id: None,
            msix: None,
            params: SnicParams::default(),
            mac: Mac::None,
            dma_timeout: Duration::from_millis(500),
        }
    }
}

/// A served simple-nic (stops when dropped, or with [`SnicDevice::stop`]).
#[derive(Debug)]
pub struct SnicDevice {
    handler: Arc<ModelHandler<SimpleNic>>,
    server: Option<Server>,
    reader: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    tap_errors: Arc<AtomicU64>,
    bar4: u64,
    id: Bdf,
    tap: Option<String>,
}

impl SnicDevice {
    /// Opens the MAC side, learns what it was not told from the messaging API, and
    /// serves BAR4 (one server thread, so doorbells are taken in order).
    pub fn start(cfg: SnicDeviceConfig) -> Result<SnicDevice, SnicDeviceError> {
        // The MAC first: a TAP that cannot be had is the likeliest failure.
        let (mac, tap_file, tap): (Box<dyn SnicMac>, Option<File>, Option<String>) = match &cfg.mac
        {
            Mac::None => (Box::new(NoMac), None, None),
            Mac::Loopback => (Box::new(Loopback::default()), None, None),
            Mac::Tap(name) => {
                let t = TapMac::open(name)?;
                let f = t
                    .try_clone()
                    .map_err(|e| SnicDeviceError::Setup(format!("TAP {name}: {e}")))?;
                let n = t.name().to_string();
                (Box::new(t), Some(f), Some(n))
            }
        };
        let setup = |what: &str, e: std::io::Error| {
            SnicDeviceError::Setup(format!(
                "{what} from the adapter's messaging API at {}: {e}",
                cfg.adapter
            ))
        };
        let bar4 = match cfg.bar4 {
            Some(b) => b,
            None => client::get_bar4(cfg.adapter, cfg.local).map_err(|e| setup("BAR4", e))?,
        };
        let id = match cfg.id {
            Some(b) => b,
            None => Bdf::from_raw(
                client::get_dev_id(cfg.adapter, cfg.local).map_err(|e| setup("device ID", e))?,
            ),
        };
        let msix = match &cfg.msix {
            Some(t) => t.clone(),
            None => client::get_msix_table(cfg.adapter, cfg.local)
                .map_err(|e| setup("MSI-X table", e))?
                .to_vec(),
        };
        for (what, v) in [("TX", cfg.params.tx_vector), ("RX", cfg.params.rx_vector)] {
            if usize::from(v) >= msix.len() {
                return Err(SnicDeviceError::Setup(format!(
                    "the {what} vector {v} is past the MSI-X table's {} entries",
                    msix.len()
                )));
            }
        }
        let device = Device::open(DeviceConfig {
            adapter: cfg.adapter,
            local: cfg.local,
            requester: id,
            timeout: cfg.dma_timeout,
            ..DeviceConfig::default()
        })
        .map_err(|e| SnicDeviceError::Setup(format!("DMA sockets: {e}")))?;
        let model = SimpleNic::new(cfg.params, mac);
        let handler = Arc::new(
            ModelHandler::new(model, cfg.params.bar, bar4, cfg.bar_size).with_device(device, &msix),
        );
        let server = serve(
            ServeConfig {
                adapter: cfg.adapter,
                local: cfg.local,
                completer: id,
                threads: 1,
                ..ServeConfig::default()
            },
            handler.clone(),
        )
        .map_err(|e| SnicDeviceError::Setup(format!("serving BAR4 on {}: {e}", cfg.local)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let tap_errors = Arc::new(AtomicU64::new(0));
        let reader = tap_file.map(|f| {
            let (h, stop, errs) = (handler.clone(), stop.clone(), tap_errors.clone());
            std::thread::spawn(move || read_tap(f, &h, &stop, &errs))
        });
        Ok(SnicDevice {
            handler,
            server: Some(server),
            reader,
            stop,
            tap_errors,
            bar4,
            id,
            tap,
        })
    }

    /// BAR4's address.
    pub fn bar4(&self) -> u64 {
        self.bar4
    }

    /// The device's ID.
    pub fn id(&self) -> Bdf {
        self.id
    }

    /// The TAP interface's name, if the MAC side is one.
    pub fn tap(&self) -> Option<&str> {
        self.tap.as_deref()
    }

    /// The model's counters.
    pub fn stats(&self) -> SnicStats {
        self.handler.with_model(|m| m.stats())
    }

    /// The model's report, with the runtime's counters: `commands_dropped` (model
    /// commands the runtime did not carry out), `writes_outside_bar` and
    /// `tap_read_errors`.
    pub fn report(&self) -> serde_json::Value {
        let mut v = self
            .handler
            .with_model(|m| m.report())
            .unwrap_or_else(|| serde_json::json!({}));
        v["commands_dropped"] = self.handler.commands_dropped().into();
        v["writes_outside_bar"] = self.handler.writes_outside().into();
        v["tap_read_errors"] = self.tap_errors.load(Ordering::Relaxed).into();
        v
    }

    /// The handler (to act on the model directly).
    pub fn handler(&self) -> &Arc<ModelHandler<SimpleNic>> {
        &self.handler
    }

    /// Stops serving and the TAP reader, and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.server.take() {
            s.stop();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for SnicDevice {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The TAP reader: every frame the kernel sends on the interface goes to the device.
fn read_tap(mut f: File, h: &ModelHandler<SimpleNic>, stop: &AtomicBool, errors: &AtomicU64) {
    let mut buf = vec![0u8; 65536];
    let mut ready = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        if sys::poll_readable(&[f.as_raw_fd()], Duration::from_millis(50), &mut ready).is_err() {
            errors.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        if ready.is_empty() {
            continue;
        }
        match f.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                let frame = buf[..n].to_vec();
                h.call(|m, cx| m.receive(frame, cx));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {
                errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
