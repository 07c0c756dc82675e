//! The one error type of the codec.
//!
//! Length errors (a buffer shorter than a length field or the fixed layout asks for)
//! are kept apart from content errors (a field whose value is reserved or inconsistent).
//! Both name what is wrong and where, so a tool can print one line that a person
//! can act on.

use core::fmt;

/// Everything that can go wrong while checking, parsing or emitting wire data.
///
/// `Error` is `Copy` and carries only `'static` strings, so returning it costs nothing
/// and it never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than required.
    ///
    /// `what` names the structure or length field that needs the bytes
    /// (e.g. `"TLP header"`, `"Length field payload"`).
    Truncated {
        /// What needs the bytes.
        what: &'static str,
        /// Bytes needed from the start of the packet.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// The buffer is longer than the packet it holds.
    Trailing {
        /// What the length was derived from.
        what: &'static str,
        /// Bytes the packet occupies.
        expected: usize,
        /// Bytes in the buffer.
        available: usize,
    },
    /// A field holds a value that is reserved, unsupported or inconsistent.
    Field {
        /// Spec name of the field (e.g. `"Fmt/Type"`, `"Length"`).
        field: &'static str,
        /// The offending value.
        value: u64,
        /// Byte offset of the field from the start of the packet.
        offset: usize,
        /// Why the value is not accepted.
        reason: &'static str,
    },
    /// A CRC (LCRC, ECRC or DLLP CRC) did not match.
    Crc {
        /// Which CRC.
        what: &'static str,
        /// CRC found in the packet.
        found: u32,
        /// CRC computed over the packet.
        computed: u32,
        /// Byte offset of the CRC field.
        offset: usize,
    },
    /// The output buffer passed to `emit` is too small.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// A value given to a constructor or encoder is out of range.
    Invalid {
        /// What was being built.
        what: &'static str,
        /// The value given.
        value: u64,
        /// What is allowed.
        allowed: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated {
                what,
                needed,
                available,
            } => write!(
                f,
                "truncated: {what} needs {needed} bytes, only {available} available"
            ),
            Error::Trailing {
                what,
                expected,
                available,
            } => write!(
                f,
                "trailing bytes: {what} gives {expected} bytes but the buffer holds {available}"
            ),
            Error::Field {
                field,
                value,
                offset,
                reason,
            } => write!(f, "bad {field} at byte {offset}: {value:#x} ({reason})"),
            Error::Crc {
                what,
                found,
                computed,
                offset,
            } => {
                // The DLLP CRC and the LCRC go on the wire least significant byte first:
                // say so, with the bytes as an analyzer shows them.
                let wire = |v: u32, n: usize| {
                    let b = v.to_le_bytes();
                    let hex: Vec<String> = b[..n].iter().map(|x| format!("{x:02x}")).collect();
                    hex.join(" ")
                };
                match what {
                    "DLLP CRC" | "LCRC" => {
                        let n = if what == "LCRC" { 4 } else { 2 };
                        write!(
                            f,
                            "{what} mismatch at byte {offset}: found {found:#x} (wire bytes {}), \
                             computed {computed:#x} (wire bytes {}); the value is sent least \
                             significant byte first",
                            wire(found, n),
                            wire(computed, n)
                        )
                    }
                    _ => write!(
                        f,
                        "{what} mismatch at byte {offset}: found {found:#x}, computed {computed:#x}"
                    ),
                }
            }
            Error::BufferTooSmall { needed, available } => write!(
                f,
                "output buffer too small: need {needed} bytes, have {available}"
            ),
            Error::Invalid {
                what,
                value,
                allowed,
            } if value > 9 => write!(
                f,
                "invalid {what}: {value} ({value:#x}) (allowed: {allowed})"
            ),
            Error::Invalid {
                what,
                value,
                allowed,
            } => write!(f, "invalid {what}: {value} (allowed: {allowed})"),
        }
    }
}

impl std::error::Error for Error {}

/// Result alias of the codec.
pub type Result<T> = core::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_errors_show_the_wire_bytes() {
        // A DLLP whose bytes 4-5 read "03 c0" on the wire.
        let d = crate::dllp::Packet::new_checked([0x80u8, 0, 0, 0x20, 0x03, 0xc0]).unwrap();
        let e = d.check_crc().unwrap_err();
        let s = e.to_string();
        assert!(s.contains("found 0xc003 (wire bytes 03 c0)"), "{s}");
        assert!(s.contains("least significant byte first"), "{s}");
    }

    #[test]
    fn invalid_values_are_shown_as_given_in_decimal_with_hex_beside() {
        let e = Error::Invalid {
            what: "Max_Payload_Size",
            value: 100,
            allowed: "128..=4096",
        };
        assert_eq!(
            e.to_string(),
            "invalid Max_Payload_Size: 100 (0x64) (allowed: 128..=4096)"
        );
        let e = Error::Invalid {
            what: "lane count",
            value: 3,
            allowed: "1, 2, 4, 8, 12, 16, 32",
        };
        assert_eq!(
            e.to_string(),
            "invalid lane count: 3 (allowed: 1, 2, 4, 8, 12, 16, 32)"
        );
    }
}
