//! Writing captures: pcapng (interfaces with names, picosecond timestamps, a section
//! comment) or plain pcap (nanosecond timestamps, one Ethernet link, no names).
//!
//! Every record is a complete Ethernet/IPv4/UDP frame built by [`encap`](mod@crate::encap);
//! per record the writer does no allocation once its scratch buffers have grown.
//!
//! ```
//! use pcielab_capture::{CaptureWriter, Format};
//! let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "rc.0 -> ep0, x8 Gen3").unwrap();
//! let down = w.add_interface("rc.0->ep0").unwrap();
//! let mrd = [0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x01, 0x0f, 0x00, 0x00, 0x10, 0x00];
//! w.write_tlp(down, 1_000, &mrd).unwrap();
//! let bytes = w.finish().unwrap();
//! assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a]); // section header block
//! ```

use crate::encap::{self, Endpoints, NetTlpHeader};
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// The file format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// pcapng: one interface per link direction, `if_tsresol` = 10⁻¹² s, a section comment.
    Pcapng,
    /// Classic pcap with nanosecond timestamps (magic `a1b23c4d`); interface names and the
    /// comment are not kept, picoseconds are truncated to nanoseconds.
    Pcap,
}

/// An interface of a capture (its index in the order of [`CaptureWriter::add_interface`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IfId(pub u32);

/// The two interface names of a topology link: `[downstream, upstream]` direction, from
/// the link's `up` port (`"rc.0"`) and `down` node (`"sw0"`) as a topology file names them.
/// [`transactions::link_key`](crate::transactions::link_key) pairs them again.
///
/// ```
/// let [down, up] = pcielab_capture::writer::link_names("rc.0", "sw0");
/// assert_eq!(down, "rc.0->sw0");
/// assert_eq!(up, "sw0->rc.0");
/// ```
pub fn link_names(up: &str, down: &str) -> [String; 2] {
    [format!("{up}->{down}"), format!("{down}->{up}")]
}

/// Addresses and ports of a raw UDP datagram (see [`CaptureWriter::write_udp_payload`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpMeta {
    /// MAC and IPv4 addresses.
    pub endpoints: Endpoints,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

/// Why a capture could not be written.
#[derive(Debug)]
pub enum WriteError {
    /// The underlying writer failed.
    Io(io::Error),
    /// The interface was never added.
    UnknownInterface(IfId),
    /// The payload does not fit a UDP datagram (at most 65,507 bytes).
    TooLarge {
        /// The payload length.
        len: usize,
    },
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Io(e) => write!(f, "writing the capture: {e}"),
            WriteError::UnknownInterface(i) => write!(f, "interface {} was never added", i.0),
            WriteError::TooLarge { len } => write!(
                f,
                "a {len}-byte payload does not fit a UDP datagram (at most 65507 bytes)"
            ),
        }
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WriteError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for WriteError {
    fn from(e: io::Error) -> Self {
        WriteError::Io(e)
    }
}

/// pcapng block types and option codes used by the writer and reader.
pub(crate) mod ng {
    pub const SHB: u32 = 0x0A0D_0D0A;
    pub const IDB: u32 = 1;
    pub const PB: u32 = 2;
    pub const SPB: u32 = 3;
    pub const EPB: u32 = 6;
    pub const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
    pub const OPT_END: u16 = 0;
    pub const OPT_COMMENT: u16 = 1;
    pub const SHB_USERAPPL: u16 = 4;
    pub const IF_NAME: u16 = 2;
    pub const IF_DESCRIPTION: u16 = 3;
    pub const IF_TSRESOL: u16 = 9;
    pub const IF_TSOFFSET: u16 = 14;
}

/// Classic pcap magic numbers.
pub(crate) mod classic {
    pub const MAGIC_US: u32 = 0xA1B2_C3D4;
    pub const MAGIC_NS: u32 = 0xA1B2_3C4D;
}

/// Largest UDP payload of an IPv4 datagram.
const MAX_UDP_PAYLOAD: usize = 65_507;

#[derive(Debug)]
struct Iface {
    endpoints: Endpoints,
    seq: u16,
}

/// Writes TLPs, DLLPs and raw NetTLP datagrams to a pcapng or pcap stream.
///
/// Interfaces may be added at any time; in pcapng each gets an Interface Description Block
/// named as given (`rc.0->sw0`). Records must use non-decreasing times per interface for
/// tools to show them in order, but the writer does not enforce it.
#[derive(Debug)]
pub struct CaptureWriter<W: Write> {
    out: W,
    format: Format,
    ifaces: Vec<Iface>,
    frame: Vec<u8>,
    block: Vec<u8>,
    /// Seconds added to every record time (wall-clock captures).
    epoch_secs: u64,
}

impl CaptureWriter<BufWriter<File>> {
    /// Creates (truncates) `path` and writes the file header; `comment` describes the
    /// topology or session (pcapng only).
    pub fn create(
        path: impl AsRef<Path>,
        format: Format,
        comment: &str,
    ) -> Result<Self, WriteError> {
        let f = File::create(path)?;
        CaptureWriter::new(BufWriter::with_capacity(1 << 16, f), format, comment)
    }
}

fn push_opt(buf: &mut Vec<u8>, code: u16, value: &[u8]) {
    let len = value.len().min(0xffff);
    buf.extend_from_slice(&code.to_le_bytes());
    buf.extend_from_slice(&(len as u16).to_le_bytes());
    buf.extend_from_slice(&value[..len]);
    buf.resize(buf.len() + pad4(len), 0);
}

fn pad4(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Wraps a block body into a complete pcapng block and writes it.
fn write_block(out: &mut impl Write, block_type: u32, body: &[u8]) -> io::Result<()> {
    let total = (12 + body.len()) as u32;
    out.write_all(&block_type.to_le_bytes())?;
    out.write_all(&total.to_le_bytes())?;
    out.write_all(body)?;
    out.write_all(&total.to_le_bytes())
}

impl<W: Write> CaptureWriter<W> {
    /// Starts a capture on `out`, writing the file header (pcapng: a Section Header Block
    /// with `comment` and `shb_userappl` = `"pcielab <version>"`).
    pub fn new(mut out: W, format: Format, comment: &str) -> Result<Self, WriteError> {
        let mut block = Vec::with_capacity(256);
        match format {
            Format::Pcapng => {
                block.extend_from_slice(&ng::BYTE_ORDER_MAGIC.to_le_bytes());
                block.extend_from_slice(&1u16.to_le_bytes());
                block.extend_from_slice(&0u16.to_le_bytes());
                block.extend_from_slice(&(-1i64).to_le_bytes());
                if !comment.is_empty() {
                    push_opt(&mut block, ng::OPT_COMMENT, comment.as_bytes());
                }
                let appl = concat!("pcielab ", env!("CARGO_PKG_VERSION"));
                push_opt(&mut block, ng::SHB_USERAPPL, appl.as_bytes());
                push_opt(&mut block, ng::OPT_END, &[]);
                write_block(&mut out, ng::SHB, &block)?;
            }
            Format::Pcap => {
                block.extend_from_slice(&classic::MAGIC_NS.to_le_bytes());
                block.extend_from_slice(&2u16.to_le_bytes());
                block.extend_from_slice(&4u16.to_le_bytes());
                block.extend_from_slice(&0i32.to_le_bytes());
                block.extend_from_slice(&0u32.to_le_bytes());
                block.extend_from_slice(&65_535u32.to_le_bytes());
                block.extend_from_slice(&(encap::LINKTYPE_ETHERNET as u32).to_le_bytes());
                out.write_all(&block)?;
            }
        }
        Ok(CaptureWriter {
            out,
            format,
            ifaces: Vec::new(),
            frame: Vec::with_capacity(4300),
            block,
            epoch_secs: 0,
        })
    }

    /// Makes record times count from `secs` seconds after the Unix epoch instead of from
    /// 0, for wall-clock timestamps (record times are u64 picoseconds, which cannot hold
    /// the time since 1970 themselves): pcapng interfaces added afterwards carry
    /// `if_tsoffset = secs`; classic pcap records add `secs` to their seconds field. Call
    /// it before adding interfaces.
    pub fn set_epoch_secs(&mut self, secs: u64) {
        self.epoch_secs = secs;
    }

    /// The format being written.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Adds an interface (a link direction such as `rc.0->sw0`) with the NetTLP adapter's
    /// addresses.
    pub fn add_interface(&mut self, name: &str) -> Result<IfId, WriteError> {
        self.add_interface_with(name, "", Endpoints::default())
    }

    /// Adds an interface with a description (pcapng `if_description`) and its own addresses.
    pub fn add_interface_with(
        &mut self,
        name: &str,
        description: &str,
        endpoints: Endpoints,
    ) -> Result<IfId, WriteError> {
        let id = IfId(self.ifaces.len() as u32);
        if self.format == Format::Pcapng {
            let b = &mut self.block;
            b.clear();
            b.extend_from_slice(&encap::LINKTYPE_ETHERNET.to_le_bytes());
            b.extend_from_slice(&0u16.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes()); // no snap length limit
            push_opt(b, ng::IF_NAME, name.as_bytes());
            if !description.is_empty() {
                push_opt(b, ng::IF_DESCRIPTION, description.as_bytes());
            }
            push_opt(b, ng::IF_TSRESOL, &[12]); // 10^-12 s
            if self.epoch_secs != 0 {
                push_opt(b, ng::IF_TSOFFSET, &self.epoch_secs.to_le_bytes());
            }
            push_opt(b, ng::OPT_END, &[]);
            write_block(&mut self.out, ng::IDB, b)?;
        }
        self.ifaces.push(Iface { endpoints, seq: 0 });
        Ok(id)
    }

    /// Number of interfaces added.
    pub fn interface_count(&self) -> usize {
        self.ifaces.len()
    }

    fn iface(&mut self, id: IfId) -> Result<&mut Iface, WriteError> {
        self.ifaces
            .get_mut(id.0 as usize)
            .ok_or(WriteError::UnknownInterface(id))
    }

    /// Writes a TLP (raw bytes in PCIe order, prefixes through ECRC) seen on `id` at
    /// `time_ps`, on the NetTLP port of its kind and tag, after a NetTLP header whose
    /// sequence counts this interface's frames and whose timestamp counts 6.4 ns ticks.
    ///
    /// The bytes are not checked: a malformed TLP is captured as it is.
    pub fn write_tlp(&mut self, id: IfId, time_ps: u64, tlp: &[u8]) -> Result<(), WriteError> {
        let port = encap::tlp_port(tlp);
        self.write_nettlp(id, time_ps, port, tlp, None)
    }

    /// [`write_tlp`](Self::write_tlp) with a packet comment (pcapng `opt_comment`, shown by
    /// Wireshark as the packet's comment; dropped in pcap).
    pub fn write_tlp_commented(
        &mut self,
        id: IfId,
        time_ps: u64,
        tlp: &[u8],
        comment: &str,
    ) -> Result<(), WriteError> {
        let port = encap::tlp_port(tlp);
        self.write_nettlp(id, time_ps, port, tlp, Some(comment))
    }

    /// Writes a TLP as [`write_tlp`](Self::write_tlp) does, with `seq` in the NetTLP
    /// header's sequence field instead of the interface's frame count, and an optional
    /// comment: simulation captures put each TLP's data-link sequence number there, so
    /// a Nak or Ack can be tied to the TLPs it names.
    pub fn write_tlp_seq(
        &mut self,
        id: IfId,
        time_ps: u64,
        tlp: &[u8],
        seq: u16,
        comment: Option<&str>,
    ) -> Result<(), WriteError> {
        let port = encap::tlp_port(tlp);
        self.iface(id)?.seq = seq;
        self.write_nettlp(id, time_ps, port, tlp, comment)
    }

    /// [`write_dllp`](Self::write_dllp) with a packet comment.
    pub fn write_dllp_commented(
        &mut self,
        id: IfId,
        time_ps: u64,
        dllp: &[u8],
        comment: &str,
    ) -> Result<(), WriteError> {
        self.write_nettlp(id, time_ps, encap::DLLP_PORT, dllp, Some(comment))
    }

    /// Writes a DLLP (6 bytes: 4 of content and the CRC) on [`encap::DLLP_PORT`].
    pub fn write_dllp(&mut self, id: IfId, time_ps: u64, dllp: &[u8]) -> Result<(), WriteError> {
        self.write_nettlp(id, time_ps, encap::DLLP_PORT, dllp, None)
    }

    fn write_nettlp(
        &mut self,
        id: IfId,
        time_ps: u64,
        port: u16,
        body: &[u8],
        comment: Option<&str>,
    ) -> Result<(), WriteError> {
        if body.len() + encap::NETTLP_HDR_LEN > MAX_UDP_PAYLOAD {
            return Err(WriteError::TooLarge {
                len: body.len() + encap::NETTLP_HDR_LEN,
            });
        }
        let iface = self.iface(id)?;
        let hdr = NetTlpHeader::at(iface.seq, time_ps);
        iface.seq = iface.seq.wrapping_add(1);
        let ep = iface.endpoints;
        encap::build_frame(&mut self.frame, &ep, port, port, &[&hdr.to_bytes(), body]);
        self.emit_frame(id, time_ps, comment)
    }

    /// Writes a UDP datagram exactly as seen on a NetTLP link (NetTLP header included in
    /// `payload`), with the given addresses and ports.
    pub fn write_udp_payload(
        &mut self,
        id: IfId,
        time_ps: u64,
        meta: &UdpMeta,
        payload: &[u8],
    ) -> Result<(), WriteError> {
        if payload.len() > MAX_UDP_PAYLOAD {
            return Err(WriteError::TooLarge { len: payload.len() });
        }
        self.iface(id)?;
        encap::build_frame(
            &mut self.frame,
            &meta.endpoints,
            meta.src_port,
            meta.dst_port,
            &[payload],
        );
        self.emit_frame(id, time_ps, None)
    }

    /// Writes a complete Ethernet frame as it is.
    pub fn write_frame(&mut self, id: IfId, time_ps: u64, frame: &[u8]) -> Result<(), WriteError> {
        self.iface(id)?;
        self.frame.clear();
        self.frame.extend_from_slice(frame);
        self.emit_frame(id, time_ps, None)
    }

    fn emit_frame(
        &mut self,
        id: IfId,
        time_ps: u64,
        comment: Option<&str>,
    ) -> Result<(), WriteError> {
        let len = self.frame.len() as u32;
        let pad = pad4(self.frame.len());
        match self.format {
            Format::Pcapng => {
                self.block.clear();
                if let Some(c) = comment {
                    push_opt(&mut self.block, ng::OPT_COMMENT, c.as_bytes());
                    push_opt(&mut self.block, ng::OPT_END, &[]);
                }
                let total = 32 + self.frame.len() as u32 + pad as u32 + self.block.len() as u32;
                let mut h = [0u8; 28];
                h[0..4].copy_from_slice(&ng::EPB.to_le_bytes());
                h[4..8].copy_from_slice(&total.to_le_bytes());
                h[8..12].copy_from_slice(&id.0.to_le_bytes());
                h[12..16].copy_from_slice(&((time_ps >> 32) as u32).to_le_bytes());
                h[16..20].copy_from_slice(&(time_ps as u32).to_le_bytes());
                h[20..24].copy_from_slice(&len.to_le_bytes());
                h[24..28].copy_from_slice(&len.to_le_bytes());
                self.out.write_all(&h)?;
                self.out.write_all(&self.frame)?;
                self.out.write_all(&[0u8; 3][..pad])?;
                self.out.write_all(&self.block)?;
                self.out.write_all(&total.to_le_bytes())?;
            }
            Format::Pcap => {
                let secs = time_ps / 1_000_000_000_000 + self.epoch_secs;
                let nanos = (time_ps % 1_000_000_000_000) / 1000;
                let mut h = [0u8; 16];
                h[0..4].copy_from_slice(&(secs as u32).to_le_bytes());
                h[4..8].copy_from_slice(&(nanos as u32).to_le_bytes());
                h[8..12].copy_from_slice(&len.to_le_bytes());
                h[12..16].copy_from_slice(&len.to_le_bytes());
                self.out.write_all(&h)?;
                self.out.write_all(&self.frame)?;
            }
        }
        Ok(())
    }

    /// Flushes buffered records.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the underlying writer.
    pub fn finish(mut self) -> Result<W, WriteError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le32(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    #[test]
    fn pcapng_layout_by_hand() {
        let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "ab").unwrap();
        let i = w.add_interface("x").unwrap();
        w.write_dllp(i, 0x1_0000_0002, &[0, 0, 0, 1, 0xaa, 0xbb])
            .unwrap();
        let b = w.finish().unwrap();
        // SHB: 12 + 16 fixed + comment (4 + 4 padded) + userappl (4 + 16 "pcielab 0.1.0"
        // padded from 13) + end (4) = 60 bytes.
        let shb_len = le32(&b, 4) as usize;
        assert_eq!(le32(&b, 0), 0x0A0D0D0A);
        assert_eq!(le32(&b, 8), 0x1A2B3C4D);
        assert_eq!(&b[24..32], &[1, 0, 2, 0, b'a', b'b', 0, 0]);
        assert_eq!(le32(&b, shb_len - 4) as usize, shb_len);
        // IDB: type 1, linktype 1, snaplen 0, if_name "x" (8), if_tsresol 12 (8), end (4).
        let idb = &b[shb_len..];
        assert_eq!(le32(idb, 0), 1);
        assert_eq!(le32(idb, 4), 12 + 8 + 8 + 8 + 4);
        assert_eq!(&idb[8..12], &[1, 0, 0, 0]);
        assert_eq!(&idb[16..24], &[2, 0, 1, 0, b'x', 0, 0, 0]);
        assert_eq!(&idb[24..30], &[9, 0, 1, 0, 12, 0]);
        let epb = &idb[40..];
        assert_eq!(le32(epb, 0), 6);
        // Frame: 14 + 20 + 8 + 6 + 6 = 54 bytes, padded to 56; block 32 + 56 = 88.
        assert_eq!(le32(epb, 4), 88);
        assert_eq!(le32(epb, 8), 0);
        assert_eq!(le32(epb, 12), 1); // timestamp high
        assert_eq!(le32(epb, 16), 2); // timestamp low
        assert_eq!(le32(epb, 20), 54);
        // UDP ports 0x5d11 both.
        assert_eq!(&epb[28 + 34..28 + 38], &[0x5d, 0x11, 0x5d, 0x11]);
        assert_eq!(epb.len(), 88);
    }

    #[test]
    fn pcap_layout_by_hand() {
        let mut w = CaptureWriter::new(Vec::new(), Format::Pcap, "ignored").unwrap();
        let i = w.add_interface("x").unwrap();
        w.write_tlp(i, 2_000_000_123_456, &[0; 12]).unwrap();
        let b = w.finish().unwrap();
        assert_eq!(le32(&b, 0), 0xA1B23C4D);
        assert_eq!(le32(&b, 20), 1);
        assert_eq!(le32(&b, 24), 2); // seconds
        assert_eq!(le32(&b, 28), 123); // nanoseconds
        assert_eq!(le32(&b, 32), 60);
        assert_eq!(b.len(), 24 + 16 + 60);
    }

    #[test]
    fn unknown_interface_and_oversize_are_errors() {
        let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "").unwrap();
        assert!(matches!(
            w.write_tlp(IfId(0), 0, &[0; 12]),
            Err(WriteError::UnknownInterface(IfId(0)))
        ));
        let i = w.add_interface("a").unwrap();
        assert!(matches!(
            w.write_tlp(i, 0, &vec![0; 70_000]),
            Err(WriteError::TooLarge { len: 70_006 })
        ));
    }
}
