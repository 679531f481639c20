"""Real processes on loopback for the tests: the cardgate binary, its fake agent, the SDK agent.

Binaries come from `CARDGATE_BIN` / `CARDGATE_FAKE_AGENT_BIN`, else from the cargo target
directory (`CARGO_TARGET_DIR`, default `<repo>/target`), as `cargo test` leaves them.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[3]
ADMIN_TOKEN = "test-admin-" + secrets.token_hex(16)


def _target() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def binary(env: str, *relative: str) -> Path:
    path = Path(os.environ[env]) if env in os.environ else _target().joinpath(*relative)
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: run `cargo test --no-run` first (or set {env})")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _line_matching(stream: asyncio.StreamReader, pattern: str, timeout: float) -> str:
    async def read() -> str:
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise RuntimeError(f"the process ended before printing /{pattern}/")
            if m := re.search(pattern, line):
                return m.group(1)

    return await asyncio.wait_for(read(), timeout)


@dataclass
class Cardgate:
    """A `cardgate serve` on its own SQLite file; stop and start it again on the same port."""

    port: int = field(default_factory=free_port)
    data: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cardgate-py-")))
    process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        env = {
            **os.environ,
            "CARDGATE_LISTEN": f"127.0.0.1:{self.port}",
            "CARDGATE_ALLOW_NETWORKS": "127.0.0.0/8",
            "CARDGATE_HOST_CONCURRENCY": "64",
            "CARDGATE_HOST_INTERVAL_MS": "0",
            "CARDGATE_ADMIN_TOKEN": ADMIN_TOKEN,
            "CARDGATE_PROBE_DEADLINE_SECS": "20",
            "RUST_LOG": "warn",
        }
        env.pop("DATABASE_URL", None)
        log = (self.data / "cardgate.log").open("ab")
        self.process = await asyncio.create_subprocess_exec(
            str(binary("CARDGATE_BIN", "debug", "cardgate")),
            "serve",
            cwd=self.data,
            env=env,
            stdout=log,
            stderr=log,
        )
        async with httpx.AsyncClient() as http:
            for _ in range(300):
                try:
                    if (await http.get(f"{self.url}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"cardgate did not become ready (log: {self.data / 'cardgate.log'})")

    async def stop(self) -> None:
        if self.process and self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()

    async def admin(self, method: str, path: str, body: Any = None) -> Any:
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as http:
            response = await http.request(
                method, path, json=body, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            )
            response.raise_for_status()
            return response.json()

    async def key(self, role: str) -> str:
        created = await self.admin("POST", "/v1/keys", {"name": f"py-{role}", "role": role})
        return str(created["key"])

    async def register(
        self, origin: str, dedup: str = "timestamp", timeout: float = 90
    ) -> tuple[str, str]:
        """Registers the agent at `origin`; waits until v1.0 is authoritative for `dedup`.

        Returns (callee id, card URL as cardgate normalized it)."""
        callee = await self.admin("POST", "/v1/callees", {"card_url": origin})
        card_url = str(callee["card_url"])
        deadline = time.monotonic() + timeout
        query = {"card_url": card_url, "caller_version": "1.0", "dedup": dedup}
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as http:
            while time.monotonic() < deadline:
                answer = await http.get(
                    "/v1/trust", params=query, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                )
                if answer.status_code == 200 and answer.json()["authoritative"]:
                    return str(callee["id"]), card_url
                await asyncio.sleep(0.25)
        raise RuntimeError(f"{origin} did not become lifecycle-trusted: {answer.text}")

    async def reports(self, callee_id: str) -> list[dict[str, Any]]:
        page = await self.admin("GET", f"/v1/callees/{callee_id}/reports")
        return list(page["items"])


@dataclass
class Agent:
    process: asyncio.subprocess.Process
    origin: str

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()


async def fake_agent(behaviour: str, fault_on: str | None = None) -> Agent:
    """cardgate's scriptable fake agent (`examples/fake-agent.rs`)."""
    args = ["--listen", "127.0.0.1:0", "--behaviour", behaviour]
    if fault_on:
        args += ["--fault-on", fault_on]
    process = await asyncio.create_subprocess_exec(
        str(binary("CARDGATE_FAKE_AGENT_BIN", "debug", "examples", "fake-agent")),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    origin = await _line_matching(process.stdout, r"at (http://[^/\s]+)", 30)
    return Agent(process, origin)


async def sdk_agent() -> Agent:
    """The official Python SDK's agent (`tests/agents/python/agent.py`)."""
    python = os.environ.get("CARDGATE_TEST_PYTHON", sys.executable)
    process = await asyncio.create_subprocess_exec(
        python,
        str(REPO / "tests" / "agents" / "python" / "agent.py"),
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    origin = await _line_matching(process.stdout, r"READY (http://\S+)", 60)
    return Agent(process, origin)
