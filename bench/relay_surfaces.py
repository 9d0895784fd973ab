"""The relay's stock-client surfaces (issue "the relay as a strict budget gateway"), printed,
not asserted. Per surface, each call made by the stock client through the local relay Lambda
over HTTPS (the local stack's front door) on the moto server:

1. DynamoDB requests per admitted call, counted over ROUNDS calls (the global brake's read
   is cached for 5 s, so it shows as a fraction);
2. the median time per call as a ratio to the median of the relay's own two writes
   (reserve + settle) issued raw on the same server in the same run, in alternating blocks
   so that both see the same machine:
   what the surface, the HTTP front door, TLS and the client add to the budget's I/O (aim
   at most 1.15).

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

ROUNDS = 100
BLOCKS = 4  # surface calls and raw pairs alternate in this many blocks of ROUNDS / BLOCKS
HELLO = [{"role": "user", "content": [{"text": "Say hello."}]}]
CHAT = [{"role": "user", "content": "Say hello."}]


def surfaces(kit: RelayKit, url: str, ca: Path) -> dict[str, Callable[[Task, str], Callable[[], Any]]]:
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
        with LambdaHttpServer(relay_handler.lambda_handler, kind="rest_api", tls=secured.context) as server:
            print(
                f"relay surfaces over HTTPS ({server.url}) on the moto server ({moto.url}), {ROUNDS} calls each"
            )
            rows = []
            for n, (name, make) in enumerate(surfaces(kit, server.url, secured.ca_bundle).items()):
                task = kit.running_task(budget="9.00", slug=f"surface{n}")
                call = make(task, kit.capability(task))
                call()  # warm: client, connection, TLS session, the brake's cache
                raw_task = kit.running_task(budget="9.00", slug=f"raw{n}")
                times: list[float] = []
                requests: Counter[str] = Counter()
                raw_times: list[float] = []
                for block in range(BLOCKS):
                    with count_requests(kit.services.tables) as counted:
                        for _ in range(ROUNDS // BLOCKS):
                            start = time.perf_counter()
                            call()
                            times.append(time.perf_counter() - start)
                    requests += counted
                    block_rounds = ROUNDS // BLOCKS
                    raw_times += raw_pair_seconds(kit, raw_task, block_rounds, block * block_rounds)
                raw = statistics.median(raw_times)  # a median, as the surface's calls
                rows.append(
                    (name, sum(requests.values()) / len(times), dict(requests), statistics.median(times), raw)
                )
    print(f"{'surface':34} {'requests/call':>13} {'ms/call':>8} {'raw pair ms':>11} {'ratio':>6}")
    for name, per_call, counts, seconds, raw in rows:
        print(
            f"{name:34} {per_call:13.2f} {seconds * 1000:8.1f} {raw * 1000:11.1f} {seconds / raw:6.2f}  {json.dumps(counts)}"
        )


if __name__ == "__main__":
    main()
