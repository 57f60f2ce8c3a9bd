#!/usr/bin/env python3
"""Import circles inside each crate of the workspace (issue 38).

A module file imports another when its code names an item through it: `use crate::a::b`,
`crate::a::f()`, `super::X`, `self::x::Y`, or `child::Z` for a module it declares. Each
path is resolved to the longest module prefix that is a file of the crate (so a re-export
in `workload/mod.rs` counts as an import of `workload/mod.rs`). A `mod x;` declaration
alone is no import (a child adding `impl` blocks to its parent's type is the usual Rust
shape), nor are comments, doc links or `#[cfg(test)]` modules (tests may reach anywhere).
A circle is a strongly connected component of two or more files.

    python3 tools/import_circles.py                 # every crate, circles with their edges
    python3 tools/import_circles.py fbdt-lab        # one crate
    python3 tools/import_circles.py --check         # also exit 1 if any crate has a circle
    python3 tools/import_circles.py --grep          # also issue 38's grep checks

Standard library only: runs wherever python3 does (CI installs it).
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)
PATH = re.compile(r"(?<![A-Za-z0-9_:])((?:" + IDENT + r")(?:\s*::\s*" + IDENT + r")+)")


def strip_comments_and_strings(text):
    """Blanks out comments, string and char literals (keeps line structure)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(' ""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            m = re.match(r"'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_test_modules(code):
    """Removes `#[cfg(test)] mod x { … }` blocks (brace-matched)."""
    while True:
        m = re.search(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{", code)
        if not m:
            return code
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[: m.start()] + "\n" * code.count("\n", m.start(), j) + code[j:]


def expand_use_tree(tree):
    """`a::{b, c::{d as e}}` → [('a::b', 'b'), ('a::c::d', 'e')]: (path, name it binds);
    globs bind '*'."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree.strip())
    depth, top = 0, []
    start = 0
    for k, ch in enumerate(tree):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            top.append(tree[start:k])
            start = k + 1
    top.append(tree[start:])
    paths = []
    for item in (t.strip() for t in top):
        if not item:
            continue
        brace = item.find("{")
        if brace < 0:
            path, _, alias = item.partition(" as ")
            path = path.strip()
            if path.endswith("::*"):
                paths.append((path[:-3], "*"))
            else:
                paths.append((path, alias.strip() or path.split("::")[-1]))
        else:
            prefix = item[:brace]
            inner = item[brace + 1 : item.rfind("}")]
            for p, bound in expand_use_tree(inner):
                if p == "self":
                    paths.append((prefix.rstrip(":"), bound if bound != "self" else prefix.rstrip(":").split("::")[-1]))
                else:
                    paths.append((prefix + p, bound))
    return paths


def module_files(src):
    """{module path tuple: file} for every .rs file under src (root = ())."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel in (["lib"], ["main"]):
                key = ()
            elif rel[-1] == "mod":
                key = tuple(rel[:-1])
            else:
                key = tuple(rel)
            if key == () and f == "main.rs" and os.path.exists(os.path.join(src, "lib.rs")):
                continue  # a binary beside a library is another crate
            if rel[0] == "bin":
                continue
            mods[key] = full
    return mods


USE_ITEM = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)


def edges_of_crate(src):
    mods = module_files(src)
    code_of, children_of = {}, {}
    for key, path in mods.items():
        with open(path, encoding="utf-8") as fh:
            code_of[key] = strip_test_modules(strip_comments_and_strings(fh.read()))
        children_of[key] = set(MOD_DECL.findall(code_of[key]))

    def absolute(p, key):
        """The path as a tuple from the crate root, or None (another crate, std, a local)."""
        segs = [s for s in p.split("::") if s]
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("super", "self"):
            base = key
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            return base + tuple(segs)
        if segs[0] in children_of[key]:
            return key + tuple(segs)
        if key == () and (segs[0],) in mods:
            return tuple(segs)
        return None

    # `use` bindings: naming one through its module (`super::Error` where the parent has
    # `use crate::error::Error`) is an import of the module that defines the name. A
    # re-export (`pub use`, `pub(crate) use` …) is itself no import (a facade).
    reexports = {key: {} for key in mods}
    for key, code in code_of.items():
        for m in USE_ITEM.finditer(code):
            for p, bound in expand_use_tree(m.group(2)):
                target = absolute(p, key)
                if target is not None and bound != "*":
                    reexports[key][bound] = target

    def locate(full):
        """(module file key, name) that `full` resolves to, through re-exports."""
        for _ in range(16):
            for cut in range(len(full), -1, -1):
                if full[:cut] in mods:
                    break
            else:
                return None
            mod = full[:cut]
            name = full[cut] if cut < len(full) else None
            if name is not None and name in reexports[mod] and reexports[mod][name] != full[: cut + 1]:
                full = reexports[mod][name] + full[cut + 1 :]
                continue
            return mod, name or (mod[-1] if mod else "crate")
        return None

    edges = {}  # (from file, to file) -> set of names
    for key, code in code_of.items():
        path = mods[key]
        raw = []
        for m in USE_ITEM.finditer(code):
            if not m.group(1):
                raw.extend(p for p, bound in expand_use_tree(m.group(2)))
        body = USE_ITEM.sub(" ", code)
        raw.extend(re.sub(r"\s+", "", p) for p in PATH.findall(body))
        for p in raw:
            full = absolute(p, key)
            if full is None:
                continue
            found = locate(full)
            if found is None:
                continue
            target = mods[found[0]]
            if target != path:
                edges.setdefault((path, target), set()).add(found[1])
    return mods, edges


def circles(nodes, edges):
    """Strongly connected components with more than one file (Tarjan, iterative)."""
    succ = {n: [] for n in nodes}
    for a, b in edges:
        succ[a].append(b)
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(succ[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = counter[0]
                counter[0] += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(succ[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return sorted(comps)


GREPS = [
    ("string errors at library edges",
     ["grep", "-rn", r"Config(e.to_string())\|pub fn.*Result<[^>]*, String>", "--include=*.rs"], "crates/*/src"),
    ("PathId casts", ["grep", "-rn", r"PathId([a-z_.]* as u8)", "--include=*.rs"], "crates"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("crates", nargs="*", help="crate folder names under crates/ (default: all)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a circle is found")
    ap.add_argument("--grep", action="store_true", help="also run issue 38's grep checks")
    args = ap.parse_args()
    crates_dir = os.path.join(ROOT, "crates")
    names = args.crates or sorted(d for d in os.listdir(crates_dir) if os.path.isdir(os.path.join(crates_dir, d, "src")))
    found = 0
    for name in names:
        src = os.path.join(crates_dir, name, "src")
        mods, edges = edges_of_crate(src)
        comps = circles(set(mods.values()), edges)
        rel = lambda p: os.path.relpath(p, ROOT)
        if not comps:
            print(f"{name}: no circle ({len(mods)} files, {len(edges)} imports)")
            continue
        for comp in comps:
            found += 1
            print(f"{name}: circle of {len(comp)} files")
            inside = set(comp)
            for (a, b), what in sorted(edges.items()):
                if a in inside and b in inside:
                    print(f"  {rel(a)} -> {rel(b)}: {', '.join(sorted(what))}")
    print(f"circles: {found}")
    failed = args.check and found > 0
    if args.grep:
        for what, cmd, where in GREPS:
            import glob
            targets = sorted(glob.glob(os.path.join(ROOT, where)))
            out = subprocess.run(cmd + targets, capture_output=True, text=True, cwd=ROOT).stdout
            hits = [l for l in out.splitlines() if l.strip()]
            print(f"grep {what}: {len(hits)} lines")
            for l in hits:
                print(f"  {os.path.relpath(l, ROOT) if l.startswith('/') else l}")
            failed |= args.check and bool(hits)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
