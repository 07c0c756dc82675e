//! `pcielab dllp decode|encode`.

use crate::format::Format;
use crate::{each_input, each_record, fail, parse_json, Failure};
use clap::{Args, Subcommand};
use pcielab_wire::dllp::{json, DllpRepr, Packet};
use pcielab_wire::json::{hex, unhex};

/// DLLP subcommands.
#[derive(Subcommand, Debug)]
pub enum DllpCmd {
    /// Decode a 6-byte DLLP (hex) into a line of text or JSON; the CRC is checked.
    Decode(DecodeArgs),
    /// Encode a JSON DLLP into hex bytes (the CRC is computed).
    Encode(EncodeArgs),
}

/// Arguments of `dllp decode`.
#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// The DLLP as hex, as pasted from an analyzer: separators (spaces, ',', ':', '-', '_')
    /// and 0x prefixes on any group allowed.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub hex: Option<String>,
    /// A file with one hex DLLP per line ('-' is stdin).
    #[arg(long)]
    pub file: Option<String>,
    /// Output format: table (one line of text per packet), csv (one record per line) or
    /// json (one object per line).
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<Format>,
    /// Same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Do not check the 16-bit CRC.
    #[arg(long)]
    pub no_crc_check: bool,
}

/// Arguments of `dllp encode`.
#[derive(Args, Debug)]
pub struct EncodeArgs {
    /// The DLLP as a JSON object (the field names of `dllp decode --json`).
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub json: Option<String>,
    /// A file of JSON objects, one per line ('-' is stdin).
    #[arg(long)]
    pub file: Option<String>,
}

fn decode_one(
    text: &str,
    args: &DecodeArgs,
    where_: &str,
) -> Result<(String, serde_json::Value), Failure> {
    let bytes = unhex(text).map_err(|e| fail(format!("{where_}bad hex: {e}")))?;
    let pkt = Packet::new_checked(&bytes[..]).map_err(|e| fail(format!("{where_}{e}")))?;
    let repr = if args.no_crc_check {
        DllpRepr::parse_ignoring_crc(&pkt)
    } else {
        DllpRepr::parse(&pkt)
    }
    .map_err(|e| fail(format!("{where_}{e}")))?;
    Ok((repr.to_string(), json::to_json(&repr)))
}

/// Runs a DLLP subcommand.
pub fn run(cmd: &DllpCmd) -> Result<(), Failure> {
    match cmd {
        DllpCmd::Decode(args) => {
            let format = crate::format::effective(args.format, args.json, false);
            each_record(
                args.hex.as_deref(),
                args.file.as_deref(),
                format,
                |text, at| decode_one(text, args, at),
            )
        }
        DllpCmd::Encode(args) => {
            each_input(args.json.as_deref(), args.file.as_deref(), |text, at| {
                let d = json::from_json(&parse_json(text, at)?)
                    .map_err(|e| fail(format!("{at}{e}")))?;
                let b = d.to_bytes().map_err(|e| fail(format!("{at}{e}")))?;
                Ok(hex(&b))
            })
        }
    }
}
