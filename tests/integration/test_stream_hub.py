"""The local stack's live view: a runtime posts output with its capability, the task's owner
watches it as Server-Sent Events; nothing else may post or watch."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from steward.domain.capability import Capability
from steward.local.fixtures import running_task_with_capability
from steward.local.stack import LocalStack
from steward.local.stream_hub import StreamHub

TASK = "t" + "a" * 24
OTHER = "t" + "b" * 24


def verify_capability(token: str) -> Capability:
    if not token.startswith("cap-"):
        raise ValueError("bad capability")
    now = int(time.time())
    return Capability(
        sub="alice", task_id=token.removeprefix("cap-"), model_id="m", max_budget_usd="1.00",
        iss="steward", aud="steward-relay", iat=now, exp=now + 60, jti="j",
    )  # fmt: skip


def verify_user(token: str) -> dict[str, Any]:
    if not token.startswith("user-"):
        raise ValueError("bad token")
    return {"sub": token.removeprefix("user-")}


@pytest.fixture
def hub() -> Iterator[StreamHub]:
    owners = {TASK: "alice", OTHER: "bob"}
    with StreamHub(verify_capability, verify_user, owners.get, keepalive_seconds=0.2) as hub:
        yield hub


def post(hub: StreamHub, text: str, capability: str = f"cap-{TASK}", end: bool = False) -> int:
    response = httpx.post(
        f"{hub.url}/v1/runtime/stream",
        content=text.encode(),
        params={"end": "1"} if end else None,
        headers={"Authorization": f"Bearer {capability}"},
        timeout=10,
    )
    return response.status_code


def watch(hub: StreamHub, token: str = "user-alice", task: str = TASK) -> httpx.Response:  # noqa: S107
    return httpx.get(
        f"{hub.url}/v1/tasks/{task}/stream", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def test_a_watcher_sees_output_as_it_comes_then_the_end(hub: StreamHub) -> None:
    received: list[str] = []
    connected = threading.Event()

    def follow() -> None:
        url = f"{hub.url}/v1/tasks/{TASK}/stream"
        with httpx.stream("GET", url, headers={"Authorization": "Bearer user-alice"}, timeout=10) as response:
            connected.set()
            received.extend(response.iter_lines())

    thread = threading.Thread(target=follow)
    thread.start()
    assert connected.wait(10)
    time.sleep(0.3)  # subscribed: the server keeps it alive with comments meanwhile
    assert post(hub, "line one\nline two") == 204
    assert post(hub, "", end=True) == 204
    thread.join(10)
    assert not thread.is_alive()
    text = "\n".join(received)
    assert "event: output\ndata: line one\ndata: line two" in text
    assert text.rstrip().endswith("event: end\ndata:")


def test_a_late_watcher_gets_the_recent_output_replayed(hub: StreamHub) -> None:
    post(hub, "before you came")
    post(hub, "", end=True)
    body = watch(hub).text
    assert "data: before you came" in body
    assert "event: end" in body


def test_only_the_owner_may_watch_and_only_a_capability_may_post(hub: StreamHub) -> None:
    post(hub, "", end=True)
    assert watch(hub, "user-bob").status_code == 404
    assert watch(hub, "nonsense").status_code == 401
    assert watch(hub, task=OTHER).status_code == 404
    assert post(hub, "forged", capability="user-alice") == 401
    assert httpx.post(f"{hub.url}/v1/runtime/stream", content=b"x", timeout=10).status_code == 401
    assert "forged" not in watch(hub).text


def test_a_capability_posts_only_to_its_own_task(hub: StreamHub) -> None:
    assert post(hub, "from the other task", capability=f"cap-{OTHER}") == 204
    post(hub, "", end=True)
    assert "from the other task" not in watch(hub).text


def test_an_oversized_chunk_is_refused(hub: StreamHub) -> None:
    assert post(hub, "x" * (64 * 1024 + 1)) == 413


def test_a_chunk_without_a_usable_length_is_refused(hub: StreamHub) -> None:
    headers = {"Authorization": f"Bearer cap-{TASK}"}
    url = f"{hub.url}/v1/runtime/stream"
    chunked = httpx.post(url, content=iter([b"streamed"]), headers=headers, timeout=10)
    assert chunked.status_code == 400
    host, port = hub.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(
            b"POST /v1/runtime/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer cap-"
            + TASK.encode()
            + b"\r\nContent-Length: -1\r\n\r\nx"
        )
        assert raw.recv(64).startswith(b"HTTP/1.1 400")
    post(hub, "", end=True)
    assert "streamed" not in watch(hub).text


# -- the stack's hub: output is admitted as the runtime routes admit a record -------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(state_file=tmp_path_factory.mktemp("hub") / "local.json") as stack:
        yield stack


# (what is posted after the task was cancelled, its answer): output is refused as an event
# would be; an end with no output only tells watchers the run is over.
AFTER_CANCEL = [
    ("output", {"params": None, "content": b"injected after the cancel"}, 409),
    ("output with the end", {"params": {"end": "1"}, "content": b"injected with the end"}, 409),
    ("the end alone", {"params": {"end": "1"}, "content": b""}, 204),
]


def test_the_stacks_hub_refuses_output_of_a_cancelled_task(stack: LocalStack) -> None:
    fixture = running_task_with_capability(
        stack.state_file, user="alice", budget_usd=Decimal("0.10"), model="scripted"
    )
    task_id, capability = fixture["task_id"], fixture["capability"]
    url = f"{stack.state['stream_url']}/v1/runtime/stream"
    runtime = {"Authorization": f"Bearer {capability}"}
    alice = {"Authorization": f"Bearer {stack.state['users']['alice']}"}
    assert httpx.post(url, content=b"while running\n", headers=runtime, timeout=10).status_code == 204
    cancelled = httpx.post(f"{stack.state['api_url']}/v1/tasks/{task_id}/cancel", headers=alice, timeout=30)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    for name, request, status in AFTER_CANCEL:
        answer = httpx.post(url, headers=runtime, timeout=10, **request)
        assert answer.status_code == status, (name, answer.text)
        if status == 409:
            assert answer.json()["error"]["code"] == "lifecycle", name
            assert answer.json()["error"]["field"] == "status", name
    replay = httpx.get(
        f"{stack.state['stream_url']}/v1/tasks/{task_id}/stream?follow=0", headers=alice, timeout=10
    )
    assert replay.status_code == 200
    assert "while running" in replay.text
    assert "injected" not in replay.text
