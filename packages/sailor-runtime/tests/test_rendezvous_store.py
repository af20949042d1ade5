"""The rendezvous store answers only clients holding their generation's key (issue 24, item 5):
nobody without it lists, reads or writes a key, a wrong key does not disturb a rendezvous in
progress, and ranks rendezvous and train through it. Real servers on 127.0.0.1:0, real rank
processes, real sockets; torch's TCPStore client plays the intruder of before."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from sailor_runtime.controller.assignments import build_assignments, store_key
from sailor_runtime.controller.controller import Controller, ControllerConfig
from sailor_runtime.engine.rendezvous import RendezvousStore, StoreRefused
from sailor_runtime.engine.storeserver import StoreServer, namespace_key, secret_keys
from sailor_sim import Job, Plan, Replica, Stage

JOB = Job.create("tiny-gpt", 8, 32)
SECRET = os.urandom(16).hex()


@pytest.fixture
def server():
    s = StoreServer.listen("127.0.0.1", 0, secret_keys(SECRET))
    yield s
    s.close()


def client(port: int, namespace: str = "gen-1", key: bytes | None = None, timeout_s=5.0):
    key = namespace_key(SECRET, namespace) if key is None else key
    return RendezvousStore("127.0.0.1", port, namespace, key, timedelta(seconds=timeout_s))


def intruder_tcpstore(port: int) -> str:
    """What a torch TCPStore client on loopback gets: before, it could set and list keys."""
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=3))
        store.set(f"{SECRET}/gen-1/poison", "x")
        return "wrote"
    except Exception as exc:  # torch raises DistStoreError / RuntimeError subclasses
        return type(exc).__name__


# ---- (2) no key, a wrong key, another generation's key: nothing listed, read or written -------
def test_a_client_without_the_key_cannot_list_read_or_write(server):
    owner = client(server.port)
    owner.set("rank0/addr", b"10.0.0.1:1234")
    assert intruder_tcpstore(server.port) != "wrote"
    with pytest.raises(StoreRefused):
        client(server.port, key=os.urandom(32))  # a guessed key
    with pytest.raises(StoreRefused):
        client(server.port, key=namespace_key("another run", "gen-1"))
    # the key of generation 2 opens generation 2 only: generation 1's keys are not there
    other = client(server.port, "gen-2")
    assert not other.check(["rank0/addr"]) and other.num_keys() == 0
    other.set("rank0/addr", b"poison")
    assert owner.get("rank0/addr") == b"10.0.0.1:1234" and owner.num_keys() == 1
    assert server.refused >= 3


def test_garbage_and_silence_are_refused_and_the_store_keeps_serving(server):
    for junk in (b"", b"GET / HTTP/1.1\r\n\r\n", os.urandom(4096), b"\xff\xff" + b"a" * 70):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            try:
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                while s.recv(4096):  # the server closes it (after at most a refusal byte)
                    pass
            except OSError:  # closed (reset) before all of it was sent or read
                pass
    c = client(server.port)
    c.set("k", b"v")
    assert c.get("k") == b"v"


def test_a_forged_frame_after_the_handshake_ends_the_connection(server):
    c = client(server.port)
    c.set("k", b"v")
    # bytes injected into an authenticated connection carry no valid MAC
    c._channel.sock.sendall(b"\x00\x00\x00\x05" + b"\x00" * 32 + b"\x01abcd")
    with pytest.raises(dist.DistNetworkError):
        c.set("k", b"forged")
    assert client(server.port).get("k") == b"v"


# ---- the Store semantics torch's c10d relies on (HashStore as the reference) ------------------
def test_store_operations_match_torchs_hash_store(server):
    ours, ref = client(server.port), dist.HashStore()
    for store in (ours, ref):
        store.set("a", "1")
        assert store.add("n", 3) == 3 and store.add("n", -1) == 2
        store.set("b", b"\x00\xff")
    assert ours.get("a") == ref.get("a") and ours.get("n") == ref.get("n") == b"2"
    assert ours.get("b") == ref.get("b") == b"\x00\xff"
    for args in [("c", "", "x"), ("c", "y", "z"), ("c", "x", "w"), ("d", "q", "r")]:
        assert ours.compare_set(*args) == ref.compare_set(*args), args
    assert ours.check(["a", "c"]) and not ours.check(["a", "nope"])
    assert ours.delete_key("a") == ref.delete_key("a") is True
    assert ours.delete_key("a") == ref.delete_key("a") is False
    assert ours.num_keys() == ref.num_keys() == 3  # n, b, c ("d" was never set)
    ours.append("log", b"ab")
    ours.append("log", b"cd")
    assert ours.get("log") == b"abcd"
    ours.multi_set(["m1", "m2"], [b"1", b"2"])
    assert ours.multi_get(["m1", "m2"]) == [b"1", b"2"]


def test_get_and_wait_block_until_the_key_exists_or_the_timeout(server):
    waiter, writer = client(server.port, timeout_s=1.0), client(server.port)
    threading.Timer(0.3, lambda: writer.set("late", b"here")).start()
    t0 = time.monotonic()
    assert waiter.get("late") == b"here" and 0.2 < time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="timeout"):
        waiter.get("never")
    assert 0.9 < time.monotonic() - t0 < 3.0
    with pytest.raises(dist.DistStoreError):
        waiter.wait(["never"], timedelta(milliseconds=200))
    waiter.wait(["late"])


# ---- the controller's store ------------------------------------------------------------------
def test_the_controller_sends_a_generation_key_never_the_run_secret(tmp_path):
    cfg = ControllerConfig.for_job(job=JOB, steps=4, checkpoint_every=2, run_dir=tmp_path / "r",
                                   planner_address="127.0.0.1:9", min_workers=5)  # fmt: skip
    c = Controller(cfg)
    try:
        plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 1, 8),)),)).check(JOB)
        msg = build_assignments(c.cfg, 3, plan, {"w": [(0, 0)]}, c.store.port, c.run_secret)["w"]
        assert msg.store_prefix == "gen-3" and msg.store_key == store_key(3, c.run_secret)
        assert c.run_secret not in str(msg)
        assert intruder_tcpstore(c.store.port) != "wrote"
        ok = RendezvousStore("127.0.0.1", c.store.port, "gen-3", bytes.fromhex(msg.store_key))
        ok.set("k", b"v")
        with pytest.raises(StoreRefused):  # generation 3's key does not open generation 4
            RendezvousStore("127.0.0.1", c.store.port, "gen-4", bytes.fromhex(msg.store_key))
    finally:
        c.close()


# ---- (1) and (3): ranks rendezvous through it, undisturbed by wrong keys ----------------------
RANK = textwrap.dedent(
    """
    import sys
    from datetime import timedelta
    import torch, torch.distributed as dist
    from sailor_runtime.engine.rendezvous import RendezvousStore
    port, rank, world, key = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = RendezvousStore("127.0.0.1", port, "gen-1", bytes.fromhex(key), timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    x = torch.full((3,), float(rank + 1))
    dist.all_reduce(x)
    sub = dist.new_group([0, 1])
    if rank < 2:
        y = torch.ones(1)
        dist.all_reduce(y, group=sub)
        assert y.item() == 2.0
    dist.barrier()
    assert x.tolist() == [world * (world + 1) / 2] * 3, x
    dist.destroy_process_group()
    """
)


@pytest.mark.timeout(240)
def test_ranks_rendezvous_while_wrong_keys_knock(server, tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    world, key = 4, namespace_key(SECRET, "gen-1").hex()
    stop, attempts = threading.Event(), []

    def knock() -> None:
        while not stop.is_set():
            try:
                client(server.port, key=os.urandom(32), timeout_s=2)
            except StoreRefused:
                attempts.append("refused")
            attempts.append(intruder_tcpstore(server.port))

    knocker = threading.Thread(target=knock, daemon=True)
    knocker.start()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(server.port), str(r), str(world), key],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    try:
        outs = [p.communicate(timeout=200)[0] for p in procs]
    finally:
        stop.set()
        for p in procs:
            p.kill()
        knocker.join(10)
    assert [p.returncode for p in procs] == [0] * world, outs
    assert "refused" in attempts and "wrote" not in attempts
    assert server.refused >= 2


@pytest.mark.timeout(300)
def test_local_ranks_train_through_the_store(tmp_path):
    """launch_local hosts the store; the ranks' config carries their namespace's key only,
    in a file only its owner reads."""
    from sailor_runtime.engine.launch import start_local

    plan = Plan((Stage(0, 7, (Replica("CPU", "local", 1, 4, 1),) * 2),)).check(JOB)
    run = start_local(JOB, plan, steps=2, checkpoint_dir=tmp_path / "ck", log_dir=tmp_path)
    codes = run.wait(240)
    logs = "".join(p.read_text()[-2000:] for p in sorted(Path(tmp_path).glob("rank*.log")))
    assert codes == [0, 0], logs
    config = run.workdir / "train.json"
    assert config.stat().st_mode & 0o077 == 0


def test_a_store_that_goes_away_fails_the_call(server):
    c = client(server.port)
    c.set("k", b"v")
    server.close()
    with pytest.raises(dist.DistNetworkError, match="gone"):
        c.get("k")
