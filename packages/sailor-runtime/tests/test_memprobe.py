"""``engine.rank.memprobe`` on CPU: the step peak is the tensor bytes alive at once, whatever
thread frees them (gloo's worker threads drop the last reference to a collective's buffers,
and the profiler records no event on them)."""

import threading

import torch

from sailor_runtime.engine.rank.memprobe import StepPeak

MiB = 1 << 20


def _handed_to_a_thread(count: int) -> None:
    """``count`` 1 MiB tensors, one at a time, each freed by another thread."""
    for _ in range(count):
        box = [torch.empty(MiB, dtype=torch.uint8)]
        worker = threading.Thread(target=box.clear)
        worker.start()
        worker.join()


def test_frees_on_another_thread_are_counted():
    with StepPeak() as probe:
        _handed_to_a_thread(20)
    assert MiB <= probe.peak_bytes < 2 * MiB


def test_peak_is_the_most_alive_at_once():
    with StepPeak() as probe:
        kept = [torch.empty(MiB, dtype=torch.uint8) for _ in range(3)]
        del kept[1:]
        kept.append(torch.empty(3 * MiB, dtype=torch.uint8))
        del kept
    assert probe.peak_bytes == 4 * MiB
