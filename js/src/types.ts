/** A path inside the archive: names joined by "/", as a string or raw bytes (for non-UTF-8 names). */
export type ArchivePath = string | Uint8Array;

/** File content that is read lazily, only when the archive output reaches it. */
export type DataSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Iterable<Uint8Array>;

/**
 * A modification time: whole seconds since 1970-01-01 UTC (negative before) and
 * nanoseconds 0..999,999,999. Decoded times have `sec` as a number, or as a
 * bigint beyond ±2^53 s (the format allows any 64-bit value).
 */
export interface Timestamp {
  sec: number | bigint;
  nsec: number;
}

/** Numeric owner and group (0..2^32-1). */
export interface Owner {
  uid: number;
  gid: number;
  /** Format 2 only (ignored by format 1): the user and group names (0..255 bytes each) the ids have where the archive is made. */
  user?: string | Uint8Array;
  group?: string | Uint8Array;
}

/** An extended attribute to record: name 1..255 bytes without NUL, value at most 65,536 bytes. */
export interface XattrInput {
  name: string | Uint8Array;
  value: string | Uint8Array;
}

/**
 * Metadata of an entry (not of a hard link, which shares its file's). Without
 * `mtime`, a File's `lastModified` is its time; other entries get none (a
 * lander gives them the time it lands them).
 */
export interface Meta {
  /** Modification time: milliseconds since the epoch (like `File.lastModified`), or sec + nsec. */
  mtime?: number | Timestamp;
  owner?: Owner;
  /** Written sorted by name; names must be unique; at most 262,144 bytes in all (records included). */
  xattrs?: XattrInput[];
}

/** A regular file. Give exactly one of `file`, `data` or `stream`. */
export interface FileEntry extends Meta {
  path: ArchivePath;
  /** A Blob or File; its `size` is used (and a File's `lastModified`). */
  file?: Blob;
  /** The whole content (strings are UTF-8 encoded). */
  data?: Uint8Array | string;
  /** Content as a stream, or a function opening one when the file is reached; `size` is required. */
  stream?: DataSource | (() => DataSource);
  /** Size in bytes; required with `stream`, checked against what the source produces. */
  size?: number;
  /**
   * A sparse file's data regions (ascending, not overlapping, inside the file): the bytes
   * outside them must be zeros. Format 2 writes those as holes (`packV2`); format 1, and
   * the source in both, have every byte.
   */
  extents?: { at: number; length: number }[];
  /** Permission bits (at most 0o7777); written as PERM only if different from 0o644. */
  mode?: number;
  /**
   * The file has hard links elsewhere: mark it LINKED even if no `link` entry
   * names it (`fromPath` sets this for files with more than one link).
   */
  linked?: boolean;
  dir?: false;
}

/** A directory; parents of other entries are created implicitly, so this is only needed for empty dirs or metadata. */
export interface DirEntry extends Meta {
  path: ArchivePath;
  dir: true;
  /** Permission bits (at most 0o7777); written as PERM only if different from 0o755. */
  mode?: number;
}

/** A symbolic link (it has no mode of its own). */
export interface SymlinkEntry extends Meta {
  path: ArchivePath;
  /** The target, stored as it is: 1..4095 bytes without NUL, absolute or relative. */
  symlink: string | Uint8Array;
}

/**
 * A hard link to the regular file at `link`, another entry of the same `pack`
 * (or a hard link to one). The archive holds the content once: the member of
 * the group that comes first in the archive is the file (with the file's
 * metadata), the others link to it.
 */
export interface HardlinkEntry {
  path: ArchivePath;
  link: ArchivePath;
}

/** A fifo, character device or block device. */
export interface SpecialEntry extends Meta {
  path: ArchivePath;
  special: "fifo" | "char" | "block";
  /** Device numbers (0..2^32-1; default 0; a fifo has none). */
  major?: number;
  minor?: number;
  /** Permission bits (at most 0o7777); written as PERM only if different from 0o644. */
  mode?: number;
}

export type Entry = FileEntry | DirEntry | SymlinkEntry | HardlinkEntry | SpecialEntry;

export interface Progress {
  /** Entries written so far, and in total. */
  entries: number;
  totalEntries: number;
  /** File content bytes written so far, and in total. */
  bytes: number;
  totalBytes: number;
}

export interface PackOptions {
  /** Called after each entry and each chunk of file data is written. */
  onProgress?: (progress: Progress) => void;
  /**
   * Record modification times (default true): the header then allows the
   * extended records. False writes no TIME record and, unless other entries
   * need the extended records, a core archive (header flags 0) as before.
   */
  times?: boolean;
}
