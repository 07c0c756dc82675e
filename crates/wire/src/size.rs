//! Byte sizes as people write them, one rule for the whole project (command-line flags,
//! topology files, the adapter's control commands): decimal or `0x` hex, optionally with
//! a binary unit — `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (any case) or `B` — and `_`
//! separators.
//!
//! ```
//! use pcielab_wire::size::parse_size;
//! assert_eq!(parse_size("4K"), Some(4096));
//! assert_eq!(parse_size("4kib"), Some(4096));
//! assert_eq!(parse_size("0x1000"), Some(4096));
//! assert_eq!(parse_size("0x1K"), Some(1024));
//! assert_eq!(parse_size("1_000"), Some(1000));
//! assert_eq!(parse_size("16MiB"), Some(16 << 20));
//! assert_eq!(parse_size("4X"), None);
//! ```

/// Parses a byte size (see the module doc); `None` when it is not one or overflows.
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim().replace('_', "").to_ascii_lowercase();
    let (num, mult) = [
        ("kib", 1u64 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("tib", 1 << 40),
        ("k", 1 << 10),
        ("m", 1 << 20),
        ("g", 1 << 30),
        ("t", 1 << 40),
    ]
    .into_iter()
    .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n, m)))
    .unwrap_or((t.as_str(), 1));
    let num = num.trim();
    let n: u64 = match num.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok()?,
        // A trailing "b" is a unit only on decimal numbers ("0xb" is eleven).
        None => num.strip_suffix('b').unwrap_or(num).trim().parse().ok()?,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for (s, want) in [
            ("4096", 4096),
            ("0x1000", 4096),
            ("0X1000", 4096),
            ("0xb", 11),
            ("4K", 4096),
            ("4k", 4096),
            ("4KiB", 4096),
            ("2 GiB", 2 << 30),
            ("1T", 1 << 40),
            ("512B", 512),
            ("1_000", 1000),
            ("0x1_0000", 65536),
            ("0", 0),
        ] {
            assert_eq!(parse_size(s), Some(want), "{s}");
        }
        for s in ["", "K", "4X", "-1", "0xZZ", "4.5K", "99999999999T", "lots"] {
            assert_eq!(parse_size(s), None, "{s}");
        }
    }
}
