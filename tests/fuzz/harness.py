"""Running one fuzz case and judging what Tinsmith did with it.

A case is a folder holding the files of one (possibly hostile) model and a command line. The
command runs as a separate process with a time limit, in that folder; its outputs go to
`out/`. What must hold for every case, whatever the input:
  - exit status 0 or 1 (never a signal, never 2 or a traceback);
  - on failure, stderr is `path:line:col: error: ...` lines (and `note:` lines), each on one line;
  - it ends within the time limit;
  - nothing is written outside `out/` (the case folder is listed before and after);
  - when generation succeeds, the generated C++ compiles warning-free and libclang verifies it;
    an import's graph file loads again.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "runtime_cpp" / "include"
# A text file's messages name line and column; a binary model file has no lines, so its
# messages name the file alone (and the place in the message).
MESSAGE = re.compile(r"^(?:[^\n]+:\d+:\d+|[^\n]+\.(?:onnx|tflite)): (error|note): \S")
# Seconds for one command: one that has not answered by then is a hang. The slowest legitimate
# case takes a few seconds on an idle machine, but 20 s and more at load 15 (starting Python and
# importing the generator alone), where a limit of 20 s or 60 s reported hangs that were not.
TIMEOUT = 120.0
CXXFLAGS = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-fno-exceptions", "-fno-rtti"]


@dataclass
class Outcome:
    """What one case did; `findings` lists every broken promise (empty: the case passed)."""

    name: str
    status: int | None
    seconds: float
    stderr: str = ""
    findings: list[str] = field(default_factory=list)
    generated: bool = False


def _env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` except out/, with size and modification time."""
    result = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if rel.parts and rel.parts[0] == "out":
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        result[str(rel)] = (st.st_size, st.st_mtime_ns)
    return result


# With FORK set (the input campaign sets it), a command runs in a child forked from this process, whose
# generator is already imported, instead of a fresh interpreter: the same `main` and the same exit
# status, messages and files, without the second or so that starting Python and importing NumPy,
# Jinja2, libclang and the generator costs every command.
FORK = False
MEMORY = 4 << 30  # bytes of address space a forked command may use (a fresh interpreter has no limit)


def run_forked(args: list[str], cwd: Path, timeout: float = TIMEOUT) -> tuple[int | None, str, str, float]:
    """`tinsmith ARGS` in cwd as a forked child of this process; as `run_tinsmith`."""
    import resource
    import signal
    import tempfile
    import traceback

    import tinsmith.cli  # noqa: F401  (imported once, in the parent)
    import tinsmith.pipeline  # noqa: F401
    import tinsmith.verify  # noqa: F401
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            status = 1
            try:
                os.chdir(cwd)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                from tinsmith.cli import main
                status = main(list(args))
            except SystemExit as e:  # (argparse: 2)
                status = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001  (what the interpreter prints for an uncaught exception)
                traceback.print_exc()
                status = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(status)
        deadline = start + timeout
        status: int | None = None
        while True:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(wait_status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
        out.seek(0)
        err.seek(0)
        return (status, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                time.monotonic() - start)


def run_tinsmith(args: list[str], cwd: Path, timeout: float = TIMEOUT) -> tuple[int | None, str, str, float]:
    """`python -m tinsmith ARGS` in cwd; (status or None on timeout, stdout, stderr, seconds)."""
    if FORK:
        return run_forked(args, cwd, timeout)
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "tinsmith", *args], cwd=cwd, env=_env(),
                              capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err, time.monotonic() - start


def check_messages(status: int | None, stderr: str) -> list[str]:
    """The promises about the exit status and the messages."""
    findings = []
    if status is None:
        findings.append("hang: no answer within the time limit")
    elif status < 0:
        findings.append(f"crash: killed by signal {-status}")
    elif status not in (0, 1):
        findings.append(f"exit status {status}")
    if "Traceback (most recent call last)" in stderr:
        last = [line for line in stderr.strip().splitlines() if line.strip()][-1:]
        findings.append(f"traceback: {last[0] if last else ''}")
    elif status == 1:
        lines = [line for line in stderr.splitlines() if line.strip()]
        if not lines:
            findings.append("exit status 1 without a message")
        for line in lines:
            if not MESSAGE.match(line):
                findings.append(f"message not in path[:line:col]: error: form: {line[:200]!r}")
                break
    return findings


def check_generated(out: Path) -> list[str]:
    """Generated sources compile warning-free and pass libclang's verification."""
    plans = sorted(out.glob("*.plan.json"))
    if not plans:
        return ["generation succeeded but wrote no plan"]
    findings = []
    for plan in plans:
        name = plan.name[: -len(".plan.json")]
        cpp = out / f"{name}.cpp"
        proc = subprocess.run(["g++", *CXXFLAGS, f"-I{out}", f"-I{INCLUDE}", "-c", str(cpp), "-o",
                               str(out / f"{name}.o")], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            first = next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr[:200])
            findings.append(f"generated code does not compile: {first[:300]}")
            continue
        status, _, err, _ = run_tinsmith(["verify", str(plan), "-I", str(INCLUDE)], out, timeout=300)
        if status != 0:
            findings.append(f"generated headers do not verify: {err.strip()[:300]}")
    return findings


def run_case(name: str, folder: Path, args: list[str], timeout: float = TIMEOUT,
             compile_output: bool = True) -> Outcome:
    """Run one case (files already in `folder`) and judge it."""
    before = _listing(folder)
    status, _, stderr, seconds = run_tinsmith(args, folder, timeout)
    outcome = Outcome(name, status, seconds, stderr)
    outcome.findings += check_messages(status, stderr)
    after = _listing(folder)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if changed:
        outcome.findings.append(f"files written outside out/: {', '.join(changed[:5])}")
    out = folder / "out"
    if status == 0 and args and args[0] == "generate":
        outcome.generated = True
        if compile_output:
            outcome.findings += check_generated(out)
    if status == 0 and args and args[0] == "import-onnx":
        graph = next(iter(sorted(out.glob("*.yaml"))), None)
        if graph is None:
            outcome.findings.append("import succeeded but wrote no graph file")
        else:
            status2, _, err2, _ = run_tinsmith(["generate", str(graph), "-o", str(out / "gen")], folder, timeout)
            if status2 != 0:
                outcome.findings.append(f"the imported graph file does not load: {err2.strip()[:300]}")
            else:
                outcome.generated = True
                if compile_output:
                    outcome.findings += check_generated(out / "gen")
    if status == 1 and args and args[0] == "import-onnx" and any(out.glob("*.yaml")):
        outcome.findings.append("a failed import left a graph file behind")
    return outcome
