/**
 * The barge encoder (format v1, docs/FORMAT.md). Kept small: it is the part a
 * web page ships (tools/size.mjs measures it with what it imports).
 */
import { build, children, content, lazy, le, MAX_CHUNK, TWO32 } from "./tree.js";
import type { Entry, FileEntry, PackOptions } from "./types.js";

/**
 * Encodes entries (in any order) as a barge archive. The stream is lazy: the
 * entries are read and validated on the first pull, before any byte is
 * produced, and each file's content only when the output reaches it.
 * Cancelling the stream cancels the file being read and stops.
 */
export function pack(entries: Iterable<Entry> | AsyncIterable<Entry>, options: PackOptions = {}): ReadableStream<Uint8Array> {
  async function* generate(): AsyncGenerator<Uint8Array> {
    const [root, count, total, ext] = await build(entries, options.times != false);
    let parts: Uint8Array[] = [];
    let pending = 0;
    let done = 0;
    let bytes = 0;
    const put = (b: Uint8Array | number[]) => {
      parts.push(b instanceof Uint8Array ? b : new Uint8Array(b));
      pending += b.length;
    };
    const flush = () => {
      const out = new Uint8Array(pending);
      let o = 0;
      for (const b of parts) out.set(b, o), (o += b.length);
      parts = [];
      pending = 0;
      return out;
    };
    const progress = () => options.onProgress?.({ entries: done, totalEntries: count, bytes, totalBytes: total });
    // The order of tree.ts's walk() (which pack2.ts uses), inlined: a generator costs this
    // encoder core about 75 bytes of its size budget.

    put([66, 65, 82, 71, 69, 0, 1, +ext]);
    const stack = [children(root)];
    while (stack.length) {
      const x = stack[stack.length - 1].pop();
      if (!x) {
        stack.pop();
        if (stack.length) put([3]);
        continue;
      }
      // The first member of a hard-link group written is the file, with the file's
      // records and LINKED; the others link to it.
      const g = x.g;
      const f = g ? g.f : x;
      let t = x.t;
      if (g && g.i == null) (g.i = done), (t = 1), put([...f.r!, 9]);
      else if (g) t = 11;
      else if (x.r) put(x.r);
      const big = t == 1 && f.s >= TWO32;
      const h = [big ? 4 : t, ...x.n, 0];
      if (t == 1) le(h, f.s, big ? 8 : 4);
      if (t == 11) le(h, g!.i!, 8);
      else if (t > 2) h.push(...x.d!);
      put(h);
      if (x.c) {
        stack.push(children(x));
      } else if (t == 1) {
        for await (const c of content(f)) {
          bytes += c.length;
          if (c.length < MAX_CHUNK) put(c);
          else {
            if (pending) yield flush();
            yield c;
          }
          if (pending >= MAX_CHUNK) yield flush();
          progress();
        }
      }
      done++;
      progress();
      if (pending >= MAX_CHUNK) yield flush();
    }
    const end = [0];
    le(end, count, 8);
    put(end);
    yield flush();
  }

  return lazy(generate());
}
