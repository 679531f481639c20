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

With --grpc-only the agent speaks A2A only over the gRPC binding
(``lf.a2a.v1.A2AService``, protocol version 1.0): the same executor, handler,
task store and push sender, served by the SDK's GrpcHandler on grpc.aio. The
card (signed as always) then lists one interface, ``GRPC`` 1.0 at
``http://<host>:<port>``, the card's own origin: a small asyncio front on the
one public port sends each connection that starts with the HTTP/2 client
preface to the gRPC server and all others to uvicorn (card and JWKS only),
both on internal loopback ports.

With --security JSON the card declares security schemes and requirements,
given in the A2A v1.0 proto-JSON shape:

    {"securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
     "securityRequirements": [{"schemes": {"bearer": {"list": []}}}]}

With --extended-card the card says it has an authenticated extended card
(``capabilities.extendedAgentCard``; v0.3 ``supportsAuthenticatedExtendedCard``)
and the SDK's handler serves one (GetExtendedAgentCard on every binding): the
same card, signed on its own, with one more skill and a description saying
it is what authenticated callers see. Like the schemes, access to it is
whatever sits in front of the agent.

They are parsed into the SDK's own AgentCard proto (json_format.ParseDict)
before the card is signed, so the signature covers them and the SDK's
hybrid card also renders them in v0.3 form (``securitySchemes`` entries get
``type`` etc., plus ``security``). The agent enforces none of them: whatever
sits in front of it does.

Usage:

    python agent.py [--host 127.0.0.1] [--port 0] [--slow-seconds 30] [--public-url URL] [--grpc-only]
                    [--grpc-compression gzip|deflate] [--security JSON] [--extended-card]

--grpc-compression sets the gRPC server's default compression, as an operator
can: gRPC compresses an answer only with an algorithm the caller accepts.

The agent binds its own socket (port 0 picks a free port), prints exactly one
line ``READY http://<host>:<port>`` on stdout once it accepts connections and
runs until SIGTERM/SIGINT, on which it shuts down and exits with status 0.
Everything else (logs) goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys

from collections.abc import AsyncIterator, Generator
from typing import Any

import grpc
import httpx
import uvicorn

from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from jwt.algorithms import ECAlgorithm
from jwt.api_jwk import PyJWK
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from a2a.compat.v0_3.conversions import to_compat_security_scheme
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.grpc_handler import GrpcHandler
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
    a2a_pb2_grpc,
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


def parse_security(text: str) -> AgentCard:
    """Parses --security into an AgentCard holding only its security fields.

    The JSON is ``{"securitySchemes": {...}, "securityRequirements": [...]}``
    in A2A v1.0 proto-JSON; protobuf's own parser rejects unknown or misspelt
    fields. Raises ValueError on anything the card could not carry.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f'--security is not JSON: {e}') from e
    if not isinstance(data, dict):
        raise ValueError('--security must be a JSON object')
    extra = set(data) - {'securitySchemes', 'securityRequirements'}
    if extra:
        raise ValueError(f'--security: unknown member(s) {", ".join(sorted(extra))}')
    security = AgentCard()
    try:
        json_format.ParseDict(data, security)
    except json_format.ParseError as e:
        raise ValueError(f'--security: {e}') from e
    for name, scheme in security.security_schemes.items():
        if scheme.WhichOneof('scheme') is None:
            raise ValueError(f'--security: securitySchemes.{name} names no scheme')
        try:
            # What the SDK's hybrid card does with it (e.g. an apiKey
            # location outside query/header/cookie would fail every request).
            to_compat_security_scheme(scheme)
        except ValueError as e:
            raise ValueError(
                f'--security: securitySchemes.{name} has no v0.3 form: {e}'
            ) from e
    for i, requirement in enumerate(security.security_requirements):
        for name in requirement.schemes:
            if name not in security.security_schemes:
                raise ValueError(
                    f'--security: securityRequirements[{i}] names the '
                    f'undeclared scheme {name}'
                )
    return security


def build_agent_card(
    base_url: str, grpc_only: bool = False, security: AgentCard | None = None
) -> AgentCard:
    """The (unsigned) card; every URL in it is absolute.

    `security` (from parse_security) adds its security schemes and
    requirements.
    """
    if grpc_only:
        # gRPC routes by its own path (/lf.a2a.v1.A2AService/<Method>), so
        # the interface names just the origin the card is served from.
        interfaces = [
            AgentInterface(
                url=base_url,
                protocol_binding=TransportProtocol.GRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ]
    else:
        jsonrpc_url = f'{base_url}{JSONRPC_PATH}'
        interfaces = [
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
        ]
    card = AgentCard(
        name='Python SDK Agent',
        description=(
            'Test agent built on the official Python SDK, a2a-sdk 1.3.0: '
            'echo, need-input, slow, fail.'
        ),
        version='1.0.0',
        supported_interfaces=interfaces,
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
    if security is not None:
        card.MergeFrom(security)
    return card


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


def build_extended_card(card: AgentCard) -> AgentCard:
    """The card authenticated callers see: `card` with one more skill."""
    extended = AgentCard()
    extended.CopyFrom(card)
    extended.description = (
        f'{card.description} As authenticated callers see it.'
    )
    extended.skills.append(
        AgentSkill(
            id='audit',
            name='Audit',
            description='Shown to authenticated callers only.',
            tags=['test'],
        )
    )
    return extended


def build_app(
    base_url: str,
    slow_seconds: float,
    grpc_only: bool = False,
    security: AgentCard | None = None,
    extended_card: bool = False,
) -> tuple[Starlette, DefaultRequestHandler]:
    """Wires the SDK components into a Starlette app.

    Returns the app and the request handler behind it. With `grpc_only` the
    app serves only the card and the JWKS; the caller serves the handler
    over gRPC. Either way the app's lifespan closes the handler.
    """
    signing_key, public_jwk = generate_signing_key()
    unsigned = build_agent_card(base_url, grpc_only, security)
    extended = None
    if extended_card:
        unsigned.capabilities.extended_agent_card = True
        extended = sign_agent_card(
            build_extended_card(unsigned), signing_key, f'{base_url}{JWKS_PATH}'
        )
    card = sign_agent_card(unsigned, signing_key, f'{base_url}{JWKS_PATH}')
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
        extended_agent_card=extended,
    )

    async def get_jwks(_request: Request) -> JSONResponse:
        return JSONResponse(jwks)

    routes: list[BaseRoute] = [
        *create_agent_card_routes(card),  # /.well-known/agent-card.json
        *create_agent_card_routes(card, card_url=LEGACY_AGENT_CARD_PATH),
        Route(JWKS_PATH, endpoint=get_jwks, methods=['GET']),
    ]
    if not grpc_only:
        routes += [
            *create_jsonrpc_routes(
                handler, rpc_url=JSONRPC_PATH, enable_v0_3_compat=True
            ),
            # Must stay last: besides its own routes, create_rest_routes adds
            # a catch-all Mount('/{tenant}') (for tenant-prefixed REST paths)
            # that would otherwise swallow every path listed after it.
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

    return Starlette(routes=routes, lifespan=lifespan), handler


class _Server(uvicorn.Server):
    """uvicorn.Server that exits with status 0 on SIGTERM/SIGINT.

    uvicorn's own capture_signals() re-raises the captured signal after the
    graceful shutdown, which makes the process die of SIGTERM (or raise
    KeyboardInterrupt). Here the signal only triggers the graceful shutdown.
    With `handle_signals=False` (--grpc-only) it leaves the signals alone:
    serve_grpc_only() handles them and stops this server itself.
    """

    def __init__(
        self, config: uvicorn.Config, *, handle_signals: bool = True
    ) -> None:
        super().__init__(config)
        self._handle_signals = handle_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if not self._handle_signals:
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket; exits with status 1 if busy."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        sys.exit(f'cannot bind {host}:{port}: {e}')  # exit status 1
    return sock


async def start_uvicorn(
    app: Starlette, sock: socket.socket, *, handle_signals: bool = True
) -> tuple[_Server, asyncio.Task[None]] | None:
    """Starts uvicorn on `sock`; None if its startup failed."""
    config = uvicorn.Config(
        app,
        log_config=None,  # keep uvicorn's logs (incl. access log) on stderr
        timeout_graceful_shutdown=5,
    )
    server = _Server(config, handle_signals=handle_signals)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():  # startup failed
            await serving
            return None
        await asyncio.sleep(0.01)
    return server, serving


async def serve(
    host: str,
    port: int,
    slow_seconds: float,
    public_url: str | None,
    grpc_only: bool = False,
    grpc_compression: str | None = None,
    security: AgentCard | None = None,
    extended_card: bool = False,
) -> None:
    # Bind first, so that the card can carry the real port when port is 0.
    sock = bind_socket(host, port)
    port = sock.getsockname()[1]
    base_url = f'http://{host}:{port}'
    # Behind a reverse proxy, the card names the proxy's origin (as a deployed agent's would).
    card_base_url = (public_url or base_url).rstrip('/')

    if grpc_only:
        await serve_grpc_only(
            sock,
            base_url,
            card_base_url,
            slow_seconds,
            grpc_compression,
            security,
            extended_card,
        )
        return

    app, _handler = build_app(
        card_base_url, slow_seconds, security=security, extended_card=extended_card
    )
    started = await start_uvicorn(app, sock)
    if started is None:
        return
    _server, serving = started

    logger.info('serving on %s (slow=%ss)', base_url, slow_seconds)
    print(f'READY {base_url}', flush=True)
    await serving
    logger.info('stopped')


# --------------------------------------------------------------------------
# --grpc-only: the card over HTTP/1.1 and gRPC, on one port
# --------------------------------------------------------------------------

# Every gRPC client opens its (cleartext, prior-knowledge) HTTP/2 connection
# with this preface (RFC 9113, section 3.4); no HTTP/1.x request starts so.
H2_PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
INTERNAL_HOST = '127.0.0.1'  # where the gRPC server and uvicorn listen
SNIFF_TIMEOUT = 10.0  # seconds a new connection has to send its first bytes
SPLICE_CHUNK = 64 * 1024
GRPC_SHUTDOWN_GRACE = 2.0  # seconds running RPCs get on shutdown


async def _sniff(reader: asyncio.StreamReader) -> bytes:
    """Reads the first bytes: the H2 preface, or as soon as they cannot be.

    Reads at most len(H2_PREFACE) (24) bytes; fewer at EOF.
    """
    head = b''
    while len(head) < len(H2_PREFACE) and H2_PREFACE.startswith(head):
        chunk = await reader.read(len(H2_PREFACE) - len(head))
        if not chunk:
            break
        head += chunk
    return head


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Copies `reader` to `writer` until EOF, then half-closes `writer`."""
    while chunk := await reader.read(SPLICE_CHUNK):
        writer.write(chunk)
        await writer.drain()
    if writer.can_write_eof() and not writer.is_closing():
        writer.write_eof()


class Front:
    """Hands each connection on the public port to gRPC or to uvicorn.

    Connections starting with the HTTP/2 preface go to the gRPC server,
    all others to uvicorn (card routes); both listen on loopback ports of
    their own, and the front copies the bytes both ways.
    """

    def __init__(self, http_port: int, grpc_port: int) -> None:
        self._http_port = http_port
        self._grpc_port = grpc_port
        self._connections: set[asyncio.Task[Any]] = set()

    async def handle(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """asyncio.start_server callback: one client connection."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._splice(reader, writer)
        except (OSError, asyncio.TimeoutError) as e:
            logger.debug('front: connection ended: %r', e)
        except asyncio.CancelledError:
            # Cut by close(). Not re-raised: Python 3.11's start_server logs
            # a callback task that ends cancelled as an error.
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _splice(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await asyncio.wait_for(_sniff(reader), SNIFF_TIMEOUT)
        if not head:
            return
        port = self._grpc_port if head == H2_PREFACE else self._http_port
        up_reader, up_writer = await asyncio.open_connection(
            INTERNAL_HOST, port
        )
        up_writer.write(head)
        pumps = [
            asyncio.create_task(_pump(reader, up_writer)),
            asyncio.create_task(_pump(up_reader, writer)),
        ]
        try:
            await asyncio.gather(*pumps)
        finally:
            for pump in pumps:
                pump.cancel()
            up_writer.close()

    async def close(self) -> None:
        """Cuts all spliced connections."""
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)


async def serve_grpc_only(
    sock: socket.socket,
    base_url: str,
    card_base_url: str,
    slow_seconds: float,
    compression: str | None = None,
    security: AgentCard | None = None,
    extended_card: bool = False,
) -> None:
    """Serves the card (HTTP/1.1) and A2A over gRPC on the one socket `sock`."""
    app, handler = build_app(
        card_base_url,
        slow_seconds,
        grpc_only=True,
        security=security,
        extended_card=extended_card,
    )

    # The SDK's servicer for lf.a2a.v1.A2AService, over the same handler.
    algorithm = {
        None: grpc.Compression.NoCompression,
        'gzip': grpc.Compression.Gzip,
        'deflate': grpc.Compression.Deflate,
    }[compression]
    grpc_server = grpc.aio.server(compression=algorithm)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(
        GrpcHandler(handler), grpc_server
    )
    grpc_port = grpc_server.add_insecure_port(f'{INTERNAL_HOST}:0')
    await grpc_server.start()

    http_sock = bind_socket(INTERNAL_HOST, 0)
    http_port = http_sock.getsockname()[1]
    started = await start_uvicorn(app, http_sock, handle_signals=False)
    if started is None:
        await grpc_server.stop(None)
        return
    server, serving = started

    front = Front(http_port=http_port, grpc_port=grpc_port)
    listener = await asyncio.start_server(front.handle, sock=sock)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    logger.info(
        'serving gRPC and the card on %s (internal: grpc %s, http %s; '
        'slow=%ss)',
        base_url,
        grpc_port,
        http_port,
        slow_seconds,
    )
    print(f'READY {base_url}', flush=True)
    try:
        await stop.wait()
    finally:
        logger.info('shutting down')
        listener.close()
        await grpc_server.stop(GRPC_SHUTDOWN_GRACE)
        await front.close()
        # uvicorn's lifespan closes the request handler and the push client.
        server.should_exit = True
        await serving
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
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
    parser.add_argument(
        '--grpc-only',
        action='store_true',
        help=(
            'serve A2A only over gRPC (lf.a2a.v1.A2AService), on the same '
            'port as the card'
        ),
    )
    parser.add_argument(
        '--grpc-compression',
        choices=['gzip', 'deflate'],
        default=None,
        help="the gRPC server's default compression (with --grpc-only)",
    )
    parser.add_argument(
        '--security',
        metavar='JSON',
        default=None,
        help=(
            'security schemes and requirements the card declares, in A2A '
            'v1.0 proto-JSON: {"securitySchemes": {NAME: SecurityScheme}, '
            '"securityRequirements": [{"schemes": {NAME: {"list": '
            '[SCOPE, ...]}}}]} (signed with the card; not enforced by the '
            'agent)'
        ),
    )
    parser.add_argument(
        '--extended-card',
        action='store_true',
        help='serve an authenticated extended card (see above)',
    )
    args = parser.parse_args()
    security = None
    if args.security is not None:
        try:
            security = parse_security(args.security)
        except ValueError as e:
            parser.error(str(e))  # exit status 2

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format='%(asctime)s %(levelname)s %(name)s: %(message)s',
    )
    asyncio.run(
        serve(
            args.host,
            args.port,
            args.slow_seconds,
            args.public_url,
            args.grpc_only,
            args.grpc_compression,
            security,
            args.extended_card,
        )
    )


if __name__ == '__main__':
    main()
