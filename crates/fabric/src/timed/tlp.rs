//! The simulator's internal TLP record ([`Tlp`]): what a TLP is ([`Kind`], [`Detail`]),
//! who consumes it ([`Dest`]), the route it takes ([`Route`]), and the flow-control
//! classes. Every component of the fabric speaks it; it depends on nothing above it.

use pcielab_wire::tlp::{
    MemHeader, MemOp, MsgCode, MsgFields, MsgHeader, MsgRouting, TlpHeader, TlpRepr,
};
use pcielab_wire::{Bdf, ByteEnables, CplStatus, Tag};

pub(crate) const NONE: u32 = u32::MAX;
/// No link direction (directions are numbered by `u16`).
pub(crate) const NO_DIR: u16 = u16::MAX;

pub(crate) const MAX_PATH: usize = 8;
/// A route: the directions a TLP crosses, how many, and its consumer.
pub(crate) type Route = ([u16; MAX_PATH], u8, Dest);
/// A `route_last` entry that matches no key.
pub(crate) const NO_ROUTE: ((u32, u64), Route) = ((NONE, u64::MAX), ([0; MAX_PATH], 0, Dest::Rc));
/// Flow-control classes: posted, non-posted, completion.
pub(crate) const P: usize = 0;
pub(crate) const NP: usize = 1;
pub(crate) const CPL: usize = 2;

/// What a simulated TLP is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    MRd,
    MWr,
    Cpl,
    CplD,
    /// An INTx virtual-wire message (Assert_INTx/Deassert_INTx, routing "local,
    /// terminate at receiver"); the message code is its `Detail::Msg`.
    Intx,
    /// An I/O read (IORd): non-posted, 3DW header, at most 4 bytes within one DW
    /// (`addr`, `len`); answered with a CplD of one DW.
    IoRd,
    /// An I/O write (IOWr): non-posted, 3DW header and one DW of data (`len` bytes
    /// at `addr`, the rest masked off by the byte enables); answered with a Cpl.
    IoWr,
    /// A configuration read from the root complex (CfgRd0 on the last link when the
    /// target sits on the bus right below it, CfgRd1 before): non-posted, 3DW header;
    /// `completer` is the target function, `addr` the register's byte offset (DW
    /// aligned), `len` 4 and its `Detail::FirstBe` the First DW Byte Enables. Answered with a
    /// CplD of one DW, or a Cpl with Unsupported Request where routing ends.
    CfgRd,
    /// A configuration write (CfgWr0/CfgWr1), with one DW of data; answered with a Cpl.
    CfgWr,
    /// An error message (ERR_COR, ERR_NONFATAL or ERR_FATAL; its code in `Detail::Msg`),
    /// routed to the root complex: posted, 4DW header, no data; `requester` is the
    /// function that detected the error.
    ErrMsg,
    /// A Vendor_Defined message: posted, 4DW header, `len` bytes of payload (whole
    /// DWs, none for a Msg). `Detail::Vendor`: the message code (7Eh/7Fh) and routing
    /// (000b to the root complex, 010b by ID); `completer`: the destination ID
    /// (the host bridge for the root complex); `addr`: vendor data << 32 | Vendor ID
    /// << 16 (its low bits zero, so the payload is DW aligned).
    VendorMsg,
    /// A power-management message routed to the root complex (PM_PME, code 18h in its
    /// `Detail::Msg`): posted, 4DW header, no data; `requester` is the function that
    /// signalled the event.
    PmMsg,
    /// A power-management message handled hop by hop (code in `Detail::Msg`):
    /// PME_Turn_Off (19h, broadcast from the root complex: a switch sends a copy down
    /// every downstream port) and PME_TO_Ack (1Bh, gathered to the root complex: a
    /// switch sends one upstream once every downstream port has acknowledged). Posted,
    /// 4DW header, no data; one link per TLP (`dest` is [`Dest::Hop`]).
    PmHop,
    /// An ATS Translation Request (a memory read with AT = 01b) from a device's DMA
    /// engine to the root complex's translation agent: non-posted, no data; `addr` is
    /// the untranslated page, `len` 8 (one Translation Completion entry). Routed to
    /// the root complex whatever its address (see `ats`).
    TransReq,
    /// An ATS Invalidate Request (MsgD 01h, routed by ID) from the root complex to a
    /// device: posted, 4DW header and 8 bytes of data (the untranslated range);
    /// `completer` is the device, `Detail::Itag` the ITag.
    AtsInv,
    /// An ATS Invalidate Completion (Msg 02h, routed by ID) from a device to the root
    /// complex: posted, 4DW header, no data; `completer` is the host bridge,
    /// `Detail::Itag` the ITag whose bit the ITag vector sets.
    AtsInvCpl,
    /// A Page Request (Msg 04h to the root complex, PRI): posted, 4DW header, no
    /// data; `addr` the page, `Detail::PageRequest` the PRG index and R, W (see `pri`).
    PageReq,
    /// A PRG Response (Msg 05h by ID) from the root complex to a device: posted, 4DW
    /// header, no data; `completer` the device, `addr` the page, `Detail::PrgResponse` the PRG
    /// index and response code.
    PrgResp,
    /// Bytes a device model built itself ([`EpCx::send_raw`]) that the fabric does
    /// not carry as one of its own TLPs: Malformed at the receiver, or a valid TLP of
    /// a kind the simulator does not model (see the `raw` module). The whole TLP is
    /// the payload (`len` bytes, `hdr_bytes` 0); it crosses one link (`dest` is
    /// [`Dest::Hop`]) and the receiving port handles it. It takes one posted header
    /// credit and the data credits of all its bytes (the receiver cannot tell what
    /// else it would consume).
    Raw,
    /// An AtomicOp request (FetchAdd, Swap or CAS; see the `atomic` module) from a
    /// device's DMA engine: non-posted, routed by address, `len` bytes of operands as
    /// its payload (CAS: the compare and swap values, twice the operand size), the
    /// operation in `Detail::Atomic`. Answered with a
    /// CplD of the target's original value.
    Atomic,
}

impl Kind {
    /// A message (4-DW header, posted).
    #[inline(always)]
    pub(crate) fn is_message(self) -> bool {
        matches!(
            self,
            Kind::Intx
                | Kind::ErrMsg
                | Kind::VendorMsg
                | Kind::PmMsg
                | Kind::PmHop
                | Kind::AtsInv
                | Kind::AtsInvCpl
                | Kind::PageReq
                | Kind::PrgResp
        )
    }

    /// A completion (Cpl or CplD).
    #[inline(always)]
    pub(crate) fn is_completion(self) -> bool {
        matches!(self, Kind::Cpl | Kind::CplD)
    }

    /// Routed to a function by ID (completions, and the messages the simulator sends
    /// to the root complex or to a device), rather than by address or hop by hop.
    #[inline(always)]
    pub(crate) fn routed_by_id(self) -> bool {
        matches!(
            self,
            Kind::Cpl
                | Kind::CplD
                | Kind::ErrMsg
                | Kind::VendorMsg
                | Kind::PmMsg
                | Kind::TransReq
                | Kind::AtsInv
                | Kind::AtsInvCpl
                | Kind::PageReq
                | Kind::PrgResp
        )
    }
}

/// Who consumes a TLP at its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    HostMemory,
    /// A memory or I/O request that the port it arrived at may not forward upstream
    /// (Bus Master Enable clear): the port refuses it after the node's latency (see
    /// the `bus_master` module).
    Refused,
    /// The root complex (completions of host requests).
    Rc,
    /// A function's BAR: `func` is the function's index on its device (see
    /// `EpState::funcs`).
    Bar {
        node: u32,
        func: u16,
        bar: u8,
        offset: u64,
    },
    /// A device's DMA engine (completions).
    Dma {
        node: u32,
    },
    /// The receiver of an INTx message (a switch's upstream port or the root complex).
    Intx {
        node: u32,
    },
    /// The receiver of a hop-by-hop power-management message (see [`Kind::PmHop`]).
    Hop {
        node: u32,
    },
    /// The node where a configuration request ends: `func` is the target function, or
    /// NONE when the request cannot go further: then `refuser` answers Unsupported
    /// Request (NONE: the root complex). `type0_last`: the request is Type 0 on the
    /// last link of its path.
    Config {
        node: u32,
        func: u32,
        refuser: u32,
        type0_last: bool,
    },
}

/// One TLP in flight: 96 bytes plus its payload buffer (pooled). `repr(C)` with the
/// fields in falling alignment, so the layout has no padding whatever the compiler
/// would do with fields that have niches; the size is asserted in `timed::sim::tests`.
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Tlp {
    /// The address of a memory, I/O or translation request (the untranslated one
    /// until an ATS translation applies); 0 for other kinds.
    pub addr: u64,
    /// Its payload became the host-memory page at this (physical) address, on loan
    /// to it (see `Engine::host_write`), or `NOT_LENT`.
    pub lent: u64,
    /// Who consumes it where its route ends.
    pub dest: Dest,
    /// Bytes requested (MRd) or carried (MWr/CplD, DW-rounded payload length).
    pub len: u32,
    /// Index into the payload pool, or NONE.
    pub data: u32,
    /// (node, dma op) to notify when the last TLP of a DMA write leaves, or NONE.
    pub dma_last: (u32, u32),
    /// The PASID of its PASID TLP prefix (one End-End prefix DW on the wire), or NONE.
    pub pasid: u32,
    /// Direction whose receive buffer holds it (credits to return), or `NO_DIR`.
    pub ingress: u16,
    /// Requester ID.
    pub requester: Bdf,
    /// Completer ID of a completion; the target ID of a request or message routed by
    /// ID (configuration requests, messages by ID).
    pub completer: Bdf,
    /// Tag (up to 10 bits on the wire).
    pub tag: u16,
    /// What the kind carries besides address and length (one meaning per variant).
    pub detail: Detail,
    /// The link directions of its route, in order (`hops` of them).
    pub path: [u16; MAX_PATH],
    /// What it is.
    pub kind: Kind,
    /// Directions in `path`.
    pub hops: u8,
    /// Directions of `path` it has crossed so far.
    pub at: u8,
    /// Holders of the record (queues, the replay buffer); freed at 0 (see `pool`).
    pub refs: u8,
    /// Header bytes: 12 or 16.
    pub hdr_bytes: u8,
    /// EP: the data is poisoned (PCIe Base Spec 2.7.2).
    pub poisoned: bool,
    /// TD: the TLP carries an ECRC digest (4 bytes after the data; see `ecrc`).
    pub td: bool,
    /// A switch corrupted the data on the way (after the digest was computed).
    pub corrupted: bool,
    /// The AT field of a memory request: 0 untranslated, 2 translated (ATS).
    pub addr_type: u8,
    /// TLPs this record stands for (burst mode, see the `burst` module): 1, or a
    /// train of `pieces` memory writes, completions or memory read requests of
    /// `len / pieces` bytes each at consecutive addresses (a scatter burst's at the
    /// addresses of its piece list, `Detail::Scatter`), sent back to back and handled as one
    /// unit.
    pub pieces: u8,
    /// The tags of a burst's pieces (see `pieces`): 0, every piece has `tag`;
    /// otherwise the pieces per tag (1 for a burst of read requests, the pieces per
    /// request for completions that answer several of them), plus `TAGS_DOWN` when
    /// the tags go down (else up) one by one from `tag`. A completion burst's
    /// Byte Count is that of each request's first piece.
    pub tag_span: u8,
}

/// What a TLP record carries besides its address and length: each kind has its own
/// variant, so no field holds different things for different kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    /// Nothing (memory requests, raw TLPs).
    None,
    /// A scatter burst of memory read requests or of their Successful Completions
    /// (burst mode, see the `burst` module): the index of its piece list in the pool
    /// (`TlpPool::scatter`), each piece's address and tag. A completion piece answers
    /// its whole request: its Byte Count is its length.
    Scatter(u32),
    /// A completion's Byte Count (of a burst of completions: of each request's first
    /// piece; see [`Tlp::piece_byte_count`]) and Completion Status.
    Completion {
        /// Byte Count.
        byte_count: u16,
        /// Completion Status.
        status: CplStatus,
    },
    /// A message's code: INTx, error and power-management messages.
    Msg(u8),
    /// An LTR message's Snoop and No-Snoop Latency registers.
    Ltr {
        /// Snoop Latency.
        snoop: u16,
        /// No-Snoop Latency.
        no_snoop: u16,
    },
    /// A vendor-defined message: its type and routing, and the header's Vendor ID and
    /// vendor data (bytes 10–15).
    Vendor {
        /// Type 0 or 1 and the routing subfield.
        form: VdmForm,
        /// Vendor ID.
        vendor_id: u16,
        /// Vendor data (header bytes 12–15, in wire order).
        data: [u8; 4],
    },
    /// An I/O or configuration request's First DW Byte Enables.
    FirstBe(u8),
    /// An AtomicOp's operation.
    Atomic(AtomicKind),
    /// An ATS Invalidate Request's or Invalidation Completion's ITag.
    Itag(u8),
    /// A Page Request's PRG index and its R (bit 0) and W (bit 1) bits.
    PageRequest {
        /// Page Request Group index.
        prg: u16,
        /// R | W << 1.
        rw: u8,
    },
    /// A PRG Response's PRG index and response code.
    PrgResponse {
        /// Page Request Group index.
        prg: u16,
        /// Response code.
        code: u8,
    },
}

/// A vendor-defined message's type (Type 0: message code 7Eh, Type 1: 7Fh) and routing
/// subfield r[2:0] (000b to the root complex, 010b by ID, 011b broadcast, 100b local),
/// in one byte so that [`Detail`] stays small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct VdmForm(u8);

impl VdmForm {
    /// Type 1 (`type1`) or Type 0, with routing subfield `routing` (its low 3 bits).
    pub fn new(type1: bool, routing: u8) -> VdmForm {
        VdmForm((type1 as u8) << 7 | (routing & 7))
    }

    /// The message code: 7Eh (Type 0) or 7Fh (Type 1).
    pub fn code(self) -> u8 {
        0x7e | (self.0 >> 7)
    }

    /// The routing subfield r[2:0].
    pub fn routing(self) -> u8 {
        self.0 & 7
    }
}

/// An AtomicOp's operation (PCIe Base Spec 6.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomicKind {
    /// FetchAdd.
    FetchAdd,
    /// Unconditional Swap.
    Swap,
    /// Compare and Swap.
    Cas,
}

/// `Tlp::tag_span`: the pieces' tags go down.
pub(crate) const TAGS_DOWN: u8 = 0x80;

/// The tag of piece `i` of a burst whose first tag is `tag`, with `Tlp::tag_span`
/// `span`.
#[inline]
pub(crate) fn piece_tag_at(tag: u16, span: u8, i: u32) -> u16 {
    let per = (span & !TAGS_DOWN) as u32;
    if per == 0 {
        return tag;
    }
    let r = (i / per) as u16;
    if span & TAGS_DOWN != 0 {
        tag.wrapping_sub(r)
    } else {
        tag.wrapping_add(r)
    }
}

impl Tlp {
    /// A TLP of `kind` from `requester` (also the completer) for `len` bytes at `addr`,
    /// with no payload, tag 0, status SC, not yet routed (`inject` fills the path and
    /// the destination), and the header size of its kind: 4 DW for memory requests
    /// above 4 GiB and for messages, else 3 DW.
    pub fn new(kind: Kind, requester: Bdf, addr: u64, len: u32) -> Tlp {
        let hdr_bytes = match kind {
            Kind::MRd | Kind::MWr | Kind::Atomic if addr > u32::MAX as u64 => 16,
            Kind::TransReq if addr > u32::MAX as u64 => 16,
            k if k.is_message() => 16,
            Kind::Raw => 0,
            _ => 12,
        };
        Tlp {
            kind,
            requester,
            completer: requester,
            tag: 0,
            addr,
            len,
            detail: Detail::None,
            data: NONE,
            path: [0; MAX_PATH],
            hops: 0,
            at: 0,
            refs: 1,
            dest: Dest::HostMemory,
            ingress: NO_DIR,
            dma_last: (NONE, NONE),
            hdr_bytes,
            poisoned: false,
            td: false,
            corrupted: false,
            addr_type: 0,
            pasid: NONE,
            pieces: 1,
            lent: NOT_LENT,
            tag_span: 0,
        }
    }
    /// The flow-control class: memory writes and every message are posted.
    #[inline]
    pub fn class(&self) -> usize {
        match self.kind {
            Kind::MRd
            | Kind::IoRd
            | Kind::IoWr
            | Kind::CfgRd
            | Kind::CfgWr
            | Kind::TransReq
            | Kind::Atomic => NP,
            Kind::Cpl | Kind::CplD => CPL,
            Kind::MWr | Kind::Raw => P,
            k => {
                debug_assert!(k.is_message());
                P
            }
        }
    }
    /// Payload on the wire: the whole DWs the bytes `[addr, addr + len)` touch.
    #[inline(always)]
    pub fn payload_bytes(&self) -> u32 {
        match self.kind {
            // A raw TLP's bytes in whole DWs, as the physical layer frames them.
            Kind::MWr | Kind::CplD | Kind::IoWr | Kind::CfgWr | Kind::Raw | Kind::Atomic => {
                self.dw_span() * 4
            }
            Kind::VendorMsg if self.len > 0 => self.dw_span() * 4,
            Kind::AtsInv => 8,
            _ => 0,
        }
    }
    /// DWs covered by `[addr, addr + len)` (at least 1).
    #[inline(always)]
    pub fn dw_span(&self) -> u32 {
        ((self.addr & 3) as u32 + self.len).div_ceil(4).max(1)
    }
    #[inline(always)]
    pub fn data_credits(&self) -> u64 {
        self.payload_bytes().div_ceil(16) as u64
    }
    /// The tag of piece `i` of a burst (see `tag_span`; a scatter burst's are in its
    /// piece list).
    #[inline]
    pub fn piece_tag(&self, i: u32) -> u16 {
        debug_assert!(
            self.scatter() == NONE,
            "a scatter burst's tags are in its list"
        );
        piece_tag_at(self.tag, self.tag_span, i)
    }

    /// The Byte Count of piece `i` of a burst of completions (the bytes its request
    /// still has to come, this piece's included).
    #[inline]
    pub fn piece_byte_count(&self, i: u32) -> u16 {
        let plen = self.len / self.pieces.max(1) as u32;
        let per = (self.tag_span & !TAGS_DOWN) as u32;
        let k = if per == 0 { i } else { i % per };
        self.byte_count().wrapping_sub((k * plen) as u16)
    }

    /// A scatter burst's piece list (an index into `TlpPool::scatter`; see
    /// `Detail::Scatter`), or NONE.
    #[inline]
    pub fn scatter(&self) -> u32 {
        match self.detail {
            Detail::Scatter(list) => list,
            _ => NONE,
        }
    }

    /// A completion's Byte Count (of a scatter burst's, each piece's: its length; 0
    /// for other kinds).
    #[inline]
    pub fn byte_count(&self) -> u16 {
        match self.detail {
            Detail::Completion { byte_count, .. } => byte_count,
            Detail::Scatter(_) if self.kind.is_completion() => {
                (self.len / self.pieces.max(1) as u32) as u16
            }
            _ => 0,
        }
    }

    /// A completion's status (Successful Completion for other kinds).
    #[inline]
    pub fn status(&self) -> CplStatus {
        match self.detail {
            Detail::Completion { status, .. } => status,
            _ => CplStatus::Sc,
        }
    }

    /// Sets a completion's Byte Count, keeping its status.
    #[inline]
    pub fn set_byte_count(&mut self, byte_count: u16) {
        let status = self.status();
        self.detail = Detail::Completion { byte_count, status };
    }

    /// A message's code (vendor-defined messages: 7Eh or 7Fh; 0 for other kinds).
    #[inline]
    pub fn msg_code(&self) -> u8 {
        match self.detail {
            Detail::Msg(c) => c,
            Detail::Vendor { form, .. } => form.code(),
            Detail::Ltr { .. } => MSG_LTR,
            _ => 0,
        }
    }

    /// An I/O or configuration request's First DW Byte Enables (all four otherwise).
    #[inline]
    pub fn first_be(&self) -> u8 {
        match self.detail {
            Detail::FirstBe(b) => b,
            _ => 0xf,
        }
    }

    /// An ATS invalidation message's ITag (0 for other kinds).
    #[inline]
    pub fn itag(&self) -> u8 {
        match self.detail {
            Detail::Itag(t) => t,
            _ => 0,
        }
    }

    /// An AtomicOp request's operation (FetchAdd for other kinds).
    #[inline]
    pub fn atomic_kind(&self) -> AtomicKind {
        match self.detail {
            Detail::Atomic(k) => k,
            _ => AtomicKind::FetchAdd,
        }
    }

    /// A vendor-defined message's routing subfield (0 for other kinds).
    #[inline]
    pub fn vendor_routing(&self) -> u8 {
        match self.detail {
            Detail::Vendor { form, .. } => form.routing(),
            _ => 0,
        }
    }

    /// The direction whose receive buffer holds it, or NONE.
    #[inline]
    pub fn ingress_or_none(&self) -> u32 {
        if self.ingress == NO_DIR {
            NONE
        } else {
            self.ingress as u32
        }
    }

    /// A vendor-defined message's Vendor ID and vendor data (zeros for other kinds).
    #[inline]
    pub fn vendor_fields(&self) -> (u16, u32) {
        match self.detail {
            Detail::Vendor {
                vendor_id, data, ..
            } => (vendor_id, u32::from_be_bytes(data)),
            _ => (0, 0),
        }
    }

    /// Bytes of the TLP (of all its pieces: each has its own header, digest and
    /// prefix).
    #[inline]
    pub fn tlp_bytes(&self) -> u64 {
        (self.hdr_bytes as u64 + 4 * self.td as u64 + 4 * (self.pasid != NONE) as u64)
            * self.pieces as u64
            + self.payload_bytes() as u64
    }
}

/// `Tlp::lent` of a TLP whose payload is its own.
pub(crate) const NOT_LENT: u64 = u64::MAX;

/// The operand size of an AtomicOp with operation `code` and `payload` bytes.
pub(crate) fn operand_size(code: AtomicKind, payload: u64) -> u64 {
    if code == AtomicKind::Cas {
        payload / 2
    } else {
        payload
    }
}

/// The wire form of AtomicOp request `t` with payload `data`.
pub(crate) fn request_repr<'a>(t: &Tlp, tag: Tag, data: &'a [u8]) -> TlpRepr<'a> {
    let op = match t.atomic_kind() {
        AtomicKind::FetchAdd => MemOp::FetchAdd,
        AtomicKind::Swap => MemOp::Swap,
        _ => MemOp::Cas,
    };
    // Whole DWs, as for a memory write of the payload's length.
    let last = if data.len() > 4 {
        ByteEnables::ALL
    } else {
        ByteEnables::NONE
    };
    let h = MemHeader::new(op, t.requester, tag, t.addr, ByteEnables::ALL, last, 0);
    TlpRepr::with_header(TlpHeader::Mem(h), data)
}

/// The header of an ATS Invalidate Request or Completion for the trace.
pub(crate) fn message_repr<'a>(t: &Tlp, tag: Tag, data: &'a [u8]) -> TlpRepr<'a> {
    let mut f = [0u8; 8];
    f[0..2].copy_from_slice(&t.completer.raw().to_be_bytes());
    let mut routing = MsgRouting::ById;
    let (code, data) = match t.kind {
        Kind::AtsInv => {
            f[7] = t.itag() & 0x1f;
            (MsgCode::AtsInvalidateRequest, data)
        }
        Kind::AtsInvCpl => {
            f[3] = 1; // Completion Count: this one completion
            f[4..8].copy_from_slice(&(1u32 << (t.itag() & 0x1f)).to_be_bytes());
            (MsgCode::AtsInvalidateCompletion, &[][..])
        }
        Kind::PageReq => {
            // Page address, PRG index (11:3), Last (2), Write (1), Read (0).
            let (prg, rw) = match t.detail {
                Detail::PageRequest { prg, rw } => (prg as u64 & 0x1ff, rw as u64 & 3),
                _ => (0, 0),
            };
            f = ((t.addr & !0xfff) | prg << 3 | 1 << 2 | rw).to_be_bytes();
            routing = MsgRouting::ToRc;
            (MsgCode::PageRequest, &[][..])
        }
        _ => {
            // PRG Response: response code (15:12) and PRG index (8:0) in bytes 10-11.
            let v = match t.detail {
                Detail::PrgResponse { prg, code } => (code as u16 & 0xf) << 12 | (prg & 0x1ff),
                _ => 0,
            };
            f[2..4].copy_from_slice(&v.to_be_bytes());
            (MsgCode::PrgResponse, &[][..])
        }
    };
    TlpRepr::with_header(
        TlpHeader::Msg(MsgHeader {
            requester_id: t.requester,
            tag,
            code,
            routing,
            fields: MsgFields(f),
        }),
        data,
    )
}

/// How many prefix DWs (Fmt 100b) `b` starts with.
pub(crate) fn prefix_dws(b: &[u8]) -> usize {
    b.chunks_exact(4).take_while(|c| c[0] >> 5 == 0b100).count()
}

/// The LTR message code.
pub(crate) const MSG_LTR: u8 = 0x10;

/// Message code of PM_PME.
pub(crate) const MSG_PM_PME: u8 = 0x18;

pub(crate) const MSG_PME_TURN_OFF: u8 = 0x19;

pub(crate) const MSG_PME_TO_ACK: u8 = 0x1b;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vendor_form_keeps_type_and_routing_apart() {
        for type1 in [false, true] {
            for routing in 0..8 {
                let f = VdmForm::new(type1, routing);
                assert_eq!(f.code(), if type1 { 0x7f } else { 0x7e });
                assert_eq!(f.routing(), routing);
            }
        }
        // Only r[2:0] is kept.
        assert_eq!(VdmForm::new(false, 0xfb).routing(), 3);
    }

    #[test]
    fn a_vendor_message_carries_its_id_and_data_in_its_detail() {
        let t = Tlp {
            detail: Detail::Vendor {
                form: VdmForm::new(true, 2),
                vendor_id: 0x1ab4,
                data: 0xdead_beef_u32.to_be_bytes(),
            },
            ..Tlp::new(Kind::VendorMsg, Bdf::new(1, 0, 0).unwrap(), 0, 0)
        };
        assert_eq!(t.vendor_fields(), (0x1ab4, 0xdead_beef));
        assert_eq!((t.msg_code(), t.vendor_routing()), (0x7f, 2));
        assert_eq!(t.addr, 0, "the address is not used for vendor data");
        let m = Tlp::new(Kind::MWr, Bdf::new(1, 0, 0).unwrap(), 0x1000, 64);
        assert_eq!(m.vendor_fields(), (0, 0));
        assert_eq!(m.ingress_or_none(), NONE);
        let held = Tlp { ingress: 7, ..m };
        assert_eq!(held.ingress_or_none(), 7);
    }
}
