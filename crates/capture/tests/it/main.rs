//! Integration tests of pcielab-capture: write → read round trips.

use pcielab_capture::decode::{decode, Decoded};
use pcielab_capture::{CaptureWriter, Format, Payload, Reader};
use pcielab_wire::tlp::TlpRepr;
use pcielab_wire::{Bdf, Tag};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Item {
    Tlp {
        iface: u32,
        time: u64,
        tag: u16,
        addr: u64,
        dws: usize,
    },
    Dllp {
        iface: u32,
        time: u64,
        bytes: [u8; 6],
    },
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        (0u32..3, any::<u64>(), 0u16..1024, any::<u64>(), 0usize..64).prop_map(
            |(iface, time, tag, addr, dws)| Item::Tlp {
                iface,
                time,
                tag,
                addr,
                dws
            }
        ),
        (0u32..3, any::<u64>(), any::<[u8; 6]>()).prop_map(|(iface, time, bytes)| Item::Dllp {
            iface,
            time,
            bytes
        }),
    ]
}

fn tlp_bytes(tag: u16, addr: u64, dws: usize) -> Vec<u8> {
    let rid = Bdf::new(1, 2, 3).unwrap();
    let tag = Tag::new(tag).unwrap();
    let data: Vec<u8> = (0..dws * 4).map(|i| i as u8).collect();
    if dws == 0 {
        TlpRepr::mem_read(rid, tag, addr, 1)
            .unwrap()
            .to_vec()
            .unwrap()
    } else {
        TlpRepr::mem_write(rid, tag, addr, &data)
            .unwrap()
            .to_vec()
            .unwrap()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// pcapng keeps every byte, interface and picosecond; pcap keeps bytes and nanoseconds.
    #[test]
    fn round_trip(items in proptest::collection::vec(item(), 0..40)) {
        for format in [Format::Pcapng, Format::Pcap] {
            let mut w = CaptureWriter::new(Vec::new(), format, "round trip").unwrap();
            let names = ["rc.0->sw0", "sw0->rc.0", "sw0.1->mem0"];
            let ids: Vec<_> = names.iter().map(|n| w.add_interface(n).unwrap()).collect();
            let mut expect = Vec::new();
            for it in &items {
                match *it {
                    Item::Tlp { iface, time, tag, addr, dws } => {
                        // pcap holds 32-bit seconds: keep times below 2^32 s there.
                        let time = if format == Format::Pcap { time % (1 << 60) } else { time };
                        let b = tlp_bytes(tag, addr, dws);
                        w.write_tlp(ids[iface as usize], time, &b).unwrap();
                        expect.push((iface, time, true, b));
                    }
                    Item::Dllp { iface, time, bytes } => {
                        let time = if format == Format::Pcap { time % (1 << 60) } else { time };
                        w.write_dllp(ids[iface as usize], time, &bytes).unwrap();
                        expect.push((iface, time, false, bytes.to_vec()));
                    }
                }
            }
            let file = w.finish().unwrap();
            let mut r = Reader::new(&file).unwrap();
            let mut n = 0;
            while let Some(rec) = r.next_record() {
                let rec = rec.unwrap();
                let (iface, time, is_tlp, bytes) = &expect[n];
                n += 1;
                prop_assert_eq!(rec.frame, n as u64);
                match format {
                    Format::Pcapng => {
                        prop_assert_eq!(rec.time_ps, *time as u128);
                        prop_assert_eq!(&r.interfaces()[rec.interface].name, names[*iface as usize]);
                    }
                    Format::Pcap => prop_assert_eq!(rec.time_ps, (*time as u128) / 1000 * 1000),
                }
                match rec.payload {
                    Payload::Tlp(b) => { prop_assert!(*is_tlp); prop_assert_eq!(b, &bytes[..]);
                        let ok = matches!(decode(&rec), Decoded::Tlp { .. });
                        prop_assert!(ok); }
                    Payload::Dllp(b) => { prop_assert!(!*is_tlp); prop_assert_eq!(b, &bytes[..]); }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
            prop_assert_eq!(n, expect.len());
        }
    }

    /// Arbitrary bytes never panic the reader, and errors point inside the file.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        for prefix in [&[][..], &[0x0a, 0x0d, 0x0d, 0x0a][..], &[0x4d, 0x3c, 0xb2, 0xa1][..]] {
            let mut f = prefix.to_vec();
            f.extend_from_slice(&data);
            match Reader::new(&f) {
                Err(e) => prop_assert!(e.offset <= f.len() as u64),
                Ok(r) => for x in r {
                    if let Ok(rec) = x { let _ = decode(&rec); }
                    else if let Err(e) = x { prop_assert!(e.offset <= f.len() as u64); }
                },
            }
        }
    }
}
