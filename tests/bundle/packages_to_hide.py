"""Reads the bundled files' origins (paths, one per line) and prints the Debian packages to hide:
their owners, less everything a Debian 12 minbase with python3 has (Priority: required and
python3, with their dependencies)."""
import os
import re
import subprocess
import sys


def installed():
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Priority}\t${Provides}\t${Pre-Depends}, ${Depends}\n"],
                         capture_output=True, text=True, check=True).stdout
    pkgs, provides = {}, {}
    for line in out.splitlines():
        name, status, prio, prov, deps = line.split("\t")
        if "installed" not in status.split()[-1:]:
            continue
        alts = [[re.split(r"[\s(:]", a.strip())[0] for a in d.split("|")] for d in deps.split(",") if d.strip()]
        pkgs[name] = (prio, alts)
        for p in prov.split(","):
            if p.strip():
                provides.setdefault(re.split(r"[\s(]", p.strip())[0], []).append(name)
    return pkgs, provides


def closure(roots, pkgs, provides):
    seen, pending = set(), list(roots)
    while pending:
        p = pending.pop()
        if p in seen or p not in pkgs:
            continue
        seen.add(p)
        for alt in pkgs[p][1]:
            for a in alt:  # the first alternative that is installed satisfies the dependency
                hit = [a] if a in pkgs else provides.get(a, [])
                if hit:
                    pending.extend(hit)
                    break
    return seen


def owners_of_files():
    """Every installed file's package, from dpkg's own lists (what `dpkg -S` searches, read once)."""
    owners = {}
    info = "/var/lib/dpkg/info"
    for name in os.listdir(info):
        if name.endswith(".list"):
            with open(os.path.join(info, name), errors="replace") as f:
                for line in f:
                    owners.setdefault(line.rstrip("\n"), name[:-len(".list")].split(":")[0])
    return owners


def owner(path, owners):
    for p in (path, re.sub(r"^/usr/lib/", "/lib/", path)):
        if p in owners:
            return owners[p]
    sys.exit(f"packages_to_hide: no Debian package owns {path}")


pkgs, provides = installed()
keep = closure([p for p, (prio, _) in pkgs.items() if prio == "required"] + ["python3"], pkgs, provides)
files = owners_of_files()
owners = {owner(line.strip(), files) for line in sys.stdin if line.strip()}
for p in sorted(owners - keep):
    print(p)
