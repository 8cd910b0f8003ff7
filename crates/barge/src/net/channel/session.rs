//! The channel's cryptography without its socket: the Noise handshake's messages in and out,
//! then each message sealed and opened, and which failure is a wrong key (before the peer
//! showed it) and which is tampering (after). snow does the cryptography; `Channel` moves
//! the bytes.

use snow::{Builder, HandshakeState, TransportState};

use super::{not_authenticated, protocol, MAX_MESSAGE};
use crate::error::{Error, NetError, Result};
use crate::net::key::Key;

/// The Noise protocol: see docs/SECURITY.md ("send / recv") for why psk2.
const PATTERN: &str = "Noise_NNpsk2_25519_AESGCM_SHA256";
/// Bound into the handshake: a peer speaking another version fails it.
const PROLOGUE: &[u8] = b"barge-net-1";

/// The sender's handshake: its first message (`-> e`), then the receiver's answer.
pub(super) struct Initiator(HandshakeState);

impl Initiator {
    pub(super) fn new(key: &Key) -> Initiator {
        Initiator(builder(key).build_initiator().expect("valid parameters"))
    }

    /// Writes the first message into `out`; its length.
    pub(super) fn first(&mut self, out: &mut [u8]) -> usize {
        self.0.write_message(&[], out).expect("fits")
    }

    /// Reads the receiver's answer (`<- e, ee, psk`), which decrypts only with the key.
    pub(super) fn finish(mut self, answer: &[u8]) -> Result<Session> {
        (self.0)
            .read_message(answer, &mut [0; MAX_MESSAGE])
            .map_err(|_| not_authenticated(true))?;
        Session::new(self.0, true)
    }
}

/// The receiver's handshake: the sender's first message, then the answer. Anyone can send
/// a first message: the sender is known to hold the key only once its first message in
/// the session opens.
pub(super) struct Responder(HandshakeState);

impl Responder {
    /// Reads the sender's first message (a malformed one is no barge sender).
    pub(super) fn new(key: &Key, first: &[u8]) -> Result<Responder> {
        let mut noise = builder(key).build_responder().expect("valid parameters");
        (noise.read_message(first, &mut [0; MAX_MESSAGE])).map_err(|_| not_authenticated(false))?;
        Ok(Responder(noise))
    }

    /// Writes the answer into `out`; its length.
    pub(super) fn answer(&mut self, out: &mut [u8]) -> usize {
        self.0.write_message(&[], out).expect("fits")
    }

    /// The session, once the answer is sent.
    pub(super) fn finish(self) -> Result<Session> {
        Session::new(self.0, false)
    }
}

/// One end's keys after the handshake.
pub(super) struct Session {
    noise: TransportState,
    /// This end is the sender.
    sender: bool,
    /// Set once the peer showed it holds the key: before that a failure means a wrong key.
    authenticated: bool,
}

impl Session {
    fn new(noise: HandshakeState, sender: bool) -> Result<Session> {
        let noise = noise
            .into_transport_mode()
            .map_err(|e| protocol(format!("the handshake did not finish: {e}")))?;
        Ok(Session {
            noise,
            sender,
            // The sender knows it from the receiver's answer.
            authenticated: sender,
        })
    }

    /// Whether the peer showed it holds the key.
    pub(super) fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Encrypts the message `plain` (its type, then its payload) into `out`; its length.
    pub(super) fn seal(&mut self, plain: &[u8], out: &mut [u8]) -> Result<usize> {
        (self.noise.write_message(plain, out)).map_err(|e| protocol(format!("cannot encrypt: {e}")))
    }

    /// Decrypts the message `frame` into `plain`: its type and payload. One that fails is
    /// tampering, or, as the peer's first, a wrong key.
    pub(super) fn open<'p>(&mut self, frame: &[u8], plain: &'p mut [u8]) -> Result<(u8, &'p [u8])> {
        let n = match self.noise.read_message(frame, plain) {
            Ok(n) => n,
            Err(_) if !self.authenticated => return Err(not_authenticated(self.sender)),
            Err(_) => {
                return Err(Error::net(
                    NetError::Tampered,
                    "a message failed its authentication check: the connection was tampered \
                     with (a byte changed, or a message replayed, reordered or dropped)",
                ))
            }
        };
        self.authenticated = true;
        match plain[..n].split_first() {
            Some((&kind, payload)) => Ok((kind, payload)),
            None => Err(protocol("an empty message")),
        }
    }
}

/// The handshake's parameters with `key`.
fn builder(key: &Key) -> Builder<'_> {
    Builder::new(PATTERN.parse().expect("a valid pattern"))
        .psk(2, key.bytes())
        .and_then(|b| b.prologue(PROLOGUE))
        .expect("valid parameters")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(error: &Error) -> Option<NetError> {
        match error {
            Error::Net { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// The sender's and receiver's sessions after a handshake in memory, or the sender's
    /// error when the receiver holds another key.
    fn handshake(sender: &Key, receiver: &Key) -> Result<(Session, Session)> {
        let (mut first, mut answer) = ([0; MAX_MESSAGE], [0; MAX_MESSAGE]);
        let mut initiator = Initiator::new(sender);
        let n = initiator.first(&mut first);
        let mut responder = Responder::new(receiver, &first[..n])?;
        let m = responder.answer(&mut answer);
        Ok((initiator.finish(&answer[..m])?, responder.finish()?))
    }

    /// `message` sealed by `from`.
    fn sealed(from: &mut Session, message: &[u8]) -> Vec<u8> {
        let mut out = vec![0; MAX_MESSAGE];
        let n = from.seal(message, &mut out).unwrap();
        out.truncate(n);
        out
    }

    /// What `to` opens of `frame`: its type and payload, or the error's kind.
    fn opened(to: &mut Session, frame: &[u8]) -> std::result::Result<(u8, Vec<u8>), NetError> {
        let mut plain = vec![0; MAX_MESSAGE];
        let opened = to.open(frame, &mut plain);
        opened
            .map(|(kind, payload)| (kind, payload.to_vec()))
            .map_err(|e| kind_of(&e).unwrap())
    }

    #[test]
    fn the_same_key_opens_messages_both_ways_and_authenticates_the_sender_by_its_first() {
        let key = Key::generate().unwrap();
        let (mut sender, mut receiver) = handshake(&key, &key).unwrap();
        assert!(sender.authenticated() && !receiver.authenticated());
        let hello = sealed(&mut sender, b"\x01hello");
        assert_eq!(opened(&mut receiver, &hello), Ok((1, b"hello".to_vec())));
        assert!(receiver.authenticated());
        let result = sealed(&mut receiver, b"\x08done");
        assert_eq!(opened(&mut sender, &result), Ok((8, b"done".to_vec())));
        let empty = sealed(&mut sender, b"");
        assert_eq!(opened(&mut receiver, &empty), Err(NetError::Protocol));
    }

    #[test]
    fn another_key_fails_the_senders_handshake_as_authentication() {
        let error = handshake(&Key::generate().unwrap(), &Key::generate().unwrap())
            .map(drop)
            .unwrap_err();
        assert_eq!(kind_of(&error), Some(NetError::Authentication), "{error}");
        assert!(error.to_string().contains("the receiver refused the key"));
        // A first message that is no Noise message is no barge sender.
        let stranger = Responder::new(&Key::generate().unwrap(), b"GET / HTTP/1.1");
        let error = stranger.map(drop).unwrap_err();
        assert_eq!(kind_of(&error), Some(NetError::Authentication), "{error}");
    }

    #[test]
    fn a_changed_first_message_is_a_wrong_key_and_a_later_one_tampering() {
        let key = Key::generate().unwrap();
        let (mut sender, mut receiver) = handshake(&key, &key).unwrap();
        let mut hello = sealed(&mut sender, b"\x01hello");
        hello[3] ^= 1;
        assert_eq!(opened(&mut receiver, &hello), Err(NetError::Authentication));
        let (mut sender, mut receiver) = handshake(&key, &key).unwrap();
        let hello = sealed(&mut sender, b"\x01hello");
        let (one, two) = (
            sealed(&mut sender, b"\x06one"),
            sealed(&mut sender, b"\x06two"),
        );
        opened(&mut receiver, &hello).unwrap();
        // Replayed, reordered, changed: each fails as tampering, however it came.
        assert_eq!(opened(&mut receiver, &hello), Err(NetError::Tampered));
        assert_eq!(opened(&mut receiver, &two), Err(NetError::Tampered));
        let mut changed = one.clone();
        changed[0] ^= 0x80;
        assert_eq!(opened(&mut receiver, &changed), Err(NetError::Tampered));
    }
}
