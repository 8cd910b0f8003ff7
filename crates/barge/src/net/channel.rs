//! The encrypted channel: a Noise `NNpsk2` handshake over a TCP stream, then framed,
//! authenticated messages, each a `u16` big-endian length + ciphertext, written in batches.
//! The handshake and the messages' encryption are `channel/session.rs`' (no socket); this
//! file moves their bytes.
//!
//! Every wait has a timeout (the peer sent nothing, or took nothing, for that long) and,
//! fails once the caller's cancellation token (`Cancel`) is cancelled.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::key::Key;
use crate::error::{Error, NetError, Result, TreePath};
use crate::interrupt::{wait_for_any, Cancel, Waited};
use session::{Initiator, Responder, Session};

mod session;

/// Longest Noise message.
const MAX_MESSAGE: usize = 65535;
/// The authentication tag of each message.
const TAG: usize = 16;
/// Longest plaintext of a message: its type byte and payload.
pub(crate) const MAX_PLAIN: usize = MAX_MESSAGE - TAG;
/// Longest payload of a message after its type byte.
pub(crate) const MAX_PAYLOAD: usize = MAX_PLAIN - 1;
/// Frames are written in batches of about this many bytes: one `write` per batch.
pub(crate) const BATCH: usize = 256 << 10;

/// The framed TCP stream under the channel: reads frames, writes batches, with timeouts.
struct Wire {
    stream: TcpStream,
    /// The peer's address, for messages.
    peer: String,
    timeout: Duration,
    /// Waits fail once it is cancelled.
    stop: Cancel,
    /// This end sends the archive (and expects nothing back until its end).
    sender: bool,
    /// Received bytes: `input[start..end]` not consumed yet.
    input: Box<[u8]>,
    start: usize,
    end: usize,
    /// The peer has sent a byte.
    received_any: bool,
    /// Frames queued: `output[sent..queued]` not written yet. The buffer keeps its length
    /// (zeroed once, as it grew), so a frame is encrypted into it without zeroing it again.
    output: Vec<u8>,
    queued: usize,
    sent: usize,
    /// Once cancelled, waits fail (another lane of the transfer failed).
    cancel: Option<Cancel>,
    /// A receiver's handshake must end by then (when it began, how long it may take), however
    /// often the peer speaks; `None` once the peer showed the key.
    deadline: Option<(Instant, Duration)>,
}

/// What a wait for the socket found.
#[derive(PartialEq, Eq)]
enum Ready {
    /// The socket can take (or give) bytes.
    Yes,
    /// The peer sent something while this end waited to write.
    Incoming,
}

impl Wire {
    fn new(stream: TcpStream, timeout: Duration, stop: Cancel, sender: bool) -> Result<Wire> {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "<peer>".into(), |a| a.to_string());
        stream
            .set_nonblocking(true)
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| Error::os("set up connection", TreePath(peer.clone().into()), e))?;
        Ok(Wire {
            stream,
            peer,
            timeout,
            stop,
            sender,
            input: vec![0; 2 * BATCH].into_boxed_slice(),
            start: 0,
            end: 0,
            received_any: false,
            output: Vec::with_capacity(BATCH + MAX_MESSAGE + 2),
            queued: 0,
            sent: 0,
            cancel: None,
            deadline: None,
        })
    }

    /// Reads one frame, returning where its body is in `input` (valid until the next read).
    /// `authenticated`: whether the peer showed it has the key (an end before that is a
    /// failed handshake, not a truncated transfer).
    fn read_frame(&mut self, authenticated: bool) -> Result<std::ops::Range<usize>> {
        self.fill(2, authenticated)?;
        let len = u16::from_be_bytes([self.input[self.start], self.input[self.start + 1]]);
        self.fill(2 + len as usize, authenticated)?;
        let body = self.start + 2..self.start + 2 + len as usize;
        self.start = body.end;
        Ok(body)
    }

    /// Makes `n` unconsumed bytes available, reading as much as comes.
    fn fill(&mut self, n: usize, authenticated: bool) -> Result<()> {
        while self.end - self.start < n {
            if self.input.len() - self.start < n {
                self.input.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            self.wait(PollFlags::IN)?;
            match (&self.stream).read(&mut self.input[self.end..]) {
                // A connection that says nothing (a port scan, a health check) is no failed
                // authentication.
                Ok(0) if !self.sender && !self.received_any => {
                    return Err(Error::net(
                        NetError::Truncated,
                        "the connection closed before the handshake, having sent nothing",
                    ))
                }
                Ok(0) if !authenticated => return Err(not_authenticated(self.sender)),
                Ok(0) => return Err(truncated("the connection closed")),
                Ok(got) => {
                    self.end += got;
                    self.received_any = true;
                }
                Err(e) => self.failed("receive from", e)?,
            }
        }
        Ok(())
    }

    /// Writes every queued frame. With `watch`, stops (returning false) when the peer sent
    /// something meanwhile.
    fn flush(&mut self, watch: bool) -> Result<bool> {
        while self.sent < self.queued {
            let flags = match watch {
                true => PollFlags::OUT | PollFlags::IN,
                false => PollFlags::OUT,
            };
            if self.wait(flags)? == Ready::Incoming {
                return Ok(false);
            }
            self.write_some()?;
        }
        Ok(true)
    }

    /// Writes what the socket takes now of the queued frames, without waiting.
    fn write_some(&mut self) -> Result<()> {
        match (&self.stream).write(&self.output[self.sent..self.queued]) {
            Ok(n) => self.sent += n,
            Err(e) => self.failed("send to", e)?,
        }
        if self.sent == self.queued {
            self.clear();
        } else if self.sent >= BATCH {
            // Frames keep being queued behind a partial write: keep the buffer bounded.
            self.output.copy_within(self.sent..self.queued, 0);
            self.queued -= self.sent;
            self.sent = 0;
        }
        Ok(())
    }

    /// Whether a failed read or write is worth retrying; the error when not.
    fn failed(&self, op: &'static str, e: io::Error) -> Result<()> {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(()),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
                Err(truncated("the connection was reset"))
            }
            _ => Err(Error::os(op, TreePath(self.peer.clone().into()), e)),
        }
    }

    /// Waits until the socket is ready for `flags` (with `OUT | IN`: to write, or the peer
    /// sent something), failing after the timeout or once its token is cancelled.
    fn wait(&self, flags: PollFlags) -> Result<Ready> {
        let mut fds = [PollFd::new(&self.stream, flags)];
        let cancelled = self.cancel.as_ref();
        // Up to the timeout, or the handshake's deadline where that comes first.
        let left = self
            .deadline
            .map(|(start, limit)| limit.saturating_sub(start.elapsed()));
        let late = left.filter(|&left| left < self.timeout);
        let wait = late.unwrap_or(self.timeout);
        match wait_for_any(&mut fds, Some(wait), &self.stop, cancelled)? {
            Waited::Ready => {}
            Waited::Cancelled => {
                return Err(Error::net(
                    NetError::Remote,
                    "the transfer failed on another connection",
                ))
            }
            Waited::TimedOut if late.is_some() => {
                let limit = self.deadline.map_or(0, |(_, limit)| limit.as_secs());
                return Err(Error::net(
                    NetError::Timeout,
                    format!(
                        "{} did not finish the handshake within {limit} s",
                        self.peer
                    ),
                ));
            }
            Waited::TimedOut => {
                let what = match flags == PollFlags::IN {
                    true => "sent nothing",
                    false => "took nothing",
                };
                return Err(Error::net(
                    NetError::Timeout,
                    format!(
                        "{} {what} for {} s (see --timeout)",
                        self.peer,
                        self.timeout.as_secs()
                    ),
                ));
            }
        }
        let ready = fds[0].revents();
        Ok(
            match flags.contains(PollFlags::OUT) && ready.contains(PollFlags::IN) {
                true => Ready::Incoming,
                false => Ready::Yes,
            },
        )
    }

    /// Queues one frame around the message `write` puts in place (returning its length).
    fn frame(&mut self, write: impl FnOnce(&mut [u8]) -> Result<usize>) -> Result<()> {
        let at = self.queued;
        if self.output.len() < at + 2 + MAX_MESSAGE {
            self.output.resize(at + 2 + MAX_MESSAGE, 0);
        }
        let n = write(&mut self.output[at + 2..at + 2 + MAX_MESSAGE])?;
        self.output[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
        self.queued = at + 2 + n;
        Ok(())
    }

    /// Drops every queued frame.
    fn clear(&mut self) {
        self.queued = 0;
        self.sent = 0;
    }
}

/// The authenticated, encrypted channel over one TCP connection (see the [module](self)
/// documentation): a [`Session`]'s messages over a [`Wire`].
pub(crate) struct Channel {
    wire: Wire,
    session: Session,
    /// The last message decrypted, or the next one to encrypt.
    plain: Vec<u8>,
}

impl Channel {
    /// Runs the sender's side of the handshake over `stream`; on return the receiver is
    /// known to hold the key (its handshake message decrypted). Its waits fail once `stop`
    /// is cancelled.
    pub(crate) fn connect(
        stream: TcpStream,
        key: &Key,
        timeout: Duration,
        stop: Cancel,
    ) -> Result<Channel> {
        let mut wire = Wire::new(stream, timeout, stop, true)?;
        let mut initiator = Initiator::new(key);
        wire.frame(|out| Ok(initiator.first(out)))?;
        wire.flush(false)?;
        let body = wire.read_frame(false)?;
        let session = initiator.finish(&wire.input[body])?;
        Ok(Channel::new(wire, session))
    }

    /// Runs the receiver's side of the handshake over `stream`. The sender is known to
    /// hold the key only once its first message decrypts ([`Channel::receive`]), which must
    /// come within `handshake` from now, however often the peer sends a byte.
    pub(crate) fn accept(
        stream: TcpStream,
        key: &Key,
        timeout: Duration,
        handshake: Duration,
        stop: Cancel,
    ) -> Result<Channel> {
        let mut wire = Wire::new(stream, timeout, stop, false)?;
        wire.deadline = Some((Instant::now(), handshake));
        let body = wire.read_frame(false)?;
        let mut responder = Responder::new(key, &wire.input[body])?;
        wire.frame(|out| Ok(responder.answer(out)))?;
        wire.flush(false)?;
        Ok(Channel::new(wire, responder.finish()?))
    }

    fn new(wire: Wire, session: Session) -> Channel {
        Channel {
            wire,
            session,
            plain: Vec::with_capacity(MAX_MESSAGE),
        }
    }

    /// Queues a message of type `kind` (payload at most [`MAX_PAYLOAD`] bytes), writing the
    /// queue once it holds a batch.
    pub(crate) fn send(&mut self, kind: u8, payload: &[u8]) -> Result<()> {
        self.queue(kind, payload)?;
        if self.pending() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Encrypts a message of type `kind` onto the queue, writing nothing.
    pub(crate) fn queue(&mut self, kind: u8, payload: &[u8]) -> Result<()> {
        debug_assert!(payload.len() <= MAX_PAYLOAD);
        self.plain.clear();
        self.plain.push(kind);
        self.plain.extend_from_slice(payload);
        let (session, plain) = (&mut self.session, &self.plain);
        self.wire.frame(|out| session.seal(plain, out))
    }

    /// Encrypts the message `plain` (its type, then its payload) onto the queue, writing
    /// nothing: [`Channel::queue`] without copying a payload that comes with its type.
    pub(crate) fn queue_message(&mut self, plain: &[u8]) -> Result<()> {
        debug_assert!(plain.len() <= MAX_PLAIN);
        let session = &mut self.session;
        self.wire.frame(|out| session.seal(plain, out))
    }

    /// Bytes queued and not written yet.
    pub(crate) fn pending(&self) -> usize {
        self.wire.queued - self.wire.sent
    }

    /// Writes what the socket takes now of the queue, without waiting (see [`Channel::fd`]).
    pub(crate) fn write_some(&mut self) -> Result<()> {
        self.wire.write_some()
    }

    /// The socket, for a caller polling several channels.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.wire.stream.as_fd()
    }

    /// Whether the peer sent something (or closed) within `wait`; also true once its stop
    /// is cancelled.
    pub(crate) fn spoke_within(&self, wait: Duration) -> bool {
        let mut fds = [PollFd::new(&self.wire.stream, PollFlags::IN)];
        let waited = wait_for_any(&mut fds, Some(wait), &self.wire.stop, None);
        !matches!(waited, Ok(Waited::TimedOut))
    }

    /// Makes every wait fail once `cancel` is cancelled (within 100 ms); `None`: no more.
    pub(crate) fn cancel_on(&mut self, cancel: Option<Cancel>) {
        self.wire.cancel = cancel;
    }

    /// What stops its waits.
    pub(crate) fn stop(&self) -> &Cancel {
        &self.wire.stop
    }

    /// Writes every queued message. The sender fails with the receiver's message when it
    /// sent one meanwhile (a receiver that stopped sends its result and reads no more).
    pub(crate) fn flush(&mut self) -> Result<()> {
        match self.wire.flush(self.wire.sender)? {
            true => Ok(()),
            false => Err(self.heard()),
        }
    }

    /// What the peer sent while this end was sending, which drops what is queued: its
    /// message as an error (a receiver sends only to stop the transfer), or the connection's
    /// end.
    pub(crate) fn heard(&mut self) -> Error {
        self.wire.clear();
        match self.receive() {
            Ok((kind, payload)) => super::protocol::unexpected(kind, payload),
            Err(e) => e,
        }
    }

    /// Receives the next message: its type and payload. A message that fails to decrypt
    /// is tampering, or, as the peer's first, a wrong key.
    pub(crate) fn receive(&mut self) -> Result<(u8, &[u8])> {
        if self.pending() > 0 {
            self.flush()?;
        }
        let body = self.wire.read_frame(self.session.authenticated())?;
        self.plain.resize(MAX_MESSAGE, 0);
        let opened = (self.session).open(&self.wire.input[body], &mut self.plain)?;
        self.wire.deadline = None;
        Ok(opened)
    }

    /// Sends what is queued, stops sending (a FIN), and reads what the peer still sends
    /// until it closes or the timeout passes: closing with unread bytes would reset the
    /// connection, and the peer could lose our last message.
    pub(crate) fn close(mut self) {
        if self.wire.flush(false).is_err() {
            return;
        }
        let _ = self.wire.stream.shutdown(std::net::Shutdown::Write);
        let mut sink = [0; 1 << 16];
        while let Ok(Ready::Yes) = self.wire.wait(PollFlags::IN) {
            match (&self.wire.stream).read(&mut sink) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => {
                    if self.wire.failed("receive from", e).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// The error of a peer that does not hold the key (the `sender` cannot tell a receiver
/// with another key from a stranger).
fn not_authenticated(sender: bool) -> Error {
    Error::net(
        NetError::Authentication,
        match sender {
            true => {
                "authentication failed: the receiver refused the key, or is not a barge receiver"
            }
            false => {
                "authentication failed: the sender does not have the key, or is not a barge sender"
            }
        },
    )
}

/// The error of an authenticated peer breaking the protocol.
pub(crate) fn protocol(problem: impl std::fmt::Display) -> Error {
    Error::net(NetError::Protocol, format!("protocol error: {problem}"))
}

/// The error of a connection that ended early.
pub(crate) fn truncated(how: &str) -> Error {
    Error::net(
        NetError::Truncated,
        format!("{how} before the end of the transfer: the stream was truncated"),
    )
}

#[cfg(test)]
pub(crate) mod tests;
