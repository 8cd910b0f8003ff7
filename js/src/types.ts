/** A path inside the archive: names joined by "/", as a string or raw bytes (for non-UTF-8 names). */
export type ArchivePath = string | Uint8Array;

/** File content that is read lazily, only when the archive output reaches it. */
export type DataSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Iterable<Uint8Array>;

/** A regular file. Give exactly one of `file`, `data` or `stream`. */
export interface FileEntry {
  path: ArchivePath;
  /** A Blob or File; its `size` is used. */
  file?: Blob;
  /** The whole content (strings are UTF-8 encoded). */
  data?: Uint8Array | string;
  /** Content as a stream, or a function opening one when the file is reached; `size` is required. */
  stream?: DataSource | (() => DataSource);
  /** Size in bytes; required with `stream`, checked against what the source produces. */
  size?: number;
  /** Permission bits (at most 0o7777); written as PERM only if different from 0o644. */
  mode?: number;
  dir?: false;
}

/** A directory; parents of other entries are created implicitly, so this is only needed for empty dirs or a mode. */
export interface DirEntry {
  path: ArchivePath;
  dir: true;
  /** Permission bits (at most 0o7777); written as PERM only if different from 0o755. */
  mode?: number;
}

export type Entry = FileEntry | DirEntry;

export interface Progress {
  /** Entries (dirs and files) written so far, and in total. */
  entries: number;
  totalEntries: number;
  /** File content bytes written so far, and in total. */
  bytes: number;
  totalBytes: number;
}

export interface PackOptions {
  /** Called after each entry and each chunk of file data is written. */
  onProgress?: (progress: Progress) => void;
}
