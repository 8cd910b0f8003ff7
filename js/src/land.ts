/// <reference types="node" />
/**
 * Node-only: landing an archive into a directory with the `barge` binary
 * (`barge unpack - DIR`), which confines, limits and checks what it writes.
 */
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { pipeline } from "node:stream/promises";
import { argumentError, BargeError } from "./error.js";
import { archiveChunks } from "./source.js";
import type { ArchiveSource } from "./unpack.js";

/** What `landWithBarge` does with options; each maps to one `barge unpack` flag. */
export interface LandOptions {
  /** The barge binary: a path, or a name looked up on PATH. Default: `$BARGE_BIN`, else `barge`. */
  barge?: string;
  /** `--max-depth`: refuse archives nested deeper (barge's default: 1024). */
  maxDepth?: number;
  /** `--max-entries`: a count, `"none"`, or with units (`"10M"`) (barge's default: 10M). */
  maxEntries?: number | string;
  /** `--max-bytes`: bytes of file content, e.g. `500_000_000`, `"500M"`, `"2GiB"` (barge's default: `"none"`). */
  maxBytes?: number | string;
  /** `--max-space`: disk space, each entry charged at least a 4 KiB block (barge's default: `"none"`). */
  maxSpace?: number | string;
  /**
   * Entries whose name exists in DIR: `"keep"` fails (the default), `"skip"`
   * leaves them, `"overwrite"` replaces them by rename. Existing directories
   * are merged into in every case.
   */
  existing?: "keep" | "skip" | "overwrite";
  /** `--strip-components`: drop this many leading path components. */
  stripComponents?: number;
  /** `false`: `--touch` (entries get the time they are landed). Default: times restored. */
  times?: boolean;
  /** `true`: `--same-owner`; `false`: `--no-same-owner`. Default: owners as root only. */
  sameOwner?: boolean;
  /** `true`: `--setid`, setuid/setgid bits also when not root. */
  setid?: boolean;
  /** `true`: `--no-same-permissions`, apply the umask to the archive's modes. */
  umask?: boolean;
  /** `false`: `--no-sandbox` (no user-namespace chroot). Default: sandboxed. */
  sandbox?: boolean;
  /** `--engine`. */
  engine?: "auto" | "sync" | "threads" | "uring";
  /**
   * Aborting before the whole archive is written closes barge's input early,
   * so barge refuses the cut-off archive (a new DIR is not created; in an
   * existing DIR what landed stays) and the promise rejects with the signal's
   * reason. Once all of it is written, the landing finishes.
   */
  signal?: AbortSignal;
  /** Called with each warning barge printed (without `barge: warning: `). Default: console.warn. */
  onWarning?: (message: string) => void;
}

/** What `barge unpack --json` reports on success, its keys in camelCase (`not_restored` is `notRestored`). */
export interface LandSummary {
  dirs: number;
  files: number;
  symlinks: number;
  /** Hard links made. */
  hardLinks: number;
  specials: number;
  /** Bytes of file content landed. */
  bytes: number;
  /** Existing entries skipped (`existing: "skip"`). */
  kept: number;
  /** What the archive held but barge could not restore (each also a warning). */
  notRestored: { owners: number; setid: number; devices: number; xattrs: number; hardLinks: number; mergedDirs: number };
  /** The mode barge gave a DIR it created from a format 2 archive's root record, else null. */
  rootMode: number | null;
  /** How the landing was confined: `"sandboxed"` (the user-namespace chroot), `{ unavailable: reason }` (the kernel refused it) or `"off"` (`sandbox: false`). */
  confinement: "sandboxed" | "off" | { unavailable: string };
  seconds: number;
}

/** `value` with every object key in camelCase (`merged_dirs` is `mergedDirs`): barge's JSON as JavaScript spells it. */
function camelCase(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(camelCase);
  if (typeof value != "object" || value === null) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()), camelCase(v)]));
}

/**
 * A landing that failed, with a `code` (README, "Errors"): barge could not be
 * run (`barge-not-found`, `barge-not-runnable`), refused the archive (the
 * format code of docs/FORMAT.md with its `offset`, e.g. `"dot-name"`,
 * `"too-many-bytes"`, else barge's error kind, e.g. `"exists"`), failed
 * otherwise (`barge-failed`, `not-barge`), the archive's source failed
 * (`source-failed`, with that error as `cause`) or the signal aborted it
 * (`aborted`, with the signal's reason as `cause`).
 */
export class LandError extends BargeError {
  /** barge's exit status, when it ran. */
  readonly status?: number;
  /** The signal that ended barge, when one did. */
  readonly signal?: string;
  /** What barge printed on stderr. */
  readonly stderr: string;
  /** barge's error kind (`"format"`, `"exists"`, ...), when it reported one. */
  readonly kind?: string;
  constructor(code: string, message: string, details: Partial<Pick<LandError, "status" | "signal" | "stderr" | "kind" | "offset">> & { cause?: unknown } = {}) {
    super(code, message, details.offset, details.cause === undefined ? undefined : { cause: details.cause });
    this.status = details.status;
    this.signal = details.signal;
    this.stderr = details.stderr ?? "";
    this.kind = details.kind;
  }
  override get name(): string {
    return "LandError";
  }
}

const CHOICES = { existing: ["keep", "skip", "overwrite"], engine: ["auto", "sync", "threads", "uring"] };

/** `barge unpack`'s flags for `options`, each value joined to its flag so none is read as another flag. */
function flags(options: LandOptions): string[] {
  const out: string[] = [];
  const count = (name: string, flag: string, v: unknown, units: boolean) => {
    if (v === undefined) return;
    if (!(Number.isSafeInteger(v) && (v as number) >= 0) && !(units && typeof v == "string" && /^[0-9A-Za-z.]+$/.test(v)))
      throw argumentError("bad-option", `landWithBarge: ${name} must be a non-negative integer${units ? ' or a string such as "500M" or "none"' : ""}, not ${String(v)}`);
    out.push(`${flag}=${v}`);
  };
  const choice = (name: keyof typeof CHOICES, v: string | undefined) => {
    if (v !== undefined && !CHOICES[name].includes(v)) throw argumentError("bad-option", `landWithBarge: ${name} must be one of ${CHOICES[name].join(", ")}, not ${String(v)}`);
  };
  count("maxDepth", "--max-depth", options.maxDepth, false);
  count("maxEntries", "--max-entries", options.maxEntries, true);
  count("maxBytes", "--max-bytes", options.maxBytes, true);
  count("maxSpace", "--max-space", options.maxSpace, true);
  count("stripComponents", "--strip-components", options.stripComponents, false);
  choice("existing", options.existing);
  if (options.existing === "skip") out.push("--skip-old-files");
  if (options.existing === "overwrite") out.push("--overwrite");
  choice("engine", options.engine);
  if (options.engine !== undefined) out.push(`--engine=${options.engine}`);
  if (options.times === false) out.push("--touch");
  if (options.sameOwner !== undefined) out.push(options.sameOwner ? "--same-owner" : "--no-same-owner");
  if (options.setid) out.push("--setid");
  if (options.umask) out.push("--no-same-permissions");
  if (options.sandbox === false) out.push("--no-sandbox");
  return out;
}

/** Why `barge` could not be started, in words. */
function notRunnable(error: NodeJS.ErrnoException, barge: string, from: string): LandError {
  const message =
    error.code === "ENOENT"
      ? from === "PATH"
        ? "barge was not found on PATH; install it or set BARGE_BIN"
        : `barge was not found at ${barge} (from ${from})`
      : `barge at ${barge} (from ${from}) is not runnable: ${error.code === "EACCES" ? "permission denied (not an executable file)" : error.message}`;
  const code = error.code === "ENOENT" ? "barge-not-found" : "barge-not-runnable";
  return new LandError(code, message, { cause: error });
}

/** Resolves once `child` has started; rejects with why it could not. */
function started(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once("spawn", resolve);
    child.once("error", reject);
  });
}

/** All of a stream's text. */
async function text(stream: NodeJS.ReadableStream): Promise<string> {
  let s = "";
  for await (const chunk of stream) s += chunk;
  return s;
}

/**
 * Lands `archive` into the directory `dir` with `barge unpack - DIR`: barge
 * checks every entry against docs/FORMAT.md and the limits, writes nothing
 * outside `dir` (by default from a user-namespace chroot), and creates a new
 * `dir` only when the whole archive landed. The archive is streamed into
 * barge's stdin with back-pressure, so it is never held in memory.
 *
 * `archive`: bytes (`Uint8Array`, `ArrayBuffer`, `Blob`), a web
 * `ReadableStream`, a Node `Readable`, or an (async) iterable of `Uint8Array`
 * chunks. Resolves to barge's `--json` summary. Rejects with a `LandError`
 * when barge is not found or not runnable, refuses the archive (its message,
 * exit status and error kind/code/offset), or the archive's source fails.
 */
export async function landWithBarge(archive: ArchiveSource, dir: string, options: LandOptions = {}): Promise<LandSummary> {
  if (typeof dir != "string" || dir === "") throw argumentError("bad-argument", "landWithBarge: dir must be a non-empty path");
  const input = archiveChunks(archive, "landWithBarge");
  const args = ["unpack", "--json", "--no-progress", ...flags(options), "-", "--", dir];
  const envBarge = process.env.BARGE_BIN || undefined;
  const barge = options.barge ?? envBarge ?? "barge";
  const from = options.barge !== undefined ? "the barge option" : envBarge !== undefined ? "BARGE_BIN" : "PATH";
  const { signal, onWarning = (m: string) => console.warn(`barge: warning: ${m}`) } = options;
  const aborted = () => new LandError("aborted", `landing into ${dir} aborted: ${String(signal!.reason)}`, { cause: signal!.reason });
  if (signal?.aborted) throw aborted();

  const child = spawn(barge, args, { stdio: ["pipe", "pipe", "pipe"] });
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) => child.once("close", (code, sig) => resolve([code, sig])));
  const [out, err] = [text(child.stdout!.setEncoding("utf8")), text(child.stderr!.setEncoding("utf8"))];
  try {
    await started(child);
  } catch (error) {
    throw notRunnable(error as NodeJS.ErrnoException, barge, from);
  }

  // Writing fails with EPIPE when barge stops reading (it refused the archive):
  // then its exit tells why. Only a failure of the source itself is reported as such.
  let sourceError: unknown;
  async function* guarded() {
    try {
      yield* input;
    } catch (error) {
      sourceError = error;
      throw error;
    }
  }
  child.stdin!.on("error", () => {});
  // Whether the signal cut the archive off (an abort after it was all written changes nothing).
  const written = pipeline(guarded(), child.stdin!, { signal }).then(
    () => false,
    () => signal?.aborted === true,
  );
  const [[status, killedBy], stdout, stderr, cutOff] = await Promise.all([exited, out, err, written]);

  const lines = stderr.split("\n");
  for (const line of lines) if (line.startsWith("barge: warning: ")) onWarning(line.slice(16));
  let report: Record<string, unknown> | undefined;
  try {
    report = JSON.parse(stdout);
  } catch {
    // Not barge, or it died before reporting: said below.
  }
  if (cutOff) throw aborted();
  if (status === 0 && sourceError === undefined && report && !("error" in report)) return camelCase(report) as LandSummary;

  const said = lines.find((l) => l.startsWith("barge: error: "))?.slice(14) ?? (report?.error as string | undefined);
  const how = killedBy ? `was killed by ${killedBy}` : `exited with status ${status}`;
  const message =
    sourceError !== undefined
      ? `reading the archive failed: ${sourceError instanceof Error ? sourceError.message : String(sourceError)} (barge ${how}${said ? `: ${said}` : ""})`
      : said !== undefined
        ? `barge unpack ${how}: ${said}`
        : status === 0
          ? `${barge} (from ${from}) printed no JSON summary; is it barge? stdout: ${JSON.stringify(stdout.slice(0, 200))}`
          : `barge at ${barge} (from ${from}) ${how}${stderr.trim() ? `: ${stderr.trim().slice(0, 500)}` : " and said nothing"}`;
  // barge's format code, else its error kind (an archive that ends inside a file's content,
  // "short" to barge, is "truncated" as unpack says); else what went wrong from here.
  const reported = (report?.code ?? (report?.kind === "short" ? "truncated" : report?.kind)) as string | undefined;
  const code = sourceError !== undefined ? "source-failed" : (reported ?? (status === 0 ? "not-barge" : "barge-failed"));
  throw new LandError(code, message, {
    status: status ?? undefined,
    signal: killedBy ?? undefined,
    stderr,
    kind: report?.kind as string | undefined,
    offset: report?.offset as number | undefined,
    cause: sourceError,
  });
}
