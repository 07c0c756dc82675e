//! Reading captures: pcapng (any byte order, several sections, any `if_tsresol`, `if_tsoffset`)
//! and classic pcap (micro- or nanosecond, either byte order), from our writer or from
//! tcpdump on a real NetTLP link.
//!
//! The reader works on bytes in memory and never panics: a truncated or corrupt file gives
//! a [`ReadError`] naming what is wrong and its byte offset in the file. Records whose
//! frames are not NetTLP traffic are still returned ([`Payload::OtherUdp`], [`Payload::NotUdp`]) so that frame
//! numbers match Wireshark's.
//!
//! ```
//! use pcielab_capture::{CaptureWriter, Format, Reader, Payload};
//! let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "").unwrap();
//! let i = w.add_interface("rc.0->ep0").unwrap();
//! w.write_tlp(i, 1_234_567, &[0, 0, 0, 1, 0, 0, 1, 0x0f, 0, 0, 0x10, 0]).unwrap();
//! let bytes = w.finish().unwrap();
//! let mut r = Reader::new(&bytes).unwrap();
//! let rec = r.next_record().unwrap().unwrap();
//! assert_eq!(r.interfaces()[rec.interface].name, "rc.0->ep0");
//! assert_eq!(rec.time_ps, 1_234_567);
//! assert!(matches!(rec.payload, Payload::Tlp(t) if t.len() == 12));
//! ```

use crate::encap::{self, Datagram, EncapError, NetTlpHeader};
use crate::writer::{classic, ng};
use std::fmt;
use std::io::Read;

/// What is wrong with a capture file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadErrorKind {
    /// The file ends inside a structure.
    Truncated {
        /// The structure ("pcap header", "block header", "packet data", …).
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// The file starts with neither a pcap magic nor a pcapng section header.
    UnknownFormat(u32),
    /// A pcapng byte-order magic that is neither `1a2b3c4d` nor its swap.
    BadByteOrderMagic(u32),
    /// A pcapng block length that is too small or not a multiple of 4.
    BadBlockLength(u32),
    /// The trailing length of a pcapng block differs from the leading one.
    TrailerMismatch {
        /// The leading length.
        leading: u32,
        /// The trailing length.
        trailing: u32,
    },
    /// A pcapng option runs past the end of its block.
    BadOption {
        /// The option code.
        code: u16,
    },
    /// A packet block names an interface that was not described.
    UnknownInterface(u32),
    /// A packet block's captured length exceeds the block.
    BadCapturedLength(u32),
    /// A packet block before any section header.
    NoSection,
}

/// A capture file error: what and where (byte offset from the start of the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    /// Byte offset in the file of the structure or field that is wrong.
    pub offset: u64,
    /// What is wrong.
    pub kind: ReadErrorKind,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: ", self.offset)?;
        match &self.kind {
            ReadErrorKind::Truncated {
                what,
                needed,
                available,
            } => write!(
                f,
                "truncated {what}: needs {needed} bytes, {available} left in the file"
            ),
            ReadErrorKind::UnknownFormat(m) => write!(
                f,
                "not a pcap or pcapng file (first word {m:#010x}; expected a1b2c3d4, a1b23c4d or 0a0d0d0a)"
            ),
            ReadErrorKind::BadByteOrderMagic(m) => {
                write!(f, "bad pcapng byte-order magic {m:#010x} (expected 1a2b3c4d)")
            }
            ReadErrorKind::BadBlockLength(l) => write!(
                f,
                "bad pcapng block length {l} (must be at least 12 and a multiple of 4)"
            ),
            ReadErrorKind::TrailerMismatch { leading, trailing } => write!(
                f,
                "pcapng block length {leading} does not match its trailing copy {trailing}"
            ),
            ReadErrorKind::BadOption { code } => {
                write!(f, "pcapng option {code} runs past the end of its block")
            }
            ReadErrorKind::UnknownInterface(i) => {
                write!(f, "packet on interface {i}, which no interface block describes")
            }
            ReadErrorKind::BadCapturedLength(l) => {
                write!(f, "captured length {l} exceeds the packet block")
            }
            ReadErrorKind::NoSection => write!(f, "packet block before any section header"),
        }
    }
}

impl std::error::Error for ReadError {}

/// The file format detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// pcapng.
    Pcapng,
    /// Classic pcap (microsecond or nanosecond).
    Pcap,
}

/// An interface of the capture (all sections together; classic pcap has one, named `pcap`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// `if_name`, or `if<N>` when absent.
    pub name: String,
    /// `if_description`, or empty.
    pub description: String,
    /// The link type.
    pub linktype: u16,
    /// Timestamp unit: `(multiplier, divisor)` so that ps = ts × multiplier / divisor.
    ts_scale: (u128, u128),
    /// `if_tsoffset` in seconds.
    ts_offset_s: i64,
}

/// What a record carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// TLP bytes (not yet decoded) after a NetTLP header.
    Tlp(&'a [u8]),
    /// DLLP bytes after a NetTLP header.
    Dllp(&'a [u8]),
    /// A NetTLP PCIe-configuration datagram.
    Config(&'a [u8]),
    /// A UDP datagram that is not NetTLP traffic.
    OtherUdp,
    /// Not an IPv4/UDP frame (the reason).
    NotUdp(EncapError),
}

/// One packet of the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Frame number, from 1 (as Wireshark counts).
    pub frame: u64,
    /// Index into [`Reader::interfaces`].
    pub interface: usize,
    /// Timestamp in picoseconds (since the epoch for wall-clock captures, since the start
    /// of the simulation for simulated ones).
    pub time_ps: u128,
    /// Byte offset of the packet's block/record in the file.
    pub offset: u64,
    /// The NetTLP header, for TLPs and DLLPs.
    pub nettlp: Option<NetTlpHeader>,
    /// UDP `(source, destination)` ports, when the frame is UDP.
    pub ports: Option<(u16, u16)>,
    /// Whether the frame was cut short by the capture's snap length.
    pub truncated: bool,
    /// Length of the TLP/DLLP as sent (from the UDP length), which exceeds the captured
    /// bytes when `truncated`.
    pub reported_len: usize,
    /// What it carries.
    pub payload: Payload<'a>,
    /// The whole captured frame.
    pub frame_bytes: &'a [u8],
    /// The packet's first comment (pcapng `opt_comment` of an Enhanced Packet Block).
    /// Simulation captures mark data-link retransmissions with one starting with
    /// [`DLL_REPLAY_COMMENT`](crate::DLL_REPLAY_COMMENT).
    pub comment: Option<&'a [u8]>,
}

#[derive(Debug, Clone, Copy)]
struct Endian(bool); // true = big endian

impl Endian {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.0 {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.0 {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }
}

/// What a reader knows of the file so far: shared by [`Reader`] (bytes in memory) and
/// [`StreamReader`] (any [`Read`]), which differ only in where a block's bytes come from.
#[derive(Debug)]
struct State {
    format: FileFormat,
    endian: Endian,
    interfaces: Vec<Interface>,
    /// Index in `interfaces` of interface 0 of the current section (pcapng).
    section_base: Option<usize>,
    comments: Vec<String>,
    frame: u64,
    failed: bool,
}

/// Reads records from a capture held in memory.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    st: State,
}

fn truncated(offset: usize, what: &'static str, needed: usize, available: usize) -> ReadError {
    ReadError {
        offset: offset as u64,
        kind: ReadErrorKind::Truncated {
            what,
            needed: needed as u64,
            available: available as u64,
        },
    }
}

fn pow10(n: u32) -> u128 {
    10u128.pow(n)
}

/// `(multiplier, divisor)` turning timestamp units of `if_tsresol` into picoseconds.
fn scale_of_tsresol(r: u8) -> (u128, u128) {
    let n = (r & 0x7f) as u32;
    if r & 0x80 == 0 {
        if n <= 12 {
            (pow10(12 - n), 1)
        } else {
            (1, pow10(n.min(38) - 12))
        }
    } else {
        // 2^-n seconds.
        (pow10(12), 1u128 << n.min(127))
    }
}

/// Bytes of a classic pcap file header.
const PCAP_HEADER: usize = 24;
/// Bytes of a classic pcap record header.
const PCAP_RECORD_HEADER: usize = 16;
/// Bytes of a pcapng block that say its type, length and (for a section header) byte order.
const PCAPNG_BLOCK_HEAD: usize = 12;

impl State {
    /// Reads the file header from the first bytes of the file (all of them when the file
    /// is shorter than a pcap header); returns the state and the bytes the header took
    /// (0 for pcapng, whose section header is read as a block).
    fn from_header(head: &[u8]) -> Result<(State, usize), ReadError> {
        if head.len() < 4 {
            return Err(truncated(0, "file header", 4, head.len()));
        }
        let le = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let mut st = State {
            format: FileFormat::Pcapng,
            endian: Endian(false),
            interfaces: Vec::new(),
            section_base: None,
            comments: Vec::new(),
            frame: 0,
            failed: false,
        };
        let ts_scale = match le {
            ng::SHB => return Ok((st, 0)),
            classic::MAGIC_US => (Endian(false), (1_000_000, 1)),
            classic::MAGIC_NS => (Endian(false), (1000, 1)),
            m if m.swap_bytes() == classic::MAGIC_US => (Endian(true), (1_000_000, 1)),
            m if m.swap_bytes() == classic::MAGIC_NS => (Endian(true), (1000, 1)),
            m => {
                return Err(ReadError {
                    offset: 0,
                    kind: ReadErrorKind::UnknownFormat(m.swap_bytes()),
                })
            }
        };
        if head.len() < PCAP_HEADER {
            return Err(truncated(0, "pcap file header", PCAP_HEADER, head.len()));
        }
        st.format = FileFormat::Pcap;
        st.endian = ts_scale.0;
        let linktype = (st.endian.u32(&head[20..24]) & 0xffff) as u16;
        st.interfaces.push(Interface {
            name: "pcap".to_string(),
            description: String::new(),
            linktype,
            ts_scale: ts_scale.1,
            ts_offset_s: 0,
        });
        Ok((st, PCAP_HEADER))
    }

    /// Bytes of the unit (pcap record or pcapng block) that starts with `head` (16 or
    /// 12 bytes) at file offset `start`. A pcapng section header sets the byte order.
    fn unit_len(&mut self, start: usize, head: &[u8]) -> Result<usize, ReadError> {
        match self.format {
            FileFormat::Pcap => Ok(PCAP_RECORD_HEADER + self.endian.u32(&head[8..12]) as usize),
            FileFormat::Pcapng => {
                let btype_le = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
                if btype_le == ng::SHB {
                    let ml = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
                    self.endian = if ml == ng::BYTE_ORDER_MAGIC {
                        Endian(false)
                    } else if ml.swap_bytes() == ng::BYTE_ORDER_MAGIC {
                        Endian(true)
                    } else {
                        return Err(ReadError {
                            offset: start as u64 + 8,
                            kind: ReadErrorKind::BadByteOrderMagic(ml),
                        });
                    };
                }
                let blen = self.endian.u32(&head[4..8]);
                if blen < 12 || blen % 4 != 0 {
                    return Err(ReadError {
                        offset: start as u64 + 4,
                        kind: ReadErrorKind::BadBlockLength(blen),
                    });
                }
                Ok(blen as usize)
            }
        }
    }

    /// Whether a whole unit is a packet (a pcap record, a pcapng packet block).
    fn carries_record(&self, unit: &[u8]) -> bool {
        match self.format {
            FileFormat::Pcap => true,
            FileFormat::Pcapng => {
                matches!(self.endian.u32(&unit[0..4]), ng::EPB | ng::PB | ng::SPB)
            }
        }
    }

    /// Bytes the head of a unit takes ([`State::unit_len`] needs them).
    fn head_len(&self) -> usize {
        match self.format {
            FileFormat::Pcap => PCAP_RECORD_HEADER,
            FileFormat::Pcapng => PCAPNG_BLOCK_HEAD,
        }
    }

    /// The error for a unit at `start` whose head says `len` bytes when only `available`
    /// are left in the file.
    fn unit_truncated(&self, start: usize, len: usize, available: usize) -> ReadError {
        match self.format {
            FileFormat::Pcap => truncated(
                start + PCAP_RECORD_HEADER,
                "pcap packet data",
                len - PCAP_RECORD_HEADER,
                available.saturating_sub(PCAP_RECORD_HEADER),
            ),
            FileFormat::Pcapng => truncated(start, "pcapng block", len, available),
        }
    }

    /// The error for a file that ends `available` bytes into the head of a unit.
    fn head_truncated(&self, start: usize, available: usize) -> ReadError {
        match self.format {
            FileFormat::Pcap => truncated(start, "pcap record header", 16, available),
            FileFormat::Pcapng => truncated(start, "pcapng block header", 12, available),
        }
    }

    /// Parses the whole unit `unit` (its length checked) at file offset `start`: a
    /// record, or `None` for a block that carries none.
    fn parse_unit<'d>(
        &mut self,
        start: usize,
        unit: &'d [u8],
    ) -> Result<Option<Record<'d>>, ReadError> {
        match self.format {
            FileFormat::Pcap => {
                let e = self.endian;
                let secs = e.u32(&unit[0..4]) as u128;
                let frac = e.u32(&unit[4..8]) as u128;
                let orig = e.u32(&unit[12..16]);
                let bytes = &unit[PCAP_RECORD_HEADER..];
                // ts in units of the fraction: secs * (10^12 / mul) + frac, scaled by mul.
                let (mul, _) = self.interfaces[0].ts_scale;
                let ts = secs * (1_000_000_000_000 / mul) + frac;
                Ok(Some(self.record(start, 0, ts, bytes, orig)))
            }
            FileFormat::Pcapng => self.pcapng_block(start, unit),
        }
    }

    fn record<'d>(
        &mut self,
        offset: usize,
        interface: usize,
        ts: u128,
        frame_bytes: &'d [u8],
        orig_len: u32,
    ) -> Record<'d> {
        self.frame += 1;
        let iface = &self.interfaces[interface];
        let (mul, div) = iface.ts_scale;
        let base = ts.saturating_mul(mul) / div;
        let off = iface.ts_offset_s as i128 * 1_000_000_000_000;
        let time_ps = (base as i128).saturating_add(off).max(0) as u128;
        let mut rec = Record {
            frame: self.frame,
            interface,
            time_ps,
            offset: offset as u64,
            nettlp: None,
            ports: None,
            truncated: (frame_bytes.len() as u64) < orig_len as u64,
            reported_len: 0,
            payload: Payload::OtherUdp,
            frame_bytes,
            comment: None,
        };
        match encap::parse_frame(iface.linktype, frame_bytes) {
            Err(e) => rec.payload = Payload::NotUdp(e),
            Ok(udp) => {
                rec.ports = Some((udp.src_port, udp.dst_port));
                // As sent: the UDP length, unless the frame on the wire (orig_len) was shorter.
                let payload_off = frame_bytes.len() - udp.payload.len();
                let on_wire = (orig_len as usize).saturating_sub(payload_off);
                let sent = udp.reported_len.min(on_wire.max(udp.payload.len()));
                rec.truncated |= udp.truncated;
                match encap::classify(&udp) {
                    Datagram::Tlp { header, tlp } => {
                        rec.nettlp = Some(header);
                        rec.payload = Payload::Tlp(tlp);
                        rec.reported_len = sent.saturating_sub(encap::NETTLP_HDR_LEN);
                    }
                    Datagram::Dllp { header, dllp } => {
                        rec.nettlp = Some(header);
                        rec.payload = Payload::Dllp(dllp);
                        rec.reported_len = sent.saturating_sub(encap::NETTLP_HDR_LEN);
                    }
                    Datagram::Config(c) => rec.payload = Payload::Config(c),
                    Datagram::Other => {}
                }
            }
        }
        rec
    }

    /// One whole pcapng block (`block.len()` is its length field).
    fn pcapng_block<'d>(
        &mut self,
        start: usize,
        block: &'d [u8],
    ) -> Result<Option<Record<'d>>, ReadError> {
        let e = self.endian;
        let btype = e.u32(&block[0..4]);
        let blen = block.len();
        let trailing = e.u32(&block[blen - 4..]);
        if trailing as usize != blen {
            return Err(ReadError {
                offset: (start + blen - 4) as u64,
                kind: ReadErrorKind::TrailerMismatch {
                    leading: blen as u32,
                    trailing,
                },
            });
        }
        let body_off = start + 8;
        let body = &block[8..blen - 4];
        match btype {
            ng::SHB => {
                if body.len() < 16 {
                    return Err(truncated(body_off, "section header", 16, body.len()));
                }
                self.section_base = Some(self.interfaces.len());
                let comments = &mut self.comments;
                each_option(e, body_off + 16, &body[16..], |code, v| {
                    if code == ng::OPT_COMMENT {
                        comments.push(String::from_utf8_lossy(v).into_owned());
                    }
                })?;
            }
            ng::IDB => {
                if body.len() < 8 {
                    return Err(truncated(body_off, "interface description", 8, body.len()));
                }
                if self.section_base.is_none() {
                    return Err(ReadError {
                        offset: start as u64,
                        kind: ReadErrorKind::NoSection,
                    });
                }
                let n = self.interfaces.len();
                let mut iface = Interface {
                    name: String::new(),
                    description: String::new(),
                    linktype: e.u16(&body[0..2]),
                    ts_scale: (1_000_000, 1), // default 10^-6
                    ts_offset_s: 0,
                };
                each_option(e, body_off + 8, &body[8..], |code, v| match code {
                    ng::IF_NAME => iface.name = String::from_utf8_lossy(v).into_owned(),
                    ng::IF_DESCRIPTION => {
                        iface.description = String::from_utf8_lossy(v).into_owned()
                    }
                    ng::IF_TSRESOL if !v.is_empty() => iface.ts_scale = scale_of_tsresol(v[0]),
                    ng::IF_TSOFFSET if v.len() >= 8 => {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(&v[..8]);
                        iface.ts_offset_s = if e.0 {
                            i64::from_be_bytes(a)
                        } else {
                            i64::from_le_bytes(a)
                        };
                    }
                    _ => {}
                })?;
                if iface.name.is_empty() {
                    iface.name = format!("if{n}");
                }
                self.interfaces.push(iface);
            }
            ng::EPB | ng::PB => {
                if body.len() < 20 {
                    return Err(truncated(body_off, "packet block", 20, body.len()));
                }
                let (ifid, ts_hi, ts_lo) = if btype == ng::EPB {
                    (e.u32(&body[0..4]), e.u32(&body[4..8]), e.u32(&body[8..12]))
                } else {
                    (
                        e.u16(&body[0..2]) as u32,
                        e.u32(&body[4..8]),
                        e.u32(&body[8..12]),
                    )
                };
                let cap = e.u32(&body[12..16]);
                let orig = e.u32(&body[16..20]);
                if cap as usize > body.len() - 20 {
                    return Err(ReadError {
                        offset: body_off as u64 + 12,
                        kind: ReadErrorKind::BadCapturedLength(cap),
                    });
                }
                let Some(idx) = self.iface_index(ifid) else {
                    return Err(ReadError {
                        offset: body_off as u64,
                        kind: ReadErrorKind::UnknownInterface(ifid),
                    });
                };
                let ts = ((ts_hi as u128) << 32) | ts_lo as u128;
                let bytes = &body[20..20 + cap as usize];
                let mut comment = None;
                if btype == ng::EPB {
                    let opts_at = 20 + cap as usize + pad4(cap as usize);
                    let opts = body.get(opts_at..).unwrap_or(&[]);
                    each_option(e, body_off + opts_at, opts, |code, v| {
                        if code == ng::OPT_COMMENT && comment.is_none() {
                            comment = Some(v);
                        }
                    })?;
                }
                let mut rec = self.record(start, idx, ts, bytes, orig);
                rec.comment = comment;
                return Ok(Some(rec));
            }
            ng::SPB => {
                if body.len() < 4 {
                    return Err(truncated(body_off, "simple packet block", 4, body.len()));
                }
                let Some(idx) = self.iface_index(0) else {
                    return Err(ReadError {
                        offset: body_off as u64,
                        kind: ReadErrorKind::UnknownInterface(0),
                    });
                };
                let orig = e.u32(&body[0..4]);
                let cap = (orig as usize).min(body.len() - 4);
                let bytes = &body[4..4 + cap];
                return Ok(Some(self.record(start, idx, 0, bytes, orig)));
            }
            _ => {} // other blocks (name resolution, statistics, custom …) are skipped
        }
        Ok(None)
    }

    fn iface_index(&self, ifid: u32) -> Option<usize> {
        let base = self.section_base?;
        let idx = base.checked_add(ifid as usize)?;
        (idx < self.interfaces.len()).then_some(idx)
    }
}

impl<'a> Reader<'a> {
    /// Reads the file header (pcap header or the first pcapng section header and the blocks
    /// up to the first packet).
    pub fn new(data: &'a [u8]) -> Result<Reader<'a>, ReadError> {
        let (st, pos) = State::from_header(&data[..data.len().min(PCAP_HEADER)])?;
        Ok(Reader { data, pos, st })
    }

    /// The detected format.
    pub fn format(&self) -> FileFormat {
        self.st.format
    }

    /// The interfaces described so far (pcapng interface blocks may appear between packets;
    /// after the last record this is all of them).
    pub fn interfaces(&self) -> &[Interface] {
        &self.st.interfaces
    }

    /// Section comments (`shb_comment`) read so far.
    pub fn comments(&self) -> &[String] {
        &self.st.comments
    }

    /// The next record, `None` at the end of the file. After an error, returns `None`.
    pub fn next_record(&mut self) -> Option<Result<Record<'a>, ReadError>> {
        if self.st.failed {
            return None;
        }
        let r = self.next_unit();
        if let Some(Err(_)) = r {
            self.st.failed = true;
        }
        r
    }

    fn next_unit(&mut self) -> Option<Result<Record<'a>, ReadError>> {
        loop {
            let start = self.pos;
            let left = self.data.len() - start;
            if left == 0 {
                return None;
            }
            let head = self.st.head_len();
            if left < head {
                return Some(Err(self.st.head_truncated(start, left)));
            }
            let data: &'a [u8] = self.data;
            let len = match self.st.unit_len(start, &data[start..start + head]) {
                Ok(n) => n,
                Err(e) => return Some(Err(e)),
            };
            if len > left {
                return Some(Err(self.st.unit_truncated(start, len, left)));
            }
            self.pos = start + len;
            match self.st.parse_unit(start, &data[start..start + len]) {
                Ok(Some(rec)) => return Some(Ok(rec)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, ReadError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

/// Reads records from a capture as a stream ([`Read`]: a file, standard input, a pipe),
/// one pcap record or pcapng block in memory at a time, so a capture of any size is read
/// in the memory of its largest block. Records borrow the reader's buffer: each is valid
/// until the next call. Errors and their offsets are the same as [`Reader`]'s.
///
/// ```
/// use pcielab_capture::{CaptureWriter, Format, Payload, StreamReader};
/// let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "").unwrap();
/// let i = w.add_interface("rc.0->ep0").unwrap();
/// w.write_tlp(i, 1_000, &[0, 0, 0, 1, 0, 0, 1, 0x0f, 0, 0, 0x10, 0]).unwrap();
/// let bytes = w.finish().unwrap();
/// let mut r = StreamReader::new(&bytes[..]).unwrap();
/// let (rec, interfaces) = r.next_record().unwrap().unwrap();
/// assert_eq!(interfaces[rec.interface].name, "rc.0->ep0");
/// assert!(matches!(rec.payload, Payload::Tlp(t) if t.len() == 12));
/// assert!(r.next_record().is_none());
/// ```
#[derive(Debug)]
pub struct StreamReader<R: Read> {
    src: std::io::Chain<std::io::Cursor<Vec<u8>>, R>,
    buf: Vec<u8>,
    pos: usize,
    st: State,
}

impl<R: Read> StreamReader<R> {
    /// Reads the file header from `src`.
    pub fn new(src: R) -> Result<StreamReader<R>, ReadError> {
        let mut src = src;
        let mut head = Vec::with_capacity(PCAP_HEADER);
        read_up_to(&mut src, &mut head, PCAP_HEADER, 0)?;
        let (st, used) = State::from_header(&head)?;
        // What the header did not take is the start of the first block.
        let rest = head.split_off(used);
        Ok(StreamReader {
            src: std::io::Cursor::new(rest).chain(src),
            buf: Vec::new(),
            pos: used,
            st,
        })
    }

    /// The detected format.
    pub fn format(&self) -> FileFormat {
        self.st.format
    }

    /// The interfaces described so far.
    pub fn interfaces(&self) -> &[Interface] {
        &self.st.interfaces
    }

    /// Section comments (`shb_comment`) read so far.
    pub fn comments(&self) -> &[String] {
        &self.st.comments
    }

    /// The next record and the interfaces described so far (its own among them), `None`
    /// at the end of the stream. After an error, returns `None`. A read error of the
    /// stream itself is reported as a truncation at the offset where it happened.
    #[allow(clippy::type_complexity)]
    pub fn next_record(&mut self) -> Option<Result<(Record<'_>, &[Interface]), ReadError>> {
        if self.st.failed {
            return None;
        }
        loop {
            let start = self.pos;
            let head = self.st.head_len();
            self.buf.clear();
            if let Err(e) = read_up_to(&mut self.src, &mut self.buf, head, start) {
                return self.fail(e);
            }
            if self.buf.is_empty() {
                return None;
            }
            if self.buf.len() < head {
                let e = self.st.head_truncated(start, self.buf.len());
                return self.fail(e);
            }
            let len = match self.st.unit_len(start, &self.buf) {
                Ok(n) => n,
                Err(e) => return self.fail(e),
            };
            if let Err(e) = read_up_to(&mut self.src, &mut self.buf, len, start) {
                return self.fail(e);
            }
            if self.buf.len() < len {
                let e = self.st.unit_truncated(start, len, self.buf.len());
                return self.fail(e);
            }
            self.pos = start + len;
            if self.st.carries_record(&self.buf) {
                break;
            }
            // Section headers, interface descriptions and skipped blocks.
            if let Err(e) = self.st.parse_unit(start, &self.buf) {
                return self.fail(e);
            }
        }
        let start = self.pos - self.buf.len();
        match self.st.parse_unit(start, &self.buf) {
            Ok(Some(rec)) => Some(Ok((rec, &self.st.interfaces))),
            Ok(None) => None, // carries_record said it has one
            Err(e) => {
                self.st.failed = true;
                Some(Err(e))
            }
        }
    }

    fn fail<T>(&mut self, e: ReadError) -> Option<Result<T, ReadError>> {
        self.st.failed = true;
        Some(Err(e))
    }
}

/// Appends bytes from `src` to `buf` until it holds `n` bytes or the stream ends; a read
/// error is reported at `offset + buf.len()`.
fn read_up_to(
    src: &mut impl Read,
    buf: &mut Vec<u8>,
    n: usize,
    offset: usize,
) -> Result<(), ReadError> {
    let want = n.saturating_sub(buf.len()) as u64;
    // `take` grows the buffer as bytes arrive: a length field that lies about a short
    // stream allocates no more than the stream holds.
    src.by_ref()
        .take(want)
        .read_to_end(buf)
        .map(|_| ())
        .map_err(|_| truncated(offset + buf.len(), "stream (read error)", n, buf.len()))
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Calls `f(code, value)` for each option in `opts` (which starts at file offset `at`).
fn each_option<'d>(
    e: Endian,
    at: usize,
    opts: &'d [u8],
    mut f: impl FnMut(u16, &'d [u8]),
) -> Result<(), ReadError> {
    let mut i = 0;
    while i + 4 <= opts.len() {
        let code = e.u16(&opts[i..i + 2]);
        let len = e.u16(&opts[i + 2..i + 4]) as usize;
        if code == ng::OPT_END {
            return Ok(());
        }
        let end = i + 4 + len;
        if end > opts.len() {
            return Err(ReadError {
                offset: (at + i) as u64,
                kind: ReadErrorKind::BadOption { code },
            });
        }
        f(code, &opts[i + 4..end]);
        i = end + (4 - len % 4) % 4;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CaptureWriter, Format};

    fn sample(format: Format) -> Vec<u8> {
        let mut w = CaptureWriter::new(Vec::new(), format, "topology: a -> b").unwrap();
        let a = w.add_interface("a->b").unwrap();
        let b = w.add_interface("b->a").unwrap();
        w.write_tlp(a, 1_000_000, &[0, 0, 0, 1, 0, 0, 9, 0x0f, 0, 0, 0x10, 0])
            .unwrap();
        w.write_dllp(b, 2_000_001, &[0, 0, 0, 1, 0xaa, 0xbb])
            .unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn pcapng_reads_back_names_times_and_comment() {
        let f = sample(Format::Pcapng);
        let mut r = Reader::new(&f).unwrap();
        let recs: Vec<_> = r.by_ref().map(|x| x.unwrap()).collect();
        assert_eq!(r.comments(), &["topology: a -> b".to_string()]);
        assert_eq!(recs.len(), 2);
        assert_eq!(r.interfaces()[recs[0].interface].name, "a->b");
        assert_eq!(r.interfaces()[recs[1].interface].name, "b->a");
        assert_eq!(recs[0].time_ps, 1_000_000);
        assert_eq!(recs[1].time_ps, 2_000_001);
        assert_eq!(recs[0].ports, Some((0x4009, 0x4009)));
        // 1_000_000 ps / 6400 ps = 156 ticks.
        assert_eq!(
            recs[0].nettlp,
            Some(NetTlpHeader {
                seq: 0,
                tstamp: 156
            })
        );
        assert_eq!(recs[1].payload, Payload::Dllp(&[0, 0, 0, 1, 0xaa, 0xbb]));
    }

    #[test]
    fn pcap_reads_back_nanoseconds() {
        let f = sample(Format::Pcap);
        let r = Reader::new(&f).unwrap();
        let recs: Vec<_> = r.map(|x| x.unwrap()).collect();
        assert_eq!(recs[0].time_ps, 1_000_000);
        assert_eq!(recs[1].time_ps, 2_000_000); // truncated to ns
    }

    #[test]
    fn every_truncation_is_an_error_with_offset() {
        for format in [Format::Pcapng, Format::Pcap] {
            let f = sample(format);
            let full = Reader::new(&f).unwrap().count();
            for n in 0..f.len() {
                let mut got = 0;
                match Reader::new(&f[..n]) {
                    Err(e) => assert!(e.offset <= n as u64),
                    Ok(r) => {
                        for x in r {
                            match x {
                                Ok(_) => got += 1,
                                Err(e) => {
                                    assert!(e.offset <= n as u64, "{e}");
                                    assert!(e.to_string().starts_with("at byte "));
                                }
                            }
                        }
                    }
                }
                assert!(got <= full);
            }
        }
    }

    /// What a reader gives for a file: each record as (frame, interface name, time,
    /// payload, comment), then the error if any.
    type Seen = (
        Vec<(u64, String, u128, String, Option<Vec<u8>>)>,
        Option<ReadError>,
    );

    fn seen_in_memory(f: &[u8]) -> Result<Seen, ReadError> {
        let mut r = Reader::new(f)?;
        let mut recs = Vec::new();
        while let Some(x) = r.next_record() {
            match x {
                Ok(rec) => recs.push((
                    rec.frame,
                    r.interfaces()[rec.interface].name.clone(),
                    rec.time_ps,
                    format!("{:?}", rec.payload),
                    rec.comment.map(<[u8]>::to_vec),
                )),
                Err(e) => return Ok((recs, Some(e))),
            }
        }
        Ok((recs, None))
    }

    fn seen_streamed(f: &[u8]) -> Result<Seen, ReadError> {
        let mut r = StreamReader::new(f)?;
        let mut recs = Vec::new();
        while let Some(x) = r.next_record() {
            match x {
                Ok((rec, ifs)) => recs.push((
                    rec.frame,
                    ifs[rec.interface].name.clone(),
                    rec.time_ps,
                    format!("{:?}", rec.payload),
                    rec.comment.map(<[u8]>::to_vec),
                )),
                Err(e) => return Ok((recs, Some(e))),
            }
        }
        Ok((recs, None))
    }

    /// The stream reader gives what the in-memory one gives, records and errors, for
    /// whole files and for every truncation of them.
    #[test]
    fn streaming_reads_as_in_memory_for_every_prefix() {
        let mut commented = CaptureWriter::new(Vec::new(), Format::Pcapng, "c").unwrap();
        let i = commented.add_interface("x->y").unwrap();
        commented
            .write_tlp_commented(
                i,
                5,
                &[0, 0, 0, 1, 0, 0, 1, 0x0f, 0, 0, 0x10, 0],
                "DLL replay (seq 3)",
            )
            .unwrap();
        let commented = commented.finish().unwrap();
        for f in [sample(Format::Pcapng), sample(Format::Pcap), commented] {
            let whole = seen_streamed(&f).unwrap();
            assert!(whole.1.is_none() && !whole.0.is_empty());
            assert_eq!(whole, seen_in_memory(&f).unwrap());
            for n in 0..f.len() {
                assert_eq!(
                    seen_streamed(&f[..n]),
                    seen_in_memory(&f[..n]),
                    "prefix {n}"
                );
            }
        }
        let mut f = sample(Format::Pcapng);
        let n = f.len();
        f[n - 1] ^= 0x40;
        assert_eq!(seen_streamed(&f), seen_in_memory(&f));
        assert!(seen_streamed(&f).unwrap().1.is_some());
    }

    /// A stream that fails mid-file ends in an error at the offset reached, not in a
    /// silent end.
    #[test]
    fn a_failing_stream_is_an_error_where_it_failed() {
        struct Failing<'a>(&'a [u8]);
        impl Read for Failing<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() {
                    return Err(std::io::Error::other("device gone"));
                }
                let n = buf.len().min(self.0.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let f = sample(Format::Pcapng);
        let cut = f.len() - 10;
        let mut r = StreamReader::new(Failing(&f[..cut])).unwrap();
        let mut records = 0;
        let err = loop {
            match r.next_record() {
                Some(Ok(_)) => records += 1,
                Some(Err(e)) => break e,
                None => panic!("ended without an error"),
            }
        };
        assert_eq!(records, 1);
        assert!(err.offset <= cut as u64, "{err}");
        assert!(err.to_string().contains("read error"), "{err}");
    }

    #[test]
    fn corrupt_trailer_is_reported_where_it_is() {
        let mut f = sample(Format::Pcapng);
        let n = f.len();
        f[n - 1] ^= 0x40;
        let err = Reader::new(&f)
            .unwrap()
            .find_map(|x| x.err())
            .expect("an error");
        assert_eq!(err.offset, (n - 4) as u64);
        assert!(matches!(err.kind, ReadErrorKind::TrailerMismatch { .. }));
    }

    #[test]
    fn big_endian_classic_pcap_in_microseconds() {
        // Hand-built: BE µs pcap, one 60-byte record at 3 s + 5 µs.
        let mut f = vec![0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4];
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&[0, 0, 0xff, 0xff, 0, 0, 0, 1]);
        f.extend_from_slice(&[0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 60, 0, 0, 0, 60]);
        let mut frame = Vec::new();
        encap::build_frame(
            &mut frame,
            &encap::Endpoints::default(),
            0x3003,
            0x3003,
            &[&[0; 6], &[0x4a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0]],
        );
        f.extend_from_slice(&frame);
        let recs: Vec<_> = Reader::new(&f).unwrap().map(|x| x.unwrap()).collect();
        assert_eq!(recs[0].time_ps, 3_000_005_000_000);
        assert!(matches!(recs[0].payload, Payload::Tlp(_)));
    }
}
