//! Shared proptest strategies: owned TLPs of every kind.

use pcielab_wire::tlp::*;
use pcielab_wire::*;
use proptest::prelude::*;

/// A TLP whose payload is owned by the strategy's value.
#[derive(Debug, Clone)]
pub struct OwnedTlp {
    pub head: TlpRepr<'static>,
    pub payload: Vec<u8>,
}

impl OwnedTlp {
    pub fn repr(&self) -> TlpRepr<'_> {
        TlpRepr {
            payload: &self.payload,
            ..self.head
        }
    }
}

fn bdf() -> impl Strategy<Value = Bdf> {
    any::<u16>().prop_map(Bdf::from_raw)
}
fn tag() -> impl Strategy<Value = Tag> {
    (0u16..1024).prop_map(Tag::from_bits_truncate)
}
fn be() -> impl Strategy<Value = ByteEnables> {
    (0u8..16).prop_map(ByteEnables::from_bits_truncate)
}
fn payload(max_dw: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (1..=max_dw).prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n * 4)),
        1 => Just(vec![0xa5; 4096]),
    ]
}

fn header_and_payload() -> impl Strategy<Value = (TlpHeader, Vec<u8>)> {
    let mem = (
        0u8..6,
        bdf(),
        tag(),
        be(),
        be(),
        any::<u64>(),
        any::<bool>(),
        0u8..4,
        1u16..=1024,
    )
        .prop_flat_map(|(op, rid, tag, f, l, addr, four, ph, rlen)| {
            let op = [
                MemOp::Read,
                MemOp::ReadLocked,
                MemOp::Write,
                MemOp::FetchAdd,
                MemOp::Swap,
                MemOp::Cas,
            ][op as usize];
            let address = if four {
                addr & !3
            } else {
                (addr as u32 & !3) as u64
            };
            let h = MemHeader {
                op,
                requester_id: rid,
                tag,
                first_be: f,
                last_be: l,
                address,
                four_dw: four,
                ph,
                read_len_dw: 0,
            };
            let data: BoxedStrategy<Vec<u8>> = match op {
                MemOp::Read | MemOp::ReadLocked => Just(Vec::new()).boxed(),
                MemOp::Write => payload(64).boxed(),
                MemOp::FetchAdd | MemOp::Swap => prop_oneof![Just(4usize), Just(8)]
                    .prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n))
                    .boxed(),
                MemOp::Cas => prop_oneof![Just(8usize), Just(16), Just(32)]
                    .prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n))
                    .boxed(),
            };
            let read_len = if matches!(op, MemOp::Read | MemOp::ReadLocked) {
                rlen
            } else {
                0
            };
            data.prop_map(move |d| {
                (
                    TlpHeader::Mem(MemHeader {
                        read_len_dw: read_len,
                        ..h
                    }),
                    d,
                )
            })
        });
    let io = (
        any::<bool>(),
        bdf(),
        tag(),
        be(),
        any::<u32>(),
        any::<[u8; 4]>(),
    )
        .prop_map(|(w, rid, tag, f, a, d)| {
            (
                TlpHeader::Io(IoHeader {
                    write: w,
                    requester_id: rid,
                    tag,
                    first_be: f,
                    address: a & !3,
                }),
                if w { d.to_vec() } else { vec![] },
            )
        });
    let cfg = (
        any::<bool>(),
        any::<bool>(),
        bdf(),
        tag(),
        be(),
        bdf(),
        0u16..1024,
        any::<[u8; 4]>(),
    )
        .prop_map(|(w, t1, rid, tag, f, target, reg, d)| {
            (
                TlpHeader::Cfg(CfgHeader {
                    write: w,
                    type1: t1,
                    requester_id: rid,
                    tag,
                    first_be: f,
                    target,
                    register: reg,
                }),
                if w { d.to_vec() } else { vec![] },
            )
        });
    let msg = (
        bdf(),
        tag(),
        any::<u8>(),
        0u8..6,
        any::<[u8; 8]>(),
        any::<bool>(),
    )
        .prop_flat_map(|(rid, tag, code, r, f, data)| {
            let h = MsgHeader {
                requester_id: rid,
                tag,
                code: MsgCode::from_raw(code),
                routing: MsgRouting::from_raw(r).unwrap(),
                fields: MsgFields(f),
            };
            let d: BoxedStrategy<Vec<u8>> = if data {
                payload(16).boxed()
            } else {
                Just(Vec::new()).boxed()
            };
            d.prop_map(move |d| (TlpHeader::Msg(h), d))
        });
    let cpl = (
        any::<bool>(),
        bdf(),
        0u8..8,
        any::<bool>(),
        1u16..=4096,
        bdf(),
        tag(),
        0u8..128,
        any::<bool>(),
    )
        .prop_flat_map(|(lk, cid, st, bcm, bc, rid, tag, la, data)| {
            let h = CplHeader {
                locked: lk,
                completer_id: cid,
                status: CplStatus::from_raw(st),
                bcm,
                byte_count: bc,
                requester_id: rid,
                tag,
                lower_address: la,
            };
            let d: BoxedStrategy<Vec<u8>> = if data {
                payload(32).boxed()
            } else {
                Just(Vec::new()).boxed()
            };
            d.prop_map(move |d| (TlpHeader::Cpl(h), d))
        });
    prop_oneof![3 => mem, 1 => io, 1 => cfg, 2 => msg, 2 => cpl]
}

fn prefixes() -> impl Strategy<Value = Prefixes> {
    prop_oneof![
        4 => Just(Prefixes::EMPTY),
        1 => proptest::collection::vec((0u8..32, 0u32..0x100_0000), 1..=MAX_PREFIXES).prop_map(|v| {
            let p: Vec<Prefix> = v.into_iter().map(|(t, c)| Prefix::new(PrefixKind::from_type(t), c)).collect();
            Prefixes::from_slice(&p).unwrap()
        }),
    ]
}

pub fn tlp() -> impl Strategy<Value = OwnedTlp> {
    (
        header_and_payload(),
        prefixes(),
        0u8..8,
        any::<[bool; 7]>(),
        0u8..4,
    )
        .prop_map(|((header, payload), prefixes, tc, b, at)| {
            let head = TlpRepr {
                prefixes,
                header,
                tc: TrafficClass::new(tc).unwrap(),
                attr: Attr {
                    ro: b[0],
                    ns: b[1],
                    ido: b[2],
                },
                ln: b[3],
                th: b[4],
                td: b[5],
                ep: b[6],
                at: AddressType::from_raw(at),
                payload: &[],
            };
            OwnedTlp { head, payload }
        })
}
