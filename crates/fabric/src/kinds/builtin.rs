//! The built-in kinds, registered in one registry: the kind registry's types are above
//! (in `kinds`), and the kinds that have modules of their own (`d2d`, `dma_engine`)
//! register themselves here, so the registry never refers to them.

use super::*;

impl KindRegistry {
    /// The built-in kinds: the root complex, the switch and every device kind of this
    /// crate.
    pub fn builtin() -> KindRegistry {
        let mut r = KindRegistry::new();
        let mut rc = vec![int_key("ports", 1, 31, 1, "number of root ports")];
        rc.push(key(
            "hotplug",
            KeyType::Bool,
            Some(ParamValue::Bool(false)),
            "root ports are hot-plug slots (surprise removal included)",
        ));
        rc.push(key(
            "hotplug_power",
            KeyType::Bool,
            Some(ParamValue::Bool(false)),
            "root ports are hot-plug slots with a power controller, an attention button and indicators (orderly removal; implies hotplug)",
        ));
        rc.push(key(
            "atomics",
            KeyType::Bool,
            Some(ParamValue::Bool(true)),
            "root ports complete 32- and 64-bit AtomicOps and 128-bit CAS for host memory",
        ));
        rc.extend(common_keys(256, device_ids::HOST_BRIDGE as i64));
        r.register(KindSpec {
            name: "root-complex",
            role: KindRole::RootComplex,
            keys: rc,
            doc: "host bridge 00:00.0 and root ports 00:01.0 … on bus 0",
        });
        let mut sw = vec![int_key("ports", 1, 32, 1, "number of downstream ports")];
        sw.push(key(
            "hotplug",
            KeyType::Bool,
            Some(ParamValue::Bool(false)),
            "downstream ports are hot-plug slots (surprise removal included)",
        ));
        sw.push(key(
            "hotplug_power",
            KeyType::Bool,
            Some(ParamValue::Bool(false)),
            "downstream ports are hot-plug slots with a power controller, an attention button and indicators (orderly removal; implies hotplug)",
        ));
        sw.extend(common_keys(256, device_ids::SWITCH_UP as i64));
        r.register(KindSpec {
            name: "switch",
            role: KindRole::Switch,
            keys: sw,
            doc: "a switch: upstream port, internal bus, downstream ports",
        });
        let mut ps = vec![
            key(
                "bar_size",
                KeyType::Size {
                    min: 16,
                    max: 1 << 40,
                    pow2: true,
                },
                Some(ParamValue::Int(1 << 20)),
                "size of the memory BAR",
            ),
            key(
                "prefetchable",
                KeyType::Bool,
                Some(ParamValue::Bool(true)),
                "memory BAR is prefetchable",
            ),
            key(
                "bar64",
                KeyType::Bool,
                Some(ParamValue::Bool(true)),
                "memory BAR is 64-bit",
            ),
            int_key("msix_vectors", 1, 2048, 4, "MSI-X vectors"),
            int_key("io_size", 0, 256, 0, "I/O BAR size (0: none)"),
            key(
                "rom_size",
                KeyType::Size {
                    min: 0,
                    max: 16 << 20,
                    pow2: false,
                },
                Some(ParamValue::Int(0)),
                "expansion ROM size (0: none; else a power of two of at least 2 KiB)",
            ),
            int_key("sriov_vfs", 0, 255, 0, "SR-IOV TotalVFs (0: no SR-IOV)"),
            int_key("vfs", 0, 255, 0, "VFs host enumeration enables (as writing sriov_numvfs does); TotalVFs = vfs unless sriov_vfs is given"),
            key(
                "pme",
                KeyType::Bool,
                Some(ParamValue::Bool(false)),
                "PM capability advertises PME (D0, D3hot)",
            ),
            key(
                "atomics",
                KeyType::Bool,
                Some(ParamValue::Bool(false)),
                "the memory BAR completes 32- and 64-bit AtomicOps and 128-bit CAS (peer AtomicOps)",
            ),
        ];
        ps.extend(common_keys(512, device_ids::PSMEM as i64));
        r.register(KindSpec {
            name: "psmem",
            role: KindRole::Endpoint(build_psmem),
            keys: ps,
            doc: "a memory endpoint: one memory BAR backed by sparse memory, MSI-X",
        });
        let mut nic = vec![
            key(
                "model",
                KeyType::Choice(&["simple", "batched"]),
                Some(ParamValue::Str("simple".into())),
                "pcie-bench's NIC variant: simple (a descriptor read per packet, an interrupt per packet) or batched (82599-like)",
            ),
            int_key("queues", 1, pcielab_device::nic::MAX_QUEUES as i64, 1, "queue pairs (each: a transmit and a receive ring, two MSI-X vectors)"),
            int_key("eth_gbps", 0, 1600, 40, "Ethernet line rate, Gb/s (0: the MAC takes frames as fast as PCIe brings them)"),
            key(
                "rx",
                KeyType::Choice(&["off", "line-rate", "saturate", "loopback"]),
                Some(ParamValue::Str("off".into())),
                "where received frames come from: none, a line-rate source, as fast as buffers allow, or the NIC's own transmitted frames",
            ),
            key(
                "frame",
                KeyType::Str,
                Some(ParamValue::Str("64".into())),
                "frame size of the receive source, bytes (64..=9018, FCS included) or imix",
            ),
            key(
                "cable",
                KeyType::Str,
                Some(ParamValue::Str(String::new())),
                "another device whose MAC this one's is cabled to: sent frames go there, its frames come here (\"\": none)",
            ),
            key(
                "rx_fifo",
                KeyType::Size {
                    min: 2048,
                    max: 1 << 30,
                    pow2: false,
                },
                Some(ParamValue::Int(512 * 1024)),
                "receive FIFO per queue, bytes: frames wait here for a buffer (a full FIFO drops them; with rx = loopback the MAC pauses at half)",
            ),
            key(
                "tx_desc_fetch",
                KeyType::Int { min: 1, max: 256 },
                None,
                "transmit descriptors per descriptor read (simple: 1, batched: 40)",
            ),
            key(
                "tx_writeback",
                KeyType::Int { min: 0, max: 256 },
                None,
                "transmit descriptors per write-back, 0 for none (simple: 0, batched: 8)",
            ),
            key(
                "irq_every",
                KeyType::Int { min: 0, max: 1 << 20 },
                None,
                "packets per interrupt and path at reset, 0 for none (simple: 1, batched: 32)",
            ),
            key(
                "irq_delay_ns",
                KeyType::Int { min: 0, max: 1 << 32 },
                None,
                "interrupt moderation timer at reset, ns (simple: 0, batched: 100000)",
            ),
        ];
        nic.extend([
            int_key(
                "clock_mhz",
                0,
                10_000,
                0,
                "the NIC's core clock, MHz (0: it takes no time)",
            ),
            int_key(
                "datapath_bits",
                0,
                4096,
                0,
                "the width of its datapath, bits (e.g. 256 at 250 MHz)",
            ),
            int_key(
                "dma_tags",
                0,
                768,
                0,
                "tags of its read requests, from 0 (0: the host's pool)",
            ),
        ]);
        nic.extend(common_keys(256, device_ids::NIC as i64));
        r.register(KindSpec {
            name: "nic",
            role: KindRole::Endpoint(build_nic),
            keys: nic,
            doc: "the NIC of pcie-bench: descriptor rings in host memory, doorbells, MSI-X per queue, an Ethernet MAC",
        });
        let mut snic = vec![
            key(
                "mac",
                KeyType::Choice(SNIC_MACS),
                Some(ParamValue::Str("loopback".into())),
                "the MAC side: frames sent come back (loopback) or are dropped, counted (none)",
            ),
            int_key(
                "ring_entries",
                1,
                65536,
                1024,
                "descriptors per ring (larger indexes are refused, counted)",
            ),
            int_key("max_frame", 1, 65536, 4096, "largest frame in bytes"),
            int_key(
                "rx_fifo",
                0,
                4096,
                64,
                "frames kept while no RX buffer is posted (0: dropped at once)",
            ),
        ];
        snic.extend(common_keys(256, device_ids::SIMPLE_NIC as i64));
        r.register(KindSpec {
            name: "simple-nic",
            role: KindRole::Endpoint(build_simple_nic),
            keys: snic,
            doc: "NetTLP's simple NIC: BAR4 registers, descriptor rings in host memory, MSI-X 0 (TX) and 1 (RX)",
        });
        super::dma_engine::register(&mut r);
        super::d2d::register(&mut r);
        r
    }
}
