"""The relay's stock-client surfaces (issue "the relay as a strict budget gateway"), printed,
not asserted. Per surface, each call made by the stock client through the local relay Lambda
over HTTPS (the local stack's front door) on the moto server:

1. DynamoDB requests per admitted call, counted over ROUNDS calls (the global brake's read
   is cached for 5 s, so it shows as a fraction);
2. the median time per call as a ratio to the median of the relay's own two writes
   (reserve + settle) issued raw on the same server in the same run, in alternating blocks
   so that all see the same machine:
   what the surface, the HTTP front door, TLS and the client add to the budget's I/O (aim
   at most 1.15);
3. the floor under that ratio: the same stock client through the same front door to a
   handler that answers, without any work, the answer the relay gave it (`floor ms`), so
   `(raw + floor) / raw` is the least any relay could show here, and `relay ms`
   (call - floor - raw) is what the relay itself adds beyond its two writes.

Only the figures are printed: the handler's metrics are off (Powertools would print an EMF
blob into the table every 100 calls).

    .venv/bin/python bench/relay_surfaces.py
"""

from __future__ import annotations

import json
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

# Before the handler is imported: it builds its Metrics at import (steward.observability).
os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"

import boto3
import httpx
import openai
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steward import relay_handler, wiring
from steward.adapters.brake_store import BrakeStore
from steward.adapters.dynamo import count_requests
from steward.domain.models import Task, utcnow
from steward.local import tls
from steward.local.http_adapter import LambdaHttpServer
from steward.local.moto_server import MotoServer
from steward.services.brake import CachedBrake

from bench.relay import kit_on
from tests.support.relay import RelayKit

ROUNDS = 200
BLOCKS = 8  # surface calls, the floor and raw pairs alternate in this many blocks of ROUNDS / BLOCKS
HELLO = [{"role": "user", "content": [{"text": "Say hello."}]}]
CHAT = [{"role": "user", "content": "Say hello."}]


def surfaces(url: str, ca: Path) -> dict[str, Callable[[Task, str], Callable[[], Any]]]:
    """Surface name -> (task, capability) -> one call by that surface's stock client."""
    context = ssl.create_default_context(cafile=str(ca))

    def own(task: Task, token: str) -> Callable[[], Any]:
        client = httpx.Client(verify=context, headers={"Authorization": f"Bearer {token}"})
        body = {"messages": HELLO, "inferenceConfig": {"maxTokens": 64}}
        return lambda: client.post(f"{url}/v1/relay/converse", json=body).raise_for_status()

    def bedrock(stream: bool) -> Callable[[Task, str], Callable[[], Any]]:
        def make(task: Task, token: str) -> Callable[[], Any]:
            os.environ.update(
                AWS_ENDPOINT_URL_BEDROCK_RUNTIME=url, AWS_BEARER_TOKEN_BEDROCK=token, AWS_CA_BUNDLE=str(ca)
            )
            client = boto3.session.Session().client(
                "bedrock-runtime", config=Config(retries={"max_attempts": 1})
            )
            if not stream:
                return lambda: client.converse(
                    modelId="scripted", messages=HELLO, inferenceConfig={"maxTokens": 64}
                )
            return lambda: list(
                client.converse_stream(modelId="scripted", messages=HELLO, inferenceConfig={"maxTokens": 64})[
                    "stream"
                ]
            )

        return make

    def chat(stream: bool) -> Callable[[Task, str], Callable[[], Any]]:
        def make(task: Task, token: str) -> Callable[[], Any]:
            client = openai.OpenAI(
                api_key=token, base_url=f"{url}/v1", http_client=httpx.Client(verify=context), max_retries=0
            )
            if not stream:
                return lambda: client.chat.completions.create(model="scripted", messages=CHAT, max_tokens=64)
            return lambda: list(
                client.chat.completions.create(
                    model="scripted",
                    messages=CHAT,
                    max_tokens=64,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )

        return make

    return {
        "steward /v1/relay/converse": own,
        "bedrock converse": bedrock(False),
        "bedrock converse-stream": bedrock(True),
        "openai chat.completions": chat(False),
        "openai chat.completions stream": chat(True),
    }


def raw_pair_seconds(kit: RelayKit, task: Task, rounds: int, first: int = 0) -> list[float]:
    """The seconds of each reserve + settle issued raw (the relay's own two writes)."""
    now = utcnow()
    times: list[float] = []
    for n in range(first, first + rounds):
        start = time.perf_counter()
        kit.budget.reserve(
            task_id=task.id,
            owner=task.user,
            model=task.model,
            token_cap=task.budget_usd,
            cost=Decimal("0.001"),
            reservation_id=f"raw{n}",
            expires_at=now + timedelta(minutes=5),
            now=now,
        )
        kit.budget.settle(
            task_id=task.id,
            reservation_id=f"raw{n}",
            reserved=Decimal("0.001"),
            actual=Decimal("0.0001"),
            now=now,
        )
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # moto takes any key
        os.environ.setdefault(name, "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with MotoServer() as moto, tempfile.TemporaryDirectory() as state:
        kit = kit_on(moto, f"s{time.monotonic_ns() % 10**9}-")
        kit.relay.brake = CachedBrake(BrakeStore(kit.services.tables).read).engaged
        wiring.relay = lambda: kit.relay  # type: ignore[assignment]
        secured = tls.create(Path(state))
        with LambdaHttpServer(recorded.handler, kind="rest_api", tls=secured.context) as server:
            print(
                f"relay surfaces over HTTPS ({server.url}) on the moto server ({moto.url}), {ROUNDS} calls each"
            )
            floor_server = LambdaHttpServer(recorded.replay, kind="rest_api", tls=secured.context)
            with floor_server:
                relayed = surfaces(server.url, secured.ca_bundle)
                replayed = surfaces(floor_server.url, secured.ca_bundle)
                rows = [
                    measure(kit, n, name, relayed[name], replayed[name]) for n, name in enumerate(relayed)
                ]
    print(
        f"{'surface':34} {'requests/call':>13} {'ms/call':>8} {'raw pair ms':>11} {'ratio':>6}"
        f" {'floor ms':>8} {'floor ratio':>11} {'relay ms':>8}"
    )
    for name, per_call, counts, seconds, raw, floor in rows:
        print(
            f"{name:34} {per_call:13.2f} {seconds * 1000:8.1f} {raw * 1000:11.1f} {seconds / raw:6.2f}"
            f" {floor * 1000:8.1f} {(raw + floor) / raw:11.2f} {(seconds - floor - raw) * 1000:8.1f}"
            f"  {json.dumps(counts)}"
        )


class Recorded:
    """The relay's handler, keeping its last answer; `replay` gives that answer again."""

    answer: Any = None

    def handler(self, event: dict[str, Any], context: Any) -> Any:
        self.answer = relay_handler.lambda_handler(event, context)
        return self.answer

    def replay(self, event: dict[str, Any], context: Any) -> Any:
        return self.answer


recorded = Recorded()


def measure(
    kit: RelayKit, n: int, name: str, relayed: Callable[[Task, str], Callable[[], Any]], replayed: Any
) -> tuple[str, float, dict[str, int], float, float, float]:
    """One surface: its calls, the floor's and the raw pairs in alternating blocks."""
    task = kit.running_task(budget="9.00", slug=f"surface{n}")
    token = kit.capability(task)
    call, floor_call = relayed(task, token), replayed(task, token)
    call()  # warm: client, connection, TLS session, the brake's cache; and the answer replayed
    floor_call()
    raw_task = kit.running_task(budget="9.00", slug=f"raw{n}")
    times: list[float] = []
    floor_times: list[float] = []
    requests: Counter[str] = Counter()
    raw_times: list[float] = []
    block_rounds = ROUNDS // BLOCKS
    for block in range(BLOCKS):
        with count_requests(kit.services.tables) as counted:
            times += _timed(call, block_rounds)
        requests += counted
        floor_times += _timed(floor_call, block_rounds)
        raw_times += raw_pair_seconds(kit, raw_task, block_rounds, block * block_rounds)
    return (
        name,
        sum(requests.values()) / len(times),
        dict(requests),
        statistics.median(times),
        statistics.median(raw_times),  # medians, all three
        statistics.median(floor_times),
    )


def _timed(call: Callable[[], Any], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


if __name__ == "__main__":
    main()
