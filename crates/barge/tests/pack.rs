//! `pack` through the library: into a pipe whose reader starts late, into an fd and into
//! any `Write` (the same bytes), and as a sink that receives what the walker sees.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

mod support;

use barge::format::{decode_all, Event, Limits};
use barge::pack::{Format, Pack, PackSummary};
use barge::tree::{Kind, Meta, Recorded, Recording};
use barge::unpack::{Archive, Unpack};
use barge::walk::walk;
use rustix::fs::{mknodat, open, FileType, Mode, OFlags, CWD};

fn open_dir(dir: &Path) -> OwnedFd {
    open(dir, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap()
}

/// A tree with nested, empty and crowded directories (more files than one ring batch),
/// files of the sizes around the inline limit, a symlink and a fifo.
fn varied_tree(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    fs::create_dir_all(root.join("a/empty")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    fs::create_dir(root.join("crowd")).unwrap();
    for (i, size) in [0, 1, 4095, 65_536, 65_537, 300_000]
        .into_iter()
        .enumerate()
    {
        let data: Vec<u8> = (0..size).map(|b| (b * 7 + i) as u8).collect();
        fs::write(root.join(format!("a/size{i}")), data).unwrap();
    }
    fs::write(root.join("a/b/c/deep"), b"deep").unwrap();
    for i in 0..150 {
        fs::write(root.join(format!("crowd/f{i:03}")), format!("file {i}")).unwrap();
    }
    fs::write(root.join("top"), b"top").unwrap();
    std::os::unix::fs::symlink("a", root.join("link")).unwrap();
    mknodat(
        CWD,
        root.join("a/fifo"),
        FileType::Fifo,
        Mode::from(0o644),
        0,
    )
    .unwrap();
}

/// The calls `archive` makes on a [`Recording`], through the decoder and the Feed.
fn listed(archive: Vec<u8>) -> Recording {
    let operation = Unpack::new();
    let mut recording = Recording::default();
    let input = Archive::from_reader(std::io::Cursor::new(archive));
    operation.list(&input, &mut recording).unwrap();
    recording
}

/// The calls with empty directories entered and left, owners cleared (pack records them
/// with `archive` only), and the file metadata the walker does not know (it leaves files
/// unopened) cleared.
fn comparable(recording: &Recording) -> Vec<Recorded> {
    let ownerless = |mut meta: Meta| {
        meta.owner = None;
        meta
    };
    recording
        .normalized()
        .into_iter()
        .map(|call| match call {
            Recorded::File(name, _, data) => Recorded::File(name, Meta::default(), data),
            Recorded::Enter(name, meta) => Recorded::Enter(name, ownerless(meta)),
            Recorded::Symlink(name, meta, target) => {
                Recorded::Symlink(name, ownerless(meta), target)
            }
            Recorded::Special(name, kind, meta, device) => {
                Recorded::Special(name, kind, ownerless(meta), device)
            }
            call => call,
        })
        .collect()
}

fn pack_to_vec(root: &Path) -> (Vec<u8>, PackSummary) {
    pack_as(root, |pack| pack)
}

/// Packs `root` as `options` say into bytes, which the decoder must take whole and fed in
/// small chunks alike.
fn pack_as(root: &Path, options: impl FnOnce(Pack<'_>) -> Pack<'_>) -> (Vec<u8>, PackSummary) {
    let mut archive = Vec::new();
    let summary = options(Pack::new(open_dir(root)))
        .to_writer(&mut archive)
        .unwrap();
    let whole = support::decode_whole(&archive, Limits::default());
    assert!(whole.is_ok(), "{whole:?}");
    let mut n = 0;
    let chunks = || {
        n = n % 1009 + 1;
        n
    };
    assert!(support::decode_chunked(&archive, Limits::default(), chunks) == whole);
    (archive, summary)
}

#[test]
fn packing_keeps_what_the_walker_sees_but_sockets() {
    fn v1(pack: Pack<'_>) -> Pack<'_> {
        pack.format(Format::V1)
    }
    fn v2(pack: Pack<'_>) -> Pack<'_> {
        pack.format(Format::V2)
    }
    fn zstd(pack: Pack<'_>) -> Pack<'_> {
        pack.zstd(3)
    }
    type Options = fn(Pack<'_>) -> Pack<'_>;
    for (version, options) in [(1, v1 as Options), (2, v2), (2, zstd)] {
        packing_keeps_what_the_walker_sees_but_sockets_in(version, options);
    }
}

fn packing_keeps_what_the_walker_sees_but_sockets_in(
    version: u8,
    options: fn(Pack<'_>) -> Pack<'_>,
) {
    let dir = tempfile::tempdir().unwrap();
    varied_tree(dir.path());
    let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("a/socket")).unwrap();
    let mut walked = Recording::default();
    walk(open_dir(dir.path()), &mut walked).unwrap();
    let (archive, summary) = pack_as(dir.path(), options);
    assert_eq!(archive[6], version, "the header's version");
    let unpacked = listed(archive);

    let kinds = |calls: &[Recorded]| -> Vec<(Vec<u8>, Kind)> {
        calls
            .iter()
            .filter_map(|call| match call {
                Recorded::Other(name, kind) | Recorded::Special(name, kind, ..) => {
                    Some((name.clone(), *kind))
                }
                Recorded::Symlink(name, ..) => Some((name.clone(), Kind::Symlink)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        kinds(&walked.calls),
        [
            (b"fifo".to_vec(), Kind::Fifo),
            (b"socket".to_vec(), Kind::Socket),
            (b"link".to_vec(), Kind::Symlink)
        ]
    );
    let warnings: Vec<_> = summary.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings, ["a/socket: socket ignored"]);
    assert!(!summary.lost_any());
    let empty = walked.calls.iter().find_map(|call| match call {
        Recorded::Empty(name, meta) if name == b"empty" => Some(meta),
        _ => None,
    });
    let mode = empty.map(|meta| (meta.mode, meta.mtime.is_some()));
    assert_eq!(
        mode,
        Some((0o755, true)),
        "an empty directory is announced empty, with its metadata: {:?}",
        walked.calls
    );
    walked
        .calls
        .retain(|call| !matches!(call, Recorded::Other(..)));
    let (walked, unpacked) = (comparable(&walked), comparable(&unpacked));
    assert_eq!(
        walked.len(),
        1 + 3 + 2 + 2 + 2 + 6 + 1 + 1 + 2 + 150 + 1 + 1 + 1
    );
    assert!(
        walked == unpacked,
        "walked {walked:?}\n\nunpacked {unpacked:?}"
    );
    assert_eq!(
        (
            summary.dirs,
            summary.files,
            summary.symlinks,
            summary.specials
        ),
        (6, 6 + 1 + 150 + 1, 1, 1)
    );
}

#[test]
fn packing_into_a_writer_gives_the_bytes_of_packing_into_an_fd() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    varied_tree(&tree);
    let (written, summary) = pack_to_vec(&tree);
    let file = tempfile::tempfile_in(dir.path()).unwrap();
    let fd_summary = Pack::new(open_dir(&tree)).to_fd(file.as_fd()).unwrap();
    let mut sent = Vec::new();
    let mut file = file;
    file.seek(SeekFrom::Start(0)).unwrap();
    file.read_to_end(&mut sent).unwrap();
    assert_eq!(summary, fd_summary);
    assert_eq!(summary.archive_bytes, written.len() as u64);
    assert!(
        written == sent,
        "{} against {} bytes",
        written.len(),
        sent.len()
    );
}

/// Into a pipe whose reader starts late: the writer thread is stuck on its first write, so
/// the queue fills, and large files are first handed to the writer (`sendfile`) and then,
/// once it is behind, read into the output buffers by the walking thread. Every file must
/// come out of the archive as it went in, in name order.
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
    let root = open_dir(dir.path());
    let (reader, writer) = std::io::pipe().unwrap();
    let late_reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let mut archive = Vec::new();
        let mut reader = reader;
        reader.read_to_end(&mut archive).unwrap();
        archive
    });
    let summary = Pack::new(root).to_fd(writer.as_fd()).unwrap();
    drop(writer);
    let archive = late_reader.join().unwrap();
    assert_eq!(summary.files, 24);
    assert_eq!(summary.archive_bytes, archive.len() as u64);

    let mut landed = Vec::new();
    decode_all(&archive, Limits::default(), |_, event| {
        if let Event::File { entry, data, .. } = event {
            landed.push((
                String::from_utf8(entry.name.to_vec()).unwrap(),
                data.to_vec(),
            ));
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
