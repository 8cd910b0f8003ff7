//! `list` of the extended kinds, `list -l`, and `--strip-components` on `unpack` and `list`.

use barge::format::Encoder;
use barge::tree::{Device, Entry, Kind, Meta, Owner, Timestamp};

use crate::common::*;

/// `bin/` (with a time) holding a setuid file `sh` (owner, time, linked) and a symlink
/// `shell -> sh`; then `null` (character device 1,3) and `rsh`, a hard link to `bin/sh`.
fn extended() -> Vec<u8> {
    let time = Some(Timestamp {
        sec: 1_700_000_000,
        nsec: 5,
    });
    let mut encoder = Encoder::extended(Vec::new());
    let mut bin = Entry::dir(b"bin", Meta::with_mode(0o755));
    bin.meta.mtime = time;
    encoder.dir_with(&bin).unwrap();
    let mut sh = Entry::file(b"sh", Meta::with_mode(0o4755));
    (sh.meta.mtime, sh.meta.owner) = (time, Some(Owner { uid: 0, gid: 7 }));
    sh.link_id = Some(1);
    encoder.file_with(&sh, b"#!").unwrap();
    let shell = Entry::new(b"shell", Kind::Symlink, Meta::default());
    encoder.symlink(&shell, b"sh").unwrap();
    encoder.pop().unwrap();
    let null = Entry::new(b"null", Kind::CharDevice, Meta::with_mode(0o666));
    encoder
        .special(&null, Device { major: 1, minor: 3 })
        .unwrap();
    encoder.hard_link(b"rsh", 1).unwrap();
    encoder.finish().unwrap()
}

fn listing(args: &[&str], archive: &[u8]) -> String {
    let out = run_ok(&mut barge(["list"].iter().chain(args)), Some(archive));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn list_shows_symlinks_hard_links_and_devices_as_tar_does() {
    let archive = extended();
    let short = "\
drwxr-xr-x            0 bin/
-rwsr-xr-x            2 bin/sh
lrwxrwxrwx            0 bin/shell -> sh
crw-rw-rw-          1,3 null
hrwsr-xr-x            0 rsh link to bin/sh
";
    assert_eq!(listing(&["-"], &archive), short);
    let long = "\
drwxr-xr-x -/-                    0 2023-11-14 22:13:20 bin/
-rwsr-xr-x 0/7                    2 2023-11-14 22:13:20 bin/sh
lrwxrwxrwx -/-                    0 -                   bin/shell -> sh
crw-rw-rw- -/-                  1,3 -                   null
hrwsr-xr-x 0/7                    0 2023-11-14 22:13:20 rsh link to bin/sh
";
    assert_eq!(listing(&["-l", "-"], &archive), long);
    let json = listing(&["--json", "-"], &archive);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[1]["mtime"],
        serde_json::json!({"sec": 1_700_000_000, "nsec": 5})
    );
    assert_eq!(lines[1]["owner"], serde_json::json!({"uid": 0, "gid": 7}));
    assert_eq!(
        (&lines[1]["mode"], &lines[1]["linked"]),
        (&2541.into(), &true.into())
    );
    assert_eq!(
        (&lines[2]["kind"], &lines[2]["target"]),
        (&"symlink".into(), &"sh".into())
    );
    assert_eq!(
        (&lines[3]["major"], &lines[3]["minor"]),
        (&1.into(), &3.into())
    );
    assert_eq!(
        (&lines[4]["link"], &lines[4]["link_index"]),
        (&"bin/sh".into(), &1.into())
    );
}

/// `top/a/f`, `top/g` and a root file `r`.
fn nested() -> Vec<u8> {
    let mut encoder = Encoder::new(Vec::new());
    encoder.file(b"r", 0o644, b"r").unwrap();
    encoder.dir(b"top", 0o755).unwrap();
    encoder.dir(b"a", 0o700).unwrap();
    encoder.file(b"f", 0o600, b"f").unwrap();
    encoder.pop().unwrap();
    encoder.file(b"g", 0o644, b"g").unwrap();
    encoder.finish().unwrap()
}

#[test]
fn strip_components_lands_and_lists_what_is_below_the_stripped_levels() {
    let work = tempdir();
    let archive = nested();
    let mask = umask();
    for engine in engines() {
        for piped in [false, true] {
            let dest = work.path().join(format!("{engine}-{piped}"));
            let mut cmd = barge(["unpack", "--strip-components", "1", "--engine", &engine]);
            if piped {
                run_ok(cmd.arg("-").arg(&dest), Some(&archive));
            } else {
                let file = work.path().join("a.barge");
                std::fs::write(&file, &archive).unwrap();
                run_ok(cmd.arg(&file).arg(&dest), None);
            }
            let got: Vec<_> = scan(&dest).into_iter().collect();
            let want = [
                (b"a".to_vec(), Node::Dir(0o700 & !mask)),
                (b"a/f".to_vec(), Node::File(0o600 & !mask, b"f".to_vec())),
                (b"g".to_vec(), Node::File(0o644 & !mask, b"g".to_vec())),
            ];
            assert_eq!(got, want, "{engine} piped {piped}");
        }
    }
    let list =
        "drwx------            0 a/\n-rw-------            1 a/f\n-rw-r--r--            1 g\n";
    assert_eq!(listing(&["--strip-components", "1", "-"], &archive), list);
    assert_eq!(listing(&["--strip-components", "3", "-"], &archive), "");
}

#[test]
fn a_hard_link_to_a_stripped_file_fails_naming_both() {
    let work = tempdir();
    let mut encoder = Encoder::extended(Vec::new());
    let mut f = Entry::file(b"f", Meta::with_mode(0o644));
    f.link_id = Some(0);
    encoder.file_with(&f, b"x").unwrap();
    encoder.dir(b"d", 0o755).unwrap();
    encoder.hard_link(b"h", 0).unwrap();
    let archive = encoder.finish().unwrap();
    let needles = ["d/h: hard link to f, which is left out (--strip-components"];
    for engine in engines() {
        let dest = work.path().join(&engine);
        let mut cmd = barge([
            "unpack",
            "--strip-components",
            "1",
            "--engine",
            &engine,
            "-",
        ]);
        let out = run(cmd.arg(&dest), Some(&archive));
        assert_clean_failure(&out, &needles, &engine);
    }
    let out = run(
        &mut barge(["list", "--strip-components", "1", "-"]),
        Some(&archive),
    );
    assert_clean_failure(&out, &needles, "list");
}
