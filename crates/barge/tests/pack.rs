//! `pack` into a pipe whose reader starts late: the writer thread is stuck on its first
//! write, so the queue fills, and large files are first handed to the writer (`sendfile`)
//! and then, once it is behind, read into the output buffers by the walking thread. Every
//! file must come out of the archive as it went in, in name order.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use barge::format::{decode_all, Event, Limits};
use barge::pack::pack;
use barge::Progress;
use rustix::fs::{open, Mode, OFlags};

#[test]
fn large_files_round_trip_whether_sent_or_read_while_the_writer_is_behind() {
    let dir = tempfile::tempdir().unwrap();
    // 24 files of 100-420 KiB: beyond the inline limit, more than the queue holds.
    let files: Vec<(String, Vec<u8>)> = (0..24)
        .map(|i| {
            let data = (0..100_000 + i * 14_000)
                .map(|b| (b * 31 + i) as u8)
                .collect();
            (format!("big{i:02}"), data)
        })
        .collect();
    for (name, data) in &files {
        std::fs::write(dir.path().join(name), data).unwrap();
    }
    let root: OwnedFd = open(
        dir.path(),
        OFlags::DIRECTORY | OFlags::RDONLY,
        Mode::empty(),
    )
    .unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    let late_reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut archive = Vec::new();
        let mut reader = reader;
        reader.read_to_end(&mut archive).unwrap();
        archive
    });
    let summary = pack(root, writer.as_fd(), None, &Progress::default()).unwrap();
    drop(writer);
    let archive = late_reader.join().unwrap();
    assert_eq!(summary.files, 24);
    assert_eq!(summary.archive_bytes, archive.len() as u64);

    let mut landed = Vec::new();
    decode_all(&archive, Limits::default(), |_, event| {
        if let Event::File { name, data, .. } = event {
            landed.push((String::from_utf8(name.to_vec()).unwrap(), data.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(landed.len(), files.len());
    for ((name, data), (got_name, got)) in files.iter().zip(&landed) {
        assert_eq!(name, got_name);
        assert!(data == got, "{name}: content differs");
    }
}
