import { argumentError } from "./error.js";
import type { DataSource } from "./types.js";
import type { ArchiveSource } from "./unpack.js";

/** Reads a stream or (async) iterable chunk by chunk; leaving early cancels a stream. */
export async function* read(src: DataSource): AsyncGenerator<Uint8Array> {
  if ("getReader" in src) {
    const r = src.getReader();
    try {
      for (let x; !(x = await r.read()).done; ) yield x.value!;
    } finally {
      r.cancel().catch(() => {});
    }
  } else yield* src;
}

/** An archive's bytes, read chunk by chunk; a `bad-argument` TypeError (naming `who`) for what holds none. */
export function archiveChunks(input: ArchiveSource, who: string): AsyncGenerator<Uint8Array> {
  if (input instanceof Uint8Array) return read([input]);
  if (input instanceof ArrayBuffer) return read([new Uint8Array(input)]);
  if (typeof input == "object" && input !== null) {
    if ("stream" in input && typeof input.stream == "function") return read(input.stream());
    if ("getReader" in input || Symbol.asyncIterator in input || Symbol.iterator in input) return read(input);
  }
  throw argumentError("bad-argument", `${who}: the archive must be a Uint8Array, an ArrayBuffer, a Blob, a ReadableStream or an (async) iterable of Uint8Array chunks, not ${typeof input}`);
}
