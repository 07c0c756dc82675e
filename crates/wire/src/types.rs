//! Checked newtypes for the small fields of PCIe packets.
//!
//! Every N-bit field is a newtype whose constructor rejects out-of-range values, so a
//! value that exists is always encodable. `Display` gives the conventional text form
//! (`bb:dd.f` for IDs, hexadecimal for byte enables).

use crate::error::{Error, Result};
use core::fmt;

/// A Requester/Completer ID: bus (8 bits), device (5 bits), function (3 bits).
///
/// With ARI the device and function fields fold into one 8-bit function number;
/// [`Bdf::raw`] and [`Bdf::from_raw`] work on the 16-bit value either way.
///
/// ```
/// use pcielab_wire::Bdf;
/// let id = Bdf::new(0x01, 0x00, 0x0).unwrap();
/// assert_eq!(id.to_string(), "01:00.0");
/// assert_eq!(id.raw(), 0x0100);
/// assert_eq!("3a:1f.7".parse::<Bdf>().unwrap(), Bdf::from_raw(0x3aff));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bdf(u16);

impl Bdf {
    /// Builds an ID; device must be < 32 and function < 8.
    pub const fn new(bus: u8, device: u8, function: u8) -> Result<Bdf> {
        if device >= 32 {
            return Err(Error::Invalid {
                what: "device number",
                value: device as u64,
                allowed: "0..=31",
            });
        }
        if function >= 8 {
            return Err(Error::Invalid {
                what: "function number",
                value: function as u64,
                allowed: "0..=7",
            });
        }
        Ok(Bdf(((bus as u16) << 8)
            | ((device as u16) << 3)
            | function as u16))
    }
    /// Wraps the raw 16-bit ID.
    pub const fn from_raw(raw: u16) -> Bdf {
        Bdf(raw)
    }
    /// The raw 16-bit ID.
    pub const fn raw(self) -> u16 {
        self.0
    }
    /// Bus number.
    pub const fn bus(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Device number (0..=31).
    pub const fn device(self) -> u8 {
        ((self.0 >> 3) & 0x1f) as u8
    }
    /// Function number (0..=7).
    pub const fn function(self) -> u8 {
        (self.0 & 7) as u8
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02x}:{:02x}.{:x}",
            self.bus(),
            self.device(),
            self.function()
        )
    }
}

impl core::str::FromStr for Bdf {
    type Err = Error;
    /// Parses `bb:dd.f` (hexadecimal, as lspci prints it).
    fn from_str(s: &str) -> Result<Bdf> {
        let bad = Error::Invalid {
            what: "requester/completer ID text",
            value: s.len() as u64,
            allowed: "bb:dd.f in hexadecimal, e.g. 01:00.0",
        };
        let (bus, rest) = s.split_once(':').ok_or(bad)?;
        let (dev, func) = rest.split_once('.').ok_or(bad)?;
        let bus = u8::from_str_radix(bus, 16).map_err(|_| bad)?;
        let dev = u8::from_str_radix(dev, 16).map_err(|_| bad)?;
        let func = u8::from_str_radix(func, 16).map_err(|_| bad)?;
        Bdf::new(bus, dev, func)
    }
}

/// A 10-bit transaction tag (T9, T8 and the 8-bit Tag field).
///
/// ```
/// use pcielab_wire::Tag;
/// assert_eq!(Tag::new(1023).unwrap().value(), 1023);
/// assert!(Tag::new(1024).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tag(u16);

impl Tag {
    /// Largest tag value (10 bits).
    pub const MAX: u16 = 0x3ff;
    /// Builds a tag; must be < 1024.
    pub const fn new(value: u16) -> Result<Tag> {
        if value > Self::MAX {
            return Err(Error::Invalid {
                what: "tag",
                value: value as u64,
                allowed: "0..=1023 (10-bit tags)",
            });
        }
        Ok(Tag(value))
    }
    /// Builds a tag from its low 10 bits, dropping the rest.
    pub const fn from_bits_truncate(value: u16) -> Tag {
        Tag(value & Self::MAX)
    }
    /// The tag value.
    pub const fn value(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 3-bit traffic class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TrafficClass(u8);

impl TrafficClass {
    /// Traffic class 0, the default.
    pub const TC0: TrafficClass = TrafficClass(0);
    /// Builds a traffic class; must be < 8.
    pub const fn new(value: u8) -> Result<TrafficClass> {
        if value > 7 {
            return Err(Error::Invalid {
                what: "traffic class",
                value: value as u64,
                allowed: "0..=7",
            });
        }
        Ok(TrafficClass(value))
    }
    /// The traffic class.
    pub const fn value(self) -> u8 {
        self.0
    }
}

/// A 4-bit byte-enable field (bit *n* enables byte *n* of the DW).
///
/// ```
/// use pcielab_wire::ByteEnables;
/// let be = ByteEnables::new(0b1100).unwrap();
/// assert_eq!(be.count(), 2);
/// assert!(be.is_contiguous());
/// assert!(!ByteEnables::new(0b1010).unwrap().is_contiguous());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteEnables(u8);

impl ByteEnables {
    /// No byte enabled.
    pub const NONE: ByteEnables = ByteEnables(0);
    /// All four bytes enabled.
    pub const ALL: ByteEnables = ByteEnables(0xf);
    /// Builds byte enables; must be < 16.
    pub const fn new(value: u8) -> Result<ByteEnables> {
        if value > 0xf {
            return Err(Error::Invalid {
                what: "byte enables",
                value: value as u64,
                allowed: "0x0..=0xf",
            });
        }
        Ok(ByteEnables(value))
    }
    /// Builds byte enables from the low four bits.
    pub const fn from_bits_truncate(value: u8) -> ByteEnables {
        ByteEnables(value & 0xf)
    }
    /// The raw four bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
    /// Number of enabled bytes.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }
    /// True when the enabled bytes form one run (or none are enabled).
    pub const fn is_contiguous(self) -> bool {
        if self.0 == 0 {
            return true;
        }
        let shifted = self.0 >> self.0.trailing_zeros();
        shifted & (shifted + 1) == 0
    }
    /// Index of the first enabled byte, if any.
    pub const fn first(self) -> Option<u32> {
        if self.0 == 0 {
            None
        } else {
            Some(self.0.trailing_zeros())
        }
    }
    /// Index of the last enabled byte, if any.
    pub const fn last(self) -> Option<u32> {
        if self.0 == 0 {
            None
        } else {
            Some(7 - self.0.leading_zeros())
        }
    }
}

impl fmt::Display for ByteEnables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A 12-bit data-link-layer sequence number with modular (serial-number) arithmetic.
///
/// ```
/// use pcielab_wire::SeqNum;
/// let a = SeqNum::new(4095).unwrap();
/// let b = a.next();
/// assert_eq!(b.value(), 0);
/// assert!(a.precedes(b));
/// assert_eq!(b.distance_from(a), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNum(u16);

impl SeqNum {
    /// Number of distinct sequence numbers.
    pub const MODULUS: u16 = 4096;
    /// Builds a sequence number; must be < 4096.
    pub const fn new(value: u16) -> Result<SeqNum> {
        if value >= Self::MODULUS {
            return Err(Error::Invalid {
                what: "sequence number",
                value: value as u64,
                allowed: "0..=4095 (12 bits)",
            });
        }
        Ok(SeqNum(value))
    }
    /// Builds a sequence number from the low 12 bits.
    pub const fn from_bits_truncate(value: u16) -> SeqNum {
        SeqNum(value & 0xfff)
    }
    /// The value.
    pub const fn value(self) -> u16 {
        self.0
    }
    /// The following sequence number (wrapping at 4096).
    pub const fn next(self) -> SeqNum {
        SeqNum((self.0 + 1) & 0xfff)
    }
    /// The previous sequence number (wrapping at 4096).
    pub const fn prev(self) -> SeqNum {
        SeqNum(self.0.wrapping_sub(1) & 0xfff)
    }
    /// `(self - earlier) mod 4096`.
    pub const fn distance_from(self, earlier: SeqNum) -> u16 {
        self.0.wrapping_sub(earlier.0) & 0xfff
    }
    /// True when `self` comes before `other` in the spec's modulo-4096 sense
    /// (the forward distance is between 1 and 2047).
    pub const fn precedes(self, other: SeqNum) -> bool {
        let d = other.distance_from(self);
        d != 0 && d < 2048
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The attribute bits: Relaxed Ordering, No Snoop and ID-Based Ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Attr {
    /// Relaxed Ordering (`Attr[1]`).
    pub ro: bool,
    /// No Snoop (`Attr[0]`).
    pub ns: bool,
    /// ID-Based Ordering (`Attr[2]`).
    pub ido: bool,
}

impl Attr {
    /// No attribute set.
    pub const NONE: Attr = Attr {
        ro: false,
        ns: false,
        ido: false,
    };
    /// True when no attribute is set.
    pub const fn is_empty(self) -> bool {
        !self.ro && !self.ns && !self.ido
    }
}

/// Completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CplStatus {
    /// Successful Completion (000b).
    Sc,
    /// Unsupported Request (001b).
    Ur,
    /// Configuration Request Retry Status (010b).
    Crs,
    /// Completer Abort (100b).
    Ca,
    /// A reserved encoding, kept as found.
    Unknown(u8),
}

impl CplStatus {
    /// Decodes the 3-bit field.
    pub const fn from_raw(raw: u8) -> CplStatus {
        match raw & 7 {
            0 => CplStatus::Sc,
            1 => CplStatus::Ur,
            2 => CplStatus::Crs,
            4 => CplStatus::Ca,
            other => CplStatus::Unknown(other),
        }
    }
    /// The 3-bit encoding.
    pub const fn raw(self) -> u8 {
        match self {
            CplStatus::Sc => 0,
            CplStatus::Ur => 1,
            CplStatus::Crs => 2,
            CplStatus::Ca => 4,
            CplStatus::Unknown(v) => v & 7,
        }
    }
    /// Short name (`SC`, `UR`, `CRS`, `CA`, or the number).
    pub fn name(self) -> &'static str {
        match self {
            CplStatus::Sc => "SC",
            CplStatus::Ur => "UR",
            CplStatus::Crs => "CRS",
            CplStatus::Ca => "CA",
            CplStatus::Unknown(3) => "3",
            CplStatus::Unknown(5) => "5",
            CplStatus::Unknown(6) => "6",
            CplStatus::Unknown(_) => "7",
        }
    }
}

impl fmt::Display for CplStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The Address Type field of memory requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum AddressType {
    /// Default / untranslated (00b).
    #[default]
    Untranslated,
    /// Translation request (01b).
    TranslationRequest,
    /// Translated (10b).
    Translated,
    /// Reserved (11b).
    Reserved,
}

impl AddressType {
    /// Decodes the 2-bit field.
    pub const fn from_raw(raw: u8) -> AddressType {
        match raw & 3 {
            0 => AddressType::Untranslated,
            1 => AddressType::TranslationRequest,
            2 => AddressType::Translated,
            _ => AddressType::Reserved,
        }
    }
    /// The 2-bit encoding.
    pub const fn raw(self) -> u8 {
        match self {
            AddressType::Untranslated => 0,
            AddressType::TranslationRequest => 1,
            AddressType::Translated => 2,
            AddressType::Reserved => 3,
        }
    }
}

/// A PCIe generation (data rate), Gen1 (2.5 GT/s) to Gen6 (64 GT/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Generation {
    /// 2.5 GT/s, 8b/10b.
    Gen1,
    /// 5.0 GT/s, 8b/10b.
    Gen2,
    /// 8.0 GT/s, 128b/130b.
    Gen3,
    /// 16.0 GT/s, 128b/130b.
    Gen4,
    /// 32.0 GT/s, 128b/130b.
    Gen5,
    /// 64.0 GT/s, PAM4, FLIT mode.
    Gen6,
}

impl Generation {
    /// All generations in order.
    pub const ALL: [Generation; 6] = [
        Generation::Gen1,
        Generation::Gen2,
        Generation::Gen3,
        Generation::Gen4,
        Generation::Gen5,
        Generation::Gen6,
    ];
    /// From the generation number 1..=6.
    pub const fn from_number(n: u8) -> Result<Generation> {
        match n {
            1 => Ok(Generation::Gen1),
            2 => Ok(Generation::Gen2),
            3 => Ok(Generation::Gen3),
            4 => Ok(Generation::Gen4),
            5 => Ok(Generation::Gen5),
            6 => Ok(Generation::Gen6),
            _ => Err(Error::Invalid {
                what: "PCIe generation",
                value: n as u64,
                allowed: "1..=6",
            }),
        }
    }
    /// The generation number 1..=6.
    pub const fn number(self) -> u8 {
        self as u8 + 1
    }
    /// Transfer rate per lane in megatransfers per second.
    pub const fn mt_per_s(self) -> u64 {
        match self {
            Generation::Gen1 => 2_500,
            Generation::Gen2 => 5_000,
            Generation::Gen3 => 8_000,
            Generation::Gen4 => 16_000,
            Generation::Gen5 => 32_000,
            Generation::Gen6 => 64_000,
        }
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gen{}", self.number())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_fields_and_text() {
        let b = Bdf::new(0xab, 31, 7).unwrap();
        assert_eq!((b.bus(), b.device(), b.function()), (0xab, 31, 7));
        assert_eq!(b.to_string(), "ab:1f.7");
        assert_eq!(b.to_string().parse::<Bdf>().unwrap(), b);
        assert!(Bdf::new(0, 32, 0).is_err());
        assert!(Bdf::new(0, 0, 8).is_err());
        assert!("1:2".parse::<Bdf>().is_err());
        assert!("zz:00.0".parse::<Bdf>().is_err());
    }

    #[test]
    fn byte_enable_contiguity() {
        let contiguous: Vec<u8> = (0..16)
            .filter(|&v| ByteEnables::new(v).unwrap().is_contiguous())
            .collect();
        assert_eq!(contiguous, vec![0, 1, 2, 3, 4, 6, 7, 8, 12, 14, 15]);
        assert_eq!(ByteEnables::new(0b0110).unwrap().first(), Some(1));
        assert_eq!(ByteEnables::new(0b0110).unwrap().last(), Some(2));
    }

    #[test]
    fn seqnum_wraps() {
        let z = SeqNum::new(0).unwrap();
        assert_eq!(z.prev().value(), 4095);
        assert!(z.prev().precedes(z));
        assert!(!z.precedes(z));
        assert!(z.precedes(SeqNum::new(2047).unwrap()));
        assert!(!z.precedes(SeqNum::new(2048).unwrap()));
    }

    #[test]
    fn status_round_trip() {
        for raw in 0..8 {
            assert_eq!(CplStatus::from_raw(raw).raw(), raw);
        }
    }
}
