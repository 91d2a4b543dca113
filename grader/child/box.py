"""The OS box around learner code: what the grading child may read, write, start and reach.

The child enters the box itself, when its job arrives and before the learner's code loads (the warm
child imports torch and creates its CUDA context first, outside it). Three layers, all unprivileged:

- Landlock (Linux >= 5.13): the child reads the Python and CUDA installation, the kit's grader, specs
  and references, and the learner's own files; it writes only its scratch folder, its Triton cache and
  the build folders of its own torch operators. `solutions/`, other build-cache entries, the results
  store, other learners' folders and the user's home are out of reach, for its subprocesses too.
  From ABI 4 TCP is refused; from ABI 6 it cannot signal processes outside the box or reach abstract
  unix sockets.
- seccomp (a small BPF filter, on every thread): sockets other than AF_UNIX are refused, and so is setsid.
  A hang is killed with its process group; for root, with everything in its pids cgroup.
- limits: file size (RLIMIT_FSIZE), core dumps, and the process count (RLIMIT_NPROC for an ordinary
  user; for root, which RLIMIT_NPROC does not bind, a pids cgroup where one can be made).

The layer is a few ctypes calls rather than a package: the `landlock` package on PyPI is a pre-release,
libseccomp is not on every GPU host, and the whole policy is a dozen rules (docs/grading.md, the box).

A known limit: Landlock before ABI 8 restricts the calling thread and the threads it starts, not the
threads torch and CUDA started during warm-up. Code that takes over one of those (native code that
corrupts its stack) is outside the filesystem box; seccomp's filter covers every thread."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

FILE_SIZE_LIMIT = 4 * 2**30  # larger than any output a case writes (1 GiB at 2^28 float32), far below a full disk
PROCESS_LIMIT = 512  # tasks (threads count) the box may add: ptxas, ninja, nvcc and their threads fit
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/run")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/nvidia-caps")
UNBOXED_ENV = "KCOURSE_UNBOXED"  # "1": no box even where one is possible (tests of the unboxed path only)
COURSE_READ = ("grader", "exercises", "calibration", "plans", "templates", "pyproject.toml")

# --- Landlock (include/uapi/linux/landlock.h) ------------------------------------------------------------------
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on x86-64 and arm64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8: every thread of the process, not only the caller
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (
    1 << 4,
    1 << 5,
    1 << 6,
    1 << 7,
    1 << 8,
    1 << 9,
    1 << 10,
    1 << 11,
    1 << 12,
)
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_NET_TCP = 0b11  # bind and connect
_SCOPES = 0b11  # abstract unix sockets, signals
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (
    READ
    | WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SYM
    | MAKE_FIFO
    | MAKE_SOCK
    | REFER
    | TRUNCATE
)
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV | TRUNCATE
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a rule on a file (not a folder) may carry

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class BoxError(Exception):
    """The box could not be entered: the child must not run learner code."""


@dataclass
class Policy:
    """What one grading child may touch, made by the trusted parent and sent with the job."""

    read: list[str] = field(default_factory=list)  # folders and files, read (and execute)
    write: list[str] = field(default_factory=list)  # folders it may create, change and delete in
    devices: list[str] = field(default_factory=list)  # device files, read/write/ioctl
    file_size: int = FILE_SIZE_LIMIT
    processes: int = PROCESS_LIMIT

    def to_dict(self) -> dict:
        return asdict(self)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (old kernel, disabled, not Linux)."""
    if platform.system() != "Linux":
        return 0
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def available() -> tuple[bool, str]:
    """(True, what boxes the child) or (False, why nothing can): said once in a grade's header."""
    if platform.system() != "Linux":
        return False, f"{platform.system()} has no Landlock: learner code runs with your user's rights"
    abi = landlock_abi()
    if abi == 0:
        return False, (
            f"this kernel ({platform.release()}) has no Landlock (Linux 5.13 or later, with lsm=landlock): "
            "learner code runs with your user's rights"
        )
    if _libc.prctl(21, 0, 0, 0, 0) < 0:  # PR_GET_SECCOMP: -1 where the kernel has no seccomp
        return False, f"this kernel ({platform.release()}) has no seccomp: learner code runs with your user's rights"
    network = "TCP" if abi >= 4 else "no TCP rule (ABI < 4): sockets by seccomp only"
    return True, f"Landlock ABI {abi} ({network}), seccomp, limits"


# --- the policy ------------------------------------------------------------------------------------------------
def policy(
    scratch: Path, learner: Path, course: Path, extra_read: list[Path] = (), extra_write: list[Path] = ()
) -> Policy:
    """The box for a child whose scratch folder is `scratch`, grading the file `learner` of the kit at `course`."""
    kit = course.resolve()
    read = [p for p in SYSTEM_READ if os.path.exists(p)] + _python_dirs(course)
    read = [p for folder in read for p in _beside_kit(Path(folder), kit)]
    read += [str(course / name) for name in COURSE_READ]
    read += [str(p) for p in [_learner_folder(learner, course), *extra_read]]
    devices = [p for p in DEVICES if os.path.exists(p)] + _nvidia_devices()
    write = [str(scratch), *(str(p) for p in extra_write)]
    size = int(os.environ.get("KCOURSE_BOX_FILE_SIZE", FILE_SIZE_LIMIT))  # a smaller cap for tests
    return Policy(read=_existing(read), write=write, devices=devices, file_size=size)


def _python_dirs(course: Path) -> list[str]:
    """The interpreter, the venv and every import folder outside the kit (the kit's own are listed by name)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    dirs |= {p for p in sys.path if p and os.path.isdir(p)}
    home = os.path.realpath(Path.home())
    kept = []
    for d in sorted(dirs):
        real = os.path.realpath(d)
        in_kit = _inside(Path(course), Path(real)) and not _inside(Path(os.path.realpath(sys.prefix)), Path(real))
        if real in (home, "/") or in_kit:
            continue  # the home or the kit's root itself: only the named parts of them
        kept.append(real)
    return kept


def _beside_kit(folder: Path, kit: Path) -> list[str]:
    """`folder`, or where it holds the kit (a kit in /opt, PYTHONPATH=~/code with the kit in ~/code/kit), everything
    in it but the kit: each folder's entries on the way down, less the one leading to the kit. A rule on a folder
    opens all below it, and the kit's own parts (not solutions/, not the results store) are listed by name."""
    folder = folder.resolve()
    if not _inside(folder, kit):
        return [str(folder)]
    if folder == kit:
        return []
    step = folder / kit.relative_to(folder).parts[0]
    try:
        entries = [str(entry) for entry in sorted(folder.iterdir()) if entry != step]
    except OSError:
        entries = []
    return entries + _beside_kit(step, kit)


def _learner_folder(learner: Path, course: Path) -> Path:
    """The learner's folder (helper modules beside the file), or only the file where the folder is the home,
    the root, or holds the kit."""
    folder = learner.resolve().parent
    if folder in (Path.home().resolve(), Path("/")) or _inside(folder, course.resolve()):
        return learner.resolve()
    return folder


def _inside(outer: Path, inner: Path) -> bool:
    """True when `inner` is `outer` or below it."""
    try:
        inner.relative_to(outer)
        return True
    except ValueError:
        return False


def _nvidia_devices() -> list[str]:
    try:
        return sorted(str(Path("/dev") / n) for n in os.listdir("/dev") if n.startswith("nvidia"))
    except OSError:
        return []


def _existing(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(p for p in paths if os.path.exists(p)))


# --- entering it (in the child) --------------------------------------------------------------------------------
def enter(box: Policy) -> None:
    """Limits, then seccomp on every thread, then Landlock: from here on this process and all it starts are boxed."""
    _limits(box)
    _no_new_privileges()
    _seccomp()
    _landlock(box)


def _limits(box: Policy) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (box.file_size, box.file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() != 0:  # counted over all the user's processes: theirs now, plus the box's share
        tasks = _user_tasks()
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks + box.processes, tasks + box.processes))
    else:
        join_pids_cgroup(box.processes)


def _user_tasks() -> int:
    """Tasks (processes and threads) of this user now, as RLIMIT_NPROC counts them."""
    uid, count = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    return count


def _no_new_privileges() -> None:
    if _libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise BoxError(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")


def _landlock(box: Policy) -> None:
    abi = landlock_abi()
    if abi == 0:
        raise BoxError("this kernel has no Landlock")
    handled = _FS_BY_ABI[max(v for v in _FS_BY_ABI if v <= abi)]
    attr = struct.pack("QQQ", handled, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise BoxError(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        for paths, rights in ((box.read, READ), (box.write, WRITE), (box.devices, DEVICE)):
            for path in paths:
                _allow(ruleset, path, rights & handled)
        _restrict(ruleset, abi)
    finally:
        os.close(ruleset)


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since the parent listed it: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = struct.pack("=Qi", rights, fd)
        if _libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) != 0:
            raise BoxError(f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def _restrict(ruleset: int, abi: int) -> None:
    if abi >= 8 and _libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(_RESTRICT_SELF_TSYNC)) == 0:
        return
    if _libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
        raise BoxError(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")


# --- seccomp: a classic BPF program over (arch, syscall number, first argument) ---------------------------------
_SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {
    "x86_64": {"socket": 41, "socketpair": 53, "setsid": 112, "seccomp": 317},
    "aarch64": {"socket": 198, "socketpair": 199, "setsid": 157, "seccomp": 277},
}
_AF_UNIX = 1
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000


def _seccomp() -> None:
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise BoxError(f"no seccomp filter for {machine}")
    program = ctypes.create_string_buffer(_bpf_program(_AUDIT_ARCH[machine], _SYSCALLS[machine]))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(program.raw) // 8, ctypes.addressof(program)))
    done = _libc.syscall(_SYSCALLS[machine]["seccomp"], _SECCOMP_SET_MODE_FILTER, _SECCOMP_FILTER_FLAG_TSYNC, fprog)
    if done != 0:
        raise BoxError(f"seccomp filter failed: {os.strerror(ctypes.get_errno())} (returned {done})")


def _bpf_program(arch: int, nr: dict[str, int]) -> bytes:
    """Refuse (EACCES/EPERM) sockets of any family but AF_UNIX, and setsid; allow everything else. setpgid stays
    allowed: ninja puts each command in a process group of its own (a torch operator's build)."""
    ld_w_abs, jeq, ret = 0x20, 0x15, 0x06

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    return b"".join(
        [
            op(ld_w_abs, 0, 0, 4),  # arch
            op(jeq, 1, 0, arch),
            op(ret, 0, 0, _ERRNO | errno.EPERM),  # another ABI (x32, 32-bit): refused
            op(ld_w_abs, 0, 0, 0),  # syscall number
            op(jeq, 3, 0, nr["socket"]),
            op(jeq, 2, 0, nr["socketpair"]),
            op(jeq, 4, 0, nr["setsid"]),
            op(ret, 0, 0, _ALLOW),
            op(ld_w_abs, 0, 0, 16),  # args[0]: the socket's family (low 32 bits)
            op(jeq, 0, 1, _AF_UNIX),
            op(ret, 0, 0, _ALLOW),
            op(ret, 0, 0, _ERRNO | errno.EACCES),
        ]
    )


# --- the process count for root, which RLIMIT_NPROC does not bind ----------------------------------------------
CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")


def join_pids_cgroup(limit: int) -> str | None:
    """Move this process into a new pids cgroup capped at `limit` tasks; its path, or None where none can be made."""
    for root in CGROUP_ROOTS:
        folder = Path(root) / f"kcourse-{os.getpid()}"
        if not _pids_hierarchy(Path(root)):
            continue
        _sweep(Path(root))
        try:
            folder.mkdir(exist_ok=True)
            (folder / "pids.max").write_text(str(limit + _own_tasks()))
            (folder / "cgroup.procs").write_text(str(os.getpid()))
            return str(folder)
        except OSError:
            _remove_cgroup(folder)
    return None


def _sweep(root: Path) -> None:
    """Remove the empty cgroups of children whose grader ended without its clean-up (killed, say)."""
    for folder in root.glob("kcourse-*"):
        pid = folder.name.removeprefix("kcourse-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_cgroup(folder)


def _pids_hierarchy(root: Path) -> bool:
    """A cgroup v1 pids hierarchy, or a v2 one whose children get the pids controller."""
    if not (root / "cgroup.procs").exists():
        return False
    if root.name == "pids":
        return True
    try:
        return "pids" in (root / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def _own_tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def release_pids_cgroup(pid: int, wait_s: float = 2.0) -> None:
    """The parent's clean-up once the child `pid` has ended: every process still in its cgroup (one that left
    the process group too) is killed, and the cgroup removed once they are gone."""
    for root in CGROUP_ROOTS:
        folder = Path(root) / f"kcourse-{pid}"
        if folder.is_dir():
            _kill_members(folder)
            deadline = time.monotonic() + wait_s
            while not _remove_cgroup(folder) and time.monotonic() < deadline:
                time.sleep(0.02)


def _kill_members(folder: Path) -> None:
    try:
        members = (folder / "cgroup.procs").read_text().split()
    except OSError:
        return
    for member in members:
        try:
            os.kill(int(member), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass


def _remove_cgroup(folder: Path) -> bool:
    try:
        folder.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False
