"""The CONFINED mode's filter and ruleset as the kernel would take them (steward.runner.confine):
the seccomp program is run here, by a small classic-BPF interpreter, on system calls of both
architectures it knows (aarch64's cannot be made on this machine), and the Landlock rights it
asks for are only those each ABI version knows. The syscall table is checked against the
kernel's headers where they are installed."""

from __future__ import annotations

import errno
import re
import struct
from pathlib import Path

import pytest
from steward.runner import confine
from steward.runner.confine import (
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_X86_64,
    REFUSED,
    SYSCALLS,
    Landlock,
    seccomp_program,
)

ALLOW = 0x7FFF0000
KILL = 0x80000000
EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
CLONE_THREAD_FLAGS = 0x003D0F00  # what pthread_create passes
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
AUDIT_ARCH_I386 = 0x40000003


def run_bpf(program: bytes, *, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """What the filter returns for one system call (struct seccomp_data, little-endian)."""
    padded = (*args, *(0,) * (6 - len(args)))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *padded)
    code = [struct.unpack_from("<HBBI", program, offset) for offset in range(0, len(program), 8)]
    accumulator, pc = 0, 0
    while True:
        op, true, false, k = code[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            accumulator = struct.unpack_from("<I", data, k)[0]
        elif op == 0x06:  # ret k
            return int(k)
        elif op in (0x15, 0x35, 0x45):  # jeq, jge, jset
            taken = {0x15: accumulator == k, 0x35: accumulator >= k, 0x45: bool(accumulator & k)}[op]
            pc += true if taken else false
        else:
            raise AssertionError(f"unexpected BPF op {op:#x}")


ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
# (system call, its first argument, what the checks' filter answers)
CHECKS_FILTER = [
    ("socket", AF_UNIX, ALLOW),
    ("socketpair", AF_UNIX, ALLOW),
    ("socket", AF_INET, EPERM),
    ("socket", AF_INET6, EPERM),
    ("socket", AF_NETLINK, EPERM),
    ("socket", AF_PACKET, EPERM),
    ("socketpair", AF_INET, EPERM),
    ("clone", CLONE_THREAD_FLAGS, ALLOW),
    ("clone", 0x11, ALLOW),  # fork: SIGCHLD
    ("clone", CLONE_NEWUSER | 0x11, EPERM),
    ("clone", CLONE_NEWNET, EPERM),
    ("clone3", 0, ENOSYS),
    *((name, 0, EPERM) for name in REFUSED),
    ("landlock_create_ruleset", 0, ALLOW),
]


@pytest.mark.parametrize("arch", sorted(ARCH))
@pytest.mark.parametrize(("name", "arg", "expected"), CHECKS_FILTER)
def test_the_filter_answers_each_system_call(arch: str, name: str, arg: int, expected: int) -> None:
    program = seccomp_program()
    assert run_bpf(program, arch=ARCH[arch], nr=SYSCALLS[arch][name], args=(arg,)) == expected


@pytest.mark.parametrize("arch", sorted(ARCH))
def test_setup_commands_keep_every_socket_family_and_nothing_else(arch: str) -> None:
    program = seccomp_program(network=True)
    numbers = SYSCALLS[arch]
    assert run_bpf(program, arch=ARCH[arch], nr=numbers["socket"], args=(AF_INET,)) == ALLOW
    assert run_bpf(program, arch=ARCH[arch], nr=numbers["ptrace"]) == EPERM
    assert run_bpf(program, arch=ARCH[arch], nr=numbers["io_uring_setup"]) == EPERM


def test_other_abis_are_refused_or_killed() -> None:
    program = seccomp_program()
    # x32 system calls on x86-64 (the same socket, through a second table) ...
    assert run_bpf(program, arch=AUDIT_ARCH_X86_64, nr=0x40000000 | 41, args=(AF_INET,)) == EPERM
    # ... and another audit architecture (i386 by int 0x80: socketcall) kills the process.
    assert run_bpf(program, arch=AUDIT_ARCH_I386, nr=102, args=(1,)) == KILL


def test_both_tables_name_the_same_calls() -> None:
    assert SYSCALLS["x86_64"].keys() == SYSCALLS["aarch64"].keys()
    assert set(REFUSED) <= SYSCALLS["x86_64"].keys()


HEADERS = {
    "x86_64": (Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), r"__NR_{name}"),
    "aarch64": (Path("/usr/include/asm-generic/unistd.h"), r"__NR(?:3264)?_{name}"),
}


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_the_numbers_are_the_kernels(arch: str) -> None:
    header, pattern = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"{header} is not installed")
    text = header.read_text()
    for name, number in SYSCALLS[arch].items():
        found = re.search(rf"^#define {pattern.format(name=name)}\s+(\d+)\s*$", text, re.MULTILINE)
        assert found is not None, name
        assert int(found.group(1)) == number, name


REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
READS = confine.FS_READ_FILE | confine.FS_READ_DIR | confine.FS_EXECUTE
# ABI -> (REFER handled, TRUNCATE handled, TCP handled, scoped)
LANDLOCK_ABIS = {
    1: (False, False, False, False),
    2: (True, False, False, False),
    3: (True, True, False, False),
    4: (True, True, True, False),
    5: (True, True, True, False),
    6: (True, True, True, True),
    7: (True, True, True, True),
}


@pytest.mark.parametrize("abi", sorted(LANDLOCK_ABIS))
def test_landlock_asks_only_for_what_each_abi_knows(abi: int) -> None:
    refer, truncate, tcp, scoped = LANDLOCK_ABIS[abi]
    ruleset = Landlock(abi)
    assert bool(ruleset.handled_fs & REFER) is refer
    assert bool(ruleset.handled_fs & TRUNCATE) is truncate
    assert ruleset.handled_fs & (READS | IOCTL_DEV) == 0  # reading stays allowed everywhere
    assert ruleset.handled_fs < (1 << 13 if abi == 1 else 1 << 14 if abi == 2 else 1 << 15)
    assert bool(ruleset.handled_net(False)) is tcp
    assert ruleset.handled_net(True) == 0  # setup commands fetch dependencies
    assert bool(ruleset.scoped) is scoped
