"""Peak tensor memory of a training step on any device, CPU included (benches, ``sailor run``).

``ru_maxrss`` on CPU counts the Python runtime, torch's libraries and freed-but-kept pages;
what the simulator's memory terms describe is tensor bytes. The torch profiler with
``profile_memory`` sees every allocation and free of the CPU (and CUDA) allocators; the running
sum of those events over a step is the step's transient peak above the tensors alive when it
began, which are counted directly (parameters, gradients, optimizer states).

The profiler records an event only on the thread that started it, and a gloo collective's
worker thread often drops the last reference to the tensors it sent or received: the running
sum of the recorded events then never sees those frees and ratchets up by a random number of
buffers per step (sequence parallelism: 17-35 % run to run). On CPU the probe therefore also
turns on c10's process-wide allocation count (``FLAGS_caffe2_report_cpu_memory_usage``:
``ProfiledCPUMemoryReporter`` then counts every allocation and free, whatever thread does it)
and reads the peak from the ``total_allocated`` each recorded allocation event carries.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

import torch
from torch._C._profiler import _EventType


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct storages among ``tensors`` (views of one storage count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None or t.device.type == "meta":
            continue
        if hasattr(t, "to_local"):  # an FSDP DTensor: its local shard holds the memory
            t = t.to_local()
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def persistent_bytes(params: list[torch.Tensor], opt_state: dict) -> dict[str, int]:
    """Weights, gradients and optimizer states alive between steps, by term."""
    states = [
        v
        for st in opt_state.values()
        for v in st.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    ]
    return {
        "weights": tensor_bytes(params),
        "gradients": tensor_bytes(p.grad for p in params if p.grad is not None),
        "optimizer_states": tensor_bytes(states),
    }


class StepPeak:
    """``with StepPeak() as probe: <one step>``; then ``probe.peak_bytes``: the highest
    running sum of allocations minus frees during the step (bytes above the start)."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.cuda = device is not None and device.type == "cuda"
        self.device = device

    def __enter__(self) -> StepPeak:
        if self.cuda:  # the caching allocator keeps its own peak: no profiler needed
            torch.cuda.synchronize(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        from torch.profiler import ProfilerActivity, profile

        self._flag = _count_all_threads()
        self._flag.value = True
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._start
            return
        self._prof.__exit__(*exc)
        self._flag.value = False
        self.peak_bytes = _peak_above_start(self._prof.profiler.kineto_results)


def _count_all_threads() -> ctypes.c_bool:
    """c10's switch that makes the CPU allocator's reporter count every thread's allocations
    and frees (not only those of threads the profiler records)."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
    return ctypes.c_bool.in_dll(lib, "FLAGS_caffe2_report_cpu_memory_usage")


def _peak_above_start(results) -> int:
    """The highest process-wide count of CPU tensor bytes during the profile, above the count
    before its first allocation (frees of blocks allocated before the probe are not counted,
    as they were never added)."""
    allocations = []
    stack = list(results.experimental_event_tree())
    while stack:
        e = stack.pop()
        stack.extend(e.children)
        if e.tag == _EventType.Allocation and e.extra_fields.device.type == "cpu":
            allocations.append((e.start_time_ns, e.extra_fields))
    if not allocations:
        return 0
    allocations.sort(key=lambda a: a[0])
    first = allocations[0][1]
    start = first.total_allocated - first.alloc_size
    return max(0, max(f.total_allocated for _, f in allocations) - start)
