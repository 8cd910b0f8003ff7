/**
 * Entry sources for the browser: folder inputs, drag and drop, and the File
 * System Access API / OPFS. Everything is duck-typed (no `instanceof`), so the
 * functions work with any object of the right shape, in any realm.
 */
import type { DirEntry, FileEntry } from "./types.js";

/** A File as `<input type=file webkitdirectory>` gives it. */
export interface RelativeFile extends Blob {
  readonly name: string;
  readonly webkitRelativePath?: string;
}

/**
 * Entries for the files of an `<input webkitdirectory>` (or any list of Files).
 * Paths are `webkitRelativePath` (which starts with the picked folder's name),
 * or the file name. Browsers do not list empty folders here.
 */
export function fromFileList(files: ArrayLike<RelativeFile> | Iterable<RelativeFile>): FileEntry[] {
  return Array.from(files, (file) => ({ path: file.webkitRelativePath || file.name, file }));
}

/** The FileSystemEntry shape used by drag and drop (`webkitGetAsEntry`). */
export interface FsEntry {
  readonly name: string;
  readonly isFile: boolean;
  readonly isDirectory: boolean;
  file?(success: (file: Blob) => void, error?: (err: unknown) => void): void;
  createReader?(): { readEntries(success: (entries: FsEntry[]) => void, error?: (err: unknown) => void): void };
}

/** A DataTransferItem, or anything with `webkitGetAsEntry`. */
export interface EntryItem {
  webkitGetAsEntry(): FsEntry | null;
}

async function* walkEntry(entry: FsEntry, prefix: string): AsyncGenerator<FileEntry | DirEntry> {
  const path = prefix + entry.name;
  if (entry.isDirectory) {
    yield { path, dir: true };
    const reader = entry.createReader!();
    // readEntries returns a batch per call (Chromium: at most 100), empty when done.
    for (;;) {
      const batch = await new Promise<FsEntry[]>((ok, err) => reader.readEntries(ok, err));
      if (!batch.length) break;
      for (const child of batch) yield* walkEntry(child, path + "/");
    }
  } else if (entry.isFile) {
    yield { path, file: await new Promise<Blob>((ok, err) => entry.file!(ok, err)) };
  }
}

/**
 * Entries for dropped files and folders: pass `event.dataTransfer.items` (or
 * FileSystemEntry objects). The items are read at once, because a
 * DataTransferItemList is only usable during the drop event; the folders are
 * then walked lazily. Dropped folders keep their names as the top directory.
 */
export function fromDataTransfer(items: ArrayLike<EntryItem | FsEntry> | Iterable<EntryItem | FsEntry>): AsyncGenerator<FileEntry | DirEntry> {
  const roots = Array.from(items, (item) => ("webkitGetAsEntry" in item ? item.webkitGetAsEntry() : item));
  return (async function* () {
    for (const root of roots) if (root) yield* walkEntry(root, "");
  })();
}

/** The FileSystemDirectoryHandle shape (File System Access API, OPFS). */
export interface DirHandle {
  readonly kind: "directory";
  readonly name: string;
  values(): AsyncIterable<DirHandle | FileHandle>;
}
export interface FileHandle {
  readonly kind: "file";
  readonly name: string;
  getFile(): Promise<Blob>;
}

/**
 * Entries for the contents of a directory handle (from `showDirectoryPicker()`
 * or `navigator.storage.getDirectory()`), relative to it: the handle's own name
 * is not part of the paths. Empty directories are kept.
 */
export async function* fromDirectoryHandle(handle: DirHandle, prefix = ""): AsyncGenerator<FileEntry | DirEntry> {
  for await (const child of handle.values()) {
    const path = prefix + child.name;
    if (child.kind == "directory") {
      yield { path, dir: true };
      yield* fromDirectoryHandle(child, path + "/");
    } else yield { path, file: await child.getFile() };
  }
}
