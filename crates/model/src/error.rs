//! The error type of the model: every rejected input names the parameter, the value and
//! what would have been accepted, so the CLI can print it as one line.

use core::fmt;

/// A parameter of the model was given a value the model (or the PCIe specification) does
/// not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// A configuration value outside the allowed set.
    Invalid {
        /// The parameter (e.g. `"MPS"`, `"lane count"`).
        what: &'static str,
        /// The value given.
        value: u64,
        /// The values that are accepted.
        allowed: &'static str,
    },
    /// A time or rate parameter that must be a finite, non-negative number was not.
    NotFinite {
        /// The parameter (e.g. `"memory latency (ns)"`).
        what: &'static str,
    },
    /// A size or count that must be at least one was zero.
    Zero {
        /// The parameter (e.g. `"transfer size"`).
        what: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Invalid {
                what,
                value,
                allowed,
            } => write!(f, "invalid {what} {value}: allowed {allowed}"),
            Error::NotFinite { what } => {
                write!(f, "invalid {what}: must be a finite number ≥ 0")
            }
            Error::Zero { what } => write!(f, "invalid {what} 0: must be at least 1"),
        }
    }
}

impl std::error::Error for Error {}

impl From<pcielab_wire::Error> for Error {
    fn from(e: pcielab_wire::Error) -> Error {
        match e {
            pcielab_wire::Error::Invalid {
                what,
                value,
                allowed,
            } => Error::Invalid {
                what,
                value,
                allowed,
            },
            // The only wire constructor the model calls is `Generation::from_number`,
            // which fails with `Invalid` alone; keep a faithful fallback anyway.
            _ => Error::Invalid {
                what: "wire value",
                value: 0,
                allowed: "a valid value",
            },
        }
    }
}

/// Result alias of the model.
pub type Result<T> = core::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_name_the_parameter() {
        let e = Error::Invalid {
            what: "MPS",
            value: 100,
            allowed: "128, 256, 512, 1024, 2048, 4096",
        };
        assert_eq!(
            e.to_string(),
            "invalid MPS 100: allowed 128, 256, 512, 1024, 2048, 4096"
        );
        assert_eq!(
            Error::Zero {
                what: "transfer size"
            }
            .to_string(),
            "invalid transfer size 0: must be at least 1"
        );
        let g: Error = pcielab_wire::Generation::from_number(7).unwrap_err().into();
        assert_eq!(g.to_string(), "invalid PCIe generation 7: allowed 1..=6");
    }
}
