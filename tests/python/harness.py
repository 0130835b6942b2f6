"""What the end-to-end test scripts share: one line per check, and a free local port."""
import socket
import sys


def check(cond, msg):
    """ok: MSG, or FAIL: MSG and exit 1 (the test fails at its first broken check)."""
    if not cond:
        print("FAIL: " + msg, flush=True)
        sys.exit(1)
    print("ok: " + msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
