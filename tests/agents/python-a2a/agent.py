"""A small, real A2A agent built on python-a2a (PyPI `python-a2a==0.5.10`).

python-a2a is an implementation of its own of Google's early A2A protocol
(Flask; it does not use the official `a2a-sdk`). It exists here for the
integration tests as an independent, *legacy-shaped* peer. The agent is built
as the library's README shows ("Create a Simple A2A Agent with Skills"): an
`A2AServer` subclass decorated with `@agent` / `@skill` that overrides
`handle_task`, setting `task.artifacts` and `task.status` itself. The Flask
app is the library's own `create_flask_app(agent)` (what `run_server` runs);
only the serving differs: werkzeug's threaded server on a socket the agent
bound itself (for --port 0), instead of `app.run`.

Behaviour, chosen by the first text part of the user's message:

    any text     completed with artifact "echo: <text>"
    need-input   input-required (agent asks for more); a follow-up with the
                 same task id is handled like any other message -> completed

python-a2a has no working/submitted phases of its own: `handle_task` runs
inside the request and its answer is the task's only state.

Wire layout (the library's, not the spec's): one path per method with a
JSON-RPC envelope whose `method` is not read (`POST /tasks/send`,
`/tasks/get`, `/tasks/cancel`, `/tasks/stream` for `tasks/sendSubscribe` and
`tasks/resubscribe`; also under `/a2a/...`). `POST /` and `POST /a2a` take a
bare message, not JSON-RPC. Card at `/.well-known/agent-card.json`,
`/.well-known/agent.json`, `/agent.json` and `/a2a/agent.json`.

Usage:

    python agent.py [--host 127.0.0.1] [--port 0] [--public-url URL]

The agent binds its own socket (port 0 picks a free port), prints exactly one
line ``READY http://<host>:<port>`` on stdout once it accepts connections and
runs until SIGTERM/SIGINT, on which it exits with status 0. Everything else
(logs, and the library's own prints) goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import threading

from python_a2a import A2AServer, TaskState, TaskStatus, agent, skill
from python_a2a.server.http import create_flask_app
from werkzeug.serving import make_server


logger = logging.getLogger('python-a2a-agent')

NEED_INPUT_TEXT = 'Please send the missing input.'


def first_text(message: object) -> str:
    """The first text of a message dict, in any of the shapes python-a2a passes on."""
    if not isinstance(message, dict):
        return ''
    for part in message.get('parts') or []:
        if isinstance(part, dict) and isinstance(part.get('text'), str):
            return part['text']
    content = message.get('content')
    if isinstance(content, dict) and isinstance(content.get('text'), str):
        return content['text']
    return ''


def make_agent_class():
    @agent(name='python-a2a Agent', description='Test agent built on python-a2a 0.5.10: echo, need-input.', version='1.0.0')
    class EchoAgent(A2AServer):
        @skill(name='Echo', description='Echoes the text; "need-input" asks for more input.', tags=['test'])
        def echo(self, text):
            return f'echo: {text}'

        def handle_task(self, task):
            text = first_text(task.message or {})
            if text.strip() == 'need-input':
                task.status = TaskStatus(
                    state=TaskState.INPUT_REQUIRED,
                    message={'role': 'agent', 'parts': [{'type': 'text', 'text': NEED_INPUT_TEXT}]},
                )
                return task
            task.artifacts = [{'name': 'response', 'parts': [{'type': 'text', 'text': self.echo(text)}]}]
            task.status = TaskStatus(state=TaskState.COMPLETED)
            return task

    return EchoAgent


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        sys.exit(f'cannot bind {host}:{port}: {e}')  # exit status 1
    sock.listen(128)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0, help='0 picks a free port')
    parser.add_argument('--public-url', default=None, help='the origin the card names (default: http://<host>:<port>)')
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format='%(asctime)s %(levelname)s %(name)s: %(message)s')

    sock = bind_socket(args.host, args.port)
    port = sock.getsockname()[1]
    base_url = f'http://{args.host}:{port}'
    card_url = (args.public_url or base_url).rstrip('/')

    # The library prints to stdout (banners, per-request debug lines); keep
    # stdout for the READY line only.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr

    # As the README: the card's url is the agent's origin.
    echo_agent = make_agent_class()(url=card_url)
    app = create_flask_app(echo_agent)
    server = make_server(args.host, port, app, threaded=True, fd=sock.fileno())

    def stop(_signum, _frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info('serving on %s', base_url)
    print(f'READY {base_url}', file=real_stdout, flush=True)
    server.serve_forever()
    logger.info('stopped')


if __name__ == '__main__':
    main()
