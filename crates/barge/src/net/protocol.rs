//! The protocol's rules without sockets or threads (sans-IO, as quinn-proto or hyper's h1
//! `Conn`): the messages, and for each end of a connection a state machine that takes the
//! peer's messages in and says what they mean and what to answer. [`Inbound`] is the
//! receiver's side, [`Outbound`] the sender's. The drivers (`recv.rs`, `send.rs`, `lanes.rs`)
//! move the messages over the encrypted channel and do what the machines say (spawn the
//! lander, list DEST, write chunks), so the rules are tested message by message in
//! `protocol/tests.rs`, both ends against each other and each against a hostile peer.

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::channel::{protocol, MAX_PAYLOAD};
use crate::confine::Landed;
use crate::error::{escape_message, Error, NetError, Result};
use crate::listing::{Listing, ListingLimits};

/// The version of the protocol a HELLO names.
pub(crate) const VERSION: u32 = 7;

/// The message types (the first byte of each message's plaintext).
pub(crate) mod kind {
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

/// The most lanes a receiver lets one transfer open.
pub(crate) const MAX_LANES: u32 = 16;

/// The bytes of a DATA message's chunk number (big-endian), before its archive bytes.
pub(crate) const SEQ: usize = 8;

/// A message to send: its type and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) kind: u8,
    pub(crate) payload: Vec<u8>,
}

impl Message {
    fn json(kind: u8, body: &impl Serialize) -> Message {
        Message {
            kind,
            payload: encode(body),
        }
    }
}

/// What the sender asks for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) version: u32,
    /// The archive comes as zstd frames.
    pub(crate) compress: bool,
    /// Existing entries are replaced (and, with the listing, unchanged ones not sent).
    pub(crate) update: bool,
    /// With `update`: the sender sends DELETE messages, the paths to remove from DEST,
    /// before its data.
    #[serde(default)]
    pub(crate) delete: bool,
    /// The sender's host name, for the receiver's log.
    pub(crate) name: String,
    /// The connections the sender would use for the transfer, this one included.
    #[serde(default = "one")]
    pub(crate) lanes: u32,
    /// With `lanes` over 1: the id later lanes join with (random, as secret as a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) transfer: Option<String>,
    /// Set on a later lane: the id of the transfer it joins (none of the above applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) join: Option<String>,
    /// Nothing is sent: the receiver accepts (and with `update` sends its listing), then
    /// closes, landing nothing.
    #[serde(default)]
    pub(crate) dry_run: bool,
}

impl Hello {
    /// Whether the sender waits for the receiver's ACCEPT before it goes on: for the listing
    /// an update or a dry run reads after it, and on a later lane, which must not carry
    /// chunks the receiver could refuse. A plain transfer sends its data at once.
    fn answered(&self) -> bool {
        self.update || self.dry_run || self.join.is_some()
    }

    /// The transfer's id and the lanes it takes (at most [`MAX_LANES`]) when it spreads
    /// over several: its later lanes join by the id.
    pub(crate) fn spread(&self) -> Option<(&str, u32)> {
        let id = self.transfer.as_deref().filter(|_| self.lanes > 1)?;
        Some((id, self.lanes.min(MAX_LANES)))
    }
}

fn one() -> u32 {
    1
}

/// The receiver's yes, to a HELLO that is [`Hello::answered`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Accept {
    pub(crate) compress: bool,
}

/// The receiver's no, before any data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Refuse {
    pub(crate) reason: String,
}

/// How the landing ended, as the receiver tells the sender.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Landed(Landed),
    Error { kind: String, message: String },
}

/// Parses a JSON message.
pub(crate) fn decode<'a, T: Deserialize<'a>>(what: &str, payload: &'a [u8]) -> Result<T> {
    serde_json::from_slice(payload).map_err(|e| protocol(format!("a bad {what} message: {e}")))
}

/// Encodes a JSON message.
pub(crate) fn encode(message: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(message).expect("plain data")
}

/// The first bytes of chunk `seq`'s DATA message: its type and number (its archive bytes
/// follow).
pub(crate) fn data_head(seq: u64) -> [u8; 1 + SEQ] {
    let mut head = [kind::DATA; 1 + SEQ];
    head[1..].copy_from_slice(&seq.to_be_bytes());
    head
}

/// The error for a message the peer should not have sent now: a receiver's refusal or
/// failure (with the kind it names when that is a network failure, so both ends report
/// tampering alike), or a protocol error.
pub(crate) fn unexpected(kind: u8, payload: &[u8]) -> Error {
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

/// The receiver's side of one connection, from the sender's first message to the RESULT.
#[derive(Debug)]
pub(crate) struct Inbound {
    state: In,
}

#[derive(Debug)]
enum In {
    /// Before the sender's first message, which must be a HELLO.
    Hello,
    /// The HELLO came: the driver takes it on ([`Inbound::accept`]) or refuses it.
    Asked(Hello),
    /// With update and delete, after the listing: the paths to remove so far, until
    /// DELETE_END; then the DATA of the first lane.
    Deleting(Vec<u8>),
    /// Carrying DATA until END, on the transfer's first lane (whose END counts the chunks)
    /// or a later one; `carried`: some DATA came.
    Data { first: bool, carried: bool },
    /// The END came, or the answer ended the connection: nothing more is read.
    Over,
}

/// What an authenticated sender's HELLO asks for.
#[derive(Debug)]
pub(crate) enum Asked {
    /// A transfer to land.
    Transfer(Hello),
    /// A dry run: the answer (with update, the listing of DEST), nothing landed.
    DryRun(Hello),
    /// A later lane of the running transfer by this id.
    Join(String),
}

/// A first message turned away: why, and the REFUSE that tells the sender (none for a
/// message that was no HELLO), and the sender's name once known.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) error: Error,
    pub(crate) reply: Option<Message>,
    pub(crate) sender: Option<String>,
}

/// The receiver's answer to a HELLO it takes on: the ACCEPT (none for a plain transfer,
/// which the sender does not wait for), then with `list` the listing of DEST.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) accept: Option<Message>,
    pub(crate) list: bool,
}

/// A message carried on a lane.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Carried<'p> {
    /// Chunk `seq` of the archive.
    Chunk { seq: u64, bytes: &'p [u8] },
    /// The lane's END: on the first lane, the archive bytes and chunks sent over all lanes.
    End(Option<Counted>),
}

/// What the sender counted it sent, over all lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counted {
    pub(crate) bytes: u64,
    pub(crate) chunks: u64,
}

impl Default for Inbound {
    fn default() -> Inbound {
        Inbound { state: In::Hello }
    }
}

impl Inbound {
    /// The sender's first message (it decrypted: the sender holds the key).
    pub(crate) fn hello(
        &mut self,
        kind: u8,
        payload: &[u8],
    ) -> std::result::Result<Asked, Refused> {
        let no = |error, reply, sender| Refused {
            error,
            reply,
            sender,
        };
        if !matches!(self.state, In::Hello) {
            return Err(no(protocol("a second HELLO"), None, None));
        }
        self.state = In::Over;
        if kind != kind::HELLO {
            let e = protocol(format!("type {kind} where HELLO was expected"));
            return Err(no(e, None, None));
        }
        let hello: Hello = decode("HELLO", payload).map_err(|e| no(e, None, None))?;
        if hello.version != VERSION {
            let reason = format!(
                "protocol version {}; this receiver speaks {VERSION}",
                hello.version
            );
            let e = protocol(format!("the sender speaks {reason}"));
            return Err(no(e, Some(refuse(reason)), Some(hello.name)));
        }
        self.state = In::Asked(hello.clone());
        Ok(match (&hello.join, hello.dry_run) {
            (Some(id), _) => Asked::Join(id.clone()),
            (None, true) => Asked::DryRun(hello),
            (None, false) => Asked::Transfer(hello),
        })
    }

    /// Takes on the HELLO: what to answer. A dry run is over with the answer; a transfer
    /// or a lane goes on with its DATA.
    pub(crate) fn accept(&mut self) -> Answer {
        let In::Asked(hello) = std::mem::replace(&mut self.state, In::Over) else {
            unreachable!("accept follows a HELLO taken on");
        };
        let accept = Accept {
            compress: hello.compress,
        };
        let accept = (hello.answered()).then(|| Message::json(kind::ACCEPT, &accept));
        let list = hello.update && hello.join.is_none();
        if !hello.dry_run {
            self.state = match list && hello.delete {
                true => In::Deleting(Vec::new()),
                false => In::Data {
                    first: hello.join.is_none(),
                    carried: false,
                },
            };
        }
        Answer { accept, list }
    }

    /// Whether the sender names paths to remove (DELETE messages) before its data.
    pub(crate) fn deletes(&self) -> bool {
        matches!(self.state, In::Deleting(_))
    }

    /// A message naming paths to remove: `None` until DELETE_END, then the bytes of all
    /// (see [`read_paths`]), within the listing's byte budget.
    pub(crate) fn delete(&mut self, kind: u8, payload: &[u8]) -> Result<Option<Vec<u8>>> {
        let In::Deleting(bytes) = &mut self.state else {
            return Err(protocol(format!("type {kind} out of turn")));
        };
        let limit = ListingLimits::default().max_bytes;
        match kind {
            kind::DELETE if (bytes.len() + payload.len()) as u64 <= limit => {
                bytes.extend_from_slice(payload);
                Ok(None)
            }
            kind::DELETE => Err(protocol(format!(
                "the paths to remove are over {limit} bytes"
            ))),
            kind::DELETE_END if payload == (bytes.len() as u64).to_be_bytes() => {
                let bytes = std::mem::take(bytes);
                self.state = In::Data {
                    first: true,
                    carried: false,
                };
                Ok(Some(bytes))
            }
            kind::DELETE_END => Err(protocol("paths to remove of another length than sent")),
            kind => Err(protocol(format!("type {kind} where DELETE was expected"))),
        }
    }

    /// Turns the HELLO (or the sender) away: the REFUSE that says why.
    pub(crate) fn refuse(&mut self, reason: String) -> Message {
        self.state = In::Over;
        refuse(reason)
    }

    /// A message on a lane that carries DATA; after its END nothing more is read.
    pub(crate) fn carry<'p>(&mut self, kind: u8, payload: &'p [u8]) -> Result<Carried<'p>> {
        let In::Data { first, carried } = &mut self.state else {
            return Err(protocol(format!("type {kind} out of turn")));
        };
        let first = *first;
        match kind {
            kind::DATA if payload.len() > SEQ => {
                *carried = true;
                let (seq, bytes) = payload.split_at(SEQ);
                let seq = u64::from_be_bytes(seq.try_into().expect("SEQ bytes"));
                Ok(Carried::Chunk { seq, bytes })
            }
            kind::END => {
                self.state = In::Over;
                if !first {
                    return Ok(Carried::End(None));
                }
                let end = <[u8; 16]>::try_from(payload).map_err(|_| protocol("a bad END"))?;
                let [bytes, chunks] = [&end[..8], &end[8..]]
                    .map(|n| u64::from_be_bytes(n.try_into().expect("8 bytes")));
                Ok(Carried::End(Some(Counted { bytes, chunks })))
            }
            kind => Err(protocol(format!(
                "type {kind} where DATA or END was expected"
            ))),
        }
    }

    /// The connection failed while carrying: the transfer's failure, or `None` for a later
    /// lane closed before any DATA (one the sender did not need).
    pub(crate) fn broken(&mut self, error: Error) -> Option<Error> {
        let unused = matches!(
            (&self.state, &error),
            (
                In::Data {
                    first: false,
                    carried: false
                },
                Error::Net {
                    kind: NetError::Truncated,
                    ..
                }
            )
        );
        self.state = In::Over;
        (!unused).then_some(error)
    }

    /// The RESULT that tells the sender how the transfer ended, unless the connection is
    /// broken (cut short or silent: the sender sees that itself). A tampered stream leaves
    /// this direction intact: the sender hears of it too.
    pub(crate) fn result(
        &mut self,
        result: std::result::Result<&Landed, &Error>,
    ) -> Option<Message> {
        self.state = In::Over;
        let outcome = match result {
            Ok(landed) => Outcome::Landed(landed.clone()),
            Err(Error::Net {
                kind: NetError::Truncated | NetError::Timeout,
                ..
            }) => return None,
            Err(e) => Outcome::Error {
                kind: e.kind().into(),
                message: e.to_string(),
            },
        };
        Some(Message::json(kind::RESULT, &outcome))
    }
}

fn refuse(reason: String) -> Message {
    Message::json(kind::REFUSE, &Refuse { reason })
}

/// The sender's side of one connection, from its HELLO to the receiver's RESULT.
#[derive(Debug)]
pub(crate) struct Outbound {
    hello: Hello,
    state: Out,
    /// Bounds the receiver's listing.
    limits: ListingLimits,
}

#[derive(Debug)]
enum Out {
    /// Waiting for the ACCEPT of a HELLO that is answered.
    Accept,
    /// Reading the listing of DEST: its bytes so far.
    Listing(Vec<u8>),
    /// Sending DATA: the receiver speaks now only to stop the transfer.
    Data,
    /// After END: waiting for the RESULT.
    Result,
    /// A dry run answered, a lane accepted, or the RESULT read.
    Over,
}

/// What the receiver's message means to the sender.
#[derive(Debug)]
pub(crate) enum Heard {
    /// Read on (more of the listing).
    More,
    /// The receiver took the HELLO on: the data may go (a dry run ends), with an update
    /// after the listing of what DEST has.
    Ready(Option<Listing>),
    /// The transfer landed.
    Landed(Landed),
}

impl Outbound {
    /// A sender saying `hello`: its side, and the HELLO to send first.
    pub(crate) fn new(hello: Hello) -> (Outbound, Message) {
        let message = Message::json(kind::HELLO, &hello);
        let state = match hello.answered() {
            true => Out::Accept,
            false => Out::Data,
        };
        let outbound = Outbound {
            hello,
            state,
            limits: ListingLimits::default(),
        };
        (outbound, message)
    }

    /// Whether the receiver answers before any data goes (the HELLO's ACCEPT, the listing).
    pub(crate) fn waits(&self) -> bool {
        matches!(self.state, Out::Accept | Out::Listing(_))
    }

    /// A message from the receiver. Any it should not send now is an error: its refusal or
    /// its failure as it names it, or a protocol error.
    pub(crate) fn receive(&mut self, kind: u8, payload: &[u8]) -> Result<Heard> {
        let update = self.hello.update && self.hello.join.is_none();
        match (&mut self.state, kind) {
            (Out::Accept, kind::ACCEPT) => {
                let accept: Accept = decode("ACCEPT", payload)?;
                if accept.compress != self.hello.compress {
                    return Err(protocol("the receiver did not agree on compression"));
                }
                if update {
                    self.state = Out::Listing(Vec::new());
                    return Ok(Heard::More);
                }
                self.state = self.after_accept();
                Ok(Heard::Ready(None))
            }
            (Out::Listing(bytes), kind::LIST) => {
                let max = self.limits.max_bytes;
                if bytes.len() as u64 + payload.len() as u64 > max {
                    return Err(protocol(format!("the listing of DEST is over {max} bytes")));
                }
                bytes.extend_from_slice(payload);
                Ok(Heard::More)
            }
            (Out::Listing(bytes), kind::LIST_END) => {
                if payload != (bytes.len() as u64).to_be_bytes() {
                    return Err(protocol("a listing of another length than sent"));
                }
                let listing = Listing::read_from(&bytes[..], self.limits)?;
                self.state = self.after_accept();
                Ok(Heard::Ready(Some(listing)))
            }
            (Out::Result, kind::RESULT) => match decode("RESULT", payload)? {
                Outcome::Landed(landed) => {
                    self.state = Out::Over;
                    Ok(Heard::Landed(landed))
                }
                Outcome::Error { .. } => Err(unexpected(kind, payload)),
            },
            (_, kind) => Err(unexpected(kind, payload)),
        }
    }

    /// Where an accepted HELLO leads: a dry run or a lane's start is over, a transfer sends.
    fn after_accept(&self) -> Out {
        match self.hello.dry_run || self.hello.join.is_some() {
            true => Out::Over,
            false => Out::Data,
        }
    }

    /// The END of the first lane, counting what all lanes sent; the RESULT comes next.
    pub(crate) fn end(&mut self, counted: Counted) -> Message {
        debug_assert!(matches!(self.state, Out::Data));
        self.state = Out::Result;
        let mut payload = counted.bytes.to_be_bytes().to_vec();
        payload.extend_from_slice(&counted.chunks.to_be_bytes());
        Message {
            kind: kind::END,
            payload,
        }
    }
}

/// Sends `paths` (each below DEST, at most `u16::MAX` bytes) by `send` as DELETE messages,
/// then DELETE_END.
pub(crate) fn send_paths(
    send: impl FnMut(u8, &[u8]) -> Result<()>,
    paths: &[Box<[u8]>],
) -> Result<()> {
    let mut out = Messages::new(kind::DELETE, send);
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
pub(crate) fn read_paths(mut bytes: &[u8]) -> Result<Vec<&[u8]>> {
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

/// A byte stream as messages of one type (the receiver's listing of DEST as LIST), each
/// handed to `send`: an [`io::Write`] that ends with a message counting the bytes.
pub(crate) struct Messages<F> {
    send: F,
    kind: u8,
    buf: Vec<u8>,
    sent: u64,
    /// The error of `send`, which the writer's caller sees only as an I/O error.
    pub(crate) failed: Option<Error>,
}

impl<F: FnMut(u8, &[u8]) -> Result<()>> Messages<F> {
    pub(crate) fn new(kind: u8, send: F) -> Messages<F> {
        Messages {
            send,
            kind,
            buf: Vec::with_capacity(MAX_PAYLOAD),
            sent: 0,
            failed: None,
        }
    }

    /// Sends the buffered bytes as one message.
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        match (self.send)(self.kind, &self.buf) {
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
        (self.send)(end, &self.sent.to_be_bytes())?;
        Ok(self.sent)
    }
}

impl<F: FnMut(u8, &[u8]) -> Result<()>> Write for Messages<F> {
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
pub(crate) mod tests;
