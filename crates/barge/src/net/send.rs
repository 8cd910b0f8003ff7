//! The sending end: connect, authenticate, stream an archive, read the receiver's result.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::channel::{protocol, Channel};
use super::{
    decode, encode, kind, unexpected, Accept, Hello, Key, Messages, Outcome, VERSION, ZSTD_LEVEL,
};
use crate::confine::Landed;
use crate::error::{Error, NetError, Result, TreePath};
use crate::listing::{Listing, ListingLimits};
use crate::pack::{Pack, PackSummary};
use crate::Progress;

/// What to send.
pub enum Payload<'a, 'p> {
    /// A tree, packed as it is sent.
    Pack(Pack<'p>),
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
}

impl Send {
    /// A transfer to `address` (`HOST:PORT`) with `key`, uncompressed, with a 30 s timeout.
    pub fn new(address: impl Into<String>, key: Key) -> Send {
        Send {
            address: address.into(),
            key,
            timeout: Duration::from_secs(30),
            compress: false,
            update: false,
        }
    }

    /// Fails when connecting takes longer, or the receiver sends or takes nothing for that
    /// long.
    pub fn timeout(mut self, timeout: Duration) -> Send {
        self.timeout = timeout;
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

    /// Connects, authenticates, sends `payload` and returns what the receiver landed; an
    /// error of the receiver (a refusal, a landing that failed) is an error here too.
    /// `progress` counts what an archive payload sent (a pack counts in its own).
    pub fn run(&self, payload: Payload<'_, '_>, progress: &Progress) -> Result<Sent> {
        let mut channel = Channel::connect(self.connect()?, &self.key, self.timeout)?;
        let hello = Hello {
            version: VERSION,
            compress: self.compress,
            update: self.update,
            name: super::host_name(),
        };
        channel.send(kind::HELLO, &encode(&hello))?;
        let accept: Accept = match channel.receive()? {
            (kind::ACCEPT, payload) => decode("ACCEPT", payload)?,
            (kind, payload) => return Err(unexpected(kind, payload)),
        };
        if accept.compress != self.compress {
            return Err(protocol("the receiver did not agree on compression"));
        }
        // With update: what DEST has, so unchanged files are left out.
        let listing = match self.update {
            true => Some(receive_listing(&mut channel)?),
            false => None,
        };
        let payload = match (payload, &listing) {
            (Payload::Pack(pack), Some(listing)) => Payload::Pack(pack.unchanged(listing)),
            (payload, _) => payload,
        };
        let mut data = Messages::new(&mut channel, kind::DATA);
        let packed = match self.compress {
            true => {
                let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
                let mut zstd = zstd::stream::write::Encoder::new(&mut data, ZSTD_LEVEL)
                    .and_then(|mut zstd| zstd.multithread(workers as u32).map(|()| zstd))
                    .map_err(|e| Error::os("start zstd", TreePath::default(), e))?;
                let packed = stream(payload, &mut zstd, progress);
                let finished = packed.and_then(|p| {
                    let done = zstd.finish();
                    done.map(|_| p)
                        .map_err(|e| Error::os("compress", TreePath::default(), e))
                });
                data.failed.take().map_or(finished, Err)?
            }
            false => {
                let packed = stream(payload, &mut data, progress);
                data.failed.take().map_or(packed, Err)?
            }
        };
        let sent_bytes = data.end(kind::END)?;
        let landed = match channel.receive()? {
            (kind::RESULT, payload) => match decode("RESULT", payload)? {
                Outcome::Landed(landed) => landed,
                Outcome::Error { .. } => return Err(unexpected(kind::RESULT, payload)),
            },
            (kind, payload) => return Err(unexpected(kind, payload)),
        };
        channel.close();
        Ok(Sent {
            packed,
            landed,
            sent_bytes,
            compressed: self.compress,
        })
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
        Err(Error::os("connect to", shown(), last))
    }
}

/// Writes `payload` to `out`: packs the tree, or copies the archive.
fn stream(
    payload: Payload<'_, '_>,
    out: &mut (impl Write + std::marker::Send),
    progress: &Progress,
) -> Result<Option<PackSummary>> {
    match payload {
        Payload::Pack(pack) => pack.to_writer(out).map(Some),
        Payload::Archive(input) => {
            let mut buf = vec![0; 1 << 20];
            loop {
                crate::interrupt::check()?;
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

/// Reads the receiver's listing of DEST (LIST messages, then LIST_END with their byte
/// count), within [`ListingLimits`]' defaults.
fn receive_listing(channel: &mut Channel) -> Result<Listing> {
    let limits = ListingLimits::default();
    let mut bytes = Vec::new();
    loop {
        match channel.receive()? {
            (kind::LIST, chunk) if bytes.len() as u64 + chunk.len() as u64 <= limits.max_bytes => {
                bytes.extend_from_slice(chunk)
            }
            (kind::LIST, _) => {
                return Err(protocol(format!(
                    "the listing of DEST is over {} bytes",
                    limits.max_bytes
                )))
            }
            (kind::LIST_END, count) if count == (bytes.len() as u64).to_be_bytes() => break,
            (kind::LIST_END, _) => return Err(protocol("a listing of another length than sent")),
            (kind, payload) => return Err(unexpected(kind, payload)),
        }
    }
    Listing::read_from(&bytes[..], limits)
}
