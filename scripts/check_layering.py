#!/usr/bin/env python3
"""The module layering test: every #include of another module's header must name a module that
the including module declares in src/CMakeLists.txt (shardtrain_module(NAME ... DEPENDS ...)),
and the declarations must form a stack: a module may depend only on modules declared before it.
Namespaces follow modules: a file of module M opens only shardtrain::M (or a namespace inside it).
Within a module, no two concepts (a header and its sources, by file stem) include each other,
directly or round a longer loop.

usage: check_layering.py [ROOT]        check the tree at ROOT (default: this repository)
       check_layering.py --self-test   plant an upward include in a copy and expect a failure
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

MODULE_RE = re.compile(r"shardtrain_module\(\s*(\w+)(.*?)\)", re.S)
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]shardtrain/(\w+)/', re.M)
NAMESPACE_RE = re.compile(r"^\s*namespace\s+(shardtrain(?:::\w+)*)\s*\{", re.M)
# A block that only forward-declares another module's types: `namespace shardtrain::fsdp { class FsdpEngine; }`.
FORWARD_ONLY_RE = re.compile(r"\s*\{\s*(?:(?:class|struct)\s+\w+\s*;\s*)+\}")


def declared(root):
    """Modules in declaration order, each with its DEPENDS list."""
    text = (root / "src" / "CMakeLists.txt").read_text()
    text = re.sub(r"#[^\n]*", "", text)
    mods = {}
    for name, body in MODULE_RE.findall(text):
        words = body.split()
        deps = []
        if "DEPENDS" in words:
            for w in words[words.index("DEPENDS") + 1:]:
                if w.isupper():
                    break
                deps.append(w)
        mods[name] = deps
    return mods


def check(root):
    mods = declared(root)
    order = list(mods)
    problems = []
    for m, deps in mods.items():
        for d in deps:
            if d not in mods:
                problems.append(f"src/CMakeLists.txt: {m} depends on unknown module {d}")
            elif order.index(d) >= order.index(m):
                problems.append(f"src/CMakeLists.txt: {m} depends on {d}, which is not below it")
    for m, deps in mods.items():
        for base in (root / "src" / m, root / "include" / "shardtrain" / m):
            for f in sorted(base.rglob("*")) if base.is_dir() else []:
                if f.suffix not in (".h", ".cpp", ".inc", ".cu", ".cuh"):
                    continue
                text = f.read_text(errors="replace")
                for match in INCLUDE_RE.finditer(text):
                    used = match.group(1)
                    if used != m and used not in deps:
                        line = text.count("\n", 0, match.start()) + 1
                        problems.append(f"{f.relative_to(root)}:{line}: includes shardtrain/{used}/, "
                                        f"which module {m} does not declare (DEPENDS {' '.join(deps) or '-'})")
                for match in NAMESPACE_RE.finditer(text):
                    ns = match.group(1)
                    forward_only = FORWARD_ONLY_RE.match(text, match.end() - 1)
                    if ns != f"shardtrain::{m}" and not ns.startswith(f"shardtrain::{m}::") and not forward_only:
                        line = text.count("\n", 0, match.start()) + 1
                        problems.append(f"{f.relative_to(root)}:{line}: opens namespace {ns}; module {m}'s "
                                        f"code belongs in shardtrain::{m}")
    problems += include_cycles(root, mods)
    for d in sorted((root / "src").iterdir()):
        if d.is_dir() and d.name not in mods:
            problems.append(f"src/{d.name}/ is not declared as a module in src/CMakeLists.txt")
    return order, mods, problems


def include_cycles(root, mods):
    """Loops between a module's concepts: file stems joined by their #includes of the module's headers."""
    problems = []
    for m in mods:
        edges = {}
        for base in (root / "src" / m, root / "include" / "shardtrain" / m):
            for f in sorted(base.rglob("*")) if base.is_dir() else []:
                if f.suffix not in (".h", ".cpp", ".inc", ".cu", ".cuh"):
                    continue
                used = re.findall(r'^\s*#\s*include\s*[<"]shardtrain/' + m + r'/([\w/]+)\.\w+[>"]', f.read_text(errors="replace"), re.M)
                stem = str(f.relative_to(base).with_suffix(""))
                edges.setdefault(stem, set()).update(u for u in used if u != stem)
        state, stack = {}, []

        def visit(n):
            state[n] = 1
            stack.append(n)
            for nxt in sorted(edges.get(n, ())):
                if state.get(nxt) == 1:
                    loop = stack[stack.index(nxt):] + [nxt]
                    problems.append(f"module {m}: files include each other: " + " -> ".join(loop))
                elif nxt not in state:
                    visit(nxt)
            stack.pop()
            state[n] = 2

        for n in sorted(edges):
            if n not in state:
                visit(n)
    return problems


def self_test():
    repo = pathlib.Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp)
        for part in ("src", "include"):
            shutil.copytree(repo / part, copy / part)
        _, _, clean = check(copy)
        if clean:
            print("self-test: the unmodified tree already fails:\n" + "\n".join(clean))
            return 1
        target = copy / "src" / "model" / "llama.cpp"
        target.write_text(target.read_text() + '\n#include "shardtrain/train/fit.h"\n')
        out = subprocess.run([sys.executable, __file__, str(copy)], capture_output=True, text=True)
        if out.returncode == 0 or "src/model/llama.cpp" not in out.stdout or "shardtrain/train/" not in out.stdout:
            print("self-test: a planted upward include (model -> train) was not caught:\n" + out.stdout)
            return 1
        print("self-test: the planted include was caught:\n  " + out.stdout.strip().splitlines()[0])
        target.write_text(target.read_text().replace('\n#include "shardtrain/train/fit.h"\n', "") +
                          "\nnamespace shardtrain::fsdp {}\n")
        out = subprocess.run([sys.executable, __file__, str(copy)], capture_output=True, text=True)
        if out.returncode == 0 or "opens namespace shardtrain::fsdp" not in out.stdout:
            print("self-test: a planted namespace of another module (fsdp in model) was not caught:\n" + out.stdout)
            return 1
        print("self-test: the planted namespace was caught:\n  " + out.stdout.strip().splitlines()[0])
        target.write_text(target.read_text().replace("\nnamespace shardtrain::fsdp {}\n", ""))
        clock = copy / "src" / "fsdp" / "phase_clock.cpp"
        clock.write_text('#include "shardtrain/fsdp/engine.h"\n' + clock.read_text())
        out = subprocess.run([sys.executable, __file__, str(copy)], capture_output=True, text=True)
        if out.returncode == 0 or "include each other" not in out.stdout or "phase_clock" not in out.stdout:
            print("self-test: a planted include loop (phase_clock <-> engine) was not caught:\n" + out.stdout)
            return 1
        print("self-test: the planted include loop was caught:\n  " + out.stdout.strip().splitlines()[0])
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    order, mods, problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} violation(s)")
        return 1
    print("layering: OK, " + " -> ".join(order) + f" ({sum(map(len, mods.values()))} declared edges)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
