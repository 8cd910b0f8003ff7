//! The receiving end: each connection authenticated, then landed by its own confined
//! lander child.

use std::io::{self, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::channel::{protocol, truncated, Channel};
use super::{decode, encode, kind, Accept, Hello, Key, Messages, Outcome, Refuse, VERSION};
use crate::listing::Listing;

/// Threads that list DEST for an update.
const LISTING_THREADS: usize = 4;
use crate::confine::{ConfinedChild, ConfinedUnpack, Landed};
use crate::error::{Error, NetError, Result, TreePath};
use crate::format::Limits;
use crate::unpack::{Existing, Restore};

/// How connections are received into DEST: `Receive::new(dest, key).limits(..)`, then
/// [`Receive::connection`] for each accepted stream (from any thread).
#[derive(Clone, Debug)]
pub struct Receive {
    dest: PathBuf,
    key: Key,
    limits: Limits,
    restore: Restore,
    timeout: Duration,
    interruptible: bool,
}

/// What one connection landed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Received {
    /// What the confined lander landed.
    #[serde(flatten)]
    pub landed: Landed,
    /// The name the sender gave.
    pub sender: String,
    /// Archive bytes received (compressed, when `compressed`).
    pub received_bytes: u64,
    /// Whether the stream was compressed.
    pub compressed: bool,
    /// Whether the sender asked for an update (existing entries replaced).
    pub update: bool,
}

/// How a connection failed.
#[derive(Debug)]
pub struct Failed {
    /// Whether the peer had shown the key (a stranger's failure lands nothing).
    pub authenticated: bool,
    /// The name the sender gave, once known.
    pub sender: Option<String>,
    /// What went wrong.
    pub error: Error,
}

impl Receive {
    /// Receives into `dest` (which should exist: see [`prepare_dest`]) with `key`, with the
    /// default limits and restore rules of [`crate::unpack::Unpack`] and a 30 s timeout.
    pub fn new(dest: impl Into<PathBuf>, key: Key) -> Receive {
        Receive {
            dest: dest.into(),
            key,
            limits: Limits::default(),
            restore: Restore::default().asked_only(true),
            timeout: Duration::from_secs(30),
            interruptible: true,
        }
    }

    /// Refuses archives beyond `limits`.
    pub fn limits(mut self, limits: Limits) -> Receive {
        self.limits = limits;
        self
    }

    /// Restores as `restore` says, root's privileges used only as asked
    /// ([`Restore::asked_only`]); an update replaces existing entries whatever it says.
    pub fn restore(mut self, restore: Restore) -> Receive {
        self.restore = restore.asked_only(true);
        self
    }

    /// Fails a connection whose sender sends nothing (or takes nothing) for that long.
    pub fn timeout(mut self, timeout: Duration) -> Receive {
        self.timeout = timeout;
        self
    }

    /// Whether a requested stop (a signal) ends a running connection (the default), or
    /// only the timeout does: a server that drains its connections on SIGTERM.
    pub fn interruptible(mut self, yes: bool) -> Receive {
        self.interruptible = yes;
        self
    }

    /// Authenticates the sender on `stream` and lands what it sends; a connection that
    /// fails authentication spawns and lands nothing. The sender is told the result.
    pub fn connection(&self, stream: TcpStream) -> std::result::Result<Received, Failed> {
        let mut channel = Channel::accept(stream, &self.key, self.timeout, self.interruptible)
            .map_err(|error| Failed {
                authenticated: false,
                sender: None,
                error,
            })?;
        let hello = match channel.receive() {
            Ok((kind::HELLO, payload)) => decode::<Hello>("HELLO", payload),
            Ok((kind, _)) => Err(protocol(format!("type {kind} where HELLO was expected"))),
            Err(error) => {
                return Err(Failed {
                    authenticated: false,
                    sender: None,
                    error,
                })
            }
        };
        let failed = |error, sender: Option<&Hello>| Failed {
            authenticated: true,
            sender: sender.map(|h| h.name.clone()),
            error,
        };
        let hello = hello.map_err(|e| failed(e, None))?;
        let result = match hello.version {
            VERSION => self.land(&mut channel, &hello),
            other => {
                let reason = format!("protocol version {other}; this receiver speaks {VERSION}");
                let _ = channel.send(
                    kind::REFUSE,
                    &encode(&Refuse {
                        reason: reason.clone(),
                    }),
                );
                Err(protocol(format!("the sender speaks {reason}")))
            }
        };
        // The sender hears how it ended (unless the connection itself failed).
        let outcome = match &result {
            Ok(received) => Outcome::Landed(received.landed.clone()),
            Err(e) => Outcome::Error {
                kind: e.kind().into(),
                message: e.to_string(),
            },
        };
        // A tampered stream leaves our direction intact: the sender hears of it too.
        let broken = matches!(
            &result,
            Err(Error::Net {
                kind: NetError::Truncated | NetError::Timeout,
                ..
            })
        );
        if !broken && channel.send(kind::RESULT, &encode(&outcome)).is_ok() {
            channel.close();
        }
        result.map_err(|e| failed(e, Some(&hello)))
    }

    /// Sends the listing of DEST (what `--update` leaves out when unchanged), as LIST
    /// messages and LIST_END.
    fn send_listing(&self, channel: &mut Channel) -> Result<()> {
        let shown = || TreePath(self.dest.as_os_str().as_encoded_bytes().to_vec());
        let flags = rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC;
        let root = rustix::fs::open(&self.dest, flags, rustix::fs::Mode::empty())
            .map_err(|e| Error::io("open destination", shown(), e))?;
        let listing = Listing::of_dir(root, LISTING_THREADS);
        let mut out = Messages::new(channel, kind::LIST);
        let written = listing.write_to(&mut out);
        if let Some(e) = out.failed.take() {
            return Err(e);
        }
        written.map_err(|e| Error::os("list", shown(), e))?;
        out.end(kind::LIST_END)?;
        Ok(())
    }

    /// Spawns the confined lander and feeds it the DATA until END.
    fn land(&self, channel: &mut Channel, hello: &Hello) -> Result<Received> {
        let mut restore = self.restore;
        if hello.update {
            restore = restore.existing(Existing::Overwrite);
        }
        let landing = ConfinedUnpack::new(&self.dest)
            .limits(self.limits)
            .restore(restore);
        let mut child = match landing.spawn() {
            Ok(child) => child,
            Err(e) => {
                let reason = format!("cannot start the lander: {e}");
                let _ = channel.send(kind::REFUSE, &encode(&Refuse { reason }));
                return Err(e);
            }
        };
        // A larger pipe: fewer wake-ups of the child's reading thread.
        let _ = rustix::pipe::fcntl_setpipe_size(&*child.input(), 1 << 20);
        let accept = Accept {
            compress: hello.compress,
        };
        channel.send(kind::ACCEPT, &encode(&accept))?;
        if hello.update {
            self.send_listing(channel)?;
        }
        let fed = match hello.compress {
            true => {
                let mut zstd = zstd::stream::write::Decoder::new(ChildInput(&mut child))
                    .map_err(|e| Error::os("start zstd", TreePath::default(), e))?;
                let fed = feed(channel, &mut zstd);
                fed.and_then(|n| {
                    zstd.flush()
                        .map_err(|e| Error::os("decompress", TreePath::default(), e))?;
                    Ok(n)
                })
            }
            false => feed(channel, &mut ChildInput(&mut child)),
        };
        match fed {
            Ok(received_bytes) => Ok(Received {
                landed: child.wait()?,
                sender: hello.name.clone(),
                received_bytes,
                compressed: hello.compress,
                update: hello.update,
            }),
            Err(Stop::Lander) => Err(child
                .wait()
                .err()
                .unwrap_or_else(|| protocol("the lander stopped reading, then reported success"))),
            Err(Stop::Channel(e)) => {
                // Stopped cleanly, the child removes the file it was writing.
                let _ = child.cancel();
                Err(e)
            }
        }
    }
}

/// Why feeding the lander stopped early.
enum Stop {
    /// The lander stopped reading: its report says why.
    Lander,
    /// The channel failed.
    Channel(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Channel(e)
    }
}

/// Writes the DATA messages into `out` until END, whose count must match; returns it.
fn feed(channel: &mut Channel, out: &mut impl Write) -> std::result::Result<u64, Stop> {
    let mut received = 0u64;
    loop {
        match channel.receive()? {
            (kind::DATA, bytes) => {
                received += bytes.len() as u64;
                if let Err(e) = out.write_all(bytes) {
                    return Err(match e.kind() {
                        io::ErrorKind::BrokenPipe => Stop::Lander,
                        // A compressed stream the decoder refuses.
                        _ => Stop::Channel(Error::os("decompress", TreePath::default(), e)),
                    });
                }
            }
            (kind::END, count) => {
                let count = <[u8; 8]>::try_from(count).map_err(|_| protocol("a bad END"))?;
                let count = u64::from_be_bytes(count);
                if count != received {
                    return Err(Stop::Channel(truncated(&format!(
                        "{received} of {count} bytes arrived"
                    ))));
                }
                return Ok(received);
            }
            (kind, _) => {
                let e = protocol(format!("type {kind} where DATA or END was expected"));
                return Err(Stop::Channel(e));
            }
        }
    }
}

/// The child's stdin as a writer (the decoder needs an owned one).
struct ChildInput<'c>(&'c mut ConfinedChild);

impl Write for ChildInput<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.input().write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Creates DEST when missing (with its parents, never following a symlink at DEST, as
/// unpack does) and returns the bytes free on its filesystem for unprivileged users.
/// Unlike unpack's all-or-nothing staging, a DEST made here stays, so a cut-off transfer
/// keeps what landed.
pub fn prepare_dest(dest: &Path) -> Result<u64> {
    let mut destination = crate::root::open_dest(dest, false, None)?;
    let root = destination.root()?;
    destination.finish(true)?;
    let shown = TreePath(dest.as_os_str().as_encoded_bytes().to_vec());
    let fs = rustix::fs::fstatvfs(&root).map_err(|e| Error::io("statvfs", shown, e))?;
    Ok(fs.f_bavail.saturating_mul(fs.f_frsize))
}
