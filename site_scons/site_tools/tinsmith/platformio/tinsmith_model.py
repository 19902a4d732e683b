# PlatformIO extra script: generates the model into a library of the project before every
# build, so that editing the graph or its weights is all it takes. In platformio.ini:
#
#   extra_scripts = pre:tinsmith_model.py
#   custom_tinsmith_graph = vibration.yaml       ; the graph YAML, .onnx or .tflite file
#   custom_tinsmith_target = cortex-m4           ; the board's core [cortex-m4]
#   custom_tinsmith_library = vibration          ; lib/<this>/src receives the sources [graph's stem]
#
# The generator rewrites only the files whose bytes change, so PlatformIO recompiles the model
# only when it changed. It runs the `tinsmith` command (the environment Tinsmith is installed
# in must be active, as PlatformIO runs its own Python), or what TINSMITH names.
# Copy this file into the project: `tinsmith include-dir --platformio` prints its folder.
import os
import shlex
import shutil
import subprocess

Import("env")  # noqa: F821 (PlatformIO's SCons provides it)


def _option(name, default=None):
    return env.GetProjectOption(f"custom_tinsmith_{name}", default)  # noqa: F821


def generate_model():
    project = env.subst("$PROJECT_DIR")  # noqa: F821
    graph = _option("graph")
    if not graph:
        raise SystemExit("tinsmith_model.py: set custom_tinsmith_graph in platformio.ini")
    command = shlex.split(os.environ.get("TINSMITH", "tinsmith"))
    library = _option("library") or os.path.splitext(os.path.basename(graph))[0]
    out = os.path.join(project, "lib", library, "src")
    try:
        subprocess.run([*command, "generate", graph, "-o", out, "--target", _option("target", "cortex-m4"),
                        "--library-only"], cwd=project, check=True)
        include = subprocess.run([*command, "include-dir"], cwd=project, check=True, capture_output=True,
                                 text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"tinsmith_model.py: {' '.join(command)} failed ({e}); activate the environment "
                         "Tinsmith is installed in, or set TINSMITH") from None
    runtime = os.path.join(out, "tinsmith")
    os.makedirs(runtime, exist_ok=True)
    for header in ("buffer.hpp", "math.hpp"):  # the runtime headers the library's sources include
        source, copy = os.path.join(include, "tinsmith", header), os.path.join(runtime, header)
        if not os.path.isfile(copy) or not _same_bytes(source, copy):  # keep its timestamp when unchanged
            shutil.copyfile(source, copy)


def _same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


generate_model()
