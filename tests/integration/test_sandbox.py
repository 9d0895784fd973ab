"""The verification sandbox with real processes under real bubblewrap (and in the weaker modes):
only listed checks run, exactly, without a shell, as an unprivileged uid, with no network, no
credentials and no view of the host's files, and every bound (time, output, processes, memory,
file size, CPU) ends the command and everything it started."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import ValidationError
from steward.runner import sandbox as module
from steward.runner.config import ConfigError, RunnerConfig
from steward.runner.sandbox import (
    CommandRefused,
    Sandbox,
    SandboxLimits,
    SandboxMode,
    VerifyArgs,
    parse_allowlist,
    probe_mode,
)

NOBODY = 65534
SANE_SECONDS = 30.0  # how long a test waits for a thread before it calls the run hung
REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("setpriv") is None,
        reason="needs root, bubblewrap and setpriv (make installs bubblewrap)",
    ),
]

MakeSandbox = Callable[..., Sandbox]


def limits(**overrides: float) -> SandboxLimits:
    """Small bounds so that the suite stays fast."""
    values: dict[str, float] = {
        "wall_seconds": 10.0,
        "cpu_seconds": 10,
        "memory_bytes": 1024**3,
        "max_processes": 64,
        "max_file_bytes": 16 * 1024**2,
        "max_output_bytes": 256 * 1024,
        "kill_grace_seconds": 0.5,
    }
    values.update(overrides)
    return SandboxLimits.model_validate(values)


def live_processes(uid: int) -> list[int]:
    """Processes of `uid` that are not zombies (a zombie is dead; its parent reaps it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            lines = (entry / "status").read_text().splitlines()
        except OSError:
            continue
        fields = {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}
        if str(uid) in fields.get("Uid", "").split()[:2] and not fields.get("State", "").startswith("Z"):
            found.append(int(entry.name))
    return found


def new_clone(root: Path) -> Path:
    clone = root / "clone"
    clone.mkdir()
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    (clone / "README.md").write_text("hello\n")
    return clone


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes | str]]:
    """Every entry under `root` (`.git` too), without following links: mode, owner, content."""
    state: dict[str, tuple[int, int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            info = path.lstat()
            content: bytes | str = b""
            if stat.S_ISLNK(info.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = path.read_bytes()
            state[str(path.relative_to(root))] = (info.st_mode, info.st_uid, content)
    return state


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    return new_clone(tmp_path)


@pytest.fixture
def open_clone() -> Iterator[Path]:
    """A clone whose ancestors the uid can traverse: the weaker modes see the host's file system."""
    root = Path(tempfile.mkdtemp(prefix="steward-sandbox-test-"))
    root.chmod(0o755)
    try:
        yield new_clone(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def sandbox(clone: Path) -> MakeSandbox:
    def make(*checks: str, mode: SandboxMode = SandboxMode.BWRAP, **overrides: float) -> Sandbox:
        return Sandbox(clone, checks, mode=mode, uid=NOBODY, limits=limits(**overrides))

    return make


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    yield
    assert live_processes(NOBODY) == [], "a sandboxed process outlived its run"


# -- which commands may run ----------------------------------------------------------------------


def test_a_command_the_plan_does_not_list_is_refused(sandbox: MakeSandbox) -> None:
    box = sandbox("python -m pytest -q", "ruff check .")
    with pytest.raises(CommandRefused, match="not a check the plan lists") as refused:
        box.run("id")
    assert "`python -m pytest -q`" in str(refused.value)
    assert "`ruff check .`" in str(refused.value)


@pytest.mark.parametrize(
    "command",
    [
        "python -m pytest -q; rm -rf /",
        "python -m pytest -q && touch pwned",
        "$(id)",
        "`id`",
        "python -m pytest -q | tee out",
        "python -m pytest -q > out",
        "touch pwned",
    ],
)
def test_shell_syntax_is_refused_and_nothing_runs(sandbox: MakeSandbox, clone: Path, command: str) -> None:
    box = sandbox("python -m pytest -q")
    with pytest.raises(CommandRefused) as refused:
        box.run(command)
    if command != "touch pwned":
        assert "without a shell" in str(refused.value)
    assert not (clone / "out").exists()
    assert not (clone / "pwned").exists()


@pytest.mark.parametrize(
    "command", ["python -m pytest -q -x", "python -m pytest -q --co", "ruff check . --fix"]
)
def test_an_allowlisted_command_with_extra_arguments_is_refused(sandbox: MakeSandbox, command: str) -> None:
    box = sandbox("python -m pytest -q", "ruff check .")
    with pytest.raises(CommandRefused, match="adds arguments"):
        box.resolve(command)


def test_a_listed_check_matches_by_text_or_by_argv(sandbox: MakeSandbox) -> None:
    box = sandbox("python -m pytest -q", "sh -c 'echo hi; echo there'")
    assert box.resolve("  python   -m pytest  -q ") == ("python", "-m", "pytest", "-q")
    # The listed check itself may hold shell syntax: the plan's author wrote it, and `sh` sees it.
    assert box.resolve("sh -c 'echo hi; echo there'") == ("sh", "-c", "echo hi; echo there")
    assert box.resolve('sh -c "echo hi; echo there"') == ("sh", "-c", "echo hi; echo there")
    assert box.run("sh -c 'echo hi; echo there'").output == "hi\nthere\n"


def test_a_check_that_does_not_split_is_refused_at_parse_time() -> None:
    assert parse_allowlist([" ruff check . ", "python -m pytest -q"]) == {
        "ruff check .": ("ruff", "check", "."),
        "python -m pytest -q": ("python", "-m", "pytest", "-q"),
    }
    with pytest.raises(ValueError, match="does not split"):
        parse_allowlist(["sh -c 'unterminated"])
    with pytest.raises(ValueError, match="empty"):
        parse_allowlist(["   "])


def test_the_tool_input_is_bounded() -> None:
    assert VerifyArgs.model_validate({"command": "ruff check ."}).command == "ruff check ."
    for bad in ({"command": ""}, {"command": "x" * 1001}, {"command": "ls", "shell": True}, {}):
        with pytest.raises(ValidationError):
            VerifyArgs.model_validate(bad)


# -- who runs it, and what it can see --------------------------------------------------------------


def test_probe_finds_bubblewrap_here() -> None:
    mode, reason = probe_mode(uid=NOBODY)
    assert mode is SandboxMode.BWRAP
    assert "\n" not in reason
    assert str(NOBODY) in reason


def test_runs_as_the_unprivileged_uid_without_capabilities(sandbox: MakeSandbox) -> None:
    box = sandbox("id -u", "id -G", "cat /proc/self/status")
    assert box.run("id -u").output == f"{NOBODY}\n"
    assert box.run("id -G").output.split() == [str(box.gid)]
    status = box.run("cat /proc/self/status").output
    for capability in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{capability}:\t0000000000000000" in status


def test_the_environment_is_scrubbed(sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "GITHUB_TOKEN": "ghs_" + "s" * 36,
        "STEWARD_CAPABILITY": "cap-secret-value",
        "STEWARD_TICKET": "ticket-secret-value",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    result = sandbox("env").run("env")
    assert result.passed
    names = {line.split("=", 1)[0] for line in result.output.splitlines()}
    assert names <= {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "TMPDIR", "PWD"}
    for name, value in secrets.items():
        assert name not in result.output
        assert value not in result.output
    assert "AWS" not in result.output


def test_there_is_no_network(sandbox: MakeSandbox) -> None:
    check = "python -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\""
    result = sandbox(check).run(check)
    assert result.exit_code not in (0, None)
    assert "OSError" in result.output or "unreachable" in result.output


def test_the_hosts_loopback_is_unreachable(sandbox: MakeSandbox) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        check = f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
        result = sandbox(check).run(check)
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()
    assert result.exit_code not in (0, None)
    assert "ConnectionRefusedError" in result.output


def test_setup_commands_may_have_the_network(clone: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        check = f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\""
        box = Sandbox(clone, [check], mode=SandboxMode.BWRAP, uid=NOBODY, limits=limits(), network=True)
        result = box.run(check)
        server.settimeout(5)
        connection, _ = server.accept()
        connection.close()
    assert result.passed, result.output


def test_the_hosts_files_are_not_visible(sandbox: MakeSandbox, clone: Path) -> None:
    secret = "do-not-leak-" + os.urandom(8).hex()
    planted = []
    for parent in ("/tmp", "/var/tmp"):
        directory = Path(tempfile.mkdtemp(dir=parent))
        directory.chmod(0o755)
        (directory / "secret.txt").write_text(secret)
        (directory / "secret.txt").chmod(0o644)
        planted.append(directory)
    try:
        checks = [f"cat {d / 'secret.txt'}" for d in planted] + [
            f"cat {REPO_ROOT / 'pyproject.toml'}",
            "ls /root",
        ]
        box = sandbox(*checks)
        for check in checks[:-1]:
            result = box.run(check)
            assert result.exit_code != 0
            assert "No such file or directory" in result.output
            assert secret not in result.output
            assert "[project]" not in result.output
        # Only the interpreter's own directory is there, under an empty /root.
        assert box.run("ls /root").output.split() == []
    finally:
        for directory in planted:
            shutil.rmtree(directory)


def test_cannot_write_outside_the_clone(sandbox: MakeSandbox) -> None:
    name = "steward-sandbox-probe-" + os.urandom(4).hex()
    targets = [
        Path("/etc") / name,
        REPO_ROOT / name,
        Path("/root") / name,
        Path("/usr") / name,
        Path("/") / name,
    ]
    checks = [f"touch {target}" for target in targets]
    box = sandbox(*checks)
    for check in checks:
        result = box.run(check)
        assert result.exit_code != 0, check
        reasons = ("Read-only file system", "Permission denied", "No such file or directory")
        assert any(reason in result.output for reason in reasons), result.output
    for target in targets:
        assert not target.exists()


def test_cannot_write_into_git(sandbox: MakeSandbox, clone: Path) -> None:
    git = clone / ".git"
    head = (git / "HEAD").read_bytes()
    checks = [
        "touch .git/evil",
        "rm -rf .git",
        "mv .git moved",
        "sh -c 'echo x > .git/HEAD'",
        "rm -f .git/HEAD",
    ]
    box = sandbox(*checks)
    for check in checks:
        assert box.run(check).exit_code != 0, check
    assert (git / "HEAD").read_bytes() == head
    assert not (git / "evil").exists()
    assert not (clone / "moved").exists()
    assert git.stat().st_uid == 0
    assert (git / "HEAD").stat().st_uid == 0


def test_can_write_inside_the_clone(sandbox: MakeSandbox, clone: Path) -> None:
    # The runner's own edits are root's; the sandbox hands them to the uid before each run.
    (clone / "notes.txt").write_text("first\n")
    box = sandbox("touch made-by-check", "sh -c 'echo second >> notes.txt'", "mkdir -p build/out")
    for check in ("touch made-by-check", "sh -c 'echo second >> notes.txt'", "mkdir -p build/out"):
        assert box.run(check).passed, check
    assert (clone / "made-by-check").stat().st_uid == NOBODY
    assert (clone / "notes.txt").read_text() == "first\nsecond\n"
    assert (clone / "build" / "out").is_dir()
    assert clone.stat().st_uid == 0


def test_real_pytest_passes_and_fails(sandbox: MakeSandbox, clone: Path) -> None:
    box = sandbox("python -m pytest -q")
    (clone / "test_tiny.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    passed = box.run("python -m pytest -q")
    assert passed.exit_code == 0, passed.output
    assert passed.passed
    assert "1 passed" in passed.output
    (clone / "test_tiny.py").write_text("def test_bad():\n    assert 1 + 1 == 3\n")
    failed = box.run("python -m pytest -q")
    assert failed.exit_code == 1, failed.output
    assert not failed.passed
    assert "1 failed" in failed.output


# -- bounds ----------------------------------------------------------------------------------------


def test_infinite_output_is_truncated_and_killed(sandbox: MakeSandbox) -> None:
    result = sandbox("yes", max_output_bytes=64 * 1024, wall_seconds=20).run("yes")
    assert result.output_truncated
    assert not result.timed_out
    assert result.exit_code is None
    assert result.signal is not None
    assert not result.passed
    assert len(result.output.encode()) == 64 * 1024
    assert set(result.output.split()) == {"y"}


def test_a_sleep_past_the_timeout_is_killed_with_its_group(sandbox: MakeSandbox) -> None:
    check = "sh -c 'sleep 30 & sleep 30'"
    result = sandbox(check, wall_seconds=1).run(check)
    assert result.timed_out
    assert result.exit_code is None
    assert result.signal is not None
    assert not result.passed
    assert live_processes(NOBODY) == []


@pytest.mark.parametrize(
    "check",
    [
        "python bomb.py",  # every process keeps forking until the wall limit
        'python -c "import os; [os.fork() for _ in iter(int, 1)]"',
        "sh -c 'b(){ b|b& }; b'",
    ],
)
def test_a_fork_bomb_ends_and_leaves_nothing(sandbox: MakeSandbox, clone: Path, check: str) -> None:
    (clone / "bomb.py").write_text(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    result = sandbox(check, wall_seconds=2, max_processes=48).run(check)
    if check == "python bomb.py":
        assert result.timed_out
        assert not result.passed
    assert live_processes(NOBODY) == []
    # The host can still start processes.
    assert subprocess.run(["true"], check=False).returncode == 0


def test_memory_file_size_and_cpu_are_bounded(sandbox: MakeSandbox, clone: Path) -> None:
    hog = "python -c 'b = bytearray(512 * 1024 * 1024)'"
    big = "python -c \"open('big.bin', 'wb').write(b'x' * 4_000_000)\""
    spin = "python -c 'while True: pass'"
    box = sandbox(hog, big, spin, memory_bytes=256 * 1024**2, max_file_bytes=1024**2, cpu_seconds=1)
    memory = box.run(hog)
    assert memory.exit_code == 1
    assert "MemoryError" in memory.output
    size = box.run(big)
    assert size.exit_code == 1
    assert "File too large" in size.output
    assert (clone / "big.bin").stat().st_size <= 1024**2
    cpu = box.run(spin)
    assert not cpu.passed
    assert not cpu.timed_out  # the CPU limit ended it, not the wall clock


WRITE_BOUND = 8 * 1024**2
SLACK = 1024**2

# One line per way of writing too much into the clone: each is stopped, reported, and none of
# its writes is kept. The per-file limit (16 MiB here) is above the bound, so it does not help.
TOO_MUCH_WRITING = [
    pytest.param("python -c \"open('big.bin', 'wb').write(b'x' * (64 << 20))\"", id="one-64-MiB-file"),
    pytest.param("sh -c 'yes > big.txt'", id="yes-into-a-file"),
    pytest.param(
        "python -c \"[open(f'part{i}.bin', 'wb').write(b'x' * (1 << 20)) for i in range(64)]\"",
        id="many-files-each-under-the-per-file-limit",
    ),
    pytest.param(
        "python -c \"import os; os.makedirs('deep/er', exist_ok=True); "
        "[open(f'deep/er/{i}', 'w').close() for i in range(20000)]\"",
        id="twenty-thousand-empty-files",
    ),
    pytest.param(  # ENOSPC does not stop it: the supervisor must, well before the wall clock
        "sh -c 'while :; do cat /dev/zero >> spin.bin 2>/dev/null; done'", id="a-writer-that-ignores-enospc"
    ),
    pytest.param(
        "python -c \"import os; os.makedirs('a/b'); open('a/b/zeros', 'wb').write(bytes(9 << 20))\"",
        id="nested-zeros-just-over",
    ),
]


def disk_usage(root: Path) -> int:
    """Bytes the tree takes on disk (allocated blocks, so holes count as nothing)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


@pytest.mark.parametrize("check", TOO_MUCH_WRITING)
def test_writing_past_the_bound_is_stopped_reported_and_kept_nowhere(
    sandbox: MakeSandbox, clone: Path, check: str
) -> None:
    (clone / "keep.txt").write_text("as it was\n")
    box = sandbox("true", check, max_write_bytes=WRITE_BOUND, wall_seconds=20)
    assert box.run("true").passed  # the clone is handed to the uid, as before any check
    before = snapshot(clone)
    used_before = disk_usage(clone)
    result = box.run(check)
    assert result.write_limit_exceeded, result.output
    assert not result.passed
    assert not result.timed_out  # stopped by the bound, not by the wall clock
    assert result.duration_s < 15
    assert f"wrote more than {WRITE_BOUND} bytes" in result.output
    assert result.output.rstrip().endswith("nothing it wrote was kept]")
    # The host's disk never held the excess, and the clone is as it was before the run.
    assert disk_usage(clone) <= used_before + WRITE_BOUND + SLACK
    assert snapshot(clone) == before


def test_writing_within_the_bound_is_kept_as_made(sandbox: MakeSandbox, clone: Path, tmp_path: Path) -> None:
    (clone / "append.txt").write_text("first\n")
    (clone / "gone.txt").write_text("deleted by the check\n")
    (clone / "tree").mkdir()
    (clone / "tree" / "old.txt").write_text("in a directory the check replaces\n")
    (clone / "was-dir").mkdir()
    (clone / "was-dir" / "x").write_text("x\n")
    (clone / "was-file").write_text("becomes a directory\n")
    (clone / "moved-from.txt").write_text("renamed\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    outside.chmod(0o666)
    os.link(outside, clone / "hardlink.txt")  # a hard link to a file outside the clone
    script = "; ".join(
        [
            "echo second >> append.txt",
            "rm gone.txt",
            "rm -r tree && mkdir tree && echo new > tree/new.txt",
            "rm -r was-dir && echo now-a-file > was-dir",
            "rm was-file && mkdir was-file && echo inside > was-file/in.txt",
            "mv moved-from.txt moved-to.txt",
            "ln -s append.txt link",
            "echo run > run.sh && chmod 755 run.sh",
            "truncate -s 1G sparse.bin",  # far past the bound in size, nothing in data
            "touch -d 2001-02-03T04:05:06 append.txt",
            "mkdir -p new/deeper && echo deep > new/deeper/file.txt",
            "echo through >> hardlink.txt",
            "echo scratch > /tmp/scratch.txt",
        ]
    )
    check = f"sh -c '{script}'"
    result = sandbox(check, max_write_bytes=WRITE_BOUND, max_file_bytes=2 * 1024**3).run(check)
    assert result.passed, result.output
    assert not result.write_limit_exceeded
    assert (clone / "append.txt").read_text() == "first\nsecond\n"
    assert (clone / "append.txt").stat().st_mtime == 981173106  # 2001-02-03T04:05:06Z
    assert not (clone / "gone.txt").exists()
    assert sorted(os.listdir(clone / "tree")) == ["new.txt"]
    assert (clone / "was-dir").read_text() == "now-a-file\n"
    assert (clone / "was-file" / "in.txt").read_text() == "inside\n"
    assert not (clone / "moved-from.txt").exists()
    assert (clone / "moved-to.txt").read_text() == "renamed\n"
    assert os.readlink(clone / "link") == "append.txt"
    assert stat.S_IMODE((clone / "run.sh").stat().st_mode) == 0o755
    assert (clone / "sparse.bin").stat().st_size == 1024**3
    assert (clone / "sparse.bin").stat().st_blocks == 0  # the hole stays a hole on the host
    assert (clone / "new" / "deeper" / "file.txt").read_text() == "deep\n"
    assert (clone / "new" / "deeper" / "file.txt").stat().st_uid == NOBODY
    # The hard link's name was replaced; the file outside it was never written through.
    assert (clone / "hardlink.txt").read_text() == "outside\nthrough\n"
    assert outside.read_text() == "outside\n"
    assert not (clone / "scratch.txt").exists()
    assert clone.stat().st_uid == 0
    assert stat.S_IMODE(clone.stat().st_mode) == 0o1777
    assert not [name for name in os.listdir(clone) if "steward" in name]  # no temporary left


def test_the_sandboxs_tmp_is_bounded_too(sandbox: MakeSandbox) -> None:
    check = "python -c \"open('/tmp/big', 'wb').write(b'x' * (64 << 20))\""
    result = sandbox(check, max_write_bytes=WRITE_BOUND).run(check)
    assert result.exit_code == 1
    assert "No space left on device" in result.output


def test_the_write_bound_mounts_nothing_on_the_host(sandbox: MakeSandbox) -> None:
    scratch = set(Path(tempfile.gettempdir()).glob("steward-writes-*"))
    mounts = Path("/proc/self/mountinfo").read_text()
    during: list[str] = []
    check = "sh -c 'head -c 1048576 /dev/zero > x; echo written; sleep 0.3'"
    box = sandbox(check, max_write_bytes=WRITE_BOUND)
    # The host's mount table while the command runs (the main thread's namespace is the host's).
    result = box.run(check, on_output=lambda _: during.append(Path("/proc/self/mountinfo").read_text()))
    assert result.passed, result.output
    assert during == [mounts]
    assert Path("/proc/self/mountinfo").read_text() == mounts
    assert set(Path(tempfile.gettempdir()).glob("steward-writes-*")) == scratch


def test_a_command_that_cannot_be_bounded_does_not_run(
    sandbox: MakeSandbox, clone: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> None:
        raise OSError(1, "mount overlay: Operation not permitted")

    monkeypatch.setattr(module, "_mount", refuse)
    result = sandbox("touch ran").run("touch ran")
    assert result.exit_code == 126
    assert not result.passed
    assert (
        result.output
        == "steward: cannot bound the command's writes: mount overlay: Operation not permitted\n"
    )
    assert not (clone / "ran").exists()


def test_the_write_bound_comes_from_the_environment() -> None:
    env = {
        "STEWARD_TASK_ID": "t",
        "STEWARD_TICKET": "x",
        "STEWARD_API_URL": "http://a",
        "STEWARD_RELAY_URL": "http://r",
        "STEWARD_CHECK_MAX_WRITE_BYTES": str(WRITE_BOUND),
    }
    assert RunnerConfig.from_env(env).sandbox.max_write_bytes == WRITE_BOUND
    assert (
        RunnerConfig.from_env({**env, "STEWARD_CHECK_MAX_WRITE_BYTES": ""}).sandbox.max_write_bytes == 1024**3
    )
    with pytest.raises(ConfigError, match="STEWARD_CHECK_"):
        RunnerConfig.from_env({**env, "STEWARD_CHECK_MAX_WRITE_BYTES": "lots"})


def test_on_output_receives_chunks_live(sandbox: MakeSandbox) -> None:
    check = "sh -c 'echo one; sleep 1; echo two'"
    chunks: list[bytes] = []
    result = sandbox(check).run(check, on_output=chunks.append)
    assert result.passed
    assert len(chunks) >= 2  # "one" arrived before "two" was written
    assert chunks[0] == b"one\n"
    assert b"".join(chunks).decode() == result.output == "one\ntwo\n"


def test_cancel_kills_promptly(sandbox: MakeSandbox) -> None:
    check = "sh -c 'echo ready; sleep 30'"
    box = sandbox(check, wall_seconds=60)
    ready = threading.Event()
    cancel = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(box.run, check, on_output=lambda _: ready.set(), cancel=cancel)
        assert ready.wait(SANE_SECONDS)
        cancel.set()
        result = future.result(timeout=SANE_SECONDS)
    assert result.exit_code is None
    assert not result.timed_out
    assert not result.passed
    assert result.output == "ready\n"


def test_kill_from_another_thread(sandbox: MakeSandbox) -> None:
    check = "sh -c 'echo ready; sleep 30'"
    box = sandbox(check, wall_seconds=60)
    box.kill()  # idle: nothing to kill
    ready = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(box.run, check, on_output=lambda _: ready.set())
        assert ready.wait(SANE_SECONDS)
        box.kill()
        result = future.result(timeout=SANE_SECONDS)
    assert result.exit_code is None
    assert not result.passed


def test_a_kill_while_the_command_starts_still_kills_it(
    sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = sandbox("sleep 30", wall_seconds=60)
    hand_over = module._hand_over

    def kill_first(*args: object) -> None:
        box.kill()  # the runner is stopped between resolving the command and starting it
        hand_over(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "_hand_over", kill_first)
    result = box.run("sleep 30")
    assert result.exit_code is None
    assert not result.timed_out
    assert not result.passed


def test_a_missing_program_fails_like_a_shell_would(sandbox: MakeSandbox) -> None:
    result = sandbox("no-such-program --flag").run("no-such-program --flag")
    assert result.exit_code == 127
    assert "no-such-program" in result.output


# -- the weaker modes ------------------------------------------------------------------------------


def test_unprivileged_user_mode_drops_the_uid_and_scrubs(
    open_clone: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_" + "u" * 36)
    box = Sandbox(
        open_clone,
        ["id -u", "env", "touch made-by-check"],
        mode=SandboxMode.UNPRIVILEGED_USER,
        uid=NOBODY,
        limits=limits(),
    )
    assert box.run("id -u").output == f"{NOBODY}\n"
    env = box.run("env")
    names = {line.split("=", 1)[0] for line in env.output.splitlines()}
    assert names == {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "TMPDIR"}
    assert "ghs_" not in env.output
    assert box.run("touch made-by-check").passed
    assert (open_clone / "made-by-check").stat().st_uid == NOBODY
    assert (open_clone / ".git").stat().st_uid == 0


def test_unprivileged_user_mode_kills_on_timeout_and_flood(open_clone: Path) -> None:
    sleeper = "sh -c 'sleep 30 & sleep 30'"
    spawner = "sh -c 'while :; do sleep 30 & done'"  # up to the process limit, where sh gives up
    box = Sandbox(
        open_clone,
        [sleeper, spawner],
        mode=SandboxMode.UNPRIVILEGED_USER,
        uid=NOBODY,
        limits=limits(wall_seconds=1, max_processes=32, max_output_bytes=16 * 1024),
    )
    slept = box.run(sleeper)
    assert slept.timed_out
    assert slept.exit_code is None
    assert live_processes(NOBODY) == []
    spawned = box.run(spawner)
    assert not spawned.passed
    # Its background sleeps were still running when it gave up: they died with the group.
    assert live_processes(NOBODY) == []


def test_same_user_mode_still_scrubs(open_clone: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEWARD_CAPABILITY", "cap-secret-value")
    box = Sandbox(open_clone, ["env", "id -u"], mode=SandboxMode.SAME_USER, limits=limits())
    assert "cap-secret-value" not in box.run("env").output
    assert box.run("id -u").output == f"{os.geteuid()}\n"
