/**
 * An incremental Server-Sent Events parser (the WHATWG event-stream format), fed text as
 * it arrives.
 */

/** One dispatched event. */
export interface SseMessage {
  /** The last event id seen so far in the stream (ids persist across events), if any. */
  readonly id: string | undefined;
  /** The `event:` field, `message` when absent. */
  readonly event: string;
  /** The `data:` lines, joined with `\n`. */
  readonly data: string;
}

/**
 * Parses an event stream chunk by chunk. Lines may end in LF, CRLF or CR, and a chunk may
 * end anywhere (even between CR and LF). Comments (`:` lines) are skipped; an event with
 * no data is not dispatched; an unfinished event at the end of the stream is discarded.
 */
export class SseParser {
  #buffer = '';
  #sawCr = false;
  #started = false;
  #data: string[] = [];
  #event = '';
  #lastId: string | undefined;
  /** The last `retry:` value (milliseconds), if the server sent one. */
  retry: number | undefined;

  /** The last event id seen, as a reconnecting client sends it in `Last-Event-ID`. */
  get lastEventId(): string | undefined {
    return this.#lastId;
  }

  /** Feeds the next piece of text; returns the events it completed. */
  push(chunk: string): SseMessage[] {
    let text = chunk;
    if (!this.#started && text.length > 0) {
      this.#started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.#sawCr && text.startsWith('\n')) text = text.slice(1);
    this.#sawCr = false;
    const out: SseMessage[] = [];
    let buffer = this.#buffer + text;
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.#line(buffer.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < buffer.length) {
          if (buffer.charCodeAt(i + 1) === 10) i++;
        } else {
          this.#sawCr = true;
        }
      }
      start = i + 1;
    }
    buffer = buffer.slice(start);
    this.#buffer = buffer;
    return out;
  }

  /** The stream ended: drops any unfinished event. */
  end(): void {
    this.#buffer = '';
    this.#data = [];
    this.#event = '';
  }

  #line(line: string, out: SseMessage[]): void {
    if (line.length === 0) {
      if (this.#data.length > 0) {
        out.push({ id: this.#lastId, event: this.#event || 'message', data: this.#data.join('\n') });
      }
      this.#data = [];
      this.#event = '';
      return;
    }
    if (line.charCodeAt(0) === 58 /* ':' */) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32 /* ' ' */) value = value.slice(1);
    switch (field) {
      case 'data':
        this.#data.push(value);
        break;
      case 'event':
        this.#event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.#lastId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break;
    }
  }
}
