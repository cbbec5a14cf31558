#!/usr/bin/env python3
"""layers.py - checks that the server's files call each other one way.

Reads the symbols each object file of libanvil_server.a defines and uses
(nm), draws which file calls which, and fails when a file calls a file of
its own layer or a higher one, or when a file is not in LAYERS. The layers
are drawn in src/server/core.h: the state core, the transitions, the
record files, the scheduler glue, the entry points, then the HTTP side.

usage: layers.py LIBANVIL_SERVER_A [--graph]
"""
import subprocess
import sys

# file -> layer; a file may call only files of a lower layer.
LAYERS = {
    "idem.c": -1,
    "state.c": 0,
    "jointoken.c": 0,
    "peer.c": 0,
    "transition.c": 1,
    "ranks.c": 2,
    "jobs.c": 3,
    "deps.c": 3,
    "nodes.c": 3,
    "schedule.c": 4,
    "flows.c": 5,
    "fleet.c": 5,
    "fleet_rollout.c": 6,
    "entry.c": 7,
    "api_util.c": 8,
    "api_wait.c": 8,
    "agentproto.c": 9,
    "metrics.c": 9,
    "api_nodes.c": 9,
    "api_stream.c": 9,
    "api_flows.c": 9,
    "api_lineage.c": 9,
    "api_objects.c": 9,
    "api_fleet.c": 9,
    "api.c": 10,
    "server.c": 11,
}


def symbols(lib):
    """{object: (defined set, undefined set)} from nm's portable output."""
    out = subprocess.run(["nm", "-P", "-A", lib], check=True, capture_output=True,
                         text=True).stdout
    objs = {}
    for line in out.splitlines():
        # "lib.a[obj.o]: name T value size" (GNU nm -A -P)
        head, _, rest = line.partition(": ")
        if "[" not in head:
            continue
        obj = head[head.index("[") + 1:-1].removesuffix(".o")
        parts = rest.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        d, u = objs.setdefault(obj, (set(), set()))
        if kind == "U":
            u.add(name)
        elif kind in "TDBR":
            d.add(name)
    return objs


def edges(objs):
    owner = {}
    for obj, (d, _) in objs.items():
        for name in d:
            owner[name] = obj
    calls = {}
    for obj, (_, u) in objs.items():
        for name in u:
            dst = owner.get(name)
            if dst and dst != obj:
                calls.setdefault((obj, dst), []).append(name)
    return calls


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    objs = symbols(sys.argv[1])
    calls = edges(objs)
    bad = []
    for obj in sorted(objs):
        if obj not in LAYERS:
            bad.append(f"{obj}: not placed in a layer (tests/lint/layers.py LAYERS)")
    for (src, dst), names in sorted(calls.items()):
        if "--graph" in sys.argv:
            print(f"{src} -> {dst}: {', '.join(sorted(names))}")
        if src in LAYERS and dst in LAYERS and LAYERS[dst] >= LAYERS[src]:
            bad.append(f"{src} (layer {LAYERS[src]}) calls {dst} (layer {LAYERS[dst]}): "
                       f"{', '.join(sorted(names))}")
    for b in bad:
        print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
