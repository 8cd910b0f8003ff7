//! `Unpack` as a library user drives it, without the CLI: an archive built with the
//! `Encoder`, stored at an offset inside a file with zero padding after it, is opened, listed
//! and landed through every engine; the padding must be zero, and a merged directory keeps
//! its mode.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use barge::format::Encoder;
use barge::tree::{Meta, Recorded, Recording};
use barge::unpack::{Engine, Region, Unpack};
use barge::Progress;

/// An archive of `docs/` (mode 0o500) with two files, and `top`.
fn archive() -> Vec<u8> {
    let mut encoder = Encoder::new(Vec::new());
    encoder.dir(b"docs", 0o500).unwrap();
    encoder.file(b"a.txt", 0o644, b"alpha\n").unwrap();
    encoder.file(b"b.bin", 0o600, &vec![7u8; 100_000]).unwrap();
    encoder.pop().unwrap();
    encoder.file(b"top", 0o644, b"top\n").unwrap();
    encoder.finish().unwrap()
}

#[test]
fn an_archive_at_an_offset_is_listed_and_landed_through_every_engine() {
    let work = tempfile::tempdir().unwrap();
    let image = work.path().join("image");
    let mut bytes = vec![0xa5u8; 1234];
    let archive = archive();
    bytes.extend_from_slice(&archive);
    bytes.resize(bytes.len() + 70_000, 0);
    fs::write(&image, &bytes).unwrap();
    let region = Region {
        offset: Some(1234),
        length: None,
    };

    let operation = Unpack::new().sandbox(false).region(region);
    let opened = operation.open(Some(&image)).unwrap();
    let mut listed = Recording::default();
    operation.list(&opened, &mut listed).unwrap();
    let mode = Meta::with_mode;
    assert_eq!(
        listed.calls,
        [
            Recorded::Enter(b"docs".to_vec(), mode(0o500)),
            Recorded::File(b"a.txt".to_vec(), mode(0o644), b"alpha\n".to_vec()),
            Recorded::File(b"b.bin".to_vec(), mode(0o600), vec![7u8; 100_000]),
            Recorded::Leave,
            Recorded::File(b"top".to_vec(), mode(0o644), b"top\n".to_vec()),
            Recorded::Finish,
        ]
    );

    for engine in [Engine::Auto, Engine::Sync, Engine::Threads, Engine::Uring] {
        let dest = work.path().join(format!("dest-{engine:?}"));
        let operation = operation.clone().engine(engine);
        let opened = operation.open(Some(&image)).unwrap();
        let mut destination = operation.prepare(&dest, &opened).unwrap();
        let landed = operation
            .land(&opened, &mut destination, &Progress::default())
            .unwrap();
        assert_eq!((landed.dirs, landed.files), (1, 3), "{engine:?}");
        assert_eq!(
            fs::read(dest.join("docs/b.bin")).unwrap(),
            vec![7u8; 100_000]
        );
        let mode = fs::metadata(dest.join("docs"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o500, "{engine:?}");
        fs::set_permissions(dest.join("docs"), fs::Permissions::from_mode(0o755)).unwrap();
    }

    // A byte that is not zero after the archive is no padding.
    bytes.push(1);
    fs::write(&image, &bytes).unwrap();
    let opened = operation.open(Some(&image)).unwrap();
    let error = (operation.list(&opened, Recording::default())).unwrap_err();
    assert!(error.to_string().contains("[trailing-bytes]"), "{error}");
}

/// A reader that hands out its bytes in uneven small pieces, is interrupted now and then,
/// and fails with `failure` after `fail_at` bytes when that is set.
struct Trickle {
    bytes: Vec<u8>,
    at: usize,
    calls: usize,
    fail_at: Option<usize>,
}

impl std::io::Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.calls += 1;
        if self.calls % 7 == 0 {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let end = self.fail_at.unwrap_or(self.bytes.len());
        if self.at == end && self.fail_at.is_some() {
            return Err(std::io::Error::other("the channel lost its peer"));
        }
        let n = buf
            .len()
            .min(end - self.at)
            .min(1 + self.calls * 997 % 65_536);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// An archive over 4 MiB (so the threaded engine starts its helpers while streaming): 64
/// directories of 40 files.
fn large_archive() -> Vec<u8> {
    let mut encoder = Encoder::new(Vec::new());
    for d in 0..64 {
        encoder.dir(format!("d{d}").as_bytes(), 0o755).unwrap();
        for f in 0..40 {
            let content = vec![(d * 40 + f) as u8; 2_000 + f * 10];
            encoder
                .file(format!("f{f}").as_bytes(), 0o644, &content)
                .unwrap();
        }
        encoder.pop().unwrap();
    }
    encoder.finish().unwrap()
}

#[test]
fn an_archive_from_any_reader_lands_through_every_engine() {
    let work = tempfile::tempdir().unwrap();
    let archive = large_archive();
    assert!(archive.len() > 4 << 20);
    for engine in [Engine::Auto, Engine::Sync, Engine::Threads, Engine::Uring] {
        let reader = Trickle {
            bytes: archive.clone(),
            at: 0,
            calls: 0,
            fail_at: None,
        };
        let operation = Unpack::new().sandbox(false).engine(engine);
        let opened = barge::unpack::Archive::from_reader(reader);
        let dest = work.path().join(format!("dest-{engine:?}"));
        let mut destination = operation.prepare(&dest, &opened).unwrap();
        let landed = operation
            .land(&opened, &mut destination, &Progress::default())
            .unwrap();
        assert_eq!((landed.dirs, landed.files), (64, 64 * 40), "{engine:?}");
        assert_eq!(
            fs::read(dest.join("d63/f39")).unwrap(),
            vec![(63 * 40 + 39) as u8; 2_390],
            "{engine:?}"
        );
    }
}

#[test]
fn a_reader_that_fails_names_the_input_offset_and_leaves_no_cut_file() {
    let work = tempfile::tempdir().unwrap();
    let mut encoder = Encoder::new(Vec::new());
    encoder.file(b"big", 0o644, &vec![9u8; 300_000]).unwrap();
    let archive = encoder.finish().unwrap();
    for engine in [Engine::Sync, Engine::Threads, Engine::Uring] {
        let reader = Trickle {
            bytes: archive.clone(),
            at: 0,
            calls: 0,
            fail_at: Some(150_000),
        };
        let operation = Unpack::new().sandbox(false).engine(engine);
        let opened = barge::unpack::Archive::from_reader(reader);
        let dest = work.path().join(format!("dest-{engine:?}"));
        let mut destination = operation.prepare(&dest, &opened).unwrap();
        let error = operation
            .land(&opened, &mut destination, &Progress::default())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("<input at byte") && error.contains("the channel lost its peer"),
            "{engine:?}: {error}"
        );
        assert!(!dest.join("big").exists(), "{engine:?}: a cut file stayed");
    }
}

/// A streamed archive whose file larger than a segment of the threaded engine (16 MiB) is
/// the first entry of a directory (held back until then) inside a directory without owner
/// write permission lands exactly and ends with the restricted mode; cut inside that file,
/// it fails naming the file, which is removed, and the directory stays writable for its
/// owner (to remove what landed), on the threaded engine as on the sync one.
#[test]
fn a_huge_first_file_in_held_directories_streams_through_the_threaded_engine() {
    let work = tempfile::tempdir().unwrap();
    let huge: Vec<u8> = (0..20u32 << 20).map(|i| (i % 253) as u8).collect();
    let mut encoder = Encoder::new(Vec::new());
    encoder.dir(b"outer", 0o500).unwrap();
    encoder.dir(b"inner", 0o755).unwrap();
    encoder.file(b"huge", 0o644, &huge).unwrap();
    encoder.file(b"after", 0o644, b"after\n").unwrap();
    encoder.pop().unwrap();
    encoder.pop().unwrap();
    encoder.file(b"top", 0o644, b"top\n").unwrap();
    let archive = encoder.finish().unwrap();
    let cut = archive[..12 << 20].to_vec();
    for engine in [Engine::Threads, Engine::Sync] {
        for (what, bytes) in [("whole", archive.clone()), ("cut", cut.clone())] {
            let reader = Trickle {
                bytes,
                at: 0,
                calls: 0,
                fail_at: None,
            };
            let operation = Unpack::new().sandbox(false).engine(engine);
            let opened = barge::unpack::Archive::from_reader(reader);
            let dest = work.path().join(format!("{what}-{engine:?}"));
            // What a failure leaves shows in an existing DEST (a new one is removed).
            if what == "cut" {
                fs::create_dir(&dest).unwrap();
            }
            let mut destination = operation.prepare(&dest, &opened).unwrap();
            let landed = operation.land(&opened, &mut destination, &Progress::default());
            let outer = dest.join("outer");
            let mode = if what == "whole" {
                let landed = landed.unwrap();
                assert_eq!((landed.dirs, landed.files), (2, 3));
                assert!(fs::read(outer.join("inner/huge")).unwrap() == huge);
                assert_eq!(fs::read(outer.join("inner/after")).unwrap(), b"after\n");
                assert_eq!(fs::read(dest.join("top")).unwrap(), b"top\n");
                0o500
            } else {
                let error = landed.unwrap_err().to_string();
                assert!(
                    error.contains("outer/inner/huge: input ended after"),
                    "{error}"
                );
                assert!(!outer.join("inner/huge").exists(), "the cut file stayed");
                0o700
            };
            let found = fs::metadata(&outer).unwrap().permissions().mode();
            assert_eq!(found & 0o777, mode, "{what} {engine:?}");
            fs::set_permissions(&outer, fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}

/// A reader of `bytes` that cancels `cancel` once `at` bytes were read, and goes on giving
/// bytes in small pieces (the unpack, not the input, must end it).
struct CancelAt {
    bytes: Vec<u8>,
    read: usize,
    at: usize,
    cancel: barge::interrupt::Cancel,
}

impl std::io::Read for CancelAt {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.read >= self.at {
            self.cancel.cancel();
        }
        let n = buf.len().min(self.bytes.len() - self.read).min(64 << 10);
        buf[..n].copy_from_slice(&self.bytes[self.read..self.read + n]);
        self.read += n;
        Ok(n)
    }
}

/// Cancelling an unpack's token in the middle of a file stops the landing, on every
/// engine, with `Error::Interrupted` (signal 0: no signal): the file being written is
/// removed, and a new DEST is not put in place.
#[test]
fn a_cancelled_token_stops_an_unpack_and_leaves_no_cut_file() {
    let work = tempfile::tempdir().unwrap();
    let mut encoder = Encoder::new(Vec::new());
    encoder.file(b"first", 0o644, b"first\n").unwrap();
    encoder.file(b"big", 0o644, &vec![3u8; 8 << 20]).unwrap();
    encoder.file(b"last", 0o644, b"last\n").unwrap();
    let archive = encoder.finish().unwrap();
    for engine in [Engine::Sync, Engine::Threads, Engine::Uring] {
        for existing in [true, false] {
            let cancel = barge::interrupt::Cancel::new();
            let reader = CancelAt {
                bytes: archive.clone(),
                read: 0,
                at: 4 << 20,
                cancel: cancel.clone(),
            };
            let operation = Unpack::new()
                .sandbox(false)
                .engine(engine)
                .cancel(cancel.clone());
            let opened = barge::unpack::Archive::from_reader(reader);
            let dest = work.path().join(format!("dest-{engine:?}-{existing}"));
            if existing {
                fs::create_dir(&dest).unwrap();
            }
            let mut destination = operation.prepare(&dest, &opened).unwrap();
            let error = operation
                .land(&opened, &mut destination, &Progress::default())
                .unwrap_err();
            assert!(
                matches!(error, barge::Error::Interrupted { signal: 0 }),
                "{engine:?}: {error}"
            );
            assert!(cancel.is_cancelled());
            assert!(!dest.join("big").exists(), "{engine:?}: a cut file stayed");
            assert!(
                !dest.join("last").exists(),
                "{engine:?}: landed after the stop"
            );
            assert_eq!(dest.exists(), existing, "{engine:?}: a new DEST was kept");
        }
    }
}
