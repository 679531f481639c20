"""A small, real A2A agent built on the official Python SDK (a2a-sdk 1.3.0).

It exists for the integration tests: it serves a signed agent card, the
JSON-RPC binding in protocol versions 1.0 and 0.3 (the SDK's compatibility
layer) on one URL, the HTTP+JSON 1.0 binding, and push notifications. All
behaviour comes from the SDK's own building blocks (DefaultRequestHandler,
InMemoryTaskStore, TaskUpdater, BasePushNotificationSender, the card routes
and a2a.utils.signing); the agent only decides which states to emit.

Behaviour, chosen by the first text part of the user's message:

    any text     submitted -> working -> artifact "echo: <text>" -> completed
    need-input   submitted -> working -> input-required (agent asks for more);
                 a follow-up on the same task (taskId + contextId) is handled
                 like any other message: working -> artifact -> completed
    slow         submitted -> working, completes after --slow-seconds;
                 cancelable (CancelTask / tasks/cancel -> canceled)
    fail         submitted -> working -> failed

Usage:

    python agent.py [--host 127.0.0.1] [--port 0] [--slow-seconds 30] [--public-url URL]

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

from collections.abc import AsyncIterator, Generator
from typing import Any

import httpx
import uvicorn

from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm
from jwt.api_jwk import PyJWK
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
)
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
    TransportProtocol,
)
from a2a.utils.signing import create_agent_card_signer


logger = logging.getLogger('python-sdk-agent')

# Paths served by this agent.
JSONRPC_PATH = '/a2a/jsonrpc'
REST_PATH = '/a2a/rest'
LEGACY_AGENT_CARD_PATH = '/.well-known/agent.json'  # pre-0.3 card location
JWKS_PATH = '/.well-known/jwks.json'

# Card signing: ES256 over a P-256 key generated at every start.
SIGNING_KEY_ID = 'python-agent-key-1'
SIGNING_ALG = 'ES256'

# Texts the agent puts in its status messages (same as the recorded fixtures).
WORKING_TEXT = 'Working...'
NEED_INPUT_TEXT = 'Please send the missing input.'
FAIL_TEXT = 'Failed on purpose.'


# --------------------------------------------------------------------------
# Agent logic
# --------------------------------------------------------------------------


def first_text(message: Message | None) -> str:
    """Returns the first text part of a message ('' if there is none)."""
    if message is None:
        return ''
    for part in message.parts:
        if part.HasField('text'):
            return part.text
    return ''


class EchoAgentExecutor(AgentExecutor):
    """Echoes the user's text; `need-input`, `slow` and `fail` are special.

    States are emitted only through the SDK's helpers (the initial Task from
    `new_task_from_user_message`, then `TaskUpdater`), so whatever timestamps
    and history the responses carry are what the SDK itself produces.
    """

    def __init__(self, slow_seconds: float) -> None:
        self._slow_seconds = slow_seconds

    async def execute(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        message = context.message
        text = first_text(message)
        command = text.strip()

        # The SDK requires a Task as the first event of a new task. For a
        # follow-up (message carrying the taskId of an existing task) the
        # SDK has loaded that task into the context and we continue it.
        task = context.current_task
        if task is None:
            if message is None:
                raise ValueError('execute() called without a message')
            task = new_task_from_user_message(message)  # state: submitted
            await event_queue.enqueue_event(task)

        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work(
            updater.new_agent_message([new_text_part(WORKING_TEXT)])
        )

        if command == 'need-input':
            # Interrupted state: return and let the SDK wait for a follow-up.
            await updater.requires_input(
                updater.new_agent_message([new_text_part(NEED_INPUT_TEXT)])
            )
            return

        if command == 'fail':
            await updater.failed(
                updater.new_agent_message([new_text_part(FAIL_TEXT)])
            )
            return

        if command == 'slow':
            # On cancel the SDK calls cancel() below and then cancels this
            # coroutine, which raises CancelledError out of the sleep.
            logger.info(
                'task %s: slow, sleeping %ss', task.id, self._slow_seconds
            )
            await asyncio.sleep(self._slow_seconds)

        await updater.add_artifact(
            [new_text_part(f'echo: {text}')],
            name='response',
            last_chunk=True,
        )
        await updater.complete()

    async def cancel(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        # Called by the SDK before it cancels the running execute().
        logger.info('task %s: cancel requested', context.task_id)
        updater = TaskUpdater(
            event_queue, context.task_id or '', context.context_id or ''
        )
        await updater.cancel()


# --------------------------------------------------------------------------
# Agent card, signing and JWKS
# --------------------------------------------------------------------------


def build_agent_card(base_url: str) -> AgentCard:
    """The (unsigned) card; every URL in it is absolute."""
    jsonrpc_url = f'{base_url}{JSONRPC_PATH}'
    return AgentCard(
        name='Python SDK Agent',
        description=(
            'Test agent built on the official Python SDK, a2a-sdk 1.3.0: '
            'echo, need-input, slow, fail.'
        ),
        version='1.0.0',
        supported_interfaces=[
            # The first 0.3 interface also becomes the legacy top-level
            # url/preferredTransport/protocolVersion of the served card.
            AgentInterface(
                url=jsonrpc_url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            ),
            AgentInterface(
                url=jsonrpc_url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_0_3,
            ),
            AgentInterface(
                url=f'{base_url}{REST_PATH}',
                protocol_binding=TransportProtocol.HTTP_JSON.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            ),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[
            AgentSkill(
                id='echo',
                name='Echo',
                description=(
                    'Echoes the text; "need-input", "slow" and "fail" are '
                    'special.'
                ),
                tags=['test'],
                examples=['hi', 'need-input', 'slow', 'fail'],
            )
        ],
    )


def generate_signing_key() -> tuple[PyJWK, dict[str, Any]]:
    """A fresh P-256 key: (private PyJWK for signing, public JWK for JWKS)."""
    private_key = ec.generate_private_key(ec.SECP256R1())
    key_params = {'kid': SIGNING_KEY_ID, 'alg': SIGNING_ALG, 'use': 'sig'}
    private_jwk = ECAlgorithm.to_jwk(private_key, as_dict=True) | key_params
    public_jwk = (
        ECAlgorithm.to_jwk(private_key.public_key(), as_dict=True) | key_params
    )
    return PyJWK(private_jwk, algorithm=SIGNING_ALG), public_jwk


def sign_agent_card(card: AgentCard, signing_key: PyJWK, jku: str) -> AgentCard:
    """Signs the card in place with the SDK's signer (JWS over JCS)."""
    signer = create_agent_card_signer(
        signing_key=signing_key,
        protected_header={
            'alg': SIGNING_ALG,
            'kid': SIGNING_KEY_ID,
            'jku': jku,
            'typ': 'JOSE',
        },
    )
    return signer(card)


# --------------------------------------------------------------------------
# Application
# --------------------------------------------------------------------------


def build_app(base_url: str, slow_seconds: float) -> Starlette:
    """Wires the SDK components into a Starlette app."""
    signing_key, public_jwk = generate_signing_key()
    card = sign_agent_card(
        build_agent_card(base_url), signing_key, f'{base_url}{JWKS_PATH}'
    )
    jwks = {'keys': [public_jwk]}

    # Push notifications: configs in memory, delivered by the SDK's sender.
    # No push_url_validator anywhere, so loopback receivers are allowed.
    push_client = httpx.AsyncClient()
    push_config_store = InMemoryPushNotificationConfigStore()
    push_sender = BasePushNotificationSender(
        httpx_client=push_client, config_store=push_config_store
    )

    handler = DefaultRequestHandler(
        agent_executor=EchoAgentExecutor(slow_seconds),
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=push_config_store,
        push_sender=push_sender,
    )

    async def get_jwks(_request: Request) -> JSONResponse:
        return JSONResponse(jwks)

    routes: list[BaseRoute] = [
        *create_agent_card_routes(card),  # /.well-known/agent-card.json
        *create_agent_card_routes(card, card_url=LEGACY_AGENT_CARD_PATH),
        Route(JWKS_PATH, endpoint=get_jwks, methods=['GET']),
        *create_jsonrpc_routes(
            handler, rpc_url=JSONRPC_PATH, enable_v0_3_compat=True
        ),
        # Must stay last: besides its own routes, create_rest_routes adds a
        # catch-all Mount('/{tenant}') (for tenant-prefixed REST paths) that
        # would otherwise swallow every path listed after it.
        *create_rest_routes(handler, path_prefix=REST_PATH),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            # Drain/cancel running tasks (e.g. a pending `slow`), then close
            # the push client.
            await handler.aclose()
            await push_client.aclose()

    return Starlette(routes=routes, lifespan=lifespan)


class _Server(uvicorn.Server):
    """uvicorn.Server that exits with status 0 on SIGTERM/SIGINT.

    uvicorn's own capture_signals() re-raises the captured signal after the
    graceful shutdown, which makes the process die of SIGTERM (or raise
    KeyboardInterrupt). Here the signal only triggers the graceful shutdown.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


async def serve(
    host: str, port: int, slow_seconds: float, public_url: str | None
) -> None:
    # Bind first, so that the card can carry the real port when port is 0.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        sys.exit(f'cannot bind {host}:{port}: {e}')  # exit status 1
    port = sock.getsockname()[1]
    base_url = f'http://{host}:{port}'

    # Behind a reverse proxy, the card names the proxy's origin (as a deployed agent's would).
    app = build_app((public_url or base_url).rstrip('/'), slow_seconds)
    config = uvicorn.Config(
        app,
        log_config=None,  # keep uvicorn's logs (incl. access log) on stderr
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)

    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():  # startup failed
            await serving
            return
        await asyncio.sleep(0.01)

    logger.info('serving on %s (slow=%ss)', base_url, slow_seconds)
    print(f'READY {base_url}', flush=True)
    await serving
    logger.info('stopped')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument(
        '--port', type=int, default=0, help='0 picks a free port'
    )
    parser.add_argument(
        '--slow-seconds',
        type=float,
        default=30.0,
        help='how long a `slow` task works before completing',
    )
    parser.add_argument(
        '--public-url',
        default=None,
        help='the origin the card names (default: http://<host>:<port>)',
    )
    args = parser.parse_args()

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format='%(asctime)s %(levelname)s %(name)s: %(message)s',
    )
    asyncio.run(serve(args.host, args.port, args.slow_seconds, args.public_url))


if __name__ == '__main__':
    main()
