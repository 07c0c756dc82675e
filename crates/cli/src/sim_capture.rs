//! `pcielab sim --pcap FILE` and `--trace FILE`: every TLP and DLLP of a simulation,
//! streamed out of the simulator's trace while it runs (see `FabricSim::take_trace`).
//!
//! A workload may run several simulations (the sweep runs one per operation and size).
//! Each run gets its own interfaces, one per link direction, named like the simulator's
//! directions (`rc.0->sw0`) and described by the run (`run 3: dma read 256 B`); its
//! timestamps continue after the previous run's last record (plus one microsecond), so
//! the file reads in time order. Replayed and corrupted TLPs carry a packet comment.

use crate::{fail, Failure};
use pcielab_capture::writer::{CaptureWriter, Format, IfId};
use pcielab_capture::DLL_REPLAY_COMMENT;
use pcielab_fabric::timed::{Trace, TraceKind};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Gap between two runs in a capture, in picoseconds.
const RUN_GAP_PS: u64 = 1_000_000;

/// Where the traces of a `pcielab sim` invocation go.
pub struct SimCapture {
    pcap: Option<(PathBuf, CaptureWriter<BufWriter<File>>)>,
    text: Option<(PathBuf, BufWriter<File>)>,
    offset_ps: u64,
    runs: usize,
    records: u64,
    ids: Vec<IfId>,
    run_last_ps: u64,
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
        let pcap = match pcap {
            Some(p) => {
                let format = if p.extension().is_some_and(|e| e == "pcap") {
                    Format::Pcap
                } else {
                    Format::Pcapng
                };
                let w = CaptureWriter::create(p, format, comment).map_err(|e| io_fail(p, e))?;
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
            text,
            offset_ps: 0,
            runs: 0,
            records: 0,
            ids: Vec::new(),
            run_last_ps: 0,
        }))
    }

    /// Starts a run labelled `label` whose link directions are `dir_names`.
    pub fn begin_run(&mut self, label: &str, dir_names: &[String]) -> Result<(), Failure> {
        self.runs += 1;
        self.ids.clear();
        self.run_last_ps = 0;
        if let Some((path, w)) = &mut self.pcap {
            let desc = format!("run {}: {label}", self.runs);
            for name in dir_names {
                let id = w
                    .add_interface_with(name, &desc, Default::default())
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
        if let Some((path, w)) = &mut self.pcap {
            for r in &trace.records {
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
                    } if replay || corrupted => {
                        let mut c = if replay {
                            format!("{DLL_REPLAY_COMMENT} (seq {seq})")
                        } else {
                            format!("seq {seq}")
                        };
                        if corrupted {
                            c.push_str(
                                ", LCRC corrupted on the wire (injected): the receiver discards it",
                            );
                        }
                        w.write_tlp_commented(id, t, bytes, &c)
                    }
                    TraceKind::Tlp { .. } => w.write_tlp(id, t, bytes),
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
        if let Some((path, w)) = self.pcap {
            let mut f = w.finish().map_err(|e| io_fail(&path, e))?;
            f.flush().map_err(|e| io_fail(&path, e))?;
            out.push(path.display().to_string());
        }
        if let Some((path, mut f)) = self.text {
            f.flush().map_err(|e| io_fail(&path, e))?;
            out.push(path.display().to_string());
        }
        Ok(format!(
            "captured {} TLPs/DLLPs of {} run(s) to {}",
            self.records,
            self.runs,
            out.join(" and ")
        ))
    }
}
