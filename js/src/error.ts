/**
 * Every error this package raises has a stable string `code` (README, "Errors"). A
 * BargeError comes from `pack` (an invalid entry, a source that gave the wrong number of
 * bytes), from `unpack` (an invalid archive: the codes of docs/FORMAT.md, and `offset`, the
 * archive byte) and, as a `LandError`, from `landWithBarge`.
 */
export class BargeError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly offset?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
  override get name(): string {
    return "BargeError";
  }
}

/** A wrong argument (`bad-argument`) or option (`bad-option`): a TypeError, as Node's own, with a `code`. */
export function argumentError(code: "bad-argument" | "bad-option", message: string): TypeError & { code: string } {
  return Object.assign(new TypeError(message), { code });
}
