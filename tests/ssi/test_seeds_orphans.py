"""Killing a command that runs SGD seeds in a process pool (``theory reproduce``, ``theory sgd
simulate --workers``) with SIGKILL leaves no worker behind (issue 13): the pool's workers ask the
kernel to kill them when their parent dies (``theory._util.die_with_parent``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)

# a child that runs simulate_seeds on a pool of 2 workers whose job is to write its pid and
# sleep (the real job replaced in the child only: the workers are forked from it)
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import sympy as sp
    import theory.ssi.sgd.seeds as S
    from theory.ssi import TiedNetwork

    def sleeper(args):
        open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
        time.sleep(300)

    S._job = sleeper
    z1, z2 = sp.symbols("z1 z2", real=True)
    model = TiedNetwork(z1 * z2, L=2, activation="square")
    S.simulate_seeds(model, 30, 0.2, [1, 2], reduced=True, workers=2, progress=False)
    """
)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped by whoever adopted it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_pool_workers_die_with_their_parent_under_sigkill(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120  # imports + numba on a loaded machine
        while len(workers) < 2 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.2)
            workers = [int(p.name) for p in tmp_path.iterdir()]
        assert len(workers) == 2, f"the pool did not start (child exit {child.poll()})"
        assert all(_alive(w) for w in workers)
        child.send_signal(signal.SIGKILL)
        child.wait()
        # the kernel signals at the parent's death; a few seconds is generous for the delivery
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "orphaned pool workers"
    finally:
        if child.poll() is None:
            child.kill()
        for w in workers:  # only the workers this test started (on failure)
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def test_die_with_parent_exits_when_the_parent_is_already_gone():
    """The race: a worker whose parent died before its request exits at once (exit status 1)."""
    code = "import os, sys; from theory._util import die_with_parent; "
    code += "die_with_parent(os.getppid() + int(sys.argv[1])); print('survived')"
    for wrong, expected in ((1, 1), (0, 0)):  # a wrong parent pid; the right one
        proc = subprocess.run(
            [sys.executable, "-c", code, str(wrong)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == expected, proc.stderr[-2000:]
        assert ("survived" in proc.stdout) == (expected == 0)
