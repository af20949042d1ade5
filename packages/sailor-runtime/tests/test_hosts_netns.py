"""Several hosts for real (issue 19 item 3): network namespaces with veth pairs and private
addresses on one machine, made and removed here. The controller (and its planner, on the
namespace's loopback) runs in one, three workers in the others, every call with a token over
TLS. The controller listens on 0.0.0.0 with fixed ports; the workers listen on 0.0.0.0 too, so
the controller must dial each where its registration came from and each rank must reach the
store where its agent reached the controller; a fifth namespace on the same network, not a
worker, cannot open the store. One worker's link is cut mid-run: the run re-plans onto the
two left and finishes from the last checkpoint, nothing lost."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sailor_runtime.controller.checkpoints import latest_checkpoint_step

SUBNET = "10.231.77"
CONTROLLER_IP = f"{SUBNET}.1"
CONTROLLER_PORT, STORE_PORT, AGENT_PORT = 29400, 29401, 29500
STEPS, CHECKPOINT_EVERY = 40, 4
TOKEN = "netns-test-token"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


class Hosts:
    """Namespaces joined by a bridge in the controller's namespace: host 0 is the controller,
    1..n the workers. ``cut(i)`` takes host i's link down (its packets vanish: no reset)."""

    def __init__(self, n: int) -> None:
        tag = f"sl{os.getpid() % 100000}"
        self.names = [f"{tag}h{i}" for i in range(n + 1)]
        self.bridge_ports = [f"{tag}b{i}" for i in range(n + 1)]
        self.ifaces = [f"{tag}e{i}" for i in range(n + 1)]
        self.made: list[str] = []

    def build(self) -> None:
        for name in self.names:
            sh("ip", "netns", "add", name)
            self.made.append(name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        hub = self.names[0]
        sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", hub, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            port, iface = self.bridge_ports[i], self.ifaces[i]
            sh("ip", "link", "add", port, "netns", hub, "type", "veth", "peer", "name", iface,
               "netns", name)  # fmt: skip
            sh("ip", "-n", hub, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", name, "addr", "add", f"{self.ip(i)}/24", "dev", iface)
            sh("ip", "-n", name, "link", "set", iface, "up")

    def ip(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def cut(self, i: int) -> None:
        sh("ip", "-n", self.names[0], "link", "set", self.bridge_ports[i], "down")

    def connects(self, i: int, host: str, port: int) -> bool:
        """Does a TCP connection from host i to host:port open (within 2 s)?"""
        probe = f"import socket; socket.create_connection(({host!r}, {port}), timeout=2)"
        cmd = ["ip", "netns", "exec", self.names[i], sys.executable, "-c", probe]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0

    def popen(self, i: int, args: list[str], log: Path, **env: str) -> subprocess.Popen:
        cmd = ["ip", "netns", "exec", self.names[i], sys.executable, *args]
        with open(log, "wb") as out:
            return subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **env}, start_new_session=True,
            )  # fmt: skip

    def remove(self) -> None:
        for name in reversed(self.made):  # deleting a namespace deletes its veth ends too
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def namespaces_or_skip() -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2's `ip` command is not installed (it builds the namespaces)")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root")
    probe = f"slprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, timeout=30)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {made.stderr.decode().strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, 15)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()


def wait_for(predicate, timeout_s: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            tails = {p.name: p.read_text()[-1500:] for p in sorted(logs.glob("*.log"))}
            pytest.fail(f"timed out waiting for {what}; logs: {tails}")
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_three_hosts_over_tls_survive_a_cut_link(tmp_path, make_certificate):
    namespaces_or_skip()
    hosts = Hosts(4)  # 1-3 workers, 4 an outsider on the same network
    made = make_certificate(tmp_path, *(hosts.ip(i) for i in range(5)), "127.0.0.1")
    if made is None:
        pytest.skip("the openssl command is not installed (it makes the test certificate)")
    cert, key = made
    tls = ["--tls-cert", str(cert), "--tls-key", str(key), "--tls-ca", str(cert)]
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = tmp_path / "run"
    procs: list[subprocess.Popen] = []
    try:
        hosts.build()
        planner = hosts.popen(0, ["-m", "sailor_planner.cli", "serve", "--host", "127.0.0.1",
                                  "--port", "29300"], logs / "planner.log")  # fmt: skip
        procs.append(planner)
        controller = hosts.popen(0, [
            "-m", "sailor_runtime.cli", "controller", "--planner", "127.0.0.1:29300",
            "--host", "0.0.0.0", "--port", str(CONTROLLER_PORT),
            "--store-port", str(STORE_PORT), "--min-workers", "3", "--steps", str(STEPS),
            "--checkpoint-every", str(CHECKPOINT_EVERY), "--heartbeat-interval", "0.5",
            "--heartbeat-timeout", "3", "--debounce", "0.5", "--run-dir", str(run_dir), *tls,
        ], logs / "controller.log", SAILOR_TOKEN=TOKEN)  # fmt: skip
        procs.append(controller)
        for i in (1, 2, 3):
            procs.append(hosts.popen(i, [
                "-m", "sailor_runtime.cli", "worker",
                "--controller", f"{CONTROLLER_IP}:{CONTROLLER_PORT}", "--host", "0.0.0.0",
                "--port", str(AGENT_PORT), "--gpu-type", "CPU", "--worker-id", f"w{i}",
                "--workdir", str(tmp_path / "workers"), "--controller-timeout", "6", *tls,
            ], logs / f"w{i}.log", SAILOR_TOKEN=TOKEN, GLOO_SOCKET_IFNAME=hosts.ifaces[i],
                OMP_NUM_THREADS="1"))  # fmt: skip
        checkpoints = run_dir / "checkpoints"
        wait_for(lambda: latest_checkpoint_step(checkpoints) >= CHECKPOINT_EVERY, 150,
                 "the first checkpoint", logs)  # fmt: skip
        log_text = (logs / "controller.log").read_text()
        for i in (1, 2, 3):  # each agent recorded where its registration came from
            assert f"registered w{i} (1x CPU@local) at {hosts.ip(i)}:{AGENT_PORT}" in log_text
        victim = max(i for i in (1, 2, 3) if (tmp_path / "workers" / f"w{i}" / "gen-1").is_dir())
        # The outsider reaches the controller's port (token and TLS guard it) but not the
        # rendezvous store, whose keys torch would let anyone list and write; a node with
        # ranks does.
        assert hosts.connects(4, CONTROLLER_IP, CONTROLLER_PORT)
        assert not hosts.connects(4, CONTROLLER_IP, STORE_PORT)
        assert hosts.connects(victim, CONTROLLER_IP, STORE_PORT)
        cut_after = latest_checkpoint_step(checkpoints)
        hosts.cut(victim)
        assert controller.wait(150) == 0, (logs / "controller.log").read_text()[-3000:]
    finally:
        stop(procs)
        hosts.remove()
    text = (logs / "controller.log").read_text()
    assert f"w{victim} missed heartbeats" in text, text[-3000:]
    resumes = [int(s) for s in re.findall(r"assigned: .* \(resume after step (\d+)\)", text)]
    assert len(resumes) >= 2 and resumes[-1] >= cut_after, resumes
    assert latest_checkpoint_step(run_dir / "checkpoints") == STEPS and "controller: DONE" in text
    last = max(int(p.parent.name[4:]) for p in tmp_path.glob("workers/*/gen-*/rank-0.log"))
    [metrics] = tmp_path.glob(f"workers/*/gen-{last}/rank-0.metrics.jsonl")
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(resumes[-1] + 1, STEPS + 1))  # resumed where it was, to the end
    cut_off = (logs / f"w{victim}.log").read_text()
    assert "no controller" in cut_off, cut_off[-2000:]  # it stopped its ranks by itself
