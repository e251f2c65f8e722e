// RFC 8785 (JSON Canonicalization Scheme) and the digests built on it, in the browser.
//
// The approver's browser computes the bytes it signs itself, from the params it displays,
// so they must be exactly service.canonical's bytes. RFC 8785 is defined in terms of
// ECMAScript: numbers are Number.prototype.toString's form (JSON.stringify writes exactly
// that for finite numbers, -0 as 0), strings are JSON.stringify's escaping, and members are
// sorted by UTF-16 code units (Array.prototype.sort's default order). What JCS refuses
// (non-finite numbers, lone surrogates, anything that is not JSON) is refused here too, so a
// value Python would not hash is never signed in the browser.

export class CanonicalError extends Error {
  name = "CanonicalError";
}

// Deeper values than any draft may hold are refused instead of overflowing the stack.
const MAX_DEPTH = 64;

export function canonicalize(value) {
  return write(value, 0);
}

export function canonicalBytes(value) {
  return new TextEncoder().encode(canonicalize(value));
}

export async function sha256Hex(bytes) {
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return hex(new Uint8Array(digest));
}

export function hex(bytes) {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

function write(value, depth) {
  if (depth > MAX_DEPTH) {
    throw new CanonicalError("value nested too deeply");
  }
  if (value === null || typeof value === "boolean") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new CanonicalError(`${value} is not a JSON number`);
    }
    return JSON.stringify(value);
  }
  if (typeof value === "string") {
    return writeString(value);
  }
  if (Array.isArray(value)) {
    return `[${value.map((item) => write(item, depth + 1)).join(",")}]`;
  }
  if (typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    // Object.keys lists own enumerable string keys; sort() compares UTF-16 code units.
    const members = Object.keys(value)
      .sort()
      .map((key) => {
        if (value[key] === undefined) {
          throw new CanonicalError(`member ${JSON.stringify(key)} has no JSON value`);
        }
        return `${writeString(key)}:${write(value[key], depth + 1)}`;
      });
    return `{${members.join(",")}}`;
  }
  throw new CanonicalError(`a ${typeof value} is not a JSON value`);
}

function writeString(text) {
  // JSON.stringify escapes a lone surrogate as \udxxx; I-JSON (and so JCS) forbids it.
  if (!text.isWellFormed()) {
    throw new CanonicalError("string holds a lone surrogate");
  }
  return JSON.stringify(text);
}
