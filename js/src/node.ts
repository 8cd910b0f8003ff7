/// <reference types="node" />
/**
 * Node-only entry source (`barge-archive/node`): walks a directory tree.
 */
import { createReadStream } from "node:fs";
import { lstat, readdir } from "node:fs/promises";
import type { DirEntry, FileEntry } from "./types.js";

export interface Warning {
  /** Path relative to the walked directory (bytes if not valid UTF-8). */
  path: string | Uint8Array;
  /** What was skipped: "symlink", "fifo", "socket", "block-device", "char-device" or "unknown". */
  kind: string;
  message: string;
}

export interface FromPathOptions {
  /** Called for each skipped entry. Default: print the message with console.warn. */
  onWarning?: (warning: Warning) => void;
}

const SLASH = Buffer.from("/");

/** The bytes as a string if that round-trips exactly, else the bytes. */
function pathOf(bytes: Buffer): string | Uint8Array {
  const s = bytes.toString("utf8");
  return Buffer.from(s).equals(bytes) ? s : new Uint8Array(bytes);
}

function kindOf(st: { isSymbolicLink(): boolean; isFIFO(): boolean; isSocket(): boolean; isBlockDevice(): boolean; isCharacterDevice(): boolean }): string {
  if (st.isSymbolicLink()) return "symlink";
  if (st.isFIFO()) return "fifo";
  if (st.isSocket()) return "socket";
  if (st.isBlockDevice()) return "block-device";
  if (st.isCharacterDevice()) return "char-device";
  return "unknown";
}

/**
 * Entries for the regular files and directories under `dir` (not `dir`
 * itself), with their permission bits; symlinks are not followed. Other kinds
 * are skipped with a warning. File content is opened only when `pack` reaches
 * it, and a file whose size changed meanwhile makes `pack` fail.
 */
export async function* fromPath(dir: string | Uint8Array, options: FromPathOptions = {}): AsyncGenerator<FileEntry | DirEntry> {
  const warn = options.onWarning ?? ((w: Warning) => console.warn(w.message));
  const root = Buffer.from(dir);
  async function* walk(rel: Buffer | null): AsyncGenerator<FileEntry | DirEntry> {
    const abs = rel ? Buffer.concat([root, SLASH, rel]) : root;
    const names = await readdir(abs, { encoding: "buffer" });
    for (const name of names) {
      const childRel = rel ? Buffer.concat([rel, SLASH, name]) : name;
      const childAbs = Buffer.concat([abs, SLASH, name]);
      const st = await lstat(childAbs);
      const path = pathOf(childRel);
      const mode = st.mode & 0o777;
      if (st.isDirectory()) {
        yield { path, dir: true, mode };
        yield* walk(childRel);
      } else if (st.isFile()) {
        yield { path, mode, size: st.size, stream: () => createReadStream(childAbs) };
      } else {
        const kind = kindOf(st);
        warn({ path, kind, message: `barge: skipping ${kind} ${JSON.stringify(childRel.toString())}` });
      }
    }
  }
  yield* walk(null);
}
