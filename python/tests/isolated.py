"""Runs a test script in a fresh interpreter that cannot import one of the stand-ins (so that
the flatcake module under test falls back to its own copy of the engine's interface)."""

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def run_without(standin: str, script: str, timeout: float = 120) -> str:
    """Runs ``script`` (dedented) with every sys.path and PYTHONPATH entry naming ``standin``
    (e.g. "vllm_standin") removed and this directory on sys.path; the script must print "ok"
    last. Returns its stdout."""
    prelude = (f"import sys\nsys.path[:] = [p for p in sys.path if {standin!r} not in p]\n"
               f"sys.path.insert(0, {HERE!r})\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and standin not in p)
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script)],
                       capture_output=True, text=True, env=env, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith("ok"), p.stdout
    return p.stdout
