"""In-sandbox audit hook (PEP 578): what the code tries, sent to the host as it happens.

A hook runs before the call it audits, so an attempt is recorded whether it succeeds or fails
(ENOENT, EROFS, ENETUNREACH all look the same here). Kinds of record:

- ``file_open``: an open, listdir or scandir of a path outside the ordinary read roots (the
  runtime, the mounted data, /work, /tmp, a few system files), or of one the deny patterns name
  (``/proc/*/environ`` ...), as given and as resolved (a symlink planted in /work is followed);
- ``file_write``: an open for writing, a mkdir, remove, rename, symlink, link, truncate, chmod,
  chown, utime or xattr change, of a path outside the writable roots (/work, /tmp);
- ``socket_call``: every connect, bind, sendto and sendmsg, with its address;
- ``ctypes_call``: a native library loaded from outside the runtime's read-only code, every
  symbol looked up (but the two the CUDA path finder always takes), every raw memory access
  (``from_address``, ``string_at``); CPython raises no event for a call through a function
  pointer already looked up, nor for ``memmove``/``memset``, so the lookup is what is seen;
- ``process_spawn``: every process started (subprocess, os.exec*, posix_spawn, os.system,
  pty.spawn), but the fixed commands of ``ctypes.util.find_library``;
- ``hook_cap``: this process sent ``MAX_RECORDS`` records and reports no more.

Each record is one datagram to the host's socket (in a directory mounted read-only), sent at
once: nothing sent can be taken back or rewritten. Sandbox-reported and never evidence alone:
a process started with ``python -I`` or a native binary runs without the hook (its start is
recorded), and native code can reach the kernel unseen. docs/audit.md says what sees what.
Stdlib only; it must never raise into the code it watches.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

_SOCKET = os.environ.get("SEGFACTORY_HOOK_SOCKET", "")
_READ = tuple(p for p in os.environ.get("SEGFACTORY_HOOK_READ", "").split(":") if p)
_WRITE = tuple(p for p in os.environ.get("SEGFACTORY_HOOK_WRITE", "").split(":") if p)
_CODE = tuple(p for p in os.environ.get("SEGFACTORY_HOOK_CODE", "").split(":") if p)
_DENY = tuple(p for p in os.environ.get("SEGFACTORY_HOOK_DENY", "").split(":") if p)
MAX_RECORDS = 500  # per process; past it one hook_cap record, then silence
MAX_FIELD_CHARS = 4096  # a longer string is cut, with truncated=true and <field>_chars
MAX_ARGS_CHARS = 1024  # of a foreign call's arguments, as repr
SEND_TIMEOUT_S = 2.0  # a host that stops reading cannot hang the sandbox
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# symbols the CUDA path finder looks up in libdl whenever torch imports
_RUNTIME_SYMBOLS = (("libdl.so.2", "dlinfo"), ("libdl.so.2", "dlerror"))
_FIND_LIBRARY = ("ldconfig", "gcc", "cc", "ld", "objdump")  # what ctypes.util.find_library runs


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _denied(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, p) for p in _DENY)


def _absolute(path: object, dir_fd: object = None) -> str | None:
    """The path made absolute and normalised (relative to dir_fd or the cwd); None for an fd."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None  # an fd: what it names was opened and judged before
    text = os.fsdecode(path)
    if not text.startswith("/"):
        base = os.getcwd()
        if isinstance(dir_fd, int) and dir_fd >= 0:
            try:
                base = os.readlink(f"/proc/self/fd/{dir_fd}")
            except OSError:
                pass
        text = os.path.join(base, text)
    return os.path.normpath(text)


def _resolved(path: str) -> str:
    """Where the path leads, following links that sandbox code could have planted (only the
    writable roots hold any; /proc's own links are judged by name: ``/proc/*/root/*`` is denied)."""
    if _under(path, _WRITE):
        return os.path.realpath(path)
    return path


def _read_flagged(path: str) -> str | None:
    """Where ``path`` leads, when reading it is worth a record; else None."""
    resolved = _resolved(path)
    for p in (path, resolved):
        if _denied(p) or not _under(p, _READ):
            return resolved
    return None


def _write_flagged(path: str) -> str | None:
    resolved = _resolved(path)
    for p in (path, resolved):
        if _denied(p) or not _under(p, _WRITE):
            return resolved
    return None


class _Reporter:
    """One per process (a forked child opens its own socket and starts its own count)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.sent = 0
        self.sock: Any = None
        self.local = threading.local()

    def send(self, kind: str, fields: dict[str, object]) -> None:
        if os.getpid() != self.pid:
            self._reset()
        if self.sent > MAX_RECORDS:
            return
        self.sent += 1
        if self.sent > MAX_RECORDS:
            kind, fields = "hook_cap", {"count": MAX_RECORDS}
        record: dict[str, object] = {"k": kind, "ts": time.time(), "pid": self.pid}
        for key, value in fields.items():
            if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
                record["truncated"] = True
                record[key + "_chars"] = len(value)
                value = value[:MAX_FIELD_CHARS]
            record[key] = value
        try:
            if self.sock is None:
                import _socket

                self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM)
                self.sock.settimeout(SEND_TIMEOUT_S)
            self.sock.sendto(json.dumps(record).encode(), _SOCKET)
        except (OSError, ValueError):
            pass


_REPORTER = _Reporter()


def _report(kind: str, **fields: object) -> None:
    _REPORTER.send(kind, {k: v for k, v in fields.items() if v is not None})


def _text(value: object) -> str:
    if isinstance(value, (bytes, bytearray)):
        return os.fsdecode(bytes(value))
    return value if isinstance(value, str) else repr(value)


def _on_open(args: tuple[Any, ...], op: str = "open") -> None:
    path = _absolute(args[0]) if args else None
    if path is None:
        return
    mode = args[1] if len(args) > 1 else None
    flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
    writing = bool(flags & _WRITE_FLAGS) or (isinstance(mode, str) and any(c in mode for c in "wax+"))
    resolved = _write_flagged(path) if writing else _read_flagged(path)
    if resolved is not None:
        kind = "file_write" if writing else "file_open"
        given = _text(args[0])
        _report(kind, op=op, path=given, resolved=resolved if resolved != given else None, mode=_text(mode))


def _on_listing(args: tuple[Any, ...], op: str) -> None:
    target = args[0] if args else "."
    _on_open((target if target is not None else ".",), op)


def _changed(op: str, *paths: object, dir_fd: object = None) -> None:
    """A filesystem change: recorded when any path it touches lies outside the writable roots."""
    for path in paths:
        absolute = _absolute(path, dir_fd)
        if absolute is None:
            continue
        resolved = _write_flagged(absolute)
        if resolved is not None:
            given = _text(path)
            _report("file_write", op=op, path=given, resolved=resolved if resolved != given else None)
            return


def _dir_fd(args: tuple[Any, ...], index: int) -> object:
    return args[index] if len(args) > index else None


def _on_symlink(args: tuple[Any, ...]) -> None:
    """A link may live in /work and point at the vault: its place is write-checked, its target
    read-checked."""
    target, link = args[0], args[1]
    _changed("symlink", link, dir_fd=_dir_fd(args, 2))
    place = _absolute(link, _dir_fd(args, 2))
    if place is not None and not isinstance(target, int):
        aimed = os.path.normpath(os.path.join(os.path.dirname(place), os.fsdecode(target)))
        if _denied(aimed) or not _under(aimed, _READ):
            _report("file_open", op="symlink", path=_text(target), resolved=aimed)


def _on_socket(op: str, args: tuple[Any, ...]) -> None:
    sock, address = (args[0], args[1]) if len(args) > 1 else (None, None)
    family, kind = getattr(sock, "family", None), getattr(sock, "type", None)
    _report("socket_call", op=op, family=_int(family), type=_int(kind), address=_text(address))


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def _on_dlopen(args: tuple[Any, ...]) -> None:
    name = args[0] if args else None
    if name is None:
        return  # the process's own symbols (ctypes.pythonapi); what is looked up in it is recorded
    text = _text(name)
    if "/" not in text:
        return  # a system library by soname, from the runtime's search path
    path = _absolute(text)
    if path is not None and not _under(path, _CODE):
        _report("ctypes_call", op="dlopen", library=text, resolved=path if path != text else None)


def _on_dlsym(args: tuple[Any, ...], op: str = "dlsym") -> None:
    library, symbol = (args[0], args[1]) if len(args) > 1 else (None, None)
    name = getattr(library, "_name", None)
    base = os.path.basename(name) if isinstance(name, str) else None
    if (base, symbol) in _RUNTIME_SYMBOLS:
        return
    if name is None and op == "dlsym":
        name = "(the process's own symbols)"  # CDLL(None): libc and the interpreter
    _report("ctypes_call", op=op, library=_text(name if name is not None else library), symbol=_text(symbol))


def _on_call(args: tuple[Any, ...]) -> None:
    arguments = args[1] if len(args) > 1 else ()
    shown = repr(arguments)
    path = (
        next((_text(a) for a in arguments if isinstance(a, (str, bytes)) and "/" in _text(a)), None)
        if isinstance(arguments, tuple)
        else None
    )
    _report(
        "ctypes_call",
        op="call",
        function=_text(args[0] if args else None),
        args=shown[:MAX_ARGS_CHARS],
        args_chars=len(shown) if len(shown) > MAX_ARGS_CHARS else None,
        path=path,
    )


def _on_memory(op: str, args: tuple[Any, ...]) -> None:
    _report("ctypes_call", op=op, address=_text(args[0] if args else None))


def _find_library_run(argv: list[object]) -> bool:
    """True for exactly the commands ctypes.util.find_library runs (a name to look up, no input file)."""
    if not argv or os.path.basename(str(argv[0])) not in _FIND_LIBRARY:
        return False
    for arg in map(str, argv[1:]):
        if arg in ("-p", "-t", "-Wl,-t", "-o", "-L", "-j", ".dynamic", os.devnull):
            continue
        if arg.startswith("-l") and arg[2:].replace("_", "").replace(".", "").replace("-", "").isalnum():
            continue
        if arg.startswith("/tmp/") or _under(arg, _CODE):
            continue
        return False
    return True


def _on_spawn(op: str, argv: object, executable: object = None) -> None:
    items = list(argv) if isinstance(argv, (list, tuple)) else [argv]
    if _find_library_run(items):
        return
    _report(
        "process_spawn",
        op=op,
        argv=_text(json.dumps([_text(a) for a in items])),
        executable=_text(executable),
    )


_HANDLERS: dict[str, Callable[[tuple[object, ...]], None]] = {
    "open": _on_open,
    "os.listdir": lambda a: _on_listing(a, "listdir"),
    "os.scandir": lambda a: _on_listing(a, "scandir"),
    "os.mkdir": lambda a: _changed("mkdir", a[0], dir_fd=_dir_fd(a, 2)),
    "os.rmdir": lambda a: _changed("rmdir", a[0], dir_fd=_dir_fd(a, 1)),
    "os.remove": lambda a: _changed("remove", a[0], dir_fd=_dir_fd(a, 1)),
    "os.rename": lambda a: _changed("rename", a[0], a[1], dir_fd=_dir_fd(a, 2)),
    "os.link": lambda a: _changed("link", a[1], dir_fd=_dir_fd(a, 3)),
    "os.symlink": _on_symlink,
    "os.truncate": lambda a: _changed("truncate", a[0]),
    "os.chmod": lambda a: _changed("chmod", a[0], dir_fd=_dir_fd(a, 2)),
    "os.chown": lambda a: _changed("chown", a[0], dir_fd=_dir_fd(a, 3)),
    "os.utime": lambda a: _changed("utime", a[0], dir_fd=_dir_fd(a, 3)),
    "os.setxattr": lambda a: _changed("setxattr", a[0]),
    "os.removexattr": lambda a: _changed("removexattr", a[0]),
    "shutil.rmtree": lambda a: _changed("rmtree", a[0], dir_fd=_dir_fd(a, 1)),
    "socket.connect": lambda a: _on_socket("connect", a),
    "socket.bind": lambda a: _on_socket("bind", a),
    "socket.sendto": lambda a: _on_socket("sendto", a),
    "socket.sendmsg": lambda a: _on_socket("sendmsg", a),
    "ctypes.dlopen": _on_dlopen,
    "ctypes.dlsym": _on_dlsym,
    "ctypes.dlsym/handle": lambda a: _on_dlsym(a, "dlsym_handle"),
    "ctypes.call_function": _on_call,
    "ctypes.cdata": lambda a: _on_memory("cdata", a),
    "ctypes.cdata/buffer": lambda a: _on_memory("cdata_buffer", a),
    "ctypes.string_at": lambda a: _on_memory("string_at", a),
    "ctypes.wstring_at": lambda a: _on_memory("wstring_at", a),
    "ctypes.PyObj_FromPtr": lambda a: _on_memory("pyobj_from_ptr", a),
    "subprocess.Popen": lambda a: _on_spawn("popen", a[1], a[0]),
    "os.exec": lambda a: _on_spawn("exec", a[1], a[0]),
    "os.posix_spawn": lambda a: _on_spawn("posix_spawn", a[1], a[0]),
    "os.system": lambda a: _on_spawn("system", ["/bin/sh", "-c", a[0]]),
    "pty.spawn": lambda a: _on_spawn("pty_spawn", a[0]),
}


def _hook(event: str, args: tuple[Any, ...]) -> None:
    handler = _HANDLERS.get(event)
    if handler is None:
        return
    local = _REPORTER.local
    if getattr(local, "busy", False):
        return  # the hook's own work (its socket, its realpath) is not the code's
    local.busy = True
    try:
        handler(args)
    except Exception:  # noqa: BLE001 - a hook that raises would break the code it watches
        pass
    finally:
        local.busy = False


if _SOCKET and _READ:
    sys.addaudithook(_hook)
