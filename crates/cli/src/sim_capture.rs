//! `pcielab sim --pcap FILE` and `--trace FILE`: every TLP and DLLP of a simulation,
//! streamed out of the simulator's trace while it runs (see `FabricSim::take_trace`).
//!
//! A workload may run several simulations (the sweep runs one per operation and size).
//! Each run gets its own interfaces, one per link direction, named like the simulator's
//! directions (`rc.0->sw0`) and described by the run (`run 3: dma read 256 B`); its
//! timestamps continue after the previous run's last record (plus one microsecond), so
//! the file reads in time order. Replayed and corrupted TLPs carry a packet comment.
//! Each TLP's NetTLP header carries its data-link sequence number; each link end has
//! its own addresses (10.0.0.N), so even a classic pcap keeps the direction.

use crate::{fail, Failure};
use pcielab_capture::encap::Endpoints;
use pcielab_capture::writer::{CaptureWriter, Format, IfId};
use pcielab_capture::DLL_REPLAY_COMMENT;
use pcielab_fabric::timed::{Trace, TraceKind};
use std::cell::Cell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Gap between two runs in a capture, in picoseconds.
const RUN_GAP_PS: u64 = 1_000_000;

/// A writer that counts the bytes written through it.
struct Counted<W> {
    inner: W,
    bytes: Rc<Cell<u64>>,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The number of a link end (`rc.0`, `sw0`, `sw0.1`, a device): in order of first
/// appearance, the same in every run of the invocation.
fn end_index(ends: &mut Vec<String>, name: &str) -> u16 {
    let i = match ends.iter().position(|e| e == name) {
        Some(i) => i,
        None => {
            ends.push(name.to_string());
            ends.len() - 1
        }
    };
    (i + 1).min(u16::MAX as usize) as u16
}

/// A link end's IPv4 address, 10.0.0.1 for the first end: each link direction is a
/// distinct conversation, so a classic pcap (one interface, no names) keeps which
/// direction a packet went.
fn end_ip(ends: &mut Vec<String>, name: &str) -> [u8; 4] {
    let [hi, lo] = end_index(ends, name).to_be_bytes();
    [10, 0, hi, lo]
}

/// A link end's MAC address: locally administered, 02:00:00:00 and the end's number.
fn end_mac(ends: &mut Vec<String>, name: &str) -> [u8; 6] {
    let [hi, lo] = end_index(ends, name).to_be_bytes();
    [0x02, 0, 0, 0, hi, lo]
}

/// Where the traces of a `pcielab sim` invocation go.
pub struct SimCapture {
    pcap: Option<(PathBuf, CaptureWriter<Counted<BufWriter<File>>>)>,
    /// Bytes written to the pcap file so far.
    pcap_bytes: Rc<Cell<u64>>,
    /// The pcap file's size limit (0: none).
    pcap_max: u64,
    /// TLPs/DLLPs left out of the pcap file once it reached `pcap_max`.
    pcap_dropped: u64,
    text: Option<(PathBuf, BufWriter<File>)>,
    offset_ps: u64,
    runs: usize,
    records: u64,
    ids: Vec<IfId>,
    run_last_ps: u64,
    /// Link ends seen, for their addresses ([`end_ip`]).
    ends: Vec<String>,
}

fn io_fail(path: &Path, e: impl std::fmt::Display) -> Failure {
    fail(format!("{}: {e}", path.display()))
}

impl SimCapture {
    /// Opens the requested outputs; `comment` (the topology and parameters) goes into the
    /// pcapng section header. Returns `None` when neither is asked for.
    pub fn open(
        pcap: Option<&Path>,
        trace: Option<&Path>,
        comment: &str,
    ) -> Result<Option<SimCapture>, Failure> {
        if pcap.is_none() && trace.is_none() {
            return Ok(None);
        }
        let pcap_bytes = Rc::new(Cell::new(0));
        let pcap = match pcap {
            Some(p) => {
                let format = if p.extension().is_some_and(|e| e == "pcap") {
                    Format::Pcap
                } else {
                    Format::Pcapng
                };
                let f = File::create(p).map_err(|e| io_fail(p, e))?;
                let out = Counted {
                    inner: BufWriter::new(f),
                    bytes: pcap_bytes.clone(),
                };
                let w = CaptureWriter::new(out, format, comment).map_err(|e| io_fail(p, e))?;
                Some((p.to_path_buf(), w))
            }
            None => None,
        };
        let text = match trace {
            Some(p) => {
                let f = File::create(p).map_err(|e| io_fail(p, e))?;
                Some((p.to_path_buf(), BufWriter::new(f)))
            }
            None => None,
        };
        Ok(Some(SimCapture {
            pcap,
            pcap_bytes,
            pcap_max: 0,
            pcap_dropped: 0,
            text,
            offset_ps: 0,
            runs: 0,
            records: 0,
            ids: Vec::new(),
            run_last_ps: 0,
            ends: Vec::new(),
        }))
    }

    /// Limits the pcap file to `max` bytes (0: no limit): once a packet takes it to the
    /// limit, later packets are counted, not written.
    pub fn set_pcap_max(&mut self, max: u64) {
        self.pcap_max = max;
    }

    fn pcap_full(&self) -> bool {
        self.pcap_max > 0 && self.pcap_bytes.get() >= self.pcap_max
    }

    /// Starts a run labelled `label` whose link directions are `dir_names`.
    pub fn begin_run(&mut self, label: &str, dir_names: &[String]) -> Result<(), Failure> {
        self.runs += 1;
        self.ids.clear();
        self.run_last_ps = 0;
        let full = self.pcap_full();
        if let Some((path, w)) = self.pcap.as_mut().filter(|_| !full) {
            let desc = format!("run {}: {label}", self.runs);
            for name in dir_names {
                let (from, to) = name.split_once("->").unwrap_or((name, name));
                let ep = Endpoints {
                    src_mac: end_mac(&mut self.ends, from),
                    dst_mac: end_mac(&mut self.ends, to),
                    src_ip: end_ip(&mut self.ends, from),
                    dst_ip: end_ip(&mut self.ends, to),
                };
                let id = w
                    .add_interface_with(name, &desc, ep)
                    .map_err(|e| io_fail(path, e))?;
                self.ids.push(id);
            }
        }
        if let Some((path, f)) = &mut self.text {
            let head = format!(
                "# run {}: {label} (times from {} ps)\n",
                self.runs, self.offset_ps
            );
            f.write_all(head.as_bytes()).map_err(|e| io_fail(path, e))?;
        }
        Ok(())
    }

    /// Writes the records of `trace` (a piece of the current run's trace).
    pub fn records(&mut self, trace: &Trace) -> Result<(), Failure> {
        let offset = self.offset_ps;
        let (max, bytes) = (self.pcap_max, self.pcap_bytes.clone());
        if let Some((path, w)) = &mut self.pcap {
            for (k, r) in trace.records.iter().enumerate() {
                if max > 0 && bytes.get() >= max {
                    self.pcap_dropped += (trace.records.len() - k) as u64;
                    break;
                }
                let Some(&id) = self.ids.get(r.dir as usize) else {
                    return Err(fail(format!(
                        "{}: trace record on unknown link direction {}",
                        path.display(),
                        r.dir
                    )));
                };
                let t = offset + r.time_ps;
                let bytes = trace.bytes(r);
                let res = match r.kind {
                    TraceKind::Tlp {
                        seq,
                        replay,
                        corrupted,
                    } => {
                        // The data-link sequence number goes in the NetTLP header.
                        let mut c = if replay {
                            format!("{DLL_REPLAY_COMMENT} (seq {seq})")
                        } else {
                            format!("seq {seq}")
                        };
                        if corrupted {
                            c.push_str(", ");
                            c.push_str(pcielab_capture::LCRC_CORRUPTED_COMMENT);
                        }
                        let comment = (replay || corrupted).then_some(c.as_str());
                        w.write_tlp_seq(id, t, bytes, seq, comment)
                    }
                    TraceKind::Dllp => w.write_dllp(id, t, bytes),
                };
                res.map_err(|e| io_fail(path, e))?;
            }
        }
        if let Some((path, f)) = &mut self.text {
            f.write_all(trace.to_text().as_bytes())
                .map_err(|e| io_fail(path, e))?;
        }
        self.records += trace.records.len() as u64;
        if let Some(r) = trace.records.last() {
            self.run_last_ps = self.run_last_ps.max(r.time_ps);
        }
        Ok(())
    }

    /// Ends the current run, which ended at simulated time `end_ps`: the next run's
    /// times start after it.
    pub fn end_run(&mut self, end_ps: u64) {
        self.offset_ps += end_ps.max(self.run_last_ps) + RUN_GAP_PS;
    }

    /// Flushes and closes; returns a one-line summary for standard error.
    pub fn finish(self) -> Result<String, Failure> {
        let mut out = Vec::new();
        let mut legend = String::new();
        if let Some((_, w)) = &self.pcap {
            if w.format() == Format::Pcap {
                // Classic pcap has no interface names: say which end is which address.
                let ends: Vec<String> = self
                    .ends
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let [hi, lo] = ((i + 1) as u16).to_be_bytes();
                        format!("10.0.{hi}.{lo} {e}")
                    })
                    .collect();
                legend = format!("\nlink ends by IPv4 address: {}", ends.join(", "));
            }
        }
        if let Some((path, w)) = self.pcap {
            let mut f = w.finish().map_err(|e| io_fail(&path, e))?;
            f.flush().map_err(|e| io_fail(&path, e))?;
            out.push(path.display().to_string());
        }
        if let Some((path, mut f)) = self.text {
            f.flush().map_err(|e| io_fail(&path, e))?;
            out.push(path.display().to_string());
        }
        let mut line = format!(
            "captured {} TLPs/DLLPs of {} run(s) to {}{legend}",
            self.records,
            self.runs,
            out.join(" and ")
        );
        if self.pcap_dropped > 0 {
            line.push_str(&format!(
                "\npcielab: warning: the pcap file reached --pcap-max ({} bytes): it holds the \
                 first {} TLPs/DLLPs, the last {} are not in it (raise --pcap-max, or 0 for no \
                 limit)",
                self.pcap_max,
                self.records - self.pcap_dropped,
                self.pcap_dropped
            ));
        }
        Ok(line)
    }
}
