"""What the side-by-side scripts (vs-htsim.py, vs-htsim-uec.py) share."""
import os
import subprocess
import sys
import tempfile
import time


def measure(argv, cwd):
    """Runs one process; returns its wall seconds, peak RSS (MiB) and
    output (stdout and stderr together). A failure ends the script with
    the output's tail."""
    out = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed ({proc.returncode}):\n{text[-2000:]}")
    return wall, usage.ru_maxrss / 1024.0, text


def require(needed):
    """Ends the script naming the first (path, what) whose path is missing."""
    for path, what in needed:
        if not os.path.exists(path):
            sys.exit(f"missing {path}: {what}")
