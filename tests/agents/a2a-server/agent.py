"""A small, real A2A agent built on chuk's a2a-server (PyPI `a2a-server==0.6.1`).

a2a-server (by Chris Hay, "chuk") is an implementation of Google's early A2A
protocol of its own: FastAPI + its sibling package `a2a-json-rpc` (JSON-RPC
layer and pydantic models of the 0.1/0.2 spec); it does not use the official
`a2a-sdk`. It exists here for the integration tests as an independent,
*legacy-shaped* peer. The agent's handler is written like the library's own
`EchoHandler` (a `TaskHandler` subclass whose async-generator `process_task`
yields `TaskStatusUpdateEvent` / `TaskArtifactUpdateEvent`) and is passed to
the library's app factory `a2a_server.app.create_app(handlers=[...],
handlers_config=...)` (as the test fixture in its README calls it), served by
uvicorn. Everything on the wire (routes, card, task store, SSE) is the
library's; the only card setting is the library's own `agent_card.url`
option (for --public-url).

Behaviour, chosen by the first text part of the user's message:

    any text     submitted -> working -> artifact "echo: <text>" -> completed
    need-input   submitted -> working -> input-required (no status message:
                 a2a-json-rpc 0.3.0 only lets TaskStatus.message be null)

a2a-server answers `tasks/send` with the freshly *submitted* task (it never
waits) and creates a new task for every send (the client's `id` is ignored by
`tasks/send`), so a follow-up runs like any other message (-> completed).

Wire layout (the library's): JSON-RPC 0.1/0.2 method names (`tasks/send`,
`tasks/get`, `tasks/cancel`, `tasks/sendSubscribe`, `tasks/resubscribe`) at
`POST /echo` (the card's `url`; SSE for `tasks/sendSubscribe` only there),
`POST /echo/rpc` and `POST /rpc` (JSON only). Card at
`/.well-known/agent.json`, `/agent-card.json`, `/echo/.well-known/agent.json`
and `/echo/agent-card.json`; `/.well-known/agent-card.json` is 404.

Usage:

    python agent.py [--host 127.0.0.1] [--port 0] [--public-url URL]

The agent binds its own socket (port 0 picks a free port), prints exactly one
line ``READY http://<host>:<port>`` on stdout once it accepts connections and
runs until SIGTERM/SIGINT, on which it shuts down and exits with status 0.
Everything else (logs) goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from typing import AsyncIterable, Generator

# Keep the library's optional extras off whatever the environment says:
# no OTLP/console/Prometheus metrics exporters, in-memory sessions only.
for _var in ('OTEL_EXPORTER_OTLP_ENDPOINT', 'PROMETHEUS_METRICS', 'CONSOLE_METRICS', 'A2A_ADMIN_TOKEN', 'DEBUG_A2A'):
    os.environ.pop(_var, None)
os.environ['SESSION_PROVIDER'] = 'memory'

import uvicorn  # noqa: E402
from a2a_json_rpc.spec import (  # noqa: E402
    Artifact,
    Message,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    TextPart,
)
from a2a_server.app import create_app  # noqa: E402
from a2a_server.tasks.handlers.task_handler import TaskHandler  # noqa: E402


logger = logging.getLogger('a2a-server-agent')

HANDLER = 'echo'


def first_text(message: Message | None) -> str:
    for part in (message.parts if message else None) or []:
        data = part.model_dump(exclude_none=True)
        if isinstance(data.get('text'), str):
            return data['text']
    return ''


class EchoAgentHandler(TaskHandler):
    """echo / need-input, reported through the library's task events."""

    @property
    def name(self) -> str:
        return HANDLER

    async def process_task(
        self, task_id: str, message: Message, session_id: str | None = None
    ) -> AsyncIterable[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
        yield TaskStatusUpdateEvent(id=task_id, status=TaskStatus(state=TaskState.working), final=False)
        await asyncio.sleep(0.05)  # let a streaming client see "working" first
        text = first_text(message)
        if text.strip() == 'need-input':
            # a2a-json-rpc 0.3.0's TaskStatus types `message` as None (only
            # None validates), so the state carries no question for the user.
            yield TaskStatusUpdateEvent(id=task_id, status=TaskStatus(state=TaskState.input_required), final=False)
            return
        artifact = Artifact(name='echo', parts=[TextPart(type='text', text=f'echo: {text}')], index=0)
        yield TaskArtifactUpdateEvent(id=task_id, artifact=artifact)
        yield TaskStatusUpdateEvent(id=task_id, status=TaskStatus(state=TaskState.completed), final=True)


def build_app(card_base_url: str):
    handlers_config = {
        HANDLER: {
            'agent_card': {
                'name': 'a2a-server Agent',
                'description': 'Test agent built on a2a-server 0.6.1: echo, need-input.',
                'version': '1.0.0',
                # The library's own option for the card's url (default: the
                # request's base URL + /<handler>).
                'url': f'{card_base_url}/{HANDLER}',
            }
        }
    }
    return create_app(handlers=[EchoAgentHandler()], handlers_config=handlers_config)


class _Server(uvicorn.Server):
    """uvicorn.Server whose SIGTERM/SIGINT only trigger a graceful exit (status 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        sys.exit(f'cannot bind {host}:{port}: {e}')  # exit status 1
    return sock


async def serve(host: str, port: int, public_url: str | None) -> None:
    sock = bind_socket(host, port)
    port = sock.getsockname()[1]
    base_url = f'http://{host}:{port}'
    app = build_app((public_url or base_url).rstrip('/'))
    config = uvicorn.Config(app, log_config=None, timeout_graceful_shutdown=5)
    server = _Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving
            return
        await asyncio.sleep(0.01)
    logger.info('serving on %s', base_url)
    print(f'READY {base_url}', flush=True)
    await serving
    logger.info('stopped')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0, help='0 picks a free port')
    parser.add_argument('--public-url', default=None, help='the origin the card names (default: http://<host>:<port>)')
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format='%(asctime)s %(levelname)s %(name)s: %(message)s')
    # The library's modules log at DEBUG with emoji on every request; keep INFO.
    logging.getLogger('a2a_server').setLevel(logging.INFO)
    asyncio.run(serve(args.host, args.port, args.public_url))


if __name__ == '__main__':
    main()
