//! `Receive::connection` driven over loopback by a sender the test plays message by message,
//! up to where a lander would be spawned: who is authenticated, what is refused, what a dry
//! run is told; and the bookkeeping of transfers and slots.

use std::thread;

use super::*;
use crate::net::channel::tests::{net_kind, WAIT};
use crate::net::protocol::tests::hello;
use crate::net::protocol::{decode, encode, Accept, Heard, Outbound, Refuse, VERSION};

/// What the receiving thread saw: the connection's outcome, and whether it called
/// `on_authenticated` and `on_lane`.
type Ended = (std::result::Result<Connection, Failed>, bool, bool);

/// Runs `receive.connection` on the next connection to a listener, on a thread, and
/// connects to it: the sender's channel (or its handshake's error) and the receiver's end.
fn connect(receive: Receive, key: &Key) -> (Result<Channel>, thread::JoinHandle<Ended>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let receiving = thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let (mut authenticated, mut lane) = (false, false);
        let result = receive.connection(stream, || authenticated = true, || lane = true);
        (result, authenticated, lane)
    });
    let stream = TcpStream::connect(address).unwrap();
    let channel = Channel::connect(stream, key, WAIT, Cancel::new());
    (channel, receiving)
}

/// A receiver into `dest` with a fresh key (and that key).
fn receiver(dest: &std::path::Path) -> (Receive, Key) {
    let key = Key::generate().unwrap();
    (Receive::new(dest, key.clone()).timeout(WAIT), key)
}

/// The failure of a connection: whether the peer was authenticated, the name it gave, and
/// the error's kind and text.
fn failed(outcome: Ended) -> (bool, Option<String>, Option<NetError>, String) {
    match outcome.0 {
        Ok(connection) => panic!("{connection:?}"),
        Err(f) => {
            assert_eq!(
                f.authenticated, outcome.1,
                "on_authenticated called as authenticated"
            );
            (
                f.authenticated,
                f.sender,
                net_kind(&f.error),
                f.error.to_string(),
            )
        }
    }
}

#[test]
fn a_sender_without_the_key_is_not_authenticated() {
    let dest = tempfile::tempdir().unwrap();
    let (receive, _) = receiver(dest.path());
    let (channel, receiving) = connect(receive, &Key::generate().unwrap());
    let error = channel.map(drop).unwrap_err();
    assert_eq!(net_kind(&error), Some(NetError::Authentication), "{error}");
    let (authenticated, sender, kind, _) = failed(receiving.join().unwrap());
    assert_eq!(
        (authenticated, sender, kind),
        (false, None, Some(NetError::Authentication))
    );
}

#[test]
fn a_first_message_that_is_no_hello_fails_an_authenticated_sender() {
    for (kind, payload, problem) in [
        (
            kind::DATA,
            &b"\0\0\0\0\0\0\0\0x"[..],
            "type 6 where HELLO was expected",
        ),
        (kind::HELLO, b"{\"version\":", "a bad HELLO message"),
    ] {
        let dest = tempfile::tempdir().unwrap();
        let (receive, key) = receiver(dest.path());
        let (channel, receiving) = connect(receive, &key);
        let mut channel = channel.unwrap();
        channel.send(kind, payload).unwrap();
        channel.flush().unwrap();
        let (authenticated, sender, kind, shown) = failed(receiving.join().unwrap());
        assert_eq!(
            (authenticated, sender, kind),
            (true, None, Some(NetError::Protocol))
        );
        assert!(shown.contains(problem), "{shown}");
    }
}

#[test]
fn another_protocol_version_is_refused_with_the_reason() {
    let dest = tempfile::tempdir().unwrap();
    let (receive, key) = receiver(dest.path());
    let (channel, receiving) = connect(receive, &key);
    let mut channel = channel.unwrap();
    let old = Hello {
        version: VERSION - 1,
        ..hello()
    };
    channel.send(kind::HELLO, &encode(&old)).unwrap();
    let (kind, payload) = channel.receive().unwrap();
    assert_eq!(kind, kind::REFUSE);
    let refuse: Refuse = decode("REFUSE", payload).unwrap();
    let reason = format!(
        "protocol version {}; this receiver speaks {VERSION}",
        VERSION - 1
    );
    assert_eq!(refuse.reason, reason);
    // The receiver reads on until the sender closes.
    drop(channel);
    let (authenticated, sender, kind, _) = failed(receiving.join().unwrap());
    assert_eq!(
        (authenticated, sender.as_deref(), kind),
        (true, Some("tester"), Some(NetError::Protocol))
    );
    assert_eq!(fs_names(dest.path()), 0, "nothing landed");
}

/// The count of entries in `dir`.
fn fs_names(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn a_dry_run_is_accepted_and_told_what_dest_has_with_update_and_lands_nothing() {
    let dest = tempfile::tempdir().unwrap();
    std::fs::create_dir(dest.path().join("d")).unwrap();
    std::fs::write(dest.path().join("d/f"), b"there").unwrap();
    std::fs::write(dest.path().join("top"), b"").unwrap();
    for update in [false, true] {
        let (receive, key) = receiver(dest.path());
        let (channel, receiving) = connect(receive, &key);
        let mut channel = channel.unwrap();
        let dry_run = Hello {
            dry_run: true,
            update,
            compress: true,
            ..hello()
        };
        channel.send(kind::HELLO, &encode(&dry_run)).unwrap();
        let (kind, payload) = channel.receive().unwrap();
        assert_eq!(kind, kind::ACCEPT);
        let accept: Accept = decode("ACCEPT", payload).unwrap();
        assert!(accept.compress, "agrees on compression");
        // The sender's side reads the listing.
        let (mut outbound, _) = Outbound::new(dry_run);
        let mut heard = outbound.receive(kind, payload).unwrap();
        while let Heard::More = heard {
            let (kind, payload) = channel.receive().unwrap();
            heard = outbound.receive(kind, payload).unwrap();
        }
        let listed = match update {
            true => {
                let Heard::Ready(Some(listing)) = heard else {
                    panic!("{heard:?}")
                };
                assert!(listing
                    .get(b"d/f")
                    .is_some_and(|f| f.kind == crate::tree::Kind::File));
                assert!(listing.dir(b"d").is_some());
                listing.len()
            }
            false => 0,
        };
        // Then the receiver closes.
        let end = channel.receive().map(drop).unwrap_err();
        assert_eq!(net_kind(&end), Some(NetError::Truncated), "{end}");
        drop(channel);
        let (outcome, authenticated, lane) = receiving.join().unwrap();
        assert!(authenticated && !lane);
        match outcome {
            Ok(Connection::DryRun(dry)) => {
                assert_eq!((dry.sender.as_str(), dry.listed), ("tester", listed));
            }
            other => panic!("{other:?}"),
        }
        // Files and symlinks: d/f and top.
        assert_eq!(listed, if update { 2 } else { 0 });
        assert_eq!(fs_names(dest.path()), 2, "nothing landed");
    }
}

#[test]
fn a_lane_for_no_running_transfer_is_refused() {
    let dest = tempfile::tempdir().unwrap();
    let key = Key::generate().unwrap();
    // It waits for its transfer's HELLO up to the timeout.
    let receive = Receive::new(dest.path(), key.clone()).timeout(Duration::from_millis(500));
    let (channel, receiving) = connect(receive, &key);
    let mut channel = channel.unwrap();
    let lane = Hello {
        join: Some("no such transfer".into()),
        ..hello()
    };
    channel.send(kind::HELLO, &encode(&lane)).unwrap();
    let (kind, payload) = channel.receive().unwrap();
    assert_eq!(kind, kind::REFUSE);
    let refuse: Refuse = decode("REFUSE", payload).unwrap();
    assert_eq!(refuse.reason, "no running transfer takes this lane");
    drop(channel);
    let (outcome, authenticated, lane) = receiving.join().unwrap();
    assert!(matches!(outcome, Ok(Connection::Lane)), "{outcome:?}");
    assert!(authenticated && lane);
}

#[test]
fn a_transfer_id_is_taken_while_it_runs_and_for_a_while_after() {
    let transfers = Transfers::default();
    let announced = transfers.announce("t", WAIT).unwrap();
    assert!(transfers.announce("t", WAIT).is_none(), "running");
    assert!(transfers.announce("u", WAIT).is_some(), "another id");
    drop(announced);
    assert!(matches!(
        transfers.lock().get("t"),
        Some(Joinable::Ended(_))
    ));
    assert!(transfers.announce("t", WAIT).is_none(), "ended, recently");
    assert!(
        transfers.announce("t", Duration::ZERO).is_some(),
        "forgotten"
    );
}

#[test]
fn a_transfer_beyond_the_slots_waits_for_one_then_is_turned_away() {
    let slots = Slots {
        taken: Arc::default(),
        max: 1,
    };
    let stop = Cancel::new();
    let slot = slots.take(WAIT, &stop).unwrap();
    let busy = slots
        .take(Duration::from_millis(50), &stop)
        .map(drop)
        .unwrap_err();
    assert_eq!(busy.to_string(), "busy: 1 transfers are running");
    // A slot given back is taken by the one waiting.
    let waiting = thread::scope(|scope| {
        let waiting = scope.spawn(|| slots.take(WAIT, &stop).map(drop));
        drop(slot);
        waiting.join().unwrap()
    });
    assert!(waiting.is_ok());
    stop.cancel();
    let _slot = slots.take(WAIT, &stop).unwrap();
    let stopped = slots.take(WAIT, &stop).map(drop).unwrap_err();
    assert!(matches!(stopped, Error::Interrupted { .. }), "{stopped}");
}

/// What `send --delete` names is removed below DEST only: a symlink on its way ends it
/// (nothing through it is removed), a symlink named is removed itself, a directory whole.
#[test]
fn a_path_to_remove_never_leads_through_a_symlink() {
    let (dest, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(outside.path().join("x"), b"outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), dest.path().join("link")).unwrap();
    std::fs::create_dir_all(dest.path().join("d/e")).unwrap();
    std::fs::write(dest.path().join("d/e/f"), b"f").unwrap();
    let root = rustix::fs::open(dest.path(), DIR_FLAGS, Mode::empty()).unwrap();
    let mut buf = dirent_buffer();
    let mut remove = |path: &[u8]| remove_below(&root, path, &mut buf).unwrap();
    assert!(!remove(b"link/x"), "removed through a symlink");
    assert!(outside.path().join("x").exists());
    assert!(!remove(b"d/missing") && !remove(b"nothing/below"));
    assert!(remove(b"d") && remove(b"link"));
    assert!(outside.path().join("x").exists());
    assert_eq!(fs_names(dest.path()), 0);
}
