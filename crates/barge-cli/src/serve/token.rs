//! The bearer token every upload must present. The server keeps only its SHA-256 and
//! compares digests in constant time, so neither the token's bytes nor its length show in
//! how long a refusal takes.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use barge::net::open_private;
use base64::Engine;
use ring::digest::{digest, SHA256};
use subtle::ConstantTimeEq;

use crate::report::shown_path;

/// The environment variable a token may come from.
const ENV: &str = "BARGE_TOKEN";

/// Shorter tokens are refused: they could be guessed.
const MIN_LEN: usize = 16;

/// The token, or rather what is needed to check one, and the token itself when it was
/// generated (to be printed once).
pub(super) struct Token {
    digest: [u8; 32],
    generated: Option<String>,
}

impl Token {
    /// The first line of `file`, which must not be accessible to its group or others.
    pub(super) fn from_file(file: &Path) -> anyhow::Result<Token> {
        let shown = shown_path(file);
        let mut opened = open_private(file, "token file")?;
        let mut text = String::new();
        opened
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read {shown} (it must be text)"))?;
        Token::checked(text.lines().next().unwrap_or(""), &shown)
    }

    /// From `BARGE_TOKEN`, which is then removed from the environment (the confined
    /// children need not see it); `None` when it is not set.
    pub(super) fn from_env() -> anyhow::Result<Option<Token>> {
        let Some(value) = std::env::var_os(ENV) else {
            return Ok(None);
        };
        std::env::remove_var(ENV);
        let Some(text) = value.to_str() else {
            bail!("{ENV} is not valid UTF-8");
        };
        Token::checked(text, ENV).map(Some)
    }

    /// 256 random bits, base64url-encoded.
    pub(super) fn generate() -> Token {
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .expect("the system's random number generator works");
        let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        Token {
            digest: sha256(text.as_bytes()),
            generated: Some(text),
        }
    }

    fn checked(text: &str, from: &str) -> anyhow::Result<Token> {
        let text = text.trim();
        if text.len() < MIN_LEN {
            bail!("the token in {from} is shorter than {MIN_LEN} characters, which is guessable");
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            bail!("the token in {from} has characters an HTTP header cannot carry");
        }
        Ok(Token {
            digest: sha256(text.as_bytes()),
            generated: None,
        })
    }

    /// Whether `presented` is the token (constant time).
    pub(super) fn matches(&self, presented: &[u8]) -> bool {
        sha256(presented).ct_eq(&self.digest).into()
    }

    /// Prints the page's addresses (one a line; with `json` one object, `url` the first of
    /// `urls`) with the generated token in their fragment (which browsers send to no
    /// server): the one place the token is ever shown.
    pub(super) fn print_urls(&self, urls: &[String], json: bool) {
        let Some(text) = &self.generated else { return };
        let addresses: Vec<String> = urls
            .iter()
            .map(|url| format!("{url}#token={text}"))
            .collect();
        match json {
            true => println!(
                "{}",
                serde_json::json!({ "url": addresses[0], "urls": addresses })
            ),
            false => println!("{}", addresses.join("\n")),
        }
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest(&SHA256, bytes)
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_is_256_bits_of_base64url_and_matches_only_itself() {
        let token = Token::generate();
        let text = token.generated.clone().unwrap();
        assert_eq!(text.len(), 43);
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert!(token.matches(text.as_bytes()));
        assert!(!token.matches(&text.as_bytes()[1..]));
        assert!(!token.matches(b""));
        assert_ne!(Token::generate().generated, Some(text));
    }

    #[test]
    fn short_or_unprintable_tokens_are_refused() {
        assert!(Token::checked("short", "x").is_err());
        assert!(Token::checked("sixteen chars ok", "x").is_err(), "a space");
        let token = Token::checked("  0123456789abcdef\n", "x").unwrap();
        assert!(token.matches(b"0123456789abcdef"));
    }
}
