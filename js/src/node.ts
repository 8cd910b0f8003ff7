/// <reference types="node" />
/**
 * Node-only entry (`barge-archive/node`): `fromPath` walks a directory tree;
 * `landWithBarge` lands an archive into a directory with the barge binary.
 */
import { createReadStream } from "node:fs";
import { lstat, readdir, readlink } from "node:fs/promises";
import type { BigIntStats } from "node:fs";
import type { Entry, Timestamp } from "./types.js";

export interface Warning {
  /** Path relative to the walked directory (bytes if not valid UTF-8). */
  path: string | Uint8Array;
  /** What was skipped: "socket", "block-device", "char-device" or "unknown". */
  kind: string;
  message: string;
}

export interface FromPathOptions {
  /** Called for each skipped entry. Default: print the message with console.warn. */
  onWarning?: (warning: Warning) => void;
}

const SLASH = Buffer.from("/");
const BILLION = 1_000_000_000n;

/** The bytes as a string if that round-trips exactly, else the bytes. */
function pathOf(bytes: Buffer): string | Uint8Array {
  const s = bytes.toString("utf8");
  return Buffer.from(s).equals(bytes) ? s : new Uint8Array(bytes);
}

/** A stat time in nanoseconds as whole seconds (rounded down, also before 1970) and nanoseconds. */
function timestamp(ns: bigint): Timestamp {
  let sec = ns / BILLION;
  let nsec = ns % BILLION;
  if (nsec < 0n) (sec -= 1n), (nsec += BILLION);
  const small = Number(sec);
  return { sec: Number.isSafeInteger(small) ? small : sec, nsec: Number(nsec) };
}

function kindOf(st: BigIntStats): string {
  if (st.isSocket()) return "socket";
  if (st.isBlockDevice()) return "block-device";
  if (st.isCharacterDevice()) return "char-device";
  return "unknown";
}

/**
 * Entries for everything under `dir` (not `dir` itself), as `barge pack`
 * records it by default: directories, regular files, symlinks (their target,
 * read with readlink: never followed), fifos, and the hard links among the
 * files (a file with more than one link is marked `linked`; its other paths
 * in the tree become `link` entries), each with its mode (12 bits) and its
 * modification time to the nanosecond. Sockets and devices are skipped with
 * a warning. File content is opened only when `pack` reaches it, and a file
 * whose size changed meanwhile makes `pack` fail.
 */
export async function* fromPath(dir: string | Uint8Array, options: FromPathOptions = {}): AsyncGenerator<Entry> {
  const warn = options.onWarning ?? ((w: Warning) => console.warn(w.message));
  const root = Buffer.from(dir);
  /** the first path seen of each file with more than one link, by device and inode */
  const seen = new Map<string, string | Uint8Array>();
  async function* walk(rel: Buffer | null): AsyncGenerator<Entry> {
    const abs = rel ? Buffer.concat([root, SLASH, rel]) : root;
    const names = await readdir(abs, { encoding: "buffer" });
    for (const name of names) {
      const childRel = rel ? Buffer.concat([rel, SLASH, name]) : name;
      const childAbs = Buffer.concat([abs, SLASH, name]);
      const st = await lstat(childAbs, { bigint: true });
      const path = pathOf(childRel);
      const meta = { mode: Number(st.mode & 0o7777n), mtime: timestamp(st.mtimeNs) };
      if (st.isDirectory()) {
        yield { path, dir: true, ...meta };
        yield* walk(childRel);
      } else if (st.isFile()) {
        const inode = `${st.dev}:${st.ino}`;
        const first = st.nlink > 1n ? seen.get(inode) : undefined;
        if (first !== undefined) yield { path, link: first };
        else {
          if (st.nlink > 1n) seen.set(inode, path);
          yield { path, ...meta, size: Number(st.size), stream: () => createReadStream(childAbs), ...(st.nlink > 1n && { linked: true }) };
        }
      } else if (st.isSymbolicLink()) {
        yield { path, symlink: new Uint8Array(await readlink(childAbs, { encoding: "buffer" })), mtime: meta.mtime };
      } else if (st.isFIFO()) {
        yield { path, special: "fifo", ...meta };
      } else {
        const kind = kindOf(st);
        warn({ path, kind, message: `barge: skipping ${kind} ${JSON.stringify(childRel.toString())}` });
      }
    }
  }
  yield* walk(null);
}
export { landWithBarge, LandError } from "./land.js";
export type { LandOptions, LandSummary } from "./land.js";
