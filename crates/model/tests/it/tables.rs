//! Table tests: expected values worked out by hand from the formulas (the derivation is
//! written next to each), independent of the code under test.

use pcielab_model::eth::{nettlp_dma_gbps, Ethernet};
use pcielab_model::{AddrWidth, Mode, Model, Mps, Mrrs, PcieConfig, Rcb};
use pcielab_wire::Generation;

fn cfg(gen: Generation, lanes: u32, mps: u32, mrrs: u32) -> PcieConfig {
    let mut c = PcieConfig::new(gen, lanes).unwrap();
    c.mps = Mps::new(mps).unwrap();
    c.mrrs = Mrrs::new(mrrs).unwrap();
    c
}

fn r3(x: f64) -> String {
    format!("{x:.3}")
}

/// Gen3 x8, MPS 256, MRRS 512, RCB 64, 64-bit addresses, no ECRC (pcie-bench's setting).
///
/// raw  = 8 GT/s × 128/130 × 8 = 63.015385 Gb/s
/// link = raw × (1 − 8/203 (ACK) − 8/203 (UpdateFC) − 4/1538 (SKP)) = 57.884766 Gb/s
/// MWr/MRd = 8 framing + 4 + 12 = 24 B; CplD = 8 + 4 + 8 = 20 B
/// write(64)      = link × 64 / (24 + 64)                 = 42.098
/// read(64)       = rx 20 + 64 = 84 B, tx 24 B: rx limits = link × 64 / 84 = 44.103
/// read/write(64) = tx 88 + 24 = 112 B, rx 84 B: tx limits = link × 64 / 112 = 33.077
/// asymptotes: write link × 256/280 = 52.923, read link × 256/276 = 53.690
#[test]
fn issue_reference_gen3_x8() {
    let m = Model::new(cfg(Generation::Gen3, 8, 256, 512)).unwrap();
    assert!((m.link_gbps() - 57.884_766).abs() < 1e-6);
    let p = m.point(64).unwrap();
    assert_eq!(r3(p.write_gbps), "42.098");
    assert_eq!(r3(p.read_gbps), "44.103");
    assert_eq!(r3(p.readwrite_gbps), "33.077");
    let big = m.point(1 << 20).unwrap();
    assert_eq!(r3(big.write_gbps), "52.923");
    assert_eq!(r3(big.read_gbps), "53.690");
}

/// Gen2 x4, MPS 128, MRRS 256, 32-bit addresses, ECRC on.
///
/// raw = 5 × 0.8 × 4 = 16; ACK = UpdateFC limit (Gen2, x4, 128) = 124
/// link = 16 × (1 − 16/124 − 4/1538) = 13.893871
/// MWr/MRd = 8 + 4 + 8 + 4 (ECRC) = 24 B; CplD = 8 + 4 + 8 + 4 = 24 B
/// write(200) = 2 TLPs: link × 200 / (48 + 200) = 11.205
/// read(200)  = 1 MRd (24 B) out, 2 CplD (48 + 200) in: rx limits → 11.205
/// rw(200)    = tx 248 + 24 = 272, rx 248: tx limits: link × 200 / 272 = 10.216
#[test]
fn gen2_x4_ecrc_32bit() {
    let mut c = cfg(Generation::Gen2, 4, 128, 256);
    c.addr = AddrWidth::Bits32;
    c.ecrc = true;
    let m = Model::new(c).unwrap();
    assert!((m.link_gbps() - 13.893_871).abs() < 1e-6);
    let p = m.point(200).unwrap();
    assert_eq!(r3(p.write_gbps), "11.205");
    assert_eq!(r3(p.read_gbps), "11.205");
    assert_eq!(r3(p.readwrite_gbps), "10.216");
}

/// Gen1 x1, MPS 512, RCB 64 with RCB chunks: completions of 64 B.
///
/// link = 2 × (1 − 16/559 − 4/1538) = 1.937553
/// read(256) = 4 CplD: 4 × 20 + 256 = 336 B in, 24 B out: link × 256/336 = 1.476
#[test]
fn gen1_x1_rcb_chunks() {
    let mut c = cfg(Generation::Gen1, 1, 512, 512);
    c.rcb_chunks = true;
    c.rcb = Rcb::new(64).unwrap();
    let m = Model::new(c).unwrap();
    assert_eq!(r3(m.read(256).unwrap()), "1.476");
}

/// Spec mode, Gen3 x8 MPS 256: DLLPs charged per direction as they are sent, SKP at
/// 128b/130b.
///
/// wire = 63.015385 × 375/376 = 62.847791 (TLPs and DLLPs); the Ack latency limit and
/// UpdateFC guideline, 203 symbol times, carry L = 203 × 8 × 128/130 × 375/376 =
/// 1594.763 bytes. `link` (one ACK and one UpdateFC per L) = wire × (1 − 16/L) =
/// 62.217249.
/// write(64): nothing comes back on the data direction: wire × 64/88 = 45.707
/// read(64): one 84-byte CplD per read down, one MRd up; the MRd's ACK timer and
/// UpdateFC(NP) timer each cover ⌊L/T⌋ + 1 = 19 requests (T = 84 + 16/19 = 84.842;
/// ⌊1594.763/84.842⌋ = 18): wire × 64 / (84 + 16/19) = 47.409
/// read(512 at 0x20): first completion cut at the 64-byte RCB boundary:
///   32 + 256 + 224 B → 3 × 20 + 512 = 572 B; ⌊L/572⌋ + 1 = 3 requests per DLLP:
///   wire × 512 / (572 + 16/3) = 55.736
/// read(512 at 0): 2 × 20 + 512 = 552 B: wire × 512 / (552 + 16/3) = 57.736
#[test]
fn spec_gen3_x8() {
    let mut c = cfg(Generation::Gen3, 8, 256, 512);
    c.mode = Mode::Spec;
    let m = Model::new(c).unwrap();
    assert!((m.wire_gbps() - 62.847_791).abs() < 1e-6);
    assert!((m.link_gbps() - 62.217_249).abs() < 1e-6);
    let p = m.point(64).unwrap();
    assert_eq!(r3(p.write_gbps), "45.707");
    assert_eq!(r3(p.read_gbps), "47.409");
    assert_eq!(r3(m.read_at(0x20, 512).unwrap()), "55.736");
    assert_eq!(r3(m.read_at(0, 512).unwrap()), "57.736");
}

/// Gen6 x4: FLIT mode in spec mode, the 242/256 approximation in compat mode.
///
/// spec:   link = 4 × 64 × 236/256 × 375/376 = 235.372340; MWr 64-bit = 16 B header,
///         no framing/LCRC: write(256) = link × 256/272 = 221.527
/// compat: raw = 4 × 64 × 242/256 = 242; ACK/FC limit (x4, MPS 256) = 214;
///         link = 242 × (1 − 16/214 − 4/1538) = 223.277153;
///         write(256) = link × 256/280 = 204.139
#[test]
fn gen6_flit_and_compat() {
    let mut c = cfg(Generation::Gen6, 4, 256, 512);
    let compat = Model::new(c).unwrap();
    assert!((compat.link_gbps() - 223.277_153).abs() < 1e-6);
    assert_eq!(r3(compat.write(256).unwrap()), "204.139");
    c.mode = Mode::Spec;
    let spec = Model::new(c).unwrap();
    assert!((spec.link_gbps() - 235.372_340).abs() < 1e-6);
    assert_eq!(r3(spec.write(256).unwrap()), "221.527");
}

/// Where spec mode is below compatibility mode, and why (documented differences).
#[test]
fn spec_below_compat_where_documented() {
    // x1 at 128b/130b, one ACK and one UpdateFC per limit (`link`): a symbol time carries
    // 128/130 of a byte, and the SKP block (1/376) is a little dearer than pcie-bench's
    // 4/1538: 7.876923 × (1 − 16/512 − 4/1538) = 7.610283 vs
    // 7.876923 × 375/376 × (1 − 16/(512 × 128/130 × 375/376)) = 7.855974 − 0.25 = 7.605974.
    let mut c = cfg(Generation::Gen3, 1, 256, 512);
    let compat = Model::new(c).unwrap();
    c.mode = Mode::Spec;
    let spec = Model::new(c).unwrap();
    assert!((compat.link_gbps() - 7.610_283).abs() < 1e-6);
    assert!((spec.link_gbps() - 7.605_974).abs() < 1e-6);
    // A 1-byte write carries one whole DW in spec mode: 24 + 4 vs 24 + 1 bytes.
    assert_eq!(spec.write_traffic(0, 1).req_bytes, 28);
    assert_eq!(compat.write_traffic(0, 1).req_bytes, 25);
    // MRRS < MPS: a completion cannot be larger than its request, so 1024 B read with
    // MRRS 128 takes 8 completions in spec mode; pcie-bench counts ceil(1024/256) = 4.
    let mut c = cfg(Generation::Gen3, 8, 256, 128);
    assert_eq!(Model::new(c).unwrap().read_traffic(0, 1024).cpl_tlps, 4);
    c.mode = Mode::Spec;
    assert_eq!(Model::new(c).unwrap().read_traffic(0, 1024).cpl_tlps, 8);
}

/// NetTLP (seed 000): 10 GbE, 256-byte payload, 12-byte 3DW MWr header:
/// 10 × 256 / (12 + 256 + 52 + 20) = 7.53 Gb/s.
#[test]
fn nettlp_encapsulation() {
    assert_eq!(format!("{:.2}", nettlp_dma_gbps(10.0, 12, 256)), "7.53");
}

/// Ethernet line rates incl. preamble + SFD (8), IFG (12), FCS (in the frame):
/// frames/s = rate / ((frame + 20) × 8).
#[test]
fn ethernet_frame_rates() {
    // (Gb/s, 64-byte frames/s, 1518-byte frames/s), by hand: rate/672, rate/12304.
    let table = [
        (10, 14_880_952.38, 812_743.82),
        (25, 37_202_380.95, 2_031_859.56),
        (40, 59_523_809.52, 3_250_975.29),
        (100, 148_809_523.81, 8_127_438.23),
        (200, 297_619_047.62, 16_254_876.46),
        (400, 595_238_095.24, 32_509_752.93),
    ];
    for (g, small, big) in table {
        let e = Ethernet::new(g).unwrap();
        assert!((e.frames_per_s(64) - small).abs() < 0.01, "{g}");
        assert!((e.frames_per_s(1518) - big).abs() < 0.01, "{g}");
    }
}

#[test]
fn bad_input_is_rejected_with_a_clear_error() {
    assert_eq!(
        Mps::new(100).unwrap_err().to_string(),
        "invalid MPS 100: allowed 128, 256, 512, 1024, 2048, 4096"
    );
    assert_eq!(
        Mrrs::new(64).unwrap_err().to_string(),
        "invalid MRRS 64: allowed 128, 256, 512, 1024, 2048, 4096"
    );
    assert_eq!(
        Rcb::new(32).unwrap_err().to_string(),
        "invalid RCB 32: allowed 64, 128"
    );
    assert_eq!(
        PcieConfig::new(Generation::Gen3, 3)
            .unwrap_err()
            .to_string(),
        "invalid lane count 3: allowed 1, 2, 4, 8, 16, 32"
    );
    let e: pcielab_model::Error = Generation::from_number(0).unwrap_err().into();
    assert_eq!(e.to_string(), "invalid PCIe generation 0: allowed 1..=6");
    let m = Model::new(cfg(Generation::Gen3, 8, 256, 512)).unwrap();
    assert_eq!(
        m.read(0).unwrap_err().to_string(),
        "invalid transfer size 0: must be at least 1"
    );
}
