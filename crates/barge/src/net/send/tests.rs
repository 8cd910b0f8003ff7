//! `Send` driven over loopback against a receiver the test plays message by message: what a
//! transfer and a dry run send, and each answer that ends them with an error.

use std::thread;

use rustix::fs::{open, Mode, OFlags};

use super::*;
use crate::net::channel::tests::{net_kind, WAIT};
use crate::net::protocol::tests::landed;
use crate::net::protocol::{decode, encode, kind, Accept, Messages, Outcome, Refuse};

/// A receiver played on a thread by `script`, given its channel after the handshake and the
/// sender's HELLO; and a `Send` to it over one connection.
fn playing<T: std::marker::Send + 'static>(
    script: impl FnOnce(Channel, Hello) -> T + std::marker::Send + 'static,
) -> (Send, thread::JoinHandle<T>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let key = Key::generate().unwrap();
    let receiving = key.clone();
    let played = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut channel = Channel::accept(stream, &receiving, WAIT, WAIT, Cancel::new()).unwrap();
        let (kind, payload) = channel.receive().unwrap();
        assert_eq!(kind, kind::HELLO);
        let hello = decode("HELLO", payload).unwrap();
        script(channel, hello)
    });
    let send = Send::new(address, key).timeout(WAIT).connections(Some(1));
    (send, played)
}

/// The DATA of one lane until its END: the archive bytes (in order) and END's payload.
fn data(channel: &mut Channel) -> (Vec<u8>, Vec<u8>) {
    let mut bytes = Vec::new();
    let mut next = 0u64;
    loop {
        match channel.receive().unwrap() {
            (kind::DATA, payload) => {
                let (seq, chunk) = payload.split_at(8);
                assert_eq!(u64::from_be_bytes(seq.try_into().unwrap()), next);
                next += 1;
                bytes.extend_from_slice(chunk);
            }
            (kind::END, payload) => return (bytes, payload.to_vec()),
            (kind, _) => panic!("type {kind}"),
        }
    }
}

/// Sends `kind` with `payload`, then closes as the receiver does.
fn answer(mut channel: Channel, kind: u8, payload: &[u8]) {
    channel.send(kind, payload).unwrap();
    channel.close();
}

/// Sends `archive` with `send`: its result.
fn send_archive(send: &Send, archive: &[u8]) -> Result<Sent> {
    send.run(Payload::Archive(&mut &archive[..]), &Progress::default())
}

#[test]
fn a_transfer_sends_its_hello_and_bytes_then_reads_the_result() {
    let (send, played) = playing(|mut channel, hello| {
        let (bytes, end) = data(&mut channel);
        answer(channel, kind::RESULT, &encode(&Outcome::Landed(landed())));
        (hello, bytes, end)
    });
    let archive: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let progress = Progress::default();
    let sent = send
        .run(Payload::Archive(&mut &archive[..]), &progress)
        .unwrap();
    let (hello, bytes, end) = played.join().unwrap();
    assert_eq!(
        (hello.version, hello.update, hello.dry_run, hello.lanes),
        (VERSION, false, false, 1)
    );
    assert!(hello.transfer.is_none() && hello.join.is_none());
    assert!(bytes == archive, "the archive as it was");
    let chunks = archive.len().div_ceil(crate::net::channel::MAX_PAYLOAD - 8) as u64;
    let counted = [(archive.len() as u64).to_be_bytes(), chunks.to_be_bytes()].concat();
    assert_eq!(end, counted);
    assert_eq!(sent.landed, landed());
    assert_eq!(
        (sent.sent_bytes, sent.connections),
        (archive.len() as u64, 1)
    );
    assert!(sent.packed.is_none() && !sent.compressed);
    assert_eq!(progress.bytes(), archive.len() as u64);
}

#[test]
fn a_refusal_a_failure_or_another_message_is_the_senders_error() {
    let refused = encode(&Refuse {
        reason: "busy".into(),
    });
    let tampered = encode(&Outcome::Error {
        kind: "tampered".into(),
        message: "bad bytes".into(),
    });
    let full = encode(&Outcome::Error {
        kind: "io".into(),
        message: "disk full".into(),
    });
    for (after_data, kind, payload, error_kind, said) in [
        (
            false,
            kind::REFUSE,
            refused,
            NetError::Remote,
            "the receiver refused: busy",
        ),
        (
            true,
            kind::RESULT,
            tampered,
            NetError::Tampered,
            "the receiver: bad bytes",
        ),
        (
            true,
            kind::RESULT,
            full,
            NetError::Remote,
            "the receiver: disk full",
        ),
        (
            true,
            kind::LIST,
            Vec::new(),
            NetError::Protocol,
            "an unexpected message (type 4)",
        ),
    ] {
        let (send, played) = playing(move |mut channel, _| {
            if after_data {
                data(&mut channel);
            }
            answer(channel, kind, &payload);
        });
        let error = send_archive(&send, b"an archive").map(drop).unwrap_err();
        played.join().unwrap();
        assert_eq!(net_kind(&error), Some(error_kind), "{error}");
        assert!(error.to_string().ends_with(said), "{error}");
    }
}

/// The listing of the directory `dir`, as LIST messages and LIST_END on `channel`.
fn list(channel: &mut Channel, dir: &std::path::Path) {
    let fd = open(dir, OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let listing = Listing::of_dir(fd, 1, false);
    let mut out = Messages::new(kind::LIST, |kind, payload| channel.send(kind, payload));
    listing.write_to(&mut out).unwrap();
    out.end(kind::LIST_END).unwrap();
    channel.flush().unwrap();
}

#[test]
fn an_update_waits_for_the_accept_and_the_listing_and_refuses_a_bad_one() {
    let accept = |compress| encode(&Accept { compress });
    // The agreed compression, then the listing of DEST, then the data.
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(dest.path().join("there"), b"x").unwrap();
    let listed = dest.path().to_path_buf();
    let (send, played) = playing(move |mut channel, hello| {
        channel.send(kind::ACCEPT, &accept(false)).unwrap();
        list(&mut channel, &listed);
        let (bytes, _) = data(&mut channel);
        answer(channel, kind::RESULT, &encode(&Outcome::Landed(landed())));
        (hello.update, bytes)
    });
    let sent = send_archive(&send.update(true), b"an archive").unwrap();
    assert_eq!(played.join().unwrap(), (true, b"an archive".to_vec()));
    assert_eq!(sent.landed, landed());

    let short_end = 5u64.to_be_bytes().to_vec();
    for (messages, said) in [
        (
            vec![(kind::ACCEPT, accept(true))],
            "the receiver did not agree on compression",
        ),
        (
            vec![(kind::DATA, vec![0; 9])],
            "an unexpected message (type 6)",
        ),
        (
            vec![
                (kind::ACCEPT, accept(false)),
                (kind::LIST, b"abc".to_vec()),
                (kind::LIST_END, short_end),
            ],
            "a listing of another length than sent",
        ),
    ] {
        let (send, played) = playing(move |mut channel, _| {
            for (kind, payload) in &messages {
                channel.send(*kind, payload).unwrap();
            }
            channel.close();
        });
        let error = send_archive(&send.update(true), b"x")
            .map(drop)
            .unwrap_err();
        played.join().unwrap();
        assert_eq!(net_kind(&error), Some(NetError::Protocol), "{error}");
        assert!(error.to_string().ends_with(said), "{error}");
    }
}

#[test]
fn a_dry_run_tells_each_entry_and_what_dest_has_and_sends_no_data() {
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("a")).unwrap();
    std::fs::write(src.path().join("a/f"), b"new").unwrap();
    std::fs::write(src.path().join("g"), b"newer").unwrap();
    let dest = tempfile::tempdir().unwrap();
    std::fs::create_dir(dest.path().join("a")).unwrap();
    std::fs::write(dest.path().join("g"), b"old").unwrap();
    let listed = dest.path().to_path_buf();
    let (send, played) = playing(move |mut channel, hello| {
        channel
            .send(kind::ACCEPT, &encode(&Accept { compress: false }))
            .unwrap();
        list(&mut channel, &listed);
        // The sender closes: no DATA.
        let end = channel.receive().map(|(kind, _)| kind);
        (hello.dry_run, hello.update, end.map_err(|e| net_kind(&e)))
    });
    let root = open(
        src.path(),
        OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap();
    let mut planned = Vec::new();
    send.update(true)
        .dry_run(Pack::new(root), |p| {
            planned.push((p.path.to_string(), p.kind, p.there));
        })
        .unwrap();
    assert_eq!(
        played.join().unwrap(),
        (true, true, Err(Some(NetError::Truncated)))
    );
    assert_eq!(
        planned,
        [
            ("a".into(), Kind::Dir, Some(Kind::Dir)),
            ("a/f".into(), Kind::File, None),
            ("g".into(), Kind::File, Some(Kind::File)),
        ]
    );
}

#[test]
fn a_cancelled_send_stops_in_its_handshake() {
    // A listener that never answers: the kernel takes the connection, nobody speaks.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cancel = Cancel::new();
    cancel.cancel();
    let send = Send::new(
        listener.local_addr().unwrap().to_string(),
        Key::generate().unwrap(),
    )
    .timeout(WAIT)
    .cancel(cancel);
    let error = send_archive(&send, b"x").map(drop).unwrap_err();
    assert!(matches!(error, Error::Interrupted { signal: 0 }), "{error}");
}
