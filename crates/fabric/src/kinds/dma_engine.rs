//! `dma-engine`: the SR-IOV DMA engine of seed 003 ([`pcielab_device::dma_engine`]).
//!
//! The PF and each VF have the same layout: registers in a 32-bit non-prefetchable
//! BAR 0 (4 KiB), the MSI-X table (2 vectors per engine pair) and PBA in BAR 2. The
//! PF's SR-IOV capability has First VF Offset 1 and VF Stride 1, so VF `i` is function
//! `i + 1` of the PF's bus; with more than 7 VFs the function numbers need ARI, and the
//! device has an ARI capability (the enumerator then enables ARI Forwarding above it).

use super::{
    common_keys, device_caps, device_ids, int_key, msix_bar_size, msix_in_bar2, type0_header,
    Device, EndpointCtx, KindError, KindRegistry, KindRole, KindSpec, VfTemplate,
};
use pcielab_config::caps::{CapabilityList, PcieCap};
use pcielab_config::ext_caps::{AriCap, SriovCap};
use pcielab_config::header::VfHeader;
use pcielab_config::Bar;
use pcielab_device::dma_engine::{DmaEngine, DmaEngineConfig, BAR_SIZE, MAX_QUEUES};
use pcielab_device::DeviceTiming;

/// Most VFs a `dma-engine` node has.
pub const MAX_VFS: i64 = 64;

/// Class code: processing accelerator (PCI Code and ID Assignment, class 12h).
const CLASS: u32 = 0x12_0000;

pub(super) fn register(r: &mut KindRegistry) {
    let mut keys = vec![
        int_key(
            "vfs",
            0,
            MAX_VFS,
            0,
            "VFs (TotalVFs; host enumeration enables them all, as writing sriov_numvfs does)",
        ),
        int_key(
            "queues",
            1,
            MAX_QUEUES as i64,
            1,
            "H2D/D2H engine pairs per function (the paper: 1)",
        ),
        int_key(
            "window",
            0,
            1 << 24,
            16384,
            "reorder window of each H2D transfer, bytes (N requests of MRRS bytes: N × MRRS; 0: none)",
        ),
        int_key(
            "chunk",
            1,
            1 << 30,
            65536,
            "largest piece of a transfer one DMA carries, bytes",
        ),
        int_key("inflight", 1, 64, 4, "pieces each engine keeps in flight"),
        int_key("fetch_batch", 1, 64, 8, "descriptors per descriptor fetch"),
        int_key(
            "dma_tags",
            0,
            768,
            0,
            "tags of the device's read requests, from 0 (0: the host's pool)",
        ),
        int_key(
            "tags_per_function",
            0,
            768,
            0,
            "tags each function owns (function i: i × k ..), as the paper routes completions by tag (0: one pool)",
        ),
        int_key(
            "clock_mhz",
            0,
            10_000,
            250,
            "core clock, MHz (the Xilinx Gen3 x8 block's user clock: 250; 0: no device time)",
        ),
        int_key(
            "datapath_bits",
            0,
            4096,
            256,
            "datapath width, bits (the Xilinx Gen3 x8 block's AXI4-Stream: 256)",
        ),
    ];
    keys.extend(common_keys(256, device_ids::DMA_ENGINE as i64));
    r.register(KindSpec {
        name: "dma-engine",
        role: KindRole::Endpoint(build),
        keys,
        doc: "the SR-IOV DMA engine of seed 003: a PF and up to 64 VFs, H2D/D2H rings per function, MSI-X per engine",
    });
}

/// The settings of a `dma-engine` node.
pub fn config(p: &super::Params) -> Result<DmaEngineConfig, KindError> {
    let int = |k: &str, d: i64| p.int(k).unwrap_or(d);
    let vfs = int("vfs", 0) as u16;
    let tags = match int("dma_tags", 0) {
        0 => None,
        n => Some(n as u16),
    };
    let cfg = DmaEngineConfig {
        functions: 1 + vfs,
        queues: int("queues", 1) as u16,
        window: match int("window", 16384) {
            0 => None,
            n => Some(n as u32),
        },
        chunk: int("chunk", 65536) as u64,
        inflight: int("inflight", 4) as u32,
        fetch_batch: int("fetch_batch", 8) as u32,
        max_transfer: 1 << 30,
        tags,
        tags_per_function: match int("tags_per_function", 0) {
            0 => None,
            n => Some(n as u16),
        },
        timing: DeviceTiming {
            clock_mhz: int("clock_mhz", 250) as u32,
            datapath_bits: int("datapath_bits", 256) as u32,
            ..DeviceTiming::NONE
        },
    };
    cfg.check().map_err(|e| {
        let key = if e.starts_with("tags_per_function") {
            "tags_per_function"
        } else {
            "vfs"
        };
        KindError::key(key, e)
    })?;
    Ok(cfg)
}

fn build(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    let cfg = config(ctx.params)?;
    let vfs = cfg.functions - 1;
    let vectors = 2 * cfg.queues;
    let mut bars = [None; 6];
    bars[0] = Some(Bar::Mem32 {
        size: BAR_SIZE as u32,
        prefetchable: false,
    });
    bars[2] = Some(Bar::Mem32 {
        size: msix_bar_size(vectors) as u32,
        prefetchable: false,
    });
    let (mut cs, ids) = type0_header(ctx, device_ids::DMA_ENGINE, CLASS, bars)?;
    let mut list = device_caps(ctx, vectors);
    let mut template = None;
    // More than 8 functions: function numbers past 7 need ARI.
    let ari = cfg.functions > 8;
    if vfs > 0 {
        if ari {
            list = list.with_ext(AriCap { next_function: 0 });
        }
        list = list.with_ext(SriovCap {
            total_vfs: vfs,
            first_vf_offset: 1,
            vf_stride: 1,
            vf_device_id: device_ids::DMA_ENGINE_VF,
            function: 0,
            vf_bars: bars,
        });
        let mut vcs = VfHeader {
            class_code: CLASS,
            revision: 1,
            subsystem_vendor: ids.vendor_id,
            subsystem_id: device_ids::DMA_ENGINE_VF,
        }
        .build();
        let mut vlist = CapabilityList::new()
            .with(msix_in_bar2(vectors))
            .with(PcieCap {
                flr: true,
                ..ctx.pcie
            });
        if ari {
            vlist = vlist.with_ext(AriCap { next_function: 0 });
        }
        vlist.install(&mut vcs).map_err(|e| e.to_string())?;
        template = Some(VfTemplate { config: vcs, bars });
    }
    list.install(&mut cs).map_err(|e| e.to_string())?;
    Ok(Device::single(cs, bars, template, DmaEngine::new(cfg)))
}
