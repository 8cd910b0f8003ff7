//! The protocol's state machines driven in memory, without sockets or threads: both ends
//! against each other (a plain transfer, an update with its listing, a dry run, a lane),
//! and each end against a hostile or broken peer (messages out of order, a bad HELLO,
//! another version, a listing over its budget, a peer that closes early, a failure it
//! names). `carrying`, `sending`, `hello` and `landed` serve the other net tests.

use std::path::Path;

use super::*;
use crate::land::LandSummary;
use crate::net::channel::tests::net_kind;
use crate::root::Confinement;

/// A plain transfer's HELLO (one lane, nothing asked).
pub(crate) fn hello() -> Hello {
    Hello {
        version: VERSION,
        compress: false,
        update: false,
        delete: false,
        name: "tester".into(),
        lanes: 1,
        transfer: None,
        join: None,
        dry_run: false,
    }
}

/// A later lane's HELLO, joining transfer "t".
fn lane_hello() -> Hello {
    Hello {
        join: Some("t".into()),
        ..hello()
    }
}

/// The receiver's side after `hello` was taken on, and its answer.
fn taken_on(hello: Hello) -> (Inbound, Answer) {
    let mut inbound = Inbound::default();
    inbound.hello(kind::HELLO, &encode(&hello)).unwrap();
    let answer = inbound.accept();
    (inbound, answer)
}

/// A receiver's lane that carries DATA: a transfer's first, or a later one.
pub(crate) fn carrying(first: bool) -> Inbound {
    taken_on(if first { hello() } else { lane_hello() }).0
}

/// A sender's side of a plain transfer, sending DATA.
pub(crate) fn sending() -> Outbound {
    Outbound::new(hello()).0
}

/// Chunk `seq`'s DATA message.
fn data(seq: u64, bytes: &[u8]) -> Message {
    let plain = [&data_head(seq)[..], bytes].concat();
    Message {
        kind: plain[0],
        payload: plain[1..].to_vec(),
    }
}

/// What a landing reports, with something to recognise it by.
pub(crate) fn landed() -> Landed {
    Landed {
        summary: LandSummary {
            files: 7,
            ..LandSummary::default()
        },
        confinement: Confinement::Off,
    }
}

/// Hands `message` to the sender's side.
fn tell(outbound: &mut Outbound, message: &Message) -> Result<Heard> {
    outbound.receive(message.kind, &message.payload)
}

/// The sender's error for `message`, the receiver's, in the state `outbound` is in.
fn sender_fails(outbound: &mut Outbound, message: &Message) -> Error {
    tell(outbound, message).map(drop).unwrap_err()
}

/// Hands `message` to the receiver's carrying side.
fn carry<'m>(inbound: &mut Inbound, message: &'m Message) -> Result<Carried<'m>> {
    inbound.carry(message.kind, &message.payload)
}

/// The listing of `dir` as the receiver sends it: LIST messages, then LIST_END.
fn listing_of(dir: &Path) -> (Vec<Message>, u64) {
    use rustix::fs::{open, Mode, OFlags};
    let fd = open(dir, OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap();
    let listing = Listing::of_dir(fd, 1, false);
    let mut messages = Vec::new();
    let mut out = Messages::new(kind::LIST, |kind, payload: &[u8]| {
        messages.push(Message {
            kind,
            payload: payload.to_vec(),
        });
        Ok(())
    });
    listing.write_to(&mut out).unwrap();
    out.end(kind::LIST_END).unwrap();
    (messages, listing.len())
}

#[test]
fn a_plain_transfer_sends_at_once_and_ends_with_the_counted_end_and_the_result() {
    let (mut sender, hello) = Outbound::new(hello());
    assert!(!sender.waits(), "its data follows the HELLO at once");
    let mut receiver = Inbound::default();
    let Ok(Asked::Transfer(asked)) = receiver.hello(hello.kind, &hello.payload) else {
        panic!("a transfer")
    };
    assert_eq!((asked.name.as_str(), asked.lanes), ("tester", 1));
    let answer = receiver.accept();
    assert_eq!(
        answer,
        Answer {
            accept: None,
            list: false
        }
    );
    for (seq, bytes) in [(0, &b"an "[..]), (1, b"archive")] {
        let chunk = data(seq, bytes);
        assert_eq!(
            carry(&mut receiver, &chunk).unwrap(),
            Carried::Chunk { seq, bytes }
        );
    }
    let counted = Counted {
        bytes: 10,
        chunks: 2,
    };
    let end = sender.end(counted);
    assert_eq!(
        carry(&mut receiver, &end).unwrap(),
        Carried::End(Some(counted))
    );
    let result = receiver.result(Ok(&landed())).unwrap();
    match tell(&mut sender, &result).unwrap() {
        Heard::Landed(got) => assert_eq!(got, landed()),
        other => panic!("{other:?}"),
    }
    // Both ends are over: a message more is out of order on either.
    let more = carry(&mut receiver, &data(2, b"x")).map(drop).unwrap_err();
    assert_eq!(net_kind(&more), Some(NetError::Protocol), "{more}");
    let again = sender_fails(&mut sender, &result);
    assert_eq!(net_kind(&again), Some(NetError::Protocol), "{again}");
}

/// Two files alike in size, time and mode.
fn same_file(a: &Path, b: &Path, bytes: &[u8]) {
    let time = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    for path in [a, b] {
        std::fs::write(path, bytes).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    }
}

/// The names of the files (not directories) an archive holds.
fn files_in(archive: Vec<u8>) -> Vec<String> {
    use crate::tree::{Recorded, Recording};
    use crate::unpack::{Archive, Unpack};
    let mut recording = Recording::default();
    let input = Archive::from_reader(std::io::Cursor::new(archive));
    Unpack::new().list(&input, &mut recording).unwrap();
    (recording.calls.iter())
        .filter_map(|call| match call {
            Recorded::File(name, ..) => Some(String::from_utf8_lossy(name).into_owned()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_update_waits_for_the_listing_and_leaves_out_the_unchanged_entries() {
    let (src, dest) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    same_file(&src.path().join("same"), &dest.path().join("same"), b"kept");
    same_file(
        &src.path().join("changed"),
        &dest.path().join("changed"),
        b"old",
    );
    std::fs::write(src.path().join("changed"), b"newer").unwrap();
    std::fs::write(src.path().join("new"), b"new").unwrap();
    for compress in [false, true] {
        let update = Hello {
            update: true,
            compress,
            ..hello()
        };
        let (mut sender, hello) = Outbound::new(update);
        assert!(sender.waits());
        let mut receiver = Inbound::default();
        let asked = receiver.hello(hello.kind, &hello.payload).unwrap();
        assert!(matches!(asked, Asked::Transfer(ref h) if h.update));
        let answer = receiver.accept();
        assert!(answer.list, "the listing follows");
        let accept = answer.accept.unwrap();
        assert!(matches!(tell(&mut sender, &accept).unwrap(), Heard::More));
        assert!(sender.waits(), "for the listing");
        let (messages, listed) = listing_of(dest.path());
        let (end, lists) = messages.split_last().unwrap();
        for list in lists {
            assert!(matches!(tell(&mut sender, list).unwrap(), Heard::More));
        }
        let Heard::Ready(Some(listing)) = tell(&mut sender, end).unwrap() else {
            panic!("the listing")
        };
        assert!(!sender.waits(), "the data goes");
        assert_eq!((listing.len(), listed), (2, 2));
        // The plan: what the pack sends with that listing.
        let root = rustix::fs::open(
            src.path(),
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let mut archive = Vec::new();
        let pack = crate::pack::Pack::new(root).unchanged(&listing);
        let summary = pack.to_writer(&mut archive).unwrap();
        let mut sent = files_in(archive);
        sent.sort();
        assert_eq!(sent, ["changed", "new"]);
        assert_eq!(summary.unchanged, 1);
    }
}

#[test]
fn a_dry_run_is_answered_and_over_with_its_answer() {
    for update in [false, true] {
        let dry_run = Hello {
            dry_run: true,
            update,
            compress: true,
            ..hello()
        };
        let (mut sender, hello) = Outbound::new(dry_run);
        let mut receiver = Inbound::default();
        let asked = receiver.hello(hello.kind, &hello.payload).unwrap();
        assert!(matches!(asked, Asked::DryRun(ref h) if h.name == "tester"));
        let answer = receiver.accept();
        assert_eq!(answer.list, update);
        let accept: Accept = decode("ACCEPT", &answer.accept.as_ref().unwrap().payload).unwrap();
        assert!(accept.compress, "agrees on compression");
        // The receiver reads no data after a dry run's answer.
        let late = carry(&mut receiver, &data(0, b"x")).map(drop).unwrap_err();
        assert_eq!(net_kind(&late), Some(NetError::Protocol), "{late}");
        let heard = tell(&mut sender, &answer.accept.unwrap()).unwrap();
        match update {
            false => assert!(matches!(heard, Heard::Ready(None))),
            true => {
                assert!(matches!(heard, Heard::More));
                let empty = tempfile::tempdir().unwrap();
                let (messages, _) = listing_of(empty.path());
                let mut heard = Heard::More;
                for message in &messages {
                    heard = tell(&mut sender, message).unwrap();
                }
                assert!(matches!(heard, Heard::Ready(Some(l)) if l.is_empty()));
            }
        }
        assert!(!sender.waits());
    }
}

#[test]
fn a_later_lane_is_accepted_with_no_listing_and_its_end_counts_nothing() {
    for compress in [false, true] {
        let lane = Hello {
            update: true,
            compress,
            ..lane_hello()
        };
        later_lane(lane);
    }
}

/// A later lane saying `lane`, accepted, carrying a chunk and its END.
fn later_lane(lane: Hello) {
    let (mut sender, hello) = Outbound::new(lane);
    assert!(
        sender.waits(),
        "a lane carries nothing before it is accepted"
    );
    let mut receiver = Inbound::default();
    let asked = receiver.hello(hello.kind, &hello.payload).unwrap();
    assert!(matches!(asked, Asked::Join(ref id) if id == "t"));
    let answer = receiver.accept();
    assert!(!answer.list, "the transfer's first lane has the listing");
    let heard = tell(&mut sender, &answer.accept.unwrap()).unwrap();
    assert!(matches!(heard, Heard::Ready(None)));
    assert!(!sender.waits());
    let chunk = data(3, b"x");
    assert!(matches!(
        carry(&mut receiver, &chunk),
        Ok(Carried::Chunk { seq: 3, .. })
    ));
    let end = Message {
        kind: kind::END,
        payload: Vec::new(),
    };
    assert_eq!(carry(&mut receiver, &end).unwrap(), Carried::End(None));
}

#[test]
fn a_transfer_spreads_over_the_lanes_it_names_with_an_id_up_to_the_most() {
    let spread = |lanes, transfer: Option<&str>| Hello {
        lanes,
        transfer: transfer.map(Into::into),
        ..hello()
    };
    assert_eq!(spread(4, Some("t")).spread(), Some(("t", 4)));
    assert_eq!(spread(1000, Some("t")).spread(), Some(("t", MAX_LANES)));
    assert_eq!(spread(1, Some("t")).spread(), None, "one lane");
    assert_eq!(spread(4, None).spread(), None, "no id to join by");
}

#[test]
fn a_first_message_that_is_no_hello_is_turned_away_without_an_answer() {
    let chunk = data(0, b"x");
    for (kind, payload, problem) in [
        (
            kind::DATA,
            &chunk.payload[..],
            "type 6 where HELLO was expected",
        ),
        (kind::HELLO, b"{\"version\":", "a bad HELLO message"),
        (kind::HELLO, b"{\"version\":5}", "a bad HELLO message"),
    ] {
        let refused = Inbound::default().hello(kind, payload).unwrap_err();
        assert_eq!(net_kind(&refused.error), Some(NetError::Protocol));
        assert!(
            refused.error.to_string().contains(problem),
            "{}",
            refused.error
        );
        assert!(refused.reply.is_none() && refused.sender.is_none());
    }
    // Nor is a second HELLO taken.
    let mut inbound = Inbound::default();
    inbound.hello(kind::HELLO, &encode(&hello())).unwrap();
    let again = inbound.hello(kind::HELLO, &encode(&hello())).unwrap_err();
    assert!(
        again.error.to_string().ends_with("a second HELLO"),
        "{}",
        again.error
    );
}

#[test]
fn another_version_is_refused_with_the_reason_which_the_sender_shows() {
    let old = Hello {
        version: VERSION - 1,
        ..hello()
    };
    let (mut sender, hello) = Outbound::new(old);
    let refused = Inbound::default()
        .hello(hello.kind, &hello.payload)
        .unwrap_err();
    assert_eq!(net_kind(&refused.error), Some(NetError::Protocol));
    assert_eq!(refused.sender.as_deref(), Some("tester"));
    let reply = refused.reply.unwrap();
    let refuse: Refuse = decode("REFUSE", &reply.payload).unwrap();
    let reason = format!(
        "protocol version {}; this receiver speaks {VERSION}",
        VERSION - 1
    );
    assert_eq!(refuse.reason, reason);
    // The sender, sending its data already, stops with the refusal as the receiver's.
    let error = sender_fails(&mut sender, &reply);
    assert_eq!(net_kind(&error), Some(NetError::Remote), "{error}");
    assert!(error.to_string().ends_with(&reason), "{error}");
}

#[test]
fn a_carrying_lane_takes_data_and_end_only() {
    let mut first = carrying(true);
    let second = Message {
        kind: kind::HELLO,
        payload: encode(&hello()),
    };
    let empty = data(0, b"");
    for message in [&second, &empty] {
        let e = carry(&mut first, message).map(drop).unwrap_err();
        assert!(
            e.to_string().ends_with("where DATA or END was expected"),
            "{e}"
        );
    }
    // The first lane's END counts bytes and chunks: 16 bytes.
    for bad in [&b""[..], b"the end", &[0; 17]] {
        let end = Message {
            kind: kind::END,
            payload: bad.to_vec(),
        };
        let e = carry(&mut carrying(true), &end).map(drop).unwrap_err();
        assert!(e.to_string().ends_with("a bad END"), "{e}");
    }
    // Nothing is carried before the HELLO is taken on.
    let mut asked = Inbound::default();
    asked.hello(kind::HELLO, &encode(&hello())).unwrap();
    let early = carry(&mut asked, &data(0, b"x")).map(drop).unwrap_err();
    assert_eq!(net_kind(&early), Some(NetError::Protocol), "{early}");
}

#[test]
fn a_lane_closed_early_fails_the_transfer_unless_it_was_a_later_lane_that_carried_nothing() {
    let cut = || crate::net::channel::truncated("the connection closed");
    assert!(carrying(false).broken(cut()).is_none(), "an unused lane");
    assert!(carrying(true).broken(cut()).is_some(), "the first lane");
    let mut used = carrying(false);
    carry(&mut used, &data(0, b"x")).unwrap();
    assert!(used.broken(cut()).is_some(), "a lane that carried data");
    // A later lane that failed otherwise fails the transfer.
    let tampered = Error::net(NetError::Tampered, "changed");
    assert!(carrying(false).broken(tampered).is_some());
}

#[test]
fn the_sender_hears_how_the_landing_failed_by_its_kind_unless_the_connection_broke() {
    for broken in [NetError::Truncated, NetError::Timeout] {
        let e = Error::net(broken, "cut");
        assert!(carrying(true).result(Err(&e)).is_none(), "{broken:?}");
    }
    let failures = [
        (
            Error::net(NetError::Tampered, "changed"),
            NetError::Tampered,
        ),
        (Error::net(NetError::Protocol, "odd"), NetError::Protocol),
        // A receiver stopped (SIGTERM) tells the sender so.
        (Error::Interrupted { signal: 15 }, NetError::Remote),
        (
            Error::os(
                "write",
                crate::error::TreePath(b"f".to_vec()),
                std::io::Error::other("full"),
            ),
            NetError::Remote,
        ),
    ];
    for (failure, heard) in failures {
        let mut sender = sending();
        sender.end(Counted {
            bytes: 0,
            chunks: 0,
        });
        let result = carrying(true).result(Err(&failure)).unwrap();
        let error = sender_fails(&mut sender, &result);
        assert_eq!(net_kind(&error), Some(heard), "{error}");
    }
}

fn accept(compress: bool) -> Message {
    Message::json(kind::ACCEPT, &Accept { compress })
}

fn list(bytes: &[u8]) -> Message {
    Message {
        kind: kind::LIST,
        payload: bytes.to_vec(),
    }
}

fn list_end(n: u64) -> Message {
    Message {
        kind: kind::LIST_END,
        payload: n.to_be_bytes().to_vec(),
    }
}

/// A sender of an update, as the receiver's messages leave it.
fn updating(heard: &[Message]) -> Outbound {
    let mut sender = Outbound::new(Hello {
        update: true,
        ..hello()
    })
    .0;
    for message in heard {
        assert!(matches!(tell(&mut sender, message).unwrap(), Heard::More));
    }
    sender
}

#[test]
fn the_sender_takes_each_answer_only_in_its_turn() {
    let landed = Message::json(kind::RESULT, &Outcome::Landed(landed()));
    let accepted = || vec![accept(false)];
    // (what the receiver said, what it says next, the protocol error that is)
    let cases = [
        (
            vec![],
            accept(true),
            "the receiver did not agree on compression",
        ),
        (vec![], data(0, b"x"), "an unexpected message (type 6)"),
        (vec![], list(b"abc"), "an unexpected message (type 4)"),
        (
            vec![],
            landed.clone(),
            "a result before the end of the data",
        ),
        (accepted(), accept(false), "an unexpected message (type 2)"),
        (
            accepted(),
            list_end(1),
            "a listing of another length than sent",
        ),
        (
            vec![accept(false), list(b"abc")],
            list_end(5),
            "a listing of another length than sent",
        ),
    ];
    for (said, message, problem) in cases {
        let error = sender_fails(&mut updating(&said), &message);
        assert_eq!(net_kind(&error), Some(NetError::Protocol), "{error}");
        assert!(error.to_string().ends_with(problem), "{problem}: {error}");
    }
    // Compression is agreed on both ways.
    let mut compressed = Outbound::new(Hello {
        compress: true,
        update: true,
        ..hello()
    })
    .0;
    let error = sender_fails(&mut compressed, &accept(false));
    assert!(
        error.to_string().ends_with("did not agree on compression"),
        "{error}"
    );
    // A plain transfer hears nothing before its END but what stops it.
    for message in [accept(false), landed] {
        let error = sender_fails(&mut sending(), &message);
        assert_eq!(net_kind(&error), Some(NetError::Protocol), "{error}");
    }
}

#[test]
fn a_listing_over_its_budget_is_refused() {
    let mut sender = updating(&[accept(false)]);
    sender.limits.max_bytes = 8;
    assert!(matches!(
        tell(&mut sender, &list(&[0; 8])).unwrap(),
        Heard::More
    ));
    let over = sender_fails(&mut sender, &list(b"x"));
    assert_eq!(net_kind(&over), Some(NetError::Protocol), "{over}");
    assert!(
        over.to_string()
            .ends_with("the listing of DEST is over 8 bytes"),
        "{over}"
    );
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

/// With update and delete, the receiver reads the paths to remove after its listing and
/// before any DATA, counted by DELETE_END; the paths are names below DEST.
#[test]
fn a_delete_names_paths_below_dest_before_the_data() {
    let deleting = || {
        let (inbound, answer) = taken_on(Hello {
            update: true,
            delete: true,
            ..hello()
        });
        assert!(answer.list && inbound.deletes());
        inbound
    };
    let mut sent = Vec::new();
    let paths: Vec<Box<[u8]>> = vec![b"a".to_vec().into(), b"d/e/f".to_vec().into()];
    let record = |kind, bytes: &[u8]| {
        sent.push((kind, bytes.to_vec()));
        Ok(())
    };
    send_paths(record, &paths).unwrap();
    let mut inbound = deleting();
    let (last, rest) = sent.split_last().unwrap();
    for (kind, bytes) in rest {
        assert_eq!(inbound.delete(*kind, bytes).unwrap(), None);
    }
    let bytes = inbound.delete(last.0, &last.1).unwrap().unwrap();
    assert_eq!(read_paths(&bytes).unwrap(), [&b"a"[..], b"d/e/f"]);
    assert!(matches!(
        carry(&mut inbound, &data(0, b"x")),
        Ok(Carried::Chunk { .. })
    ));
    // Out of turn, or of another length than counted.
    let early = carry(&mut deleting(), &data(0, b"x")).unwrap_err();
    assert!(early.to_string().contains("out of turn"), "{early}");
    let mut inbound = deleting();
    inbound.delete(kind::DELETE, b"\x01\x00a").unwrap();
    let wrong = inbound
        .delete(kind::DELETE_END, &9u64.to_be_bytes())
        .unwrap_err();
    assert!(wrong.to_string().contains("another length"), "{wrong}");
    // Without update nothing is deleted: the data comes at once.
    let (inbound, _) = taken_on(Hello {
        delete: true,
        ..hello()
    });
    assert!(!inbound.deletes());
}

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
