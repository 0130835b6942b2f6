#!/usr/bin/env python3
"""Checks the container files without building them (CI has neither Docker nor Apptainer):
every path, file and script they reference exists in the repository, and every version is pinned.

Usage: check_containers.py REPO          -> exit 0 when all hold, 1 with each problem listed
       check_containers.py --self-test REPO  -> also proves the checker catches a broken copy
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

UNPINNED = re.compile(r"latest|stable|nightly|main|master|\*", re.I)


def versions(repo):
    out = {}
    for line in open(os.path.join(repo, "containers/versions.env")):
        line = line.split("#", 1)[0].strip()
        if line:
            k, v = line.split("=", 1)
            out[k] = v.strip()
    return out


def pinned(value):
    return bool(re.search(r"\d", value)) and not UNPINNED.search(value) and " " not in value


def in_repo(repo, path):
    """/opt/shardtrain/X (the image's copy of the repository) or a repo-relative path -> exists?"""
    rel = path[len("/opt/shardtrain/"):] if path.startswith("/opt/shardtrain/") else path
    return os.path.exists(os.path.join(repo, rel))


def check(repo):
    problems = []
    v = versions(repo)
    for k, val in v.items():
        if not pinned(val):
            problems.append("containers/versions.env: %s=%s is not a pinned version" % (k, val))
    deps = open(os.path.join(repo, "scripts/install-deps.sh")).read()
    m = re.search(r"^TORCH_VERSION=(\S+)", deps, re.M)
    if not m or m.group(1) != v.get("TORCH_VERSION"):
        problems.append("TORCH_VERSION differs: install-deps.sh %s, versions.env %s" % (m and m.group(1), v.get("TORCH_VERSION")))

    docker = open(os.path.join(repo, "containers/Dockerfile")).read()
    for image in re.findall(r"^FROM\s+(\S+)", docker, re.M):
        if image != v.get("DEBIAN_IMAGE"):
            problems.append("Dockerfile: FROM %s is not versions.env's DEBIAN_IMAGE %s" % (image, v.get("DEBIAN_IMAGE")))
    for src in re.findall(r"^COPY\s+(\S+)\s+\S+", docker, re.M):
        if not os.path.exists(os.path.join(repo, src)):
            problems.append("Dockerfile: COPY source %s does not exist" % src)

    apptainer = open(os.path.join(repo, "containers/shardtrain.def")).read()
    image = re.search(r"^From:\s*(\S+)", apptainer, re.M)
    if not image or image.group(1) != v.get("DEBIAN_IMAGE"):
        problems.append("shardtrain.def: From: %s is not DEBIAN_IMAGE" % (image and image.group(1)))
    files = re.search(r"^%files\n(.*?)(?:^%|\Z)", apptainer, re.M | re.S)
    for line in (files.group(1).splitlines() if files else []):
        if line.strip() and not os.path.exists(os.path.join(repo, line.split()[0])):
            problems.append("shardtrain.def: %%files source %s does not exist" % line.split()[0])

    build = open(os.path.join(repo, "containers/build-image.sh")).read()
    problems += check_files_section(repo, files.group(1) if files else "")
    problems += check_plugin_path(docker, apptainer, build)
    texts = {"Dockerfile": docker, "shardtrain.def": apptainer, "build-image.sh": build}
    mpijob_path = os.path.join(repo, "containers/eks/mpijob.yaml")
    texts["mpijob.yaml"] = open(mpijob_path).read()
    for name, text in texts.items():
        for path in re.findall(r"/opt/shardtrain/[\w./-]+", text):
            if re.match(r"/opt/shardtrain/(build|\.venv)/", path):
                continue  # made inside the image by build-image.sh
            if not in_repo(repo, path):
                problems.append("%s references %s, which is not in the repository" % (name, path))
        for path in re.findall(r"(?<![\w/])((?:scripts|containers|launch|slurm)/[\w./-]+\.(?:sh|env|sbatch))", text):
            if not in_repo(repo, path):
                problems.append("%s references %s, which does not exist" % (name, path))
    for var in set(re.findall(r"\$\{?([A-Z_]+_VERSION|DEBIAN_SNAPSHOT)\b", build)):
        if var not in v:
            problems.append("build-image.sh uses $%s, which versions.env does not pin" % var)
    for var in v:
        if var != "DEBIAN_IMAGE" and not re.search(r"\$\{?%s\b" % var, build):
            problems.append("versions.env pins %s but build-image.sh never uses it" % var)

    job = yaml.safe_load(texts["mpijob.yaml"])
    if job.get("kind") != "MPIJob":
        problems.append("mpijob.yaml: kind is %s, not MPIJob" % job.get("kind"))
    specs = job["spec"]["mpiReplicaSpecs"]
    options = set(re.findall(r"^\s+(--[\w-]+)\)", open(os.path.join(repo, "launch/common.sh")).read() +
                             open(os.path.join(repo, "launch/mpirun.sh")).read(), re.M))
    for role, spec in specs.items():
        for c in spec["template"]["spec"]["containers"]:
            tag = c["image"].rsplit(":", 1)[-1] if ":" in c["image"].split("/")[-1] else ""
            if not pinned(tag):
                problems.append("mpijob.yaml: %s image %s has no pinned tag" % (role, c["image"]))
            args = c.get("args", [])
            launcher_args = args[: args.index("--")] if "--" in args else args
            for a in launcher_args:
                if a.startswith("--") and a not in options:
                    problems.append("mpijob.yaml: %s passes %s, which launch/mpirun.sh does not accept" % (role, a))
    limits = specs["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    for res in ("nvidia.com/gpu", "vpc.amazonaws.com/efa"):
        if res not in limits:
            problems.append("mpijob.yaml: workers do not request %s" % res)
    return problems


def top_level_entries(repo):
    """What the image needs of the repository: its tracked top-level files and folders, dot-files aside."""
    p = subprocess.run(["git", "-C", repo, "ls-files"], text=True, capture_output=True)
    names = {f.split("/", 1)[0] for f in p.stdout.split()} if p.returncode == 0 and p.stdout else set(os.listdir(repo))
    ignored = {l.strip() for l in open(os.path.join(repo, ".dockerignore")) if l.strip()}
    return {n for n in names if not n.startswith(".") and n not in ignored and not n.startswith("build")}


def check_files_section(repo, section):
    """Apptainer's %files ignores .dockerignore: it must name entries, never "." or a build output."""
    problems = []
    ignored = {l.strip().rstrip("*").rstrip(".") for l in open(os.path.join(repo, ".dockerignore")) if l.strip()}
    sources = [l.split()[0] for l in section.splitlines() if l.strip() and not l.strip().startswith("#")]
    for src in sources:
        top = os.path.normpath(src).split("/", 1)[0]
        if top in (".", "") or top in ignored or top.startswith("build"):
            problems.append("shardtrain.def: %%files copies %s, which holds build outputs (build/, .venv/) of a built checkout" % src)
    missing = sorted(top_level_entries(repo) - {os.path.normpath(s).split("/", 1)[0] for s in sources})
    if missing:
        problems.append("shardtrain.def: %%files does not copy %s, which the image build needs" % ", ".join(missing))
    return problems


def check_plugin_path(docker, apptainer, build):
    """The EFA plugin for NCCL that build-image.sh installs is on the image's library path."""
    m = re.search(r"aws-ofi-nccl\S*\s.*?--prefix=(\S+)", build, re.S)
    if not m:
        return ["build-image.sh: no --prefix for aws-ofi-nccl found"]
    lib = m.group(1) + "/lib"
    problems = []
    if not re.search(r"^\s*(export\s+)?LD_LIBRARY_PATH=\S*%s" % re.escape(lib), docker, re.M):
        problems.append("Dockerfile: LD_LIBRARY_PATH does not hold %s (the EFA plugin for NCCL)" % lib)
    env = re.search(r"^%environment\n(.*?)(?:^%|\Z)", apptainer, re.M | re.S)
    if not env or not re.search(r"LD_LIBRARY_PATH=\S*%s" % re.escape(lib), env.group(1)):
        problems.append("shardtrain.def: %%environment does not put %s on LD_LIBRARY_PATH" % lib)
    if not re.search(r"%s\b.*ld\.so\.conf\.d" % re.escape(lib), build):
        problems.append("build-image.sh: %s is not registered in /etc/ld.so.conf.d" % lib)
    return problems


def self_test(repo):
    """A copy with an unpinned version and a missing script must fail the check."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "repo")
        skip = lambda d, names: [n for n in names if d == repo and (n.startswith("build") or n in (".venv", ".git", "runs"))]
        shutil.copytree(repo, copy, ignore=skip)
        p = os.path.join(copy, "containers/versions.env")
        text = open(p).read().replace("EFA_INSTALLER_VERSION=1", "EFA_INSTALLER_VERSION=latest #")
        open(p, "w").write(text)
        os.remove(os.path.join(copy, "scripts/build.sh"))
        # The image as it was: the whole checkout copied, and the plugin only named by OFI_NCCL_DIR.
        d = os.path.join(copy, "containers/shardtrain.def")
        text = re.sub(r"^%files\n.*?(?=^%)", "%files\n    . /opt/shardtrain\n\n", open(d).read(), flags=re.M | re.S)
        open(d, "w").write(re.sub(r"^.*LD_LIBRARY_PATH=.*\n", "", text, flags=re.M))
        found = check(copy)
        for f in found:
            print("  self-test found: " + f)
        want = ["EFA_INSTALLER_VERSION=latest", "scripts/build.sh", "%files copies .", "%environment does not put"]
        missed = [w for w in want if not any(w in f for f in found)]
        print("self-test: a broken copy gives %d problems; %s" % (len(found), "all caught" if not missed else "MISSED %s" % missed))
        return not missed


def main():
    args = sys.argv[1:]
    st = args and args[0] == "--self-test"
    repo = os.path.abspath(args[-1])
    problems = check(repo)
    for p in problems:
        print("FAIL: " + p)
    if not problems:
        v = versions(repo)
        print("containers: every referenced path exists; pinned: " + ", ".join("%s=%s" % kv for kv in v.items()))
    ok = not problems and (self_test(repo) if st else True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
