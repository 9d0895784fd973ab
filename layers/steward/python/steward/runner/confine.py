"""The CONFINED sandbox mode's kernel side (`steward.runner.sandbox`): a seccomp filter and a
Landlock ruleset that the verification command's child installs on itself before `exec`, where
bubblewrap cannot run (AWS Fargate: no user namespaces, no CAP_SYS_ADMIN). No dependency: the
BPF program is assembled here and handed to the kernel through ctypes.

The seccomp filter (`seccomp_program`), for the architectures in `SYSCALLS` only (x86-64 and
aarch64; any other audit architecture, such as i386 system calls made by `int 0x80` on x86-64,
kills the process, so no second syscall table can go around the filter):

* `socket` and `socketpair` fail with EPERM for every address family but AF_UNIX: no TCP, UDP,
  raw, packet, netlink or vsock socket, so no connection to loopback, the task's network or
  the metadata endpoints. Neither architecture has `socketcall`. (For the plan's `setup`
  commands, which fetch dependencies, the families are left alone.)
* `REFUSED` fail with EPERM: whatever gives another process's memory or descriptors (ptrace,
  process_vm_*, pidfd_getfd), changes the mount table or namespaces (mount, the new mount API,
  umount2, pivot_root, chroot, unshare, setns, and `clone` with a CLONE_NEW* flag), reaches
  kernel subsystems a build never needs and that widen the kernel's attack surface (bpf,
  perf_event_open, the keyrings, module and kexec loading, userfaultfd, handle-based opens),
  and io_uring, whose operations (IORING_OP_SOCKET, _CONNECT, _OPENAT) are not system calls
  and so would go around both this filter's socket rule and nothing else would stop them.
* `clone3` fails with ENOSYS: its flags sit in a structure the filter cannot read, and every
  libc falls back to `clone` (whose flags it can) on ENOSYS.
* On x86-64, every x32 ABI system call (nr >= 0x40000000) fails with EPERM: a second table.

Landlock (`Landlock`), where the kernel has it (`landlock_abi()` > 0): reading stays allowed
everywhere, but writing a file, creating, removing, renaming into or linking anything is
allowed only beneath the directories named (the clone and the run's private temporary
directory), plus writing (never creating) the harmless character devices in `WRITABLE_DEVICES`.
Only rights the kernel's ABI knows are asked for: ABI 1 cannot grant REFER, so a rename or link
across directories fails with EXDEV there (tools that care copy instead); ABI 2 adds REFER,
ABI 3 TRUNCATE; from ABI 4 every TCP bind and connect is refused too (the net rights handled
with no rule: a second line behind the seccomp filter); from ABI 6 the command may neither
connect to an abstract unix socket nor signal a process made outside its own domain.
IOCTL_DEV (ABI 5) is left unhandled: it restricts no write, and terminals need it.

Everything that can fail is done in the parent (`Landlock.ruleset`, `seccomp_program`); the
child's `Confinement.install` makes four system calls and nothing else.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "ARCHES",
    "REFUSED",
    "SYSCALLS",
    "Confinement",
    "Landlock",
    "landlock_abi",
    "seccomp_available",
    "seccomp_program",
]

# -- the data: system call numbers per architecture ---------------------------------------------
# From the kernel's uapi headers (asm/unistd_64.h for x86-64, asm-generic/unistd.h for aarch64);
# tests/unit/test_confine.py compares them with the headers where these are installed.

AUDIT_ARCH_X86_64 = 0xC000003E  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_AARCH64 = 0xC00000B7  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE

REFUSED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
# What the filter looks at besides REFUSED: the socket families, clone's flags, clone3.
_INSPECTED = ("socket", "socketpair", "clone", "clone3")

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "socket": 41,
        "socketpair": 53,
        "clone": 56,
        "clone3": 435,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "pidfd_getfd": 438,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "chroot": 161,
        "unshare": 272,
        "setns": 308,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "bpf": 321,
        "perf_event_open": 298,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "userfaultfd": 323,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "landlock_create_ruleset": 444,
        "landlock_add_rule": 445,
        "landlock_restrict_self": 446,
    },
    "aarch64": {
        "socket": 198,
        "socketpair": 199,
        "clone": 220,
        "clone3": 435,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "pidfd_getfd": 438,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "chroot": 51,
        "unshare": 97,
        "setns": 268,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "bpf": 280,
        "perf_event_open": 241,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "userfaultfd": 282,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "landlock_create_ruleset": 444,
        "landlock_add_rule": 445,
        "landlock_restrict_self": 446,
    },
}


@dataclass(frozen=True)
class Arch:
    name: str  # platform.machine()'s name, the key into SYSCALLS
    audit: int  # seccomp_data.arch
    x32_bit: int | None  # system calls at or above this are another ABI's (x86-64's x32)


ARCHES = (
    Arch("x86_64", AUDIT_ARCH_X86_64, 0x40000000),
    Arch("aarch64", AUDIT_ARCH_AARCH64, None),
)

AF_UNIX = 1
# clone's CLONE_NEW* flags: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
CLONE_NEW_ANY = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NEW_ANY |= 0x20000000 | 0x40000000

# -- seccomp ------------------------------------------------------------------------------------

_PR_GET_SECCOMP = 21
_PR_SET_SECCOMP = 22
_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_MODE_FILTER = 2
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]. Both
# architectures are little-endian, so an argument's low 32 bits (an int: a socket family;
# clone keeps only the low 32 bits of its flags) sit at its own offset.
_NR, _ARCH, _ARG0 = 0, 4, 16

Jump = int | str  # an offset, or a label resolved by `_assemble`


def seccomp_program(*, network: bool = False) -> bytes:
    """The filter as `struct sock_filter[]` bytes. `network`: leave socket families alone (the
    plan's setup commands); everything else is refused all the same."""
    code: list[tuple[int, Jump, Jump, int] | str] = [(_LD_W_ABS, 0, 0, _ARCH)]
    for arch in ARCHES:
        code.append((_JEQ, arch.name, 0, arch.audit))
    code.append((_RET, 0, 0, _RET_KILL_PROCESS))
    for arch in ARCHES:
        numbers = SYSCALLS[arch.name]
        code += [arch.name, (_LD_W_ABS, 0, 0, _NR)]
        if arch.x32_bit is not None:
            code.append((_JGE, "deny", 0, arch.x32_bit))
        if not network:
            code.append((_JEQ, f"{arch.name}.socket", 0, numbers["socket"]))
            code.append((_JEQ, f"{arch.name}.socket", 0, numbers["socketpair"]))
        code.append((_JEQ, f"{arch.name}.clone", 0, numbers["clone"]))
        code.append((_JEQ, "enosys", 0, numbers["clone3"]))
        for name in REFUSED:
            code.append((_JEQ, "deny", 0, numbers[name]))
        code.append((_RET, 0, 0, _RET_ALLOW))
        if not network:
            code += [f"{arch.name}.socket", (_LD_W_ABS, 0, 0, _ARG0), (_JEQ, "allow", "deny", AF_UNIX)]
        code += [f"{arch.name}.clone", (_LD_W_ABS, 0, 0, _ARG0), (_JSET, "deny", "allow", CLONE_NEW_ANY)]
    code += [
        "allow",
        (_RET, 0, 0, _RET_ALLOW),
        "deny",
        (_RET, 0, 0, _RET_ERRNO | errno.EPERM),
        "enosys",
        (_RET, 0, 0, _RET_ERRNO | errno.ENOSYS),
    ]
    return _assemble(code)


def _assemble(code: Sequence[tuple[int, Jump, Jump, int] | str]) -> bytes:
    """Resolve labels (the strings in `code`) into BPF's forward offsets, 0..255."""
    labels: dict[str, int] = {}
    instructions: list[tuple[int, Jump, Jump, int]] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(instructions)
        else:
            instructions.append(item)
    out = bytearray()
    for index, (op, true, false, k) in enumerate(instructions):
        offsets = []
        for target in (true, false):
            offset = labels[target] - index - 1 if isinstance(target, str) else target
            if not 0 <= offset <= 255:
                raise ValueError(f"seccomp jump out of range at {index}: {offset}")
            offsets.append(offset)
        out += op.to_bytes(2, "little") + bytes(offsets) + k.to_bytes(4, "little")
    return bytes(out)


def seccomp_available() -> bool:
    """Whether this kernel has seccomp filters (PR_GET_SECCOMP fails with EINVAL without them),
    and whether this platform is one the filter knows."""
    if platform.machine() not in SYSCALLS:
        return False
    prctl = _libc().prctl
    prctl.restype = ctypes.c_int
    return bool(prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) >= 0)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


# -- Landlock -----------------------------------------------------------------------------------

_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

# The write rights, by the ABI that introduced them; reads and execution are never handled.
_WRITES_BY_ABI = (
    (
        1,
        FS_WRITE_FILE
        | FS_REMOVE_DIR
        | FS_REMOVE_FILE
        | FS_MAKE_CHAR
        | FS_MAKE_DIR
        | FS_MAKE_REG
        | FS_MAKE_SOCK
        | FS_MAKE_FIFO
        | FS_MAKE_BLOCK
        | FS_MAKE_SYM,
    ),
    (2, FS_REFER),
    (3, FS_TRUNCATE),
)
# Rights a rule on a file (not a directory) may carry; a device gets only these.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
# Writing these changes nothing (shells and build tools redirect to /dev/null all the time).
WRITABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header: 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall_number(name: str) -> int | None:
    return SYSCALLS.get(platform.machine(), {}).get(name)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (not built, not enabled at boot,
    or an unknown platform)."""
    number = _syscall_number("landlock_create_ruleset")
    if number is None:
        return 0
    syscall = _libc().syscall
    syscall.restype = ctypes.c_long
    version = syscall(
        ctypes.c_long(number), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(int(version), 0)


@dataclass(frozen=True)
class Landlock:
    """What the ruleset handles under one ABI version, and how to make it."""

    abi: int

    @property
    def handled_fs(self) -> int:
        return sum(rights for since, rights in _WRITES_BY_ABI if self.abi >= since)

    def handled_net(self, network: bool) -> int:
        return NET_BIND_TCP | NET_CONNECT_TCP if self.abi >= 4 and not network else 0

    @property
    def scoped(self) -> int:
        return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if self.abi >= 6 else 0

    def ruleset(self, writable: Sequence[str], *, network: bool = False) -> int:
        """A ruleset's descriptor (O_CLOEXEC, the caller closes it): writes allowed beneath
        `writable` (directories) and to WRITABLE_DEVICES only; with ABI 4+, unless `network`,
        no TCP bind or connect at all. OSError when the kernel refuses."""
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        create, add = _syscall_number("landlock_create_ruleset"), _syscall_number("landlock_add_rule")
        if self.abi < 1 or create is None or add is None:
            raise OSError(errno.ENOSYS, "Landlock is not available")
        attr = _RulesetAttr(self.handled_fs, self.handled_net(network), self.scoped)
        # The structure grew with the ABI; an older kernel refuses (E2BIG) a size it does not know.
        size = 24 if self.abi >= 6 else 16 if self.abi >= 4 else 8
        fd = int(
            libc.syscall(ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        )
        if fd < 0:
            raise _errno_error("landlock_create_ruleset")
        try:
            rules = [(path, self.handled_fs) for path in writable]
            rules += [
                (path, self.handled_fs & _FILE_RIGHTS) for path in WRITABLE_DEVICES if os.path.exists(path)
            ]
            for path, rights in rules:
                target = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    rule = _PathBeneathAttr(rights, target)
                    done = libc.syscall(
                        ctypes.c_long(add),
                        ctypes.c_int(fd),
                        ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    )
                    if done != 0:
                        raise _errno_error(f"landlock_add_rule {path}")
                finally:
                    os.close(target)
        except BaseException:
            os.close(fd)
            raise
        return fd


def _errno_error(what: str) -> OSError:
    number = ctypes.get_errno()
    return OSError(number, f"{what}: {os.strerror(number)}")


# -- in the child -------------------------------------------------------------------------------


class Confinement:
    """Prepared in the parent, installed by the child before exec: no_new_privs, then the
    Landlock ruleset (when one is given), then the seccomp filter (last: it would not refuse
    Landlock's calls, but nothing the child does after it should be unfiltered)."""

    def __init__(self, program: bytes, ruleset_fd: int | None) -> None:
        self._buffer = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len(program) // 8, ctypes.addressof(self._buffer))
        self._ruleset_fd = ruleset_fd
        libc = _libc()
        self._prctl: Callable[..., int] = libc.prctl
        self._syscall: Callable[..., int] = libc.syscall
        self._restrict = _syscall_number("landlock_restrict_self")

    def install(self) -> str | None:
        """In the child: None when every step held; otherwise which one failed (the caller must
        then not exec)."""
        if (
            self._prctl(
                _PR_SET_NO_NEW_PRIVS,
                ctypes.c_ulong(1),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
            )
            != 0
        ):
            return f"no_new_privs: {os.strerror(ctypes.get_errno())}"
        if self._ruleset_fd is not None:
            if self._restrict is None:
                return "landlock_restrict_self: unknown on this platform"
            if (
                self._syscall(
                    ctypes.c_long(self._restrict), ctypes.c_int(self._ruleset_fd), ctypes.c_uint32(0)
                )
                != 0
            ):
                return f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}"
        if (
            self._prctl(
                _PR_SET_SECCOMP,
                ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                ctypes.byref(self._fprog),
                ctypes.c_ulong(0),
                ctypes.c_ulong(0),
            )
            != 0
        ):
            return f"seccomp: {os.strerror(ctypes.get_errno())}"
        return None
