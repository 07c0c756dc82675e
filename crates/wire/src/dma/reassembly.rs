//! The requester's side of a read: tracking outstanding tags and reassembling completions.
//!
//! A [`Reassembler`] holds one slot per tag, allocated once at construction, so that a
//! DMA engine with hundreds of reads in flight does O(1) work and no allocation per
//! completion: index the slot by tag, check the header fields against the slot, copy
//! the payload bytes into the caller's buffer.
//!
//! ```text
//!   issue(tag 5, addr 0x1054, len 300, dest_offset 4096)
//!
//!   slot[5]: addr 0x1054 · len 300 · received 0 · dest 4096 · completer ?
//!
//!   CplD tag 5, BC 300, LA 0x54, 27 DW ──► dest[4096 .. 4204]   received 108   Partial
//!   CplD tag 5, BC 192, LA 0x40, 32 DW ──► dest[4204 .. 4332]   received 236   Partial
//!   CplD tag 5, BC  64, LA 0x40, 16 DW ──► dest[4332 .. 4396]   received 300   Complete
//!   CplD tag 5, …                      ──► CplError::DuplicateCompletion
//! ```
//!
//! Ordering: the completions of one read arrive in address order (the spec requires it
//! for completions of one request), so each must continue exactly where the previous one
//! stopped: its Byte Count must equal the bytes still missing and its Lower Address the
//! low 7 bits of the next byte's address. Completions of different tags may interleave
//! in any order.
//!
//! Failure modes: every problem is a [`CplError`]. Errors that say "this completion is
//! not for an outstanding read" (unknown tag, duplicate, requester or completer ID
//! mismatch, destination too small) leave the state unchanged. Errors that say "this
//! read failed" (UR, CA, CRS, reserved status, poisoned data, Byte Count, Lower Address
//! or Length inconsistent, too much data) end the read: its slot is finished and later
//! completions for it are duplicates. [`CplError::ends_request`] tells the two apart.
//! Data of a failed completion is never written.

use crate::error::{Error, Result};
use crate::types::{Bdf, CplStatus, Tag};
use core::fmt;

/// The fields of a received completion that reassembly needs, as plain values.
///
/// ```
/// use pcielab_wire::dma::CplInfo;
/// use pcielab_wire::{Bdf, CplStatus, Tag};
/// let data = [0u8; 8];
/// let cpl = CplInfo {
///     requester_id: Bdf::new(1, 0, 0)?,
///     completer_id: Bdf::new(0, 0, 0)?,
///     tag: Tag::new(7)?,
///     status: CplStatus::Sc,
///     bcm: false,
///     byte_count: 8,
///     lower_address: 0x10,
///     length_dw: 2,
///     poisoned: false,
///     payload: &data,
/// };
/// assert_eq!(cpl.payload.len(), cpl.length_dw as usize * 4);
/// # Ok::<(), pcielab_wire::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CplInfo<'a> {
    /// Requester ID (who asked: must be the reassembler's own ID).
    pub requester_id: Bdf,
    /// Completer ID (who answers).
    pub completer_id: Bdf,
    /// The 10-bit tag of the request.
    pub tag: Tag,
    /// Completion status.
    pub status: CplStatus,
    /// Byte Count Modified (set only by PCI-X completers).
    pub bcm: bool,
    /// Byte Count, decoded: 1..=4096 (the wire's 0 means 4096).
    pub byte_count: u16,
    /// Lower Address (7 bits).
    pub lower_address: u8,
    /// Length in DW, decoded (0 for a completion without data, else 1..=1024).
    pub length_dw: u16,
    /// EP: the data is poisoned.
    pub poisoned: bool,
    /// The data payload: `length_dw * 4` bytes, the first byte being the DW that holds
    /// the byte at Lower Address.
    pub payload: &'a [u8],
}

/// What a successful [`Reassembler::accept`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CplOutcome {
    /// Data stored; the read still waits for `remaining` bytes.
    Partial {
        /// The read's tag.
        tag: Tag,
        /// Bytes of the read received so far.
        received: u32,
        /// Bytes still missing.
        remaining: u32,
    },
    /// The last byte of the read arrived; its tag is free for a new read.
    Complete {
        /// The read's tag.
        tag: Tag,
        /// Bytes of the read (0 for a zero-length read).
        len: u32,
        /// Where the read's bytes start in the destination buffer.
        dest_offset: usize,
    },
}

impl CplOutcome {
    /// True when the read is complete.
    pub const fn is_complete(&self) -> bool {
        matches!(self, CplOutcome::Complete { .. })
    }
}

/// Everything that can be wrong with a completion, seen from the requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CplError {
    /// Status Unsupported Request (UR): the completer did not claim the read.
    UnsupportedRequest {
        /// The read's tag.
        tag: Tag,
    },
    /// Status Completer Abort (CA).
    CompleterAbort {
        /// The read's tag.
        tag: Tag,
    },
    /// Status Configuration Request Retry Status (CRS), which memory reads must not get.
    ConfigRetry {
        /// The read's tag.
        tag: Tag,
    },
    /// A reserved status encoding.
    ReservedStatus {
        /// The read's tag.
        tag: Tag,
        /// The 3-bit status.
        raw: u8,
    },
    /// EP set: the data is poisoned.
    Poisoned {
        /// The read's tag.
        tag: Tag,
        /// Offset within the read of the first poisoned byte.
        offset: u32,
    },
    /// Byte Count is not the number of bytes still missing.
    ByteCountMismatch {
        /// The read's tag.
        tag: Tag,
        /// Bytes missing (the Byte Count expected; 1 for a zero-length read).
        expected: u32,
        /// Byte Count found (decoded).
        found: u16,
    },
    /// Lower Address is not the low 7 bits of the next missing byte's address.
    LowerAddressMismatch {
        /// The read's tag.
        tag: Tag,
        /// Lower Address expected.
        expected: u8,
        /// Lower Address found.
        found: u8,
    },
    /// A successful completion without data (Length 0) for a read.
    MissingData {
        /// The read's tag.
        tag: Tag,
    },
    /// The payload slice does not hold `length_dw * 4` bytes (or Length exceeds 1024).
    PayloadLength {
        /// The read's tag.
        tag: Tag,
        /// Length found, in DW.
        length_dw: u16,
        /// Payload bytes given.
        payload_len: usize,
    },
    /// The completion carries more DWs than the bytes still missing need.
    TooMuchData {
        /// The read's tag.
        tag: Tag,
        /// Length found, in DW.
        length_dw: u16,
        /// Most DWs that the missing bytes need from this Lower Address.
        max_dw: u16,
    },
    /// No read with this tag was ever issued (or it was cancelled), or the tag is beyond
    /// the reassembler's capacity: an Unexpected Completion.
    UnexpectedCompletion {
        /// The tag found.
        tag: Tag,
    },
    /// The read with this tag has already finished (completed or failed).
    DuplicateCompletion {
        /// The tag found.
        tag: Tag,
    },
    /// The Requester ID is not the reassembler's.
    RequesterIdMismatch {
        /// The tag found.
        tag: Tag,
        /// Our ID.
        expected: Bdf,
        /// The ID found.
        found: Bdf,
    },
    /// The Completer ID differs from the one expected for the read (given at issue, or
    /// taken from the read's first completion).
    CompleterIdMismatch {
        /// The tag found.
        tag: Tag,
        /// The completer expected.
        expected: Bdf,
        /// The ID found.
        found: Bdf,
    },
    /// A completion that is not the read's last ends off a Read Completion Boundary
    /// (checked only when enabled with [`Reassembler::with_rcb_check`]).
    NotRcbAligned {
        /// The read's tag.
        tag: Tag,
        /// Low 12 bits of the address after the completion's last byte.
        end: u16,
        /// The Read Completion Boundary in bytes.
        rcb: u16,
    },
    /// The destination buffer is shorter than the read's bytes need.
    DestinationTooSmall {
        /// The read's tag.
        tag: Tag,
        /// Bytes the buffer must hold (`dest_offset + len`).
        needed: usize,
        /// Bytes it holds.
        available: usize,
    },
}

impl CplError {
    /// The tag of the completion in question.
    pub const fn tag(&self) -> Tag {
        match *self {
            CplError::UnsupportedRequest { tag }
            | CplError::CompleterAbort { tag }
            | CplError::ConfigRetry { tag }
            | CplError::ReservedStatus { tag, .. }
            | CplError::Poisoned { tag, .. }
            | CplError::ByteCountMismatch { tag, .. }
            | CplError::LowerAddressMismatch { tag, .. }
            | CplError::MissingData { tag }
            | CplError::PayloadLength { tag, .. }
            | CplError::TooMuchData { tag, .. }
            | CplError::UnexpectedCompletion { tag }
            | CplError::DuplicateCompletion { tag }
            | CplError::RequesterIdMismatch { tag, .. }
            | CplError::CompleterIdMismatch { tag, .. }
            | CplError::NotRcbAligned { tag, .. }
            | CplError::DestinationTooSmall { tag, .. } => tag,
        }
    }

    /// True when the error ended the read it belongs to (see the module docs); false when
    /// the completion was rejected and the read is still outstanding (or never was).
    pub const fn ends_request(&self) -> bool {
        !matches!(
            self,
            CplError::UnexpectedCompletion { .. }
                | CplError::DuplicateCompletion { .. }
                | CplError::RequesterIdMismatch { .. }
                | CplError::CompleterIdMismatch { .. }
                | CplError::DestinationTooSmall { .. }
        )
    }
}

impl fmt::Display for CplError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = self.tag();
        match *self {
            CplError::UnsupportedRequest { .. } => {
                write!(f, "tag {tag}: completion status Unsupported Request")
            }
            CplError::CompleterAbort { .. } => {
                write!(f, "tag {tag}: completion status Completer Abort")
            }
            CplError::ConfigRetry { .. } => write!(
                f,
                "tag {tag}: completion status Configuration Request Retry Status"
            ),
            CplError::ReservedStatus { raw, .. } => {
                write!(f, "tag {tag}: reserved completion status {raw:#05b}")
            }
            CplError::Poisoned { offset, .. } => {
                write!(
                    f,
                    "tag {tag}: poisoned data (EP) at byte {offset} of the read"
                )
            }
            CplError::ByteCountMismatch {
                expected, found, ..
            } => write!(
                f,
                "tag {tag}: Byte Count {found}, expected {expected} (bytes still missing)"
            ),
            CplError::LowerAddressMismatch {
                expected, found, ..
            } => write!(
                f,
                "tag {tag}: Lower Address {found:#04x}, expected {expected:#04x}"
            ),
            CplError::MissingData { .. } => {
                write!(f, "tag {tag}: successful completion without data")
            }
            CplError::PayloadLength {
                length_dw,
                payload_len,
                ..
            } => write!(
                f,
                "tag {tag}: Length {length_dw} DW but {payload_len} payload bytes"
            ),
            CplError::TooMuchData {
                length_dw, max_dw, ..
            } => write!(
                f,
                "tag {tag}: Length {length_dw} DW, but the missing bytes need at most {max_dw} DW"
            ),
            CplError::UnexpectedCompletion { .. } => {
                write!(
                    f,
                    "tag {tag}: unexpected completion (no such read outstanding)"
                )
            }
            CplError::DuplicateCompletion { .. } => {
                write!(
                    f,
                    "tag {tag}: completion for a read that has already finished"
                )
            }
            CplError::RequesterIdMismatch {
                expected, found, ..
            } => write!(f, "tag {tag}: Requester ID {found}, expected {expected}"),
            CplError::CompleterIdMismatch {
                expected, found, ..
            } => write!(f, "tag {tag}: Completer ID {found}, expected {expected}"),
            CplError::NotRcbAligned { end, rcb, .. } => write!(
                f,
                "tag {tag}: a completion other than the last ends at {end:#05x}, not on the {rcb}-byte RCB"
            ),
            CplError::DestinationTooSmall {
                needed, available, ..
            } => write!(
                f,
                "tag {tag}: destination buffer holds {available} bytes, the read needs {needed}"
            ),
        }
    }
}

impl std::error::Error for CplError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Active,
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: State,
    completer: Option<Bdf>,
    addr: u64,
    len: u32,
    received: u32,
    dest: usize,
}

const FREE: Slot = Slot {
    state: State::Free,
    completer: None,
    addr: 0,
    len: 0,
    received: 0,
    dest: 0,
};

/// Tracks outstanding memory reads by tag and reassembles their completions into a
/// caller-supplied buffer.
///
/// ```
/// use pcielab_wire::dma::{CplError, CplInfo, CplOutcome, Reassembler};
/// use pcielab_wire::{Bdf, CplStatus, Tag};
///
/// let me = Bdf::new(1, 0, 0)?;
/// let host = Bdf::new(0, 0, 0)?;
/// let tag = Tag::new(5)?;
/// let mut rx = Reassembler::new(me, 256)?;
/// let mut dest = [0u8; 6];
/// rx.issue(tag, 0x1002, 6, 0, None)?; // bytes 0x1002..0x1008: 2 DW
///
/// let payload = [0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7]; // memory at 0x1000
/// let cpl = CplInfo {
///     requester_id: me, completer_id: host, tag, status: CplStatus::Sc, bcm: false,
///     byte_count: 6, lower_address: 0x02, length_dw: 2, poisoned: false, payload: &payload,
/// };
/// let out = rx.accept(&cpl, &mut dest).unwrap();
/// assert_eq!(out, CplOutcome::Complete { tag, len: 6, dest_offset: 0 });
/// assert_eq!(dest, [0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7]);
/// // The same completion again is a duplicate.
/// assert_eq!(rx.accept(&cpl, &mut dest), Err(CplError::DuplicateCompletion { tag }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Reassembler {
    requester_id: Bdf,
    slots: Box<[Slot]>,
    outstanding: usize,
    /// RCB to enforce on completions other than the last, 0 for none.
    rcb: u32,
}

impl Reassembler {
    /// A reassembler for requester `requester_id` using tags `0..capacity`
    /// (1..=1024; 32 for 5-bit tags, 256 for 8-bit tags, 1024 for 10-bit tags).
    /// Allocates its slots here, once.
    pub fn new(requester_id: Bdf, capacity: u16) -> Result<Reassembler> {
        if capacity == 0 || capacity > Tag::MAX + 1 {
            return Err(Error::Invalid {
                what: "reassembler capacity (number of tags)",
                value: capacity as u64,
                allowed: "1..=1024",
            });
        }
        Ok(Reassembler {
            requester_id,
            slots: vec![FREE; capacity as usize].into_boxed_slice(),
            outstanding: 0,
            rcb: 0,
        })
    }

    /// Also checks that every completion but a read's last ends on a multiple of `rcb`
    /// (64 or 128), the completer's Read Completion Boundary; a completion that does not
    /// fails the read with [`CplError::NotRcbAligned`]. Off by default, because a
    /// requester does not always know its completer's RCB.
    ///
    /// ```
    /// use pcielab_wire::dma::{CplError, CplInfo, Reassembler};
    /// use pcielab_wire::{Bdf, CplStatus, Tag};
    /// let me = Bdf::new(1, 0, 0)?;
    /// let tag = Tag::new(0)?;
    /// let mut rx = Reassembler::new(me, 1)?.with_rcb_check(64)?;
    /// rx.issue(tag, 0x1000, 256, 0, None)?;
    /// let data = [0u8; 96];
    /// let cpl = CplInfo {
    ///     requester_id: me, completer_id: Bdf::from_raw(0), tag, status: CplStatus::Sc,
    ///     bcm: false, byte_count: 256, lower_address: 0, length_dw: 24, poisoned: false,
    ///     payload: &data,
    /// };
    /// let err = rx.accept(&cpl, &mut [0u8; 256]).unwrap_err();
    /// assert_eq!(err, CplError::NotRcbAligned { tag, end: 0x060, rcb: 64 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_rcb_check(mut self, rcb: u32) -> Result<Reassembler> {
        self.rcb = super::check_rcb(rcb)?;
        Ok(self)
    }

    /// The Requester ID completions must carry.
    pub fn requester_id(&self) -> Bdf {
        self.requester_id
    }

    /// Number of tags (tags `0..capacity` are usable).
    pub fn capacity(&self) -> u16 {
        self.slots.len() as u16
    }

    /// Number of reads outstanding.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// True when a read with `tag` is outstanding.
    pub fn is_outstanding(&self, tag: Tag) -> bool {
        matches!(self.slots.get(tag.value() as usize), Some(s) if s.state == State::Active)
    }

    /// `(received, len)` of the outstanding read with `tag`.
    pub fn progress(&self, tag: Tag) -> Option<(u32, u32)> {
        match self.slots.get(tag.value() as usize) {
            Some(s) if s.state == State::Active => Some((s.received, s.len)),
            _ => None,
        }
    }

    /// Registers a read of `len` bytes (0 for a zero-length read, else 1..=4096, not
    /// crossing 4 KiB) from `addr` with `tag`; its bytes go to
    /// `dest[dest_offset .. dest_offset + len]` of the buffer later given to
    /// [`accept`](Self::accept). With `completer` set, completions from any other
    /// Completer ID are rejected; without it, the first completion fixes the completer.
    ///
    /// Fails when the tag is beyond the capacity or still outstanding, or the read is
    /// not a valid request.
    pub fn issue(
        &mut self,
        tag: Tag,
        addr: u64,
        len: u32,
        dest_offset: usize,
        completer: Option<Bdf>,
    ) -> Result<()> {
        let Some(slot) = self.slots.get_mut(tag.value() as usize) else {
            return Err(Error::Invalid {
                what: "tag (beyond the reassembler's capacity)",
                value: tag.value() as u64,
                allowed: "tags below the capacity given to Reassembler::new",
            });
        };
        if slot.state == State::Active {
            return Err(Error::Invalid {
                what: "tag (a read with this tag is still outstanding)",
                value: tag.value() as u64,
                allowed: "a tag whose read has finished",
            });
        }
        if len > 0 {
            super::request_shape(addr, len)?;
        } else if addr & 3 != 0 {
            return Err(Error::Invalid {
                what: "zero-length read address",
                value: addr,
                allowed: "a DW-aligned address",
            });
        }
        if dest_offset.checked_add(len as usize).is_none() {
            return Err(Error::Invalid {
                what: "destination offset (offset + length overflows)",
                value: dest_offset as u64,
                allowed: "offset + length <= usize::MAX",
            });
        }
        *slot = Slot {
            state: State::Active,
            completer,
            addr,
            len,
            received: 0,
            dest: dest_offset,
        };
        self.outstanding += 1;
        Ok(())
    }

    /// [`issue`](Self::issue) for a request from [`split_read`](super::split_read):
    /// its bytes go to `dest[chunk.offset ..]`.
    pub fn issue_chunk(
        &mut self,
        tag: Tag,
        chunk: &super::Chunk,
        completer: Option<Bdf>,
    ) -> Result<()> {
        let offset = usize::try_from(chunk.offset).map_err(|_| Error::Invalid {
            what: "chunk offset (does not fit in usize)",
            value: chunk.offset,
            allowed: "offsets addressable on this machine",
        })?;
        self.issue(tag, chunk.addr, chunk.len, offset, completer)
    }

    /// Forgets the outstanding read with `tag` (e.g. after a Completion Timeout); later
    /// completions for it are unexpected. Returns whether one was outstanding.
    pub fn cancel(&mut self, tag: Tag) -> bool {
        match self.slots.get_mut(tag.value() as usize) {
            Some(s) if s.state == State::Active => {
                *s = FREE;
                self.outstanding -= 1;
                true
            }
            _ => false,
        }
    }

    /// Checks one completion and copies its data into `dest` (the buffer the read's
    /// `dest_offset` refers to). O(1) apart from the copy; never allocates or panics.
    pub fn accept(
        &mut self,
        cpl: &CplInfo<'_>,
        dest: &mut [u8],
    ) -> core::result::Result<CplOutcome, CplError> {
        let tag = cpl.tag;
        if cpl.requester_id != self.requester_id {
            return Err(CplError::RequesterIdMismatch {
                tag,
                expected: self.requester_id,
                found: cpl.requester_id,
            });
        }
        let Some(slot) = self.slots.get_mut(tag.value() as usize) else {
            return Err(CplError::UnexpectedCompletion { tag });
        };
        match slot.state {
            State::Free => return Err(CplError::UnexpectedCompletion { tag }),
            State::Done => return Err(CplError::DuplicateCompletion { tag }),
            State::Active => {}
        }
        if let Some(expected) = slot.completer {
            if expected != cpl.completer_id {
                return Err(CplError::CompleterIdMismatch {
                    tag,
                    expected,
                    found: cpl.completer_id,
                });
            }
        }
        let needed = slot.dest + slot.len as usize; // checked in issue
        if dest.len() < needed {
            return Err(CplError::DestinationTooSmall {
                tag,
                needed,
                available: dest.len(),
            });
        }
        let result = Self::take(slot, cpl, dest, self.rcb);
        match result {
            Ok(CplOutcome::Partial { .. }) => slot.completer = Some(cpl.completer_id),
            Ok(CplOutcome::Complete { .. }) => {
                slot.state = State::Done;
                self.outstanding -= 1;
            }
            Err(_) => {
                // Every error found by `take` ends the read.
                slot.state = State::Done;
                self.outstanding -= 1;
            }
        }
        result
    }

    /// The checks that end the read on failure, and the copy.
    #[inline]
    fn take(
        slot: &mut Slot,
        cpl: &CplInfo<'_>,
        dest: &mut [u8],
        rcb: u32,
    ) -> core::result::Result<CplOutcome, CplError> {
        let tag = cpl.tag;
        match cpl.status {
            CplStatus::Sc => {}
            CplStatus::Ur => return Err(CplError::UnsupportedRequest { tag }),
            CplStatus::Ca => return Err(CplError::CompleterAbort { tag }),
            CplStatus::Crs => return Err(CplError::ConfigRetry { tag }),
            CplStatus::Unknown(raw) => return Err(CplError::ReservedStatus { tag, raw }),
        }
        if cpl.poisoned {
            return Err(CplError::Poisoned {
                tag,
                offset: slot.received,
            });
        }
        let remaining = slot.len - slot.received;
        let zero_length = slot.len == 0;
        let expected_bc = if zero_length { 1 } else { remaining };
        let bc = cpl.byte_count as u32;
        let bc_ok = if cpl.bcm {
            // PCI-X completers report only this completion's bytes.
            bc >= 1 && bc <= expected_bc
        } else {
            bc == expected_bc
        };
        if !bc_ok {
            return Err(CplError::ByteCountMismatch {
                tag,
                expected: expected_bc,
                found: cpl.byte_count,
            });
        }
        let next = slot.addr.wrapping_add(slot.received as u64);
        let expected_la = (next & 0x7f) as u8;
        if cpl.lower_address != expected_la {
            return Err(CplError::LowerAddressMismatch {
                tag,
                expected: expected_la,
                found: cpl.lower_address,
            });
        }
        if cpl.length_dw == 0 {
            return Err(CplError::MissingData { tag });
        }
        let wire_len = cpl.length_dw as usize * 4;
        if cpl.length_dw > 1024 || cpl.payload.len() != wire_len {
            return Err(CplError::PayloadLength {
                tag,
                length_dw: cpl.length_dw,
                payload_len: cpl.payload.len(),
            });
        }
        let skip = (expected_la & 3) as usize;
        let max_dw = (skip + remaining as usize).div_ceil(4).max(1);
        if cpl.length_dw as usize > max_dw {
            return Err(CplError::TooMuchData {
                tag,
                length_dw: cpl.length_dw,
                max_dw: max_dw as u16,
            });
        }
        let n = (wire_len - skip).min(remaining as usize);
        let end = next.wrapping_add(n as u64);
        if rcb != 0 && (n as u32) < remaining && end & (rcb as u64 - 1) != 0 {
            return Err(CplError::NotRcbAligned {
                tag,
                end: (end & 0xfff) as u16,
                rcb: rcb as u16,
            });
        }
        let at = slot.dest + slot.received as usize;
        dest[at..at + n].copy_from_slice(&cpl.payload[skip..skip + n]);
        slot.received += n as u32;
        if slot.received == slot.len {
            Ok(CplOutcome::Complete {
                tag,
                len: slot.len,
                dest_offset: slot.dest,
            })
        } else {
            Ok(CplOutcome::Partial {
                tag,
                received: slot.received,
                remaining: slot.len - slot.received,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Bdf = Bdf::from_raw(0x0100);
    const HOST: Bdf = Bdf::from_raw(0x0000);

    fn t(v: u16) -> Tag {
        Tag::new(v).unwrap()
    }

    /// A successful completion; payload must be `length_dw * 4` bytes.
    fn cpl(tag: u16, byte_count: u16, lower_address: u8, payload: &[u8]) -> CplInfo<'_> {
        CplInfo {
            requester_id: ME,
            completer_id: HOST,
            tag: t(tag),
            status: CplStatus::Sc,
            bcm: false,
            byte_count,
            lower_address,
            length_dw: (payload.len() / 4) as u16,
            poisoned: false,
            payload,
        }
    }

    /// A reassembler with one 16-byte read of 0x2006..0x2016 outstanding on tag 1.
    fn one_read() -> Reassembler {
        let mut rx = Reassembler::new(ME, 32).unwrap();
        rx.issue(t(1), 0x2006, 16, 0, None).unwrap();
        rx
    }

    #[test]
    fn split_completion_in_two() {
        // 0x2006..0x2016 covers DWs 0x2004..0x2018 (5 DW). Completer sends 0x2006..0x2010
        // (LA 0x06, 3 DW, BC 16), then 0x2010..0x2016 (LA 0x10, 2 DW, BC 6).
        let mut rx = one_read();
        let mem: Vec<u8> = (0..0x20u8).collect(); // memory at 0x2000
        let mut dest = [0u8; 16];
        let a = rx
            .accept(&cpl(1, 16, 0x06, &mem[4..16]), &mut dest)
            .unwrap();
        assert_eq!(
            a,
            CplOutcome::Partial {
                tag: t(1),
                received: 10,
                remaining: 6
            }
        );
        assert!(rx.is_outstanding(t(1)));
        assert_eq!(rx.progress(t(1)), Some((10, 16)));
        let b = rx
            .accept(&cpl(1, 6, 0x10, &mem[16..24]), &mut dest)
            .unwrap();
        assert_eq!(
            b,
            CplOutcome::Complete {
                tag: t(1),
                len: 16,
                dest_offset: 0
            }
        );
        assert_eq!(
            dest,
            [6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
        );
        assert_eq!(rx.outstanding(), 0);
        assert!(!rx.is_outstanding(t(1)));
    }

    #[test]
    fn status_errors_end_the_read() {
        let cases = [
            (CplStatus::Ur, CplError::UnsupportedRequest { tag: t(1) }),
            (CplStatus::Ca, CplError::CompleterAbort { tag: t(1) }),
            (CplStatus::Crs, CplError::ConfigRetry { tag: t(1) }),
            (
                CplStatus::Unknown(5),
                CplError::ReservedStatus { tag: t(1), raw: 5 },
            ),
        ];
        for (status, want) in cases {
            let mut rx = one_read();
            let mut dest = [0u8; 16];
            let c = CplInfo {
                status,
                length_dw: 0,
                payload: &[],
                ..cpl(1, 16, 0x06, &[])
            };
            assert_eq!(rx.accept(&c, &mut dest), Err(want));
            assert!(want.ends_request());
            assert_eq!(rx.outstanding(), 0);
            assert_eq!(
                rx.accept(&c, &mut dest),
                Err(CplError::DuplicateCompletion { tag: t(1) })
            );
        }
    }

    #[test]
    fn poisoned_data_is_not_written() {
        let mut rx = one_read();
        let mut dest = [0u8; 16];
        let data = [0xffu8; 20];
        let c = CplInfo {
            poisoned: true,
            ..cpl(1, 16, 0x06, &data)
        };
        assert_eq!(
            rx.accept(&c, &mut dest),
            Err(CplError::Poisoned {
                tag: t(1),
                offset: 0
            })
        );
        assert_eq!(dest, [0u8; 16]);
    }

    #[test]
    fn byte_count_must_be_what_is_missing() {
        let mut rx = one_read();
        let mut dest = [0u8; 16];
        let data = [0u8; 20];
        assert_eq!(
            rx.accept(&cpl(1, 15, 0x06, &data), &mut dest),
            Err(CplError::ByteCountMismatch {
                tag: t(1),
                expected: 16,
                found: 15
            })
        );
        // After a first completion of 10 bytes, 6 are missing.
        let mut rx = one_read();
        rx.accept(&cpl(1, 16, 0x06, &data[..12]), &mut dest)
            .unwrap();
        assert_eq!(
            rx.accept(&cpl(1, 16, 0x10, &data[..8]), &mut dest),
            Err(CplError::ByteCountMismatch {
                tag: t(1),
                expected: 6,
                found: 16
            })
        );
    }

    #[test]
    fn bcm_allows_a_partial_byte_count() {
        let mut rx = one_read();
        let mut dest = [0u8; 16];
        let data = [0u8; 12];
        let c = CplInfo {
            bcm: true,
            ..cpl(1, 10, 0x06, &data)
        };
        assert!(matches!(
            rx.accept(&c, &mut dest),
            Ok(CplOutcome::Partial { received: 10, .. })
        ));
        let c = CplInfo {
            bcm: true,
            ..cpl(1, 7, 0x10, &data[..8])
        };
        assert!(matches!(
            rx.accept(&c, &mut dest),
            Err(CplError::ByteCountMismatch {
                expected: 6,
                found: 7,
                ..
            })
        ));
    }

    #[test]
    fn lower_address_must_continue() {
        let mut rx = one_read();
        let mut dest = [0u8; 16];
        let data = [0u8; 20];
        assert_eq!(
            rx.accept(&cpl(1, 16, 0x04, &data), &mut dest),
            Err(CplError::LowerAddressMismatch {
                tag: t(1),
                expected: 0x06,
                found: 0x04
            })
        );
        let mut rx = one_read();
        rx.accept(&cpl(1, 16, 0x06, &data[..12]), &mut dest)
            .unwrap();
        assert_eq!(
            rx.accept(&cpl(1, 6, 0x14, &data[..8]), &mut dest),
            Err(CplError::LowerAddressMismatch {
                tag: t(1),
                expected: 0x10,
                found: 0x14
            })
        );
    }

    #[test]
    fn length_errors() {
        let data = [0u8; 24];
        let mut dest = [0u8; 16];
        // Length 0 with SC.
        let mut rx = one_read();
        assert_eq!(
            rx.accept(&cpl(1, 16, 0x06, &[]), &mut dest),
            Err(CplError::MissingData { tag: t(1) })
        );
        // Payload slice shorter than Length.
        let mut rx = one_read();
        let c = CplInfo {
            length_dw: 5,
            ..cpl(1, 16, 0x06, &data[..16])
        };
        assert_eq!(
            rx.accept(&c, &mut dest),
            Err(CplError::PayloadLength {
                tag: t(1),
                length_dw: 5,
                payload_len: 16
            })
        );
        // 6 DW where 0x2004..0x2018 needs 5.
        let mut rx = one_read();
        assert_eq!(
            rx.accept(&cpl(1, 16, 0x06, &data), &mut dest),
            Err(CplError::TooMuchData {
                tag: t(1),
                length_dw: 6,
                max_dw: 5
            })
        );
        assert_eq!(dest, [0u8; 16]);
    }

    #[test]
    fn stray_completions_leave_the_read_alone() {
        let data = [0u8; 20];
        let mut dest = [0u8; 16];
        let mut rx = one_read();
        // Unknown tag, tag beyond capacity.
        assert_eq!(
            rx.accept(&cpl(2, 16, 0x06, &data), &mut dest),
            Err(CplError::UnexpectedCompletion { tag: t(2) })
        );
        assert_eq!(
            rx.accept(&cpl(1000, 16, 0x06, &data), &mut dest),
            Err(CplError::UnexpectedCompletion { tag: t(1000) })
        );
        // Someone else's completion.
        let other = Bdf::from_raw(0x0200);
        let c = CplInfo {
            requester_id: other,
            ..cpl(1, 16, 0x06, &data)
        };
        assert_eq!(
            rx.accept(&c, &mut dest),
            Err(CplError::RequesterIdMismatch {
                tag: t(1),
                expected: ME,
                found: other
            })
        );
        // Destination too small.
        assert_eq!(
            rx.accept(&cpl(1, 16, 0x06, &data), &mut [0u8; 15]),
            Err(CplError::DestinationTooSmall {
                tag: t(1),
                needed: 16,
                available: 15
            })
        );
        assert!(rx.is_outstanding(t(1)));
        // Completer ID: the first completion fixes it.
        rx.accept(&cpl(1, 16, 0x06, &data[..12]), &mut dest)
            .unwrap();
        let c = CplInfo {
            completer_id: other,
            ..cpl(1, 6, 0x10, &data[..8])
        };
        let e = rx.accept(&c, &mut dest).unwrap_err();
        assert_eq!(
            e,
            CplError::CompleterIdMismatch {
                tag: t(1),
                expected: HOST,
                found: other
            }
        );
        assert!(!e.ends_request());
        // The right completion still completes the read.
        assert!(rx
            .accept(&cpl(1, 6, 0x10, &data[..8]), &mut dest)
            .unwrap()
            .is_complete());
    }

    #[test]
    fn completer_given_at_issue() {
        let mut rx = Reassembler::new(ME, 4).unwrap();
        let dev = Bdf::from_raw(0x0300);
        rx.issue(t(0), 0x1000, 4, 0, Some(dev)).unwrap();
        let data = [1u8, 2, 3, 4];
        let mut dest = [0u8; 4];
        assert!(matches!(
            rx.accept(&cpl(0, 4, 0, &data), &mut dest),
            Err(CplError::CompleterIdMismatch { expected, .. }) if expected == dev
        ));
        let c = CplInfo {
            completer_id: dev,
            ..cpl(0, 4, 0, &data)
        };
        assert!(rx.accept(&c, &mut dest).unwrap().is_complete());
        assert_eq!(dest, data);
    }

    #[test]
    fn zero_length_read() {
        let mut rx = Reassembler::new(ME, 4).unwrap();
        rx.issue(t(3), 0x1234 & !3, 0, 0, None).unwrap();
        let mut dest = [];
        let junk = [9u8; 4];
        assert_eq!(
            rx.accept(&cpl(3, 4, 0x34, &junk), &mut dest),
            Err(CplError::ByteCountMismatch {
                tag: t(3),
                expected: 1,
                found: 4
            })
        );
        rx.issue(t(3), 0x1234, 0, 0, None).unwrap();
        assert_eq!(
            rx.accept(&cpl(3, 1, 0x34, &junk), &mut dest),
            Ok(CplOutcome::Complete {
                tag: t(3),
                len: 0,
                dest_offset: 0
            })
        );
        assert!(rx.issue(t(3), 0x1235, 0, 0, None).is_err());
    }

    #[test]
    fn issue_and_cancel() {
        assert!(Reassembler::new(ME, 0).is_err());
        assert!(Reassembler::new(ME, 1025).is_err());
        let mut rx = Reassembler::new(ME, 1024).unwrap();
        assert_eq!(rx.capacity(), 1024);
        assert_eq!(rx.requester_id(), ME);
        rx.issue(t(1023), 0, 4, 0, None).unwrap();
        assert!(rx.issue(t(1023), 0, 4, 0, None).is_err()); // still outstanding
        assert!(rx.issue(t(5), 0xffe, 4, 0, None).is_err()); // crosses 4 KiB
        assert!(rx.issue(t(5), 0, 4097, 0, None).is_err());
        assert!(rx.issue(t(5), 0, 4, usize::MAX, None).is_err());
        assert_eq!(rx.outstanding(), 1);
        assert!(rx.cancel(t(1023)));
        assert!(!rx.cancel(t(1023)));
        assert_eq!(rx.outstanding(), 0);
        let data = [0u8; 4];
        assert_eq!(
            rx.accept(&cpl(1023, 4, 0, &data), &mut [0u8; 4]),
            Err(CplError::UnexpectedCompletion { tag: t(1023) })
        );
        let mut small = Reassembler::new(ME, 8).unwrap();
        assert!(small.issue(t(8), 0, 4, 0, None).is_err());
    }

    #[test]
    fn rcb_check() {
        let data = [0u8; 128];
        let mut dest = [0u8; 256];
        // 0x2000..0x2100 with RCB 128: a first completion of 64 bytes breaks it …
        let mut rx = Reassembler::new(ME, 4)
            .unwrap()
            .with_rcb_check(128)
            .unwrap();
        rx.issue(t(0), 0x2000, 256, 0, None).unwrap();
        let e = rx
            .accept(&cpl(0, 256, 0, &data[..64]), &mut dest)
            .unwrap_err();
        assert_eq!(
            e,
            CplError::NotRcbAligned {
                tag: t(0),
                end: 0x040,
                rcb: 128
            }
        );
        assert!(e.ends_request());
        // … one of 128 bytes does not, and the last may end anywhere.
        rx.issue(t(1), 0x2000, 200, 0, None).unwrap();
        rx.accept(&cpl(1, 200, 0, &data), &mut dest).unwrap();
        assert!(rx
            .accept(&cpl(1, 72, 0, &data[..72]), &mut dest)
            .unwrap()
            .is_complete());
        // Without the check the 64-byte completion is fine.
        let mut rx = Reassembler::new(ME, 4).unwrap();
        rx.issue(t(0), 0x2000, 256, 0, None).unwrap();
        rx.accept(&cpl(0, 256, 0, &data[..64]), &mut dest).unwrap();
        assert!(Reassembler::new(ME, 4).unwrap().with_rcb_check(32).is_err());
    }

    #[test]
    fn errors_display_the_tag() {
        let e = CplError::LowerAddressMismatch {
            tag: t(9),
            expected: 0x10,
            found: 0x14,
        };
        assert_eq!(e.to_string(), "tag 9: Lower Address 0x14, expected 0x10");
        assert_eq!(e.tag(), t(9));
    }
}
