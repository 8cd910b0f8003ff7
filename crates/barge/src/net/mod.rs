//! `send` and `recv`: a tree moved between hosts as an archive stream over an authenticated,
//! encrypted channel, landed on the receiving end by the confined lander.
//!
//! The two ends share a 256-bit [`Key`] (a receiver's [`Ticket`] carries it with its
//! address). The channel (`net/channel.rs`) runs a Noise `NNpsk2` handshake, then carries typed messages:
//!
//! ```text
//! sender                                   receiver
//!   -> e                        handshake
//!   <- e, ee, psk               (the receiver has shown the key)
//!   HELLO {version, compress, update, delete, name, lanes, transfer, dry_run}   (the
//!                                         sender has shown the key: a child is spawned
//!                                         only now)
//!                            <- ACCEPT {compress} | REFUSE {reason}   (with update or
//!                                         dry_run only: a plain transfer sends on at once)
//!                            <- LIST ... LIST_END   (with update: what DEST has)
//!   (a dry run ends here: the receiver closes, having landed nothing)
//!   DELETE {paths: u16 LE length, bytes} ... DELETE_END {u64 BE: DELETE bytes}
//!                                         (with update and delete: what DEST has and the
//!                                         sender's trees lack, removed before any data)
//!   DATA {u64 BE: chunk number, archive bytes (zstd frames when compressed)} ...
//!   END {u64 BE: DATA archive bytes, u64 BE: chunks}   (the authenticated end)
//!                            <- RESULT {landed} | {error: {kind, message}}
//! ```
//!
//! A plain transfer's DATA follows its HELLO without waiting for an answer (the HELLO is
//! written at once, so the receiver starts its lander while the first data is packed): the
//! receiver answers only to refuse, so a transfer costs the round trips of TCP and of the
//! handshake, then one for the result. With `lanes` over 1 the sender names the transfer
//! with a random id in its HELLO and opens up to `lanes - 1` more connections ("lanes", see
//! `net/lanes.rs`) as soon as the first connection's handshake showed the receiver holds
//! the key (so a wrong key costs one connection), each with its own handshake, then
//! `HELLO {join: transfer}` and the receiver's ACCEPT (a lane carries chunks only once
//! accepted, so a lane refused loses none); a lane that arrives before its transfer's HELLO
//! waits for it. The sender spreads the DATA over the lanes and ends each later lane with
//! an empty END. The transfer id travels encrypted only.
//!
//! docs/SECURITY.md ("send / recv") has the threat model.

pub(crate) mod channel;
pub mod key;
pub(crate) mod lanes;
pub mod peers;
pub mod recv;
pub mod send;
pub mod server;

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

pub use key::{open_private, Key, Ticket};
pub use recv::{Connection, Receive, Received};
pub use send::{Payload, Planned, Send, Sent};
pub use server::Receiver;

use crate::confine::Landed;
use crate::error::{escape_message, Error, NetError, Result};
use channel::{protocol, Channel, MAX_PAYLOAD};

/// The version of the protocol a HELLO names.
const VERSION: u32 = 6;
/// The port `recv` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7361;
/// zstd's level for `--compress`: its fastest but negative ones, run on every core, so that
/// compressing keeps up with a gigabit link (the default level 3 on one core does not:
/// docs/BENCHMARKS.md, "Design measurements").
const ZSTD_LEVEL: i32 = 1;

/// The message types (the first byte of each message's plaintext).
mod kind {
    pub(crate) const HELLO: u8 = 1;
    pub(crate) const ACCEPT: u8 = 2;
    pub(crate) const REFUSE: u8 = 3;
    pub(crate) const LIST: u8 = 4;
    pub(crate) const LIST_END: u8 = 5;
    pub(crate) const DATA: u8 = 6;
    pub(crate) const END: u8 = 7;
    pub(crate) const RESULT: u8 = 8;
    pub(crate) const DELETE: u8 = 9;
    pub(crate) const DELETE_END: u8 = 10;
}

/// What the sender asks for.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Hello {
    version: u32,
    /// The archive comes as zstd frames.
    compress: bool,
    /// Existing entries are replaced (and, with the listing, unchanged ones not sent).
    update: bool,
    /// With `update`: the sender sends DELETE messages, the paths to remove from DEST,
    /// before its data.
    #[serde(default)]
    delete: bool,
    /// The sender's host name, for the receiver's log.
    name: String,
    /// The connections the sender would use for the transfer, this one included.
    #[serde(default = "one")]
    lanes: u32,
    /// With `lanes` over 1: the id later lanes join with (random, as secret as a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transfer: Option<String>,
    /// Set on a later lane: the id of the transfer it joins (none of the above applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    join: Option<String>,
    /// Nothing is sent: the receiver accepts (and with `update` sends its listing), then
    /// closes, landing nothing.
    #[serde(default)]
    dry_run: bool,
}

impl Hello {
    /// Whether the sender waits for the receiver's ACCEPT before it goes on: for the listing
    /// an update or a dry run reads after it, and on a later lane, which must not carry
    /// chunks the receiver could refuse. A plain transfer sends its data at once.
    fn answered(&self) -> bool {
        self.update || self.dry_run || self.join.is_some()
    }
}

/// The receiver's yes, to a HELLO that is [`Hello::answered`].
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Accept {
    compress: bool,
}

fn one() -> u32 {
    1
}

/// The receiver's no, before any data.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Refuse {
    reason: String,
}

/// How the landing ended, as the receiver tells the sender.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Landed(Landed),
    Error { kind: String, message: String },
}

/// Parses a JSON message.
fn decode<'a, T: Deserialize<'a>>(what: &str, payload: &'a [u8]) -> Result<T> {
    serde_json::from_slice(payload).map_err(|e| protocol(format!("a bad {what} message: {e}")))
}

/// Encodes a JSON message.
fn encode(message: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(message).expect("plain data")
}

/// The error for a message the peer should not have sent now: a receiver's refusal or
/// failure (with the kind it names when that is a network failure, so both ends report
/// tampering alike), or a protocol error.
fn unexpected(kind: u8, payload: &[u8]) -> Error {
    match kind {
        kind::REFUSE => match decode::<Refuse>("REFUSE", payload) {
            Ok(refuse) => Error::net(
                NetError::Remote,
                format!("the receiver refused: {}", escape_message(&refuse.reason)),
            ),
            Err(e) => e,
        },
        kind::RESULT => match decode::<Outcome>("RESULT", payload) {
            Ok(Outcome::Error { kind, message }) => {
                let kind = [
                    NetError::Tampered,
                    NetError::Truncated,
                    NetError::Timeout,
                    NetError::Protocol,
                ]
                .into_iter()
                .find(|k| k.name() == kind)
                .unwrap_or(NetError::Remote);
                Error::net(kind, format!("the receiver: {}", escape_message(&message)))
            }
            Ok(Outcome::Landed(_)) => protocol("a result before the end of the data"),
            Err(e) => e,
        },
        other => protocol(format!("an unexpected message (type {other})")),
    }
}

/// This host's name, for the peer's log and for tickets.
pub fn host_name() -> String {
    let uname = rustix::system::uname();
    String::from_utf8_lossy(uname.nodename().to_bytes()).into_owned()
}

/// Writes `paths` (each below DEST, at most `u16::MAX` bytes) as DELETE messages, then
/// DELETE_END.
fn send_paths(channel: &mut channel::Channel, paths: &[Box<[u8]>]) -> Result<()> {
    let mut out = Messages::new(channel, kind::DELETE);
    for path in paths {
        let len = u16::try_from(path.len()).expect("a listed path");
        let written = out
            .write_all(&len.to_le_bytes())
            .and_then(|()| out.write_all(path));
        if written.is_err() {
            return Err(out.failed.take().expect("only the channel fails"));
        }
    }
    out.end(kind::DELETE_END).map(drop)
}

/// The paths DELETE messages carried (`bytes`, all of them), each checked to be a path
/// below DEST: names joined by `/`, none empty, `.` or `..`.
fn read_paths(mut bytes: &[u8]) -> Result<Vec<&[u8]>> {
    let mut paths = Vec::new();
    while let Some((len, rest)) = bytes.split_first_chunk::<2>() {
        let len = usize::from(u16::from_le_bytes(*len));
        let path = rest
            .get(..len)
            .ok_or_else(|| protocol("a path to remove cut short"))?;
        if let Some(e) = path
            .split(|&b| b == b'/')
            .find_map(|n| crate::format::check_name(n).err())
        {
            return Err(protocol(format!("a bad path to remove: {e}")));
        }
        paths.push(path);
        bytes = &rest[len..];
    }
    match bytes.is_empty() {
        true => Ok(paths),
        false => Err(protocol("a path to remove cut short")),
    }
}

/// A byte stream as messages of one type (the receiver's listing of DEST as LIST): an
/// [`io::Write`] over one channel. (The archive goes as DATA over the lanes' `Striper`.)
pub(crate) struct Messages<'c> {
    channel: &'c mut Channel,
    kind: u8,
    buf: Vec<u8>,
    sent: u64,
    /// The channel's error, which the writer's caller sees only as an I/O error.
    pub(crate) failed: Option<Error>,
}

impl<'c> Messages<'c> {
    pub(crate) fn new(channel: &'c mut Channel, kind: u8) -> Messages<'c> {
        Messages {
            channel,
            kind,
            buf: Vec::with_capacity(MAX_PAYLOAD),
            sent: 0,
            failed: None,
        }
    }

    /// Sends the buffered bytes as one message.
    pub(crate) fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        match self.channel.send(self.kind, &self.buf) {
            Ok(()) => {
                self.sent += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(e) => {
                let shown = io::Error::other(e.to_string());
                self.failed = Some(e);
                Err(shown)
            }
        }
    }

    /// Sends the rest, then `end` with the count of bytes sent (big-endian); returns it.
    pub(crate) fn end(mut self, end: u8) -> Result<u64> {
        self.send().map_err(|_| self.failed.take().expect("set"))?;
        self.channel.send(end, &self.sent.to_be_bytes())?;
        self.channel.flush()?;
        Ok(self.sent)
    }
}

impl Write for Messages<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = bytes.len().min(MAX_PAYLOAD - self.buf.len());
        self.buf.extend_from_slice(&bytes[..n]);
        if self.buf.len() == MAX_PAYLOAD {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_to_remove_are_names_below_dest() {
        let wire = |paths: &[&[u8]]| -> Vec<u8> {
            let mut bytes = Vec::new();
            for path in paths {
                bytes.extend_from_slice(&(path.len() as u16).to_le_bytes());
                bytes.extend_from_slice(path);
            }
            bytes
        };
        let good = wire(&[b"a", b"d/e/f"]);
        assert_eq!(read_paths(&good).unwrap(), [&b"a"[..], b"d/e/f"]);
        for bad in [&b"../x"[..], b"/etc", b"a//b", b"a/.", b"", b"a\0b"] {
            let shown = read_paths(&wire(&[b"a", bad])).unwrap_err().to_string();
            assert!(shown.contains("a bad path to remove"), "{bad:?}: {shown}");
        }
        let cut = &good[..good.len() - 1];
        assert!(read_paths(cut)
            .unwrap_err()
            .to_string()
            .contains("cut short"));
    }

    #[test]
    fn a_receivers_words_are_shown_escaped() {
        let forged = "no\nbarge: send: done\u{1b}[2J \\x41";
        let refused = encode(&Refuse {
            reason: forged.into(),
        });
        let failed = encode(&Outcome::Error {
            kind: "remote".into(),
            message: forged.into(),
        });
        for (kind, payload) in [(kind::REFUSE, refused), (kind::RESULT, failed)] {
            let shown = unexpected(kind, &payload).to_string();
            assert!(
                shown.ends_with("no\\nbarge: send: done\\x1b[2J \\x41"),
                "{shown}"
            );
        }
    }
}
