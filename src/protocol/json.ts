// An int64-exact JSON codec. JSON.parse turns 9007199254740993 into ...992 without a word, and
// JSON.stringify cannot write a bigint at all, so both directions are done here by hand:
//   parse:     integer literals that are not exact as a double come back as `bigint`; every other
//              value is what JSON.parse would give.
//   stringify: a `bigint` is written as a bare number literal; non-finite numbers are refused.
// No external dependency, no regex pre-pass over the text (which would misfire inside strings).

import { INT64_MAX, INT64_MIN } from "./int64.js";
import { int64FromHeadTail, int64ToDecimal } from "./int64-decimal.js";
// Module-local copies: the hot loops use them per hash, and a loader or bundler may turn an
// imported binding into a getter call (tsx does).
const MIN = INT64_MIN;
const MAX = INT64_MAX;
const fromHeadTail = int64FromHeadTail;
const toDecimal = int64ToDecimal;

export class JsonSyntaxError extends SyntaxError {
  constructor(
    message: string,
    readonly position: number,
  ) {
    super(`${message} at position ${position}`);
    this.name = "JsonSyntaxError";
  }
}

const MAX_DEPTH = 64;
// ignoreBOM: a byte-order mark stays in the text and is refused like any stray character
// (the Python codec refuses it too; two codecs must never disagree on what a body says).
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * The same key twice in one object. Refused rather than "last one wins": a router-side check and
 * the worker could otherwise read different commands out of one body. `path` names the repeated
 * key from the top (`["command", "type"]`); see fieldPath in errors.ts for its dotted form.
 */
export class JsonDuplicateKeyError extends SyntaxError {
  readonly path: PropertyKey[];
  constructor(key: string) {
    super(`duplicate key ${JSON.stringify(key)}`);
    this.name = "JsonDuplicateKeyError";
    this.path = [key];
  }
}

/** Parses JSON text (or UTF-8 bytes) keeping every integer exact. */
export function parseJson(input: string | Uint8Array): unknown {
  const text = typeof input === "string" ? input : decodeUtf8(input);
  const p = new Parser(text);
  p.ws();
  const value = p.value(0);
  p.ws();
  if (p.i !== text.length) throw new JsonSyntaxError("unexpected trailing data", p.i);
  return value;
}

function decodeUtf8(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new JsonSyntaxError("body is not valid UTF-8", 0);
  }
}

class Parser {
  i = 0;
  constructor(readonly s: string) {}

  ws(): void {
    const s = this.s;
    let i = this.i;
    for (;;) {
      const c = s.charCodeAt(i);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else break;
    }
    this.i = i;
  }

  fail(msg: string): never {
    throw new JsonSyntaxError(msg, this.i);
  }

  value(depth: number): unknown {
    const c = this.s.charCodeAt(this.i);
    if (c === 0x22) return this.string();
    if (c === 0x7b) return this.object(depth + 1);
    if (c === 0x5b) return this.array(depth + 1);
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.number();
    if (this.s.startsWith("true", this.i)) return ((this.i += 4), true);
    if (this.s.startsWith("false", this.i)) return ((this.i += 5), false);
    if (this.s.startsWith("null", this.i)) return ((this.i += 4), null);
    return this.fail(
      Number.isNaN(c)
        ? "unexpected end of input"
        : `unexpected character ${JSON.stringify(this.s[this.i])}`,
    );
  }

  object(depth: number): Record<string, unknown> {
    if (depth > MAX_DEPTH) this.fail("nesting too deep");
    const out: Record<string, unknown> = {};
    this.i++;
    this.ws();
    if (this.s.charCodeAt(this.i) === 0x7d) return (this.i++, out);
    // A repeated key is reported when its object closes (a syntax error before that wins), the
    // order in which Python's object_pairs_hook sees it: both codecs name the same first problem.
    let duplicate: string | undefined;
    let key = "";
    try {
      for (;;) {
        if (this.s.charCodeAt(this.i) !== 0x22) this.fail("expected a string key");
        key = this.string();
        this.ws();
        if (this.s.charCodeAt(this.i) !== 0x3a) this.fail("expected ':'");
        this.i++;
        this.ws();
        const v = this.value(depth);
        if (duplicate === undefined && Object.hasOwn(out, key)) duplicate = key;
        // A plain assignment of "__proto__" would replace the prototype instead of adding a key.
        if (key === "__proto__")
          Object.defineProperty(out, key, {
            value: v,
            enumerable: true,
            writable: true,
            configurable: true,
          });
        else out[key] = v;
        this.ws();
        const c = this.s.charCodeAt(this.i++);
        if (c === 0x2c) {
          this.ws();
          continue;
        }
        if (c === 0x7d) break;
        this.i--;
        this.fail("expected ',' or '}'");
      }
    } catch (e) {
      // A duplicate found further in: prefix this object's key to its path on the way out.
      if (e instanceof JsonDuplicateKeyError) e.path.unshift(key);
      throw e;
    }
    if (duplicate !== undefined) throw new JsonDuplicateKeyError(duplicate);
    return out;
  }

  array(depth: number): unknown[] {
    if (depth > MAX_DEPTH) this.fail("nesting too deep");
    const out: unknown[] = [];
    this.i++;
    this.ws();
    if (this.s.charCodeAt(this.i) === 0x5d) return (this.i++, out);
    try {
      return this.items(depth, out);
    } catch (e) {
      if (e instanceof JsonDuplicateKeyError) e.path.unshift(out.length);
      throw e;
    }
  }

  items(depth: number, out: unknown[]): unknown[] {
    for (;;) {
      // Numbers (the hash lists) skip the generic dispatch; `,` with no space is the common case.
      const f = this.s.charCodeAt(this.i);
      out.push(f === 0x2d || (f >= 0x30 && f <= 0x39) ? this.number() : this.value(depth));
      if (this.s.charCodeAt(this.i) !== 0x2c) this.ws();
      const c = this.s.charCodeAt(this.i++);
      if (c === 0x2c) {
        this.ws();
        continue;
      }
      if (c === 0x5d) return out;
      this.i--;
      this.fail("expected ',' or ']'");
    }
  }

  number(): number | bigint {
    const s = this.s;
    const start = this.i;
    let i = start;
    const negative = s.charCodeAt(i) === 0x2d;
    if (negative) i++;
    const intStart = i;
    let c = s.charCodeAt(i);
    // One pass over the integer digits: the first 15 accumulate exactly in `head` (< 2^50), the
    // rest (at most 4 for an int64) in `tail`, so value = head * 10^tailDigits + tail.
    let head = 0;
    let tail = 0;
    let tailScale = 1;
    if (c === 0x30) c = s.charCodeAt(++i);
    else if (c >= 0x31 && c <= 0x39) {
      const headEnd = intStart + 15;
      do {
        head = head * 10 + (c - 0x30);
        c = s.charCodeAt(++i);
      } while (c >= 0x30 && c <= 0x39 && i < headEnd);
      while (c >= 0x30 && c <= 0x39) {
        tail = tail * 10 + (c - 0x30);
        tailScale *= 10;
        c = s.charCodeAt(++i);
      }
    } else {
      this.i = i;
      this.fail("invalid number");
    }
    const intDigits = i - intStart;
    let isInteger = true;
    if (c === 0x2e) {
      isInteger = false;
      i++;
      if (!((c = s.charCodeAt(i)) >= 0x30 && c <= 0x39)) (this.i = i), this.fail("invalid number");
      while ((c = s.charCodeAt(i)) >= 0x30 && c <= 0x39) i++;
    }
    if (c === 0x65 || c === 0x45) {
      isInteger = false;
      i++;
      c = s.charCodeAt(i);
      if (c === 0x2b || c === 0x2d) i++;
      if (!((c = s.charCodeAt(i)) >= 0x30 && c <= 0x39)) (this.i = i), this.fail("invalid number");
      while ((c = s.charCodeAt(i)) >= 0x30 && c <= 0x39) i++;
    }
    this.i = i;
    if (!isInteger) return Number(s.slice(start, i));
    // Up to 15 digits always fits a double exactly (-0 stays -0, as JSON.parse gives).
    if (intDigits <= 15) return negative ? -head : head;
    if (intDigits > 19) return BigInt(s.slice(start, i)); // outside int64 anyway; exact for the error
    // Below 2^53 the value is still an exact double and stays a number, as JSON.parse would give.
    // (head * tailScale may round, but only for values far above 2^53, so the test is still right.)
    const approx = head * tailScale + tail;
    if (approx <= 9007199254740991) return negative ? -approx : approx;
    return fromHeadTail(head, tailScale, tail, negative) ?? BigInt(s.slice(start, i));
  }

  string(): string {
    const s = this.s;
    const start = ++this.i;
    // Fast path: no escapes, so the content is one slice.
    for (let i = start; ; i++) {
      const c = s.charCodeAt(i);
      if (c === 0x22) {
        this.i = i + 1;
        return s.slice(start, i);
      }
      if (c === 0x5c || c < 0x20 || Number.isNaN(c)) break;
    }
    return this.slowString();
  }

  slowString(): string {
    const s = this.s;
    let i = this.i;
    let out = "";
    let from = i;
    for (;;) {
      const c = s.charCodeAt(i);
      if (Number.isNaN(c)) (this.i = i), this.fail("unterminated string");
      if (c === 0x22) {
        out += s.slice(from, i);
        this.i = i + 1;
        return out;
      }
      if (c < 0x20) (this.i = i), this.fail("control character in string");
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += s.slice(from, i);
      const e = s[i + 1];
      switch (e) {
        case '"':
          out += '"';
          break;
        case "\\":
          out += "\\";
          break;
        case "/":
          out += "/";
          break;
        case "b":
          out += "\b";
          break;
        case "f":
          out += "\f";
          break;
        case "n":
          out += "\n";
          break;
        case "r":
          out += "\r";
          break;
        case "t":
          out += "\t";
          break;
        case "u": {
          const hex = s.slice(i + 2, i + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) (this.i = i), this.fail("invalid \\u escape");
          out += String.fromCharCode(parseInt(hex, 16));
          i += 4;
          break;
        }
        default:
          this.i = i;
          this.fail("invalid escape");
      }
      i += 2;
      from = i;
    }
  }
}

/**
 * Writes JSON with `bigint` as number literals. Object keys whose value is `undefined` are left
 * out (as JSON.stringify does); NaN and Infinity are refused rather than silently written as null.
 */
export function stringifyJson(value: unknown): string {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "number":
      if (!Number.isFinite(value)) throw new TypeError(`cannot encode ${value} as JSON`);
      return String(value);
    case "bigint":
      return bigintText(value);
    case "boolean":
      return value ? "true" : "false";
    case "object": {
      if (value === null) return "null";
      if (Array.isArray(value)) {
        if (typeof value[0] === "bigint" && value.every((v) => typeof v === "bigint"))
          return stringifyInt64List(value as bigint[]);
        let out = "[";
        for (let k = 0; k < value.length; k++) {
          if (k) out += ",";
          out += stringifyJson(value[k] === undefined ? null : value[k]);
        }
        return out + "]";
      }
      let out = "{";
      let first = true;
      for (const key of Object.keys(value)) {
        const v = (value as Record<string, unknown>)[key];
        if (v === undefined) continue;
        out += (first ? "" : ",") + JSON.stringify(key) + ":" + stringifyJson(v);
        first = false;
      }
      return out + "}";
    }
    default:
      throw new TypeError(`cannot encode a ${typeof value} as JSON`);
  }
}

/** Writes a list of bigints as a JSON array of number literals (the hot path of every command). */
export function stringifyInt64List(list: readonly bigint[]): string {
  if (list.length === 0) return "[]";
  let out = "[" + bigintText(list[0]!);
  for (let k = 1; k < list.length; k++) out += "," + bigintText(list[k]!);
  return out + "]";
}

function bigintText(v: bigint): string {
  return v >= MIN && v <= MAX ? toDecimal(v) : v.toString();
}
