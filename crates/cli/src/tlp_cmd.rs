//! `pcielab tlp decode|encode`.

use crate::format::Format;
use crate::{each_input, each_record, fail, parse_json, Failure};
use clap::{Args, Subcommand};
use pcielab_wire::json::{hex, tlp_from_json, tlp_to_json, unhex};
use pcielab_wire::tlp::check::{check_rx, RxRules};
use pcielab_wire::tlp::{ParseOptions, TlpPacket, TlpRepr};

/// TLP subcommands.
#[derive(Subcommand, Debug)]
pub enum TlpCmd {
    /// Decode TLP bytes (hex) into a tcpdump-style line or JSON.
    Decode(DecodeArgs),
    /// Encode a JSON TLP into hex bytes.
    Encode(EncodeArgs),
}

/// Arguments of `tlp decode`.
#[derive(Args, Debug)]
pub struct DecodeArgs {
    /// The TLP as hex, as pasted from an analyzer: separators (spaces, ',', ':', '-', '_')
    /// and 0x prefixes on any group allowed.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub hex: Option<String>,
    /// A file with one hex TLP per line ('#' comments and blank lines skipped; '-' is stdin).
    #[arg(long)]
    pub file: Option<String>,
    /// Output format: table (one line of text per packet), csv (one record per line) or
    /// json (one object per line).
    #[arg(long, value_enum, conflicts_with = "json")]
    pub format: Option<Format>,
    /// Same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Also apply the receiver's Malformed-TLP rules with this Max_Payload_Size in bytes.
    #[arg(long, value_name = "MPS")]
    pub check: Option<u16>,
    /// Do not verify the ECRC of TLPs with TD set.
    #[arg(long)]
    pub no_ecrc_check: bool,
}

/// Arguments of `tlp encode`.
#[derive(Args, Debug)]
pub struct EncodeArgs {
    /// The TLP as a JSON object (the field names of `tlp decode --json`).
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
    let pkt = TlpPacket::new_checked(&bytes[..]).map_err(|e| fail(format!("{where_}{e}")))?;
    let repr = TlpRepr::parse_with(
        &pkt,
        ParseOptions {
            check_ecrc: !args.no_ecrc_check,
        },
    )
    .map_err(|e| fail(format!("{where_}{e}")))?;
    if let Some(mps) = args.check {
        let rules = RxRules {
            mps,
            check_ecrc: !args.no_ecrc_check,
            ..RxRules::default()
        };
        check_rx(&bytes, &rules).map_err(|m| fail(format!("{where_}{m}")))?;
    }
    Ok((repr.to_string(), tlp_to_json(&repr)))
}

/// Runs a TLP subcommand.
pub fn run(cmd: &TlpCmd) -> Result<(), Failure> {
    match cmd {
        TlpCmd::Decode(args) => {
            let format = crate::format::effective(args.format, args.json, false);
            each_record(
                args.hex.as_deref(),
                args.file.as_deref(),
                format,
                |text, at| decode_one(text, args, at),
            )
        }
        TlpCmd::Encode(args) => {
            each_input(args.json.as_deref(), args.file.as_deref(), |text, at| {
                let bytes =
                    tlp_from_json(&parse_json(text, at)?).map_err(|e| fail(format!("{at}{e}")))?;
                Ok(hex(&bytes))
            })
        }
    }
}
