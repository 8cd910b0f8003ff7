/**
 * The barge decoder: streams entries out of an archive, applying exactly the
 * checks of docs/FORMAT.md in their order, with the same error codes and
 * offsets as the Rust decoder.
 */
import { BargeError } from "./error.js";
import { read } from "./source.js";
import type { DataSource } from "./types.js";

export interface UnpackOptions {
  /** Deepest allowed directory nesting (root = 0, first DIR = 1). Default 1024. */
  maxDepth?: number;
  /** Most DIR+FILE+FILE64 entries allowed. Default: no limit. */
  maxEntries?: number;
  /** Most file content bytes allowed in total. Default: no limit. */
  maxBytes?: number;
}

/** Anything an archive can be read from. */
export type ArchiveSource = DataSource | Uint8Array | ArrayBuffer | Blob;

export interface DecodedEntry {
  kind: "dir" | "file";
  /** The path as text (invalid UTF-8 shown as U+FFFD); `pathBytes` is exact. */
  path: string;
  /** The exact path bytes, names joined by "/". */
  pathBytes: Uint8Array;
  /** Effective permission bits: PERM & 0o777, or 0o644 (files) / 0o755 (dirs). */
  mode: number;
  /** The raw PERM value, if the archive has one for this entry. */
  perm?: number;
  /** Content size in bytes (0 for dirs). */
  size: number;
  /** Byte offset of the entry's message in the archive. */
  offset: number;
  /**
   * The file content, in chunks. Usable until the iteration moves to the next
   * entry (content not consumed by then is skipped). Empty for dirs.
   */
  chunks(): AsyncIterable<Uint8Array>;
  /** The whole file content (same lifetime rule as `chunks`). */
  bytes(): Promise<Uint8Array>;
}

const MAGIC = [66, 65, 82, 71, 69, 0];
const TWO32 = 2 ** 32;
const utf8 = new TextDecoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** Quotes a path for a message, escaping non-UTF-8 bytes as \xNN. */
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
  /** Appends the next input chunk to the buffer; false at end of input. */
  async more(): Promise<boolean> {
    if (this.eof) return false;
    const r = await this.it.next();
    if (r.done) return !(this.eof = true);
    const c = r.value;
    let rest = this.buf.subarray(this.pos);
    if (rest.length) {
      const b = new Uint8Array(rest.length + c.length);
      b.set(rest);
      b.set(c, rest.length);
      rest = b;
    } else rest = c;
    this.base += this.pos;
    this.buf = rest;
    this.pos = 0;
    return true;
  }
  /** Buffers at least n bytes if the input has them; returns whether it did. */
  async fill(n: number): Promise<boolean> {
    while (this.avail < n) if (!(await this.more())) return false;
    return true;
  }
  byte(i: number): number {
    return this.buf[this.pos + i];
  }
  u32(i: number): number {
    const b = this.buf, p = this.pos + i;
    return (b[p] | (b[p + 1] << 8) | (b[p + 2] << 16)) + b[p + 3] * 2 ** 24;
  }
  close(): void {
    this.it.return(undefined).catch(() => {});
  }
}

/**
 * Decodes an archive into its entries, in archive order (parents before
 * children). Throws a BargeError with `.code` and `.offset` at the first
 * invalid byte; entries before it have already been delivered. Stopping the
 * iteration early cancels the input.
 */
export async function* unpack(input: ArchiveSource, options: UnpackOptions = {}): AsyncGenerator<DecodedEntry> {
  const { maxDepth = 1024, maxEntries = Infinity, maxBytes = Infinity } = options;
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
  let count = 0;
  let total = 0;
  let perm: number | undefined;
  let at = 0;
  let path = dirs[0].path;
  const fail = (code: string, what: string, offset = at) =>
    new BargeError(code, `${code} at offset ${offset}${path.length ? ` in ${show(path)}` : ""}: ${what}`, offset);

  try {
    await inp.fill(8);
    for (let i = 0; i < 6 && i < inp.avail; i++) if (inp.byte(i) != MAGIC[i]) throw fail("bad-magic", "not a barge archive");
    if (inp.avail < 8) throw fail("truncated", "input ends inside the header");
    if (inp.byte(6) != 1) throw fail("bad-version", `unsupported format version ${inp.byte(6)}`);
    if (inp.byte(7) != 0) throw fail("bad-flags", `unsupported header flags 0x${inp.byte(7).toString(16)}`);
    inp.pos += 8;

    for (;;) {
      at = inp.offset;
      const dir = dirs[dirs.length - 1];
      path = dir.path;
      if (!(await inp.fill(1))) throw fail("truncated", "input ends where a message should start");
      const tag = inp.byte(0);
      if (tag > 5) throw fail("unknown-tag", `unknown message tag 0x${tag.toString(16).padStart(2, "0")}`);
      if (perm != null && (tag == 0 || tag == 3 || tag == 5)) throw fail("dangling-perm", "PERM is not followed by DIR, FILE or FILE64");

      if (tag == 0) {
        if (!(await inp.fill(9))) throw fail("truncated", "input ends inside the END message");
        if (dirs.length > 1) throw fail("end-inside-dir", "END while a directory is open");
        const n = inp.u32(1) + inp.u32(5) * TWO32;
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
      if (tag == 5) {
        if (!(await inp.fill(3))) throw fail("truncated", "input ends inside PERM");
        const m = inp.byte(1) | (inp.byte(2) << 8);
        if (m > 0o7777) throw fail("bad-mode", `PERM mode 0o${m.toString(8)} is above 0o7777`);
        perm = m;
        inp.pos += 3;
        continue;
      }

      // DIR (2), FILE (1), FILE64 (4)
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
      const name = inp.buf.slice(inp.pos + 1, inp.pos + 1 + len);
      path = join(dir.path, name);
      if (name.includes(47)) throw fail("slash-in-name", "name contains '/'");
      if (len < 3 && name.every((c) => c == 46)) throw fail("dot-name", "name is '.' or '..'");
      let head = len + 2;
      let size = 0;
      if (tag != 2) {
        const width = tag == 1 ? 4 : 8;
        if (!(await inp.fill(head + width))) throw fail("truncated", "input ends inside a file size");
        size = inp.u32(head) + (tag == 4 ? inp.u32(head + 4) * TWO32 : 0);
        if (tag == 4 && size < TWO32) throw fail("noncanonical-file64", `FILE64 used for ${size} bytes (below 2^32)`);
        head += width;
      }
      const key = String.fromCharCode(...name);
      if (dir.names.has(key)) throw fail("duplicate-name", "name already used in this directory");
      if (tag == 2 && dirs.length > maxDepth) throw fail("too-deep", `directories nested deeper than ${maxDepth}`);
      if (count >= maxEntries) throw fail("too-many-entries", `more than ${maxEntries} entries`);
      if (total + size > maxBytes) throw fail("too-many-bytes", `more than ${maxBytes} bytes of file content`);
      dir.names.add(key);
      count++;
      total += size;
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
      const entry: DecodedEntry = {
        kind: tag == 2 ? "dir" : "file",
        path: utf8.decode(path),
        pathBytes: path,
        mode: perm == null ? (tag == 2 ? 0o755 : 0o644) : perm & 0o777,
        size,
        offset: at,
        chunks: data,
        async bytes() {
          const out = new Uint8Array(size);
          let o = 0;
          for await (const c of data()) out.set(c, o), (o += c.length);
          return out;
        },
      };
      if (perm != null) entry.perm = perm;
      perm = undefined;
      if (tag == 2) dirs.push({ path, names: new Set() });
      yield entry;
      for await (const _ of data());
      live = false;
    }
  } finally {
    inp.close();
  }
}
