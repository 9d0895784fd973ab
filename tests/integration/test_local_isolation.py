"""The local stack serves one invocation at a time per process, as a Lambda environment does.

Powertools' resolvers keep the current request in a slot shared by every resolver of a
process: a second handler running while an API invocation is in flight would replace the
API's request under it. Here an API invocation is held, with real threads and real HTTP,
between reading its body and reading its caller, while another function of the stack is
called: the relay (its own process: it answers while the API is held, so a slow model call
never freezes the API either), or the webhook (this process: it waits its turn).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from steward.api import app as api_app
from steward.local.demo import sample_document
from steward.local.github_twin.webhooks import signature_256
from steward.local.stack import LocalStack

HOLD_SECONDS = 2.0  # how long the held API invocation waits for the other call's answer


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(state_file=tmp_path_factory.mktemp("isolation") / "local.json") as stack:
        yield stack


def relay_call(stack: LocalStack) -> httpx.Response:
    """A call on the relay's OpenAI surface with a key that is no capability."""
    return httpx.get(
        f"{stack.state['relay_http_url']}/v1/models",
        headers={"Authorization": "Bearer sk-not-a-capability"},
        timeout=30,
    )


def webhook_call(stack: LocalStack) -> httpx.Response:
    """A signed ping, as GitHub sends when a hook is created."""
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": signature_256(stack.state["webhook_secret"], body),
    }
    return httpx.post(stack.state["webhook_url"], content=body, headers=headers, timeout=30)


CALLS: list[tuple[str, Callable[[LocalStack], httpx.Response], bool]] = [
    # (function, its call, whether it answers while the API invocation is in flight)
    ("relay", relay_call, True),
    ("webhook", webhook_call, False),
]


@pytest.mark.parametrize(("name", "call", "answers_meanwhile"), CALLS, ids=[c[0] for c in CALLS])
def test_another_function_called_while_an_api_invocation_is_in_flight_never_changes_its_request(
    stack: LocalStack,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    call: Callable[[LocalStack], httpx.Response],
    answers_meanwhile: bool,
) -> None:
    held = threading.Event()
    release = threading.Event()
    parse_body = api_app.parse_body

    def holding(raw: Any, model: Any, **kwargs: Any) -> Any:
        parsed = parse_body(raw, model, **kwargs)  # the body is read; the caller is read next
        held.set()
        release.wait(timeout=30)
        return parsed

    monkeypatch.setattr(api_app, "parse_body", holding)
    slug = f"held-{name}"
    with ThreadPoolExecutor(2) as pool:
        published = pool.submit(
            httpx.put,
            f"{stack.state['api_url']}/v1/plans/{slug}",
            json={"markdown": sample_document()},
            headers={"Authorization": f"Bearer {stack.state['users']['alice']}"},
            timeout=60,
        )
        assert held.wait(timeout=30)
        other = pool.submit(call, stack)
        answered = threading.Event()
        other.add_done_callback(lambda _: answered.set())
        # The relay answers while the API invocation is held; the webhook waits its turn.
        assert answered.wait(timeout=HOLD_SECONDS if not answers_meanwhile else 30) is answers_meanwhile
        assert not published.done()
        release.set()
        response = published.result()
        other_response = other.result()
    assert response.status_code == 200, response.text
    assert response.json()["slug"] == slug
    assert other_response.status_code < 500, other_response.text
    if name == "relay":
        assert other_response.status_code == 401
        assert other_response.json()["error"]["type"] == "authentication_error"
    else:
        assert other_response.status_code in (200, 202, 204)
