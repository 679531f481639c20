#!/usr/bin/env python3
"""Records the wire traffic of one running A2A agent into fixture files.

Standard library only (runs with a plain python3). Given the agent's origin
and an output directory it records:

  card/agent-card.json.{json|txt,headers.txt}      GET /.well-known/agent-card.json
  card/agent.json.legacy-path.{json|txt,headers.txt}  GET /.well-known/agent.json

and then, over JSON-RPC at the URL the card names (the first JSONRPC
interface of the version chosen, or the card's top-level `url`), with the
method names of the protocol version the card says (v1.0: `SendMessage`...
plus the header `A2A-Version: 1.0`; otherwise the v0.3 names `message/send`...
without the header), into <out>/<v1|v03>/:

  01-send                 blocking send of "hi"
  02-get                  get that task
  03-stream               stream "hello stream" (raw SSE body, byte for byte)
  04-get-after-stream     get the streamed task
  05-cancel-completed     cancel the (completed) task of 01
  06-get-after-cancel     get it again
  07-resubscribe-completed  resubscribe to it (stream, bounded to 5 s)
  08-need-input           send "need-input"
  09-followup             send "more input" with the taskId/contextId of 08
  10-get-after-followup   get the task of 08 (and 10b: the task 09 answered, if it is another)
  11..14 (only if the card says pushNotifications): 11-push-need-input
                          (a new need-input task), 12-push-set (config on it,
                          pointing at a local receiver), 13-push-followup,
                          14-get-after-push; deliveries go to webhook.jsonl

Each exchange is NN-name.req.json (request body), NN-name.headers.txt (status
line and response headers), NN-name.resp.json (pretty-printed JSON body) or
NN-name.sse.txt (raw event-stream body) or NN-name.resp.txt (a body that is
not JSON), and NN-name.error.txt when the call itself failed (timeout,
connection error). Every call times out at 10 s. <v1|v03>/capture.log
summarises the run.

Before 05 and before 09 the script polls the task (unrecorded GetTask calls,
listed in capture.log) until it leaves submitted/working, at most 5 s, because
some agents answer a send before the task has run.

With --python-a2a-paths the same steps use Google A2A 0.1 method names
(`tasks/send` with a client-chosen task id and sessionId, `tasks/sendSubscribe`,
`tasks/pushNotification/set`), each POSTed to <endpoint>/<method> (streams to
<endpoint>/tasks/stream): the layout python-a2a serves. Output in <out>/v01-paths/.

With --protocol 0.1 the same Google A2A 0.1 method names are all POSTed to the
one JSON-RPC endpoint (the card's `url`, or --rpc-url): the layout chuk's
a2a-server serves. Output in <out>/v01/.

Usage: python3 capture.py ORIGIN OUTDIR [--protocol auto|0.1|0.3|1.0] [--rpc-url URL] [--python-a2a-paths]
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import socket
import threading
import time
import urllib.parse
import uuid

TIMEOUT = 10.0
RESUBSCRIBE_SECONDS = 5.0
ACTIVE_STATES = {'submitted', 'working', 'TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING', 'unknown'}


class Recorder:
    def __init__(self, out: str) -> None:
        self.out = out
        os.makedirs(out, exist_ok=True)
        self.log_lines: list[str] = []

    def log(self, line: str) -> None:
        print(line, flush=True)
        self.log_lines.append(line)

    def write(self, name: str, data: bytes | str) -> None:
        path = os.path.join(self.out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'wb') as f:
            f.write(data.encode() if isinstance(data, str) else data)

    def flush_log(self) -> None:
        self.write('capture.log', '\n'.join(self.log_lines) + '\n')


def status_and_headers(resp: http.client.HTTPResponse) -> str:
    version = {10: 'HTTP/1.0', 11: 'HTTP/1.1'}.get(resp.version, f'HTTP/{resp.version}')
    lines = [f'{version} {resp.status} {resp.reason}']
    lines += [f'{k}: {v}' for k, v in resp.getheaders()]
    return '\n'.join(lines) + '\n'


def connect(url: str) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == 'https' else http.client.HTTPConnection
    conn = cls(u.hostname, u.port, timeout=TIMEOUT)
    path = u.path or '/'
    if u.query:
        path += '?' + u.query
    return conn, path


def http_get(url: str) -> tuple[int, str, bytes]:
    conn, path = connect(url)
    try:
        conn.request('GET', path, headers={'Accept': 'application/json'})
        resp = conn.getresponse()
        return resp.status, status_and_headers(resp), resp.read()
    finally:
        conn.close()


def save_body(rec: Recorder, stem: str, body: bytes, ext_json: str, ext_raw: str) -> object | None:
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        rec.write(stem + ext_raw, body)
        return None
    rec.write(stem + ext_json, json.dumps(parsed, indent=2, ensure_ascii=False) + '\n')
    return parsed


class Rpc:
    def __init__(self, rec: Recorder, url: str, v1: bool, method_paths: bool = False) -> None:
        self.rec = rec
        self.url = url
        self.v1 = v1
        self.method_paths = method_paths
        self.next_id = 1

    def url_for(self, method: str) -> str:
        """The URL a call goes to: the endpoint, or with --python-a2a-paths <endpoint>/<method path>."""
        if not self.method_paths:
            return self.url
        path = 'tasks/stream' if method in ('tasks/sendSubscribe', 'tasks/resubscribe') else method
        return self.url.rstrip('/') + '/' + path

    def headers(self, stream: bool) -> dict[str, str]:
        h = {'Content-Type': 'application/json', 'Accept': 'text/event-stream' if stream else 'application/json'}
        if self.v1:
            h['A2A-Version'] = '1.0'
        return h

    def body(self, method: str, params: dict) -> dict:
        req = {'jsonrpc': '2.0', 'id': self.next_id, 'method': method, 'params': params}
        self.next_id += 1
        return req

    def call(self, stem: str | None, method: str, params: dict) -> object | None:
        """A JSON-RPC call answered with JSON; recorded under `stem` (unless None)."""
        req = self.body(method, params)
        if stem:
            self.rec.write(stem + '.req.json', json.dumps(req, indent=2, ensure_ascii=False) + '\n')
        conn, path = connect(self.url_for(method))
        try:
            conn.request('POST', path, body=json.dumps(req).encode(), headers=self.headers(False))
            resp = conn.getresponse()
            raw = resp.read()
            head = status_and_headers(resp)
        except Exception as e:  # noqa: BLE001 - recorded as it comes
            if stem:
                self.rec.write(stem + '.error.txt', f'{type(e).__name__}: {e}\n')
                self.rec.log(f'{stem}: {method} -> {type(e).__name__}: {e}')
            return None
        finally:
            conn.close()
        if stem is None:
            try:
                return json.loads(raw)
            except ValueError:
                return None
        self.rec.write(stem + '.headers.txt', head)
        parsed = save_body(self.rec, stem, raw, '.resp.json', '.resp.txt')
        self.rec.log(f'{stem}: {method} -> HTTP {head.splitlines()[0]} {summarize(parsed, raw)}')
        return parsed

    def stream(self, stem: str, method: str, params: dict, limit: float) -> list[object]:
        """A streaming call; the raw body is recorded byte for byte, read for at most `limit` s."""
        req = self.body(method, params)
        self.rec.write(stem + '.req.json', json.dumps(req, indent=2, ensure_ascii=False) + '\n')
        conn, path = connect(self.url_for(method))
        raw = b''
        note = ''
        deadline = time.monotonic() + limit
        try:
            conn.request('POST', path, body=json.dumps(req).encode(), headers=self.headers(True))
            resp = conn.getresponse()
            self.rec.write(stem + '.headers.txt', status_and_headers(resp))
            ctype = resp.getheader('content-type', '')
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    note = f'stopped reading after {limit:g} s (stream still open)'
                    break
                if conn.sock is not None:
                    conn.sock.settimeout(min(left, TIMEOUT))
                try:
                    chunk = resp.read1(65536)
                except (socket.timeout, TimeoutError):
                    note = f'stopped reading after {limit:g} s (stream still open)'
                    break
                if not chunk:
                    note = 'server closed the stream'
                    break
                raw += chunk
        except Exception as e:  # noqa: BLE001
            self.rec.write(stem + '.error.txt', f'{type(e).__name__}: {e}\n')
            note = f'{type(e).__name__}: {e}'
            ctype = ''
        finally:
            conn.close()
        if 'text/event-stream' in ctype or not raw:
            self.rec.write(stem + '.sse.txt', raw)
        else:
            save_body(self.rec, stem, raw, '.resp.json', '.resp.txt')
        events = parse_sse(raw) if 'text/event-stream' in ctype else []
        if not events and raw and 'text/event-stream' not in ctype:
            try:
                events = [json.loads(raw)]
            except ValueError:
                pass
        kinds = [event_kind(e) for e in events]
        self.rec.log(f'{stem}: {method} -> {len(events)} event(s) {kinds}; {note}')
        return events


def parse_sse(raw: bytes) -> list[object]:
    events = []
    for block in raw.replace(b'\r\n', b'\n').split(b'\n\n'):
        data = [line[5:].lstrip() for line in block.split(b'\n') if line.startswith(b'data:')]
        if data:
            try:
                events.append(json.loads(b'\n'.join(data)))
            except ValueError:
                events.append({'unparsed': b'\n'.join(data).decode('utf-8', 'replace')})
    return events


def result_of(answer: object) -> dict | None:
    if isinstance(answer, dict) and isinstance(answer.get('result'), dict):
        return answer['result']
    if isinstance(answer, dict) and 'jsonrpc' not in answer and 'id' in answer and 'status' in answer:
        return answer  # a bare Task as an SSE event (python-a2a)
    if isinstance(answer, dict) and answer.get('method') == 'tasks/event' and isinstance(answer.get('params'), dict):
        return answer['params']  # an SSE event shaped as a JSON-RPC request (chuk's a2a-server)
    return None


def task_of(answer: object) -> dict | None:
    """The Task in a send/get answer (v0.3 bare Task, v1.0 `{"task": ...}`)."""
    r = result_of(answer)
    if r is None:
        return None
    if isinstance(r.get('task'), dict):
        return r['task']
    if 'id' in r and 'status' in r:
        return r
    return None


def event_kind(event: object) -> str:
    r = result_of(event)
    if r is None:
        if isinstance(event, dict) and 'error' in event:
            return f'error {event["error"].get("code") if isinstance(event["error"], dict) else event["error"]}'
        return '?'
    for key in ('task', 'statusUpdate', 'artifactUpdate', 'message'):
        if key in r and 'status' not in r:
            inner = r[key]
            state = inner.get('status', {}).get('state') if isinstance(inner, dict) else None
            return f'{key}' + (f'({state})' if state else '')
    kind = r.get('kind') or r.get('type') or '?'
    state = r.get('status', {}).get('state') if isinstance(r.get('status'), dict) else None
    final = r.get('final')
    return kind + (f'({state})' if state else '') + (f' final={final}' if final is not None else '')


def summarize(parsed: object, raw: bytes) -> str:
    if isinstance(parsed, dict):
        if parsed.get('error') is not None:
            return f'error {json.dumps(parsed["error"])[:200]}'
        task = task_of(parsed)
        if task is not None:
            status = task.get('status', {})
            return f'task {task.get("id")} state={status.get("state")} ts={status.get("timestamp")!r} history={len(task.get("history") or [])}'
        return json.dumps(parsed)[:200]
    return repr(raw[:200])


def ids_from_events(events: list[object]) -> tuple[str | None, str | None]:
    for e in events:
        r = result_of(e)
        if r is None:
            continue
        inner = r
        for key in ('task', 'statusUpdate', 'artifactUpdate', 'message'):
            if isinstance(r.get(key), dict) and 'status' not in r:
                inner = r[key]
                break
        tid = inner.get('taskId') or (inner.get('id') if 'status' in inner else None)
        if tid:
            return tid, inner.get('contextId')
    return None, None


class Protocol:
    def __init__(self, v1: bool, v01: bool = False) -> None:
        self.v1 = v1
        self.v01 = v01
        self.send = 'SendMessage' if v1 else 'message/send'
        self.stream = 'SendStreamingMessage' if v1 else 'message/stream'
        self.get = 'GetTask' if v1 else 'tasks/get'
        self.cancel = 'CancelTask' if v1 else 'tasks/cancel'
        self.subscribe = 'SubscribeToTask' if v1 else 'tasks/resubscribe'
        self.push_set = 'CreateTaskPushNotificationConfig' if v1 else 'tasks/pushNotificationConfig/set'
        if v01:  # Google A2A 0.1 (the first public draft)
            self.send, self.stream, self.push_set = 'tasks/send', 'tasks/sendSubscribe', 'tasks/pushNotification/set'

    def message(self, text: str, task_id: str | None = None, context_id: str | None = None) -> dict:
        if self.v01:
            return {'role': 'user', 'parts': [{'type': 'text', 'text': text}]}
        if self.v1:
            m = {'role': 'ROLE_USER', 'messageId': str(uuid.uuid4()), 'parts': [{'text': text}]}
        else:
            m = {'kind': 'message', 'role': 'user', 'messageId': str(uuid.uuid4()), 'parts': [{'kind': 'text', 'text': text}]}
        if task_id:
            m['taskId'] = task_id
        if context_id:
            m['contextId'] = context_id
        return m

    def send_params(self, text: str, task_id: str | None = None, context_id: str | None = None) -> dict:
        if self.v01:  # 0.1: the client names the task (id) and the session
            return {
                'id': task_id or str(uuid.uuid4()),
                'sessionId': context_id or str(uuid.uuid4()),
                'message': self.message(text),
            }
        config = {'acceptedOutputModes': ['text/plain']}
        config['returnImmediately' if self.v1 else 'blocking'] = False if self.v1 else True
        return {'message': self.message(text, task_id, context_id), 'configuration': config}

    def stream_params(self, text: str) -> dict:
        if self.v01:
            return self.send_params(text)
        return {'message': self.message(text)}

    def push_params(self, task_id: str, url: str) -> dict:
        if self.v01:
            return {'id': task_id, 'pushNotificationConfig': {'url': url, 'token': 'tok-capture'}}
        if self.v1:
            return {'taskId': task_id, 'id': 'cfg-capture', 'url': url, 'token': 'tok-capture'}
        return {'taskId': task_id, 'pushNotificationConfig': {'id': 'cfg-capture', 'url': url, 'token': 'tok-capture'}}


def choose(card: dict | None, protocol: str, rpc_url: str | None, origin: str) -> tuple[bool, str, str]:
    """(v1?, JSON-RPC url, why)."""
    card = card or {}
    interfaces = [i for i in card.get('supportedInterfaces') or [] if isinstance(i, dict)]
    jsonrpc = [i for i in interfaces if i.get('protocolBinding', 'JSONRPC') == 'JSONRPC']
    versions = {str(i.get('protocolVersion', '')) for i in jsonrpc}
    if protocol == 'auto':
        v1 = any(v.startswith('1.') for v in versions)
        why = f'card JSONRPC interface versions {sorted(versions)}, top-level protocolVersion {card.get("protocolVersion")!r}'
    else:
        v1 = protocol.startswith('1')
        why = f'--protocol {protocol}'
        if protocol == '0.1':
            why += ' (Google A2A 0.1 method names, one endpoint)'
    url = rpc_url
    if url is None:
        for i in jsonrpc:
            if str(i.get('protocolVersion', '')).startswith('1.') == v1 and i.get('url'):
                url = i['url']
                break
    if url is None:
        url = card.get('url') or (jsonrpc[0]['url'] if jsonrpc else None) or origin
    return v1, url, why


def start_receiver(path: str) -> tuple[http.server.HTTPServer, str]:
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
            try:
                parsed: object = json.loads(body)
            except ValueError:
                parsed = body.decode('utf-8', 'replace')
            entry = {
                'received_at': time.strftime('%Y-%m-%dT%H:%M:%S%z'),
                'path': self.path,
                'headers': dict(self.headers.items()),
                'body': parsed,
            }
            with lock, open(path, 'a') as f:
                f.write(json.dumps(entry, separators=(',', ':'), ensure_ascii=False) + '\n')
            self.send_response(200)
            self.send_header('Content-Length', '0')
            self.end_headers()

        do_PUT = do_POST  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f'http://127.0.0.1:{server.server_address[1]}'


def wait_settled(rpc: Rpc, proto: Protocol, task_id: str | None, why: str) -> None:
    if not task_id:
        return
    deadline = time.monotonic() + 5
    polls = 0
    state = None
    while time.monotonic() < deadline:
        polls += 1
        task = task_of(rpc.call(None, proto.get, {'id': task_id}))
        state = task.get('status', {}).get('state') if task else None
        if state not in ACTIVE_STATES:
            break
        time.sleep(0.1)
    rpc.rec.log(f'   (waited for {why}: {polls} unrecorded {proto.get} poll(s), state now {state})')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('origin')
    ap.add_argument('out')
    ap.add_argument(
        '--protocol',
        default='auto',
        choices=['auto', '0.1', '0.3', '1.0'],
        help='0.1: Google A2A 0.1 method names (tasks/send, tasks/sendSubscribe, ...) on the one endpoint; output in v01/',
    )
    ap.add_argument('--rpc-url', default=None, help='JSON-RPC endpoint (default: from the card)')
    ap.add_argument(
        '--python-a2a-paths',
        action='store_true',
        help='Google A2A 0.1 method names (tasks/send, tasks/sendSubscribe, ...), each POSTed to '
        '<endpoint>/<method> (streams to <endpoint>/tasks/stream), as python-a2a serves them; output in v01-paths/',
    )
    args = ap.parse_args()
    origin = args.origin.rstrip('/')
    rec = Recorder(args.out)

    card = None
    for well_known, stem in (
        ('/.well-known/agent-card.json', 'card/agent-card.json'),
        ('/.well-known/agent.json', 'card/agent.json.legacy-path'),
    ):
        try:
            status, head, body = http_get(origin + well_known)
        except Exception as e:  # noqa: BLE001
            rec.write(stem + '.error.txt', f'{type(e).__name__}: {e}\n')
            rec.log(f'GET {well_known} -> {type(e).__name__}: {e}')
            continue
        rec.write(stem + '.headers.txt', head)
        parsed = save_body(rec, stem, body, '.json', '.txt')
        rec.log(f'GET {well_known} -> {status}')
        if card is None and status == 200 and isinstance(parsed, dict):
            card = parsed

    v1, url, why = choose(card, args.protocol, args.rpc_url, origin)
    v01 = args.python_a2a_paths or args.protocol == '0.1'
    rec.log(f'protocol: {"1.0" if v1 else "0.1" if args.protocol == "0.1" else "0.3"} ({why}); JSON-RPC url {url}')
    if args.python_a2a_paths:
        v1 = False
        rec.log('protocol override: Google A2A 0.1 method names, one path per method (--python-a2a-paths)')
    sub = 'v01-paths' if args.python_a2a_paths else 'v01' if v01 else 'v1' if v1 else 'v03'
    rpc = Rpc(Recorder(os.path.join(args.out, sub)), url, v1, args.python_a2a_paths)
    rpc.rec.log_lines = rec.log_lines  # one log
    proto = Protocol(v1, v01)

    a1 = rpc.call('01-send', proto.send, proto.send_params('hi'))
    t1 = task_of(a1) or {}
    rpc.call('02-get', proto.get, {'id': t1.get('id', 'missing')})

    events = rpc.stream('03-stream', proto.stream, proto.stream_params('hello stream'), TIMEOUT)
    t3, _ = ids_from_events(events)
    rpc.call('04-get-after-stream', proto.get, {'id': t3 or 'missing'})

    wait_settled(rpc, proto, t1.get('id'), 'task of 01 to finish')
    rpc.call('05-cancel-completed', proto.cancel, {'id': t1.get('id', 'missing')})
    rpc.call('06-get-after-cancel', proto.get, {'id': t1.get('id', 'missing')})
    rpc.stream('07-resubscribe-completed', proto.subscribe, {'id': t1.get('id', 'missing')}, RESUBSCRIBE_SECONDS)

    a8 = rpc.call('08-need-input', proto.send, proto.send_params('need-input'))
    t8 = task_of(a8) or {}
    wait_settled(rpc, proto, t8.get('id'), 'task of 08 to stop')
    a9 = rpc.call('09-followup', proto.send, proto.send_params('more input', t8.get('id'), t8.get('contextId') or t8.get('sessionId')))
    t9 = task_of(a9) or {}
    rpc.call('10-get-after-followup', proto.get, {'id': t8.get('id', 'missing')})
    if t9.get('id') and t9.get('id') != t8.get('id'):
        rpc.rec.log(f'   (09 answered with another task {t9.get("id")}; was {t8.get("id")})')
        wait_settled(rpc, proto, t9.get('id'), 'task of 09 to finish')
        rpc.call('10b-get-followup-task', proto.get, {'id': t9['id']})

    push = bool(((card or {}).get('capabilities') or {}).get('pushNotifications'))
    if push:
        webhook = os.path.join(rpc.rec.out, 'webhook.jsonl')
        if os.path.exists(webhook):
            os.remove(webhook)
        server, base = start_receiver(webhook)
        try:
            a11 = rpc.call('11-push-need-input', proto.send, proto.send_params('need-input'))
            t11 = task_of(a11) or {}
            wait_settled(rpc, proto, t11.get('id'), 'task of 11 to stop')
            rpc.call('12-push-set', proto.push_set, proto.push_params(t11.get('id', 'missing'), f'{base}/webhook'))
            rpc.call('13-push-followup', proto.send, proto.send_params('more input', t11.get('id'), t11.get('contextId') or t11.get('sessionId')))
            wait_settled(rpc, proto, t11.get('id'), 'task of 11 to finish')
            rpc.call('14-get-after-push', proto.get, {'id': t11.get('id', 'missing')})
            time.sleep(2)
        finally:
            server.shutdown()
        n = sum(1 for _ in open(webhook)) if os.path.exists(webhook) else 0
        rpc.rec.log(f'push: {n} delivery(ies) in webhook.jsonl')
    else:
        rpc.rec.log('push: card does not say pushNotifications: true; steps 11-14 skipped')
    rpc.rec.flush_log()


if __name__ == '__main__':
    main()
