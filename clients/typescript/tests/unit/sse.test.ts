import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { SseParser, type SseMessage } from '../../src/sse.js';

/** Feeds `text` cut at every given position and collects the events. */
function feed(text: string, cuts: number[] = []): SseMessage[] {
  const p = new SseParser();
  const out: SseMessage[] = [];
  let at = 0;
  for (const cut of [...cuts, text.length]) {
    out.push(...p.push(text.slice(at, cut)));
    at = cut;
  }
  return out;
}

const STREAM =
  ': keep-alive\n\nid: 7\nevent: demoted\ndata: {"seq":7}\n\n' +
  'id: 8\nevent: promoted\ndata: {"seq":8,\ndata: "x":1}\n\n';

describe('SseParser', () => {
  it('parses id, event and multi-line data, and skips comments', () => {
    assert.deepEqual(feed(STREAM), [
      { id: '7', event: 'demoted', data: '{"seq":7}' },
      { id: '8', event: 'promoted', data: '{"seq":8,\n"x":1}' },
    ]);
  });

  it('gives the same events however the stream is cut', () => {
    const whole = feed(STREAM);
    for (let i = 0; i <= STREAM.length; i++) {
      assert.deepEqual(feed(STREAM, [i]), whole, `cut at ${i}`);
    }
    assert.deepEqual(feed(STREAM, [...Array(STREAM.length).keys()]), whole, 'one character at a time');
  });

  it('accepts CRLF and CR line ends, even a CRLF split across chunks', () => {
    const crlf = STREAM.replace(/\n/g, '\r\n');
    const cr = STREAM.replace(/\n/g, '\r');
    const expected = feed(STREAM);
    assert.deepEqual(feed(crlf), expected);
    assert.deepEqual(feed(cr), expected);
    for (let i = 0; i <= crlf.length; i++) assert.deepEqual(feed(crlf, [i]), expected, `CRLF cut at ${i}`);
    for (let i = 0; i <= cr.length; i++) assert.deepEqual(feed(cr, [i]), expected, `CR cut at ${i}`);
  });

  it('keeps the last id for later events, defaults the type to message, strips one space only', () => {
    assert.deepEqual(feed('id: 3\ndata:a\n\ndata:  b\n\n'), [
      { id: '3', event: 'message', data: 'a' },
      { id: '3', event: 'message', data: ' b' },
    ]);
  });

  it('does not dispatch an event without data, nor an unfinished one', () => {
    const p = new SseParser();
    assert.deepEqual(p.push('event: demoted\n\nid: 4\n\ndata: late'), []);
    assert.equal(p.lastEventId, '4');
    p.end();
    assert.deepEqual(p.push('\n'), []);
  });

  it('strips a leading BOM and reads retry', () => {
    const p = new SseParser();
    assert.deepEqual(p.push('\ufeffretry: 1500\ndata: x\n\n'), [{ id: undefined, event: 'message', data: 'x' }]);
    assert.equal(p.retry, 1500);
  });

  it('treats a field without a colon as a field with an empty value', () => {
    assert.deepEqual(feed('data\ndata\n\n'), [{ id: undefined, event: 'message', data: '\n' }]);
  });
});
