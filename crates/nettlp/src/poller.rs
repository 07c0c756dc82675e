//! The background thread that wakes waiting [`ReadFuture`](crate::device::ReadFuture)s:
//! it `poll`s the sockets of every registered read (plus an eventfd that announces new
//! registrations) and wakes a task when one of its sockets is readable or its deadline
//! passed. Level-triggered, so a completion that arrived just before registration still
//! wakes the task; a spurious wake only costs the task one more non-blocking round.

use std::os::fd::RawFd;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

struct Reg {
    fds: Vec<RawFd>,
    deadline: Instant,
    waker: Waker,
}

struct Poller {
    tx: Mutex<Sender<Reg>>,
    event: RawFd,
}

fn poller() -> Option<&'static Poller> {
    static P: OnceLock<Option<Poller>> = OnceLock::new();
    P.get_or_init(|| {
        // SAFETY: plain syscall; the fd lives for the process.
        let event = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if event < 0 {
            return None;
        }
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name("nettlp-poller".into())
            .spawn(move || run(rx, event))
            .ok()?;
        Some(Poller {
            tx: Mutex::new(tx),
            event,
        })
    })
    .as_ref()
}

/// Wakes `waker` when one of `fds` is readable or at `deadline`.
pub(crate) fn register(fds: Vec<RawFd>, deadline: Instant, waker: Waker) {
    let Some(p) = poller() else {
        // No poller thread: wake at once (the task then spins, but never hangs).
        waker.wake();
        return;
    };
    let sent =
        p.tx.lock()
            .map(|tx| {
                tx.send(Reg {
                    fds,
                    deadline,
                    waker: waker.clone(),
                })
                .is_ok()
            })
            .unwrap_or(false);
    if !sent {
        waker.wake();
        return;
    }
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to our eventfd.
    unsafe {
        libc::write(p.event, (&one as *const u64).cast(), 8);
    }
}

fn run(rx: Receiver<Reg>, event: RawFd) {
    let mut regs: Vec<Reg> = Vec::new();
    let mut pfd: Vec<libc::pollfd> = Vec::new();
    loop {
        if regs.is_empty() {
            match rx.recv() {
                Ok(r) => regs.push(r),
                Err(_) => return,
            }
        }
        while let Ok(r) = rx.try_recv() {
            regs.push(r);
        }
        let now = Instant::now();
        let next = regs.iter().map(|r| r.deadline).min().unwrap_or(now);
        let wait = next
            .saturating_duration_since(now)
            .min(Duration::from_millis(100));
        pfd.clear();
        pfd.push(libc::pollfd {
            fd: event,
            events: libc::POLLIN,
            revents: 0,
        });
        for r in &regs {
            pfd.extend(r.fds.iter().map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }));
        }
        let ms = wait.as_millis() as i32 + i32::from(!wait.is_zero() && wait.as_millis() == 0);
        // SAFETY: pfd is a valid array of pfd.len() entries.
        unsafe {
            libc::poll(pfd.as_mut_ptr(), pfd.len() as libc::nfds_t, ms);
        }
        if pfd[0].revents != 0 {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 (clears the eventfd).
            unsafe {
                libc::read(event, (&mut v as *mut u64).cast(), 8);
            }
        }
        let now = Instant::now();
        let mut k = 1;
        let mut keep = Vec::with_capacity(regs.len());
        for r in regs.drain(..) {
            let n = r.fds.len();
            let ready = pfd[k..k + n].iter().any(|p| p.revents != 0);
            k += n;
            if ready || now >= r.deadline {
                r.waker.wake();
            } else {
                keep.push(r);
            }
        }
        regs = keep;
    }
}
