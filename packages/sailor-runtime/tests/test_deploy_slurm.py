"""Slurm (issue 19 item 4): a real one-node Slurm cluster (munged, slurmctld, slurmd from
Debian's slurm-wlm, started and stopped here) runs deploy/slurm/sailor.sbatch: planner and
controller on the first node, a worker per node through srun, its type from the node's GRES."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sailor_runtime.controller.checkpoints import latest_checkpoint_step
from sailor_runtime.errors import SailorRuntimeError
from sailor_runtime.slurm import gres_gpus
from sailor_testing import free_port

REPO = Path(__file__).resolve().parents[3]
DAEMONS = tuple(
    re.search(r"^SLURM_COMMANDS := (.+)$", (REPO / "Makefile").read_text(), re.M).group(1).split()
)
"""The Slurm commands this test runs: the Makefile's list, which `make test` installs."""


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:a100:4(S:0-1)", ("A100-40", 4)),
        ("gpu:a100-80gb:8", ("A100-80", 8)),
        ("gpu:h100:8,shard:h100:16", ("H100-80", 8)),
        ("gpu:gh200:1", ("GH-96", 1)),
        ("gpu:l40s-48gb:2(S:0)", ("L40S", 2)),
        ("gpu:cpu-2t:1", ("cpu-2t", 1)),
        ("(null)", ("CPU", 1)),
        ("", ("CPU", 1)),
    ],
)
def test_gpu_type_and_count_come_from_the_gres(gres, expected):
    assert gres_gpus(gres) == expected


def test_an_unknown_gres_gpu_type_names_the_fix():
    with pytest.raises(SailorRuntimeError, match="pass --gpu-type"):
        gres_gpus("gpu:b9000:2")


SLURM_CONF = """\
ClusterName=sailortest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 Gres=gpu:cpu-1t:1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


class OneNodeSlurm:
    """munged + slurmctld + slurmd on this machine, all files under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.node = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.up = False

    def start(self) -> None:
        d = self.dir
        for sub in ("state", "spool"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        ports = {"ctld_port": free_port(), "slurmd_port": free_port()}
        cpus = os.cpu_count() or 1
        self.conf.write_text(SLURM_CONF.format(node=self.node, dir=d, cpus=cpus, **ports))
        (d / "gres.conf").write_text(
            f"NodeName={self.node} Name=gpu Type=cpu-1t Count=1 File=/dev/null\n"
        )
        run = dict(check=True, capture_output=True, timeout=30, env=self.env)
        subprocess.run(["munged", "-S", f"{d}/munge.sock", f"--key-file={key}",
                        f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid",
                        f"--seed-file={d}/munged.seed", "-f"], **run)  # fmt: skip
        subprocess.run(["slurmctld", "-f", str(self.conf)], **run)
        subprocess.run(["slurmd", "-f", str(self.conf)], **run)
        deadline = time.monotonic() + 30
        while "idle" not in self.sinfo():
            if time.monotonic() > deadline:
                pytest.fail(f"the one-node Slurm cluster did not come up: {self.sinfo()}")
            time.sleep(0.5)
        self.up = True

    def sinfo(self) -> str:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                           timeout=30, env=self.env)  # fmt: skip
        return r.stdout

    def cancel_jobs(self) -> None:
        """Cancel every job of this throw-away cluster and wait (up to 30 s) for them to end:
        a job cut short by the test's timeout would otherwise run on after its daemons stop
        (proctrack/linuxproc leaves the processes of a job to slurmd, which is gone by then)."""
        if not self.up:
            return  # the cluster never came up: no job to cancel
        user = pwd.getpwuid(os.geteuid()).pw_name
        subprocess.run(["scancel", "--user", user], capture_output=True, timeout=30, env=self.env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                               timeout=30, env=self.env)  # fmt: skip
            if r.returncode != 0 or not r.stdout.strip():
                return
            time.sleep(0.5)

    def stop(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):  # each by the pid file it wrote
            pid_file = self.dir / f"{name}.pid"
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().split()[0]), 15)
                except (ProcessLookupError, ValueError):
                    pass


@pytest.mark.timeout(240)
def test_sbatch_trains_with_the_controller_on_the_first_node(tmp_path):
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing: apt-get install "
                    "slurm-wlm)")  # fmt: skip
    if os.geteuid() != 0:
        pytest.skip("a throw-away Slurm cluster runs its daemons as root here")
    slurm = OneNodeSlurm(tmp_path)
    run_dir = tmp_path / "run"
    # the port file of an earlier job in this run folder (a resubmission resumes from it): the
    # script read its dead port before the new planner, still starting, had removed it
    run_dir.mkdir()
    (run_dir / "planner.port").write_text(f"{free_port()}\n")
    try:
        slurm.start()
        env = {
            **slurm.env,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "SAILOR_RUN_DIR": str(run_dir), "SAILOR_STEPS": "6", "SAILOR_CHECKPOINT_EVERY": "3",
            "SAILOR_PORT": str(free_port()), "SAILOR_STORE_PORT": str(free_port()),
            "SAILOR_AGENT_PORT": str(free_port()),
        }  # fmt: skip
        job = subprocess.run(
            ["sbatch", "--wait", "--nodes=1", f"--output={tmp_path}/job.out",
             f"--chdir={REPO}", str(REPO / "deploy/slurm/sailor.sbatch")],
            capture_output=True, text=True, timeout=200, env=env,
        )  # fmt: skip
    finally:
        slurm.cancel_jobs()  # nothing left running when sbatch timed out or the test failed
        slurm.stop()
    out = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    logs = {p.name: p.read_text()[-1500:] for p in (run_dir / "logs").glob("*.log")}
    assert job.returncode == 0, (job.stderr, out, logs)
    assert "controller: DONE" in out, (out, logs)
    assert f"registered {slurm.node} (1x cpu-1t@local)" in logs["controller.log"], logs
    assert latest_checkpoint_step(run_dir / "checkpoints") == 6
    # the planner took a free port and wrote it once listening; the controller used that one
    port = (run_dir / "planner.port").read_text().strip()
    assert port.isdigit() and f":{port}" in logs["planner.log"] + logs["controller.log"], logs
