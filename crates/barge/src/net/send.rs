//! The sending end: connect, authenticate, stream an archive, read the receiver's result.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::Duration;

use rustix::io::Errno;

use super::channel::Channel;
use super::lanes::{Joining, Striper, LANES_GRACE};
use super::protocol::{send_paths, Heard, Hello, Outbound, MAX_LANES, VERSION};
use super::{Key, ZSTD_LEVEL};
use crate::confine::Landed;
use crate::error::{Error, NetError, Result, TreePath};
use crate::format::Limits;
use crate::interrupt::Cancel;
use crate::listing::Listing;
use crate::pack::{Pack, PackSummary};
use crate::threads::Work;
use crate::tree::{Content, Device, DirPath, Entry, Kind, Sink};
use crate::unpack::{Archive, Unpack};
use crate::Progress;

/// What to send.
pub enum Payload<'a, 'p> {
    /// A tree, packed as it is sent.
    Pack(Box<Pack<'p>>),
    /// The bytes of an existing archive, as they are (the receiver checks them like any).
    Archive(&'a mut dyn Read),
}

/// A transfer to a receiver: `Send::new("host:7361", key).compress(true).run(payload)`.
#[derive(Clone, Debug)]
pub struct Send {
    address: String,
    key: Key,
    timeout: Duration,
    compress: bool,
    update: bool,
    delete: bool,
    lanes: Option<u32>,
    cancel: Cancel,
}

/// What a transfer did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Sent {
    /// What the pack packed (none for an archive sent as it was).
    pub packed: Option<PackSummary>,
    /// What the receiver landed.
    pub landed: Landed,
    /// Archive bytes sent (compressed, with `compress`), without the channel's framing.
    pub sent_bytes: u64,
    /// Whether the stream was compressed.
    pub compressed: bool,
    /// The connections that carried it.
    pub connections: usize,
    /// Entries of DEST the receiver removed ([`Send::delete`]; each with what was below it).
    pub deleted: u64,
}

impl Send {
    /// A transfer to `address` (`HOST:PORT`) with `key`, uncompressed, over as many
    /// connections as the path needs (see [`Send::connections`]), with a 30 s timeout.
    pub fn new(address: impl Into<String>, key: Key) -> Send {
        Send {
            address: address.into(),
            key,
            timeout: Duration::from_secs(30),
            compress: false,
            update: false,
            delete: false,
            lanes: None,
            cancel: Cancel::new(),
        }
    }

    /// The connections a transfer uses over a long path (a round trip of
    /// [`Send::LONG_PATH`] or more) unless told otherwise: one TCP connection carries at
    /// most its window per round trip (~4 MiB with Linux's default buffers: half of a
    /// gigabit at 40 ms); four fill a long gigabit path as four plain TCP streams do
    /// (docs/BENCHMARKS.md, net).
    pub const DEFAULT_CONNECTIONS: u32 = 4;

    /// The round trip from which a transfer spreads over [`Send::DEFAULT_CONNECTIONS`]:
    /// below it one connection's window carries more than the receiver lands, and more
    /// connections only cost (docs/BENCHMARKS.md, "Design measurements").
    pub const LONG_PATH: Duration = Duration::from_millis(5);

    /// Fails when connecting takes longer, or the receiver sends or takes nothing for that
    /// long.
    pub fn timeout(mut self, timeout: Duration) -> Send {
        self.timeout = timeout;
        self
    }

    /// Stops once `cancel` is cancelled (the default: a token of its own, which nothing
    /// cancels); a [`Payload::Pack`] has its own (see [`Pack::cancel`]).
    pub fn cancel(mut self, cancel: Cancel) -> Send {
        self.cancel = cancel;
        self
    }

    /// Compresses the stream (zstd).
    pub fn compress(mut self, yes: bool) -> Send {
        self.compress = yes;
        self
    }

    /// Asks the receiver to replace entries it has (each by rename).
    pub fn update(mut self, yes: bool) -> Send {
        self.update = yes;
        self
    }

    /// With [`Send::update`], has the receiver remove what DEST has and the tree lacks,
    /// not what the pack excludes (see `Listing::missing`), before it lands anything: DEST
    /// becomes a copy of the tree.
    /// A payload that is an archive cannot be compared: an error.
    pub fn delete(mut self, yes: bool) -> Send {
        self.delete = yes;
        self
    }

    /// Spreads the archive over up to `n` connections (at least 1; the receiver may take
    /// fewer), opened while the first one sends. `None` (the default): one, or
    /// [`Send::DEFAULT_CONNECTIONS`] when the first connection's round trip is
    /// [`Send::LONG_PATH`] or more.
    pub fn connections(mut self, n: Option<u32>) -> Send {
        self.lanes = n.map(|n| n.max(1));
        self
    }

    /// Connects, authenticates, sends `payload` and returns what the receiver landed; an
    /// error of the receiver (a refusal, a landing that failed) is an error here too.
    /// `progress` counts what an archive payload sent (a pack counts in its own).
    pub fn run(&self, payload: Payload<'_, '_>, progress: &Progress) -> Result<Sent> {
        let socket = self.connect()?;
        let rtt = crate::sys::process::tcp_round_trip(std::os::fd::AsFd::as_fd(&socket));
        let lanes = (self.lanes)
            .unwrap_or(match rtt {
                Some(rtt) if rtt >= Send::LONG_PATH => Send::DEFAULT_CONNECTIONS,
                _ => 1,
            })
            .min(MAX_LANES);
        let channel = Channel::connect(socket, &self.key, self.timeout, self.cancel.clone())?;
        // The receiver holds the key (a wrong one costs it one connection, one log line):
        // the later lanes connect while this one says HELLO, to join the transfer by the id
        // it names.
        let transfer = match lanes {
            1 => None,
            _ => Some(Key::generate()?.to_text()),
        };
        let joining = (transfer.clone()).map(|id| self.open_lanes(id, lanes - 1));
        let hello = Hello {
            transfer,
            ..self.hello(lanes, None)
        };
        let (mut channel, mut outbound, listing) = self.start(channel, hello)?;
        let deleted = match (&payload, &listing) {
            (_, None) => 0,
            (Payload::Pack(pack), Some(listing)) if self.delete => {
                let gone = pack.missing_in(listing);
                send_paths(|kind, bytes| channel.send(kind, bytes), &gone)?;
                gone.len() as u64
            }
            (Payload::Archive(_), Some(_)) if self.delete => {
                return Err(Error::Argument {
                    arg: "--delete".into(),
                    problem: "needs a tree to compare DEST with, not an archive".into(),
                })
            }
            _ => 0,
        };
        let payload = match (payload, &listing) {
            (Payload::Pack(pack), Some(listing)) => {
                Payload::Pack(Box::new(pack.unchanged(listing)))
            }
            (payload, _) => payload,
        };
        let mut data = Striper::new(channel, joining, self.timeout);
        let packed = match self.compress {
            true => {
                let workers = Work::Cores.threads();
                let mut zstd = zstd::stream::write::Encoder::new(&mut data, ZSTD_LEVEL)
                    .and_then(|mut zstd| zstd.multithread(workers as u32).map(|()| zstd))
                    .map_err(|e| Error::os("start zstd", TreePath::default(), e))?;
                let packed = stream(payload, &mut zstd, progress, &self.cancel);
                let finished = packed.and_then(|p| {
                    let done = zstd.finish();
                    done.map(|_| p)
                        .map_err(|e| Error::os("compress", TreePath::default(), e))
                });
                data.failed.take().map_or(finished, Err)?
            }
            false => {
                let packed = stream(payload, &mut data, progress, &self.cancel);
                data.failed.take().map_or(packed, Err)?
            }
        };
        let (mut lanes, joining, sent_bytes) = data.end(&mut outbound)?;
        let (kind, payload) = lanes[0].receive()?;
        let landed = match outbound.receive(kind, payload)? {
            Heard::Landed(landed) => landed,
            heard => unreachable!("{heard:?} after END"),
        };
        let used = lanes.len();
        for lane in lanes {
            lane.close();
        }
        // Lanes still connecting are told the transfer is over, so that the receiver sees
        // them end as lanes (a connection closed mid-handshake would look like a wrong key).
        if let Some(joining) = joining {
            let rtts = rtt.map_or(Duration::ZERO, |rtt| 3 * rtt);
            joining.finish((LANES_GRACE + rtts).min(self.timeout));
        }
        Ok(Sent {
            packed,
            landed,
            sent_bytes,
            compressed: self.compress,
            connections: used,
            deleted,
        })
    }

    /// Connects and authenticates as [`Send::run`] does and, with [`Send::update`], reads
    /// what DEST has; then tells `each` what `run` would remove ([`Send::delete`]) and
    /// send, in the order it would, and does none of it: the receiver lands nothing. The pack runs as for the transfer (it
    /// reads the files it would send, into nothing), and its summary is returned.
    pub fn dry_run(
        &self,
        pack: Pack<'_>,
        mut each: impl FnMut(Planned<'_>),
    ) -> Result<PackSummary> {
        let hello = Hello {
            dry_run: true,
            ..self.hello(1, None)
        };
        let channel = Channel::connect(
            self.connect()?,
            &self.key,
            self.timeout,
            self.cancel.clone(),
        )?;
        let (channel, _, listing) = self.start(channel, hello)?;
        channel.close();
        if let (Some(listing), true) = (&listing, self.delete) {
            for path in pack.missing_in(listing) {
                let kind = match listing.dir(&path) {
                    Some(_) => Kind::Dir,
                    None => listing.get(&path).map_or(Kind::Unknown, |item| item.kind),
                };
                each(Planned {
                    path: &TreePath(path.into()),
                    kind,
                    there: Some(kind),
                    delete: true,
                });
            }
        }
        let pack = match &listing {
            Some(listing) => pack.unchanged(listing),
            None => pack,
        };
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| Error::io("make a pipe", TreePath::default(), e))?;
        let planner = Planner {
            listing: listing.as_ref(),
            dir: DirPath::default(),
            each,
        };
        std::thread::scope(|scope| {
            let packing = scope.spawn(move || pack.to_fd(write.as_fd()));
            let archive = Archive::from_reader(std::fs::File::from(read));
            let listed = Unpack::new()
                .limits(Limits::default())
                .cancel(self.cancel.clone())
                .list(&archive, planner);
            match (packing.join().expect("the pack does not panic"), listed) {
                (Ok(packed), Ok(())) => Ok(packed),
                // The pack stopped because the listing stopped reading (a limit): its reason.
                (Err(Error::Io { cause, .. }), Err(e))
                    if cause.raw_os_error() == Some(Errno::PIPE.raw_os_error()) =>
                {
                    Err(e)
                }
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        })
    }

    /// Says `hello` on an authenticated `channel` and reads the receiver's answer when it
    /// sends one: its ACCEPT and, with update, its listing of what DEST has (so unchanged
    /// files are left out). A plain transfer's data follows its HELLO without waiting for an
    /// answer; the HELLO leaves at once all the same (one small write), so the receiver
    /// starts its lander while the first batch of data is packed.
    fn start(
        &self,
        mut channel: Channel,
        hello: Hello,
    ) -> Result<(Channel, Outbound, Option<Listing>)> {
        let (mut outbound, hello) = Outbound::new(hello);
        channel.send(hello.kind, &hello.payload)?;
        if !outbound.waits() {
            channel.write_some()?;
            return Ok((channel, outbound, None));
        }
        loop {
            let (kind, payload) = channel.receive()?;
            match outbound.receive(kind, payload)? {
                Heard::More => {}
                Heard::Ready(listing) => return Ok((channel, outbound, listing)),
                Heard::Landed(_) => unreachable!("a result only after END"),
            }
        }
    }

    /// The HELLO of a transfer over `lanes`, or of a lane joining `transfer`.
    fn hello(&self, lanes: u32, join: Option<String>) -> Hello {
        Hello {
            version: VERSION,
            compress: self.compress,
            update: self.update,
            delete: self.update && self.delete,
            name: super::host_name(),
            lanes,
            transfer: None,
            join,
            dry_run: false,
        }
    }

    /// Opens `n` lanes of `transfer`, each on its own thread, and hands over those the
    /// receiver accepts as they are ready. A lane that fails to open is not used: the
    /// transfer goes on over the others. A lane authenticated once the transfer needs no
    /// more says its HELLO and closes.
    fn open_lanes(&self, transfer: String, n: u32) -> Joining {
        let (ready, joining) = mpsc::channel();
        let over = Cancel::new();
        for _ in 0..n {
            let (ready, send, transfer) = (ready.clone(), self.clone(), transfer.clone());
            let over = over.clone();
            std::thread::spawn(move || -> Result<()> {
                if over.is_cancelled() {
                    return Ok(());
                }
                let stop = send.cancel.clone();
                let mut lane = Channel::connect(send.connect()?, &send.key, send.timeout, stop)?;
                let hello = send.hello(1, Some(transfer));
                if over.is_cancelled() {
                    let (_, hello) = Outbound::new(hello);
                    return (lane.send(hello.kind, &hello.payload)).and_then(|()| lane.flush());
                }
                let _ = ready.send(send.start(lane, hello)?.0);
                Ok(())
            });
        }
        Joining::new(joining, over)
    }

    /// Opens the connection, trying each address the name resolves to.
    fn connect(&self) -> Result<TcpStream> {
        let shown = || TreePath(self.address.clone().into_bytes());
        let addresses = (self.address.to_socket_addrs())
            .map_err(|e| Error::os("resolve", shown(), io::Error::new(e.kind(), e.to_string())))?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the name has no address");
        for address in addresses {
            match TcpStream::connect_timeout(&address, self.timeout) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        if last.kind() == io::ErrorKind::TimedOut {
            return Err(Error::net(
                NetError::Timeout,
                format!(
                    "cannot connect to {}: no answer in {} s (see --timeout)",
                    self.address,
                    self.timeout.as_secs()
                ),
            ));
        }
        Err(Error::os("connect", shown(), last))
    }
}

/// An entry a [`Send::dry_run`] would send.
#[derive(Clone, Copy, Debug)]
pub struct Planned<'a> {
    /// Its path in DEST.
    pub path: &'a TreePath,
    /// What it is.
    pub kind: Kind,
    /// What DEST has at that path, as the listing of an update says (a directory, a file
    /// or a symlink), which the transfer would replace or, directory over directory, set
    /// the mode and time of; none without an update.
    pub there: Option<Kind>,
    /// DEST's entry at `path` (of kind `kind`), which the trees lack, would be removed
    /// ([`Send::delete`]), with everything below it; told before what would be sent.
    pub delete: bool,
}

/// The sink a dry run's archive drives: each entry to the caller's `each`.
struct Planner<'l, F> {
    listing: Option<&'l Listing>,
    dir: DirPath,
    each: F,
}

impl<F: FnMut(Planned<'_>)> Planner<'_, F> {
    fn tell(&mut self, entry: &Entry<'_>) {
        let path = self.dir.join(entry.name);
        let there = self.listing.and_then(|listing| match listing.dir(&path.0) {
            Some(_) => Some(Kind::Dir),
            None => listing.get(&path.0).map(|item| item.kind),
        });
        (self.each)(Planned {
            path: &path,
            kind: entry.kind,
            there,
            delete: false,
        });
    }
}

impl<F: FnMut(Planned<'_>)> Sink for Planner<'_, F> {
    type Error = Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.tell(entry);
        self.dir.enter(entry.name);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.dir.leave();
        Ok(())
    }

    fn empty_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.tell(entry);
        Ok(())
    }

    fn file(&mut self, entry: &Entry<'_>, _content: Content<'_>) -> Result<()> {
        self.tell(entry);
        Ok(())
    }

    fn symlink(&mut self, entry: &Entry<'_>, _target: &[u8]) -> Result<()> {
        self.tell(entry);
        Ok(())
    }

    fn hard_link(&mut self, entry: &Entry<'_>, _target: u64) -> Result<()> {
        self.tell(entry);
        Ok(())
    }

    fn special(&mut self, entry: &Entry<'_>, _device: Device) -> Result<()> {
        self.tell(entry);
        Ok(())
    }
}

/// Writes `payload` to `out`: packs the tree, or copies the archive.
fn stream(
    payload: Payload<'_, '_>,
    out: &mut (impl Write + std::marker::Send),
    progress: &Progress,
    cancel: &Cancel,
) -> Result<Option<PackSummary>> {
    match payload {
        Payload::Pack(pack) => (*pack).to_writer(out).map(Some),
        Payload::Archive(input) => {
            let mut buf = vec![0; 1 << 20];
            loop {
                cancel.check()?;
                let n = match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Error::os("read archive", TreePath::default(), e)),
                };
                (out.write_all(&buf[..n]))
                    .map_err(|e| Error::os("send archive", TreePath::default(), e))?;
                progress.add_bytes(n as u64);
                progress.add_written(n as u64);
            }
            out.flush()
                .map_err(|e| Error::os("send archive", TreePath::default(), e))?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests;
