//! The device-to-device streaming kinds of seed 004: `d2d-ssd` (the sender) and
//! `d2d-nic` (the receiver with its UDP/IP offload engine); see
//! [`pcielab_device::d2d`] and `docs/d2d.md`.

use super::{
    common_keys, device_ids, function_with_class, key, msix_bar_size, Device, EndpointCtx,
    HwFunction, KeyType, KindError, KindRegistry, KindRole, KindSpec, ParamValue, Params,
};
use pcielab_config::Bar;
use pcielab_device::d2d::{self, D2dNic, D2dNicConfig, D2dSsd, D2dSsdConfig};
use pcielab_device::nic::Ethernet;
use pcielab_sim::SimDuration;

use super::int_key as int;

/// The PCIe datapath keys both kinds share (the paper's NetFPGA: 125 MHz, 64 bits, §IV-C).
fn datapath_keys() -> Vec<super::KeySpec> {
    vec![
        int("streams", 1, d2d::MAX_STREAMS as i64, 4, "D2D streams (48-byte control blocks, one MSI-X vector each)"),
        int("clock_mhz", 1, 10_000, 125, "PCIe datapath clock, MHz (seed 004 §IV-C: 125)"),
        int("datapath_bits", 8, 4096, 64, "PCIe datapath width, bits (seed 004 §IV-A: 64)"),
        int(
            "tlp_cycles",
            0,
            10_000,
            d2d::PAPER_TLP_CYCLES as i64,
            "datapath cycles per TLP besides its data (17: from seed 004's 392 ns per 256-byte write)",
        ),
    ]
}

fn timing(p: &Params) -> Result<pcielab_device::DeviceTiming, KindError> {
    let bits = p.int("datapath_bits").unwrap_or(64) as u32;
    if bits % 8 != 0 {
        return Err(KindError::key(
            "datapath_bits",
            format!("{bits} bits: a multiple of 8"),
        ));
    }
    Ok(d2d::pcie_timing(
        p.int("clock_mhz").unwrap_or(125) as u32,
        bits,
        p.int("tlp_cycles").unwrap_or(d2d::PAPER_TLP_CYCLES as i64) as u32,
    ))
}

/// Registers `d2d-ssd` and `d2d-nic`.
pub(super) fn register(r: &mut KindRegistry) {
    let mut ssd = datapath_keys();
    ssd.extend([
        int("media_latency_ns", 0, 1_000_000_000, 0, "media latency per chunk read, ns (the paper's emulated SSD: 0)"),
        int(
            "media_mbps",
            0,
            10_000_000,
            64 * 160,
            "media bandwidth, Mb/s, 0 for no limit (the paper's emulated SSD: a 64-bit AXI stream at 160 MHz)",
        ),
        int("inflight", 1, 64, 2, "chunks being written at once per stream"),
        int("seed", 0, i64::MAX, 0, "the media's content: stream s carries d2d::media_byte(seed ^ s, offset)"),
    ]);
    ssd.extend(common_keys(256, device_ids::D2D_SSD as i64));
    r.register(KindSpec {
        name: "d2d-ssd",
        role: KindRole::Endpoint(build_ssd),
        keys: ssd,
        doc: "seed 004's D2D sender: stream control registers, Tx FSM, media model, peer-to-peer writes",
    });
    let mut nic = datapath_keys();
    nic.extend([
        key(
            "rx_queue",
            KeyType::Size {
                min: 4096,
                max: 1 << 24,
                pow2: false,
            },
            Some(ParamValue::Int(128 * 1024)),
            "D2D Rx Queue per stream, bytes (seed 004 §III-A: 32 credits of 4 KB)",
        ),
        int("eth_gbps", 1, 400, 10, "the MAC's line rate, Gb/s (seed 004 §IV-A: 10GbE)"),
        int("tx_frames", 1, 1024, 4, "formed frames the Transmit Packet Queue holds"),
        int("uoe_mhz", 1, 10_000, 160, "offload engine clock, MHz (seed 004 §IV-A: 160)"),
        int("uoe_bits", 8, 4096, 64, "offload engine stream width, bits (seed 004 §IV-A: 64)"),
        key(
            "cable",
            KeyType::Str,
            Some(ParamValue::Str(String::new())),
            "another device whose MAC this one's is cabled to: frames go there (\"\": an internal sink that counts them)",
        ),
    ]);
    nic.extend(common_keys(256, device_ids::D2D_NIC as i64));
    r.register(KindSpec {
        name: "d2d-nic",
        role: KindRole::Endpoint(build_nic),
        keys: nic,
        doc: "seed 004's D2D receiver: Rx Queues in BAR0, Rx FSM, UDP/IP offload engine, a line-rate MAC",
    });
}

/// The settings of a `d2d-ssd` node.
pub fn ssd_config(p: &Params) -> Result<D2dSsdConfig, KindError> {
    Ok(D2dSsdConfig {
        streams: p.int("streams").unwrap_or(4) as u8,
        media_latency: SimDuration::from_ns(p.int("media_latency_ns").unwrap_or(0) as u64),
        media_mbps: p.int("media_mbps").unwrap_or(64 * 160) as u64,
        inflight: p.int("inflight").unwrap_or(2) as u32,
        seed: p.int("seed").unwrap_or(0) as u64,
        timing: timing(p)?,
    })
}

/// The settings of a `d2d-nic` node.
pub fn nic_config(p: &Params) -> Result<D2dNicConfig, KindError> {
    let eth = Ethernet::new(p.int("eth_gbps").unwrap_or(10) as f64)
        .map_err(|e| KindError::key("eth_gbps", e))?;
    let uoe_bits = p.int("uoe_bits").unwrap_or(64) as u32;
    if uoe_bits % 8 != 0 {
        return Err(KindError::key(
            "uoe_bits",
            format!("{uoe_bits} bits: a multiple of 8"),
        ));
    }
    Ok(D2dNicConfig {
        streams: p.int("streams").unwrap_or(4) as u8,
        rx_queue: p.int("rx_queue").unwrap_or(128 * 1024) as u64,
        eth,
        tx_frames: p.int("tx_frames").unwrap_or(4) as usize,
        uoe_mhz: p.int("uoe_mhz").unwrap_or(160) as u32,
        uoe_bits,
        cable: !p.str("cable").unwrap_or("").is_empty(),
        timing: timing(p)?,
    })
}

/// One function: registers in a 32-bit non-prefetchable BAR 0 of `size`, MSI-X (a
/// vector per stream) in BAR 2.
fn function(
    ctx: &EndpointCtx<'_>,
    id: u16,
    class: u32,
    size: u64,
    streams: u8,
) -> Result<HwFunction, KindError> {
    let mut bars = [None; 6];
    bars[0] = Some(Bar::Mem32 {
        size: size as u32,
        prefetchable: false,
    });
    bars[2] = Some(Bar::Mem32 {
        size: msix_bar_size(streams as u16) as u32,
        prefetchable: false,
    });
    let config = function_with_class(ctx, id, class, bars, streams as u16)?;
    Ok(HwFunction {
        devfn: 0,
        config,
        bars,
        vfs: None,
    })
}

/// `d2d-ssd`: class 018000 (mass storage controller, other).
fn build_ssd(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    let cfg = ssd_config(ctx.params)?;
    let f = function(
        ctx,
        device_ids::D2D_SSD,
        0x01_8000,
        d2d::SSD_BAR_SIZE,
        cfg.streams,
    )?;
    Ok(Device {
        functions: vec![f],
        model: Some(Box::new(D2dSsd::new(cfg))),
    })
}

/// `d2d-nic`: class 020000 (Ethernet controller).
fn build_nic(ctx: &EndpointCtx<'_>) -> Result<Device, KindError> {
    let cfg = nic_config(ctx.params)?;
    let f = function(
        ctx,
        device_ids::D2D_NIC,
        0x02_0000,
        d2d::NIC_BAR_SIZE,
        cfg.streams,
    )?;
    Ok(Device {
        functions: vec![f],
        model: Some(Box::new(D2dNic::new(cfg))),
    })
}
