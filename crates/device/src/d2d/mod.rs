//! Device-to-device streaming (seed 004, D2D): a producer streams data straight into a
//! consumer's BAR with peer-to-peer memory writes, under a credit protocol, with the
//! CPU only setting the stream up.
//!
//! Two devices:
//!
//! * [`D2dSsd`] (`kind = "d2d-ssd"`): the sender, with the paper's D2D Tx FSM (Fig. 4:
//!   Init, Parse, Send, Wait, Check) and a media model (latency and bandwidth) in
//!   front of it;
//! * [`D2dNic`] (`kind = "d2d-nic"`): the receiver, with the D2D Rx FSM (Fig. 5:
//!   Fetch, Calc, Send, Check), its Rx Queue behind a window of its BAR, and the
//!   UDP/IP offload engine ([`uoe`]) that wraps the streamed bytes in
//!   Ethernet/IPv4/UDP (and RTP) headers and sends the frames out of its MAC at line
//!   rate.
//!
//! # Registers (BAR 0, little endian, 4- or 8-byte accesses)
//!
//! Both devices have the same layout; a register a device does not use reads 0 and
//! ignores writes.
//!
//! ```text
//!   0x000  u32  ID           0x4432_4431 ("1D2D")
//!   0x004  u32  STREAMS      streams the device has (read only)
//!   0x008  u64  ERRORS       errors of every stream (read only)
//!   stream s, 48 bytes at 0x100 + 0x30 × s (Table I of the paper):
//!   +0x00  u64  TX_ADDR      bits 63:3 the address the sender writes the stream to;
//!                            writing bit 0 resets the stream and (re)starts it with
//!                            the registers as they are; bit 1 empties the queues
//!                            (the receiver's Rx Queue, its bytes counted as
//!                            refused; the sender keeps none); bit 2 pauses the
//!                            sender (the paper reserves it for pausing), a write
//!                            without it resumes
//!   +0x08  u64  RX_ADDR      (receiver, read only) the bus address of the stream's Rx
//!                            Queue window: what the driver writes into the sender's
//!                            TX_ADDR
//!   +0x10  u64  RATE_GRAN    bits 31:0 data rate, bytes/s (0: no limit);
//!                            bits 63:32 granularity: bytes per chunk (one credit)
//!   +0x18  u64  CREDITS      bits 31:0 the credit limit: sender, the chunks it may
//!                            have sent in all since the stream's start (a credit grant
//!                            writes a larger limit); receiver, the sender's first
//!                            limit, from which its grants count (0: its Rx base
//!                            credits); bits 63:32 Rx base credits (receiver, read
//!                            only: Rx Queue bytes / chunk)
//!   +0x20  u64  BYTE_COUNT   bytes the stream carries (D2D Transmit Byte Count)
//!   +0x28  u64  CREDIT_ADDR  (receiver) where its Rx FSM writes credit grants (the
//!                            sender's CREDITS register); 0: the host grants them
//!   stream s status, 64 bytes at 0x400 + 0x40 × s (read only):
//!   +0x00  u32  STATE        a [`TxState`] (sender) or [`RxState`] (receiver)
//!   +0x04  u32  ERROR        the stream's first error, a [`StreamError`] code (0: none)
//!   +0x08  u64  BYTES        sender: bytes written; receiver: bytes taken into the queue
//!   +0x10  u64  UNITS        sender: chunks written; receiver: frames sent
//!   +0x18  u64  STALLS       sender: times it waited for credits
//!   +0x20  u64  DROPPED      receiver: bytes of writes it refused (counted, never lost
//!                            unseen); sender: failed writes
//!   +0x28  u64  QUEUED       receiver: bytes in the Rx Queue
//!   +0x30  u64  CREDITS_OUT  sender: chunks sent (credits used); receiver: credit
//!                            limit granted so far (base credits + chunks drained)
//!   +0x38  u64  SENT         receiver: payload bytes sent in frames
//!   stream s UDP/IP offload (receiver), 128 bytes at 0x800 + 0x80 × s (Table II):
//!   +0x00 MAC_DST  +0x08 MAC_SRC  +0x10 VLAN  +0x18 IP_HDR1  +0x20 IP_HDR2
//!   +0x28 IP_HDR3  +0x30 UDP_HDR  +0x38 RTP_HDR1  +0x40 RTP_HDR2  +0x48 UOE_CTRL
//!   (see [`uoe`]: each register holds header bytes in wire order)
//!   stream s Rx Queue window (receiver): 64 KiB at 0x10000 + 0x10000 × s
//! ```
//!
//! # The credit protocol
//!
//! A credit is one chunk (RATE_GRAN bits 63:32) of Rx Queue space. The receiver's Rx
//! base credits are its queue size over the chunk. The sender sends a chunk only while
//! the chunks it has sent are below its credit limit; as the receiver's frames leave
//! and whole chunks of queue space come free, the limit grows: the receiver's Rx FSM
//! writes the new limit to CREDIT_ADDR (a peer-to-peer write to the sender's CREDITS),
//! or, with CREDIT_ADDR 0, raises its MSI-X vector `s` and the host copies its
//! CREDITS_OUT to the sender's CREDITS. Limits are running totals, so a grant that
//! arrives twice or late does no harm. The sender writes chunk bytes at TX_ADDR plus
//! the stream offset modulo the 64 KiB window; the receiver takes a write only at the
//! offset it expects next, into a queue with room: anything else is refused and
//! counted ([`StreamError`]).

mod nic;
mod ssd;
pub mod uoe;

pub use nic::{D2dNic, D2dNicConfig, FrameTap, TappedFrame};
pub use ssd::{D2dSsd, D2dSsdConfig};

use crate::DeviceTiming;

/// The value of the ID register.
pub const ID: u32 = 0x4432_4431;
/// Most streams a device has.
pub const MAX_STREAMS: u8 = 16;
/// Bytes of the register BAR of a sender.
pub const SSD_BAR_SIZE: u64 = 16 * 1024;
/// Bytes of the register BAR of a receiver (registers, then one Rx Queue window per
/// stream).
pub const NIC_BAR_SIZE: u64 = 2 * 1024 * 1024;
/// Bytes of one stream's Rx Queue window.
pub const WINDOW: u64 = 0x1_0000;

/// Register offsets.
pub mod reg {
    /// ID register.
    pub const ID: u64 = 0x000;
    /// Streams (read only).
    pub const STREAMS: u64 = 0x004;
    /// Errors of all streams (read only).
    pub const ERRORS: u64 = 0x008;
    /// First stream control block.
    pub const STREAM_BASE: u64 = 0x100;
    /// Bytes per stream control block (the paper's 48).
    pub const STREAM_STRIDE: u64 = 0x30;
    /// In a stream block: Tx Address and control bits.
    pub const TX_ADDR: u64 = 0x00;
    /// Rx Address (receiver, read only).
    pub const RX_ADDR: u64 = 0x08;
    /// Data rate and granularity.
    pub const RATE_GRAN: u64 = 0x10;
    /// Tx credit limit and Rx base credits.
    pub const CREDITS: u64 = 0x18;
    /// D2D Transmit Byte Count.
    pub const BYTE_COUNT: u64 = 0x20;
    /// Tx Credit Update Address.
    pub const CREDIT_ADDR: u64 = 0x28;
    /// First status block.
    pub const STATUS_BASE: u64 = 0x400;
    /// Bytes per status block.
    pub const STATUS_STRIDE: u64 = 0x40;
    /// In a status block: state.
    pub const STATE: u64 = 0x00;
    /// First error code.
    pub const ERROR: u64 = 0x04;
    /// Bytes written (sender) or taken (receiver).
    pub const BYTES: u64 = 0x08;
    /// Chunks (sender) or frames (receiver).
    pub const UNITS: u64 = 0x10;
    /// Credit stalls (sender).
    pub const STALLS: u64 = 0x18;
    /// Refused bytes (receiver) or failed writes (sender).
    pub const DROPPED: u64 = 0x20;
    /// Bytes in the Rx Queue (receiver).
    pub const QUEUED: u64 = 0x28;
    /// Credits used (sender) or the limit granted (receiver).
    pub const CREDITS_OUT: u64 = 0x30;
    /// Payload bytes sent in frames (receiver).
    pub const SENT: u64 = 0x38;
    /// First UDP/IP offload block.
    pub const UOE_BASE: u64 = 0x800;
    /// Bytes per UDP/IP offload block.
    pub const UOE_STRIDE: u64 = 0x80;
    /// First Rx Queue window.
    pub const RXQ_BASE: u64 = 0x1_0000;

    /// Offset of register `r` of stream `s`'s control block.
    pub const fn stream(s: u8, r: u64) -> u64 {
        STREAM_BASE + STREAM_STRIDE * s as u64 + r
    }
    /// Offset of register `r` of stream `s`'s status block.
    pub const fn status(s: u8, r: u64) -> u64 {
        STATUS_BASE + STATUS_STRIDE * s as u64 + r
    }
    /// Offset of register `r` of stream `s`'s offload block.
    pub const fn uoe(s: u8, r: u64) -> u64 {
        UOE_BASE + UOE_STRIDE * s as u64 + r
    }
    /// Offset of stream `s`'s Rx Queue window.
    pub const fn rxq(s: u8) -> u64 {
        RXQ_BASE + super::WINDOW * s as u64
    }
}

/// TX_ADDR control bit: reset the stream and start it.
pub const CTL_START: u64 = 1;
/// TX_ADDR control bit: empty the queues.
pub const CTL_CLEAR: u64 = 2;
/// TX_ADDR control bit: pause.
pub const CTL_PAUSE: u64 = 4;

/// The states of the sender's D2D Tx FSM (Fig. 4), as STATE reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum TxState {
    /// No stream (after reset, or finished: see BYTES).
    Idle = 0,
    /// The stream's registers are being checked.
    Init = 1,
    /// The task list is being built (the first chunk's media read).
    Parse = 2,
    /// A chunk is being read from the media and written to the receiver.
    Send = 3,
    /// Waiting for the next chunk's time slot (Granularity at the Data Rate).
    Wait = 4,
    /// Waiting for credits.
    Stalled = 5,
    /// Paused (TX_ADDR bit 2).
    Paused = 6,
    /// Every byte of BYTE_COUNT written.
    Done = 7,
    /// Stopped by an error (ERROR says which).
    Error = 8,
}

/// The states of the receiver's D2D Rx FSM (Fig. 5), as STATE reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum RxState {
    /// Not started (writes to its window are refused, counted).
    Idle = 0,
    /// Waiting for a frame's worth of data in the Rx Queue.
    Fetch = 1,
    /// A frame is being formed by the UDP/IP offload engine.
    Calc = 2,
    /// The MAC is sending a frame.
    Send = 3,
    /// Every byte of BYTE_COUNT sent in frames.
    Done = 4,
    /// Stopped by an error (ERROR says which).
    Error = 5,
}

/// Why a stream stopped or refused data (ERROR register codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum StreamError {
    /// Started with no TX_ADDR, a chunk of 0 bytes or larger than the window, or no
    /// BYTE_COUNT.
    BadConfig = 1,
    /// A write reached a stream that is not running (the receiver was reset, or never
    /// started).
    NotRunning = 2,
    /// A write's offset is not the one the receiver expects next (lost or reordered
    /// data).
    OutOfOrder = 3,
    /// A write found no room in the Rx Queue (a sender past its credits).
    Overflow = 4,
    /// The offload registers do not describe IPv4 (IHL 5) over UDP.
    BadHeaders = 5,
    /// A DMA (a chunk write or a credit grant) failed.
    DmaFailed = 6,
    /// More bytes arrived than BYTE_COUNT.
    TooMuch = 7,
}

impl StreamError {
    /// The error of an ERROR register value.
    pub fn from_code(code: u32) -> Option<StreamError> {
        use StreamError::*;
        [
            BadConfig, NotRunning, OutOfOrder, Overflow, BadHeaders, DmaFailed, TooMuch,
        ]
        .into_iter()
        .find(|e| *e as u32 == code)
    }
}

/// The byte at `offset` of the data that media seed `seed` holds: what a sender
/// streams, so that a receiver's frames can be checked byte for byte. A 64-bit mix of
/// the seed and the 8-byte word's index, so that a lost, repeated or moved run of
/// bytes shows.
pub fn media_byte(seed: u64, offset: u64) -> u8 {
    let word = mix(seed ^ mix(offset / 8));
    (word >> (8 * (offset % 8))) as u8
}

/// Fills `buf` with the media bytes from `offset` ([`media_byte`]).
pub fn media_fill(seed: u64, offset: u64, buf: &mut [u8]) {
    let mut i = 0usize;
    while i < buf.len() {
        let at = offset + i as u64;
        let word = mix(seed ^ mix(at / 8)).to_le_bytes();
        let k = (at % 8) as usize;
        let n = (8 - k).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[k..k + n]);
        i += n;
    }
}

/// A 64-bit finaliser (the SplitMix64 mixing function, a well-known public-domain
/// construction).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The PCIe datapath both devices of the paper's prototype have (§IV-C): 125 MHz,
/// 64 bits (the Xilinx PCIe interface), `tlp_cycles` cycles per TLP besides data.
pub fn pcie_timing(clock_mhz: u32, datapath_bits: u32, tlp_cycles: u32) -> DeviceTiming {
    DeviceTiming {
        clock_mhz,
        datapath_bits,
        read_cycles: tlp_cycles,
        write_cycles: tlp_cycles,
        completion_cycles: tlp_cycles,
        request_cycles: tlp_cycles,
    }
}

/// Cycles per TLP besides its data, derived from the paper's one measured write
/// (§IV-C: 392 ns per 256-byte write at 125 MHz = 49 cycles, of which 256 B on the
/// 64-bit datapath are 32): 17. A calibration, not an independent input.
pub const PAPER_TLP_CYCLES: u32 = 17;

/// Reads `len` (1..=8) bytes at `off` from a register file answered 8 bytes at a
/// time by `get` (an aligned offset → its value).
pub(crate) fn read_bytes(off: u64, buf: &mut [u8], mut get: impl FnMut(u64) -> u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        let at = off + i as u64;
        *b = (get(at & !7) >> (8 * (at & 7))) as u8;
    }
}

/// Splits a write of `data` at `off` into (aligned offset, new value, byte mask)
/// per 8-byte register, merging with the old values from `get`.
pub(crate) fn write_regs(
    off: u64,
    data: &[u8],
    mut get: impl FnMut(u64) -> u64,
    mut set: impl FnMut(u64, u64, u64),
) {
    let mut i = 0usize;
    while i < data.len() {
        let at = off + i as u64;
        let base = at & !7;
        let mut v = get(base);
        let mut mask = 0u64;
        while i < data.len() && (off + i as u64) & !7 == base {
            let sh = 8 * ((off + i as u64) & 7);
            v = (v & !(0xff << sh)) | (data[i] as u64) << sh;
            mask |= 0xff << sh;
            i += 1;
        }
        set(base, v, mask);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_fill_matches_media_byte() {
        for off in [0u64, 3, 8, 13, 4093] {
            let mut b = vec![0u8; 37];
            media_fill(7, off, &mut b);
            for (i, &x) in b.iter().enumerate() {
                assert_eq!(x, media_byte(7, off + i as u64));
            }
        }
        assert_ne!(media_byte(1, 0), media_byte(2, 0));
    }

    #[test]
    fn register_bytes_merge() {
        let mut regs = [0u64; 4];
        write_regs(
            4,
            &[1, 2, 3, 4, 5, 6],
            |o| regs[(o / 8) as usize],
            |_, _, _| {},
        );
        let mut seen = Vec::new();
        let r = regs;
        write_regs(
            4,
            &[1, 2, 3, 4, 5, 6],
            |o| r[(o / 8) as usize],
            |o, v, m| seen.push((o, v, m)),
        );
        assert_eq!(
            seen,
            [
                (0, 0x0403_0201_0000_0000, 0xffff_ffff_0000_0000),
                (8, 0x0605, 0xffff)
            ]
        );
        regs[1] = 0x1122_3344_5566_7788;
        let mut b = [0u8; 3];
        read_bytes(7, &mut b, |o| regs[(o / 8) as usize]);
        assert_eq!(b, [0, 0x88, 0x77]);
    }
}
