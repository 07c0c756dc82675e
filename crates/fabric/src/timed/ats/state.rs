//! What the ATS component keeps (below the engine): a device's Address Translation Cache,
//! its outstanding Translation Requests and counters, the Invalidate Requests the root
//! complex sent, and the encoding of translated ranges.

use pcielab_sim::SimTime;
use pcielab_wire::Bdf;
use std::collections::VecDeque;

/// The first tag a device uses for Translation Requests (its DMA tags are below 768).
pub(crate) const ATS_TAG_BASE: u16 = 768;

/// Translation Requests a device may have outstanding.
pub(crate) const ATS_TAGS: u16 = 256;

/// The smallest translation: 4 KiB.
pub(crate) const PAGE: u64 = 4096;

/// An Invalidate Request the root complex sent, and when its completion came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtsInvalidation {
    /// The device it went to.
    pub device: Bdf,
    /// The PASID whose translations it takes back (its PASID prefix), or None: those
    /// obtained without a PASID.
    pub pasid: Option<u32>,
    /// The untranslated range it invalidates: base (aligned to `size`) …
    pub base: u64,
    /// … and size (a power of two, at least the device's STU).
    pub size: u64,
    /// Its ITag (0..32).
    pub itag: u8,
    /// When it was sent.
    pub sent: SimTime,
    /// When its Invalidate Completion reached the root complex.
    pub completed: Option<SimTime>,
}

/// A device's ATS counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtsStats {
    /// Translation units of DMAs found in the ATC.
    pub atc_hits: u64,
    /// Translation units of DMAs missing from the ATC.
    pub atc_misses: u64,
    /// Translation Requests sent.
    pub translation_requests: u64,
    /// Translation Completions that granted no access (unmapped pages).
    pub denied: u64,
    /// ATC entries evicted to make room (LRU).
    pub evictions: u64,
    /// Invalidate Requests received.
    pub invalidations: u64,
    /// ATC entries those invalidated.
    pub invalidated_entries: u64,
    /// Page Requests sent (PRI), one page each.
    pub page_requests: u64,
    /// PRG Responses received with Success (the page was made resident).
    pub pages_made_resident: u64,
    /// PRG Responses received with another code (the DMA failed).
    pub page_requests_failed: u64,
}

/// A Translation Request outstanding (or waiting for a tag: `tag` NONE).
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub unit: u64,
    /// The PASID of the address space the unit belongs to, or NONE.
    pub pasid: u32,
    /// The Translation Request's tag; NONE while it waits for a tag, or `PAGING`
    /// while the unit waits for a Page Request's answer (see `pri`).
    pub tag: u16,
    /// DMAs waiting for it: (op index, DMA id).
    pub waiters: Vec<(u32, crate::timed::endpoint::DmaId)>,
    /// An Invalidate Request overlapping it arrived: ask again.
    pub stale: bool,
    /// Access the waiting DMAs need: read (bit 0), write (bit 1).
    pub rw: u8,
    /// Its Page Request Group index while paging (NONE: none yet).
    pub prg: u16,
    /// A Page Request for it was answered Success already (a second refusal fails).
    pub paged: bool,
}

/// `Pending::tag` while the unit waits for the host to make its page resident.
pub(crate) const PAGING: u16 = 0xfffe;

/// The ATS state of a device with ATS enabled.
#[derive(Debug, Clone)]
pub(crate) struct AtsDevice {
    pub(crate) bdf: Bdf,
    /// Smallest Translation Unit in bytes.
    pub(crate) stu: u64,
    /// The ATC, most recently used first: (untranslated base, translated base, size,
    /// PASID or NONE).
    pub(crate) atc: VecDeque<(u64, u64, u64, u32)>,
    pub(crate) pending: Vec<Pending>,
    pub(crate) free_tags: Vec<u16>,
    /// Invalidations waiting for DMAs that use the range: (base, size, PASID or NONE,
    /// ITag, from).
    pub(crate) parked: Vec<(u64, u64, u32, u8, Bdf)>,
    /// PRI enabled: the free Page Request Group indices (the allocation's worth).
    pub(crate) prg_free: Option<Vec<u16>>,
    pub stats: AtsStats,
}

impl AtsDevice {
    pub(crate) fn new(bdf: Bdf, stu: u64) -> AtsDevice {
        AtsDevice {
            bdf,
            stu,
            atc: VecDeque::new(),
            pending: Vec::new(),
            free_tags: (ATS_TAG_BASE..ATS_TAG_BASE + ATS_TAGS).rev().collect(),
            parked: Vec::new(),
            prg_free: None,
            stats: AtsStats::default(),
        }
    }
}

/// Encodes a translated (or untranslated) range as an entry value: `base` aligned to
/// `size` (a power of two of at least 4 KiB), S and the size bits, and `rw` in bits 1:0.
pub(crate) fn encode_range(base: u64, size: u64, rw: u64) -> u64 {
    let size = size.max(PAGE);
    let s = if size > PAGE {
        (1 << 11) | ((size / 2 - 1) & !0xfff)
    } else {
        0
    };
    (base & !(size - 1)) | s | (rw & 3)
}

/// Decodes an entry value: (base, size, R, W).
pub(crate) fn decode_range(v: u64) -> (u64, u64, bool, bool) {
    let size = if v & (1 << 11) == 0 {
        PAGE
    } else {
        let ones = (v >> 12).trailing_ones();
        (2 * PAGE) << ones.min(50)
    };
    (v & !(size - 1) & !0xfff, size, v & 1 != 0, v & 2 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A translated range comes back as it was encoded: base aligned to its size,
        /// the size (a power of two, at least 4 KiB), R and W.
        #[test]
        fn a_range_decodes_to_what_was_encoded(
            base in any::<u64>(),
            shift in 12u32..40,
            rw in 0u64..4,
        ) {
            let size = 1u64 << shift;
            let (b, s, r, w) = decode_range(encode_range(base, size, rw));
            prop_assert_eq!(s, size);
            prop_assert_eq!(b, base & !(size - 1));
            prop_assert_eq!((r, w), (rw & 1 != 0, rw & 2 != 0));
        }
    }

    #[test]
    fn a_new_device_has_every_translation_tag_free_and_an_empty_atc() {
        let d = AtsDevice::new(Bdf::default(), 8192);
        assert_eq!(d.free_tags.len(), ATS_TAGS as usize);
        assert_eq!(d.free_tags.last(), Some(&ATS_TAG_BASE));
        assert!(d.atc.is_empty() && d.pending.is_empty());
        // Smaller than a page: still one page.
        assert_eq!(decode_range(encode_range(0x1234_5000, 1, 3)).1, PAGE);
    }
}
