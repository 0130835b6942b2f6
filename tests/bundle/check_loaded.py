"""Reads LD_DEBUG=libs logs (DIR/NAME.PID) and fails if a program of the bundle loaded an object from
anywhere but the bundle, the torch/NVIDIA wheels (SITE_DIR) or glibc."""
import collections
import os
import re
import sys

log_dir, root, site = sys.argv[1:4]
# libc.so.6 (glibc >= 2.34's file names) or libc-2.31.so (older glibc's, e.g. Debian 11)
GLIBC = re.compile(r"^(ld-linux-x86-64|ld|libc|libm|libpthread|libdl|librt|libutil|libresolv|libanl|libnss_\w+)(-\d+\.\d+)?\.so(\.\d+)*$")
checked, bad, where = 0, [], collections.Counter()


def images(text):
    """(program, its log) for each image a process ran: an exec keeps the PID, so one file holds
    env, bash and the binary in turn. The loader prints an image's inits, then 'transferring
    control'; the last image also owns every later line (its dlopens)."""
    parts = re.split(r"^\s*\d+:\s*transferring control: (\S+)\s*$", text, flags=re.M)
    out = [(parts[i], parts[i - 1]) for i in range(1, len(parts), 2)]
    if out:
        out[-1] = (out[-1][0], out[-1][1] + parts[-1])
    return out


logs = [(name, prog, log) for name in sorted(os.listdir(log_dir))
        for prog, log in images(open(os.path.join(log_dir, name), errors="replace").read())]
for name, prog, log in logs:
    if not os.path.realpath(prog).startswith(root + "/"):
        continue  # python3, bash, sed: the launcher's helpers, not the bundle's programs
    checked += 1
    for path in re.findall(r"calling init: (\S+)", log):
        real = os.path.realpath(path)
        if real.startswith(root + "/"):
            where["bundle"] += 1
        elif real.startswith(site + "/"):
            where["torch/NVIDIA wheels"] += 1
        elif GLIBC.match(os.path.basename(real)):
            where["glibc"] += 1
        else:
            bad.append(f"{prog} ({name}) loaded {real}")
assert checked >= 5, f"only {checked} logs of bundled programs in {log_dir}"
if bad:
    sys.exit("objects from outside the bundle:\n  " + "\n  ".join(sorted(set(bad))))
print(f"{checked} processes of the bundle's programs; objects loaded from: " + ", ".join(f"{k} {v}" for k, v in where.items()))
