//! TLP prefixes: one DW each, Fmt = 100b, in front of the header.
//!
//! ```text
//!  byte 0: Fmt=100 | E/L (bit 4: 1 = End-End, 0 = Local) | subtype [3:0]
//!  bytes 1..4: prefix contents (24 bits)
//! ```

use core::fmt;

/// The kind of a TLP prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PrefixKind {
    /// Local: MR-IOV (L = 0000b).
    MrIov,
    /// Local: vendor-defined VendPrefixL0 (1110b).
    VendorLocal0,
    /// Local: vendor-defined VendPrefixL1 (1111b).
    VendorLocal1,
    /// Local: another subtype, kept as found.
    LocalUnknown(u8),
    /// End-End: TLP Processing Hints (E = 0000b).
    Tph,
    /// End-End: PASID (0001b).
    Pasid,
    /// End-End: vendor-defined VendPrefixE0 (1110b).
    VendorE2e0,
    /// End-End: vendor-defined VendPrefixE1 (1111b).
    VendorE2e1,
    /// End-End: another subtype, kept as found.
    E2eUnknown(u8),
}

impl PrefixKind {
    /// Decodes the low five bits of byte 0 (E/L bit and subtype).
    pub const fn from_type(ty: u8) -> PrefixKind {
        let sub = ty & 0xf;
        if ty & 0x10 == 0 {
            match sub {
                0 => PrefixKind::MrIov,
                0xe => PrefixKind::VendorLocal0,
                0xf => PrefixKind::VendorLocal1,
                s => PrefixKind::LocalUnknown(s),
            }
        } else {
            match sub {
                0 => PrefixKind::Tph,
                1 => PrefixKind::Pasid,
                0xe => PrefixKind::VendorE2e0,
                0xf => PrefixKind::VendorE2e1,
                s => PrefixKind::E2eUnknown(s),
            }
        }
    }
    /// The five-bit type (E/L bit and subtype).
    pub const fn type_bits(self) -> u8 {
        match self {
            PrefixKind::MrIov => 0,
            PrefixKind::VendorLocal0 => 0xe,
            PrefixKind::VendorLocal1 => 0xf,
            PrefixKind::LocalUnknown(s) => s & 0xf,
            PrefixKind::Tph => 0x10,
            PrefixKind::Pasid => 0x11,
            PrefixKind::VendorE2e0 => 0x1e,
            PrefixKind::VendorE2e1 => 0x1f,
            PrefixKind::E2eUnknown(s) => 0x10 | (s & 0xf),
        }
    }
    /// True for End-End prefixes (which ECRC covers and switches forward unchanged).
    pub const fn is_end_to_end(self) -> bool {
        self.type_bits() & 0x10 != 0
    }
    /// A short name (`MR-IOV`, `TPH`, `PASID`, `VendL0`, …, or `L<n>`/`E<n>`).
    pub fn name(self) -> String {
        match self {
            PrefixKind::MrIov => "MR-IOV".into(),
            PrefixKind::VendorLocal0 => "VendL0".into(),
            PrefixKind::VendorLocal1 => "VendL1".into(),
            PrefixKind::LocalUnknown(s) => format!("L{s}"),
            PrefixKind::Tph => "TPH".into(),
            PrefixKind::Pasid => "PASID".into(),
            PrefixKind::VendorE2e0 => "VendE0".into(),
            PrefixKind::VendorE2e1 => "VendE1".into(),
            PrefixKind::E2eUnknown(s) => format!("E{s}"),
        }
    }
    /// Parses [`PrefixKind::name`].
    pub fn from_name(s: &str) -> Option<PrefixKind> {
        Some(match s {
            "MR-IOV" => PrefixKind::MrIov,
            "VendL0" => PrefixKind::VendorLocal0,
            "VendL1" => PrefixKind::VendorLocal1,
            "TPH" => PrefixKind::Tph,
            "PASID" => PrefixKind::Pasid,
            "VendE0" => PrefixKind::VendorE2e0,
            "VendE1" => PrefixKind::VendorE2e1,
            _ => {
                let (local, n) = match s.as_bytes().first()? {
                    b'L' => (true, &s[1..]),
                    b'E' => (false, &s[1..]),
                    _ => return None,
                };
                let n: u8 = n.parse().ok().filter(|&n| n < 16)?;
                let k = PrefixKind::from_type(if local { n } else { 0x10 | n });
                if k.name() != s {
                    return None;
                }
                k
            }
        })
    }
}

/// One TLP prefix: its kind and 24 bits of content.
///
/// ```
/// use pcielab_wire::tlp::{Prefix, PrefixKind};
/// let p = Prefix::new_pasid(0x12345, true, false);
/// assert_eq!(p.kind(), PrefixKind::Pasid);
/// assert_eq!(p.pasid(), Some((0x12345, true, false)));
/// assert_eq!(p.to_bytes(), [0x91, 0x11, 0x23, 0x45]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Prefix(u32);

impl Prefix {
    /// Builds a prefix from its wire bytes; `None` unless Fmt is 100b.
    pub const fn from_bytes(b: [u8; 4]) -> Option<Prefix> {
        if b[0] >> 5 != 0b100 {
            return None;
        }
        Some(Prefix(u32::from_be_bytes(b)))
    }
    /// Builds a prefix of a kind with 24 bits of content (higher bits are dropped).
    pub const fn new(kind: PrefixKind, content: u32) -> Prefix {
        Prefix((0b100 << 29) | ((kind.type_bits() as u32) << 24) | (content & 0xff_ffff))
    }
    /// A PASID prefix: PASID (20 bits), Execute Requested, Privileged Mode Requested.
    pub const fn new_pasid(pasid: u32, execute: bool, privileged: bool) -> Prefix {
        Prefix::new(
            PrefixKind::Pasid,
            (pasid & 0xf_ffff) | ((execute as u32) << 20) | ((privileged as u32) << 21),
        )
    }
    /// A TPH prefix carrying `ST[15:8]`.
    pub const fn new_tph(st_upper: u8) -> Prefix {
        Prefix::new(PrefixKind::Tph, (st_upper as u32) << 16)
    }
    /// The wire bytes.
    pub const fn to_bytes(self) -> [u8; 4] {
        self.0.to_be_bytes()
    }
    /// The kind.
    pub const fn kind(self) -> PrefixKind {
        PrefixKind::from_type(((self.0 >> 24) & 0x1f) as u8)
    }
    /// The 24 bits of content.
    pub const fn content(self) -> u32 {
        self.0 & 0xff_ffff
    }
    /// For a PASID prefix: (PASID, Execute Requested, Privileged Mode Requested).
    pub const fn pasid(self) -> Option<(u32, bool, bool)> {
        match self.kind() {
            PrefixKind::Pasid => Some((
                self.0 & 0xf_ffff,
                self.0 & (1 << 20) != 0,
                self.0 & (1 << 21) != 0,
            )),
            _ => None,
        }
    }
    /// For a TPH prefix: `ST[15:8]`.
    pub const fn tph_st_upper(self) -> Option<u8> {
        match self.kind() {
            PrefixKind::Tph => Some((self.0 >> 16) as u8),
            _ => None,
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pasid() {
            Some((p, e, pm)) => write!(
                f,
                "PASID {p:#x}{}{}",
                if e { " exe" } else { "" },
                if pm { " priv" } else { "" }
            ),
            None => write!(f, "{} {:#08x}", self.kind().name(), self.content()),
        }
    }
}

/// Most prefixes a TLP may carry in this codec. The spec allows up to four End-End
/// prefixes; Local prefixes are not limited by the spec, eight in all is ample.
pub const MAX_PREFIXES: usize = 8;

/// A fixed-capacity list of prefixes (no heap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Prefixes {
    len: u8,
    items: [Prefix; MAX_PREFIXES],
}

impl Prefixes {
    /// No prefixes.
    pub const EMPTY: Prefixes = Prefixes {
        len: 0,
        items: [Prefix(0); MAX_PREFIXES],
    };
    /// Builds a list; fails past [`MAX_PREFIXES`].
    pub fn from_slice(p: &[Prefix]) -> crate::Result<Prefixes> {
        let mut out = Prefixes::EMPTY;
        for &x in p {
            out.push(x)?;
        }
        Ok(out)
    }
    /// Appends one prefix.
    pub fn push(&mut self, p: Prefix) -> crate::Result<()> {
        if self.len as usize >= MAX_PREFIXES {
            return Err(crate::Error::Invalid {
                what: "number of TLP prefixes",
                value: MAX_PREFIXES as u64 + 1,
                allowed: "at most 8",
            });
        }
        self.items[self.len as usize] = p;
        self.len += 1;
        Ok(())
    }
    /// The prefixes.
    pub fn as_slice(&self) -> &[Prefix] {
        &self.items[..self.len as usize]
    }
    /// Number of prefixes.
    pub const fn len(&self) -> usize {
        self.len as usize
    }
    /// True when there is none.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for t in 0..32u8 {
            let k = PrefixKind::from_type(t);
            assert_eq!(k.type_bits(), t);
            assert_eq!(PrefixKind::from_name(&k.name()), Some(k));
            assert_eq!(k.is_end_to_end(), t >= 16);
        }
    }

    #[test]
    fn bytes() {
        assert_eq!(
            Prefix::from_bytes([0x80, 1, 2, 3]).unwrap().kind(),
            PrefixKind::MrIov
        );
        assert_eq!(Prefix::from_bytes([0x40, 0, 0, 0]), None);
        assert_eq!(Prefix::new_tph(0xab).to_bytes(), [0x90, 0xab, 0, 0]);
    }
}
