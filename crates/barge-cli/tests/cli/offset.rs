//! Archives stored inside something larger: `--offset N [--length L]` on a file, on stdin
//! and on a real block device (a loop device), through every engine; zero padding after the
//! end is accepted there, anything else is refused with the usual codes.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::common::*;

/// A tree with small files, one of 100 KiB and one of 1 MiB (copied from the archive file
/// by the kernel, at the archive's offset), and a nested empty directory; its archive is
/// over 256 KiB, so `auto` takes the threaded engine for it.
fn tree_and_archive(work: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let src = work.join("src");
    fs::create_dir_all(src.join("a/b/empty")).unwrap();
    for i in 0..20 {
        file(
            &src.join(format!("a/f{i:02}")),
            format!("small {i}\n").as_bytes(),
            0o644,
        );
    }
    let pattern = |len: usize, seed: usize| -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + seed) % 251) as u8).collect()
    };
    file(&src.join("a/b/medium"), &pattern(100 << 10, 1), 0o600);
    file(&src.join("large"), &pattern(1 << 20, 2), 0o755);
    let archive = pack_to(&src, "-");
    (src, archive)
}

/// `prefix` junk bytes, the archive, then `padding` zero bytes.
fn embedded(prefix: usize, archive: &[u8], padding: usize) -> Vec<u8> {
    let mut out: Vec<u8> = (0..prefix).map(|i| (i % 253 + 1) as u8).collect();
    out.extend_from_slice(archive);
    out.resize(out.len() + padding, 0);
    out
}

fn unpack_at(engine: &str, args: &[String], input: &Path, dest: &Path, piped: bool) -> Vec<u8> {
    let mut cmd = barge(["unpack", "--engine", engine]);
    cmd.args(args);
    let out = if piped {
        run(cmd.arg("-").arg(dest), Some(&fs::read(input).unwrap()))
    } else {
        run(cmd.arg(input).arg(dest), None)
    };
    assert!(
        out.status.success(),
        "{engine} {args:?} piped {piped}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stderr
}

#[test]
fn an_archive_at_any_offset_with_zero_padding_lands_through_every_engine() {
    let work = tempdir();
    let (src, archive) = tree_and_archive(work.path());
    let image = work.path().join("image");
    for (prefix, padding) in [(1, 0), (4095, 3 << 20), (4097, 1), (12_345, 5 << 20)] {
        fs::write(&image, embedded(prefix, &archive, padding)).unwrap();
        let args = vec!["--offset".to_string(), prefix.to_string()];
        for engine in engines() {
            for piped in [false, true] {
                let dest = work.path().join(format!("dest-{prefix}-{engine}-{piped}"));
                unpack_at(&engine, &args, &image, &dest, piped);
                assert_same_tree(&src, &dest, umask());
                fs::remove_dir_all(&dest).unwrap();
            }
        }
        let listed = run_ok(
            &mut barge([
                "list".as_ref(),
                "--offset".as_ref(),
                prefix.to_string().as_ref(),
                image.as_os_str(),
            ]),
            None,
        );
        let plain = run_ok(&mut barge(["list", "-"]), Some(&archive));
        assert_eq!(listed.stdout, plain.stdout, "list --offset {prefix}");
    }
    // --length: exactly the archive's bytes, with anything after them never read.
    fs::write(&image, embedded(777, &archive, 0)).unwrap();
    let mut tail = fs::read(&image).unwrap();
    tail.extend_from_slice(b"not part of the archive");
    fs::write(&image, &tail).unwrap();
    let args: Vec<String> = ["--offset", "777", "--length", &archive.len().to_string()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for engine in engines() {
        for piped in [false, true] {
            let dest = work.path().join(format!("dest-length-{engine}-{piped}"));
            unpack_at(&engine, &args, &image, &dest, piped);
            assert_same_tree(&src, &dest, umask());
        }
    }
}

/// A refused input: what it is, its bytes, --offset, --length, what the message says.
type Case = (&'static str, Vec<u8>, u64, Option<u64>, Vec<String>);

#[test]
fn garbage_after_the_end_and_wrong_lengths_are_refused() {
    let work = tempdir();
    let archive = Archive::header().file(b"f", b"data").end(1);
    let image = work.path().join("image");
    let n = archive.len();
    let garbage = {
        let mut image = embedded(100, &archive, 4096);
        image.push(b'x');
        image
    };
    let cases: Vec<Case> = vec![
        (
            "non-zero byte after the padding",
            garbage,
            100,
            None,
            vec![
                format!("archive byte {}:", n + 4096),
                "[trailing-bytes]".into(),
            ],
        ),
        (
            "--length shorter than the archive",
            embedded(100, &archive, 0),
            100,
            Some(n as u64 - 3),
            vec!["[truncated]".into()],
        ),
        (
            "--length longer than the archive (zeros are no padding then)",
            embedded(100, &archive, 10),
            100,
            Some(n as u64 + 5),
            vec![format!("archive byte {n}:"), "[trailing-bytes]".into()],
        ),
        (
            "--length past the end of the input",
            embedded(100, &archive, 0),
            100,
            Some(n as u64 + 1),
            vec!["bytes where".into(), "--offset and --length".into()],
        ),
        (
            "--offset past the end of the input",
            embedded(100, &archive, 0),
            100 + n as u64 + 1,
            None,
            vec!["bytes where".into(), "--offset and --length".into()],
        ),
    ];
    for (what, bytes, offset, length, needles) in cases {
        fs::write(&image, &bytes).unwrap();
        let mut args = vec!["--offset".to_string(), offset.to_string()];
        if let Some(length) = length {
            args.extend(["--length".to_string(), length.to_string()]);
        }
        let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
        for engine in engines() {
            for piped in [false, true] {
                let what = format!("{what} ({engine}, piped {piped})");
                let dest = work.path().join("dest");
                let mut cmd = barge(["unpack", "--no-sandbox", "--engine", &engine]);
                cmd.args(&args);
                let out = if piped {
                    run(cmd.arg("-").arg(&dest), Some(&bytes))
                } else {
                    run(cmd.arg(&image).arg(&dest), None)
                };
                assert_clean_failure(&out, &needles, &what);
                let _ = fs::remove_dir_all(&dest);
            }
        }
    }
}

/// Detaches a loop device when dropped.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
#[ignore = "needs root for losetup"]
fn a_loop_device_holds_an_archive_at_an_offset_or_at_its_start() {
    require_root();
    let work = tempdir();
    let (src, archive) = tree_and_archive(work.path());
    // A device padded to 8 MiB, the archive at an odd offset; and one with it at the start.
    for prefix in [5000, 0] {
        let image = work.path().join(format!("device-{prefix}.img"));
        let mut bytes = embedded(prefix, &archive, 0);
        bytes.resize(8 << 20, 0);
        fs::write(&image, bytes).unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show", "--read-only"])
            .arg(&image)
            .output()
            .unwrap();
        if !out.status.success() {
            skipped(format_args!(
                "no loop device: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            return;
        }
        let device = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
        let args: Vec<String> = match prefix {
            0 => Vec::new(),
            n => vec!["--offset".into(), n.to_string()],
        };
        for engine in engines() {
            let dest = work.path().join(format!("dest-{prefix}-{engine}"));
            unpack_at(&engine, &args, Path::new(&device.0), &dest, false);
            assert_same_tree(&src, &dest, umask());
        }
    }
}
