// One worker's tokenizer: every question the gateway asks a worker to tokenize after (or before)
// a turn goes through the Tokenizer of the process the worker runs now, with its timeout and what
// it remembers. A worker found restarted gets a new one, so nothing learned from the old process
// (a system prompt's length under its template) outlives it.
import type { TokenizeCall } from "../request/tokenize-call.js";
import { type TokenizingWorker, tokenizePrompt } from "./messages-fallback.js";
import { tokenizeCall } from "../request/tokenize-call.js";
import { tokenizeOn } from "./token-truth.js";

/** Distinct system prompts remembered per process, at most (least recently added dropped first). */
const MAX_SYSTEM_LENGTHS = 1024;

export class Tokenizer {
  private readonly systemLengths = new Map<string, number | null>();

  /** `timeoutMs`: how long one tokenize may take on this worker. */
  constructor(
    private readonly w: TokenizingWorker,
    readonly timeoutMs: number,
  ) {}

  /** The ids of one tokenize call, as the worker renders and tokenizes it; throws saying why not. */
  tokens(call: TokenizeCall): Promise<number[]> {
    return tokenizeOn(this.w.pool, call, this.timeoutMs);
  }

  /**
   * A request's prompt ids: the worker's tokenize route for its dialect, or for /v1/messages on a
   * worker without kvctl's route, the chat rendering checked against its count (messages-fallback.ts).
   */
  prompt(call: TokenizeCall): Promise<number[]> {
    return tokenizePrompt(this.w, call, this.timeoutMs, (c) => this.tokens(c));
  }

  /** How many tokens a text is on its own (no special tokens). */
  async textLength(text: string): Promise<number> {
    return (await this.tokens(tokenizeCall({ prompt: text, add_special_tokens: false }))).length;
  }

  /**
   * Where the system prompt (and tools) ends in `prompt`: the worker renders the system message
   * alone, and the length holds when those tokens are a prefix of the prompt (the template is
   * prefix-stable); null when they are not, or the worker cannot say. Remembered per distinct
   * system prompt, so a session pays one tokenize for it.
   */
  async systemLength(call: TokenizeCall, prompt: readonly number[]): Promise<number | null> {
    const key = JSON.stringify(call.body);
    let n = this.systemLengths.get(key);
    if (n === undefined) {
      try {
        const sys = await this.tokens(call);
        n = sys.length <= prompt.length && sys.every((t, i) => t === prompt[i]) ? sys.length : null;
      } catch {
        n = null;
      }
      if (this.systemLengths.size >= MAX_SYSTEM_LENGTHS)
        this.systemLengths.delete(this.systemLengths.keys().next().value as string);
      this.systemLengths.set(key, n);
    }
    return n;
  }
}
