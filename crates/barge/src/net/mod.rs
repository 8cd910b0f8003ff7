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
//! The rules of this exchange are `protocol.rs`' state machines (`Inbound`, `Outbound`),
//! and the handshake's and messages' cryptography `channel/session.rs`', neither with a
//! socket or a thread; `recv.rs`, `send.rs`, `lanes.rs` and `channel.rs` drive them.
//!
//! docs/SECURITY.md ("send / recv") has the threat model.

pub(crate) mod channel;
pub mod key;
pub(crate) mod lanes;
pub mod peers;
pub(crate) mod protocol;
pub mod recv;
pub mod send;
pub mod server;

pub use key::{open_private, Key, Ticket};
pub use recv::{Connection, Receive, Received};
pub use send::{Payload, Planned, Send, Sent};
pub use server::Receiver;

/// The port `recv` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7361;
/// zstd's level for `--compress`: its fastest but negative ones, run on every core, so that
/// compressing keeps up with a gigabit link (the default level 3 on one core does not:
/// docs/BENCHMARKS.md, "Design measurements").
const ZSTD_LEVEL: i32 = 1;

/// This host's name, for the peer's log and for tickets.
pub fn host_name() -> String {
    let uname = rustix::system::uname();
    String::from_utf8_lossy(uname.nodename().to_bytes()).into_owned()
}
