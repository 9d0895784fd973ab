"""Each function's layers, timeout and memory: plain data (no CDK import), shared by the
stack and tools/check_layers.py."""

from __future__ import annotations

from steward.config import Function

# Which dependency layers each function loads (tools/build_layers.py builds them): the
# signatures for who verifies or signs, the GitHub client only where it is imported.
LAYERS: dict[Function, tuple[str, ...]] = {
    "api": ("common",),
    "scheduler": ("common",),
    "heartbeat": ("common", "crypto", "github"),
    "reaper": ("common",),
    "relay": ("common", "crypto"),
    # A mention's ask reads the person's permission from GitHub (services.asks): the App's
    # client and its JWT.
    "webhook": ("common", "crypto", "github"),
    "runtime": ("common", "crypto", "github"),
}
TIMEOUTS: dict[Function, int] = {
    "api": 29,
    "scheduler": 60,
    "heartbeat": 60,  # the heartbeat queue's visibility is 6x this (Loop)
    "reaper": 120,
    "relay": 300,  # a model call, streamed through the REST API's raised timeout
    "webhook": 29,
    "runtime": 29,
}
MEMORY: dict[Function, int] = {"relay": 1024, "heartbeat": 1024, "runtime": 1024}
