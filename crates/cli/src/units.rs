//! Byte sizes on the command line: `4096`, `0x1000`, `4K`, `4KiB`, `4k`, `1M`, `1MiB`,
//! `1G`, `1GiB` (K, M and G are binary: 1024, 1024², 1024³), with `_` separators.

/// Parses a byte size.
///
/// ```text
/// 4096, 0x1000, 4K, 4KiB, 4kib, 4k  →  4096
/// 1M, 1MiB                          →  1048576
/// ```
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let bad = || {
        format!(
            "{s:?} is not a byte size (decimal, 0x-hex, or a number with K, M or G, \
             e.g. 4096, 0x1000, 4K, 4KiB, 1GiB)"
        )
    };
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).map_err(|_| bad());
    }
    let lower = t.to_ascii_lowercase();
    let (num, mult) = [("kib", 1u64 << 10), ("mib", 1 << 20), ("gib", 1 << 30)]
        .into_iter()
        .chain([("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("b", 1)])
        .find_map(|(suffix, m)| lower.strip_suffix(suffix).map(|n| (n.to_string(), m)))
        .unwrap_or((lower, 1));
    let n: u64 = num.trim().parse().map_err(|_| bad())?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_decimal_hex_and_separators() {
        for (s, want) in [
            ("4096", 4096),
            ("0x1000", 4096),
            ("0X1000", 4096),
            ("4K", 4096),
            ("4k", 4096),
            ("4KiB", 4096),
            ("4kib", 4096),
            ("1M", 1 << 20),
            ("1MiB", 1 << 20),
            ("2G", 2 << 30),
            ("1_000", 1000),
            ("512B", 512),
            ("0", 0),
        ] {
            assert_eq!(parse_bytes(s), Ok(want), "{s}");
        }
        for s in ["", "K", "4X", "-1", "0xZZ", "4.5K", "99999999999G"] {
            assert!(parse_bytes(s).is_err(), "{s}");
        }
    }
}
