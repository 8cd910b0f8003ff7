/**
 * The barge decoder: streams entries out of an archive (format version 1 or 2),
 * applying exactly the checks of docs/FORMAT.md in their order, with the same
 * error codes and offsets as the Rust decoder. Version 2's zstd segments are
 * not read (`unsupported-codec`): the package has no zstd decompressor.
 */
import { BargeError } from "./error.js";
import { ExpectedIndex, KINDS } from "./index2.js";
import { archiveChunks } from "./source.js";
import type { DataSource, Owner, Timestamp } from "./types.js";
import { Xxh3 } from "./xxh3.js";

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
  /**
   * Version 2: called with the metadata of the archive's root directory (its ROOT record),
   * before the first entry. A lander applies it only to a destination it creates.
   */
  onRoot?: (root: DecodedRoot) => void;
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

/** A decoded owner: numeric ids and (version 2, when recorded) the user and group names. */
export interface DecodedOwner extends Owner {
  /** The user name as text (invalid UTF-8 shown as U+FFFD); `userBytes` is exact. */
  user?: string;
  userBytes?: Uint8Array;
  group?: string;
  groupBytes?: Uint8Array;
}

/** The metadata of a version 2 archive's root directory (its ROOT record). */
export interface DecodedRoot {
  /** The mode (12 bits): PERM, or 0o755. */
  mode: number;
  perm?: number;
  mtime?: Timestamp;
  mtimeMs?: number;
  owner?: DecodedOwner;
  xattrs?: Xattr[];
  /** Byte offset of the ROOT message. */
  offset: number;
}

/** A run of a file's data: `length` bytes at byte `at` of the file; the bytes between extents are holes (zeros). */
export interface DecodedExtent {
  at: number;
  length: number;
  /** The data, in chunks (usable until the next extent or entry is reached). */
  chunks(): AsyncIterable<Uint8Array>;
  bytes(): Promise<Uint8Array>;
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
  /** Owner, if recorded: ids, and in version 2 the names they had. */
  owner?: DecodedOwner;
  /** Extended attributes, if recorded, ascending by name. */
  xattrs?: Xattr[];
  /**
   * The file content, in chunks, holes (of sparse files) as zeros. Usable until the
   * iteration moves to the next entry (content not consumed by then is skipped). Empty
   * for all but files.
   */
  chunks(): AsyncIterable<Uint8Array>;
  /** The whole file content (same lifetime rule as `chunks`). */
  bytes(): Promise<Uint8Array>;
  /**
   * The file's data as extents, holes left out (a file without holes is one extent, an
   * empty one none): what a lander writes to keep a sparse file sparse. Same lifetime
   * rule as `chunks`, which reads the same data; use one or the other.
   */
  extents(): AsyncIterable<DecodedExtent>;
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
  /** Version 2 EXTFILE (a sparse or large file): how many extents hold its data. */
  extentCount?: number;
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
/** A version 2 body's tags: 0x01-0x03, 0x05-0x0E, START (0x10) and ROOT (0x11). */
const V2_TAGS = 0b110111111111101110;
const utf8 = new TextDecoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const RECORDS = ["PERM", "TIME", "OWNER", "XATTR", "LINKED"];
/** Record tags (as bits 1 << tag) each entry tag may carry. */
const DIR_RECORDS = 0b111100000;
const FILE_RECORDS = 0b1111100000;
const ALLOWED: Record<number, number> = { 1: FILE_RECORDS, 2: DIR_RECORDS, 4: FILE_RECORDS, 10: 0b111000000, 11: 0, 12: DIR_RECORDS, 13: FILE_RECORDS, 17: DIR_RECORDS };
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
  /** absolute offset where the input ends for the decoder (version 2: the end of the segment body) */
  limit = Infinity;
  /** version 2: the digest of the body's skeleton, fed what `take` consumes */
  skel?: Xxh3;
  private eof = false;
  constructor(private it: AsyncGenerator<Uint8Array>) {}

  get offset(): number {
    return this.base + this.pos;
  }
  /** Bytes buffered, up to the limit. */
  get avail(): number {
    return Math.min(this.buf.length - this.pos, this.limit - this.offset);
  }
  /**
   * Buffers at least n bytes if the input has them; returns whether it did.
   * Chunks are joined once per call; a chunk that arrives alone is used as it
   * is, so file content passes through without a copy.
   */
  async fill(n: number): Promise<boolean> {
    if (this.avail >= n) return true;
    if (this.offset + n > this.limit) return false;
    let have = this.buf.length - this.pos;
    const parts = have ? [this.buf.subarray(this.pos)] : [];
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
    return this.avail >= n;
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
  /** A u64 exactly. */
  big(i: number): bigint {
    return BigInt(this.u32(i)) | (BigInt(this.u32(i + 4)) << 32n);
  }
  /** Consumes n buffered bytes (of the skeleton: not file data). */
  take(n: number): void {
    this.skel?.update(this.buf.subarray(this.pos, this.pos + n));
    this.pos += n;
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
  owner?: DecodedOwner;
  xattrs?: Xattr[];
  /** bytes of the XATTR records so far, tags included */
  xattrBytes: number;
}

const noRecords = (): Records => ({ seen: 0, top: 0, xattrBytes: 0 });

/** The metadata fields of an entry (or the root) from its records; `dir` for the default mode. */
function metadata({ perm, mtime, owner, xattrs }: Records, mode?: number) {
  return {
    ...(mode != null && { mode: perm ?? mode }),
    ...(perm != null && { perm }),
    ...(mtime && { mtime, mtimeMs: Number(mtime.sec) * 1000 + Math.floor(mtime.nsec / 1e6) }),
    ...(owner && { owner }),
    ...(xattrs && { xattrs }),
  };
}

/** What the decoding loop produces: an entry, then for a file its extents and data, then the end of its content. */
type Token =
  | { t: "entry"; entry: Omit<DecodedEntry, "chunks" | "bytes" | "extents"> }
  | { t: "extent"; at: number; length: number }
  | { t: "data"; data: Uint8Array }
  | { t: "end" };

/** A directory open in the decoder: its name, path and the names used in it (v2: only the last). */
interface Dir {
  name: Uint8Array;
  path: Uint8Array;
  names: Set<string>;
  last?: string;
}

/** Version 2: the EXTFILE whose extents are still to come. */
interface OpenFile {
  index: number;
  path: Uint8Array;
  left: number;
  /** where the last extent ended, and the file's size */
  end: bigint;
  size: bigint;
}

const FOOTER = 37;
const FRAME_HEAD = 18;
const NO_FILE = (1n << 64n) - 1n;

/**
 * Decodes an archive into its entries, in archive order (parents before
 * children). Throws a BargeError with `.code` and `.offset` at the first
 * invalid byte; entries before it have already been delivered. Stopping the
 * iteration early cancels the input.
 */
export async function* unpack(input: ArchiveSource, options: UnpackOptions = {}): AsyncGenerator<DecodedEntry> {
  const tokens = decode(input, options);
  try {
    for (let r = await tokens.next(); !r.done; r = await tokens.next()) {
      const base = (r.value as Extract<Token, { t: "entry" }>).entry;
      let open = base.kind == "file";
      let live = true;
      /** The next token of this entry's content, or undefined at its end. */
      const next = async (): Promise<Exclude<Token, { t: "entry" | "end" }> | undefined> => {
        if (!live) throw new BargeError("stale-entry", `the content of ${show(base.pathBytes)} is no longer available: the iteration moved on`);
        const t = open ? ((await tokens.next()).value as Token) : undefined;
        if (t?.t == "end" || !t) return (open = false), undefined;
        return t as Exclude<Token, { t: "entry" | "end" }>;
      };
      let pos = 0;
      /** Zeros up to byte `to` of the file (holes), in chunks of at most 64 KiB. */
      function* zeros(to: number): Generator<Uint8Array> {
        for (let n; (n = Math.min(65536, to - pos)) > 0; pos += n) yield new Uint8Array(n);
      }
      async function* chunks(): AsyncGenerator<Uint8Array> {
        for (let t; (t = await next()); ) {
          if (t.t == "extent") yield* zeros(t.at);
          else yield t.data, (pos += t.data.length);
        }
        yield* zeros(base.size);
      }
      /** The current extent's bytes still to come. */
      let left = 0;
      async function* data(): AsyncGenerator<Uint8Array> {
        for (let t; left > 0 && (t = await next()); ) if (t.t == "data") (left -= t.data.length), yield t.data;
      }
      async function* extents(): AsyncGenerator<DecodedExtent> {
        for (let t; (t = await next()); ) {
          if (t.t != "extent") continue;
          left = t.length;
          yield { at: t.at, length: t.length, chunks: data, bytes: () => gather(data(), t.length) };
          for await (const _ of data());
        }
      }
      yield { ...base, chunks, bytes: () => gather(chunks(), base.size), extents } as DecodedEntry;
      while (await next());
      live = false;
    }
  } finally {
    await tokens.return(undefined);
  }
}

/**
 * The bytes of chunks, of at most `size` in all. Grown (doubling, up to size) as the
 * content arrives: a size the input does not hold ends as truncated, never as an
 * allocation of that size.
 */
async function gather(chunks: AsyncIterable<Uint8Array>, size: number): Promise<Uint8Array> {
  let out = new Uint8Array(0);
  let o = 0;
  for await (const c of chunks) {
    if (o + c.length > out.length) {
      const grown = new Uint8Array(Math.min(size, Math.max(2 * out.length, o + c.length)));
      grown.set(out.subarray(0, o));
      out = grown;
    }
    out.set(c, o), (o += c.length);
  }
  return out;
}

/** The decoding loop: tokens in archive order, every check of docs/FORMAT.md in its order. */
async function* decode(input: ArchiveSource, options: UnpackOptions): AsyncGenerator<Token> {
  const { maxDepth = 1024, maxEntries = Infinity, maxBytes = Infinity, maxSpace = Infinity, onRoot } = options;
  const inp = new Input(archiveChunks(input, "unpack"));
  const empty: Uint8Array = new Uint8Array();
  /** open directories, root first */
  const dirs: Dir[] = [{ name: empty, path: empty, names: new Set() }];
  /** the paths of the LINKED files, by entry number */
  const linked = new Map<number, Uint8Array>();
  let count = 0;
  let total = 0;
  let taken = 0;
  let rec = noRecords();
  let at = 0;
  let path = empty;
  // Version 2 only:
  let v2 = false;
  let lastTag = 5;
  let segments = 0;
  /** where the current body starts, and where the current group starts */
  let bodyAt = 0;
  let groupAt = 0;
  /** ROOT may come: no group yet in the first segment */
  let rootAllowed = true;
  let file: OpenFile | undefined;
  /** the index the entries call for */
  const expected = new ExpectedIndex();

  const fail = (code: string, what: string, offset = at) =>
    new BargeError(code, `${code} at offset ${offset}${path.length ? ` in ${show(path)}` : ""}: ${what}`, offset);
  /** Buffers n bytes of the current message or fails as truncated. */
  const need = async (n: number, what: string) => {
    if (!(await inp.fill(n))) throw fail("truncated", `input ends inside ${what}`);
  };
  /**
   * The length of the name (NUL-terminated) at byte i of the message, reading no more input
   * than needed: -1 without a NUL among 256 bytes, -2 when the input ends before either.
   */
  const scanName = async (i: number) => {
    let scan: number;
    let len: number;
    while (
      (len = inp.buf.subarray(inp.pos + i, inp.pos + i + (scan = Math.max(0, Math.min(inp.avail - i, 256)))).indexOf(0)) < 0 &&
      scan < 256 &&
      (await inp.more())
    );
    return len >= 0 ? len : scan == 256 ? -1 : -2;
  };
  /** Checks the digest after data whose digest `h` has (version 2), at the FILE or EXTENT. */
  const digest = async (h: Xxh3, what: string) => {
    await need(8, `the digest of ${what}`);
    if (h.digest() != inp.big(0)) throw fail("bad-digest", `the ${what}'s data differs from its digest`);
    inp.take(8);
  };
  /** Data of `len` bytes (and, with `h`, its digest, checked before the last chunk is given). */
  async function* data(len: number, h?: Xxh3, what = "file"): AsyncGenerator<Token> {
    for (let left = len; left > 0; ) {
      if (!inp.avail && !(await inp.more())) throw fail("truncated", `input ends inside the content (${left} of ${len} bytes missing)`);
      const n = Math.min(inp.avail, left);
      const chunk = inp.buf.subarray(inp.pos, inp.pos + n);
      inp.pos += n;
      left -= n;
      h?.update(chunk);
      if (h && !left) await digest(h, what);
      yield { t: "data", data: chunk };
    }
  }

  try {
    await inp.fill(8);
    for (let i = 0; i < 6 && i < inp.avail; i++) if (inp.byte(i) != MAGIC[i]) throw fail("bad-magic", "not a barge archive");
    if (inp.avail < 8) throw fail("truncated", "input ends inside the header");
    const version = inp.byte(6);
    const flags = inp.byte(7);
    if (version != 1 && version != 2) throw fail("bad-version", `unsupported format version ${version}`);
    // Flags: 0 or 1 in version 1 (1: extended records), 0 in version 2.
    if (flags > 2 - version) throw fail("bad-flags", `unsupported header flags 0x${flags.toString(16)}`);
    lastTag = flags ? 12 : 5;
    inp.take(8);
    if (version == 1) return yield* messages();
    v2 = true;
    yield* frames();
  } finally {
    inp.close();
  }

  /** Version 2: the frames (segments, the index) and the footer. */
  async function* frames(): AsyncGenerator<Token> {
    let indexAt = -1;
    for (;;) {
      at = inp.offset;
      path = dirs[dirs.length - 1].path;
      if (!(await inp.fill(1))) throw fail("truncated", `input ends where ${indexAt < 0 ? "a frame" : "the footer"} should start`);
      const tag = inp.byte(0);
      if (indexAt >= 0) {
        if (tag) throw fail("unknown-tag", `tag 0x${tag.toString(16)} where the footer should be`);
        return footer(indexAt);
      }
      if (tag != 0x20 && tag != 0x21) throw fail("unknown-tag", `frame tag 0x${tag.toString(16).padStart(2, "0")}`);
      await need(FRAME_HEAD, "a frame head");
      const codec = inp.byte(1), stored = inp.u32(2), body = inp.u32(6), stated = inp.big(10);
      if (!(codec ? codec == 1 && stored < body : stored == body) || !body || body > 2 ** 26)
        throw fail("bad-frame", `frame of codec ${codec}, ${stored} bytes stored for a body of ${body}`);
      if (tag == 0x21) {
        if (dirs.length > 1) throw fail("end-inside-dir", "the segments end while a directory is open");
        if (file) throw (path = file.path), fail("bad-extent", `the index comes before the last ${file.left} extents of the file`);
        if (body < 12) throw fail("bad-index", "index body too short for its counts");
      }
      if (codec) throw fail("unsupported-codec", "a zstd frame: this decoder has no zstd (decompress the archive with barge)");
      inp.take(FRAME_HEAD);
      if (tag == 0x21) {
        indexAt = at;
        await checkIndex(body, stated);
        continue;
      }
      expected.segment(at, stored, body, count, stated);
      segments++;
      inp.limit = (bodyAt = inp.offset) + body;
      inp.skel = new Xxh3();
      await start();
      yield* messages();
      const skeleton = inp.skel.digest();
      inp.skel = undefined;
      inp.limit = Infinity;
      rootAllowed = false;
      if (skeleton != stated) throw fail("bad-digest", "the segment's digest differs from its skeleton", bodyAt - FRAME_HEAD);
    }
  }

  /** Version 2: checks the START that begins a segment body against where the stream is. */
  async function start(): Promise<void> {
    at = inp.offset;
    const bad = (what: string) => fail("bad-start", what);
    if (!(await inp.fill(1))) throw fail("truncated", "the segment body ends before its START");
    if (inp.byte(0) != 0x10) throw bad("a segment body does not begin with START");
    await need(19, "START");
    const open = file ? BigInt(file.index) : NO_FILE;
    if (inp.big(1) != BigInt(count) || inp.big(9) != open || (inp.byte(17) | (inp.byte(18) << 8)) != dirs.length - 1)
      throw bad(`START does not restate entry ${count}, depth ${dirs.length - 1}${file ? `, file ${file.index} open` : ""}`);
    let len = 19;
    for (const d of dirs.slice(1)) {
      const n = await scanName(len);
      if (n == -2) throw fail("truncated", "input ends inside START");
      if (n != d.name.length || d.name.some((c, i) => c != inp.byte(len + i))) throw bad(`START names another directory than ${show(d.path)}`);
      len += n + 1;
    }
    inp.take(len);
  }

  /** Version 2: reads the index body and checks it against the entries' rows. */
  async function checkIndex(body: number, stated: bigint): Promise<void> {
    await need(12, "the index");
    const restarts = 4 * Math.ceil(count / 16);
    const ends = [12 + 32 * segments, body - restarts, body];
    if (inp.u32(0) != segments || inp.u64(4) != count || ends[0] + restarts > body)
      throw fail("bad-index", `the index counts ${inp.u32(0)} segments and ${inp.u64(4)} entries, the archive ${segments} and ${count}`);
    const whole = new Xxh3().update(inp.buf.subarray(inp.pos, inp.pos + 12));
    const parts = [new Xxh3(), new Xxh3(), new Xxh3()];
    inp.pos += 12;
    for (let pos = 12; pos < body; ) {
      if (!inp.avail && !(await inp.more())) throw fail("truncated", "input ends inside the index");
      const s = pos < ends[0] ? 0 : pos < ends[1] ? 1 : 2;
      const n = Math.min(inp.avail, ends[s] - pos);
      const chunk = inp.buf.subarray(inp.pos, inp.pos + n);
      whole.update(chunk);
      parts[s].update(chunk);
      inp.pos += n;
      pos += n;
    }
    if (whole.digest() != stated) throw fail("bad-digest", "the index differs from its digest");
    if (parts.some((p, i) => p.digest() != expected.digests[i].digest()) || ends[1] - ends[0] != expected.rowsLen)
      throw fail("bad-index", "the index differs from the segments' entries");
  }

  /** Version 2: the footer after the index at `indexAt`, and nothing after it. */
  async function footer(indexAt: number): Promise<void> {
    await need(FOOTER, "the footer");
    if (new Xxh3().update(inp.buf.subarray(inp.pos, inp.pos + 21)).digest() != inp.big(21)) throw fail("bad-digest", "the footer differs from its digest");
    const magic = [...MAGIC, 2, 0].every((b, i) => inp.byte(29 + i) == b);
    if (!magic || inp.u64(1) != count || inp.u32(9) != segments || inp.u64(13) != indexAt)
      throw fail("bad-footer", `the footer says ${inp.u64(1)} entries, ${inp.u32(9)} segments, the index at ${inp.u64(13)}`);
    inp.take(FOOTER);
    if (await inp.fill(1)) throw fail("trailing-bytes", "bytes after the footer", inp.offset);
  }

  /** The messages of a version 1 archive up to its END, or of a version 2 segment body. */
  async function* messages(): AsyncGenerator<Token> {
    for (;;) {
      at = inp.offset;
      if (!rec.seen) groupAt = at;
      const dir = dirs[dirs.length - 1];
      path = dir.path;
      if (at == inp.limit) {
        if (rec.seen) throw fail("truncated", "the segment body ends after a record");
        return;
      }
      if (!(await inp.fill(1))) throw fail("truncated", "input ends where a message should start");
      const tag = inp.byte(0);
      if (v2 ? !((V2_TAGS >> tag) & 1) : tag > lastTag) throw fail("unknown-tag", `unknown message tag 0x${tag.toString(16).padStart(2, "0")}`);
      if (file && tag != 14) throw (path = file.path), fail("bad-extent", `an EXTENT of the file is due (${file.left} to come)`);

      if (tag >= 5 && tag <= 9) {
        await record(tag);
        continue;
      }
      if (rec.seen && (tag == 0 || tag == 3 || tag == 14 || tag == 16)) throw fail("dangling-perm", "records are not followed by an entry");
      const misplaced = rec.seen & ~ALLOWED[tag];
      if (misplaced) throw fail("misplaced-record", `${RECORDS[31 - Math.clz32(misplaced & -misplaced) - 5]} record on an entry that may not carry it`);

      if (tag == 0) {
        await need(9, "the END message");
        if (dirs.length > 1) throw fail("end-inside-dir", "END while a directory is open");
        const n = inp.u64(1);
        if (n != count) throw fail("count-mismatch", `END says ${n} entries, the archive has ${count}`);
        inp.take(9);
        if (await inp.fill(1)) throw fail("trailing-bytes", "bytes after the END message", inp.offset);
        return;
      }
      if (tag == 3) {
        if (dirs.length == 1) throw fail("pop-at-root", "POP at the archive root");
        dirs.pop();
        inp.take(1);
        continue;
      }
      if (tag == 16) throw fail("bad-start", "START inside a segment body");
      if (tag == 17) {
        if (!rootAllowed) throw fail("misplaced-root", "ROOT is not the first group of the first segment");
        onRoot?.({ ...metadata(rec, 0o755), offset: at } as DecodedRoot);
        rec = noRecords();
        inp.take(1);
        rootAllowed = false;
        continue;
      }
      if (tag == 14) {
        yield* extent();
        continue;
      }
      yield* entry(tag, dir);
    }
  }

  /** A record (PERM, TIME, OWNER, XATTR, LINKED) for the next entry. */
  async function record(tag: number): Promise<void> {
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
      const big = BigInt.asIntN(64, inp.big(1));
      const sec = Number(big);
      rec.mtime = { sec: Number.isSafeInteger(sec) ? sec : big, nsec };
    } else if (tag == 7) {
      await need((len = 9), "OWNER");
      const owner: DecodedOwner = (rec.owner = { uid: inp.u32(1), gid: inp.u32(5) });
      // Version 2: the user and group names, 0..255 bytes each.
      for (const key of v2 ? (["user", "group"] as const) : []) {
        await need(len + 1, "OWNER");
        const n = inp.byte(len);
        await need((len += 1 + n), "OWNER");
        if (n) (owner[`${key}Bytes`] = inp.slice(len - n, len)), (owner[key] = utf8.decode(owner[`${key}Bytes`]));
      }
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
    inp.take(len);
  }

  /** Version 2: the next EXTENT of the open EXTFILE, its data and digest. */
  async function* extent(): AsyncGenerator<Token> {
    if (!file) throw fail("bad-extent", "an EXTENT with no EXTFILE open");
    path = file.path;
    await need(13, "EXTENT");
    const from = inp.big(1), len = inp.u32(9);
    if (!len || from < file.end || from + BigInt(len) > file.size)
      throw fail("bad-extent", `extent of ${len} bytes at ${from}: empty, before the previous one's end (${file.end}) or past the file's ${file.size} bytes`);
    if (total + len > maxBytes) throw fail("too-many-bytes", `more than ${maxBytes} bytes of file content`);
    const charged = taken + Math.ceil(len / 4096) * 4096;
    if (charged > maxSpace) throw fail("too-much-space", `more than ${maxSpace} bytes of disk space`);
    total += len;
    taken = charged;
    file.end = from + BigInt(len);
    inp.take(13);
    rootAllowed = false;
    yield { t: "extent", at: Number(from), length: len };
    yield* data(len, new Xxh3(), "extent");
    if (!--file.left) {
      file = undefined;
      yield { t: "end" };
    }
  }

  /** An entry: DIR (2), FILE (1), FILE64 (4), SYMLINK (10), HARDLINK (11), SPECIAL (12), EXTFILE (13). */
  async function* entry(tag: number, dir: Dir): AsyncGenerator<Token> {
    const len = await scanName(1);
    if (len == 0) throw fail("empty-name", "empty name");
    if (len == -1) throw fail("name-too-long", "name longer than 255 bytes");
    if (len < 0) throw fail("truncated", "input ends inside a name");
    const name = inp.slice(1, 1 + len);
    path = join(dir.path, name);
    if (name.includes(47)) throw fail("slash-in-name", "name contains '/'");
    if (len < 3 && name.every((c) => c == 46)) throw fail("dot-name", "name is '.' or '..'");
    let head = len + 2;
    let size = 0;
    /** what the index row says: a file's size, a symlink's length, a link's target */
    let rowSize: number | bigint = 0;
    /** what maxSpace charges besides XATTRs: a file's size or a symlink's target */
    let content = 0;
    let fields: object = {};
    if (tag == 1 || tag == 4) {
      const width = tag == 1 ? 4 : 8;
      await need(head + width, "a file size");
      size = rowSize = tag == 1 ? inp.u32(head) : inp.u64(head);
      if (tag == 4 && size < TWO32) throw fail("noncanonical-file64", `FILE64 used for ${size} bytes (below 2^32)`);
      head += width;
    } else if (tag == 13) {
      await need(head + 12, "an EXTFILE");
      rowSize = inp.big(head);
      fields = { size: Number(rowSize), extentCount: inp.u32(head + 8) };
      head += 12;
    } else if (tag == 10) {
      await need(head + 2, "a symlink");
      const n = inp.byte(head) | (inp.byte(head + 1) << 8);
      if (!n || n > 4095) throw fail("bad-symlink", `symlink target of ${n} bytes (1 to 4095 allowed)`);
      await need(head + 2 + n, "a symlink target");
      const target = inp.slice(head + 2, head + 2 + n);
      if (target.includes(0)) throw fail("bad-symlink", "symlink target contains NUL");
      fields = { target: utf8.decode(target), targetBytes: target };
      content = rowSize = n;
      head += 2 + n;
    } else if (tag == 11) {
      await need(head + 8, "a hard link");
      const i = inp.u64(head);
      const to = linked.get(i);
      if (!to) throw fail("bad-link", `hard link to entry ${i}, which is not an earlier linked regular file`);
      fields = { linkIndex: i, linkPath: utf8.decode(to), linkPathBytes: to };
      rowSize = i;
      head += 8;
    } else if (tag == 12) {
      await need(head + 9, "a special file");
      const type = inp.byte(head), major = inp.u32(head + 1), minor = inp.u32(head + 5);
      if (type < 1 || type > 3 || (type == 1 && major + minor)) throw fail("bad-special", `special file of type ${type} (${major}, ${minor})`);
      fields = { kind: SPECIALS[type - 1], ...(type > 1 && { device: { major, minor } }) };
      head += 9;
    }
    const key = String.fromCharCode(...name);
    if (v2 ? dir.last != null && key <= dir.last : dir.names.has(key))
      throw key == dir.last || !v2 ? fail("duplicate-name", "name already used in this directory") : fail("unsorted", "name below the previous one in this directory");
    if (tag == 2 && dirs.length > maxDepth) throw fail("too-deep", `directories nested deeper than ${maxDepth}`);
    if (count >= maxEntries) throw fail("too-many-entries", `more than ${maxEntries} entries`);
    if (total + size > maxBytes) throw fail("too-many-bytes", `more than ${maxBytes} bytes of file content`);
    const charged = taken + space(size + content, rec.xattrBytes);
    if (charged > maxSpace) throw fail("too-much-space", `more than ${maxSpace} bytes of disk space`);
    if (v2) dir.last = key;
    else dir.names.add(key);
    const index = count++;
    total += size;
    taken = charged;
    inp.take(head);
    const isLinked = !!(rec.seen & (1 << 9));
    const kind = tag == 2 ? "dir" : tag == 10 ? "symlink" : tag == 11 ? "hardlink" : "file";
    const special = (fields as { kind?: string }).kind;
    if (v2) {
      expected.row(path, KINDS[tag == 13 ? "extfile" : special ?? kind] | (isLinked ? 0x10 : 0), rowSize, segments - 1, groupAt - bodyAt);
      rootAllowed = false;
    }
    const base = {
      kind,
      path: utf8.decode(path),
      pathBytes: path,
      index,
      offset: at,
      size,
      ...metadata(rec, tag < 10 || tag >= 12 ? (tag == 2 ? 0o755 : 0o644) : undefined),
      ...(isLinked && { linked: true }),
      ...fields,
    } as Omit<DecodedFile, "chunks" | "bytes" | "extents">;
    if (isLinked) linked.set(index, path);
    rec = noRecords();
    if (tag == 2) dirs.push({ name, path, names: new Set() });
    const h = v2 ? new Xxh3() : undefined;
    // A version 2 empty FILE's digest is part of its group: checked before the entry is given.
    if (tag == 1 && h && !size) await digest(h, "file");
    yield { t: "entry", entry: base };
    if (tag == 13) {
      const n = (base as { extentCount: number }).extentCount;
      if (n) file = { index, path, left: n, end: 0n, size: rowSize as bigint };
      else yield { t: "end" };
    } else if (tag == 1 || tag == 4) {
      if (size) yield { t: "extent", at: 0, length: size }, yield* data(size, h);
      yield { t: "end" };
    }
  }
}
