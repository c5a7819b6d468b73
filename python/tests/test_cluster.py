"""flatcake.connect over a two-node cluster (docs/cluster.md): a client of one node's daemon
writes and reads the whole cluster. The test starts its own etcd (Debian etcd-server) on free
127.0.0.1 ports with a temporary data directory, and two `flatcake serve --etcd` daemons."""

import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
import torch

import flatcake
from conftest import flatcake_bin

pytestmark = pytest.mark.skipif(
    not getattr(flatcake._core, "has_daemon_client", False) or shutil.which("etcd") is None,
    reason="built without the daemon, or no etcd binary (Debian etcd-server)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url):
    out = subprocess.run([flatcake_bin(), "cluster", "status", "--etcd", url, "--cluster", "py",
                          "--json"], capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout) if out.returncode == 0 else None


@pytest.fixture
def cluster(tmp_path):
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    procs = []
    etcd_log = open(tmp_path / "etcd.log", "w")
    procs.append(subprocess.Popen(
        ["etcd", "--name", "t", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"t=http://127.0.0.1:{peer}", "--log-level", "warn"],
        stdout=etcd_log, stderr=subprocess.STDOUT))
    sockets = {}
    for name in ("a", "b"):
        pool = tmp_path / f"pool-{name}"
        pool.mkdir()
        sockets[name] = str(tmp_path / f"{name}.sock")
        log = open(tmp_path / f"{name}.log", "w")
        procs.append(subprocess.Popen(
            [flatcake_bin(), "serve", "--socket", sockets[name], "--dram-bytes", "32M",
             "--ssd-dir", str(pool), "--ssd-bytes", "128M", "--ssd-file-bytes", "16M",
             "--etcd", url, "--cluster", "py", "--node-name", name, "--lease-ttl", "2"],
            stdout=log, stderr=subprocess.STDOUT))
    deadline = time.time() + 30
    while True:
        st = status(url)
        if st and st["healthy"] == 2 and all(os.path.exists(s) for s in sockets.values()):
            break
        if time.time() > deadline:
            for p in procs:
                p.kill()
            raise AssertionError("the cluster did not come up: " +
                                 " | ".join((tmp_path / f).read_text()[-400:]
                                            for f in ("etcd.log", "a.log", "b.log")))
        time.sleep(0.1)
    yield url, sockets, procs
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def blocks_of(keys, layout):
    return [torch.tensor(list(k.encode()) * (layout.block_bytes // len(k) + 1),
                         dtype=torch.uint8)[:layout.block_bytes] for k in keys]


def test_a_client_of_one_node_reads_and_writes_the_whole_cluster(cluster):
    url, sockets, procs = cluster
    layout = flatcake.KvLayout(4, 2, 4096)
    sessions = {f"session-{i}": [f"session-{i}/block-{j}" for j in range(8)] for i in range(16)}
    time.sleep(1.5)  # the clients' view of the members is the daemons' (refreshed each second)
    with flatcake.connect(sockets["a"], tenant="t") as a:
        for name, keys in sessions.items():
            assert a.put(keys, layout, blocks_of(keys, layout), session=name).written == 8
    # Sessions spread over both nodes by their first key.
    used = {m["name"]: m["dram_used_bytes"] + m["ssd_used_bytes"] for m in status(url)["members"]}
    deadline = time.time() + 10
    while min(used.values()) == 0 and time.time() < deadline:  # use is renewed every TTL/3
        time.sleep(0.2)
        used = {m["name"]: m["dram_used_bytes"] + m["ssd_used_bytes"]
                for m in status(url)["members"]}
    assert used["a"] > 0 and used["b"] > 0, used
    # Every session, through the other node, byte for byte.
    with flatcake.connect(sockets["b"], tenant="t") as b:
        for name, keys in sessions.items():
            assert b.lookup(keys).leading_hits == 8, name
            dst = [torch.zeros(layout.block_bytes, dtype=torch.uint8) for _ in keys]
            got = b.get(keys, layout, dst)
            assert got.hits == 8, name
            assert all(torch.equal(x, y) for x, y in zip(blocks_of(keys, layout), dst)), name
        # Another tenant sees none of it, on either node.
        with flatcake.connect(sockets["b"], tenant="other") as o:
            assert all(o.lookup(keys).leading_hits == 0 for keys in sessions.values())
    # Node b killed: through a, its sessions are misses (no error, no wrong byte); a's are whole.
    procs[2].send_signal(signal.SIGKILL)
    procs[2].wait(10)
    with flatcake.connect(sockets["a"], tenant="t") as a:
        whole = missed = 0
        for name, keys in sessions.items():
            dst = [torch.zeros(layout.block_bytes, dtype=torch.uint8) for _ in keys]
            got = a.get(keys, layout, dst)
            for k, x, y, f in zip(keys, blocks_of(keys, layout), dst, got.found):
                if f:
                    assert torch.equal(x, y), k
            whole += got.hits == 8
            missed += got.hits == 0
        assert whole + missed == len(sessions)
        assert whole > 0 and missed > 0
