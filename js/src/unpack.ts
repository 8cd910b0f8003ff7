/**
 * The barge decoder: streams entries out of an archive, applying exactly the
 * checks of docs/FORMAT.md in their order, with the same error codes and
 * offsets as the Rust decoder.
 */
import { BargeError } from "./error.js";
import { read } from "./source.js";
import type { DataSource, Owner, Timestamp } from "./types.js";

export interface UnpackOptions {
  /** Deepest allowed directory nesting (root = 0, first DIR = 1). Default 1024. */
  maxDepth?: number;
  /** Most entries (of every kind) allowed. Default: no limit. */
  maxEntries?: number;
  /** Most file content bytes allowed in total. Default: no limit. */
  maxBytes?: number;
  /**
   * Most disk space allowed in total, each entry charged its content (a symlink's target)
   * and XATTR bytes in 4 KiB blocks, at least one (docs/FORMAT.md rule 13). Default: no limit.
   */
  maxSpace?: number;
}

/** The disk space an entry is charged against `maxSpace`. */
const space = (content: number, xattrs: number) => Math.max(1, Math.ceil((content + xattrs) / 4096)) * 4096;

/** Anything an archive can be read from. */
export type ArchiveSource = DataSource | Uint8Array | ArrayBuffer | Blob;

/** An extended attribute as decoded. */
export interface Xattr {
  /** The name as text (invalid UTF-8 shown as U+FFFD); `nameBytes` is exact. */
  name: string;
  nameBytes: Uint8Array;
  value: Uint8Array;
}

/** What every decoded entry has. */
interface Decoded {
  /** The path as text (invalid UTF-8 shown as U+FFFD); `pathBytes` is exact. */
  path: string;
  /** The exact path bytes, names joined by "/". */
  pathBytes: Uint8Array;
  /** The entry's number: entries are numbered from 0 in archive order. */
  index: number;
  /** Byte offset of the entry's message in the archive (after its records). */
  offset: number;
  /** Content size in bytes (0 for everything but files). */
  size: number;
  /** Modification time, if the archive records one (never on hard links). */
  mtime?: Timestamp;
  /** The same in milliseconds since the epoch (may be rounded), as `File.lastModified` has it. */
  mtimeMs?: number;
  /** Numeric owner, if recorded. */
  owner?: Owner;
  /** Extended attributes, if recorded, ascending by name. */
  xattrs?: Xattr[];
  /**
   * The file content, in chunks. Usable until the iteration moves to the next
   * entry (content not consumed by then is skipped). Empty for all but files.
   */
  chunks(): AsyncIterable<Uint8Array>;
  /** The whole file content (same lifetime rule as `chunks`). */
  bytes(): Promise<Uint8Array>;
}

/** Entries with permission bits. */
interface WithMode extends Decoded {
  /** The mode (12 bits, setuid/setgid/sticky included): PERM, or 0o644 (files, special files) / 0o755 (dirs). */
  mode: number;
  /** The raw PERM value, if the archive has one for this entry. */
  perm?: number;
}

export interface DecodedDir extends WithMode {
  kind: "dir";
}
export interface DecodedFile extends WithMode {
  kind: "file";
  /** Later hard links may name this file (LINKED). */
  linked?: true;
}
export interface DecodedSymlink extends Decoded {
  kind: "symlink";
  /** A symlink has no mode of its own. */
  mode?: undefined;
  perm?: undefined;
  /** The target as text (invalid UTF-8 shown as U+FFFD); `targetBytes` is exact. Never followed. */
  target: string;
  targetBytes: Uint8Array;
}
export interface DecodedHardlink extends Decoded {
  kind: "hardlink";
  /** A hard link has its file's mode: see the entry at `linkIndex`. */
  mode?: undefined;
  perm?: undefined;
  /** The `index` of the earlier linked file this is a link to. */
  linkIndex: number;
  /** That file's path, as text and exact. */
  linkPath: string;
  linkPathBytes: Uint8Array;
}
export interface DecodedSpecial extends WithMode {
  kind: "fifo" | "char" | "block";
  /** Device numbers (character and block devices only). */
  device?: { major: number; minor: number };
}
export type DecodedEntry = DecodedDir | DecodedFile | DecodedSymlink | DecodedHardlink | DecodedSpecial;

const MAGIC = [66, 65, 82, 71, 69, 0];
const TWO32 = 2 ** 32;
const utf8 = new TextDecoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const RECORDS = ["PERM", "TIME", "OWNER", "XATTR", "LINKED"];
/** Record tags (as bits 1 << tag) each entry tag may carry. */
const DIR_RECORDS = 0b111100000;
const ALLOWED: Record<number, number> = { 1: 0b1111100000, 2: DIR_RECORDS, 4: 0b1111100000, 10: 0b111000000, 11: 0, 12: DIR_RECORDS };
const SPECIALS = ["fifo", "char", "block"] as const;

/** Quotes bytes for a message, escaping non-UTF-8 bytes as \xNN. */
function show(path: Uint8Array): string {
  try {
    return JSON.stringify(strictUtf8.decode(path));
  } catch {
    const esc = (c: number) => (c > 31 && c < 127 && c != 34 && c != 92 ? String.fromCharCode(c) : "\\x" + c.toString(16).padStart(2, "0"));
    return '"' + Array.from(path, esc).join("") + '"';
  }
}

function join(dir: Uint8Array, name: Uint8Array): Uint8Array {
  if (!dir.length) return name;
  const out = new Uint8Array(dir.length + 1 + name.length);
  out.set(dir);
  out[dir.length] = 47;
  out.set(name, dir.length + 1);
  return out;
}

/** Byte order of a and b: negative, 0 or positive. */
function compare(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < a.length && i < b.length; i++) if (a[i] != b[i]) return a[i] - b[i];
  return a.length - b.length;
}

/** Buffered input that knows the absolute offset of every byte. */
class Input {
  buf: Uint8Array = new Uint8Array(0);
  pos = 0;
  /** absolute offset of buf[0] */
  base = 0;
  private eof = false;
  constructor(private it: AsyncGenerator<Uint8Array>) {}

  get offset(): number {
    return this.base + this.pos;
  }
  get avail(): number {
    return this.buf.length - this.pos;
  }
  /**
   * Buffers at least n bytes if the input has them; returns whether it did.
   * Chunks are joined once per call; a chunk that arrives alone is used as it
   * is, so file content passes through without a copy.
   */
  async fill(n: number): Promise<boolean> {
    if (this.avail >= n) return true;
    const parts = this.avail ? [this.buf.subarray(this.pos)] : [];
    let have = this.avail;
    while (have < n && !this.eof) {
      const r = await this.it.next();
      if (r.done) this.eof = true;
      else if (r.value.length) parts.push(r.value), (have += r.value.length);
    }
    if (parts.length > 1) {
      const b = new Uint8Array(have);
      let o = 0;
      for (const p of parts) b.set(p, o), (o += p.length);
      parts[0] = b;
    }
    this.base += this.pos;
    this.buf = parts[0] ?? new Uint8Array(0);
    this.pos = 0;
    return have >= n;
  }
  /** Appends more input to the buffer; false at end of input. */
  more(): Promise<boolean> {
    return this.fill(this.avail + 1);
  }
  byte(i: number): number {
    return this.buf[this.pos + i];
  }
  u32(i: number): number {
    const b = this.buf, p = this.pos + i;
    return (b[p] | (b[p + 1] << 8) | (b[p + 2] << 16)) + b[p + 3] * 2 ** 24;
  }
  /** A u64 as a number (exact below 2^53, which every count and size of a real archive is). */
  u64(i: number): number {
    return this.u32(i) + this.u32(i + 4) * TWO32;
  }
  slice(from: number, to: number): Uint8Array {
    return this.buf.slice(this.pos + from, this.pos + to);
  }
  close(): void {
    this.it.return(undefined).catch(() => {});
  }
}

/** The records read so far for the next entry. */
interface Records {
  /** the tags seen, as bits 1 << tag */
  seen: number;
  /** the highest tag seen */
  top: number;
  perm?: number;
  mtime?: Timestamp;
  owner?: Owner;
  xattrs?: Xattr[];
  /** bytes of the XATTR records so far, tags included */
  xattrBytes: number;
}

const noRecords = (): Records => ({ seen: 0, top: 0, xattrBytes: 0 });

/**
 * Decodes an archive into its entries, in archive order (parents before
 * children). Throws a BargeError with `.code` and `.offset` at the first
 * invalid byte; entries before it have already been delivered. Stopping the
 * iteration early cancels the input.
 */
export async function* unpack(input: ArchiveSource, options: UnpackOptions = {}): AsyncGenerator<DecodedEntry> {
  const { maxDepth = 1024, maxEntries = Infinity, maxBytes = Infinity, maxSpace = Infinity } = options;
  const inp = new Input(
    read(
      input instanceof Uint8Array
        ? [input]
        : input instanceof ArrayBuffer
          ? [new Uint8Array(input)]
          : "stream" in input && typeof input.stream == "function"
            ? input.stream()
            : (input as DataSource),
    ),
  );
  /** open directories, root first: their path and the names used in them */
  const dirs: { path: Uint8Array; names: Set<string> }[] = [{ path: new Uint8Array(), names: new Set() }];
  /** the paths of the LINKED files, by entry number */
  const linked = new Map<number, Uint8Array>();
  let count = 0;
  let total = 0;
  let taken = 0;
  let rec = noRecords();
  let at = 0;
  let path = dirs[0].path;
  const fail = (code: string, what: string, offset = at) =>
    new BargeError(code, `${code} at offset ${offset}${path.length ? ` in ${show(path)}` : ""}: ${what}`, offset);
  /** Buffers n bytes of the current message or fails as truncated. */
  const need = async (n: number, what: string) => {
    if (!(await inp.fill(n))) throw fail("truncated", `input ends inside ${what}`);
  };

  try {
    await inp.fill(8);
    for (let i = 0; i < 6 && i < inp.avail; i++) if (inp.byte(i) != MAGIC[i]) throw fail("bad-magic", "not a barge archive");
    if (inp.avail < 8) throw fail("truncated", "input ends inside the header");
    if (inp.byte(6) != 1) throw fail("bad-version", `unsupported format version ${inp.byte(6)}`);
    const flags = inp.byte(7);
    if (flags > 1) throw fail("bad-flags", `unsupported header flags 0x${flags.toString(16)}`);
    const lastTag = flags ? 12 : 5;
    inp.pos += 8;

    for (;;) {
      at = inp.offset;
      const dir = dirs[dirs.length - 1];
      path = dir.path;
      if (!(await inp.fill(1))) throw fail("truncated", "input ends where a message should start");
      const tag = inp.byte(0);
      if (tag > lastTag) throw fail("unknown-tag", `unknown message tag 0x${tag.toString(16).padStart(2, "0")}`);

      if (tag >= 5 && tag <= 9) {
        if (tag < rec.top || (tag == rec.top && tag != 8)) throw fail("record-order", `${RECORDS[tag - 5]} after ${RECORDS[rec.top - 5]}`);
        let len = 1;
        if (tag == 5) {
          await need((len = 3), "PERM");
          const m = inp.byte(1) | (inp.byte(2) << 8);
          if (m > 0o7777) throw fail("bad-mode", `PERM mode 0o${m.toString(8)} is above 0o7777`);
          rec.perm = m;
        } else if (tag == 6) {
          await need((len = 13), "TIME");
          const nsec = inp.u32(9);
          if (nsec >= 1e9) throw fail("bad-time", `TIME with ${nsec} nanoseconds`);
          const big = new DataView(inp.buf.buffer, inp.buf.byteOffset + inp.pos + 1, 8).getBigInt64(0, true);
          const sec = Number(big);
          rec.mtime = { sec: Number.isSafeInteger(sec) ? sec : big, nsec };
        } else if (tag == 7) {
          await need((len = 9), "OWNER");
          rec.owner = { uid: inp.u32(1), gid: inp.u32(5) };
        } else if (tag == 8) {
          await need(2, "XATTR");
          const n = inp.byte(1);
          await need(2 + n, "XATTR");
          const name = inp.slice(2, 2 + n);
          const xs = (rec.xattrs ??= []);
          if (xs.length && compare(xs[xs.length - 1].nameBytes, name) >= 0) throw fail("record-order", "XATTR names not in ascending order");
          if (!n || name.includes(0)) throw fail("bad-xattr", "XATTR name is empty or contains NUL");
          await need(6 + n, "XATTR");
          const size = inp.u32(2 + n);
          len = 6 + n + size;
          if (size > 65536 || rec.xattrBytes + len > 262144) throw fail("xattr-too-large", "XATTR value above 65,536 bytes or the entry's XATTRs above 262,144 bytes");
          await need(len, "XATTR");
          rec.xattrBytes += len;
          xs.push({ name: utf8.decode(name), nameBytes: name, value: inp.slice(6 + n, len) });
        }
        rec.seen |= 1 << tag;
        rec.top = tag;
        inp.pos += len;
        continue;
      }
      if (rec.seen && (tag == 0 || tag == 3)) throw fail("dangling-perm", "records are not followed by an entry");
      const misplaced = rec.seen & ~ALLOWED[tag];
      if (misplaced) throw fail("misplaced-record", `${RECORDS[31 - Math.clz32(misplaced & -misplaced) - 5]} record on an entry that may not carry it`);

      if (tag == 0) {
        await need(9, "the END message");
        if (dirs.length > 1) throw fail("end-inside-dir", "END while a directory is open");
        const n = inp.u64(1);
        if (n != count) throw fail("count-mismatch", `END says ${n} entries, the archive has ${count}`);
        inp.pos += 9;
        if (await inp.fill(1)) throw fail("trailing-bytes", "bytes after the END message", inp.offset);
        return;
      }
      if (tag == 3) {
        if (dirs.length == 1) throw fail("pop-at-root", "POP at the archive root");
        dirs.pop();
        inp.pos++;
        continue;
      }

      // An entry: DIR (2), FILE (1), FILE64 (4), SYMLINK (10), HARDLINK (11), SPECIAL (12).
      // Look for the NUL among the next 256 bytes, reading no more input than needed.
      let scan: number;
      let len: number;
      while (
        (len = inp.buf.subarray(inp.pos + 1, inp.pos + 1 + (scan = Math.min(inp.avail - 1, 256))).indexOf(0)) < 0 &&
        scan < 256 &&
        (await inp.more())
      );
      if (len == 0) throw fail("empty-name", "empty name");
      if (len < 0) throw scan == 256 ? fail("name-too-long", "name longer than 255 bytes") : fail("truncated", "input ends inside a name");
      const name = inp.slice(1, 1 + len);
      path = join(dir.path, name);
      if (name.includes(47)) throw fail("slash-in-name", "name contains '/'");
      if (len < 3 && name.every((c) => c == 46)) throw fail("dot-name", "name is '.' or '..'");
      let head = len + 2;
      let size = 0;
      /** what maxSpace charges besides XATTRs: a file's size or a symlink's target */
      let content = 0;
      let fields: object = {};
      if (tag == 1 || tag == 4) {
        const width = tag == 1 ? 4 : 8;
        await need(head + width, "a file size");
        size = tag == 1 ? inp.u32(head) : inp.u64(head);
        if (tag == 4 && size < TWO32) throw fail("noncanonical-file64", `FILE64 used for ${size} bytes (below 2^32)`);
        head += width;
      } else if (tag == 10) {
        await need(head + 2, "a symlink");
        const n = inp.byte(head) | (inp.byte(head + 1) << 8);
        if (!n || n > 4095) throw fail("bad-symlink", `symlink target of ${n} bytes (1 to 4095 allowed)`);
        await need(head + 2 + n, "a symlink target");
        const target = inp.slice(head + 2, head + 2 + n);
        if (target.includes(0)) throw fail("bad-symlink", "symlink target contains NUL");
        fields = { target: utf8.decode(target), targetBytes: target };
        content = n;
        head += 2 + n;
      } else if (tag == 11) {
        await need(head + 8, "a hard link");
        const i = inp.u64(head);
        const to = linked.get(i);
        if (!to) throw fail("bad-link", `hard link to entry ${i}, which is not an earlier linked regular file`);
        fields = { linkIndex: i, linkPath: utf8.decode(to), linkPathBytes: to };
        head += 8;
      } else if (tag == 12) {
        await need(head + 9, "a special file");
        const type = inp.byte(head), major = inp.u32(head + 1), minor = inp.u32(head + 5);
        if (type < 1 || type > 3 || (type == 1 && major + minor)) throw fail("bad-special", `special file of type ${type} (${major}, ${minor})`);
        fields = { kind: SPECIALS[type - 1], ...(type > 1 && { device: { major, minor } }) };
        head += 9;
      }
      const key = String.fromCharCode(...name);
      if (dir.names.has(key)) throw fail("duplicate-name", "name already used in this directory");
      if (tag == 2 && dirs.length > maxDepth) throw fail("too-deep", `directories nested deeper than ${maxDepth}`);
      if (count >= maxEntries) throw fail("too-many-entries", `more than ${maxEntries} entries`);
      if (total + size > maxBytes) throw fail("too-many-bytes", `more than ${maxBytes} bytes of file content`);
      const charged = taken + space(size + content, rec.xattrBytes);
      if (charged > maxSpace) throw fail("too-much-space", `more than ${maxSpace} bytes of disk space`);
      dir.names.add(key);
      const index = count++;
      total += size;
      taken = charged;
      inp.pos += head;

      let left = size;
      let live = true;
      async function* data(): AsyncGenerator<Uint8Array> {
        if (!live) throw new Error(`the content of ${show(path)} is no longer available: the iteration moved on`);
        while (left > 0) {
          if (!inp.avail && !(await inp.more())) throw fail("truncated", `input ends inside the content (${left} of ${size} bytes missing)`);
          const n = Math.min(inp.avail, left);
          inp.pos += n;
          left -= n;
          yield inp.buf.subarray(inp.pos - n, inp.pos);
        }
      }
      const { perm, mtime, owner, xattrs, seen } = rec;
      const entry = {
        kind: tag == 2 ? "dir" : tag == 10 ? "symlink" : tag == 11 ? "hardlink" : "file",
        path: utf8.decode(path),
        pathBytes: path,
        index,
        offset: at,
        size,
        ...(tag < 10 || tag == 12 ? { mode: perm ?? (tag == 2 ? 0o755 : 0o644) } : {}),
        ...(perm != null && { perm }),
        ...(mtime && { mtime, mtimeMs: Number(mtime.sec) * 1000 + Math.floor(mtime.nsec / 1e6) }),
        ...(owner && { owner }),
        ...(xattrs && { xattrs }),
        ...(seen & (1 << 9) ? { linked: true } : {}),
        ...fields,
        chunks: data,
        async bytes() {
          // Grown (doubling, up to size) as the content arrives: a size the input does not
          // hold ends as truncated, never as an allocation of that size.
          let out = new Uint8Array(0);
          let o = 0;
          for await (const c of data()) {
            if (o + c.length > out.length) {
              const grown = new Uint8Array(Math.min(size, Math.max(2 * out.length, o + c.length)));
              grown.set(out.subarray(0, o));
              out = grown;
            }
            out.set(c, o), (o += c.length);
          }
          return out;
        },
      } as DecodedEntry;
      if (seen & (1 << 9)) linked.set(index, path);
      rec = noRecords();
      if (tag == 2) dirs.push({ path, names: new Set() });
      yield entry;
      for await (const _ of data());
      live = false;
    }
  } finally {
    inp.close();
  }
}
