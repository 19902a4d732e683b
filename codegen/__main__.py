"""`python -m tinsmith`; in a checkout also `python -m codegen` (the command line the design
names) and `python path/to/codegen` (how the SCons tool of a checkout that is not the installed
one runs its own generator): both make this folder the `tinsmith` package first."""
import os
import sys

if __package__ != "tinsmith":
    import importlib.util
    folder = os.path.dirname(os.path.abspath(__file__))
    if not __package__:  # run as a folder, which Python put first on sys.path: its modules are not top-level
        sys.path.pop(0)
    spec = importlib.util.spec_from_file_location("tinsmith", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    sys.modules["tinsmith"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["tinsmith"])

from tinsmith.cli import main  # noqa: E402

sys.exit(main())
