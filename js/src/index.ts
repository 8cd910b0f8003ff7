/**
 * barge-archive: create and read barge archives (docs/FORMAT.md) with web
 * standards only (Web Streams, TextEncoder, DataView, Blob).
 */
export { BargeError } from "./error.js";
export { pack } from "./pack.js";
export { unpack } from "./unpack.js";
export type { ArchiveSource, DecodedEntry, UnpackOptions } from "./unpack.js";
export { fromDataTransfer, fromDirectoryHandle, fromFileList } from "./sources.js";
export type { DirHandle, EntryItem, FileHandle, FsEntry, RelativeFile } from "./sources.js";
export type { ArchivePath, DataSource, DirEntry, Entry, FileEntry, PackOptions, Progress } from "./types.js";
