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
