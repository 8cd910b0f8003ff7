import type { DataSource } from "./types.js";

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
