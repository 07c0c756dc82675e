//! Fmt/Type decoding: the TLP kind, its routing and its flow-control class, derived in
//! one exhaustive table.

use core::fmt;

/// The Fmt field (3 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fmt {
    /// 3 DW header, no data (000b).
    Dw3NoData,
    /// 4 DW header, no data (001b).
    Dw4NoData,
    /// 3 DW header, with data (010b).
    Dw3Data,
    /// 4 DW header, with data (011b).
    Dw4Data,
    /// TLP Prefix (100b).
    Prefix,
}

impl Fmt {
    /// Decodes the 3-bit field; reserved encodings give `None`.
    pub const fn from_raw(raw: u8) -> Option<Fmt> {
        match raw {
            0 => Some(Fmt::Dw3NoData),
            1 => Some(Fmt::Dw4NoData),
            2 => Some(Fmt::Dw3Data),
            3 => Some(Fmt::Dw4Data),
            4 => Some(Fmt::Prefix),
            _ => None,
        }
    }
    /// The 3-bit encoding.
    pub const fn raw(self) -> u8 {
        match self {
            Fmt::Dw3NoData => 0,
            Fmt::Dw4NoData => 1,
            Fmt::Dw3Data => 2,
            Fmt::Dw4Data => 3,
            Fmt::Prefix => 4,
        }
    }
    /// Builds the Fmt of a header.
    pub const fn new(four_dw: bool, data: bool) -> Fmt {
        match (four_dw, data) {
            (false, false) => Fmt::Dw3NoData,
            (true, false) => Fmt::Dw4NoData,
            (false, true) => Fmt::Dw3Data,
            (true, true) => Fmt::Dw4Data,
        }
    }
    /// True for a 4 DW header.
    pub const fn is_4dw(self) -> bool {
        matches!(self, Fmt::Dw4NoData | Fmt::Dw4Data)
    }
    /// True when the TLP carries a data payload.
    pub const fn has_data(self) -> bool {
        matches!(self, Fmt::Dw3Data | Fmt::Dw4Data)
    }
    /// Header length in bytes (12 or 16); 4 for a prefix.
    pub const fn header_len(self) -> usize {
        match self {
            Fmt::Prefix => 4,
            _ if self.is_4dw() => 16,
            _ => 12,
        }
    }
}

/// Every TLP kind of the non-Flit transaction layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms)]
pub enum TlpKind {
    /// Memory Read Request.
    MRd,
    /// Memory Read Request-Locked.
    MRdLk,
    /// Memory Write Request.
    MWr,
    /// I/O Read Request.
    IORd,
    /// I/O Write Request.
    IOWr,
    /// Configuration Read Type 0.
    CfgRd0,
    /// Configuration Write Type 0.
    CfgWr0,
    /// Configuration Read Type 1.
    CfgRd1,
    /// Configuration Write Type 1.
    CfgWr1,
    /// Message Request without data.
    Msg,
    /// Message Request with data.
    MsgD,
    /// Completion without data.
    Cpl,
    /// Completion with data.
    CplD,
    /// Completion for Locked Memory Read without data.
    CplLk,
    /// Completion for Locked Memory Read with data.
    CplDLk,
    /// Fetch and Add AtomicOp Request.
    FetchAdd,
    /// Unconditional Swap AtomicOp Request.
    Swap,
    /// Compare and Swap AtomicOp Request.
    CAS,
}

/// `TlpKind::decode` for every value of header byte 0, computed at compile time.
const KIND_BY_BYTE0: [Option<TlpKind>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = TlpKind::decode((i >> 5) as u8, (i & 0x1f) as u8);
        i += 1;
    }
    t
};

/// How a TLP is routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Routing {
    /// By address (memory, I/O, address-routed messages).
    Address,
    /// By ID (configuration, completions, ID-routed messages).
    Id,
    /// Implicitly (messages routed to the root complex, broadcast, local, gathered).
    Implicit,
}

/// Flow-control (credit) class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FcClass {
    /// Posted requests (memory writes, messages).
    Posted,
    /// Non-posted requests (reads, I/O, configuration, AtomicOps).
    NonPosted,
    /// Completions.
    Completion,
}

impl TlpKind {
    /// All kinds.
    pub const ALL: [TlpKind; 18] = [
        TlpKind::MRd,
        TlpKind::MRdLk,
        TlpKind::MWr,
        TlpKind::IORd,
        TlpKind::IOWr,
        TlpKind::CfgRd0,
        TlpKind::CfgWr0,
        TlpKind::CfgRd1,
        TlpKind::CfgWr1,
        TlpKind::Msg,
        TlpKind::MsgD,
        TlpKind::Cpl,
        TlpKind::CplD,
        TlpKind::CplLk,
        TlpKind::CplDLk,
        TlpKind::FetchAdd,
        TlpKind::Swap,
        TlpKind::CAS,
    ];

    /// Decodes Fmt and Type. Returns `None` for reserved or deprecated combinations
    /// (and for the prefix Fmt, which is not a TLP kind).
    pub const fn decode(fmt: u8, ty: u8) -> Option<TlpKind> {
        use TlpKind::*;
        let k = match (fmt, ty) {
            (0 | 1, 0b00000) => MRd,
            (2 | 3, 0b00000) => MWr,
            (0 | 1, 0b00001) => MRdLk,
            (0, 0b00010) => IORd,
            (2, 0b00010) => IOWr,
            (0, 0b00100) => CfgRd0,
            (2, 0b00100) => CfgWr0,
            (0, 0b00101) => CfgRd1,
            (2, 0b00101) => CfgWr1,
            (1, 0b10000..=0b10101) => Msg,
            (3, 0b10000..=0b10101) => MsgD,
            (0, 0b01010) => Cpl,
            (2, 0b01010) => CplD,
            (0, 0b01011) => CplLk,
            (2, 0b01011) => CplDLk,
            (2 | 3, 0b01100) => FetchAdd,
            (2 | 3, 0b01101) => Swap,
            (2 | 3, 0b01110) => CAS,
            _ => return None,
        };
        Some(k)
    }

    /// Decodes header byte 0 (Fmt and Type) with a lookup table: the receive fast path.
    #[inline]
    pub const fn from_byte0(b0: u8) -> Option<TlpKind> {
        KIND_BY_BYTE0[b0 as usize]
    }

    /// The Type field for this kind (for messages, with routing subfield 0).
    pub const fn type_base(self) -> u8 {
        use TlpKind::*;
        match self {
            MRd | MWr => 0b00000,
            MRdLk => 0b00001,
            IORd | IOWr => 0b00010,
            CfgRd0 | CfgWr0 => 0b00100,
            CfgRd1 | CfgWr1 => 0b00101,
            Msg | MsgD => 0b10000,
            Cpl | CplD => 0b01010,
            CplLk | CplDLk => 0b01011,
            FetchAdd => 0b01100,
            Swap => 0b01101,
            CAS => 0b01110,
        }
    }

    /// True when this kind carries a data payload.
    pub const fn has_data(self) -> bool {
        use TlpKind::*;
        matches!(
            self,
            MWr | IOWr | CfgWr0 | CfgWr1 | MsgD | CplD | CplDLk | FetchAdd | Swap | CAS
        )
    }

    /// The spec's name (`MRd`, `CplD`, …).
    pub const fn name(self) -> &'static str {
        use TlpKind::*;
        match self {
            MRd => "MRd",
            MRdLk => "MRdLk",
            MWr => "MWr",
            IORd => "IORd",
            IOWr => "IOWr",
            CfgRd0 => "CfgRd0",
            CfgWr0 => "CfgWr0",
            CfgRd1 => "CfgRd1",
            CfgWr1 => "CfgWr1",
            Msg => "Msg",
            MsgD => "MsgD",
            Cpl => "Cpl",
            CplD => "CplD",
            CplLk => "CplLk",
            CplDLk => "CplDLk",
            FetchAdd => "FetchAdd",
            Swap => "Swap",
            CAS => "CAS",
        }
    }

    /// Parses the spec's name.
    pub fn from_name(name: &str) -> Option<TlpKind> {
        TlpKind::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The flow-control class of this kind.
    pub const fn fc_class(self) -> FcClass {
        use TlpKind::*;
        match self {
            MWr | Msg | MsgD => FcClass::Posted,
            Cpl | CplD | CplLk | CplDLk => FcClass::Completion,
            MRd | MRdLk | IORd | IOWr | CfgRd0 | CfgWr0 | CfgRd1 | CfgWr1 | FetchAdd | Swap
            | CAS => FcClass::NonPosted,
        }
    }

    /// True for requests that expect a completion.
    pub const fn is_non_posted(self) -> bool {
        matches!(self.fc_class(), FcClass::NonPosted)
    }

    /// True for completions.
    pub const fn is_completion(self) -> bool {
        matches!(self.fc_class(), FcClass::Completion)
    }

    /// How this kind is routed (messages: see [`MsgRouting`](super::MsgRouting)).
    pub const fn routing(self) -> Routing {
        use TlpKind::*;
        match self {
            MRd | MRdLk | MWr | IORd | IOWr | FetchAdd | Swap | CAS => Routing::Address,
            CfgRd0 | CfgWr0 | CfgRd1 | CfgWr1 | Cpl | CplD | CplLk | CplDLk => Routing::Id,
            Msg | MsgD => Routing::Implicit,
        }
    }
}

impl fmt::Display for TlpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_covers_every_kind_and_only_those() {
        let mut seen = std::collections::HashSet::new();
        for fmt in 0..8u8 {
            for ty in 0..32u8 {
                if let Some(k) = TlpKind::decode(fmt, ty) {
                    assert_eq!(Fmt::from_raw(fmt).unwrap().has_data(), k.has_data());
                    seen.insert(k);
                }
            }
        }
        assert_eq!(seen.len(), TlpKind::ALL.len());
        for b in 0..=255u8 {
            assert_eq!(TlpKind::from_byte0(b), TlpKind::decode(b >> 5, b & 0x1f));
        }
        // A few reserved ones.
        assert_eq!(TlpKind::decode(1, 0b00010), None); // 4DW IO
        assert_eq!(TlpKind::decode(0, 0b10000), None); // 3DW message
        assert_eq!(TlpKind::decode(1, 0b10110), None); // reserved routing
        assert_eq!(TlpKind::decode(0, 0b11011), None); // deprecated TCfgRd
        assert_eq!(TlpKind::decode(0, 0b01100), None); // AtomicOp without data
    }

    #[test]
    fn names_round_trip() {
        for k in TlpKind::ALL {
            assert_eq!(TlpKind::from_name(k.name()), Some(k));
        }
    }
}
