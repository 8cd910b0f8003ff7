//! The receiver's reordering driven chunk by chunk (no sockets), lanes carried over loopback
//! channels, and a `Striper` spreading an archive over three lanes that a `Transfer` joins
//! back in order.

use std::sync::Arc;
use std::thread;

use super::*;
use crate::net::channel::tests::{net_kind, pair, WAIT};
use crate::net::protocol::tests::{carrying, sending};
use crate::source::ByteSource;
use crate::sys::queue::QueueReader;

/// A transfer of up to `lanes` lanes timing out after `timeout`, and a thread reading what
/// it writes into the lander's queue, to the queue's end.
fn receiving(lanes: u32, timeout: Duration) -> (Arc<Transfer>, thread::JoinHandle<Vec<u8>>) {
    let (writer, bell) = QueueWriter::new(1 << 16).unwrap();
    let reading = thread::spawn(move || {
        let mut reader = QueueReader::open(bell, || false).unwrap();
        let (mut out, mut buf) = (Vec::new(), vec![0; 1 << 16]);
        loop {
            match reader.read(&mut buf, 0, &Cancel::new()).unwrap() {
                0 => break out,
                n => out.extend_from_slice(&buf[..n]),
            }
        }
    });
    let transfer = Transfer::new(writer, lanes, timeout, Cancel::new());
    (Arc::new(transfer), reading)
}

/// What an END counts: `chunks` of `bytes` in all.
fn counted(chunks: u64, bytes: u64) -> Counted {
    Counted { bytes, chunks }
}

/// The error a stop carries ("lander" when the lander stopped reading).
fn shown(stop: Stop) -> String {
    match stop {
        Stop::Lander => "lander".into(),
        Stop::Channel(e) => e.to_string(),
    }
}

/// What a `put` refused, or "another lane failed".
fn refused(put: std::result::Result<(), Option<Stop>>) -> String {
    match put {
        Ok(()) => panic!("taken"),
        Err(None) => "another lane failed".into(),
        Err(Some(stop)) => shown(stop),
    }
}

#[test]
fn chunks_ahead_are_held_and_written_in_order() {
    let (transfer, reading) = receiving(2, WAIT);
    for (seq, bytes) in [(2, "c"), (4, "e"), (0, "a"), (3, "d"), (1, "b")] {
        transfer.put(seq, bytes.as_bytes()).ok().unwrap();
    }
    assert_eq!(transfer.finish(counted(5, 5)), Some(5));
    assert_eq!(reading.join().unwrap(), b"abcde");
    assert!(transfer.failure().is_none());
}

#[test]
fn a_chunk_sent_twice_is_refused_written_or_held() {
    let (transfer, _reading) = receiving(1, WAIT);
    transfer.put(0, b"a").ok().unwrap();
    assert_eq!(
        refused(transfer.put(0, b"a")),
        "protocol error: chunk 0 sent twice"
    );
    transfer.put(2, b"c").ok().unwrap();
    assert_eq!(
        refused(transfer.put(2, b"c")),
        "protocol error: chunk 2 sent twice"
    );
}

#[test]
fn the_end_counts_chunks_and_bytes() {
    // Fewer bytes than END says.
    let (transfer, _reading) = receiving(1, WAIT);
    transfer.put(0, b"ab").ok().unwrap();
    assert_eq!(transfer.finish(counted(1, 3)), None);
    let failure = shown(transfer.failure().unwrap());
    assert!(failure.contains("2 of 3 bytes arrived"), "{failure}");
    // A chunk past the counted end.
    let (transfer, _reading) = receiving(1, WAIT);
    transfer.put(0, b"a").ok().unwrap();
    transfer.put(2, b"c").ok().unwrap();
    assert_eq!(transfer.finish(counted(1, 1)), None);
    let failure = shown(transfer.failure().unwrap());
    assert_eq!(failure, "protocol error: chunks after the counted end");
    // A counted chunk that never comes.
    let (transfer, _reading) = receiving(1, Duration::from_millis(50));
    transfer.put(0, b"a").ok().unwrap();
    assert_eq!(transfer.finish(counted(2, 2)), None);
    let failure = transfer.failure().unwrap();
    let Stop::Channel(e) = failure else {
        panic!("the lander")
    };
    assert_eq!(net_kind(&e), Some(NetError::Timeout), "{e}");
    assert!(e.to_string().starts_with("chunk 1 did not arrive"), "{e}");
}

#[test]
fn a_chunk_a_window_ahead_waits_for_the_next_one() {
    // Nothing moves: it waits out the timeout rather than be held.
    let (transfer, _reading) = receiving(2, Duration::from_millis(50));
    let refusal = refused(transfer.put(WINDOW, b"far"));
    assert!(refusal.starts_with("chunk 0 did not arrive"), "{refusal}");
    // The next chunk arrives on another lane meanwhile: it is taken.
    let (transfer, reading) = receiving(2, WAIT);
    let ahead = thread::spawn({
        let transfer = transfer.clone();
        move || transfer.put(WINDOW, b"!").ok().unwrap()
    });
    for seq in 0..WINDOW {
        transfer.put(seq, &[b'a' + (seq % 26) as u8]).ok().unwrap();
    }
    ahead.join().unwrap();
    let n = WINDOW + 1;
    assert_eq!(transfer.finish(counted(n, n)), Some(n));
    let out = reading.join().unwrap();
    assert_eq!(out.len() as u64, n);
    assert_eq!(out[..3], *b"abc");
    assert_eq!(out.last(), Some(&b'!'));
}

#[test]
fn a_failure_wakes_the_waiting_lanes_and_closes_the_transfer_to_new_ones() {
    let (transfer, _reading) = receiving(3, WAIT);
    assert!(transfer.join());
    let waiting = thread::spawn({
        let transfer = transfer.clone();
        move || refused(transfer.put(WINDOW + 1, b"x"))
    });
    transfer.fail(Stop::Channel(protocol("first")));
    transfer.fail(Stop::Channel(protocol("second")));
    assert_eq!(waiting.join().unwrap(), "another lane failed");
    // Lanes waiting for data on their channels stop too (see `Channel::cancel_on`).
    assert!(transfer.cancel.is_cancelled());
    assert_eq!(shown(transfer.failure().unwrap()), "protocol error: first");
    assert!(transfer.failure().is_none(), "told once");
    assert!(!transfer.join(), "a failed transfer takes no lane");
}

#[test]
fn a_transfer_takes_the_lanes_it_asked_for_and_no_more() {
    let (transfer, _reading) = receiving(3, WAIT);
    assert_eq!(
        [transfer.join(), transfer.join(), transfer.join()],
        [true, true, false]
    );
    let (transfer, _reading) = receiving(1, WAIT);
    assert!(!transfer.join());
}

#[test]
fn a_lane_carries_its_data_until_its_end_and_fails_on_anything_else() {
    let (mut sender, mut receiver) = pair();
    let (transfer, reading) = receiving(1, WAIT);
    let data = |seq: u64, bytes: &[u8]| [&seq.to_be_bytes()[..], bytes].concat();
    sender.send(kind::DATA, &data(1, b"world")).unwrap();
    sender.send(kind::DATA, &data(0, b"hello ")).unwrap();
    sender
        .send(
            kind::END,
            &[11u64.to_be_bytes(), 2u64.to_be_bytes()].concat(),
        )
        .unwrap();
    sender.flush().unwrap();
    assert_eq!(
        transfer.carry(&mut receiver, &mut carrying(true)),
        Some(Some(counted(2, 11)))
    );
    assert_eq!(transfer.finish(counted(2, 11)), Some(11));
    assert_eq!(reading.join().unwrap(), b"hello world");

    for (kind, payload) in [(kind::HELLO, data(0, b"x")), (kind::DATA, data(0, b""))] {
        let (mut sender, mut receiver) = pair();
        let (transfer, _reading) = receiving(1, WAIT);
        sender.send(kind, &payload).unwrap();
        sender.flush().unwrap();
        assert_eq!(transfer.carry(&mut receiver, &mut carrying(true)), None);
        let failure = shown(transfer.failure().unwrap());
        assert!(
            failure.ends_with("where DATA or END was expected"),
            "{failure}"
        );
    }
}

#[test]
fn a_later_lane_closed_before_any_data_is_no_failure_and_the_first_lane_is() {
    for first in [false, true] {
        let (mut sender, mut receiver) = pair();
        let (transfer, _reading) = receiving(2, WAIT);
        // Its HELLO came (the peer showed the key), then nothing.
        sender.send(kind::HELLO, b"{}").unwrap();
        sender.flush().unwrap();
        receiver.receive().unwrap();
        drop(sender);
        assert_eq!(transfer.carry(&mut receiver, &mut carrying(first)), None);
        let failure = transfer.failure().map(|stop| match stop {
            Stop::Channel(e) => net_kind(&e),
            Stop::Lander => None,
        });
        match first {
            true => assert_eq!(failure, Some(Some(NetError::Truncated))),
            false => assert!(failure.is_none()),
        }
    }
}

#[test]
fn an_archive_spread_over_three_lanes_is_joined_back_in_order() {
    let pairs: Vec<(Channel, Channel)> = (0..3).map(|_| pair()).collect();
    let (senders, receivers): (Vec<Channel>, Vec<Channel>) = pairs.into_iter().unzip();
    let mut senders = senders.into_iter();
    let first = senders.next().unwrap();
    // The later lanes are ready before the first chunk: the striper takes them in at once.
    let (ready, joined) = mpsc::channel();
    for later in senders {
        ready.send(later).unwrap();
    }
    let (transfer, reading) = receiving(3, WAIT);
    let lanes_carrying: Vec<_> = (receivers.into_iter().enumerate())
        .map(|(lane, mut receiver)| {
            let transfer = transfer.clone();
            thread::spawn(move || {
                let end = transfer.carry(&mut receiver, &mut carrying(lane == 0))?;
                match end {
                    Some(counted) => transfer.finish(counted).map(|_| end),
                    None => Some(end),
                }
            })
        })
        .collect();
    // Chunks of 64 KiB, more than a batch per lane.
    let archive: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut striper = Striper::new(first, Some(Joining::new(joined, Cancel::new())), WAIT);
    striper.write_all(&archive).unwrap();
    let (lanes, _joining, bytes) = striper.end(&mut sending()).unwrap();
    assert_eq!((lanes.len(), bytes), (3, archive.len() as u64));
    let ends: Vec<_> = lanes_carrying
        .into_iter()
        .map(|c| c.join().unwrap())
        .collect();
    let chunks = archive.len().div_ceil(MAX_PLAIN - HEAD) as u64;
    let first = Some(Some(counted(chunks, bytes)));
    assert_eq!(ends, [first, Some(None), Some(None)]);
    assert!(reading.join().unwrap() == archive, "joined out of order");
}

#[test]
fn a_receivers_word_fails_the_striper() {
    let (sender, mut receiver) = pair();
    receiver
        .send(
            kind::REFUSE,
            &crate::net::protocol::encode(&crate::net::protocol::Refuse {
                reason: "no room".into(),
            }),
        )
        .unwrap();
    receiver.flush().unwrap();
    assert!(sender.spoke_within(WAIT));
    let mut striper = Striper::new(sender, None, WAIT);
    striper.write_all(b"some archive").unwrap();
    let error = striper.end(&mut sending()).map(drop).unwrap_err();
    assert!(
        error.to_string().ends_with("the receiver refused: no room"),
        "{error}"
    );
}
