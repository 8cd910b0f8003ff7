/**
 * barge-archive: create and read barge archives (docs/FORMAT.md) with web
 * standards only (Web Streams, TextEncoder, DataView, Blob).
 */
export { BargeError } from "./error.js";
export { pack } from "./pack.js";
export { packV2 } from "./pack2.js";
export type { PackV2Options } from "./pack2.js";
export { unpack } from "./unpack.js";
export type {
  ArchiveSource,
  DecodedDir,
  DecodedEntry,
  DecodedExtent,
  DecodedFile,
  DecodedOwner,
  DecodedRoot,
  DecodedHardlink,
  DecodedSpecial,
  DecodedSymlink,
  UnpackOptions,
  Xattr,
} from "./unpack.js";
export { fromDataTransfer, fromDirectoryHandle, fromFileList } from "./sources.js";
export type { DirHandle, EntryItem, FileHandle, FsEntry, RelativeFile } from "./sources.js";
export type {
  ArchivePath,
  DataSource,
  DirEntry,
  Entry,
  FileEntry,
  HardlinkEntry,
  Meta,
  Owner,
  PackOptions,
  Progress,
  SpecialEntry,
  SymlinkEntry,
  Timestamp,
  XattrInput,
} from "./types.js";
