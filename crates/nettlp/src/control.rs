//! The control socket of a running adapter: text commands over TCP on a loopback
//! address, from allow-listed sources, with a secret token.
//!
//! Access (see the threat model in the crate README): the socket is bound to a loopback
//! address only ([`serve`] refuses any other); a connection from a source outside the
//! adapter's allow-list ([`AdapterConfig::allowed`](crate::adapter::AdapterConfig::allowed)
//! plus the control address itself) is closed unanswered; and every request starts with
//! a 128-bit random token that [`serve`] writes to a token file only its user can read
//! (mode 0600, in `$XDG_RUNTIME_DIR` or a 0700 directory of the user's own, see
//! [`default_token_path`]). So only processes of the same user (or root) on the same
//! machine can command the adapter.
//!
//! Wire format: the client sends one line `TOKEN COMMAND ARGS\n`; the adapter answers
//! with the reply and closes its side (TCP: replies of any size, e.g. a 1 MiB read as
//! 2 MiB of hex). After an `irqs` reply the client sends `ack\n`; the interrupts it
//! listed are removed only then, so a reply that is not delivered loses nothing.
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
//! // Multi-byte characters are bad digits, never a panic.
//! assert!(parse_hex("aéa").is_err());
//! ```

use crate::adapter::Adapter;
use crate::memory::parse_num;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Hex string to bytes.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return Err(format!("hex {s:?} has an odd number of digits"));
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .enumerate()
        .map(|(i, p)| match (digit(p[0]), digit(p[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(format!(
                "bad hex digits {:?} at byte {}",
                String::from_utf8_lossy(p),
                2 * i
            )),
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

/// A control command, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `read OFF LEN`: host MMIO read of BAR4 (1 byte to 1 MiB).
    Read {
        /// BAR4 offset.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// `write OFF HEX`: host MMIO write to BAR4.
    Write {
        /// BAR4 offset.
        offset: u64,
        /// Data.
        data: Vec<u8>,
    },
    /// `mem-read ADDR LEN`: host memory (up to 1 MiB).
    MemRead {
        /// Host address.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// `mem-write ADDR HEX`: host memory.
    MemWrite {
        /// Host address.
        addr: u64,
        /// Data.
        data: Vec<u8>,
    },
    /// `irqs`: the pending interrupts.
    Irqs,
    /// `stats`: the counters as JSON.
    Stats,
    /// `stop`: stop the adapter.
    Stop,
}

impl Command {
    /// The command as a line [`parse_command`] reads back.
    pub fn to_line(&self) -> String {
        match self {
            Command::Read { offset, len } => format!("read {offset:#x} {len}"),
            Command::Write { offset, data } => format!("write {offset:#x} {}", to_hex(data)),
            Command::MemRead { addr, len } => format!("mem-read {addr:#x} {len}"),
            Command::MemWrite { addr, data } => format!("mem-write {addr:#x} {}", to_hex(data)),
            Command::Irqs => "irqs".into(),
            Command::Stats => "stats".into(),
            Command::Stop => "stop".into(),
        }
    }
}

/// Parses one command line; the error names what is wrong.
///
/// ```
/// use pcielab_nettlp::control::{parse_command, Command};
/// assert_eq!(parse_command("read 0x10 4"), Ok(Command::Read { offset: 16, len: 4 }));
/// assert!(parse_command("read 0x10 2M").is_err());
/// assert!(parse_command("mem-write 0 0g").is_err());
/// ```
pub fn parse_command(line: &str) -> Result<Command, String> {
    let mut w = line.split_whitespace();
    let cmd = match w.next().unwrap_or("") {
        "read" => {
            let offset = num(w.next(), "offset")?;
            let len = num(w.next(), "length")?;
            if len == 0 || len > 1 << 20 {
                return Err("length must be 1..=1M".into());
            }
            Command::Read { offset, len }
        }
        "write" => {
            let offset = num(w.next(), "offset")?;
            let data = parse_hex(w.next().ok_or("missing data")?)?;
            Command::Write { offset, data }
        }
        "mem-read" => {
            let addr = num(w.next(), "address")?;
            let len = num(w.next(), "length")?;
            if len > 1 << 20 {
                return Err("length must be ≤ 1M".into());
            }
            Command::MemRead { addr, len }
        }
        "mem-write" => {
            let addr = num(w.next(), "address")?;
            let data = parse_hex(w.next().ok_or("missing data")?)?;
            Command::MemWrite { addr, data }
        }
        "irqs" => Command::Irqs,
        "stats" => Command::Stats,
        "stop" => Command::Stop,
        other => {
            return Err(format!(
            "unknown command {other:?}: use read, write, mem-read, mem-write, irqs, stats or stop"
        ))
        }
    };
    match w.next() {
        Some(extra) => Err(format!("unexpected {extra:?} after the command")),
        None => Ok(cmd),
    }
}

fn execute_inner(a: &Adapter, line: &str) -> Result<String, String> {
    match parse_command(line)? {
        Command::Read { offset, len } => {
            let mut b = vec![0u8; len as usize];
            a.mmio_read(offset, &mut b).map_err(|e| e.to_string())?;
            Ok(format!("ok {}", to_hex(&b)))
        }
        Command::Write { offset, data } => {
            a.mmio_write(offset, &data).map_err(|e| e.to_string())?;
            Ok("ok".into())
        }
        Command::MemRead { addr, len } => {
            let mut b = vec![0u8; len as usize];
            a.memory().read(addr, &mut b);
            Ok(format!("ok {}", to_hex(&b)))
        }
        Command::MemWrite { addr, data } => {
            a.memory().write(addr, &data);
            Ok("ok".into())
        }
        Command::Irqs => {
            let v: Vec<String> = a.take_interrupts().iter().map(|i| i.to_string()).collect();
            Ok(format!("ok {}", v.join("\n")))
        }
        Command::Stats => Ok(format!("ok {}", a.stats().to_json())),
        Command::Stop => {
            a.request_stop();
            Ok("ok".into())
        }
    }
}

/// Longest request line accepted (a `mem-write` of 1 MiB is 2 MiB of hex).
const MAX_REQUEST: u64 = 4 << 20;
/// How long one connection may take to send its request or its acknowledgement.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The token file of a control socket at `addr` when none is given:
/// `$XDG_RUNTIME_DIR/pcielab-adapter-IP-PORT.token`, or, without `XDG_RUNTIME_DIR`,
/// the same name in `TMPDIR/pcielab-UID` (a directory [`serve`] creates with mode 0700
/// and checks is the user's own).
pub fn default_token_path(addr: SocketAddr) -> PathBuf {
    let name = format!("pcielab-adapter-{}-{}.token", addr.ip(), addr.port());
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_dir() => Path::new(&d).join(name),
        _ => std::env::temp_dir()
            .join(format!("pcielab-{}", uid()))
            .join(name),
    }
}

fn uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Makes `dir` (mode 0700) unless it exists; refuses one that is not a directory of
/// ours, or that others may write to.
fn private_dir(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(dir)?;
            Ok(())
        }
        Err(e) => Err(e),
        Ok(m) if !m.is_dir() || m.uid() != uid() || m.mode() & 0o022 != 0 => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not a directory of this user that only it can write (mode {:o}, owner {})",
                dir.display(),
                m.mode() & 0o7777,
                m.uid()
            ),
        )),
        Ok(_) => Ok(()),
    }
}

/// A fresh 128-bit token as 32 hex digits (from the kernel's random source).
fn new_token() -> io::Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(to_hex(&b))
}

/// Writes `token` to `path` with mode 0600 (replacing an old token file of ours; never
/// following a symbolic link).
fn write_token(path: &Path, token: &str) -> io::Result<()> {
    // A missing directory is made private; our own per-user one must still be private.
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let ours = d
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("pcielab-"));
        if !d.exists() || ours {
            private_dir(d)?;
        }
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.is_file() || m.uid() != uid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{}: exists and is not a token file of this user",
                    path.display()
                ),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(token.as_bytes())?;
    f.write_all(b"\n")
}

/// Reads a token file (the first line).
pub fn read_token(path: &Path) -> io::Result<String> {
    let t = std::fs::read_to_string(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "reading the control token {}: {e} (is the adapter running, as this user?)",
                path.display()
            ),
        )
    })?;
    Ok(t.lines().next().unwrap_or("").trim().to_string())
}

/// Compares without an early exit, so the time taken says nothing about the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// A running control socket; the token file is removed when it stops.
#[derive(Debug)]
pub struct ControlServer {
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
    token_file: PathBuf,
}

impl ControlServer {
    /// The bound address (with the port the kernel chose when 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The token file.
    pub fn token_file(&self) -> &Path {
        &self.token_file
    }

    /// Waits for the serving thread, which ends once the adapter is asked to stop.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.token_file);
    }
}

/// Serves commands on `addr` (a loopback address) until the adapter stops. A new token
/// is written to `token_file` ([`default_token_path`] when None).
pub fn serve(
    a: Arc<Adapter>,
    addr: SocketAddr,
    token_file: Option<&Path>,
) -> io::Result<ControlServer> {
    if !addr.ip().is_loopback() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("control address {addr} is not a loopback address"),
        ));
    }
    let token_file = token_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_token_path(addr));
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let token = new_token()?;
    write_token(&token_file, &token)?;
    let mut allowed: Vec<IpAddr> = a.config().allowed().into_iter().map(IpAddr::V4).collect();
    allowed.push(addr.ip());
    let thread = std::thread::Builder::new()
        .name("adapter-control".into())
        .spawn(move || {
            let mut refused = std::collections::HashSet::new();
            while !a.stop_requested() {
                let (conn, peer) = match listener.accept() {
                    Ok(c) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                if !allowed.contains(&peer.ip()) {
                    if refused.len() < 1024 && refused.insert(peer.ip()) {
                        eprintln!(
                            "adapter: control socket: refusing a connection from {} (not on the allow-list {allowed:?})",
                            peer.ip()
                        );
                    }
                    continue; // dropping `conn` closes it unanswered
                }
                let _ = handle(&a, conn, &token);
            }
        })?;
    Ok(ControlServer {
        thread: Some(thread),
        addr,
        token_file,
    })
}

fn handle(a: &Adapter, conn: TcpStream, token: &str) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(IO_TIMEOUT))?;
    conn.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut r = BufReader::new(conn.try_clone()?).take(MAX_REQUEST);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut w = &conn;
    let (tok, cmd) = line
        .trim_end()
        .split_once(' ')
        .unwrap_or((line.trim_end(), ""));
    if !same(tok.as_bytes(), token.as_bytes()) {
        std::thread::sleep(Duration::from_millis(100)); // no fast guessing
        w.write_all(b"err bad or missing control token")?;
        return conn.shutdown(std::net::Shutdown::Both);
    }
    if parse_command(cmd) == Ok(Command::Irqs) {
        let (irqs, mark) = a.peek_interrupts();
        let v: Vec<String> = irqs.iter().map(|i| i.to_string()).collect();
        w.write_all(format!("ok {}", v.join("\n")).as_bytes())?;
        conn.shutdown(std::net::Shutdown::Write)?;
        let mut ack = String::new();
        r.read_line(&mut ack)?;
        if ack.trim() == "ack" {
            a.remove_interrupts_through(mark);
        }
        return Ok(());
    }
    w.write_all(execute(a, cmd).as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)
}

/// Sends one command to a control socket, with the token read from `token_file`
/// ([`default_token_path`] when None), and returns the reply.
pub fn request(
    addr: SocketAddr,
    token_file: Option<&Path>,
    line: &str,
    timeout: Duration,
) -> io::Result<String> {
    let path = token_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_token_path(addr));
    let token = read_token(&path)?;
    let ctx = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("control socket {addr}: {e} (is the adapter running?)"),
        )
    };
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(ctx)?;
    let end = Instant::now() + timeout;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(format!("{token} {}\n", line.trim()).as_bytes())
        .map_err(ctx)?;
    let mut reply = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("control socket {addr}: no complete reply within {timeout:?}"),
            ));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && reply.is_empty() => break,
            Err(e) => return Err(ctx(e)),
        }
    }
    if reply.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!(
                "control socket {addr} closed the connection unanswered (is this source on the adapter's allow-list?)"
            ),
        ));
    }
    // Delivered: let the adapter forget what it listed (interrupts).
    let _ = s.write_all(b"ack\n");
    Ok(String::from_utf8_lossy(&reply).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_round_trip() {
        let cases = [
            "read 0x10 4",
            "write 0x21 cafe0042",
            "mem-read 0 1M",
            "mem-write 0x5000 41414141",
            "irqs",
            "stats",
            "stop",
        ];
        for c in cases {
            let p = parse_command(c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(parse_command(&p.to_line()), Ok(p), "{c}");
        }
        assert_eq!(
            parse_command("mem-read 16 2"),
            Ok(Command::MemRead { addr: 16, len: 2 })
        );
        for bad in [
            "",
            "read 0",
            "read 0 0",
            "read 0 2M",
            "mem-read 0 1025K",
            "write 0 abc",
            "write 0 aéa",
            "mem-write 0x10",
            "irqs now",
            "reboot",
            "read 0xzz 4",
        ] {
            assert!(parse_command(bad).is_err(), "{bad:?}");
        }
    }
}
