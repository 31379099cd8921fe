#!/usr/bin/env python3
"""The house drawn from the code: folders of src/distllm as floors, includes as arrows.

  python3 scripts/architecture.py            # print the floors, arrows and largest rooms
  python3 scripts/architecture.py --mermaid  # the picture for docs/architecture.md
  python3 scripts/architecture.py --check    # exit 1 on a cycle, an upward arrow or an oversized room

A folder's floor is its place in FLOORS (DESIGN.md's dependency direction): a file
may include headers of its own folder and of folders on lower floors only. A room is
a .cpp with its header; none may pass MAX_ROOM_LINES.
"""
import argparse
import collections
import os
import re
import sys

# Lowest first. Folders on one floor must not include each other either.
FLOORS = [
    ["base"],
    ["tensor"],
    ["kernels", "io", "tokenizer", "comm"],
    ["model", "checkpoint", "http"],
    ["train", "serve", "launch", "router", "client"],
    ["plan", "web"],
    ["cli"],
]
MAX_ROOM_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"distllm/([a-z0-9_]+)/([^"]+)"', re.M)


def source_files(root):
    src = os.path.join(root, "src", "distllm")
    for dirpath, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith((".h", ".cpp")):
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, src)
                yield rel.split(os.sep)[0], rel, path


def read_house(root):
    arrows = collections.Counter()  # (from folder, to folder) -> includes
    examples = {}
    lines = {}
    for folder, rel, path in source_files(root):
        text = open(path, encoding="utf-8", errors="replace").read()
        lines[rel] = text.count("\n")
        for target, _ in INCLUDE.findall(text):
            if target != folder:
                arrows[(folder, target)] += 1
                examples.setdefault((folder, target), rel)
    return arrows, examples, lines


def floor_of(folder):
    for i, floor in enumerate(FLOORS):
        if folder in floor:
            return i
    return None


def rooms(lines):
    """(lines, name) of each .cpp with its header, and of headers without a .cpp."""
    out = []
    for rel, n in lines.items():
        stem, ext = os.path.splitext(rel)
        if ext == ".cpp":
            out.append((n + lines.get(stem + ".h", 0), stem))
        elif stem + ".cpp" not in lines:
            out.append((n, stem))
    return sorted(out, reverse=True)


def find_cycles(arrows):
    graph = collections.defaultdict(set)
    for a, b in arrows:
        graph[a].add(b)
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def problems(arrows, examples, lines):
    found = []
    folders = {a for a, _ in arrows} | {b for _, b in arrows} | {rel.split("/")[0] for rel in lines}
    for f in sorted(folders):
        if floor_of(f) is None:
            found.append(f"folder {f}/ is on no floor: add it to FLOORS in scripts/architecture.py")
    for (a, b), n in sorted(arrows.items()):
        fa, fb = floor_of(a), floor_of(b)
        if fa is not None and fb is not None and fb >= fa:
            kind = "upward" if fb > fa else "sideways (same floor)"
            found.append(f"{kind} arrow {a}/ -> {b}/ ({n} includes, e.g. {examples[(a, b)]})")
    for cycle in find_cycles(arrows):
        found.append("include cycle: " + " -> ".join(cycle))
    for n, name in rooms(lines):
        if n > MAX_ROOM_LINES:
            found.append(f"room {name} has {n} lines (more than {MAX_ROOM_LINES})")
    return found


def mermaid(arrows):
    out = ["flowchart BT"]
    for i, floor in enumerate(FLOORS):
        out.append(f"  subgraph floor{i}[\"floor {i}\"]")
        out.append("    " + " & ".join(floor))
        out.append("  end")
    for (a, b) in sorted(arrows):
        out.append(f"  {a} --> {b}")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p.add_argument("--mermaid", action="store_true")
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    arrows, examples, lines = read_house(args.root)
    if args.mermaid:
        print(mermaid(arrows))
        return 0
    found = problems(arrows, examples, lines)
    if args.check:
        for f in found:
            print("architecture:", f)
        total = sum(lines.values())
        print(f"architecture: {len(lines)} files, {total} lines, {len(arrows)} folder arrows, "
              f"{len(found)} problem(s)")
        return 1 if found else 0
    for i, floor in enumerate(FLOORS):
        size = {f: sum(n for rel, n in lines.items() if rel.split("/")[0] == f) for f in floor}
        print(f"floor {i}: " + ", ".join(f"{f} ({size[f]} lines)" for f in floor))
    print("\narrows (includes):")
    for (a, b), n in sorted(arrows.items()):
        print(f"  {a} -> {b}: {n}")
    print("\nlargest rooms (.cpp + .h):")
    for n, name in rooms(lines)[:15]:
        print(f"  {n:5d}  {name}")
    for f in found:
        print("problem:", f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
