//! A small control socket for a running adapter: text commands over UDP from loopback.
//!
//! | command | reply |
//! | --- | --- |
//! | `read OFF LEN` | `ok HEX` — host MMIO read of BAR4 |
//! | `write OFF HEX` | `ok` — host MMIO write to BAR4 |
//! | `mem-read ADDR LEN` / `mem-write ADDR HEX` | host memory access |
//! | `irqs` | `ok` and one interrupt per line |
//! | `stats` | `ok {json}` |
//! | `stop` | `ok`, then the adapter stops |
//!
//! Errors are `err MESSAGE`.
//!
//! ```
//! use pcielab_nettlp::control::{parse_hex, to_hex};
//! assert_eq!(parse_hex("00ff10").unwrap(), vec![0, 255, 16]);
//! assert_eq!(to_hex(&[0xab, 1]), "ab01");
//! assert!(parse_hex("abc").is_err());
//! ```

use crate::adapter::Adapter;
use crate::memory::parse_num;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Hex string to bytes.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return Err(format!("hex {s:?} has an odd number of digits"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| format!("bad hex digits {:?} at {i}", &s[i..i + 2]))
        })
        .collect()
}

/// Bytes to a lowercase hex string.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Executes one command line against `a`.
pub fn execute(a: &Adapter, line: &str) -> String {
    match execute_inner(a, line) {
        Ok(s) => s,
        Err(e) => format!("err {e}"),
    }
}

fn num(w: Option<&str>, what: &str) -> Result<u64, String> {
    let w = w.ok_or_else(|| format!("missing {what}"))?;
    parse_num(w).ok_or_else(|| format!("bad {what} {w:?}"))
}

fn execute_inner(a: &Adapter, line: &str) -> Result<String, String> {
    let mut w = line.split_whitespace();
    match w.next().unwrap_or("") {
        "read" => {
            let off = num(w.next(), "offset")?;
            let len = num(w.next(), "length")?;
            if len == 0 || len > 1 << 20 {
                return Err("length must be 1..=1M".into());
            }
            let mut b = vec![0u8; len as usize];
            a.mmio_read(off, &mut b).map_err(|e| e.to_string())?;
            Ok(format!("ok {}", to_hex(&b)))
        }
        "write" => {
            let off = num(w.next(), "offset")?;
            let d = parse_hex(w.next().ok_or("missing data")?)?;
            a.mmio_write(off, &d).map_err(|e| e.to_string())?;
            Ok("ok".into())
        }
        "mem-read" => {
            let addr = num(w.next(), "address")?;
            let len = num(w.next(), "length")?;
            if len > 1 << 20 {
                return Err("length must be ≤ 1M".into());
            }
            let mut b = vec![0u8; len as usize];
            a.memory().read(addr, &mut b);
            Ok(format!("ok {}", to_hex(&b)))
        }
        "mem-write" => {
            let addr = num(w.next(), "address")?;
            let d = parse_hex(w.next().ok_or("missing data")?)?;
            a.memory().write(addr, &d);
            Ok("ok".into())
        }
        "irqs" => {
            let v: Vec<String> = a.take_interrupts().iter().map(|i| i.to_string()).collect();
            Ok(format!("ok {}", v.join("\n")))
        }
        "stats" => Ok(format!("ok {}", a.stats().to_json())),
        "stop" => {
            a.request_stop();
            Ok("ok".into())
        }
        other => Err(format!(
            "unknown command {other:?}: use read, write, mem-read, mem-write, irqs, stats or stop"
        )),
    }
}

/// Serves commands on `addr` (a loopback address) until the adapter stops.
pub fn serve(a: Arc<Adapter>, addr: SocketAddr) -> io::Result<JoinHandle<()>> {
    let s = UdpSocket::bind(addr)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    std::thread::Builder::new()
        .name("adapter-control".into())
        .spawn(move || {
            let mut b = [0u8; 65536];
            while !a.stop_requested() {
                let Ok((n, peer)) = s.recv_from(&mut b) else {
                    continue;
                };
                if !peer.ip().is_loopback() {
                    continue;
                }
                let line = String::from_utf8_lossy(&b[..n]).to_string();
                let reply = execute(&a, &line);
                let _ = s.send_to(reply.as_bytes(), peer);
            }
        })
}

/// Sends one command to a control socket and returns the reply.
pub fn request(addr: SocketAddr, line: &str, timeout: Duration) -> io::Result<String> {
    let s = UdpSocket::bind(SocketAddr::new(addr.ip(), 0))?;
    s.set_read_timeout(Some(timeout))?;
    s.send_to(line.as_bytes(), addr)?;
    let mut b = vec![0u8; 1 << 21];
    let n = s.recv(&mut b).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("no reply from the control socket {addr}: {e}"),
        )
    })?;
    Ok(String::from_utf8_lossy(&b[..n]).to_string())
}
