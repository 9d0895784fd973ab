"""The runtime's settings, all from the environment: the four variables the launcher passes
per task (docs/concepts/runner.md) and the deployment's runner bounds (`STEWARD_RUNNER_*`,
`STEWARD_CHECK_*`, `STEWARD_SANDBOX_UID`, `STEWARD_WORK_DIR`, `STEWARD_KEEP_WORK`, and
locally `STEWARD_STREAM_URL`). The sandbox's two settings are `STEWARD_RUNNER_*` so that
both launchers pass them as they pass every runner bound: `STEWARD_RUNNER_ALLOW_WEAK_SANDBOX=1`
lets checks run in a mode weaker than `confined` (off by default: the runner refuses),
and `STEWARD_RUNNER_SANDBOX_MODE` forces a mode (`bwrap`, `confined`, ...; `auto` or unset:
probe). Nothing here names a table, a bucket or an AWS endpoint: the
runtime reaches the control plane only at STEWARD_API_URL and STEWARD_RELAY_URL."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from steward.domain.phases import HarnessLimits
from steward.runner.sandbox import SandboxLimits, SandboxMode

REQUIRED = ("STEWARD_TASK_ID", "STEWARD_TICKET", "STEWARD_API_URL", "STEWARD_RELAY_URL")
# Verification runs as a uid of its own per task, so concurrent runs never share a
# process-count budget or each other's files: 200000 + a hash of the task id.
SANDBOX_UID_BASE = 200_000
SANDBOX_UID_SPAN = 100_000

_HARNESS_ENV = {
    "STEWARD_RUNNER_MAX_TURNS": "max_turns",
    "STEWARD_RUNNER_MAX_INVALID_CALLS": "max_invalid_calls",
    "STEWARD_RUNNER_MAX_REPAIR_ROUNDS": "max_repair_rounds",
    "STEWARD_RUNNER_MAX_SECONDS": "max_seconds",
    "STEWARD_RUNNER_MAX_OUTPUT_TOKENS": "max_output_tokens",
}
_SANDBOX_ENV = {
    "STEWARD_CHECK_WALL_SECONDS": "wall_seconds",
    "STEWARD_CHECK_CPU_SECONDS": "cpu_seconds",
    "STEWARD_CHECK_MEMORY_BYTES": "memory_bytes",
    "STEWARD_CHECK_MAX_PROCESSES": "max_processes",
    "STEWARD_CHECK_MAX_WRITE_BYTES": "max_write_bytes",
}


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable, never its value."""


@dataclass(frozen=True)
class RunnerConfig:
    task_id: str
    ticket: str = field(repr=False)
    api_url: str
    relay_url: str
    work_dir: Path | None = None  # None: a fresh temporary directory
    keep_work: bool = False
    sandbox_uid: int | None = None  # None: derived from the task id
    heartbeat_seconds: float = 20.0  # the control plane's grace (180 s) covers three beats at 60 s
    setup_seconds: float = 600.0
    stream_url: str | None = None  # the local stack's live view (POST /v1/runtime/stream)
    harness: HarnessLimits = field(default_factory=HarnessLimits)
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)
    sandbox_mode: SandboxMode | None = None  # None: probe (`steward.runner.sandbox.probe_mode`)
    allow_weak_sandbox: bool = False  # run checks where only a mode weaker than CONFINED works

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RunnerConfig:
        missing = [name for name in REQUIRED if not env.get(name)]
        if missing:
            raise ConfigError(f"{', '.join(missing)} not set; the launcher provides them")
        try:
            harness = HarnessLimits.model_validate({k: env[n] for n, k in _HARNESS_ENV.items() if env.get(n)})
            sandbox = SandboxLimits.model_validate({k: env[n] for n, k in _SANDBOX_ENV.items() if env.get(n)})
        except ValueError as exc:
            raise ConfigError(f"a STEWARD_RUNNER_* or STEWARD_CHECK_* variable is invalid: {exc}") from None
        try:
            heartbeat = float(env.get("STEWARD_RUNNER_HEARTBEAT_SECONDS") or cls.heartbeat_seconds)
        except ValueError:
            raise ConfigError("STEWARD_RUNNER_HEARTBEAT_SECONDS must be a number of seconds") from None
        if not 0.1 <= heartbeat <= 60:
            raise ConfigError(
                "STEWARD_RUNNER_HEARTBEAT_SECONDS must be within 0.1..60 (a runtime renews its task at least every 60 s)"
            )
        uid = env.get("STEWARD_SANDBOX_UID", "")
        if uid and not uid.isdigit():
            raise ConfigError("STEWARD_SANDBOX_UID must be a number")
        forced = env.get("STEWARD_RUNNER_SANDBOX_MODE", "").strip().lower()
        if forced not in ("", "auto", *SandboxMode):
            raise ConfigError("STEWARD_RUNNER_SANDBOX_MODE must be auto or one of " + ", ".join(SandboxMode))
        allow_weak = env.get("STEWARD_RUNNER_ALLOW_WEAK_SANDBOX", "").strip()
        if allow_weak not in ("", "0", "1"):
            raise ConfigError(
                "STEWARD_RUNNER_ALLOW_WEAK_SANDBOX must be 1 (allow) or 0 (refuse, the default)"
            )
        return cls(
            task_id=env["STEWARD_TASK_ID"],
            ticket=env["STEWARD_TICKET"],
            api_url=env["STEWARD_API_URL"],
            relay_url=env["STEWARD_RELAY_URL"],
            work_dir=Path(env["STEWARD_WORK_DIR"]) if env.get("STEWARD_WORK_DIR") else None,
            keep_work=env.get("STEWARD_KEEP_WORK", "") == "1",
            sandbox_uid=int(uid) if uid else None,
            heartbeat_seconds=heartbeat,
            stream_url=env.get("STEWARD_STREAM_URL") or None,
            harness=harness,
            sandbox=sandbox,
            sandbox_mode=SandboxMode(forced) if forced not in ("", "auto") else None,
            allow_weak_sandbox=allow_weak == "1",
        )

    @property
    def uid(self) -> int:
        if self.sandbox_uid is not None:
            return self.sandbox_uid
        digest = int(hashlib.sha256(self.task_id.encode()).hexdigest()[:8], 16)
        return SANDBOX_UID_BASE + digest % SANDBOX_UID_SPAN
