"""A ``tune --jobs N`` worker ends when the process that started it dies, however it dies: an
orphaned worker would go on claiming runs of the study (``workers._die_with_parent``)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap

import pytest

# The parent starts a worker the way ``run_workers`` does (a spawned process that first calls
# ``_die_with_parent``), prints the worker's pid once the worker has called it, and waits.
PARENT = textwrap.dedent(
    """
    import multiprocessing
    import os
    import signal
    import sys

    from torch_mars.train.study.workers import _die_with_parent


    def worker(ready):
        _die_with_parent()
        ready.send(os.getpid())
        signal.pause()


    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        receive, send = context.Pipe(duplex=False)
        context.Process(target=worker, args=(send,)).start()
        print(receive.recv(), flush=True)
        signal.pause()
    """
)


@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and hasattr(os, "pidfd_open")),
    reason="the parent-death signal is Linux's prctl(PR_SET_PDEATHSIG); waiting needs a pidfd",
)
def test_a_worker_dies_with_its_killed_parent(tmp_path):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        worker = os.pidfd_open(worker_pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    try:
        # Readable once the worker has ended. Blocks without a deadline: a worker that
        # outlived its parent would hang here (and the suite's runner reports it), where a
        # deadline would make the outcome depend on the machine's speed.
        readable, _, _ = select.select([worker], [], [])
        assert readable == [worker]
    finally:
        os.close(worker)
