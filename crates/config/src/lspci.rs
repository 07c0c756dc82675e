//! The text format of `lspci -x`, `-xxx` and `-xxxx`: writer and reader.
//!
//! ```text
//! 01:00.0 Memory controller: pcielab psmem      <- [domain:]bus:dev.fn, free text
//! 00: 50 c1 01 00 06 05 10 00 00 00 80 05 10 00 00 00
//! ...                                            <- 16 bytes a line, offset in hex
//! ff0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
//!                                                <- blank line between functions
//! ```
//!
//! `lspci -F FILE` reads this format back, so a dump written here can be decoded by
//! the real `lspci -vvv` and drawn by `lspci -t`.
//!
//! ```
//! use pcielab_config::lspci::{parse_dump, write_dump};
//! use pcielab_wire::Bdf;
//! let mut text = String::new();
//! let bytes: Vec<u8> = (0..=255).collect();
//! write_dump(&mut text, None, Bdf::new(1, 0, 0).unwrap(), "Memory controller: x", &bytes);
//! let back = parse_dump(&text).unwrap();
//! assert_eq!(back[0].bdf.to_string(), "01:00.0");
//! assert_eq!(back[0].bytes, bytes);
//! ```

use core::fmt::Write;
use pcielab_wire::Bdf;

/// One function of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// PCI domain (segment), when the dump names one.
    pub domain: Option<u16>,
    /// Bus, device, function.
    pub bdf: Bdf,
    /// The text after the address on the header line.
    pub description: String,
    /// The bytes dumped (64, 256 or 4096; missing bytes between lines read 0).
    pub bytes: Vec<u8>,
}

/// Why a dump could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

impl core::fmt::Display for DumpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for DumpError {}

/// Appends one function in `lspci -xxxx` format (followed by a blank line).
pub fn write_dump(
    out: &mut String,
    domain: Option<u16>,
    bdf: Bdf,
    description: &str,
    bytes: &[u8],
) {
    if let Some(d) = domain {
        let _ = write!(out, "{d:04x}:");
    }
    let _ = writeln!(out, "{bdf} {description}");
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:02x}:", i * 16);
        for b in chunk {
            let _ = write!(out, " {b:02x}");
        }
        out.push('\n');
    }
    out.push('\n');
}

fn parse_address(word: &str) -> Option<(Option<u16>, Bdf)> {
    let parts: Vec<&str> = word.split(':').collect();
    let (domain, bus, devfn) = match parts.as_slice() {
        [b, df] => (None, *b, *df),
        [d, b, df] => (Some(u16::from_str_radix(d, 16).ok()?), *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    if bus.len() > 2 || dev.len() > 2 || func.len() != 1 {
        return None;
    }
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    Some((domain, Bdf::new(bus, dev, func).ok()?))
}

/// Reads every function of a dump (`lspci -x`, `-xxx` or `-xxxx` output, any mix).
///
/// Lines that are neither an address line nor a hex line (e.g. `lspci -v` detail lines)
/// are skipped; a hex line before any address line, a malformed hex line or an offset
/// past 4096 is an error naming the line.
pub fn parse_dump(text: &str) -> Result<Vec<DumpEntry>, DumpError> {
    let mut out: Vec<DumpEntry> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        let t = line.trim_end();
        if t.is_empty() {
            continue;
        }
        // The first word and what follows it (leading whitespace, of any width, is
        // not part of either).
        let s = t.trim_start();
        let (first, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        // A hex line: "xx:" or "xxx:" followed by bytes.
        if let Some(off) = first.strip_suffix(':') {
            if !off.is_empty()
                && off.len() <= 3
                && off.chars().all(|c| c.is_ascii_hexdigit())
                && !t.starts_with(char::is_whitespace)
            {
                let offset = usize::from_str_radix(off, 16).map_err(|_| DumpError {
                    line: line_no,
                    reason: format!("bad offset {off:?}"),
                })?;
                let Some(entry) = out.last_mut() else {
                    return Err(DumpError {
                        line: line_no,
                        reason: "hex data before any bb:dd.f address line".into(),
                    });
                };
                for (at, word) in (offset..).zip(rest.split_whitespace()) {
                    let byte = u8::from_str_radix(word, 16)
                        .ok()
                        .filter(|_| word.len() == 2)
                        .ok_or_else(|| DumpError {
                            line: line_no,
                            reason: format!("{word:?} is not a hex byte (two hex digits)"),
                        })?;
                    if at >= 4096 {
                        return Err(DumpError {
                            line: line_no,
                            reason: format!(
                                "offset {at:#x} is past the 4096-byte configuration space"
                            ),
                        });
                    }
                    if entry.bytes.len() <= at {
                        entry.bytes.resize(at + 1, 0);
                    }
                    entry.bytes[at] = byte;
                }
                continue;
            }
        }
        if let Some((domain, bdf)) = parse_address(first) {
            out.push(DumpEntry {
                domain,
                bdf,
                description: rest.trim().to_string(),
                bytes: Vec::new(),
            });
        }
    }
    for e in &mut out {
        // Round up to the sizes lspci dumps.
        let len = match e.bytes.len() {
            0..=64 => 64,
            65..=256 => 256,
            _ => 4096,
        };
        e.bytes.resize(len, 0);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_lspci_layout() {
        let mut s = String::new();
        let bytes = vec![0xabu8; 4096];
        write_dump(&mut s, None, Bdf::new(0x12, 3, 4).unwrap(), "X: y", &bytes);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "12:03.4 X: y");
        assert_eq!(
            lines[1],
            "00: ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab"
        );
        assert!(lines[16].starts_with("f0: "));
        assert!(lines[17].starts_with("100: "));
        assert!(lines[256].starts_with("ff0: "));
        assert_eq!(lines[257], "");
        assert_eq!(lines.len(), 258);
    }

    #[test]
    fn reads_domains_and_sizes() {
        let text = "0000:00:1f.3 Audio device: something\n00: 86 80 c8 a3 06 04 10 00\n\n\
                    01:00.0 Foo\n00: 01 02\nf0: ff\n";
        let d = parse_dump(text).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].domain, Some(0));
        assert_eq!(d[0].bdf, Bdf::new(0, 0x1f, 3).unwrap());
        assert_eq!(d[0].bytes.len(), 64);
        assert_eq!(&d[0].bytes[..4], &[0x86, 0x80, 0xc8, 0xa3]);
        assert_eq!(d[1].bytes.len(), 256);
        assert_eq!(d[1].bytes[0xf0], 0xff);
    }

    proptest::proptest! {
        /// Bad input never panics: the reader and the decoder take anything (lines
        /// may start with whitespace, some of it wider than a byte).
        #[test]
        fn reader_and_decoder_never_panic(text in "[ \t\u{85}\u{a0}\u{2003}]{0,2}(([0-9a-f]{1,3}:( [0-9a-fz]{1,3}){0,20})|(0000:)?[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9] x|\\PC{0,20})(\n[ \t\u{85}\u{a0}\u{2003}]{0,2}(([0-9a-f]{1,3}:( [0-9a-f]{2}){0,17})|[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7] y|\\PC{0,10})){0,30}",
                                         bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..4200)) {
            if let Ok(entries) = parse_dump(&text) {
                for e in entries {
                    proptest::prop_assert!(matches!(e.bytes.len(), 64 | 256 | 4096));
                    let _ = crate::decode::describe(&e.bytes);
                }
            }
            let _ = crate::decode::describe(&bytes);
            let _ = crate::caps::walk(&bytes);
        }
    }

    /// Leading whitespace of any width before an address line (here U+0085, two bytes
    /// in UTF-8, which used to make the description's slice panic) is not part of the
    /// address or the description.
    #[test]
    fn leading_whitespace_before_an_address_line() {
        let d = parse_dump("\u{85}\u{85} 00:00.0 Host bridge: pcielab rc\n00: ee 1f\n").unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].bdf, Bdf::new(0, 0, 0).unwrap());
        assert_eq!(d[0].description, "Host bridge: pcielab rc");
        assert_eq!(&d[0].bytes[..2], &[0xee, 0x1f]);
        let d = parse_dump("  01:02.3   Spaced   \n").unwrap();
        assert_eq!(d[0].description, "Spaced");
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_dump("00: 01 02\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = parse_dump("00:00.0 x\n00: 01 zz\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("zz"));
        let e = parse_dump("00:00.0 x\nff0: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00\n")
            .unwrap_err();
        assert!(e.reason.contains("past"));
    }
}
