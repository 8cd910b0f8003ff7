// Shared test helpers: vectors, stream collection, and on-disk trees.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync, chmodSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { unpack } from "../dist/index.js";

export const VECTORS = fileURLToPath(new URL("../../testdata/vectors/", import.meta.url));

/** Every vector of a kind ("valid" or "invalid"): { name, bytes, meta }. */
export function loadVectors(kind) {
  const dir = join(VECTORS, kind);
  const names = readdirSync(dir).filter((f) => f.endsWith(".barge")).map((f) => f.slice(0, -6)).sort();
  if (!names.length) throw new Error(`no vectors in ${dir}`);
  return names.map((name) => ({
    name,
    bytes: new Uint8Array(readFileSync(join(dir, `${name}.barge`))),
    meta: JSON.parse(readFileSync(join(dir, `${name}.json`), "utf8")),
  }));
}

export const hex = (bytes) => Buffer.from(bytes).toString("hex");
export const unhex = (s) => new Uint8Array(Buffer.from(s, "hex"));

/** Concatenates everything a ReadableStream (or async iterable) produces. */
export async function collect(stream) {
  const parts = [];
  for await (const c of stream) parts.push(c);
  return new Uint8Array(Buffer.concat(parts));
}

/** Decodes an archive fully into vector-style entries (data as hex). */
export async function decodeAll(input, options) {
  const out = [];
  for await (const e of unpack(input, options)) {
    const entry = { path_hex: hex(e.pathBytes), kind: e.kind, mode: e.mode };
    if (e.perm !== undefined) entry.perm = e.perm;
    if (e.kind === "file") entry.data_hex = hex(await e.bytes());
    out.push(entry);
  }
  return out;
}

/** A ReadableStream giving `bytes` in chunks of `size` bytes. */
export function chunked(bytes, size) {
  let pos = 0;
  return new ReadableStream({
    pull(ctl) {
      if (pos >= bytes.length) return ctl.close();
      ctl.enqueue(bytes.slice(pos, (pos += size)));
    },
  });
}

/** A small deterministic PRNG (mulberry32). */
export function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Writes a tree described as [{ path: string|Buffer, dir?, data?, mode? }] under root
 * (parents first). Paths may be Buffers for non-UTF-8 names.
 */
export function writeTree(root, spec) {
  mkdirSync(root, { recursive: true });
  for (const e of spec) {
    const p = Buffer.concat([Buffer.from(root + "/"), Buffer.from(e.path)]);
    if (e.dir) mkdirSync(p);
    else writeFileSync(p, e.data ?? "");
  }
  // Modes last (so restrictive dirs do not block their own children), and
  // always, so that the process umask does not matter.
  for (const e of [...spec].reverse()) {
    chmodSync(Buffer.concat([Buffer.from(root + "/"), Buffer.from(e.path)]), e.mode ?? (e.dir ? 0o755 : 0o644));
  }
}

/**
 * Reads a tree into a sorted list of { path_hex, kind, mode, sha } (symlinks and
 * other kinds are reported as such so that they fail comparisons).
 */
export function readTree(root) {
  const out = [];
  const walk = (abs, rel) => {
    for (const name of readdirSync(abs, { encoding: "buffer" })) {
      const a = Buffer.concat([abs, Buffer.from("/"), name]);
      const r = rel ? Buffer.concat([rel, Buffer.from("/"), name]) : name;
      const st = lstatSync(a);
      const entry = { path_hex: r.toString("hex"), kind: st.isDirectory() ? "dir" : st.isFile() ? "file" : "other", mode: st.mode & 0o7777 };
      if (st.isFile()) entry.sha = createHash("sha256").update(readFileSync(a)).digest("hex");
      out.push(entry);
      if (st.isDirectory()) walk(a, r);
    }
  };
  walk(Buffer.from(root), null);
  return out.sort((a, b) => (a.path_hex < b.path_hex ? -1 : 1));
}

/** The readTree() listing a spec should produce, with modes masked by umask. */
export function expectedTree(spec, umask = 0) {
  return spec
    .map((e) => {
      const entry = {
        path_hex: hex(Buffer.from(e.path)),
        kind: e.dir ? "dir" : "file",
        mode: (e.mode ?? (e.dir ? 0o755 : 0o644)) & 0o777 & ~umask,
      };
      if (!e.dir) entry.sha = createHash("sha256").update(e.data ?? "").digest("hex");
      return entry;
    })
    .sort((a, b) => (a.path_hex < b.path_hex ? -1 : 1));
}

/** Entries for `pack` from a tree spec (what fromPath would give, without the disk). */
export function specEntries(spec) {
  return spec.map((e) =>
    e.dir ? { path: new Uint8Array(Buffer.from(e.path)), dir: true, mode: e.mode } : { path: new Uint8Array(Buffer.from(e.path)), data: new Uint8Array(Buffer.from(e.data ?? "")), mode: e.mode },
  );
}

/**
 * A tree with the awkward cases: non-UTF-8, newline and control characters,
 * 255-byte names, multi-byte UTF-8, empty files and dirs, modes, and `files`
 * small files spread over nested directories.
 */
export function oddTree(files = 0) {
  const random = rng(42);
  const spec = [
    { path: "empty-dir", dir: true },
    { path: "empty-dir/nested-empty", dir: true },
    { path: "bin", dir: true },
    { path: "bin/run.sh", data: "#!/bin/sh\necho hi\n", mode: 0o755 },
    { path: "private", dir: true, mode: 0o700 },
    { path: "private/secret", data: "s3cret", mode: 0o600 },
    { path: Buffer.from([0xff, 0xfe, 0x41]), data: "not utf-8" },
    { path: Buffer.from("caf\xe9-latin1", "latin1"), dir: true },
    { path: Buffer.concat([Buffer.from("caf\xe9-latin1", "latin1"), Buffer.from("/x")]), data: "x" },
    { path: "line\nbreak\ttab\r\x01\x1b\x7f", data: "control" },
    { path: "n".repeat(255), data: "long name" },
    { path: "日".repeat(85), dir: true },
    { path: "日".repeat(85) + "/🦀.rs", data: "fn main() {}\n" },
    { path: " leading space", data: "" },
    { path: "-dash", data: "" },
    { path: ".hidden", data: "h" },
    { path: "...", data: "dots" },
    { path: "empty-file", data: "" },
    { path: "binary.bin", data: Buffer.from(Array.from({ length: 200000 }, (_, i) => (i * 7919) & 255)) },
  ];
  if (files) {
    spec.push({ path: "many", dir: true });
    const dirs = 100;
    for (let d = 0; d < dirs; d++) spec.push({ path: `many/d${d}`, dir: true });
    for (let i = 0; i < files; i++) {
      const size = Math.floor(random() * 64);
      spec.push({ path: `many/d${i % dirs}/f${i}`, data: Buffer.from(Array.from({ length: size }, () => Math.floor(random() * 256))) });
    }
  }
  return spec;
}

/**
 * Runs a command; resolves { code, stdout (Buffer), stderr (string) }. `input`
 * may be a Buffer or a ReadableStream piped to stdin. The process gets umask 022.
 */
export function run(cmd, args, { input, timeout = 120000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/sh", ["-c", 'umask 022 && exec "$0" "$@"', cmd, ...args], { stdio: ["pipe", "pipe", "pipe"] });
    const out = [];
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeout);
    child.stdout.on("data", (c) => out.push(c));
    child.stderr.on("data", (c) => (err += c));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code: signal ? `signal ${signal}` : code, stdout: Buffer.concat(out), stderr: err });
    });
    child.stdin.on("error", () => {}); // the child may exit before reading everything
    if (input instanceof ReadableStream) {
      (async () => {
        try {
          for await (const c of input) if (!child.stdin.write(c)) await new Promise((r) => child.stdin.once("drain", r));
        } finally {
          child.stdin.end();
        }
      })().catch(reject);
    } else child.stdin.end(input ?? undefined);
  });
}
