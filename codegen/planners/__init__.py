"""Offset planners for the workspace: lifetimes in, offsets out, as in ONE runtime's Bump, FirstFit
and WIC planners and tflite-micro's greedy planner.

A planner sees only buffers (name, size, first and last cluster); two buffers whose cluster
ranges meet interfere and must get disjoint bytes. Which planner wins is the memory plan's
business (tinsmith.plan): each one here is a different guess at a hard packing problem, and the
smallest result is kept.
"""
from __future__ import annotations

from tinsmith.planners.lifetime import PLANNERS, Lifetime, Planner, peak, register, scratch_name, top
from tinsmith.planners import greedy  # noqa: F401  (registers the greedy planners)
from tinsmith.planners.exact import exact_search

__all__ = ["Lifetime", "Planner", "PLANNERS", "register", "top", "peak", "exact_search", "scratch_name"]
