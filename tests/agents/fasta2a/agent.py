"""A small, real A2A agent built on FastA2A (PyPI `fasta2a==2.1.1`, pydantic).

FastA2A is an implementation of A2A of its own (starlette + pydantic +
opentelemetry-api; it does not use the official `a2a-sdk`). It exists here
for the integration tests as an independent peer. The agent is built as the
library's README shows: a `FastA2A` app over `InMemoryStorage` and
`InMemoryBroker`, plus a `Worker` of our own started in the app's lifespan,
served by uvicorn. The worker reports through the library's own
`publish_status` / `publish_artifact` and writes the task through
`storage.update_task`; everything on the wire is what FastA2A makes of that.

Behaviour, chosen by the first text part of the user's message:

    any text     submitted -> working -> artifact "echo: <text>" -> completed
    need-input   submitted -> working -> input-required (agent asks for more)

FastA2A always answers `message/send` with the freshly *submitted* task
(it never waits) and gives every message a new task: a follow-up that names
the taskId of the input-required task starts a new task in the same
context, which then runs like any other message (-> completed).
Cancel does what the library's own pydantic-ai bridge does: nothing (the
task keeps its state). FastA2A has no push notifications.

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
import signal
import socket
import sys
import uuid

from collections.abc import AsyncIterator, Generator
from typing import Any

import uvicorn

from fasta2a import FastA2A, Skill, Worker
from fasta2a.broker import InMemoryBroker
from fasta2a.schema import Artifact, Message, Part, TaskIdParams, TaskSendParams
from fasta2a.storage import InMemoryStorage


logger = logging.getLogger('fasta2a-agent')

# FastA2A serves JSON-RPC on POST / and the card on /.well-known/agent-card.json.
JSONRPC_PATH = '/'

WORKING_TEXT = 'Working...'
NEED_INPUT_TEXT = 'Please send the missing input.'

Context = list[Message]


def first_text(message: Message | None) -> str:
    """The first text part of a message ('' if there is none)."""
    if not message:
        return ''
    for part in message.get('parts', []):
        if 'text' in part:
            return part['text']
    return ''


def agent_message(text: str) -> Message:
    return Message(role='agent', parts=[Part(text=text)], message_id=str(uuid.uuid4()))


class EchoWorker(Worker[Context]):
    """Echoes the user's text; `need-input` stops at input-required."""

    async def run_task(self, params: TaskSendParams) -> None:
        task = await self.storage.load_task(params['id'])
        assert task is not None
        task_id, context_id = task['id'], task['context_id']
        text = first_text(params['message'])

        working = agent_message(WORKING_TEXT)
        await self.storage.update_task(task_id, state='working')
        await self.publish_status(task_id, context_id, 'working', working)

        context = await self.storage.load_context(context_id) or []
        context.extend(task.get('history', []))

        if text.strip() == 'need-input':
            ask = agent_message(NEED_INPUT_TEXT)
            context.append(ask)
            await self.storage.update_context(context_id, context)
            # The worker base class publishes the final state read back from
            # storage and closes the stream.
            await self.storage.update_task(task_id, state='input-required', new_messages=[ask])
            return

        reply = agent_message(f'echo: {text}')
        context.append(reply)
        await self.storage.update_context(context_id, context)
        artifacts = self.build_artifacts(f'echo: {text}')
        for artifact in artifacts:
            await self.publish_artifact(task_id, context_id, artifact)
        await self.storage.update_task(task_id, state='completed', new_messages=[reply], new_artifacts=artifacts)

    async def cancel_task(self, params: TaskIdParams) -> None:
        # As the library's own pydantic-ai bridge does: nothing.
        logger.info('task %s: cancel requested (no-op)', params['id'])

    def build_message_history(self, history: list[Message]) -> list[Any]:
        return list(history)

    def build_artifacts(self, result: Any) -> list[Artifact]:
        return [Artifact(artifact_id=str(uuid.uuid4()), name='response', parts=[Part(text=str(result))])]


def build_app(card_base_url: str) -> FastA2A:
    storage: InMemoryStorage[Context] = InMemoryStorage()
    broker = InMemoryBroker()
    worker = EchoWorker(storage=storage, broker=broker)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastA2A) -> AsyncIterator[None]:
        async with app.task_manager:
            async with worker.run():
                yield

    return FastA2A(
        storage=storage,
        broker=broker,
        name='FastA2A Agent',
        url=f'{card_base_url}{JSONRPC_PATH}',
        version='1.0.0',
        description='Test agent built on FastA2A 2.1.1: echo, need-input.',
        skills=[
            Skill(
                id='echo',
                name='Echo',
                description='Echoes the text; "need-input" asks for more input.',
                tags=['test'],
                examples=['hi', 'need-input'],
            )
        ],
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        lifespan=lifespan,
    )


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
    asyncio.run(serve(args.host, args.port, args.public_url))


if __name__ == '__main__':
    main()
