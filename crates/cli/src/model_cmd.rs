//! `pcielab model …`: the analytic model on the command line (glue over `pcielab-model`).
//!
//! Exit status: 0 on success, 2 for bad input (one line on stderr naming the parameter,
//! the value and what is allowed), 1 when an output file cannot be written.

use clap::{Args, Subcommand, ValueEnum};
use pcielab_model::eth::Ethernet;
use pcielab_model::latency::{self, LatencyParams};
use pcielab_model::nic::{self, Batching, NicKind};
use pcielab_model::plot::{Plot, Series};
use pcielab_model::{link, AddrWidth, Lanes, Mode, Model, Mps, Mrrs, PcieConfig, Rcb};
use pcielab_wire::Generation;
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pcielab model`.
#[derive(Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    cmd: ModelCmd,
}

#[derive(Subcommand, Debug)]
enum ModelCmd {
    /// Read, write and read/write DMA bandwidth vs transfer size.
    #[command(allow_negative_numbers = true)]
    Bw(BwArgs),
    /// Raw and link-level (after DLLPs and SKPs) bandwidth of every generation × width × MPS.
    #[command(allow_negative_numbers = true)]
    Link(LinkArgs),
    /// NIC models: PCIe bytes per packet and achievable bandwidth vs Ethernet line rate.
    #[command(allow_negative_numbers = true)]
    Nic(NicArgs),
    /// LAT_RD and LAT_WRRD vs transfer size.
    #[command(allow_negative_numbers = true)]
    Latency(LatencyArgs),
    /// NetTLP's encapsulation bound: DMA throughput over Ethernet vs TLP payload size,
    /// each TLP in its own UDP datagram (seed 000: 7.53 Gb/s for 256-byte writes on
    /// 10 GbE).
    #[command(allow_negative_numbers = true)]
    Nettlp(NettlpArgs),
}

#[derive(Args, Debug)]
struct NettlpArgs {
    /// Ethernet line rate, Gb/s (any positive rate: 1..=1000).
    #[arg(long, default_value_t = 10.0)]
    eth: f64,
    /// TLP payload sizes in bytes (N, A:B, A:B:STEP or A:B:xFACTOR; 1..=4096).
    #[arg(long, default_value = "64:1024:x2")]
    sizes: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// Accounting mode on the command line.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Dllp {
    /// Reproduce the published pcie-bench model exactly.
    #[value(name = "pcie-bench")]
    PcieBench,
    /// Spec mode: DLLPs per direction as sent, per lane, Gen6 FLIT, DW/4 KiB/RCB splitting.
    Spec,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Table,
    Csv,
    Json,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum NicChoice {
    /// pcie-bench's simple NIC.
    Simple,
    /// Descriptor-batching NIC (Intel 82599 style).
    Batched,
}

#[derive(Args, Debug)]
struct PcieArgs {
    /// PCIe generation, 1..=6.
    #[arg(long, default_value_t = 3)]
    gen: u32,
    /// Link width: 1, 2, 4, 8, 16 or 32.
    #[arg(long, default_value_t = 8)]
    lanes: u32,
    /// Maximum Payload Size, bytes.
    #[arg(long, default_value = "256", value_parser = crate::units::parse_bytes_u32)]
    mps: u32,
    /// Maximum Read Request Size, bytes.
    #[arg(long, default_value = "512", value_parser = crate::units::parse_bytes_u32)]
    mrrs: u32,
    /// Read Completion Boundary, bytes (64 or 128; pcie-bench mode also takes 256, 512).
    #[arg(long, default_value = "64", value_parser = crate::units::parse_bytes_u32)]
    rcb: u32,
    /// Completions are RCB-sized instead of MPS-sized.
    #[arg(long)]
    rcb_chunks: bool,
    /// Address width of memory requests: 32 or 64.
    #[arg(long, default_value_t = 64)]
    addr: u32,
    /// Every TLP carries an ECRC.
    #[arg(long)]
    ecrc: bool,
    /// Accounting: pcie-bench (the published model) or spec.
    #[arg(long, value_enum, default_value_t = Dllp::PcieBench)]
    dllp: Dllp,
}

#[derive(Args, Debug)]
struct OutArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also draw the curves to FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct BwArgs {
    #[command(flatten)]
    pcie: PcieArgs,
    /// Transfer sizes in bytes: N, A:B (every size), A:B:STEP or A:B:xFACTOR (x2: powers of
    /// two); units allowed (4K, 0x1000). The same syntax as `pcielab sim --sizes`.
    #[arg(long, default_value = "1:2048")]
    sizes: String,
    /// Start address of every transfer (spec mode splits at 4 KiB and RCB from it).
    #[arg(long, default_value_t = 0, value_parser = parse_u64)]
    start_addr: u64,
    #[command(flatten)]
    out: OutArgs,
}

#[derive(Args, Debug)]
struct LinkArgs {
    /// Accounting: pcie-bench (the published model) or spec.
    #[arg(long, value_enum, default_value_t = Dllp::PcieBench)]
    dllp: Dllp,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Args, Debug)]
struct NicArgs {
    /// Which NIC model.
    #[arg(long, value_enum, default_value_t = NicChoice::Simple)]
    nic: NicChoice,
    /// DPDK polling mode (batched NIC): no interrupts, no head pointer reads, TX doorbell per 32.
    #[arg(long)]
    dpdk: bool,
    /// Batched NIC: transmit descriptors per descriptor fetch [default: 40].
    #[arg(long, value_name = "N")]
    desc_fetch: Option<u32>,
    /// Batched NIC: transmit descriptors per write-back [default: 8].
    #[arg(long, value_name = "N")]
    wb_batch: Option<u32>,
    /// Batched NIC: packets per host transmit doorbell [default: 1; 32 with --dpdk].
    #[arg(long, value_name = "N")]
    tx_doorbell: Option<u32>,
    /// Batched NIC: free-list buffers per host receive doorbell [default: 32].
    #[arg(long, value_name = "N")]
    rx_doorbell: Option<u32>,
    /// Batched NIC: received packets per head pointer read [default: 8].
    #[arg(long, value_name = "N")]
    head_read: Option<u32>,
    /// Batched NIC: packets per interrupt, 0 for none [default: 32; none with --dpdk].
    #[arg(long, value_name = "N")]
    irq_every: Option<u32>,
    /// Ethernet line rate, Gb/s: 10, 25, 40, 100, 200, 400 (also 1, 50).
    #[arg(long, default_value_t = 40)]
    eth: u32,
    /// Frame sizes in bytes (FCS included): N, A:B, A:B:STEP or A:B:xFACTOR.
    #[arg(long, default_value = "64:1518")]
    sizes: String,
    #[command(flatten)]
    pcie: PcieArgs,
    #[command(flatten)]
    out: OutArgs,
}

#[derive(Args, Debug)]
struct LatencyArgs {
    #[command(flatten)]
    pcie: PcieArgs,
    /// Transfer sizes in bytes: N, A:B (every size), A:B:STEP or A:B:xFACTOR (x2: powers of
    /// two); units allowed (4K, 0x1000). The same syntax as `pcielab sim --sizes`.
    #[arg(long, default_value = "8:2048:8")]
    sizes: String,
    /// Switches between the device and the root complex.
    #[arg(long, default_value_t = 0)]
    hops: u32,
    /// Latency of one switch traversal, ns.
    #[arg(long, default_value_t = LatencyParams::default().switch_ns)]
    switch_ns: f64,
    /// Root complex latency, ns.
    #[arg(long, default_value_t = LatencyParams::default().rc_ns)]
    rc_ns: f64,
    /// Host memory latency, ns.
    #[arg(long, default_value_t = LatencyParams::default().mem_ns)]
    mem_ns: f64,
    /// Device latency before the request leaves, ns.
    #[arg(long, default_value_t = LatencyParams::default().device_ns)]
    device_ns: f64,
    #[command(flatten)]
    out: OutArgs,
}

/// A failure: bad input (exit 2) or an output that could not be written (exit 1).
pub(crate) enum Fail {
    Input(String),
    Output(String),
}

impl From<pcielab_model::Error> for Fail {
    fn from(e: pcielab_model::Error) -> Fail {
        Fail::Input(e.to_string())
    }
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a number (decimal or 0x-hex)"))
}

/// Most points one command evaluates.
const MAX_POINTS: u64 = 10_000_000;

/// Parses `--sizes` (see [`crate::units::parse_size_range`]).
pub(crate) fn parse_sizes(s: &str) -> Result<Vec<u64>, Fail> {
    crate::units::parse_size_range(s, 1 << 30, MAX_POINTS).map_err(Fail::Input)
}

fn mode(d: Dllp) -> Mode {
    match d {
        Dllp::PcieBench => Mode::Compat,
        Dllp::Spec => Mode::Spec,
    }
}

fn build_model(a: &PcieArgs) -> Result<Model, Fail> {
    let gen = u8::try_from(a.gen)
        .map_err(|_| pcielab_wire::Error::Invalid {
            what: "PCIe generation",
            value: a.gen as u64,
            allowed: "1..=6",
        })
        .and_then(Generation::from_number)
        .map_err(pcielab_model::Error::from)?;
    let mode = mode(a.dllp);
    let cfg = PcieConfig {
        gen,
        lanes: Lanes::new(a.lanes)?,
        mps: Mps::new(a.mps)?,
        mrrs: Mrrs::new(a.mrrs)?,
        rcb: match mode {
            Mode::Compat => Rcb::new_compat(a.rcb)?,
            Mode::Spec => Rcb::new(a.rcb)?,
        },
        rcb_chunks: a.rcb_chunks,
        addr: AddrWidth::from_bits(a.addr)?,
        ecrc: a.ecrc,
        mode,
    };
    Ok(Model::new(cfg)?)
}

fn describe(m: &Model) -> String {
    let c = m.config();
    format!(
        "{} x{} MPS {} MRRS {} RCB {}{} {}-bit{} mode {}: raw {:.3} Gb/s, link {:.3} Gb/s",
        c.gen,
        c.lanes.count(),
        c.mps.bytes(),
        c.mrrs.bytes(),
        c.rcb.bytes(),
        if c.rcb_chunks { " (chunks)" } else { "" },
        match c.addr {
            AddrWidth::Bits32 => 32,
            AddrWidth::Bits64 => 64,
        },
        if c.ecrc { " ECRC" } else { "" },
        c.mode,
        m.raw_gbps(),
        m.link_gbps()
    ) + &match c.mode {
        // Spec-mode DMA bandwidths start from the TLP + DLLP rate (DLLPs as sent).
        Mode::Spec => format!(", wire {:.3} Gb/s", m.wire_gbps()),
        Mode::Compat => String::new(),
    }
}

/// Rows of numbers under named columns, rendered as table, CSV or JSON.
pub(crate) struct Table {
    pub(crate) cols: Vec<&'static str>,
    /// Decimal places per column for table and CSV (JSON keeps full precision).
    pub(crate) prec: Vec<usize>,
    pub(crate) rows: Vec<Vec<f64>>,
}

impl Table {
    pub(crate) fn render(&self, format: Format, title: &str) -> String {
        let mut out = String::new();
        match format {
            Format::Csv => {
                out.push_str(&self.cols.join(","));
                out.push('\n');
                for r in &self.rows {
                    let cells: Vec<String> = r
                        .iter()
                        .zip(&self.prec)
                        .map(|(v, p)| format!("{v:.p$}"))
                        .collect();
                    out.push_str(&cells.join(","));
                    out.push('\n');
                }
            }
            Format::Table => {
                let _ = writeln!(out, "# {title}");
                let cells: Vec<Vec<String>> = self
                    .rows
                    .iter()
                    .map(|r| {
                        r.iter()
                            .zip(&self.prec)
                            .map(|(v, p)| format!("{v:.p$}"))
                            .collect()
                    })
                    .collect();
                let widths: Vec<usize> = (0..self.cols.len())
                    .map(|i| {
                        cells
                            .iter()
                            .map(|r| r[i].len())
                            .chain([self.cols[i].len()])
                            .max()
                            .unwrap_or(0)
                    })
                    .collect();
                let line = |vals: Vec<&str>| {
                    let v: Vec<String> = vals
                        .iter()
                        .zip(&widths)
                        .map(|(s, w)| format!("{s:>w$}"))
                        .collect();
                    v.join("  ")
                };
                let _ = writeln!(out, "{}", line(self.cols.clone()));
                for r in &cells {
                    let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
                }
            }
            Format::Json => {
                // Objects keep the column order; numbers keep full precision.
                out.push('[');
                for (i, r) in self.rows.iter().enumerate() {
                    out.push_str(if i == 0 { "\n  {" } else { ",\n  {" });
                    for (j, ((c, v), p)) in self.cols.iter().zip(r).zip(&self.prec).enumerate() {
                        let val = if *p == 0 { json!(*v as u64) } else { json!(v) };
                        let sep = if j == 0 { "" } else { ", " };
                        let _ = write!(out, "{sep}\"{c}\": {val}");
                    }
                    out.push('}');
                }
                out.push_str(if self.rows.is_empty() { "]\n" } else { "\n]\n" });
            }
        }
        out
    }

    pub(crate) fn column(&self, i: usize) -> Vec<(f64, f64)> {
        self.rows.iter().map(|r| (r[0], r[i])).collect()
    }
}

fn emit(text: &str) -> Result<(), Fail> {
    let mut so = std::io::stdout().lock();
    match so.write_all(text.as_bytes()).and_then(|_| so.flush()) {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Fail::Output(format!("writing output: {e}"))),
    }
}

pub(crate) fn plot(path: &Option<PathBuf>, p: Plot) -> Result<(), Fail> {
    if let Some(path) = path {
        p.write(path).map_err(|e| match e {
            pcielab_model::plot::PlotError::Format(_)
            | pcielab_model::plot::PlotError::Create { .. } => Fail::Input(e.to_string()),
            _ => Fail::Output(e.to_string()),
        })?;
    }
    Ok(())
}

pub(crate) fn check_plot_path(path: &Option<PathBuf>) -> Result<(), Fail> {
    if let Some(p) = path {
        let ext = p
            .extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase());
        if !matches!(ext.as_deref(), Some("png" | "svg")) {
            return Err(Fail::Input(format!(
                "invalid --plot {:?}: file name must end in .png or .svg",
                p.display().to_string()
            )));
        }
    }
    Ok(())
}

pub(crate) fn series(label: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.into(),
        points,
    }
}

fn run_bw(a: &BwArgs) -> Result<(), Fail> {
    check_plot_path(&a.out.plot)?;
    let m = build_model(&a.pcie)?;
    let sizes = parse_sizes(&a.sizes)?;
    let mut rows = Vec::with_capacity(sizes.len());
    let mut bar = crate::progress::Progress::new("sizes", sizes.len() as u64);
    for (k, s) in sizes.into_iter().enumerate() {
        bar.set(k as u64);
        let p = m.point_at(a.start_addr, s)?;
        rows.push(vec![s as f64, p.read_gbps, p.write_gbps, p.readwrite_gbps]);
    }
    let t = Table {
        cols: vec!["size_B", "read_gbps", "write_gbps", "readwrite_gbps"],
        prec: vec![0, 3, 3, 3],
        rows,
    };
    let mut title = describe(&m);
    if a.start_addr != 0 {
        let _ = write!(title, ", start address {:#x}", a.start_addr);
    }
    emit(&t.render(a.out.format, &title))?;
    plot(
        &a.out.plot,
        Plot {
            title,
            x_label: "Transfer size (bytes)".into(),
            y_label: "Effective bandwidth (Gb/s)".into(),
            series: vec![
                series("read", t.column(1)),
                series("write", t.column(2)),
                series("read/write (per direction)", t.column(3)),
            ],
        },
    )
}

fn run_link(a: &LinkArgs) -> Result<(), Fail> {
    let mode = mode(a.dllp);
    let mut rows = Vec::new();
    for gen in Generation::ALL {
        for lanes in Lanes::ALL {
            for mps in Mps::ALL {
                rows.push(vec![
                    gen.number() as f64,
                    lanes.count() as f64,
                    mps.bytes() as f64,
                    link::raw_gbps(mode, gen, lanes),
                    link::link_gbps(mode, gen, lanes, mps),
                ]);
            }
        }
    }
    let t = Table {
        cols: vec!["gen", "lanes", "mps_B", "raw_gbps", "link_gbps"],
        prec: vec![0, 0, 0, 3, 3],
        rows,
    };
    emit(&t.render(
        a.format,
        &format!("raw and link-level bandwidth, mode {mode}"),
    ))
}

/// The columns of `model nic` (and the first ones of `sim --workload nic`).
pub(crate) const NIC_COLUMNS: [&str; 11] = [
    "size_B",
    "eth_gbps",
    "eth_mpps",
    "tx_gbps",
    "rx_gbps",
    "bidir_gbps",
    "tx_mpps",
    "rx_mpps",
    "bidir_mpps",
    "down_B_per_pkt",
    "up_B_per_pkt",
];

fn run_nic(a: &NicArgs) -> Result<(), Fail> {
    check_plot_path(&a.out.plot)?;
    let m = build_model(&a.pcie)?;
    let eth = Ethernet::new(a.eth)?;
    let kind = match (a.nic, a.dpdk) {
        (NicChoice::Simple, false) => NicKind::Simple,
        (NicChoice::Simple, true) => {
            return Err(Fail::Input(
                "invalid --dpdk with --nic simple: DPDK polling mode needs --nic batched".into(),
            ))
        }
        (NicChoice::Batched, dpdk) => {
            let mut b = if dpdk {
                Batching::DPDK
            } else {
                Batching::LINUX
            };
            b.tx_desc_fetch = a.desc_fetch.unwrap_or(b.tx_desc_fetch);
            b.tx_writeback = a.wb_batch.unwrap_or(b.tx_writeback);
            b.host_tx_batch = a.tx_doorbell.unwrap_or(b.host_tx_batch);
            b.host_free_batch = a.rx_doorbell.unwrap_or(b.host_free_batch);
            b.host_rx_batch = a.head_read.unwrap_or(b.host_rx_batch);
            b.irq_every = a.irq_every.unwrap_or(b.irq_every);
            NicKind::Batched(b)
        }
    };
    let batching_flags = [
        a.desc_fetch,
        a.wb_batch,
        a.tx_doorbell,
        a.rx_doorbell,
        a.head_read,
        a.irq_every,
    ];
    if kind == NicKind::Simple && batching_flags.iter().any(Option::is_some) {
        return Err(Fail::Input(
            "invalid batching option with --nic simple: the simple NIC does every step per packet; use --nic batched".into(),
        ));
    }
    let sizes = parse_sizes(&a.sizes)?;
    let mut rows = Vec::with_capacity(sizes.len());
    let mut bar = crate::progress::Progress::new("sizes", sizes.len() as u64);
    for (k, s) in sizes.into_iter().enumerate() {
        bar.set(k as u64);
        let p = nic::evaluate(&m, kind, eth, s)?;
        rows.push(vec![
            s as f64,
            p.eth_gbps,
            p.eth_mpps,
            p.tx_gbps,
            p.rx_gbps,
            p.bidir_gbps,
            p.mpps(p.tx_gbps),
            p.mpps(p.rx_gbps),
            p.mpps(p.bidir_gbps),
            p.down_bytes_per_pkt,
            p.up_bytes_per_pkt,
        ]);
    }
    let t = Table {
        cols: NIC_COLUMNS.to_vec(),
        prec: vec![0, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2],
        rows,
    };
    let name = match kind {
        NicKind::Simple => "simple NIC".to_string(),
        NicKind::Batched(b) if b.dpdk => "batched NIC, DPDK polling".to_string(),
        NicKind::Batched(_) => "batched NIC, kernel driver".to_string(),
    };
    let title = format!("{name}, {} GbE; {}", a.eth, describe(&m));
    emit(&t.render(a.out.format, &title))?;
    plot(
        &a.out.plot,
        Plot {
            title: format!(
                "{name}, {} GbE, {} x{}",
                a.eth,
                m.config().gen,
                m.config().lanes.count()
            ),
            x_label: "Ethernet frame size (bytes)".into(),
            y_label: "Packet data bandwidth (Gb/s)".into(),
            series: vec![
                series(
                    format!("{} GbE line rate (FCS stripped)", a.eth),
                    t.column(1),
                ),
                series("NIC transmit only", t.column(3)),
                series("NIC receive only", t.column(4)),
                series("NIC bidirectional", t.column(5)),
            ],
        },
    )
}

fn run_latency(a: &LatencyArgs) -> Result<(), Fail> {
    check_plot_path(&a.out.plot)?;
    let m = build_model(&a.pcie)?;
    let p = LatencyParams {
        device_ns: a.device_ns,
        switch_hops: a.hops,
        switch_ns: a.switch_ns,
        rc_ns: a.rc_ns,
        mem_ns: a.mem_ns,
    };
    let sizes = parse_sizes(&a.sizes)?;
    let mut rows = Vec::with_capacity(sizes.len());
    let mut bar = crate::progress::Progress::new("sizes", sizes.len() as u64);
    for (k, s) in sizes.into_iter().enumerate() {
        bar.set(k as u64);
        let l = latency::evaluate(&m, &p, s)?;
        rows.push(vec![s as f64, l.lat_rd_ns, l.lat_wrrd_ns]);
    }
    let t = Table {
        cols: vec!["size_B", "lat_rd_ns", "lat_wrrd_ns"],
        prec: vec![0, 2, 2],
        rows,
    };
    let title = format!(
        "{}; hops {} × {} ns, RC {} ns, memory {} ns, device {} ns",
        describe(&m),
        a.hops,
        a.switch_ns,
        a.rc_ns,
        a.mem_ns,
        a.device_ns
    );
    emit(&t.render(a.out.format, &title))?;
    plot(
        &a.out.plot,
        Plot {
            title: describe(&m),
            x_label: "Transfer size (bytes)".into(),
            y_label: "Latency (ns)".into(),
            series: vec![
                series("LAT_RD", t.column(1)),
                series("LAT_WRRD", t.column(2)),
            ],
        },
    )
}

fn run_nettlp(a: &NettlpArgs) -> Result<(), Fail> {
    if !(a.eth > 0.0 && a.eth <= 1000.0) {
        return Err(Fail::Input(format!(
            "--eth {}: allowed a rate above 0 and at most 1000 Gb/s",
            a.eth
        )));
    }
    let sizes = parse_sizes(&a.sizes)?;
    if let Some(s) = sizes.iter().find(|&&s| s > 4096) {
        return Err(Fail::Input(format!(
            "--sizes: {s} bytes is more than a TLP carries (1..=4096)"
        )));
    }
    use pcielab_model::eth::nettlp_dma_gbps;
    // Writes: MWr with a 3DW (12-byte) or 4DW (16-byte) header; read data comes back
    // in CplDs, whose header is 3DW.
    let rows = sizes
        .iter()
        .map(|&s| {
            vec![
                s as f64,
                a.eth,
                nettlp_dma_gbps(a.eth, 12, s),
                nettlp_dma_gbps(a.eth, 16, s),
                nettlp_dma_gbps(a.eth, 12, s),
            ]
        })
        .collect();
    let t = Table {
        cols: vec![
            "size_B",
            "eth_gbps",
            "mwr32_gbps",
            "mwr64_gbps",
            "cpld_gbps",
        ],
        prec: vec![0, 1, 3, 3, 3],
        rows,
    };
    let title = format!(
        "NetTLP encapsulation bound on {} Gb/s Ethernet: payload / (TLP header + payload + {} B NetTLP/UDP/IP/Ethernet headers + {} B preamble and gap)",
        a.eth,
        pcielab_model::eth::NETTLP_PKT_HDR,
        pcielab_model::eth::NETTLP_ETH_GAP
    );
    emit(&t.render(a.format, &title))
}

/// Runs `pcielab model …`.
pub fn run(args: ModelArgs) -> ExitCode {
    let plot_path = match &args.cmd {
        ModelCmd::Bw(a) => a.out.plot.as_deref(),
        ModelCmd::Nic(a) => a.out.plot.as_deref(),
        ModelCmd::Latency(a) => a.out.plot.as_deref(),
        ModelCmd::Link(_) | ModelCmd::Nettlp(_) => None,
    };
    // A --plot that cannot be written is refused before anything is printed.
    let checked = match plot_path.map(Plot::check_path) {
        Some(Err(e)) => Err(Fail::Input(e.to_string())),
        _ => Ok(()),
    };
    let r = checked.and_then(|()| match &args.cmd {
        ModelCmd::Bw(a) => run_bw(a),
        ModelCmd::Link(a) => run_link(a),
        ModelCmd::Nic(a) => run_nic(a),
        ModelCmd::Latency(a) => run_latency(a),
        ModelCmd::Nettlp(a) => run_nettlp(a),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail::Input(e)) => {
            eprintln!("pcielab: {e}");
            ExitCode::from(2)
        }
        Err(Fail::Output(e)) => {
            eprintln!("pcielab: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert!(matches!(parse_sizes("64").ok().as_deref(), Some([64])));
        assert_eq!(parse_sizes("1:4").ok(), Some(vec![1, 2, 3, 4]));
        assert!(parse_sizes("1:100000000").is_err());
    }
}
