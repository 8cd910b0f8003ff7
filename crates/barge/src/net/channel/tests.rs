//! The channel over loopback: messages cross whole and in order both ways, and a stream
//! changed on the way (a relay between the ends edits the sender's frames) fails as
//! tampered, truncated or unauthenticated, as each case is. `pair` serves the other
//! modules' tests of what runs over channels.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;

use super::*;
use crate::net::protocol::{encode, kind, Refuse};

/// Long enough for any wait a test expects to end: none of them measures time.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A sender's channel and a receiver's (timing out after `timeout`) over loopback, each
/// end with its key; the receiver's handshake runs on a thread.
pub(crate) fn pair_with(
    sender: &Key,
    receiver: &Key,
    timeout: Duration,
) -> (Result<Channel>, Result<Channel>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let key = receiver.clone();
    let accepting = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        Channel::accept(stream, &key, timeout, timeout, Cancel::new())
    });
    let stream = TcpStream::connect(address).unwrap();
    let connected = Channel::connect(stream, sender, WAIT, Cancel::new());
    (connected, accepting.join().unwrap())
}

/// A sender's channel and a receiver's over loopback, sharing a key.
pub(crate) fn pair() -> (Channel, Channel) {
    let key = Key::generate().unwrap();
    let (sender, receiver) = pair_with(&key, &key, WAIT);
    (sender.unwrap(), receiver.unwrap())
}

/// The kind of a network error (`None` for any other error).
pub(crate) fn net_kind(error: &Error) -> Option<NetError> {
    match error {
        Error::Net { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// A pair whose sender's frames pass through `edit(n, frame)` on a relay (`n` counts them
/// from 0, the handshake's first; `frame` is its length and body): it returns the bytes
/// to pass on, or `None` to end the connection there. The receiver's bytes pass as they are.
fn relayed(
    mut edit: impl FnMut(usize, Vec<u8>) -> Option<Vec<u8>> + std::marker::Send + 'static,
) -> (Channel, Channel) {
    let key = Key::generate().unwrap();
    let receiver = TcpListener::bind("127.0.0.1:0").unwrap();
    let to_receiver = receiver.local_addr().unwrap();
    let relay = TcpListener::bind("127.0.0.1:0").unwrap();
    let to_relay = relay.local_addr().unwrap();
    thread::spawn(move || {
        let (mut from, _) = relay.accept().unwrap();
        let mut to = TcpStream::connect(to_receiver).unwrap();
        let (mut back_from, mut back_to) = (to.try_clone().unwrap(), from.try_clone().unwrap());
        thread::spawn(move || {
            let _ = std::io::copy(&mut back_from, &mut back_to);
            let _ = back_to.shutdown(Shutdown::Write);
        });
        for n in 0.. {
            let mut frame = vec![0; 2];
            if from.read_exact(&mut frame).is_err() {
                break;
            }
            let len = usize::from(u16::from_be_bytes([frame[0], frame[1]]));
            frame.resize(2 + len, 0);
            if from.read_exact(&mut frame[2..]).is_err() {
                break;
            }
            match edit(n, frame) {
                Some(bytes) if to.write_all(&bytes).is_ok() => {}
                _ => break,
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let receiving = key.clone();
    let accepting = thread::spawn(move || {
        let (stream, _) = receiver.accept().unwrap();
        Channel::accept(stream, &receiving, WAIT, WAIT, Cancel::new())
    });
    let stream = TcpStream::connect(to_relay).unwrap();
    let sender = Channel::connect(stream, &key, WAIT, Cancel::new()).unwrap();
    (sender, accepting.join().unwrap().unwrap())
}

/// Sends "one", "two", "three" through a relay that edits them with `edit`, then closes;
/// returns what the receiver got before its first error, and that error's kind.
fn through(
    edit: impl FnMut(usize, Vec<u8>) -> Option<Vec<u8>> + std::marker::Send + 'static,
) -> (Vec<String>, Option<NetError>) {
    let (mut sender, mut receiver) = relayed(edit);
    for word in ["one", "two", "three"] {
        sender.send(kind::DATA, word.as_bytes()).unwrap();
    }
    sender.flush().unwrap();
    drop(sender);
    let mut got = Vec::new();
    loop {
        match receiver.receive() {
            Ok((kind, payload)) => {
                assert_eq!(kind, kind::DATA);
                got.push(String::from_utf8(payload.to_vec()).unwrap());
            }
            Err(e) => return (got, net_kind(&e)),
        }
    }
}

#[test]
fn messages_cross_whole_and_in_order_both_ways() {
    let (mut sender, mut receiver) = pair();
    // Every size from empty to the largest, more of them than a batch holds.
    let sizes = [0, 1, 100, 4096, MAX_PAYLOAD, MAX_PAYLOAD - 1, 65_000];
    let messages: Vec<(u8, Vec<u8>)> = (0..120usize)
        .map(|i| {
            let size = sizes[i % sizes.len()];
            let kind = (i % 8) as u8 + 1;
            (kind, (0..size).map(|j| (i * 7 + j) as u8).collect())
        })
        .collect();
    let sent = messages.clone();
    let sending = thread::spawn(move || {
        for (kind, payload) in &sent {
            sender.send(*kind, payload).unwrap();
        }
        sender.flush().unwrap();
        let (kind, payload) = sender.receive().unwrap();
        (kind, payload.to_vec())
    });
    for (i, (kind, payload)) in messages.iter().enumerate() {
        let (got_kind, got) = receiver.receive().unwrap();
        assert_eq!(got_kind, *kind, "message {i}");
        assert!(got == &payload[..], "message {i}: {} bytes", got.len());
    }
    receiver.send(kind::RESULT, b"done").unwrap();
    receiver.flush().unwrap();
    assert_eq!(sending.join().unwrap(), (kind::RESULT, b"done".to_vec()));
}

#[test]
fn another_key_fails_the_handshake_on_both_ends() {
    let (sender, receiver) = pair_with(&Key::generate().unwrap(), &Key::generate().unwrap(), WAIT);
    let sender = sender.map(drop).unwrap_err();
    assert_eq!(
        net_kind(&sender),
        Some(NetError::Authentication),
        "{sender}"
    );
    // The receiver learns it when its first message does not come.
    let receiver = receiver.unwrap().receive().map(drop).unwrap_err();
    assert_eq!(
        net_kind(&receiver),
        Some(NetError::Authentication),
        "{receiver}"
    );
}

#[test]
fn an_untouched_stream_arrives_and_its_end_is_a_truncation() {
    let (got, end) = through(|_, frame| Some(frame));
    assert_eq!(got, ["one", "two", "three"]);
    assert_eq!(end, Some(NetError::Truncated));
}

#[test]
fn a_changed_byte_is_tampering_and_in_the_first_message_a_wrong_key() {
    let flip = |at: usize| {
        move |n: usize, mut frame: Vec<u8>| {
            if n == at {
                let middle = frame.len() / 2;
                frame[middle] ^= 1;
            }
            Some(frame)
        }
    };
    assert_eq!(
        through(flip(2)),
        (vec!["one".into()], Some(NetError::Tampered))
    );
    assert_eq!(through(flip(1)), (vec![], Some(NetError::Authentication)));
}

#[test]
fn a_replayed_dropped_or_reordered_message_is_tampering() {
    let replayed = through(|n, frame| match n {
        1 => Some([&frame[..], &frame[..]].concat()),
        _ => Some(frame),
    });
    assert_eq!(replayed, (vec!["one".into()], Some(NetError::Tampered)));
    let dropped = through(|n, frame| (n != 2).then_some(frame).or(Some(Vec::new())));
    assert_eq!(dropped, (vec!["one".into()], Some(NetError::Tampered)));
    let mut held = Vec::new();
    let reordered = through(move |n, frame| match n {
        2 => {
            held = frame;
            Some(Vec::new())
        }
        3 => Some([&frame[..], &held[..]].concat()),
        _ => Some(frame),
    });
    assert_eq!(reordered, (vec!["one".into()], Some(NetError::Tampered)));
}

#[test]
fn a_stream_cut_inside_a_message_is_truncated() {
    let cut = through(|n, frame| match n {
        2 => Some(frame[..frame.len() - 1].to_vec()),
        3.. => None,
        _ => Some(frame),
    });
    assert_eq!(cut, (vec!["one".into()], Some(NetError::Truncated)));
}

#[test]
fn a_connection_that_says_nothing_is_no_failed_authentication() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    drop(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
    let (stream, _) = listener.accept().unwrap();
    let key = Key::generate().unwrap();
    let error = Channel::accept(stream, &key, WAIT, WAIT, Cancel::new())
        .map(drop)
        .unwrap_err();
    assert_eq!(net_kind(&error), Some(NetError::Truncated), "{error}");
    assert!(error.to_string().contains("having sent nothing"), "{error}");
}

#[test]
fn a_silent_peer_times_out_and_a_cancelled_wait_ends() {
    let key = Key::generate().unwrap();
    let (sender, receiver) = pair_with(&key, &key, Duration::from_millis(300));
    let (_sender, mut receiver) = (sender.unwrap(), receiver.unwrap());
    let error = receiver.receive().map(drop).unwrap_err();
    assert_eq!(net_kind(&error), Some(NetError::Timeout), "{error}");

    let (_sender, mut receiver) = pair();
    let cancel = Cancel::new();
    cancel.cancel();
    receiver.cancel_on(Some(cancel));
    let error = receiver.receive().map(drop).unwrap_err();
    assert!(
        error.to_string().contains("failed on another connection"),
        "{error}"
    );
    receiver.cancel_on(None);
    receiver.stop().cancel();
    let error = receiver.receive().map(drop).unwrap_err();
    assert!(matches!(error, Error::Interrupted { signal: 0 }), "{error}");
}

#[test]
fn a_receivers_message_stops_a_sender_as_its_error() {
    let (mut sender, mut receiver) = pair();
    let refuse = encode(&Refuse {
        reason: "full".into(),
    });
    receiver.send(kind::REFUSE, &refuse).unwrap();
    receiver.flush().unwrap();
    assert!(sender.spoke_within(WAIT));
    sender.send(kind::DATA, &[0; 1000]).unwrap();
    let error = sender.flush().unwrap_err();
    assert_eq!(net_kind(&error), Some(NetError::Remote), "{error}");
    assert!(
        error.to_string().ends_with("the receiver refused: full"),
        "{error}"
    );
}
