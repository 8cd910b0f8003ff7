//! `list`'s sink: a line per entry in archive order, as `tar -tv` users expect it (short or
//! long) or as JSON Lines.

use std::collections::HashMap;
use std::io::Write;

use barge::error::escape_bytes;
use barge::tree::{Content, Device, DirPath, Entry, Kind, Meta, Sink, Timestamp, Xattrs};
use barge::TreePath;
use serde_json::{json, Map, Value};

use crate::report::json_path;

/// How `list` shows an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The path only (a directory's with a trailing `/`), as `tar -tf`: all a version 2
    /// index holds, so listed from it alone.
    Names,
    /// Mode, size and path.
    Short,
    /// Mode, owner, size, modification time (UTC) and path, as `tar -tv`.
    Long,
    /// One JSON object per line.
    Json,
}

/// Prints each entry it is handed.
pub struct Printer<W: Write> {
    pub out: W,
    format: Format,
    /// Where the listing is.
    dir: DirPath,
    /// The files hard links may name, by link id: their path and metadata.
    linked: HashMap<u64, (TreePath, Meta)>,
}

/// What an entry's line shows besides its name and metadata.
enum Detail<'a> {
    /// A directory or regular file of this many bytes.
    Size(u64),
    /// A symlink to this target.
    Symlink(&'a [u8]),
    /// A hard link to this linked file (path and metadata, when it was listed), by its
    /// entry number.
    HardLink(Option<&'a (TreePath, Meta)>, u64),
    /// A fifo or device.
    Special(Device),
}

impl<W: Write> Printer<W> {
    pub fn new(out: W, format: Format) -> Printer<W> {
        Printer {
            out,
            format,
            dir: DirPath::default(),
            linked: HashMap::new(),
        }
    }

    /// Prints the line of `entry` (in the directory entered last).
    fn print(&mut self, entry: &Entry<'_>, detail: Detail<'_>) -> barge::Result<()> {
        let path = self.dir.join(entry.name);
        let line = match self.format {
            Format::Names if entry.kind == Kind::Dir => format!("{}/", escape_bytes(&path.0)),
            Format::Names => escape_bytes(&path.0),
            Format::Json => json_line(&path, entry, &detail),
            format => text_line(&path, entry, &detail, format == Format::Long),
        };
        writeln!(self.out, "{line}")
            .map_err(|e| barge::Error::os("write listing", TreePath(b"<stdout>".to_vec()), e))
    }
}

/// The name the test vectors and `--json` give a kind.
fn kind_name(entry: &Entry<'_>, detail: &Detail<'_>) -> &'static str {
    match (detail, entry.kind) {
        (Detail::HardLink(..), _) => "hardlink",
        (_, Kind::Dir) => "dir",
        (_, Kind::Symlink) => "symlink",
        (_, Kind::Fifo) => "fifo",
        (_, Kind::CharDevice) => "char",
        (_, Kind::BlockDevice) => "block",
        _ => "file",
    }
}

fn json_line(path: &TreePath, entry: &Entry<'_>, detail: &Detail<'_>) -> String {
    let mut fields = Map::new();
    json_path(&mut fields, "path", &path.0);
    fields.insert("kind".into(), json!(kind_name(entry, detail)));
    let size = match detail {
        Detail::Size(size) => *size,
        _ => 0,
    };
    fields.insert("size".into(), json!(size));
    let meta = entry.meta;
    if !matches!(detail, Detail::Symlink(_) | Detail::HardLink(..)) {
        fields.insert("mode".into(), json!(meta.mode));
    }
    if let Some(Timestamp { sec, nsec }) = meta.mtime {
        fields.insert("mtime".into(), json!({"sec": sec, "nsec": nsec}));
    }
    if let Some(owner) = meta.owner {
        fields.insert("owner".into(), json!({"uid": owner.uid, "gid": owner.gid}));
    }
    if !entry.xattrs.is_empty() {
        fields.insert("xattrs".into(), xattrs_json(entry.xattrs));
    }
    if entry.link_id.is_some() {
        fields.insert("linked".into(), json!(true));
    }
    match detail {
        Detail::Size(_) => {}
        Detail::Symlink(target) => json_path(&mut fields, "target", target),
        Detail::HardLink(file, index) => {
            if let Some((path, _)) = file {
                json_path(&mut fields, "link", &path.0);
            }
            fields.insert("link_index".into(), json!(index));
        }
        Detail::Special(device) if entry.kind != Kind::Fifo => {
            fields.insert("major".into(), json!(device.major));
            fields.insert("minor".into(), json!(device.minor));
        }
        Detail::Special(_) => {}
    }
    Value::Object(fields).to_string()
}

fn xattrs_json(xattrs: Xattrs<'_>) -> Value {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let list = xattrs
        .iter()
        .map(|(name, value)| json!({"name_hex": hex(name), "value_hex": hex(value)}));
    Value::Array(list.collect())
}

/// `drwxr-xr-x 1000/1000 4096 2024-01-02 03:04:05 path/` (`long`), else without owner and
/// time; `-> target` after a symlink, `link to PATH` after a hard link, `major,minor` for
/// the size of a device.
fn text_line(path: &TreePath, entry: &Entry<'_>, detail: &Detail<'_>, long: bool) -> String {
    // A hard link shows its file's metadata, as tar does.
    let meta = match detail {
        Detail::HardLink(Some((_, meta)), _) => *meta,
        _ => entry.meta,
    };
    let kind = kind_name(entry, detail);
    let size = match detail {
        Detail::Size(size) => size.to_string(),
        Detail::Special(device) if entry.kind != Kind::Fifo => {
            format!("{},{}", device.major, device.minor)
        }
        _ => "0".into(),
    };
    let mut line = mode_string(kind, meta.mode);
    if long {
        let owner = meta
            .owner
            .map_or("-/-".into(), |o| format!("{}/{}", o.uid, o.gid));
        line += &format!(" {owner:<11}");
    }
    line += &format!(" {size:>12}");
    if long {
        let time = meta.mtime.map_or("-".into(), |t| utc(t.sec));
        line += &format!(" {time:<19}");
    }
    line += " ";
    line += &escape_bytes(&path.0);
    match detail {
        Detail::Size(_) if entry.kind == Kind::Dir => line.push('/'),
        Detail::Symlink(target) => line += &format!(" -> {}", escape_bytes(target)),
        Detail::HardLink(Some((file, _)), _) => line += &format!(" link to {file}"),
        Detail::HardLink(None, index) => line += &format!(" link to entry {index}"),
        _ => {}
    }
    line
}

/// `ls`-style mode: the type letter (`h` for a hard link, as tar shows it), then
/// `rwx` three times with setuid and setgid as `s`/`S` and sticky as `t`/`T`.
fn mode_string(kind: &str, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        "dir" => 'd',
        "symlink" => 'l',
        "hardlink" => 'h',
        "fifo" => 'p',
        "char" => 'c',
        "block" => 'b',
        _ => '-',
    });
    for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (mode & special != 0, bits & 1 != 0) {
            (true, true) => letter,
            (true, false) => letter.to_ascii_uppercase(),
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `YYYY-MM-DD HH:MM:SS` in UTC of `sec` seconds since the epoch (negative before it), by
/// the days-to-civil algorithm of Howard Hinnant's `chrono`-compatible date library.
pub(crate) fn utc(sec: i64) -> String {
    let (days, secs) = (sec.div_euclid(86_400), sec.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (secs / 3_600, secs / 60 % 60, secs % 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}")
}

impl<W: Write> Sink for Printer<W> {
    type Error = barge::Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> barge::Result<()> {
        self.print(entry, Detail::Size(0))?;
        self.dir.enter(entry.name);
        Ok(())
    }

    fn leave_dir(&mut self) -> barge::Result<()> {
        self.dir.leave();
        Ok(())
    }

    fn empty_dir(&mut self, entry: &Entry<'_>) -> barge::Result<()> {
        self.print(entry, Detail::Size(0))
    }

    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> barge::Result<()> {
        let size = match content {
            Content::Bytes(bytes) => bytes.len() as u64,
            Content::Stream { size, .. } => size,
            Content::File { len, .. } => len,
            // An archive hands no unopened files.
            _ => 0,
        };
        if let Some(id) = entry.link_id {
            self.linked
                .insert(id, (self.dir.join(entry.name), entry.meta));
        }
        self.print(entry, Detail::Size(size))
    }

    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> barge::Result<()> {
        self.print(entry, Detail::Symlink(target))
    }

    fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> barge::Result<()> {
        let file = self.linked.get(&target).cloned();
        self.print(entry, Detail::HardLink(file.as_ref(), target))
    }

    fn special(&mut self, entry: &Entry<'_>, device: Device) -> barge::Result<()> {
        self.print(entry, Detail::Special(device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_before_at_and_after_the_epoch() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(-1), "1969-12-31 23:59:59");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(-86_400 * 365), "1969-01-01 00:00:00");
        // The extremes neither overflow nor panic.
        assert!(utc(i64::MAX).starts_with("292277026596-12-04"));
        assert!(utc(i64::MIN).starts_with("-292277022657-01-27"));
    }

    #[test]
    fn mode_strings_show_type_and_special_bits() {
        assert_eq!(mode_string("dir", 0o755), "drwxr-xr-x");
        assert_eq!(mode_string("symlink", 0o777), "lrwxrwxrwx");
        assert_eq!(mode_string("fifo", 0o644), "prw-r--r--");
        assert_eq!(mode_string("file", 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string("file", 0o2644), "-rw-r-Sr--");
        assert_eq!(mode_string("dir", 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string("char", 0o1666), "crw-rw-rwT");
        assert_eq!(mode_string("hardlink", 0o600), "hrw-------");
    }
}
