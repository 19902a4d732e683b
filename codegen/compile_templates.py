"""Every Jinja2 template of the generator compiled ahead, as `python -m compileall` does for
modules (see codegen/template_cache.py).

Kept apart from tinsmith.template_cache because it imports the modules that make the
environments, and those sit above the cache (tinsmith.escape makes its environments cached):
here, importing them makes no import cycle."""
from __future__ import annotations

import tinsmith.arena
import tinsmith.assemble  # noqa: F401  (each defines its environment when imported)
import tinsmith.measure.page  # noqa: F401
import tinsmith.targets.firmware
from tinsmith.template_cache import compile_made


def compile_all() -> None:
    """Write the compiled code of every template of every module's environment (the modules that
    define theirs when imported are imported above, and those that make theirs when first used
    are asked for it here)."""
    tinsmith.arena.templates()
    tinsmith.targets.firmware.templates()
    compile_made()
