"""Steward's relay beside LiteLLM's proxy budget, in one run, on one fake upstream (issue
"side by side with LiteLLM's proxy budget"), printed, not asserted: admissions and spend
when 100 calls are in flight at once against a cap that pays for 10.

* The upstream: an OpenAI-compatible Chat Completions server on loopback that answers every
  call after a delay with fixed usage (PROMPT_TOKENS in, COMPLETION_TOKENS out, fewer if the
  call's max_tokens is lower) and counts the calls it served: the truth both gateways are
  read against. Each gateway meets it at DELAYS_S: 1 s, so that all 100 calls are really at
  the upstream together (the `peak` column), and 0.2 s.
* Both gateways price the one model alike (INPUT_PER_MTOK / OUTPUT_PER_MTOK USD per million
  tokens) and the cap is exactly CAP_CALLS times the cost of one call. The prompt is sized so
  that Steward's input bound (the UTF-8 bytes sent) is exactly PROMPT_TOKENS and each call
  asks for max_tokens = COMPLETION_TOKENS: Steward's reservation equals the actual cost.
* Steward, two ways: the relay Lambda handler's `POST /v1/chat/completions` behind the local
  REST API adapter (`LambdaHttpServer`, which serializes invocations like one warm Lambda
  environment, so the 100 calls queue at its front door), and the relay service called by
  100 threads at once (real concurrency on the atomic reservation; the moto DynamoDB backend
  is serialized, as real DynamoDB's per-item conditional writes are atomic). Spend is the
  task's `cost_usd` read back from the table.
* LiteLLM's proxy (`litellm --config`, one process as it starts by default), in its own
  virtualenv (`.venv-litellm/`, not a project dependency: `--setup` creates it from
  `bench/litellm-requirements.txt`, the proxy's dependencies listed by hand since the
  `[proxy]` extra does not resolve), one fresh proxy per delay, with the budget that works
  without a database: a provider budget (`router_settings.provider_budget_config`, kept in
  the proxy's memory; checked before a call, charged after it). The proxy-wide
  `litellm_settings.max_budget` is not enforced without Postgres (the proxy says so when it
  starts). Spend is what its `/provider/budgets` reports; the `x-litellm-response-cost`
  headers summed are printed beside it. Each proxy is warmed first with WARMUP_CALLS calls
  to a deployment its budget does not count (provider `hosted_vllm`, the same upstream), so
  that a production proxy's steady state is measured, not its first calls' lazy imports.

Each caller sends once, no retries: a 429 counts as a refusal. Steward's figures are the
same in every run (the reservation is atomic); LiteLLM's vary from run to run with how many
calls it forwards before the first charge lands (at 1 s, 8 to 10 times the cap on 2 cores).
Without the LiteLLM virtualenv only Steward's half runs (about 20 s).

    .venv/bin/python bench/litellm_compare.py [--setup]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-litellm"
REQUIREMENTS = ROOT / "bench" / "litellm-requirements.txt"


def setup() -> None:
    """Create `.venv-litellm/` and install LiteLLM with the proxy's dependencies listed by hand."""
    if VENV.exists():
        shutil.rmtree(VENV)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    print(f"LiteLLM installed in {VENV.relative_to(ROOT)}/")


if __name__ == "__main__" and "--setup" in sys.argv[1:]:
    setup()  # before the project's imports: any Python 3.11 can set LiteLLM up

sys.path.insert(0, str(ROOT))
# The handler's metrics and refusal logs would print lines per call.
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")
try:
    import httpx
    from steward import relay_handler, wiring
    from steward.adapters.price_file import load_price_table
    from steward.domain.budget import Usage, cost_of, input_bound_tokens, max_cost
    from steward.domain.converse import ConverseRequest, payload_bytes
    from steward.domain.errors import BudgetExhausted, RetryLater
    from steward.domain.models import Task
    from steward.domain.openai_chat import parse_chat_request, to_converse
    from steward.domain.prices import PriceTable
    from steward.local.http_adapter import LambdaHttpServer
    from steward.local.moto_server import MotoServer

    from bench.relay import kit_on
    from tests.support.relay import RelayKit
except ModuleNotFoundError as missing:
    sys.exit(f"{missing.name} is not installed here: run the comparison with .venv/bin/python (make install)")

MODEL = "bench-gpt"
CALLS = 100
CAP_CALLS = 10
DELAYS_S = (1.0, 0.2)
PROMPT_TOKENS = 1000
COMPLETION_TOKENS = 500
INPUT_PER_MTOK = Decimal(3)
OUTPUT_PER_MTOK = Decimal(15)
USAGE = Usage(input_tokens=PROMPT_TOKENS, output_tokens=COMPLETION_TOKENS)

LITELLM = VENV / "bin" / "litellm"
LITELLM_START_TIMEOUT_S = 120.0
# Calls that warm each proxy before its burst (its first calls import lazily), on a
# deployment of another provider (hosted_vllm, the same upstream) that its budget does not count.
WARMUP_MODEL = "warmup"
WARMUP_CALLS = 3
NOT_INSTALLED = "LiteLLM not installed: run `python bench/litellm_compare.py --setup`"
# Data LiteLLM would fetch from the network at start: its packaged copies instead.
LOCAL_DATA = (
    "MODEL_COST_MAP",
    "ANTHROPIC_BETA_HEADERS",
    "AUTOROUTER_PRESETS",
    "BLOG_POSTS",
    "POLICY_TEMPLATES",
)
BUDGET_MECHANISM = (
    "router_settings.provider_budget_config (in memory, no database; litellm_settings.max_budget"
    " is not enforced without Postgres)"
)


# ---- the fake upstream


class Upstream(ThreadingHTTPServer):
    """Chat Completions on loopback: every call answered after `delay` s with fixed usage."""

    daemon_threads = True
    request_queue_size = 1024  # 100 connections arrive at once

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)
        self._lock = threading.Lock()
        self.delay = DELAYS_S[0]
        self.served = 0
        self.in_flight = 0
        self.peak = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def reset(self, delay: float) -> None:
        with self._lock:
            self.delay = delay
            self.served = self.peak = 0

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1
                self.served += 1


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Upstream

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.split("?", 1)[0].endswith("/chat/completions"):
            self._send(404, {"error": {"message": "unknown route", "type": "invalid_request_error"}})
            return
        request = json.loads(body or b"{}")
        limit = request.get("max_completion_tokens") or request.get("max_tokens") or COMPLETION_TOKENS
        completion = min(COMPLETION_TOKENS, int(limit))
        with self.server.serving():
            time.sleep(self.server.delay)
        self._send(
            200,
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.get("model", MODEL),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": PROMPT_TOKENS,
                    "completion_tokens": completion,
                    "total_tokens": PROMPT_TOKENS + completion,
                },
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


# ---- the one request, priced


def chat_body() -> dict[str, Any]:
    """A chat request whose Converse payload is exactly PROMPT_TOKENS bytes: Steward's input
    bound then equals the upstream's reported prompt tokens."""

    def size(text: str) -> int:
        request = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
        return payload_bytes(ConverseRequest.model_validate(to_converse(parse_chat_request(request))))

    filler = "Count the words in this sentence, then say ok. " * 40
    text = filler[: PROMPT_TOKENS - (size("x") - 1)]
    assert size(text) == PROMPT_TOKENS, size(text)
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": COMPLETION_TOKENS}


def price_table(upstream: Upstream, workdir: Path) -> PriceTable:
    """The packaged table plus MODEL on the upstream, read as STEWARD_PRICE_TABLE would be."""
    path = workdir / "prices.json"
    entry = {
        "provider": "openai",
        "base_url": upstream.base_url,
        "input_per_mtok": str(INPUT_PER_MTOK),
        "output_per_mtok": str(OUTPUT_PER_MTOK),
        "max_output_tokens": 4096,
    }
    path.write_text(json.dumps({"version": "litellm-compare", "models": {MODEL: entry}}))
    return load_price_table(str(path))


@dataclass
class Burst:
    """What one gateway did with CALLS concurrent calls."""

    gateway: str
    delay: float
    statuses: Counter[str]
    spend: Decimal
    served: int
    peak: int
    seconds: float
    after: str  # the status of one more call once the burst is over
    note: str = ""


def fire(upstream: Upstream, delay: float, send: Callable[[int], str]) -> tuple[Counter[str], float]:
    """CALLS callers released together by a barrier; each sends once."""
    barrier = threading.Barrier(CALLS)

    def caller(n: int) -> str:
        barrier.wait()
        try:
            return send(n)
        except Exception as exc:
            return type(exc).__name__

    upstream.reset(delay)
    start = time.perf_counter()
    with ThreadPoolExecutor(CALLS) as pool:
        statuses = Counter(pool.map(caller, range(CALLS)))
    return statuses, time.perf_counter() - start


# ---- Steward


@dataclass
class Steward:
    moto: MotoServer
    upstream: Upstream
    table: PriceTable
    cap: Decimal
    body: dict[str, Any]

    def task(self, prefix: str) -> tuple[RelayKit, Task, str]:
        kit = kit_on(self.moto, prefix)
        kit.relay.prices = self.table
        task = kit.running_task(budget=str(self.cap), model=MODEL, slug=prefix.rstrip("-"))
        return kit, task, kit.capability(task)

    def over_http(self, delay: float, prefix: str) -> Burst:
        kit, task, token = self.task(prefix)
        wiring.relay = lambda: kit.relay  # what the handler's composition root builds in AWS
        with (
            LambdaHttpServer(relay_lambda, kind="rest_api") as server,
            httpx.Client(timeout=120, limits=httpx.Limits(max_connections=CALLS)) as client,
        ):
            url = f"{server.url}/v1/chat/completions"
            auth = {"Authorization": f"Bearer {token}"}

            def send(_: int) -> str:
                return str(client.post(url, json=self.body, headers=auth).status_code)

            statuses, seconds = fire(self.upstream, delay, send)
            served, peak = self.upstream.served, self.upstream.peak
            after = send(0)
        return Burst(
            "Steward relay over HTTP (local Lambda)",
            delay,
            statuses,
            kit.spent(task)[0],
            served,
            peak,
            seconds,
            after,
            note="one warm Lambda environment: the 100 calls queue at the front door and run one at a time",
        )

    def in_threads(self, delay: float, prefix: str) -> Burst:
        kit, task, token = self.task(prefix)
        payload = json.dumps(to_converse(parse_chat_request(self.body)))

        def send(_: int) -> str:
            try:
                kit.relay.converse(f"Bearer {token}", payload)
            except RetryLater:
                return "429"
            except BudgetExhausted:
                return "402"
            return "200"

        statuses, seconds = fire(self.upstream, delay, send)
        served, peak = self.upstream.served, self.upstream.peak
        return Burst(
            "Steward relay service, 100 threads",
            delay,
            statuses,
            kit.spent(task)[0],
            served,
            peak,
            seconds,
            send(0),
            note="100 in flight at once on one task (the Converse body the chat request becomes);"
            " 429 = the room is held by calls in flight, 402 = spent",
        )


def relay_lambda(event: dict[str, Any], context: Any) -> Any:
    """The relay's handler; its metrics are disabled here, and Powertools keeps disabled
    metrics and prints them once one holds 100 values: dropped after each invocation."""
    try:
        return relay_handler.lambda_handler(event, context)
    finally:
        relay_handler.metrics.clear_metrics()


# ---- LiteLLM


def litellm_config(upstream: Upstream, cap: Decimal, master_key: str) -> str:
    per_token_in = format(INPUT_PER_MTOK / 1_000_000, "f")
    per_token_out = format(OUTPUT_PER_MTOK / 1_000_000, "f")
    return f"""\
model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: {upstream.base_url}
      api_key: not-a-key
      input_cost_per_token: {per_token_in}
      output_cost_per_token: {per_token_out}
  - model_name: {WARMUP_MODEL}
    litellm_params:
      model: hosted_vllm/{MODEL}
      api_base: {upstream.base_url}
      api_key: not-a-key
router_settings:
  provider_budget_config:
    openai:
      budget_limit: {format(cap, "f")}
      time_period: 1d
general_settings:
  master_key: {master_key}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proxy:
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    key: str


@contextlib.contextmanager
def litellm_proxy(config: Path, key: str) -> Iterator[Proxy]:
    """The proxy started in its own virtualenv, on loopback, offline (its packaged cost maps)."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in LOCAL_DATA:
        env[f"LITELLM_LOCAL_{name}"] = "True"
    command = [str(LITELLM), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    log = config.with_suffix(".log")
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=config.parent)
    try:
        yield Proxy(process, f"http://127.0.0.1:{port}", log, key)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_live(proxy: Proxy) -> None:
    deadline = time.monotonic() + LITELLM_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proxy.process.poll() is not None:
            tail = proxy.log.read_text()[-3000:]
            raise RuntimeError(f"the LiteLLM proxy exited ({proxy.process.returncode}):\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{proxy.url}/health/liveliness", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"the LiteLLM proxy did not start:\n{proxy.log.read_text()[-3000:]}")


def litellm_burst(proxy: Proxy, upstream: Upstream, delay: float, body: dict[str, Any]) -> Burst:
    wait_until_live(proxy)
    warm = {**body, "model": WARMUP_MODEL}
    costs: list[Decimal] = []
    refusals: list[str] = []
    lock = threading.Lock()
    auth = {"Authorization": f"Bearer {proxy.key}"}
    limits = httpx.Limits(max_connections=CALLS)
    with httpx.Client(timeout=120, limits=limits, headers=auth) as client:

        def send(_: int) -> str:
            answer = client.post(f"{proxy.url}/v1/chat/completions", json=body)
            with lock:
                if answer.status_code == 200:
                    costs.append(Decimal(answer.headers.get("x-litellm-response-cost", "0")))
                elif not refusals:
                    refusals.append(str(answer.json().get("error", {}).get("message", "")).strip())
            return str(answer.status_code)

        upstream.reset(0.0)
        for _ in range(WARMUP_CALLS):
            client.post(f"{proxy.url}/v1/chat/completions", json=warm).raise_for_status()
        spend_before = settled_provider_spend(client, proxy.url)
        statuses, seconds = fire(upstream, delay, send)
        served, peak = upstream.served, upstream.peak
        spend = settled_provider_spend(client, proxy.url) - spend_before
        after = send(0)
    headers = sum(costs, Decimal(0))
    return Burst(
        "LiteLLM proxy, provider budget",
        delay,
        statuses,
        spend,
        served,
        peak,
        seconds,
        after,
        note=f"x-litellm-response-cost summed {headers:.6f} USD (budget spend after the warm-up {spend_before});"
        f" refusal: {refusals[0] if refusals else '-'}",
    )


def settled_provider_spend(client: httpx.Client, url: str) -> Decimal:
    """The openai spend `/provider/budgets` reports, once it stops moving (LiteLLM charges in
    an asynchronous success callback)."""
    last: Decimal | None = None
    for _ in range(20):
        providers = client.get(f"{url}/provider/budgets").json()["providers"]
        spend = Decimal(str(providers["openai"]["spend"]))
        if spend == last:
            return spend
        last = spend
        time.sleep(0.25)
    return last or Decimal(0)


# ---- the table


def report(bursts: list[Burst], cap: Decimal, cost: Decimal, reservation: Decimal) -> None:
    print(
        f"{CALLS} calls in flight at each gateway, each caller sending once; cap {cap} USD = {CAP_CALLS} calls"
    )
    print(
        f"one call: {PROMPT_TOKENS} + {COMPLETION_TOKENS} tokens at {INPUT_PER_MTOK} / {OUTPUT_PER_MTOK} USD"
        f" per Mtok = {cost} USD; Steward reserves {reservation} USD per call (input bound"
        f" {PROMPT_TOKENS} bytes + max_tokens {COMPLETION_TOKENS})"
    )
    print()
    header = (
        f"{'upstream':>8}  {'gateway':<38} {'admitted':>8}  {'refused':<16} {'spend USD':>9} {'x cap':>6}"
        f" {'served':>6} {'peak':>4} {'s':>5}  next"
    )
    print(header)
    print("-" * len(header))
    for burst in bursts:
        refused = ", ".join(
            f"{n} x {status}" for status, n in sorted(burst.statuses.items()) if status != "200"
        )
        print(
            f"{burst.delay:>7.1f}s  {burst.gateway:<38} {burst.statuses.get('200', 0):>8}  {refused or '-':<16}"
            f" {burst.spend:>9.6f} {burst.spend / cap:>6.2f} {burst.served:>6} {burst.peak:>4}"
            f" {burst.seconds:>5.1f}  {burst.after}"
        )
    print()
    print("upstream = its delay per call; admitted = HTTP 200; spend = what the gateway charged;")
    print("served = calls the upstream served (the truth); peak = most calls it held at once;")
    print("s = the burst's wall time; next = the status of one more call after the burst")
    notes = {burst.gateway: burst.note for burst in bursts if not burst.gateway.startswith("LiteLLM")}
    for burst in bursts:
        if burst.gateway.startswith("LiteLLM"):
            notes[burst.gateway] = f"budget: {BUDGET_MECHANISM}"
            notes[f"{burst.gateway} at {burst.delay:.1f} s"] = burst.note
    for gateway, note in notes.items():
        print(f"* {gateway}: {note}")


# ---- setup and main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--setup", action="store_true", help="create .venv-litellm/ with LiteLLM's proxy first"
    )
    parser.parse_args()  # --setup has run before the imports
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    body = chat_body()
    upstream = Upstream()
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    master_key = "sk-" + secrets.token_hex(32)
    bursts: list[Burst] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        table = price_table(upstream, workdir)
        entry = table.entry(MODEL)
        cost = cost_of(entry, USAGE)
        cap = cost * CAP_CALLS
        converse = ConverseRequest.model_validate(to_converse(parse_chat_request(body)))
        reservation = max_cost(entry, input_bound_tokens(payload_bytes(converse)), COMPLETION_TOKENS)
        proxies: list[Proxy] = []
        if LITELLM.exists():  # one fresh budget per delay; they boot while Steward's half runs
            for n, _ in enumerate(DELAYS_S):
                config = workdir / f"litellm-{n}.yaml"
                config.write_text(litellm_config(upstream, cap, master_key))
                proxies.append(stack.enter_context(litellm_proxy(config, master_key)))
        moto = stack.enter_context(MotoServer())
        steward = Steward(moto, upstream, table, cap, body)
        for n, delay in enumerate(DELAYS_S):
            bursts.append(steward.over_http(delay, f"http{n}-"))
            bursts.append(steward.in_threads(delay, f"threads{n}-"))
        for proxy, delay in zip(proxies, DELAYS_S, strict=False):
            bursts.append(litellm_burst(proxy, upstream, delay, body))
    upstream.shutdown()
    bursts.sort(key=lambda burst: -burst.delay)
    report(bursts, cap, cost, reservation)
    if not proxies:
        print(NOT_INSTALLED)


if __name__ == "__main__":
    main()
