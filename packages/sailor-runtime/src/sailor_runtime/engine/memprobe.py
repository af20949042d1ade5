"""Peak tensor memory of a training step on any device, CPU included (benches, ``sailor run``).

``ru_maxrss`` on CPU counts the Python runtime, torch's libraries and freed-but-kept pages;
what the simulator's memory terms describe is tensor bytes. The torch profiler with
``profile_memory`` sees every allocation and free of the CPU (and CUDA) allocators; the running
sum of those events over a step is the step's transient peak above the tensors alive when it
began, which are counted directly (parameters, gradients, optimizer states).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


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

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._start
            return
        self._prof.__exit__(*exc)
        events = [e for e in self._prof.profiler.kineto_results.events() if e.name() == "[memory]"]
        events.sort(key=lambda e: e.start_ns())
        running = peak = 0
        for e in events:
            running += e.nbytes()
            peak = max(peak, running)
        self.peak_bytes = peak
