"""A warm interpreter for the conformance builds: the SCons tool's `python -m codegen ...`
commands (generate, verify, report) answered by forks of one process that has imported the
compiler already.

A fresh interpreter spends about 0.3 s importing NumPy, ONNX, Jinja2 and libclang before it
does any work, more than the work itself for a one-node model, and every case runs three such
commands. Here the server imports them once; each command forks it (copy-on-write, a few
milliseconds), and the fork runs `codegen.cli.main` with the command's arguments, working
directory, environment, stdout and stderr, so the build sees exactly what a fresh interpreter
would print and return.

    python -m conformance.warm serve SOCKET            the server (run.py starts and stops it)
    python -S conformance/warm.py -m codegen ARGS...   a command; its socket in $TINSMITH_WARM_SOCKET

Without a reachable server the client runs `python -m codegen ARGS` itself.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys

SOCKET_ENV = "TINSMITH_WARM_SOCKET"
_HEADER = struct.Struct("<I")


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        data += chunk
    return data


# --- client ------------------------------------------------------------------------------------
def client(argv: list[str]) -> int:
    """Run `python ARGV` (ARGV = ['-m', 'codegen', ...]) in a fork of the server, or here if there
    is none; returns its exit status."""
    path = os.environ.get(SOCKET_ENV)
    if argv[:2] == ["-m", "codegen"] and path:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                request = json.dumps({"argv": argv[2:], "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
                socket.send_fds(conn, [_HEADER.pack(len(request))], [1, 2])
                conn.sendall(request)
                return _HEADER.unpack(_recv_exact(conn, _HEADER.size))[0]
        except OSError:
            pass  # no server (or it went away before answering): run the command here
    os.execv(sys.executable, [sys.executable, *argv])
    return 127  # not reached


# --- server ------------------------------------------------------------------------------------
def _preload() -> None:
    """Import what the generate, verify and report commands use, and fill their caches."""
    import onnx.inliner
    import onnx.version_converter  # noqa: F401

    import codegen.cli
    import codegen.measure
    import codegen.pipeline  # noqa: F401
    from codegen import verify
    verify.builtin_include_args()


def _child(conn: socket.socket) -> int:
    """In the fork: take over the client's stdout/stderr, cwd and environment; run the command."""
    header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 2)
    request = json.loads(_recv_exact(conn, _HEADER.unpack(header)[0]))
    for fd, target in zip(fds, (1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    from codegen.cli import main
    sys.argv = ["codegen", *request["argv"]]
    try:
        code = main(request["argv"])
    except SystemExit as e:  # argparse's usage errors
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001  (print it as a fresh interpreter would, then fail)
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code or 0)


def serve(path: str) -> None:
    """Answer commands on the Unix socket `path` until terminated."""
    import signal
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no BLAS threads in a process that forks
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path + ".tmp")
        os.replace(path + ".tmp", path)  # appears once the server listens
        listener.listen(64)
        while True:
            conn, _ = listener.accept()
            if os.fork() == 0:
                # the command's own subprocesses (binutils, compilers) must be waited for
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                listener.close()
                code = 1
                try:
                    code = _child(conn)
                    conn.sendall(_HEADER.pack(code))
                finally:
                    os._exit(code)
            conn.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1:]))
