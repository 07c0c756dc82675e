//! Every PCI Express device/port type, decoded by the real `lspci -F`.

use pcielab_config::caps::{CapabilityList, MsiCap, MsixCap, PcieCap, PmCap, PortType};
use pcielab_config::ext_caps::{AcsCap, AerCap, AriCap, DsnCap, LtrCap};
use pcielab_config::lspci::write_dump;
use pcielab_config::{Bar, Ids, Type0, Type1};
use pcielab_wire::{Bdf, Generation};
use std::process::Command;

#[test]
fn lspci_decodes_every_port_type() {
    let types = [
        (PortType::Endpoint, "Express (v2) Endpoint"),
        (PortType::LegacyEndpoint, "Express (v2) Legacy Endpoint"),
        (PortType::RootPort, "Express (v2) Root Port (Slot+)"),
        (PortType::UpstreamPort, "Express (v2) Upstream Port"),
        (
            PortType::DownstreamPort,
            "Express (v2) Downstream Port (Slot+)",
        ),
        (
            PortType::RcIntegratedEndpoint,
            "Express (v2) Root Complex Integrated Endpoint",
        ),
    ];
    let mut dump = String::new();
    for (i, (t, _)) in types.iter().enumerate() {
        let bridge = matches!(
            t,
            PortType::RootPort | PortType::UpstreamPort | PortType::DownstreamPort
        );
        let mut cs = if bridge {
            Type1::default().build().unwrap()
        } else {
            let mut bars = [None; 6];
            bars[0] = Some(Bar::Mem32 {
                size: 1 << 16,
                prefetchable: false,
            });
            Type0 {
                ids: Ids {
                    vendor_id: 0x1fee,
                    device_id: 0x100 + i as u16,
                    revision: 1,
                    class_code: 0x05_8000,
                },
                bars,
                ..Type0::default()
            }
            .build()
            .unwrap()
        };
        if !bridge {
            // lspci shows AtomicOp completer bits only for functions with a memory BAR.
            cs.write_u32(0x10, 0xfe00_0000 + ((i as u32) << 16));
        }
        let mut pcie = PcieCap::new(*t);
        pcie.max_speed = Generation::Gen5;
        pcie.link = Some((Generation::Gen4, 8));
        pcie.atomics = true;
        if t.is_downstream() {
            pcie.slot = Some(i as u16 + 1);
        }
        let mut list = CapabilityList::new()
            .with(PmCap { pme: true })
            .with(MsiCap {
                vectors: 8,
                addr64: false,
                per_vector_mask: true,
            })
            .with(pcie)
            .with_ext(AerCap {
                root_port: *t == PortType::RootPort,
                egress_blocking: *t == PortType::RootPort,
                prefix_blocking: false,
                atomic_blocking: false,
            })
            .with_ext(LtrCap);
        if bridge {
            list = list.with_ext(AcsCap);
        } else {
            list = list
                .with(MsixCap {
                    table_size: 8,
                    table_bir: 0,
                    table_offset: 0x1000,
                    pba_bir: 0,
                    pba_offset: 0x2000,
                })
                .with_ext(AriCap { next_function: 0 })
                .with_ext(DsnCap {
                    serial: 0x0011_2233_4455_6677,
                });
        }
        list.install(&mut cs).unwrap();
        write_dump(
            &mut dump,
            None,
            Bdf::new(0, i as u8 + 1, 0).unwrap(),
            "x",
            cs.bytes(),
        );
    }
    let path =
        std::env::temp_dir().join(format!("pcielab-port-types-{}.lspci", std::process::id()));
    std::fs::write(&path, &dump).unwrap();
    let out = Command::new("lspci")
        .arg("-F")
        .arg(&path)
        .arg("-vvv")
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `lspci` ({e}); install it (Debian/Ubuntu: apt-get install pciutils)")
        });
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8(out.stdout).unwrap();
    for (_, want) in types {
        assert!(text.contains(want), "lspci lacks {want:?}:\n{text}");
    }
    for bad in ["Unknown", "unknown", "broken", "<?>", "!!!"] {
        assert!(!text.contains(bad), "lspci printed {bad:?}:\n{text}");
    }
    // Hand-checked decodings of a few registers.
    assert!(
        text.contains("LnkCap:\tPort #0, Speed 32GT/s, Width x16"),
        "{text}"
    );
    assert!(text.contains("LnkSta:\tSpeed 16GT/s, Width x8"), "{text}");
    assert!(
        text.contains("MSI: Enable- Count=1/8 Maskable+ 64bit-"),
        "{text}"
    );
    assert!(
        text.contains("Device Serial Number 00-11-22-33-44-55-66-77"),
        "{text}"
    );
    assert!(
        text.contains("AtomicOpsCap: 32bit+ 64bit+ 128bitCAS+"),
        "{text}"
    );
}
