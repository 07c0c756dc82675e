//! Decoding records into TLPs and DLLPs, and filtering them.
//!
//! ```
//! use pcielab_capture::{CaptureWriter, Format, Reader};
//! use pcielab_capture::decode::{decode, Decoded, Filter};
//! let mut w = CaptureWriter::new(Vec::new(), Format::Pcapng, "").unwrap();
//! let i = w.add_interface("rc.0->ep0").unwrap();
//! w.write_tlp(i, 0, &[0, 0, 0, 1, 0, 0, 1, 0x0f, 0, 0, 0x10, 0]).unwrap();
//! let bytes = w.finish().unwrap();
//! let rec = Reader::new(&bytes).unwrap().next().unwrap().unwrap();
//! let d = decode(&rec);
//! assert!(matches!(d, Decoded::Tlp { .. }));
//! let f = Filter { address: Some((0x1000, 0x1004)), ..Filter::default() };
//! assert!(f.matches("rc.0->ep0", &d));
//! let f = Filter { tag: Some(2), ..Filter::default() };
//! assert!(!f.matches("rc.0->ep0", &d));
//! ```

use crate::reader::{Payload, Record};
use pcielab_wire::dllp::{DllpRepr, Packet as DllpPacket};
use pcielab_wire::tlp::{MsgRouting, ParseOptions, TlpHeader, TlpKind, TlpPacket, TlpRepr};
use pcielab_wire::{Bdf, Error};

/// A record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A TLP that decodes.
    Tlp {
        /// The TLP.
        tlp: TlpRepr<'a>,
        /// `Some(ok)` when the TLP carries an ECRC (TD set): whether it is correct.
        ecrc_ok: Option<bool>,
        /// The raw bytes.
        bytes: &'a [u8],
    },
    /// A TLP cut short by the capture's snap length (tcpdump `-s`) whose header decodes.
    /// Use [`Decoded::tlp`] to decode it: the missing bytes are taken as zeros.
    Snapped {
        /// The TLP at its full length, the bytes not captured set to zero.
        full: Vec<u8>,
        /// Bytes captured.
        captured: usize,
        /// The captured bytes.
        bytes: &'a [u8],
    },
    /// A DLLP that decodes (its CRC may be wrong: see `crc_ok`).
    Dllp {
        /// The DLLP.
        dllp: DllpRepr,
        /// Whether its CRC is correct.
        crc_ok: bool,
        /// The raw bytes.
        bytes: &'a [u8],
    },
    /// TLP bytes that do not decode.
    BadTlp {
        /// Why.
        error: Error,
        /// The raw bytes.
        bytes: &'a [u8],
    },
    /// DLLP bytes that do not decode (wrong length, reserved type).
    BadDllp {
        /// Why.
        error: Error,
        /// The raw bytes.
        bytes: &'a [u8],
    },
    /// A NetTLP configuration datagram.
    Config(&'a [u8]),
    /// Not NetTLP.
    Other,
}

/// Decodes a record's payload. ECRC errors do not stop decoding; they are reported in
/// `ecrc_ok`.
pub fn decode<'a>(rec: &Record<'a>) -> Decoded<'a> {
    match rec.payload {
        Payload::Tlp(bytes) if rec.truncated => decode_snapped(bytes, rec.reported_len),
        Payload::Tlp(bytes) => decode_tlp(bytes),
        Payload::Dllp(bytes) => decode_dllp(bytes),
        Payload::Config(c) => Decoded::Config(c),
        Payload::OtherUdp | Payload::NotUdp(_) => Decoded::Other,
    }
}

/// Decodes DLLP bytes; a CRC error does not stop decoding, it is reported in `crc_ok`.
pub fn decode_dllp(bytes: &[u8]) -> Decoded<'_> {
    let packet = match DllpPacket::new_checked(bytes) {
        Ok(p) => p,
        Err(error) => return Decoded::BadDllp { error, bytes },
    };
    match DllpRepr::parse_ignoring_crc(&packet) {
        Ok(dllp) => Decoded::Dllp {
            dllp,
            crc_ok: packet.verify_crc(),
            bytes,
        },
        Err(error) => Decoded::BadDllp { error, bytes },
    }
}

/// Decodes the captured part `bytes` of a TLP sent with `reported_len` bytes: when the
/// header is captured and its Fmt, Length and TD give `reported_len`, the result is
/// [`Decoded::Snapped`]; otherwise as [`decode_tlp`].
pub fn decode_snapped(bytes: &[u8], reported_len: usize) -> Decoded<'_> {
    let mut h = 0;
    while h < bytes.len() && bytes[h] >> 5 == 0b100 {
        h += 4;
    }
    if bytes.len() < h + 4 {
        return decode_tlp(bytes);
    }
    let fmt = bytes[h] >> 5;
    if TlpKind::decode(fmt, bytes[h] & 0x1f).is_none() {
        return decode_tlp(bytes);
    }
    let hl = if fmt & 1 != 0 { 16 } else { 12 };
    if bytes.len() < h + hl {
        return decode_tlp(bytes);
    }
    let raw = u16::from_be_bytes([bytes[h + 2], bytes[h + 3]]) & 0x3ff;
    let len_dw = if raw == 0 { 1024 } else { raw as usize };
    let td = bytes[h + 2] & 0x80 != 0;
    let total = h + hl + if fmt & 2 != 0 { len_dw * 4 } else { 0 } + if td { 4 } else { 0 };
    if bytes.len() >= total {
        return decode_tlp(bytes);
    }
    if reported_len != total {
        let error = if reported_len < total {
            Error::Truncated {
                what: "payload of the Length field",
                needed: total,
                available: reported_len,
            }
        } else {
            Error::Trailing {
                what: "Fmt, Length and TD",
                expected: total,
                available: reported_len,
            }
        };
        return Decoded::BadTlp { error, bytes };
    }
    let mut full = bytes.to_vec();
    full.resize(total, 0);
    match TlpRepr::parse_with(
        &TlpPacket::new_unchecked(&full[..]),
        ParseOptions { check_ecrc: false },
    ) {
        Ok(_) => Decoded::Snapped {
            full,
            captured: bytes.len(),
            bytes,
        },
        Err(error) => Decoded::BadTlp { error, bytes },
    }
}

/// Decodes TLP bytes (see [`decode`]).
pub fn decode_tlp(bytes: &[u8]) -> Decoded<'_> {
    let packet = match TlpPacket::new_checked(bytes) {
        Ok(p) => p,
        Err(error) => return Decoded::BadTlp { error, bytes },
    };
    match TlpRepr::parse_with(&packet, ParseOptions { check_ecrc: false }) {
        Ok(tlp) => {
            let ecrc_ok = tlp.td.then(|| packet.check_ecrc().is_ok());
            Decoded::Tlp {
                tlp,
                ecrc_ok,
                bytes,
            }
        }
        Err(error) => Decoded::BadTlp { error, bytes },
    }
}

impl Decoded<'_> {
    /// The TLP of a [`Decoded::Tlp`] or [`Decoded::Snapped`] (whose payload beyond the
    /// captured bytes reads as zeros).
    pub fn tlp(&self) -> Option<TlpRepr<'_>> {
        match self {
            Decoded::Tlp { tlp, .. } => Some(*tlp),
            Decoded::Snapped { full, .. } => TlpRepr::parse_with(
                &TlpPacket::new_unchecked(&full[..]),
                ParseOptions { check_ecrc: false },
            )
            .ok(),
            _ => None,
        }
    }

    /// The kind's name: a TLP kind (`MRd`), a DLLP type (`UpdateFC-NP`, `Ack`), or
    /// `malformed-tlp`, `malformed-dllp`, `config`, `other`.
    pub fn kind_name(&self) -> String {
        match self {
            Decoded::Tlp { tlp, .. } => tlp.kind().name().to_string(),
            Decoded::Snapped { .. } => self
                .tlp()
                .map_or("malformed-tlp".to_string(), |t| t.kind().name().to_string()),
            Decoded::Dllp { dllp, .. } => dllp.dllp_type().to_string(),
            Decoded::BadTlp { .. } => "malformed-tlp".to_string(),
            Decoded::BadDllp { .. } => "malformed-dllp".to_string(),
            Decoded::Config(_) => "config".to_string(),
            Decoded::Other => "other".to_string(),
        }
    }

    /// The raw TLP or DLLP bytes (empty for other records).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Decoded::Tlp { bytes, .. }
            | Decoded::Snapped { bytes, .. }
            | Decoded::Dllp { bytes, .. }
            | Decoded::BadTlp { bytes, .. }
            | Decoded::BadDllp { bytes, .. }
            | Decoded::Config(bytes) => bytes,
            Decoded::Other => &[],
        }
    }
}

/// The completer of a TLP: the Completer ID of completions, the target of configuration
/// requests.
pub fn completer_id(tlp: &TlpRepr<'_>) -> Option<Bdf> {
    match tlp.header {
        TlpHeader::Cpl(c) => Some(c.completer_id),
        TlpHeader::Cfg(c) => Some(c.target),
        _ => None,
    }
}

/// The address of a TLP: memory, I/O and address-routed messages.
pub fn address(tlp: &TlpRepr<'_>) -> Option<u64> {
    match tlp.header {
        TlpHeader::Mem(m) => Some(m.address),
        TlpHeader::Io(h) => Some(h.address as u64),
        TlpHeader::Msg(m) if m.routing == MsgRouting::ByAddress => Some(m.fields.u64()),
        _ => None,
    }
}

/// Which records to keep. Empty or `None` criteria keep everything; a record must meet all
/// the others. TLP-only criteria (requester, completer, address, tag) drop DLLPs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Kind names (case-insensitive): TLP kinds, DLLP types as printed (`UpdateFC-NP`) or
    /// their family (`UpdateFC`, `InitFC1`), or `tlp`, `dllp`, `malformed`.
    pub kinds: Vec<String>,
    /// Requester ID.
    pub requester: Option<Bdf>,
    /// Completer ID (completions) or target (configuration requests).
    pub completer: Option<Bdf>,
    /// Address range `[start, end)`.
    pub address: Option<(u64, u64)>,
    /// Tag.
    pub tag: Option<u16>,
    /// Interface names.
    pub interfaces: Vec<String>,
}

/// Every name [`Filter::kinds`] accepts (as printed; matching ignores case): the TLP
/// kinds, the DLLP types and their families, and the groups `tlp`, `dllp`, `malformed`.
pub fn kind_names() -> Vec<String> {
    use pcielab_wire::dllp::{FcClass, FcKind};
    let mut v: Vec<String> = TlpKind::ALL.iter().map(|k| k.name().to_string()).collect();
    for k in FcKind::ALL {
        v.push(k.name().to_string());
        for c in FcClass::ALL {
            v.push(format!("{}-{}", k.name(), c.name()));
        }
    }
    for n in [
        "Ack",
        "Nak",
        "NOP",
        "MRInit",
        "MRInitFC1",
        "MRInitFC2",
        "MRUpdateFC",
        "Data_Link_Feature",
        "PM_Enter_L1",
        "PM_Enter_L23",
        "PM_Active_State_Request_L1",
        "PM_Request_Ack",
        "Vendor-specific",
        "Vendor",
        "malformed-tlp",
        "malformed-dllp",
        "config",
        "other",
        "tlp",
        "dllp",
        "malformed",
    ] {
        v.push(n.to_string());
    }
    v
}

impl Filter {
    /// Checks the criteria that can be checked before reading a capture: every kind is
    /// one of [`kind_names`] and an address range is not empty. A filter that can match
    /// nothing is an error, not an empty result.
    ///
    /// ```
    /// use pcielab_capture::decode::Filter;
    /// let f = Filter { kinds: vec!["Bogus".into()], ..Filter::default() };
    /// assert!(f.check().unwrap_err().contains("Bogus"));
    /// let f = Filter { kinds: vec!["updatefc".into(), "MRd".into()], ..Filter::default() };
    /// assert!(f.check().is_ok());
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let known = kind_names();
        for k in &self.kinds {
            if !known.iter().any(|n| n.eq_ignore_ascii_case(k)) {
                return Err(format!(
                    "--kind {k:?}: no such kind; known: {}",
                    known.join(", ")
                ));
            }
        }
        if let Some((lo, hi)) = self.address {
            if hi <= lo {
                return Err(format!(
                    "--addr {lo:#x}-{hi:#x}: empty range (the end is excluded and must be above the start)"
                ));
            }
        }
        Ok(())
    }

    fn kind_ok(&self, d: &Decoded<'_>) -> bool {
        if self.kinds.is_empty() {
            return true;
        }
        let name = d.kind_name();
        self.kinds.iter().any(|k| {
            let k = k.to_ascii_lowercase();
            let n = name.to_ascii_lowercase();
            k == n
                || (k == "tlp"
                    && matches!(
                        d,
                        Decoded::Tlp { .. } | Decoded::Snapped { .. } | Decoded::BadTlp { .. }
                    ))
                || (k == "dllp" && matches!(d, Decoded::Dllp { .. } | Decoded::BadDllp { .. }))
                || (k == "malformed"
                    && matches!(d, Decoded::BadTlp { .. } | Decoded::BadDllp { .. }))
                || n.split_once('-').is_some_and(|(family, _)| family == k)
        })
    }

    /// Whether a decoded record seen on `interface` passes.
    pub fn matches(&self, interface: &str, d: &Decoded<'_>) -> bool {
        if !self.interfaces.is_empty() && !self.interfaces.iter().any(|i| i == interface) {
            return false;
        }
        if !self.kind_ok(d) {
            return false;
        }
        let tlp_only = self.requester.is_some()
            || self.completer.is_some()
            || self.address.is_some()
            || self.tag.is_some();
        if !tlp_only {
            return true;
        }
        let Some(tlp) = d.tlp() else {
            return false;
        };
        if self.requester.is_some_and(|r| tlp.requester_id() != r) {
            return false;
        }
        if let Some(c) = self.completer {
            if completer_id(&tlp) != Some(c) {
                return false;
            }
        }
        if let Some((lo, hi)) = self.address {
            match address(&tlp) {
                Some(a) if a >= lo && a < hi => {}
                _ => return false,
            }
        }
        if self.tag.is_some_and(|t| tlp.tag().value() != t) {
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcielab_wire::{CplStatus, Tag};

    #[test]
    fn filters_by_completer_and_kind_family() {
        let rid = Bdf::new(1, 0, 0).unwrap();
        let cid = Bdf::new(3, 0, 0).unwrap();
        let d = [0u8; 4];
        let cpl =
            TlpRepr::completion(cid, rid, Tag::new(4).unwrap(), CplStatus::Sc, 4, 0, &d).unwrap();
        let bytes = cpl.to_vec().unwrap();
        let dec = decode_tlp(&bytes);
        let f = Filter {
            completer: Some(cid),
            kinds: vec!["cpld".into()],
            ..Filter::default()
        };
        assert!(f.matches("x", &dec));
        let f = Filter {
            completer: Some(rid),
            ..Filter::default()
        };
        assert!(!f.matches("x", &dec));
        let f = Filter {
            interfaces: vec!["y".into()],
            ..Filter::default()
        };
        assert!(!f.matches("x", &dec));
        // UpdateFC-NP matches the family "UpdateFC" and "dllp", not "tlp".
        let fc = [0x90, 0x04, 0x40, 0x01, 0x9d, 0xb4];
        let dd = decode_tlp(&fc);
        assert!(matches!(dd, Decoded::BadTlp { .. }));
        let dl = decode_dllp(&fc);
        assert!(matches!(dl, Decoded::Dllp { crc_ok: true, .. }));
        for (k, want) in [
            ("UpdateFC", true),
            ("dllp", true),
            ("tlp", false),
            ("updatefc-np", true),
        ] {
            let f = Filter {
                kinds: vec![k.into()],
                ..Filter::default()
            };
            assert_eq!(f.matches("x", &dl), want, "{k}");
        }
    }

    #[test]
    fn snapped_tlp_decodes_from_its_header() {
        // MWr 3DW of 64 DW (268 bytes), 80 captured: as the NetTLP captures (tcpdump -s).
        let data = [0xabu8; 256];
        let rid = Bdf::new(0x19, 0, 0).unwrap();
        let b = TlpRepr::mem_write(rid, Tag::new(0).unwrap(), 0xa000_0000, &data)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(b.len(), 268);
        let d = decode_snapped(&b[..80], 268);
        let Decoded::Snapped { captured, .. } = &d else {
            panic!("{d:?}")
        };
        assert_eq!(*captured, 80);
        let t = d.tlp().unwrap();
        assert_eq!(t.length_dw(), 64);
        assert_eq!(address(&t), Some(0xa000_0000));
        assert_eq!(&t.payload[..68], &data[..68]);
        // A UDP length that disagrees with the header is malformed.
        assert!(matches!(
            decode_snapped(&b[..80], 200),
            Decoded::BadTlp { .. }
        ));
        assert!(matches!(
            decode_snapped(&b[..80], 300),
            Decoded::BadTlp { .. }
        ));
        // A header that is not captured cannot be decoded.
        assert!(matches!(
            decode_snapped(&b[..8], 268),
            Decoded::BadTlp { .. }
        ));
    }

    #[test]
    fn bad_ecrc_is_reported_not_fatal() {
        let rid = Bdf::new(1, 0, 0).unwrap();
        let mut t = TlpRepr::mem_read(rid, Tag::new(1).unwrap(), 0x100, 1).unwrap();
        t.td = true;
        let mut b = t.to_vec().unwrap();
        assert!(matches!(
            decode_tlp(&b),
            Decoded::Tlp {
                ecrc_ok: Some(true),
                ..
            }
        ));
        let n = b.len();
        b[n - 1] ^= 1;
        assert!(matches!(
            decode_tlp(&b),
            Decoded::Tlp {
                ecrc_ok: Some(false),
                ..
            }
        ));
    }
}
