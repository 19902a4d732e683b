"""Stage 4b, fuse: decide which nodes share a kernel, before memory planning.

An elementwise or broadcast consumer is computed inside the kernel of the value it reads (its
producer's loop) and that value is never stored, when:
- the value is an intermediate read by that consumer alone, of the consumer's output shape (the
  consumer does not broadcast it);
- the consumer's kernel is one store per element (not registered `inlined=False`);
- the producer's kernel is a functor registered with `epilogue=True` (its stores say where they
  write, and it never reads its outputs back), or is itself a fused chain whose head is;
- every other input of the consumer is ready before the producer's kernel runs: a constant, a
  graph input, or the output of a node in an earlier cluster.
Chains follow: Conv -> Add (bias) -> Relu is one kernel, named after the Conv.

The result is a Schedule in which each fused consumer sits right after its kernel's head, in
the head's cluster, with `fused` listing each head's consumers in order. The memory plan gives
fused values no workspace; the generator emits one kernel per head.
"""
from __future__ import annotations

from dataclasses import replace

from tinsmith.generate.backend import Backend, Capabilities, PORTABLE_CAPS, kernel_args
from tinsmith.ir import Graph
from tinsmith.ops import PRIMITIVES
from tinsmith.ops.registry import Pattern
from tinsmith.schedule import Schedule

FUSABLE = frozenset({Pattern.ELEMENTWISE, Pattern.BROADCAST})


def fuse(graph: Graph, sched: Schedule, backend: Backend, caps: Capabilities = PORTABLE_CAPS) -> Schedule:
    """The schedule with fused consumers moved into their producers' kernels (see the module doc)."""
    readers = graph.consumers()
    producer_node = {v: node for node in sched.nodes for v in node.outputs if v}
    cluster_of = sched.cluster_of()
    head_of: dict[str, str] = {}  # node name -> the head of the kernel computing it
    members: dict[str, list[str]] = {}
    accepts: dict[str, bool] = {}  # head -> its functor takes epilogues
    for node in sched.nodes:
        if node.name not in head_of:
            head_of[node.name] = node.name
            members[node.name] = []
            found = backend.lookup(node.op, kernel_args(graph, node, caps), node.attrs)
            accepts[node.name] = found is not None and found[1].epilogue and len(node.outputs) == 1
        head = head_of[node.name]
        if not accepts[head] or len(node.outputs) != 1:
            continue
        v = node.outputs[0]
        readers_v = readers.get(v, [])
        if not v or not graph.is_intermediate(v) or len(readers_v) != 1:
            continue
        consumer = graph.nodes[readers_v[0]]
        if (PRIMITIVES[consumer.op].pattern not in FUSABLE or len(consumer.outputs) != 1
                or graph.types[consumer.outputs[0]].shape != graph.types[v].shape
                or consumer.name in head_of):
            continue
        found = backend.lookup(consumer.op, kernel_args(graph, consumer, caps), consumer.attrs)
        if found is None or not found[1].inlined:
            continue
        ready = all(not u or u == v or u not in producer_node
                    or cluster_of[head_of.get(producer_node[u].name, producer_node[u].name)] < cluster_of[head]
                    for u in consumer.inputs)
        if ready:
            head_of[consumer.name] = head
            members[head].append(consumer.name)
    if not any(members.values()):
        return sched
    by_name = {n.name: n for n in sched.nodes}
    nodes, clusters = [], []
    for node, c in zip(sched.nodes, sched.clusters):
        if head_of[node.name] != node.name:
            continue
        nodes.append(node)
        clusters.append(c)
        for m in members[node.name]:
            nodes.append(by_name[m])
            clusters.append(c)
    # clusters whose every node moved into an earlier kernel disappear: renumber densely
    dense = {c: i for i, c in enumerate(sorted(set(clusters)))}
    clusters = [dense[c] for c in clusters]
    fused = tuple((h, tuple(ms)) for h, ms in members.items() if ms)
    return replace(sched, nodes=tuple(nodes), clusters=tuple(clusters), fused=fused)
