//! The pre-shared key and the ticket that carries it with the receiver's address.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

use crate::error::{Error, Result, TreePath};

/// Length of a key in bytes.
pub const KEY_BYTES: usize = 32;
/// Length of a key's text form: base64url without padding.
pub const KEY_CHARS: usize = 43;

/// A 256-bit pre-shared key. Its `Debug` and `Display` never show the bytes; only
/// [`Key::to_text`] does, for the ticket a receiver prints.
#[derive(Clone)]
pub struct Key([u8; KEY_BYTES]);

impl Key {
    /// A fresh random key from the operating system's generator.
    pub fn generate() -> Result<Key> {
        let mut bytes = [0; KEY_BYTES];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| bad_key("the system's random generator failed"))?;
        Ok(Key(bytes))
    }

    /// Parses the text form (43 characters of base64url, no padding). Anything else, such
    /// as a passphrase, is refused: a guessable secret would let whoever connects test
    /// guesses against the handshake offline.
    pub fn from_text(text: &str) -> Result<Key> {
        let wrong = || {
            bad_key(format!(
                "a key is {KEY_CHARS} characters of base64url (as `barge recv` prints in its \
                 ticket), not a passphrase"
            ))
        };
        if text.len() != KEY_CHARS {
            return Err(wrong());
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| wrong())?;
        Ok(Key(bytes.try_into().map_err(|_| wrong())?))
    }

    /// Reads a key file: the text form, a trailing newline allowed. A file that others
    /// than its owner may access is refused ([`open_private`]).
    pub fn from_file(path: &Path) -> Result<Key> {
        let shown = crate::error::escape_bytes(path.as_os_str().as_encoded_bytes());
        let file = open_private(path, "key file")?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, 64), &mut text)
            .map_err(|e| Error::os("read key file", TreePath(shown.clone().into_bytes()), e))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        Key::from_text(text).map_err(|e| bad_key(format!("key file {shown}: {e}")))
    }

    /// The text form: what a ticket and a key file hold.
    pub fn to_text(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    /// The bytes, for the handshake.
    pub(crate) fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }
}

impl PartialEq for Key {
    /// In constant time.
    fn eq(&self, other: &Key) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Key {}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<secret>)")
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<secret key>")
    }
}

/// Opens `path`, a file holding a secret (`what` in messages: "key file", "token file"),
/// refusing it when its group or others have any access to it (`chmod 600` fixes that).
pub fn open_private(path: &Path, what: &str) -> Result<File> {
    let shown = crate::error::escape_bytes(path.as_os_str().as_encoded_bytes());
    let io = |e| {
        Error::os(
            "open a secret file",
            TreePath(shown.clone().into_bytes()),
            e,
        )
    };
    let file = File::open(path).map_err(io)?;
    let mode = file.metadata().map_err(io)?.mode();
    if mode & 0o077 != 0 {
        return Err(Error::Argument {
            arg: what.into(),
            problem: format!(
                "{shown} is accessible to its group or others (mode {:04o}): `chmod 600 {shown}`",
                mode & 0o7777
            ),
        });
    }
    Ok(file)
}

/// The error of a key that cannot be used.
fn bad_key(problem: impl Into<String>) -> Error {
    Error::Argument {
        arg: "key".into(),
        problem: problem.into(),
    }
}

/// Where a receiver is and its key: `HOST:PORT#KEY` (an IPv6 address in brackets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    /// A host name or address (an IPv6 address without its brackets).
    pub host: String,
    /// The port.
    pub port: u16,
    /// The key, when the text had one.
    pub key: Option<Key>,
}

impl Ticket {
    /// Parses `HOST:PORT#KEY` or `HOST:PORT` (the key then comes from elsewhere).
    pub fn parse(text: &str) -> Result<Ticket> {
        let (address, key) = match text.split_once('#') {
            Some((address, key)) => (address, Some(Key::from_text(key)?)),
            None => (text, None),
        };
        let bad = |problem: &str| Error::Argument {
            arg: address.into(),
            problem: format!("{problem}: want HOST:PORT (an IPv6 address as [ADDR]:PORT)"),
        };
        let (host, port) = address.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        let host = match host.strip_prefix('[') {
            Some(inside) => inside.strip_suffix(']').ok_or_else(|| bad("no ']'"))?,
            None if host.contains(':') => return Err(bad("an IPv6 address needs brackets")),
            None => host,
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = port.parse().map_err(|_| bad("not a port number"))?;
        Ok(Ticket {
            host: host.into(),
            port,
            key,
        })
    }

    /// `HOST:PORT`, bracketing an IPv6 address.
    pub fn address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }

    /// The ticket's text with its key (`HOST:PORT#KEY`), or without one.
    pub fn to_text(&self) -> String {
        match &self.key {
            Some(key) => format!("{}#{}", self.address(), key.to_text()),
            None => self.address(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_through_its_text_and_is_never_shown() {
        let key = Key::generate().unwrap();
        let text = key.to_text();
        assert_eq!(text.len(), KEY_CHARS);
        assert_eq!(Key::from_text(&text).unwrap(), key);
        assert_ne!(Key::generate().unwrap(), key);
        for shown in [format!("{key}"), format!("{key:?}")] {
            assert!(!shown.contains(&text[..8]), "{shown}");
        }
        for bad in [
            "",
            "hunter2",
            &text[1..],
            &format!("{text}A"),
            &text.replace(&text[..1], "+"),
        ] {
            assert!(Key::from_text(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tickets_parse_hosts_ports_and_keys() {
        let key = Key::generate().unwrap();
        let text = format!("host.example:7361#{}", key.to_text());
        let ticket = Ticket::parse(&text).unwrap();
        assert_eq!((&*ticket.host, ticket.port), ("host.example", 7361));
        assert_eq!(ticket.key.as_ref(), Some(&key));
        assert_eq!(ticket.to_text(), text);
        let v6 = Ticket::parse("[::1]:9").unwrap();
        assert_eq!((&*v6.host, v6.port, v6.key.is_none()), ("::1", 9, true));
        assert_eq!(v6.address(), "[::1]:9");
        for bad in [
            "host",
            ":9",
            "::1:9",
            "[::1:9",
            "h:port",
            "h:99999",
            "h:1#short",
        ] {
            assert!(Ticket::parse(bad).is_err(), "{bad:?}");
        }
    }
}
