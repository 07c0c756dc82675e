//! Byte sizes on the command line, as in topology files and the adapter's control
//! commands ([`pcielab_wire::size::parse_size`]): `4096`, `0x1000`, `4K`, `4KiB`, `4k`,
//! `1M`, `1MiB`, `1G`, `1GiB` (binary units), with `_` separators; and
//! size ranges for `--sizes`, which mean the same in every command:
//!
//! | form | sizes |
//! |---|---|
//! | `N` | N |
//! | `A:B` | A, A+1, …, B (every size) |
//! | `A:B:S` | A, A+S, A+2S, … ≤ B |
//! | `A:B:xF` | A, A·F, A·F², … ≤ B (`x2`: powers of two from A) |
//!
//! And spans of wall-clock time in seconds ([`parse_seconds`]).

/// Parses a byte size.
///
/// ```text
/// 4096, 0x1000, 4K, 4KiB, 4kib, 4k  →  4096
/// 1M, 1MiB                          →  1048576
/// ```
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    pcielab_wire::size::parse_size(s).ok_or_else(|| {
        format!(
            "{s:?} is not a byte size (decimal, 0x-hex, or a number with K, M, G or T, \
             e.g. 4096, 0x1000, 4K, 4KiB, 1GiB)"
        )
    })
}

/// [`parse_bytes`] for a flag held in 16 bits (MPS, MRRS, RCB).
pub fn parse_bytes_u16(s: &str) -> Result<u16, String> {
    let n = parse_bytes(s)?;
    u16::try_from(n).map_err(|_| format!("{s:?}: {n} is too large (at most 65535)"))
}

/// [`parse_bytes`] for a flag held in 32 bits.
pub fn parse_bytes_u32(s: &str) -> Result<u32, String> {
    let n = parse_bytes(s)?;
    u32::try_from(n).map_err(|_| format!("{s:?}: {n} is too large (at most 4294967295)"))
}

/// The longest span of wall-clock time a flag takes: a day.
pub const MAX_SECONDS: f64 = 86_400.0;

/// Parses a span of wall-clock time in seconds (`2`, `0.5`, `1e-3`): a finite number
/// from 0 to [`MAX_SECONDS`]. NaN, infinities and negative numbers are refused (they
/// would mean "never", "at once" or a panic where a `Duration` is made of them).
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (e.g. 2 or 0.5)"))?;
    if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{s:?}: seconds must be a number from 0 to {MAX_SECONDS}"
        ))
    }
}

/// [`parse_seconds`] for a period, which must be above 0.
pub fn parse_period(s: &str) -> Result<f64, String> {
    match parse_seconds(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("{s:?}: a period must be above 0 seconds")),
    }
}

/// Parses a `--sizes` range (see the module doc) of sizes in `1..=max_size`, refusing
/// one of more than `max_points` sizes. Errors name the flag and what is wrong.
pub fn parse_size_range(s: &str, max_size: u64, max_points: u64) -> Result<Vec<u64>, String> {
    let bad = |why: String| {
        format!("--sizes {s:?}: {why} (expected N, A:B, A:B:STEP or A:B:xFACTOR, e.g. 64:4096:x2)")
    };
    let parts: Vec<&str> = s.split(':').collect();
    let num = |p: &str| parse_bytes(p).map_err(&bad);
    let (from, to) = match parts.as_slice() {
        [one] => (num(one)?, num(one)?),
        [a, b] | [a, b, _] => (num(a)?, num(b)?),
        _ => return Err(bad("too many ':'".into())),
    };
    if from == 0 {
        return Err(bad("sizes must be at least 1 byte".into()));
    }
    if to < from {
        return Err(bad(format!("{to} is less than {from}")));
    }
    if to > max_size {
        return Err(bad(format!("{to} is above the largest size, {max_size}")));
    }
    let step = parts.get(2).map(|x| x.trim());
    let sizes: Vec<u64> = match step {
        Some(f) if f.starts_with(['x', 'X']) => {
            let factor: u64 = f[1..]
                .parse()
                .ok()
                .filter(|&k| k >= 2)
                .ok_or_else(|| bad(format!("factor {f:?} must be x2 or more")))?;
            std::iter::successors(Some(from), |&x| x.checked_mul(factor))
                .take_while(|&x| x <= to)
                .collect()
        }
        _ => {
            let step = match step {
                Some(t) => num(t)?,
                None => 1,
            };
            if step == 0 {
                return Err(bad("STEP must be at least 1".into()));
            }
            if (to - from) / step + 1 > max_points {
                return Err(bad(format!("more than {max_points} sizes")));
            }
            (from..=to).step_by(step as usize).collect()
        }
    };
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_finite_and_within_a_day() {
        assert_eq!(parse_seconds("2"), Ok(2.0));
        assert_eq!(parse_seconds(" 0.5 "), Ok(0.5));
        assert_eq!(parse_seconds("0"), Ok(0.0));
        assert_eq!(parse_seconds("86400"), Ok(86_400.0));
        for bad in [
            "nan", "NaN", "inf", "-inf", "-1", "86401", "1e300", "", "2s",
        ] {
            let e = parse_seconds(bad).expect_err(bad);
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        assert_eq!(parse_period("0.25"), Ok(0.25));
        assert!(parse_period("0").unwrap_err().contains("above 0"));
        assert!(parse_period("nan").is_err());
    }

    #[test]
    fn size_ranges_mean_the_same_everywhere() {
        let r = |s| parse_size_range(s, 1 << 20, 10_000);
        assert_eq!(r("64"), Ok(vec![64]));
        assert_eq!(r("1:4"), Ok(vec![1, 2, 3, 4]));
        assert_eq!(r("64:256:64"), Ok(vec![64, 128, 192, 256]));
        assert_eq!(r("64:4K:x2"), Ok(vec![64, 128, 256, 512, 1024, 2048, 4096]));
        assert_eq!(r("3:100:x3"), Ok(vec![3, 9, 27, 81]));
        assert_eq!(r("0x40:0x41"), Ok(vec![64, 65]));
        assert_eq!(r("1K:2KiB:512"), Ok(vec![1024, 1536, 2048]));
        for (bad, why) in [
            ("0:10", "at least 1 byte"),
            ("10:1", "less than"),
            ("1:10:0", "STEP"),
            ("1:10:x1", "x2 or more"),
            ("1:10:xx", "x2 or more"),
            ("a:b", "not a byte size"),
            ("1:2:3:4", "too many"),
            ("", "not a byte size"),
            ("1:2M", "largest size"),
            ("1:20000", "more than 10000 sizes"),
        ] {
            let e = r(bad).unwrap_err();
            assert!(e.contains(why) && e.starts_with("--sizes"), "{bad}: {e}");
        }
    }

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
        for s in ["", "K", "4X", "-1", "0xZZ", "4.5K", "99999999999T"] {
            assert!(parse_bytes(s).is_err(), "{s}");
        }
    }
}
