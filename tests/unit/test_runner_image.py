"""The runner image installs nothing unpinned: every `pip install` in its Dockerfile is
either a lock file with hashes or the project itself, and the lock for plans' checks
(containers/runner/checks.lock) is what tools/runner_checks_lock.py writes from the locks."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "containers" / "runner" / "Dockerfile"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "runner_checks_lock", ROOT / "tools" / "runner_checks_lock.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pip_installs(dockerfile: str) -> list[list[str]]:
    """The arguments of each `pip install` the Dockerfile's RUN lines run."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    installs = []
    for line in joined.splitlines():
        if not line.strip().upper().startswith("RUN "):
            continue
        for command in re.split(r"&&|;|\|\|", line.strip()[4:]):
            words = shlex.split(command)
            for index in range(len(words) - 1):
                if words[index] in ("pip", "pip3") and words[index + 1] == "install":
                    installs.append(words[index + 2 :])
                elif words[index : index + 4] == ["python", "-m", "pip", "install"]:
                    installs.append(words[index + 4 :])
    return installs


def unpinned(arguments: list[str]) -> str | None:
    """Why one `pip install` may bring in something unpinned, or None when it cannot."""
    options = [a for a in arguments if a.startswith("-")]
    targets = [a for a in arguments if not a.startswith("-")]
    if "-r" in arguments or "--requirement" in arguments:
        if "--require-hashes" not in options or "--no-deps" not in options:
            return "a requirements file without --require-hashes and --no-deps"
        files = {arguments[i + 1] for i, a in enumerate(arguments) if a in ("-r", "--requirement")}
        extra = [t for t in targets if t not in files]
        return f"also installs {extra}" if extra else None
    if targets == ["."] and "--no-deps" in options:
        return None  # the project itself; its dependencies come from requirements.lock
    return f"installs {targets} without a lock"


# (a RUN line, whether it installs something unpinned)
INSTALLS = [
    ("RUN pip install --no-cache-dir pytest", True),
    ("RUN pip install pytest==9.2.0", True),
    ("RUN pip install --no-cache-dir . && pip check", True),
    ("RUN pip install -r requirements.lock", True),
    ("RUN pip install --require-hashes -r requirements.lock", True),
    ("RUN pip install --require-hashes --no-deps -r checks.lock pytest", True),
    ("RUN python -m pip install ruff", True),
    ("RUN apt-get update && pip3 install \\\n    requests", True),
    ("RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock", False),
    ("RUN pip install --no-cache-dir --no-deps .", False),
    ("RUN pip check", False),
]


def test_an_install_outside_the_locks_is_recognized() -> None:
    for line, bad in INSTALLS:
        installs = pip_installs(line)
        assert any(unpinned(i) for i in installs) is bad, (line, installs)


def test_the_runner_image_installs_nothing_unpinned() -> None:
    installs = pip_installs(DOCKERFILE.read_text())
    assert len(installs) >= 3  # the runtime lock, the project, the checks' lock
    assert [(i, unpinned(i)) for i in installs if unpinned(i)] == []
    copied = " ".join(line for line in DOCKERFILE.read_text().splitlines() if line.startswith("COPY "))
    for arguments in installs:
        for index, argument in enumerate(arguments):
            if argument in ("-r", "--requirement"):
                assert Path(arguments[index + 1]).name in copied, arguments[index + 1]


def test_the_checks_lock_is_what_the_tool_writes_from_the_locks() -> None:
    tool = _tool()
    written = tool.OUTPUT.read_text()
    assert written == tool.render(), "containers/runner/checks.lock is stale: run tools/runner_checks_lock.py"
    dev = tool.lock_entries((ROOT / "requirements-dev.lock").read_text())
    pinned = tool.lock_entries(written)
    assert "pytest" in pinned
    for name, entry in pinned.items():  # each pin and its hashes exactly as the dev lock has them
        assert entry == dev[name], name
        assert "--hash=sha256:" in entry, name
