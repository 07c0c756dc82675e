//! The host as it behaves: CPU and driver costs, seeded latency distributions, cache
//! state, NUMA placement, and named host profiles.
//!
//! Every knob has one snake_case name used in three places: a `[host]` table of a
//! topology file, a profile in the data file `data/hosts.toml` (see [`profiles`]),
//! and a CLI flag (the same name in kebab case, `--mmio-read-ns`). [`apply_knob`]
//! turns a name and a value into a change of [`SimConfig`]; [`KNOBS`] lists them.
//!
//! ```
//! use pcielab_fabric::host::model::{apply_knob, profile};
//! use pcielab_fabric::timed::SimConfig;
//! let mut cfg = SimConfig::default();
//! profile("gem5-table2").unwrap().apply(&mut cfg).unwrap();
//! assert!(cfg.host.mmio_read.as_ps() > 0);
//! apply_knob(&mut cfg, "cache", "warm").unwrap();
//! assert!(apply_knob(&mut cfg, "cache", "lukewarm").is_err());
//! ```

use crate::params::{BufferCredits, IommuConfig, SimConfig};
pub use crate::params::{CacheState, HostCosts, LatencyDist};
use pcielab_sim::{Rng, SimDuration};
use std::fmt;

impl LatencyDist {
    /// Parses `zero`, `quantiles:P=NS,P=NS,...` (P from 0 to 1, NS not falling, at
    /// least two points, the first at 0 and the last at 1) or `exp:P:MEAN_NS`.
    ///
    /// ```
    /// use pcielab_fabric::host::model::LatencyDist;
    /// let d = LatencyDist::parse("quantiles:0=0,0.5=27,1=427").unwrap();
    /// assert_eq!(d.quantile_ns(0.5), 27.0);
    /// assert_eq!(d.quantile_ns(0.75), 227.0);
    /// assert!(LatencyDist::parse("quantiles:0=5,0.5=1,1=9").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<LatencyDist, String> {
        let s = s.trim();
        if s == "zero" || s == "0" {
            return Ok(LatencyDist::Zero);
        }
        if let Some(rest) = s.strip_prefix("quantiles:") {
            let mut pts = Vec::new();
            for (i, item) in rest.split(',').enumerate() {
                let Some((p, ns)) = item.split_once('=') else {
                    return Err(format!("point {} ({item:?}): expected P=NS", i + 1));
                };
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| format!("point {} ({item:?}): P is not a number", i + 1))?;
                let ns: f64 = ns
                    .trim()
                    .parse()
                    .map_err(|_| format!("point {} ({item:?}): NS is not a number", i + 1))?;
                if !(0.0..=1.0).contains(&p) || !(0.0..=1e9).contains(&ns) {
                    return Err(format!(
                        "point {} ({item:?}): P must be in 0..=1 and NS in 0..=1e9",
                        i + 1
                    ));
                }
                if let Some(&(pp, pns)) = pts.last() {
                    if p <= pp || ((ns * 1000.0).round() as u64) < pns {
                        return Err(format!(
                            "point {} ({item:?}): P must rise and NS must not fall",
                            i + 1
                        ));
                    }
                }
                pts.push((p, (ns * 1000.0).round() as u64));
            }
            if pts.len() < 2 || pts[0].0 != 0.0 || pts[pts.len() - 1].0 != 1.0 {
                return Err(
                    "quantiles need at least two points, the first at P=0 and the last at P=1"
                        .into(),
                );
            }
            return Ok(LatencyDist::Quantiles(pts).normalized());
        }
        if let Some(rest) = s.strip_prefix("exp:") {
            let Some((p, mean)) = rest.split_once(':') else {
                return Err("expected exp:P:MEAN_NS".into());
            };
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| "exp: P is not a number".to_string())?;
            let mean: f64 = mean
                .trim()
                .parse()
                .map_err(|_| "exp: MEAN_NS is not a number".to_string())?;
            if !(0.0..=1.0).contains(&p) || !(0.0..=1e9).contains(&mean) {
                return Err("exp: P must be in 0..=1 and MEAN_NS in 0..=1e9".into());
            }
            return Ok(LatencyDist::Exp {
                p,
                mean_ps: (mean * 1000.0).round() as u64,
            }
            .normalized());
        }
        Err(format!(
            "{s:?}: expected zero, quantiles:P=NS,... or exp:P:MEAN_NS"
        ))
    }

    /// `Zero` for a distribution whose every sample is zero (so that no random draw is
    /// made for it), else itself.
    fn normalized(self) -> LatencyDist {
        let zero = match &self {
            LatencyDist::Zero => true,
            LatencyDist::Quantiles(q) => q.iter().all(|&(_, ns)| ns == 0),
            LatencyDist::Exp { p, mean_ps } => *p == 0.0 || *mean_ps == 0,
        };
        if zero {
            LatencyDist::Zero
        } else {
            self
        }
    }

    /// Whether every sample is zero (no random draw is made then): a parsed
    /// distribution whose samples are all zero is `Zero`.
    #[inline]
    pub fn is_zero(&self) -> bool {
        matches!(self, LatencyDist::Zero)
    }

    /// The inverse CDF at `u` (0..=1), ns.
    pub fn quantile_ns(&self, u: f64) -> f64 {
        self.at(u.clamp(0.0, 1.0)) as f64 / 1000.0
    }

    fn at(&self, u: f64) -> u64 {
        match self {
            LatencyDist::Zero => 0,
            LatencyDist::Quantiles(q) => {
                let i = q.partition_point(|&(p, _)| p < u).clamp(1, q.len() - 1);
                let (p0, v0) = q[i - 1];
                let (p1, v1) = q[i];
                let f = if p1 > p0 { (u - p0) / (p1 - p0) } else { 1.0 };
                v0 + ((v1 - v0) as f64 * f.clamp(0.0, 1.0)).round() as u64
            }
            LatencyDist::Exp { p, mean_ps } => {
                if u >= 1.0 - p {
                    // The tail's own uniform, rescaled from [1-p, 1).
                    let t = ((u - (1.0 - p)) / p).min(1.0 - 1e-12);
                    (-(1.0 - t).ln() * *mean_ps as f64).round() as u64
                } else {
                    0
                }
            }
        }
    }

    /// One seeded sample.
    pub fn sample(&self, rng: &mut Rng) -> SimDuration {
        if self.is_zero() {
            return SimDuration::ZERO;
        }
        SimDuration::from_ps(self.at(rng.unit_f64()))
    }
}

impl fmt::Display for LatencyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LatencyDist::Zero => write!(f, "zero"),
            LatencyDist::Quantiles(q) => {
                write!(f, "quantiles:")?;
                for (i, (p, ps)) in q.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{p}={}", *ps as f64 / 1000.0)?;
                }
                Ok(())
            }
            LatencyDist::Exp { p, mean_ps } => write!(f, "exp:{p}:{}", *mean_ps as f64 / 1000.0),
        }
    }
}

impl CacheState {
    /// Parses `warm`, `cold` or `thrash`.
    pub fn parse(s: &str) -> Result<CacheState, String> {
        match s {
            "warm" => Ok(CacheState::Warm),
            "cold" => Ok(CacheState::Cold),
            "thrash" => Ok(CacheState::Thrash),
            _ => Err(format!("{s:?}: expected warm, cold or thrash")),
        }
    }

    /// The name `parse` takes.
    pub fn name(self) -> &'static str {
        match self {
            CacheState::Warm => "warm",
            CacheState::Cold => "cold",
            CacheState::Thrash => "thrash",
        }
    }
}

/// One knob: its name, what it takes and what it sets.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// snake_case name (kebab case on the CLI).
    pub name: &'static str,
    /// What values it takes.
    pub values: &'static str,
    /// What it sets.
    pub help: &'static str,
}

/// Every host knob.
pub const KNOBS: &[Knob] = &[
    Knob {
        name: "rc_ns",
        values: "ns",
        help: "root-complex latency per crossing",
    },
    Knob {
        name: "mem_ns",
        values: "ns",
        help: "host memory access, fixed part",
    },
    Knob {
        name: "mem_line_ns",
        values: "ns",
        help: "host memory access, per 64-byte line",
    },
    Knob {
        name: "mem_tail",
        values: "zero | quantiles:P=NS,... | exp:P:MEAN_NS",
        help: "seeded extra latency of each DMA read's memory access",
    },
    Knob {
        name: "mmio_read_ns",
        values: "ns",
        help: "CPU time of an MMIO read beyond the fabric",
    },
    Knob {
        name: "mmio_tail",
        values: "zero | quantiles:P=NS,... | exp:P:MEAN_NS",
        help: "seeded extra CPU-side latency of each MMIO read",
    },
    Knob {
        name: "mmio_write_ns",
        values: "ns",
        help: "CPU time of a posted MMIO write",
    },
    Knob {
        name: "doorbell_ns",
        values: "ns",
        help: "CPU time of a doorbell (MMIO write behind a barrier)",
    },
    Knob {
        name: "irq_ns",
        values: "ns",
        help: "MSI/MSI-X arrival at the root complex to its handler running",
    },
    Knob {
        name: "driver_ns",
        values: "ns",
        help: "driver time per operation",
    },
    Knob {
        name: "llc_mib",
        values: "MiB (0 = no cache model)",
        help: "last-level cache that DMA reads fill and DMA writes allocate into (DDIO)",
    },
    Knob {
        name: "llc_hit_ns",
        values: "ns",
        help: "memory access of a DMA read whose lines are all cached",
    },
    Knob {
        name: "cache",
        values: "warm | cold | thrash",
        help: "state of the cache for the DMA buffers",
    },
    Knob {
        name: "numa",
        values: "local | remote",
        help: "node of the DMA buffers",
    },
    Knob {
        name: "numa_ns",
        values: "ns",
        help: "added latency of a DMA read from the remote node",
    },
    Knob {
        name: "iommu",
        values: "on | off",
        help: "an IOMMU in the root complex",
    },
    Knob {
        name: "iotlb_entries",
        values: "1..=1048576",
        help: "IOTLB entries (with the IOMMU)",
    },
    Knob {
        name: "page_walk_ns",
        values: "ns",
        help: "IOTLB miss (page walk) latency",
    },
    Knob {
        name: "nested_walk_ns",
        values: "ns (0 = same as page_walk_ns)",
        help: "IOTLB miss of a function assigned to a VM (nested walk)",
    },
    Knob {
        name: "vm_irq_ns",
        values: "ns",
        help: "interrupt injection into a VM, on top of irq_ns",
    },
    Knob {
        name: "ep_ns",
        values: "ns",
        help: "endpoint completer latency for BAR reads",
    },
    Knob {
        name: "port_buffer",
        values: "HDR/DATA credits per class",
        help: "receive buffers of root and switch ports",
    },
];

fn ns(key: &str, v: &str) -> Result<SimDuration, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{key} = {v:?}: not a number of ns"))?;
    if !(0.0..=1e9).contains(&x) {
        return Err(format!("{key} = {v}: must be in 0..=1e9 ns"));
    }
    Ok(SimDuration::from_ps((x * 1000.0).round() as u64))
}

/// Sets knob `key` to `value` in `cfg`; the error names the knob, the value and what
/// it takes.
pub fn apply_knob(cfg: &mut SimConfig, key: &str, value: &str) -> Result<(), String> {
    let v = value.trim();
    match key {
        "rc_ns" => cfg.rc_latency = ns(key, v)?,
        "mem_ns" => cfg.mem_latency = ns(key, v)?,
        "mem_line_ns" => cfg.mem_per_line = ns(key, v)?,
        "mem_tail" => cfg.mem_tail = LatencyDist::parse(v).map_err(|e| format!("{key}: {e}"))?,
        "mmio_read_ns" => cfg.host.mmio_read = ns(key, v)?,
        "mmio_tail" => cfg.mmio_tail = LatencyDist::parse(v).map_err(|e| format!("{key}: {e}"))?,
        "mmio_write_ns" => cfg.host.mmio_write = ns(key, v)?,
        "doorbell_ns" => cfg.host.doorbell = ns(key, v)?,
        "irq_ns" => cfg.host.irq = ns(key, v)?,
        "driver_ns" => cfg.host.driver_op = ns(key, v)?,
        "llc_mib" => {
            let m: f64 = v
                .parse()
                .map_err(|_| format!("{key} = {v:?}: not a number of MiB"))?;
            if !(0.0..=4096.0).contains(&m) {
                return Err(format!("{key} = {v}: must be in 0..=4096 MiB"));
            }
            cfg.llc_lines = (m * 1024.0 * 1024.0 / 64.0).round() as usize;
        }
        "llc_hit_ns" => cfg.llc_hit_latency = ns(key, v)?,
        "cache" => cfg.cache = CacheState::parse(v).map_err(|e| format!("{key}: {e}"))?,
        "numa" => {
            cfg.numa_remote_base = match v {
                "local" => None,
                "remote" => Some(0),
                _ => return Err(format!("{key}: {v:?}: expected local or remote")),
            }
        }
        "numa_ns" => cfg.numa_penalty = ns(key, v)?,
        "iommu" => match v {
            "on" | "true" => {
                if cfg.iommu.is_none() {
                    cfg.iommu = Some(IommuConfig::default());
                }
            }
            "off" | "false" => cfg.iommu = None,
            _ => return Err(format!("{key}: {v:?}: expected on or off")),
        },
        "iotlb_entries" => {
            let n: usize = v
                .parse()
                .ok()
                .filter(|n| (1..=1 << 20).contains(n))
                .ok_or_else(|| format!("{key} = {v:?}: expected 1..=1048576"))?;
            cfg.iommu
                .get_or_insert_with(IommuConfig::default)
                .iotlb_entries = n;
        }
        "page_walk_ns" => {
            let d = ns(key, v)?;
            cfg.iommu
                .get_or_insert_with(IommuConfig::default)
                .miss_latency = d;
        }
        "nested_walk_ns" => {
            let d = ns(key, v)?;
            cfg.iommu
                .get_or_insert_with(IommuConfig::default)
                .nested_walk = d;
        }
        "vm_irq_ns" => cfg.host.vm_irq = ns(key, v)?,
        "ep_ns" => cfg.ep_latency = ns(key, v)?,
        "port_buffer" => {
            let bad = || {
                format!("{key} = {v:?}: expected HDR/DATA (header and 16-byte data credits per class, 0 = infinite)")
            };
            let (h, d) = v.split_once('/').ok_or_else(bad)?;
            let h: u32 = h.trim().parse().map_err(|_| bad())?;
            let d: u32 = d.trim().parse().map_err(|_| bad())?;
            if h > 4096 || d > 65536 {
                return Err(bad());
            }
            cfg.port_buffer = BufferCredits {
                hdr: [h; 3],
                data: [d; 3],
            };
        }
        _ => {
            return Err(format!(
                "unknown host knob {key:?}; allowed: {}",
                KNOBS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            ))
        }
    }
    Ok(())
}

/// A named set of knob values, with where each comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct HostProfile {
    /// The name (`--host NAME`, `[host] profile = "NAME"`).
    pub name: String,
    /// What machine it describes.
    pub description: String,
    /// `(knob, value, source)` in file order.
    pub knobs: Vec<(String, String, String)>,
}

impl HostProfile {
    /// Applies every knob to `cfg`.
    pub fn apply(&self, cfg: &mut SimConfig) -> Result<(), String> {
        for (k, v, _) in &self.knobs {
            apply_knob(cfg, k, v).map_err(|e| format!("host profile {:?}: {e}", self.name))?;
        }
        Ok(())
    }

    /// The value of knob `key`, if the profile sets it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.knobs.iter().find(|k| k.0 == key).map(|k| k.1.as_str())
    }
}

/// The profile data file shipped with the crate.
pub const PROFILES_TOML: &str = include_str!("../../data/hosts.toml");

/// Parses a profile file: one table per profile with `description` and knobs; each
/// knob is `NAME = VALUE` or `NAME = { value = VALUE, source = "..." }`. Errors name
/// the profile and the key.
pub fn parse_profiles(text: &str, file: &str) -> Result<Vec<HostProfile>, String> {
    let doc =
        toml_edit::Document::parse(text).map_err(|e| format!("{file}: not valid TOML: {e}"))?;
    let mut out = Vec::new();
    for (name, item) in doc.as_table().iter() {
        let Some(t) = item.as_table() else {
            return Err(format!("{file}: {name}: a profile must be a table"));
        };
        let mut p = HostProfile {
            name: name.to_string(),
            description: String::new(),
            knobs: Vec::new(),
        };
        for (k, v) in t.iter() {
            if k == "description" {
                p.description = v
                    .as_str()
                    .ok_or_else(|| format!("{file}: [{name}] description: must be a string"))?
                    .to_string();
                continue;
            }
            let (value, source) = match v.as_inline_table() {
                Some(it) => {
                    let val = it.get("value").and_then(toml_scalar).ok_or_else(|| {
                        format!(
                            "{file}: [{name}] {k}: missing value (a string, a number or a boolean)"
                        )
                    })?;
                    let src = it
                        .get("source")
                        .and_then(|s| s.as_str())
                        .ok_or_else(|| format!("{file}: [{name}] {k}: missing source (every profile value says where it comes from)"))?;
                    (val, src.to_string())
                }
                None => {
                    let val = v.as_value().and_then(toml_scalar).ok_or_else(|| {
                        format!("{file}: [{name}] {k}: not a string, a number or a boolean")
                    })?;
                    (val, String::new())
                }
            };
            let mut scratch = SimConfig::default();
            apply_knob(&mut scratch, k, &value).map_err(|e| format!("{file}: [{name}] {e}"))?;
            p.knobs.push((k.to_string(), value, source));
        }
        out.push(p);
    }
    Ok(out)
}

/// A knob's value as text: a string, a number or a boolean; None for anything else.
pub(crate) fn toml_scalar(v: &toml_edit::Value) -> Option<String> {
    match v {
        toml_edit::Value::String(s) => Some(s.value().clone()),
        toml_edit::Value::Integer(i) => Some(i.value().to_string()),
        toml_edit::Value::Float(f) => Some(f.value().to_string()),
        toml_edit::Value::Boolean(b) => Some(b.value().to_string()),
        _ => None,
    }
}

/// The built-in profiles (from [`PROFILES_TOML`]).
pub fn profiles() -> Vec<HostProfile> {
    parse_profiles(PROFILES_TOML, "hosts.toml").expect("the built-in host profiles parse")
}

/// The built-in profile `name`; the error lists the names.
pub fn profile(name: &str) -> Result<HostProfile, String> {
    let all = profiles();
    all.iter().find(|p| p.name == name).cloned().ok_or_else(|| {
        format!(
            "unknown host profile {name:?}; built in: {}",
            all.iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_samples_follow_the_table() {
        let d = LatencyDist::parse("quantiles:0=0,0.5=10,0.9=100,1=1000").unwrap();
        let mut rng = Rng::new(3);
        let mut v: Vec<u64> = (0..20000).map(|_| d.sample(&mut rng).as_ps()).collect();
        v.sort();
        let med = v[v.len() / 2] as f64 / 1000.0;
        let p90 = v[v.len() * 9 / 10] as f64 / 1000.0;
        assert!((med - 10.0).abs() < 1.0, "median {med}");
        assert!((p90 - 100.0).abs() < 10.0, "p90 {p90}");
        assert!(*v.last().unwrap() <= 1_000_000);
    }

    #[test]
    fn exp_tail_has_its_probability_and_mean() {
        let d = LatencyDist::parse("exp:0.1:500").unwrap();
        let mut rng = Rng::new(9);
        let v: Vec<u64> = (0..50000).map(|_| d.sample(&mut rng).as_ps()).collect();
        let tail: Vec<u64> = v.iter().copied().filter(|&x| x > 0).collect();
        let frac = tail.len() as f64 / v.len() as f64;
        let mean = tail.iter().sum::<u64>() as f64 / tail.len() as f64 / 1000.0;
        assert!((frac - 0.1).abs() < 0.01, "{frac}");
        assert!((mean - 500.0).abs() < 25.0, "{mean}");
    }

    #[test]
    fn zero_draws_nothing() {
        let mut a = Rng::new(1);
        let b = Rng::new(1);
        assert_eq!(LatencyDist::Zero.sample(&mut a), SimDuration::ZERO);
        assert_eq!(a.clone().next_u64(), b.clone().next_u64());
    }

    #[test]
    fn bad_knobs_say_what_is_wrong() {
        let mut c = SimConfig::default();
        for (k, v, want) in [
            ("rc_ns", "fast", "not a number"),
            ("rc_ns", "-1", "0..=1e9"),
            ("port_buffer", "16", "HDR/DATA"),
            ("numa", "far", "local or remote"),
            ("mem_tail", "quantiles:0.5=1,1=2", "first at P=0"),
            ("frobnicate", "1", "unknown host knob"),
        ] {
            let e = apply_knob(&mut c, k, v).unwrap_err();
            assert!(e.contains(want), "{k}={v}: {e}");
        }
    }

    #[test]
    fn every_knob_applies_and_profiles_parse() {
        let mut c = SimConfig::default();
        for (k, v) in [
            ("rc_ns", "120"),
            ("mem_ns", "90"),
            ("mem_line_ns", "1"),
            ("mem_tail", "exp:0.01:1000"),
            ("mmio_read_ns", "100"),
            ("mmio_tail", "exp:0.5:20"),
            ("mmio_write_ns", "20"),
            ("doorbell_ns", "40"),
            ("irq_ns", "900"),
            ("driver_ns", "50"),
            ("llc_mib", "1.5"),
            ("llc_hit_ns", "25"),
            ("cache", "thrash"),
            ("numa", "remote"),
            ("numa_ns", "70"),
            ("iommu", "on"),
            ("iotlb_entries", "32"),
            ("page_walk_ns", "300"),
            ("nested_walk_ns", "1100"),
            ("vm_irq_ns", "2500"),
            ("ep_ns", "10"),
            ("port_buffer", "16/256"),
        ] {
            apply_knob(&mut c, k, v).unwrap();
        }
        assert_eq!(KNOBS.len(), 22);
        assert_eq!(c.iommu.unwrap().nested_walk, SimDuration::from_ns(1100));
        assert_eq!(c.host.vm_irq, SimDuration::from_ns(2500));
        assert_eq!(c.llc_lines, 24576);
        assert_eq!(c.iommu.unwrap().iotlb_entries, 32);
        assert_eq!(c.port_buffer.hdr, [16; 3]);
        assert_eq!(c.cache, CacheState::Thrash);
        assert_eq!(c.host.irq, SimDuration::from_ns(900));
        let all = profiles();
        assert!(all.iter().any(|p| p.name == "spec" && p.knobs.is_empty()));
        for p in &all {
            assert!(!p.description.is_empty(), "{}", p.name);
            for (k, _, src) in &p.knobs {
                assert!(!src.is_empty(), "{}.{k} has no source", p.name);
            }
        }
        assert!(profile("nope").unwrap_err().contains("spec"));
    }

    #[test]
    fn profile_file_errors_name_profile_and_key() {
        let e = parse_profiles("[x]\ndescription=\"d\"\nrc_ns = { value = 5 }\n", "f.toml")
            .unwrap_err();
        assert!(e.contains("[x] rc_ns: missing source"), "{e}");
        let e = parse_profiles("[x]\nrc_ns = \"abc\"\n", "f.toml").unwrap_err();
        assert!(e.contains("[x] rc_ns"), "{e}");
    }
}
