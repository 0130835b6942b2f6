#!/usr/bin/env python3
"""Checks the container recipes without building them (containers/test.sh builds and runs them):
every version pinned, every path they reference present, the Dockerfile and the Apptainer file in
step (same base, same build-image.sh steps, same environment), and the EKS MPIJob rendered from
values files against what the MPI Operator v2beta1 requires.

Usage: check_containers.py REPO              -> exit 0 when all hold, 1 with each problem listed
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
CODENAMES = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
# The image's tree in /opt/shardtrain that build-image.sh makes rather than copies from the repository.
MADE_IN_IMAGE = {"bin", "venv", "share"}


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


def read(repo, rel):
    return open(os.path.join(repo, rel)).read()


def section(text, name):
    m = re.search(r"^%%%s\n(.*?)(?:^%%|\Z)" % name, text, re.M | re.S)
    return m.group(1) if m else ""


def check_versions(repo, v):
    problems = []
    for k, val in v.items():
        if k == "DEBIAN_SUITE":
            major = v.get("DEBIAN_IMAGE", "").split(":")[-1].split(".")[0]
            if CODENAMES.get(major) != val:
                problems.append("versions.env: DEBIAN_SUITE=%s is not the codename of DEBIAN_IMAGE %s" % (val, v.get("DEBIAN_IMAGE")))
        elif k == "LOCAL_BASE_IMAGE":
            if val.rsplit(":", 1)[-1] != v.get("DEBIAN_SUITE"):
                problems.append("versions.env: LOCAL_BASE_IMAGE=%s is not tagged with DEBIAN_SUITE" % val)
        elif not pinned(val):
            problems.append("containers/versions.env: %s=%s is not a pinned version" % (k, val))
    m = re.search(r"^TORCH_VERSION=(\S+)", read(repo, "scripts/install-deps.sh"), re.M)
    if not m or m.group(1) != v.get("TORCH_VERSION"):
        problems.append("TORCH_VERSION differs: install-deps.sh %s, versions.env %s" % (m and m.group(1), v.get("TORCH_VERSION")))
    return problems


def dockerfile_env(docker):
    """ENV KEY=VALUE ... (with continuation lines) -> dict."""
    env = {}
    for block in re.findall(r"^ENV\s+((?:.*\\\n)*.*)$", docker, re.M):
        for k, val in re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " ")):
            env[k] = val
    return env


def def_env(apptainer):
    """%environment's exports -> dict, with the host's value appended (${X:+:$X}, :$X) left out."""
    env = {}
    for k, val in re.findall(r"^\s*export\s+(\w+)=(\S+)", section(apptainer, "environment"), re.M):
        env[k] = re.sub(r"(\$\{\w+:\+:\$\w+\}|:\$\w+)$", "", val)
    return env


def check_recipes(repo, v):
    problems = []
    docker = read(repo, "containers/Dockerfile")
    apptainer = read(repo, "containers/shardtrain.def")
    build = read(repo, "containers/build-image.sh")
    base = re.search(r"^ARG\s+BASE=(\S+)", docker, re.M)
    if not base or base.group(1) != v.get("DEBIAN_IMAGE"):
        problems.append("Dockerfile: ARG BASE=%s is not versions.env's DEBIAN_IMAGE %s" % (base and base.group(1), v.get("DEBIAN_IMAGE")))
    for image in re.findall(r"^FROM\s+(\S+)", docker, re.M):
        if image != "${BASE}":
            problems.append("Dockerfile: FROM %s; every stage starts from ${BASE}" % image)
    for src in re.findall(r"^COPY\s+(?!--from)(\S+)\s+\S+", docker, re.M):
        if not os.path.exists(os.path.join(repo, src)):
            problems.append("Dockerfile: COPY source %s does not exist" % src)
    args = dict(re.findall(r"^\s+(\w+)=(\S+)", section(apptainer, "arguments"), re.M))
    if args.get("from") != v.get("DEBIAN_IMAGE"):
        problems.append("shardtrain.def: %%arguments from=%s is not DEBIAN_IMAGE" % args.get("from"))
    if not re.search(r"^Bootstrap:\s*\{\{ bootstrap \}\}\s*\nFrom:\s*\{\{ from \}\}", apptainer, re.M):
        problems.append("shardtrain.def: Bootstrap/From are not the bootstrap/from build arguments (the OCI archive path needs them)")
    # The same steps: each recipe runs build-image.sh's build and runtime modes.
    modes = set(re.findall(r"^\s*(\w+)\)\s+\w+\s*;;", build, re.M))
    for name, text in (("Dockerfile", docker), ("shardtrain.def", apptainer)):
        code = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
        used = set(re.findall(r"containers/build-image\.sh\s+(\w+)", code))
        for m in ("build", "runtime"):
            if m not in used:
                problems.append("%s: never runs build-image.sh %s" % (name, m))
        for m in used - modes:
            problems.append("%s: runs build-image.sh %s, which build-image.sh does not have" % (name, m))
    de, ae = dockerfile_env(docker), def_env(apptainer)
    for k in sorted(set(de) | set(ae)):
        if k == "PATH":  # the Dockerfile spells out the system part that %environment appends
            if not de.get(k, "").startswith(ae.get(k, "\0")):
                problems.append("PATH: Dockerfile %s does not begin with shardtrain.def's %s" % (de.get(k), ae.get(k)))
        elif de.get(k) != ae.get(k):
            problems.append("environment %s: Dockerfile %s, shardtrain.def %s" % (k, de.get(k), ae.get(k)))
    files = section(apptainer, "files")
    src = re.search(r"^src=(\S+)", build, re.M)
    for line in files.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            parts = line.split()
            if not os.path.exists(os.path.join(repo, parts[0])):
                problems.append("shardtrain.def: %%files source %s does not exist" % parts[0])
            if src and not parts[-1].startswith(src.group(1) + "/"):
                problems.append("shardtrain.def: %%files puts %s outside %s, where build-image.sh builds" % (parts[0], src.group(1)))
    problems += check_files_section(repo, files)
    problems += check_plugin_path(docker, apptainer, build)
    staged = set(re.findall(r'"\$src/([\w.-]+)"', build[build.find("stage() {"):]))
    texts = {"Dockerfile": docker, "shardtrain.def": apptainer, "build-image.sh": build,
             "mpijob.template.yaml": read(repo, "containers/eks/mpijob.template.yaml")}
    for name, text in texts.items():
        for path in re.findall(r"/opt/shardtrain/[\w./-]+", text):
            top = path.split("/")[3]
            if top in MADE_IN_IMAGE:
                continue
            if not os.path.exists(os.path.join(repo, path[len("/opt/shardtrain/"):])):
                problems.append("%s references %s, which is not in the repository" % (name, path))
            elif top not in staged:
                problems.append("%s references %s, but build-image.sh does not copy %s into the image" % (name, path, top))
        for path in re.findall(r"(?<![\w/])((?:scripts|containers|launch|slurm)/[\w./-]+\.(?:sh|env|sbatch|py))", text):
            if not os.path.exists(os.path.join(repo, path)):
                problems.append("%s references %s, which does not exist" % (name, path))
    for var in set(re.findall(r"\$\{?([A-Z_]+_VERSION|DEBIAN_SNAPSHOT)\b", build)):
        if var not in v:
            problems.append("build-image.sh uses $%s, which versions.env does not pin" % var)
    for var in [k for k in v if k.endswith("_VERSION") or k == "DEBIAN_SNAPSHOT"]:
        if not re.search(r"\$\{?%s\b" % var, build):
            problems.append("versions.env pins %s but build-image.sh never uses it" % var)
    return problems


def render(repo, values):
    p = subprocess.run(["bash", os.path.join(repo, "containers/eks/render.sh"), values], text=True, capture_output=True)
    return p.returncode, p.stdout, p.stderr.strip()


def read_values(path):
    out = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            k, val = line.split("=", 1)
            out[k] = val.strip()
    return out


def check_mpijob(repo, job, values, label):
    """The fields the MPI Operator v2beta1 requires (its CRD and validation), and the values in place."""
    problems = []
    say = lambda msg: problems.append("%s: %s" % (label, msg))
    if job.get("apiVersion") != "kubeflow.org/v2beta1" or job.get("kind") != "MPIJob":
        say("apiVersion/kind %s/%s, not kubeflow.org/v2beta1 MPIJob" % (job.get("apiVersion"), job.get("kind")))
        return problems
    spec = job.get("spec", {})
    if job.get("metadata", {}).get("name") != values["NAME"]:
        say("metadata.name is not NAME")
    if spec.get("slotsPerWorker") != int(values["GPUS_PER_NODE"]):
        say("slotsPerWorker %r is not GPUS_PER_NODE %s" % (spec.get("slotsPerWorker"), values["GPUS_PER_NODE"]))
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        say("mpiImplementation %s is not OpenMPI, Intel or MPICH" % spec.get("mpiImplementation"))
    if spec.get("runPolicy", {}).get("cleanPodPolicy") not in ("None", "Running", "All"):
        say("runPolicy.cleanPodPolicy must be None, Running or All")
    home = re.search(r"useradd .*--uid (\d+) .*?(\w+)$", read(repo, "containers/build-image.sh"), re.M)
    uid, user = (int(home.group(1)), home.group(2)) if home else (None, None)
    if not str(spec.get("sshAuthMountPath", "")).startswith("/home/%s/" % user):
        say("sshAuthMountPath %s is not in the image user's (%s) home" % (spec.get("sshAuthMountPath"), user))
    replicas = spec.get("mpiReplicaSpecs", {})
    want = {"Launcher": 1, "Worker": int(values["NODES"])}
    for role, n in want.items():
        r = replicas.get(role)
        if r is None:
            say("no %s replica spec" % role)
            continue
        if r.get("replicas") != n:
            say("%s replicas %r, want %d" % (role, r.get("replicas"), n))
        if r.get("restartPolicy") not in ("Never", "OnFailure"):
            say("%s restartPolicy %r is not Never or OnFailure" % (role, r.get("restartPolicy")))
        pod = r.get("template", {}).get("spec", {})
        if pod.get("securityContext", {}).get("runAsUser") != uid:
            say("%s pods do not run as the image's user (uid %s)" % (role, uid))
        containers = pod.get("containers", [])
        if not containers:
            say("%s template defines no container" % role)
            continue
        c = containers[0]
        if c.get("image") != values["IMAGE"]:
            say("%s image %s is not IMAGE %s" % (role, c.get("image"), values["IMAGE"]))
        claims = {vol["name"]: vol.get("persistentVolumeClaim", {}).get("claimName") for vol in pod.get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        if claims.get(mounts.get("/fsx")) != values["FSX_CLAIM"]:
            say("%s does not mount the FSx claim %s at /fsx" % (role, values["FSX_CLAIM"]))
    worker = (replicas.get("Worker", {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0]
    for kind in ("limits", "requests"):
        res = worker.get("resources", {}).get(kind, {})
        for name, key in (("nvidia.com/gpu", "GPUS_PER_NODE"), ("vpc.amazonaws.com/efa", "EFA_PER_NODE")):
            if res.get(name) != int(values[key]):
                say("Worker %s %s=%r, want %s" % (kind, name, res.get(name), values[key]))
    launcher = (replicas.get("Launcher", {}).get("template", {}).get("spec", {}).get("containers") or [{}])[0]
    args = launcher.get("args", [])
    launcher_args = args[: args.index("--")] if "--" in args else args
    options = set(re.findall(r"^\s+(--[\w-]+)\)", read(repo, "launch/common.sh") + read(repo, "launch/mpirun.sh"), re.M))
    for a in launcher_args:
        if a.startswith("--") and a not in options:
            say("the launcher passes %s, which launch/mpirun.sh does not accept" % a)
    if "--profile" in args and not os.path.exists(os.path.join(repo, "launch/profiles/%s.env" % args[args.index("--profile") + 1])):
        say("--profile %s has no launch/profiles file" % args[args.index("--profile") + 1])
    return problems


def check_eks(repo):
    problems = []
    default = os.path.join(repo, "containers/eks/values.env")
    values = read_values(default)
    with tempfile.TemporaryDirectory() as tmp:
        other = dict(values, NAME="ft-70b", IMAGE="registry.example.com/team/shardtrain:0.1.3", NODES="5",
                     GPUS_PER_NODE="4", EFA_PER_NODE="4", PROFILE="p4de", FSX_CLAIM="fsx-team")
        cases = [("values.env", default, values)]
        path = os.path.join(tmp, "other.env")
        open(path, "w").write("".join("%s=%s\n" % kv for kv in other.items()))
        cases.append(("a 5-node p4de values file", path, other))
        for label, p, vals in cases:
            rc, out, err = render(repo, p)
            if rc != 0:
                problems.append("render.sh %s: exit %d: %s" % (label, rc, err))
                continue
            problems += check_mpijob(repo, yaml.safe_load(out), vals, "mpijob from " + label)
        bad = dict(values)
        del bad["NODES"]
        open(path, "w").write("".join("%s=%s\n" % kv for kv in bad.items()))
        rc, _, err = render(repo, path)
        if rc != 2 or "NODES" not in err:
            problems.append("render.sh: a values file without NODES gave exit %d (%s), not 2 naming NODES" % (rc, err))
    return problems


def top_level_entries(repo):
    """What the image needs of the repository: its tracked top-level files and folders, dot-files aside."""
    p = subprocess.run(["git", "-C", repo, "ls-files"], text=True, capture_output=True)
    names = {f.split("/", 1)[0] for f in p.stdout.split()} if p.returncode == 0 and p.stdout else set(os.listdir(repo))
    ignored = {l.strip() for l in open(os.path.join(repo, ".dockerignore")) if l.strip()}
    return {n for n in names if not n.startswith(".") and n not in ignored and not n.startswith("build")}


def check_files_section(repo, section_text):
    """Apptainer's %files ignores .dockerignore: it must name entries, never "." or a build output."""
    problems = []
    ignored = {l.strip().rstrip("*").rstrip(".") for l in open(os.path.join(repo, ".dockerignore")) if l.strip()}
    sources = [l.split()[0] for l in section_text.splitlines() if l.strip() and not l.strip().startswith("#")]
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
    if lib not in dockerfile_env(docker).get("LD_LIBRARY_PATH", "").split(":"):
        problems.append("Dockerfile: LD_LIBRARY_PATH does not hold %s (the EFA plugin for NCCL)" % lib)
    if lib not in def_env(apptainer).get("LD_LIBRARY_PATH", "").split(":"):
        problems.append("shardtrain.def: %%environment does not put %s on LD_LIBRARY_PATH" % lib)
    if not re.search(r"%s\b.*ld\.so\.conf\.d" % re.escape(lib), build):
        problems.append("build-image.sh: %s is not registered in /etc/ld.so.conf.d" % lib)
    return problems


def check(repo):
    v = versions(repo)
    return check_versions(repo, v) + check_recipes(repo, v) + check_eks(repo)


def self_test(repo):
    """A broken copy must fail the check, each break by name."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "repo")
        skip = lambda d, names: [n for n in names if d == repo and (n.startswith("build") or n in (".venv", ".git", "runs", "out", "dist"))]
        shutil.copytree(repo, copy, ignore=skip)
        def edit(rel, change):
            text = open(os.path.join(copy, rel)).read()
            open(os.path.join(copy, rel), "w").write(change(text))
        edit("containers/versions.env", lambda t: t.replace("EFA_INSTALLER_VERSION=1", "EFA_INSTALLER_VERSION=latest #"))
        os.remove(os.path.join(copy, "scripts/build.sh"))
        # The Apptainer file drifting from the Dockerfile: the whole checkout copied, the library path
        # and the shared-memory setting gone, the runtime step skipped.
        edit("containers/shardtrain.def", lambda t: re.sub(r"^%files\n.*?(?=^%)", "%files\n    . /src/shardtrain\n\n", t, flags=re.M | re.S))
        edit("containers/shardtrain.def", lambda t: re.sub(r"^.*(LD_LIBRARY_PATH|OMPI_MCA).*\n", "", t, flags=re.M))
        edit("containers/shardtrain.def", lambda t: t.replace("build-image.sh runtime", "build-image.sh slim"))
        # The MPIJob: workers without EFA, a launcher that restarts always, an unstaged script.
        edit("containers/eks/mpijob.template.yaml", lambda t: re.sub(r"^.*vpc\.amazonaws\.com/efa.*\n", "", t, flags=re.M))
        edit("containers/eks/mpijob.template.yaml", lambda t: t.replace("restartPolicy: OnFailure", "restartPolicy: Always", 1))
        edit("containers/build-image.sh", lambda t: t.replace('"$src/launch" ', ""))
        found = check(copy)
        for f in found:
            print("  self-test found: " + f)
        want = ["EFA_INSTALLER_VERSION=latest", "scripts/build.sh", "%files copies .", "%environment does not put",
                "environment OMPI_MCA_btl_vader_single_copy_mechanism", "never runs build-image.sh runtime",
                "vpc.amazonaws.com/efa=None", "Launcher restartPolicy 'Always'", "does not copy launch into the image"]
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
        print("containers: recipes in step, paths present, MPIJob renders valid; pinned: " + ", ".join("%s=%s" % kv for kv in v.items()))
    ok = not problems and (self_test(repo) if st else True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
