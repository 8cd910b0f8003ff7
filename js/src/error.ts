/**
 * Error raised by `pack` (invalid entries, a source whose size changed) and by
 * `unpack` (an invalid archive). `code` is one of the stable codes of
 * docs/FORMAT.md (plus `nul-in-name`, `bad-entry` and `size-mismatch` for
 * `pack`); `offset` is the archive byte offset, set by `unpack` only.
 */
export class BargeError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly offset?: number,
  ) {
    super(message);
  }
  override get name(): string {
    return "BargeError";
  }
}
