//! The event queue's form of an [`Ev`]: two words.
//!
//! The handlers build events as the [`Ev`] enum; the queue stores them as a
//! [`PackedEv`] of two `u64`s, computed in registers by [`From<Ev>`] (inlined where
//! the event is built, so the variant is known and the packing folds into a few
//! shifts) and written to the queue as whole words. Built as an enum in memory, an
//! event was written field by field (bytes, halves, words) and then copied as 16-byte
//! blocks, and a load that spans several recent narrower stores cannot be forwarded
//! from them: the CPU waits for the stores to retire. Two words are also half the
//! enum's 32 bytes in every queue slot.
//!
//! Layout: `a` = tag (bits 0–7) | flags (8–15) | direction (16–31) | `x` (32–63);
//! `b` = a second operand.

use super::event::{Dllp, Ev, Wire, WireItem};
use pcielab_wire::dllp::FcKind;

/// An [`Ev`] as the event queue stores it (see the module documentation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PackedEv {
    a: u64,
    b: u64,
}

const TX_DONE: u64 = 0;
const ARRIVE: u64 = 1;
const ACK_TIMER: u64 = 2;
const FC_TIMER: u64 = 3;
const REPLAY_TIMER: u64 = 4;
const FC_REFRESH: u64 = 5;
const FORWARD: u64 = 6;
const CONSUME: u64 = 7;
const EP_TIMER: u64 = 8;
const DMA_TIMEOUT: u64 = 9;
const HOST_TIMEOUT: u64 = 10;
const HOST_SEND: u64 = 11;
const EP_COMPLETE: u64 = 12;
const PME_RESEND: u64 = 13;
const LINK_TRAINED: u64 = 14;
const ETH_FRAME: u64 = 15;

// Arrive flags: the wire item's kind (bits 0–1), its bad CRC (bit 2), the TxDone it
// stands for (bit 3), an FC DLLP's kind (bits 4–5).
const W_TLP: u64 = 0;
const W_ACK: u64 = 1;
const W_NAK: u64 = 2;
const W_FC: u64 = 3;
const F_BAD: u64 = 1 << 2;
const F_TX_DONE: u64 = 1 << 3;

#[inline(always)]
fn word(tag: u64, flags: u64, d: u16, x: u32) -> u64 {
    tag | flags << 8 | (d as u64) << 16 | (x as u64) << 32
}

#[inline(always)]
fn fc_kind_bits(k: FcKind) -> u64 {
    match k {
        FcKind::InitFc1 => 0,
        FcKind::InitFc2 => 1,
        FcKind::UpdateFc => 2,
    }
}

impl From<Ev> for PackedEv {
    #[inline(always)]
    fn from(e: Ev) -> PackedEv {
        let (a, b) = match e {
            Ev::TxDone(d) => (word(TX_DONE, 0, d, 0), 0),
            Ev::Arrive(d, WireItem(w, tx_done)) => {
                let td = if tx_done { F_TX_DONE } else { 0 };
                match w {
                    Wire::Tlp { id, seq, bad } => {
                        let f = W_TLP | td | if bad { F_BAD } else { 0 };
                        (word(ARRIVE, f, d, id), seq as u64)
                    }
                    Wire::Dllp { d: dl, bad } => {
                        let bf = td | if bad { F_BAD } else { 0 };
                        match dl {
                            Dllp::Ack(s) => (word(ARRIVE, W_ACK | bf, d, 0), s as u64),
                            Dllp::Nak(s) => (word(ARRIVE, W_NAK | bf, d, 0), s as u64),
                            Dllp::Fc {
                                kind,
                                class,
                                hdr,
                                data,
                            } => (
                                word(ARRIVE, W_FC | bf | fc_kind_bits(kind) << 4, d, hdr),
                                data as u64 | (class as u64) << 32,
                            ),
                        }
                    }
                }
            }
            Ev::AckTimer(d) => (word(ACK_TIMER, 0, d, 0), 0),
            Ev::FcTimer(d, c) => (word(FC_TIMER, 0, d, c as u32), 0),
            Ev::ReplayTimer(d) => (word(REPLAY_TIMER, 0, d, 0), 0),
            Ev::FcRefresh(d) => (word(FC_REFRESH, 0, d, 0), 0),
            Ev::Forward(id) => (word(FORWARD, 0, 0, id), 0),
            Ev::Consume(id) => (word(CONSUME, 0, 0, id), 0),
            Ev::EpTimer(n, tok) => (word(EP_TIMER, 0, 0, n), tok),
            Ev::EthFrame(slot) => (word(ETH_FRAME, 0, 0, slot), 0),
            Ev::DmaTimeout(n, g) => (word(DMA_TIMEOUT, 0, 0, n), g as u64),
            Ev::HostTimeout(tag) => (word(HOST_TIMEOUT, 0, tag, 0), 0),
            Ev::HostSend(id) => (word(HOST_SEND, 0, 0, id), 0),
            Ev::EpComplete(x) => (word(EP_COMPLETE, 0, 0, x), 0),
            Ev::PmeResend(f) => (word(PME_RESEND, 0, 0, f), 0),
            Ev::LinkTrained(d, gen) => (word(LINK_TRAINED, 0, d, gen), 0),
        };
        PackedEv { a, b }
    }
}

/// Counters of [`PackedEv::kind_slot`].
pub(crate) const KIND_SLOTS: usize = 64;
// A kind slot holds the tag in 4 bits.
const _: () = assert!(ETH_FRAME < 16 && LINK_TRAINED < 16 && PME_RESEND < 16);

/// The kinds of events [`FabricSim::events_by_kind`](super::FabricSim::events_by_kind)
/// counts, in this order: each [`Ev`] variant, arrivals of TLPs and of DLLPs apart.
pub const EVENT_KINDS: [&str; 17] = [
    "tx-done",
    "arrive-tlp",
    "ack-timer",
    "fc-timer",
    "replay-timer",
    "fc-refresh",
    "forward",
    "consume",
    "device-timer",
    "dma-timeout",
    "host-timeout",
    "host-send",
    "device-complete",
    "pme-resend",
    "link-trained",
    "ethernet-frame",
    "arrive-dllp",
];

impl PackedEv {
    /// Where [`Engine`](super::Engine) counts the event: its tag (bits 0–3) and, for an
    /// arrival, the wire item's kind (bits 4–5); below [`KIND_SLOTS`], without a branch.
    #[inline(always)]
    pub(crate) fn kind_slot(&self) -> usize {
        ((self.a & 0xf) | ((self.a >> 4) & 0x30)) as usize
    }

    /// The [`EVENT_KINDS`] index of a [`kind_slot`](Self::kind_slot).
    pub(crate) fn slot_kind(slot: usize) -> usize {
        let (tag, wire) = (slot as u64 & 0xf, (slot as u64 >> 4) & 3);
        if tag == ARRIVE && wire != W_TLP {
            16
        } else {
            tag as usize
        }
    }

    /// The event.
    #[inline(always)]
    pub fn unpack(self) -> Ev {
        let (a, b) = (self.a, self.b);
        let flags = (a >> 8) & 0xff;
        let d = (a >> 16) as u16;
        let x = (a >> 32) as u32;
        match a & 0xff {
            TX_DONE => Ev::TxDone(d),
            ARRIVE => {
                let bad = flags & F_BAD != 0;
                let w = match flags & 3 {
                    W_TLP => Wire::Tlp {
                        id: x,
                        seq: b as u32,
                        bad,
                    },
                    W_ACK => Wire::Dllp {
                        d: Dllp::Ack(b as u32),
                        bad,
                    },
                    W_NAK => Wire::Dllp {
                        d: Dllp::Nak(b as u32),
                        bad,
                    },
                    _ => Wire::Dllp {
                        d: Dllp::Fc {
                            kind: match (flags >> 4) & 3 {
                                0 => FcKind::InitFc1,
                                1 => FcKind::InitFc2,
                                _ => FcKind::UpdateFc,
                            },
                            class: (b >> 32) as u8,
                            hdr: x,
                            data: b as u32,
                        },
                        bad,
                    },
                };
                Ev::Arrive(d, WireItem(w, flags & F_TX_DONE != 0))
            }
            ACK_TIMER => Ev::AckTimer(d),
            FC_TIMER => Ev::FcTimer(d, x as u8),
            REPLAY_TIMER => Ev::ReplayTimer(d),
            FC_REFRESH => Ev::FcRefresh(d),
            FORWARD => Ev::Forward(x),
            CONSUME => Ev::Consume(x),
            EP_TIMER => Ev::EpTimer(x, b),
            ETH_FRAME => Ev::EthFrame(x),
            DMA_TIMEOUT => Ev::DmaTimeout(x, b as u32),
            HOST_TIMEOUT => Ev::HostTimeout(d),
            HOST_SEND => Ev::HostSend(x),
            PME_RESEND => Ev::PmeResend(x),
            LINK_TRAINED => Ev::LinkTrained(d, x),
            // EP_COMPLETE (a packed event is only ever built by `From<Ev>`, so no other
            // tag occurs).
            _ => Ev::EpComplete(x),
        }
    }
}

impl core::fmt::Debug for PackedEv {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.unpack().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn wire() -> impl Strategy<Value = Wire> {
        let kind = prop_oneof![
            Just(FcKind::InitFc1),
            Just(FcKind::InitFc2),
            Just(FcKind::UpdateFc)
        ];
        prop_oneof![
            (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(id, seq, bad)| Wire::Tlp {
                id,
                seq,
                bad
            }),
            (any::<u32>(), any::<bool>()).prop_map(|(s, bad)| Wire::Dllp {
                d: Dllp::Ack(s),
                bad
            }),
            (any::<u32>(), any::<bool>()).prop_map(|(s, bad)| Wire::Dllp {
                d: Dllp::Nak(s),
                bad
            }),
            (kind, any::<u8>(), any::<u32>(), any::<u32>(), any::<bool>()).prop_map(
                |(kind, class, hdr, data, bad)| Wire::Dllp {
                    d: Dllp::Fc {
                        kind,
                        class,
                        hdr,
                        data
                    },
                    bad
                }
            ),
        ]
    }

    fn event() -> impl Strategy<Value = Ev> {
        let d = any::<u16>();
        let x = any::<u32>();
        prop_oneof![
            d.prop_map(Ev::TxDone),
            (d, wire(), any::<bool>()).prop_map(|(d, w, t)| Ev::Arrive(d, WireItem(w, t))),
            d.prop_map(Ev::AckTimer),
            (d, any::<u8>()).prop_map(|(d, c)| Ev::FcTimer(d, c)),
            d.prop_map(Ev::ReplayTimer),
            d.prop_map(Ev::FcRefresh),
            x.prop_map(Ev::Forward),
            x.prop_map(Ev::Consume),
            (x, any::<u64>()).prop_map(|(n, t)| Ev::EpTimer(n, t)),
            x.prop_map(Ev::EthFrame),
            (x, any::<u32>()).prop_map(|(n, g)| Ev::DmaTimeout(n, g)),
            d.prop_map(Ev::HostTimeout),
            x.prop_map(Ev::HostSend),
            x.prop_map(Ev::EpComplete),
            x.prop_map(Ev::PmeResend),
            (d, any::<u32>()).prop_map(|(d, g)| Ev::LinkTrained(d, g)),
        ]
    }

    /// The kind an event is counted as, written out from the variant.
    fn kind_name(e: Ev) -> &'static str {
        match e {
            Ev::TxDone(_) => "tx-done",
            Ev::Arrive(_, WireItem(Wire::Tlp { .. }, _)) => "arrive-tlp",
            Ev::Arrive(_, WireItem(Wire::Dllp { .. }, _)) => "arrive-dllp",
            Ev::AckTimer(_) => "ack-timer",
            Ev::FcTimer(..) => "fc-timer",
            Ev::ReplayTimer(_) => "replay-timer",
            Ev::FcRefresh(_) => "fc-refresh",
            Ev::Forward(_) => "forward",
            Ev::Consume(_) => "consume",
            Ev::EpTimer(..) => "device-timer",
            Ev::EthFrame(_) => "ethernet-frame",
            Ev::DmaTimeout(..) => "dma-timeout",
            Ev::HostTimeout(_) => "host-timeout",
            Ev::HostSend(_) => "host-send",
            Ev::EpComplete(_) => "device-complete",
            Ev::PmeResend(_) => "pme-resend",
            Ev::LinkTrained(..) => "link-trained",
        }
    }

    proptest! {
        /// Every event comes back unchanged, whatever its operands.
        #[test]
        fn packing_round_trips(e in event()) {
            prop_assert_eq!(PackedEv::from(e).unpack(), e);
        }

        /// Every event is counted as its own kind.
        #[test]
        fn events_count_as_their_kind(e in event()) {
            let slot = PackedEv::from(e).kind_slot();
            prop_assert!(slot < KIND_SLOTS);
            prop_assert_eq!(EVENT_KINDS[PackedEv::slot_kind(slot)], kind_name(e));
        }
    }

    #[test]
    fn two_words() {
        assert_eq!(core::mem::size_of::<PackedEv>(), 16);
    }
}
