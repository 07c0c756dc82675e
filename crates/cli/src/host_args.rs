//! The host model's flags, shared by `pcielab sim` and `pcielab bench`, and
//! `pcielab host` (list and show the built-in host profiles).

use crate::format::Format;
use clap::{Args, Subcommand};
use pcielab_fabric::host::model::{apply_knob, profile, profiles, KNOBS};
use pcielab_fabric::timed::SimConfig;
use pcielab_fabric::topology::Topology;

/// Host model flags. Precedence, lowest first: the simulator's defaults, a profile
/// (`--host`, else the topology's `[host] profile`), the topology's `[host]` knobs,
/// then each flag given here.
#[derive(Args, Debug, Clone, Default)]
pub struct HostArgs {
    /// Host profile (`pcielab host list`): spec (no host effects, the default),
    /// xeon-e5-haswell and xeon-e3-haswell (pcie-bench's hosts), gem5-table2,
    /// x9drd-e5-2650v2-kvm (the SR-IOV DMA engine paper's KVM host)
    #[arg(help_heading = "Host model", long, value_name = "NAME")]
    pub host: Option<String>,
    /// Root-complex latency (ns) per crossing: a DMA read pays it once (its request
    /// going in; memory answers), an MMIO read twice (request out, completion in)
    /// [default: 100]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub rc_ns: Option<f64>,
    /// Host memory latency, fixed part (ns) [default: 80]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub mem_ns: Option<f64>,
    /// Host memory latency per 64-byte line (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub mem_line_ns: Option<f64>,
    /// Seeded extra latency of each DMA read's memory access: zero,
    /// quantiles:P=NS,... (an empirical distribution: P from 0 to 1) or exp:P:MEAN_NS
    /// (with probability P an exponential extra) [default: zero]
    #[arg(help_heading = "Host model", long, value_name = "DIST")]
    pub mem_tail: Option<String>,
    /// CPU time of an MMIO read beyond the fabric (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub mmio_read_ns: Option<f64>,
    /// Seeded extra CPU-side latency of each MMIO read: zero, quantiles:P=NS,... or
    /// exp:P:MEAN_NS [default: zero]
    #[arg(help_heading = "Host model", long, value_name = "DIST")]
    pub mmio_tail: Option<String>,
    /// CPU time of a posted MMIO write (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub mmio_write_ns: Option<f64>,
    /// CPU time of a doorbell, an MMIO write behind a barrier (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub doorbell_ns: Option<f64>,
    /// MSI/MSI-X arrival at the root complex to its handler running (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub irq_ns: Option<f64>,
    /// Driver time per operation (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub driver_ns: Option<f64>,
    /// Last-level cache that DMA reads fill and DMA writes allocate into (DDIO), MiB;
    /// 0 = no cache model [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "MIB")]
    pub llc_mib: Option<f64>,
    /// Memory access of a DMA read whose lines are all cached (ns) [default: 30]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub llc_hit_ns: Option<f64>,
    /// Cache state of the DMA buffers: warm (host software touched them first),
    /// cold, or thrash (every DMA read misses) [default: cold]
    #[arg(help_heading = "Host model", long, value_name = "STATE")]
    pub cache: Option<String>,
    /// NUMA node of the DMA buffers: local or remote [default: local]
    #[arg(help_heading = "Host model", long, value_name = "NODE")]
    pub numa: Option<String>,
    /// Added latency of a DMA read from the remote node (ns) [default: 60]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub numa_ns: Option<f64>,
    /// IOTLB miss of a function assigned to a VM, a nested walk (ns; implies the
    /// IOMMU); 0 = the same as page_walk_ns [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub nested_walk_ns: Option<f64>,
    /// Interrupt injection into a VM (ns), on top of irq_ns, for a function assigned
    /// to one [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub vm_irq_ns: Option<f64>,
    /// Endpoint completer latency for BAR reads (ns) [default: 0]
    #[arg(help_heading = "Host model", long, value_name = "NS")]
    pub ep_ns: Option<f64>,
    /// Receive buffers of root and switch ports: HDR/DATA credits per class (data
    /// credits are 16 bytes; 0 = infinite) [default: 64/512]
    #[arg(help_heading = "Host model", long, value_name = "HDR/DATA")]
    pub port_buffer: Option<String>,
}

impl HostArgs {
    /// The flags given, as `(knob, value)`.
    pub fn knobs(&self) -> Vec<(&'static str, String)> {
        let f = |v: Option<f64>| v.map(|x| x.to_string());
        let all = [
            ("rc_ns", f(self.rc_ns)),
            ("mem_ns", f(self.mem_ns)),
            ("mem_line_ns", f(self.mem_line_ns)),
            ("mem_tail", self.mem_tail.clone()),
            ("mmio_read_ns", f(self.mmio_read_ns)),
            ("mmio_tail", self.mmio_tail.clone()),
            ("mmio_write_ns", f(self.mmio_write_ns)),
            ("doorbell_ns", f(self.doorbell_ns)),
            ("irq_ns", f(self.irq_ns)),
            ("driver_ns", f(self.driver_ns)),
            ("llc_mib", f(self.llc_mib)),
            ("llc_hit_ns", f(self.llc_hit_ns)),
            ("cache", self.cache.clone()),
            ("numa", self.numa.clone()),
            ("numa_ns", f(self.numa_ns)),
            ("nested_walk_ns", f(self.nested_walk_ns)),
            ("vm_irq_ns", f(self.vm_irq_ns)),
            ("ep_ns", f(self.ep_ns)),
            ("port_buffer", self.port_buffer.clone()),
        ];
        all.into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    }

    /// Applies the topology's `[host]` table, `--host` and the flags to `cfg`; the
    /// error names the flag or the profile.
    pub fn apply(&self, topo: &Topology, cfg: &mut SimConfig) -> Result<(), String> {
        if let Some(p) = &self.host {
            profile(p).map_err(|e| format!("--host: {e}"))?;
        }
        topo.host_config_with(cfg, self.host.as_deref())
            .map_err(|e| format!("{}: [host]: {e}", topo.file))?;
        for (k, v) in self.knobs() {
            apply_knob(cfg, k, &v).map_err(|e| format!("--{}: {e}", k.replace('_', "-")))?;
        }
        Ok(())
    }

    /// The profile in effect (`--host`, else the topology's), for headers.
    pub fn profile_name(&self, topo: &Topology) -> String {
        self.host
            .clone()
            .or_else(|| {
                topo.host
                    .iter()
                    .find(|(k, _)| k == "profile")
                    .map(|(_, v)| v.clone())
            })
            .unwrap_or_else(|| "spec".into())
    }
}

/// `pcielab host`.
#[derive(Subcommand, Debug)]
pub enum HostCmd {
    /// The built-in host profiles, one line each
    List {
        /// Output format
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// One profile: every knob it sets, its value and where the number comes from
    Show {
        /// Profile name
        name: String,
        /// Output format
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Every host knob: its name (a `[host]` key, or a flag in kebab case) and values
    Knobs,
}

/// Runs `pcielab host`.
pub fn run(cmd: &HostCmd) -> Result<String, String> {
    use serde_json::json;
    match cmd {
        HostCmd::List { format } => {
            let rows: Vec<serde_json::Value> = profiles()
                .iter()
                .map(|p| json!({"name": p.name, "knobs": p.knobs.len(), "description": p.description}))
                .collect();
            Ok(render(&rows, *format, &["name", "knobs", "description"]))
        }
        HostCmd::Show { name, format } => {
            let p = profile(name)?;
            let rows: Vec<serde_json::Value> = p
                .knobs
                .iter()
                .map(|(k, v, s)| json!({"knob": k, "value": v, "source": s}))
                .collect();
            let mut out = String::new();
            if *format == Format::Table {
                out.push_str(&format!("{}: {}\n\n", p.name, p.description));
                if rows.is_empty() {
                    out.push_str("(no knobs: the simulator's defaults)\n");
                    return Ok(out);
                }
            }
            out.push_str(&render(&rows, *format, &["knob", "value", "source"]));
            Ok(out)
        }
        HostCmd::Knobs => {
            let mut out = String::new();
            for k in KNOBS {
                out.push_str(&format!(
                    "{:<14} --{:<15} {}: {}\n",
                    k.name,
                    k.name.replace('_', "-"),
                    k.values,
                    k.help
                ));
            }
            Ok(out)
        }
    }
}

fn render(rows: &[serde_json::Value], format: Format, cols: &[&str]) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(rows).unwrap_or_default() + "\n",
        Format::Csv => {
            let mut out = cols.join(",") + "\n";
            for r in rows {
                let cells: Vec<String> = cols
                    .iter()
                    .map(|c| match &r[*c] {
                        serde_json::Value::String(s) => crate::format::csv_field(s),
                        v => v.to_string(),
                    })
                    .collect();
                out.push_str(&cells.join(","));
                out.push('\n');
            }
            out
        }
        Format::Table => {
            let mut out = String::new();
            for r in rows {
                let cells: Vec<String> = cols
                    .iter()
                    .map(|c| match &r[*c] {
                        serde_json::Value::String(s) => s.clone(),
                        v => v.to_string(),
                    })
                    .collect();
                out.push_str(&format!("{:<18} {}\n", cells[0], cells[1..].join("  ")));
            }
            out
        }
    }
}
