"""Activation memory of one layer: bytes kept for backward and bytes passed on.

Two methods, both used on CUDA (the allocator is the reference, the hooks a cross-check):

* Tensor accounting (any device): ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor
  autograd saves for backward during the forward. Bytes = the sum over *unique storages* (a view
  keeps its whole storage alive, and two views of one storage cost it once), excluding the
  layer's parameters (weights are counted as weights, not activations). The layer's input is
  counted when the layer saves it, as ``ModelSpec.stash_terms`` does; a constant every layer
  of a stage shares (an ALiBi bias, ``zoo.layers.is_shared_constant``) is not: the stage holds
  it once, whatever its layer count.
* Allocator (CUDA): ``torch.cuda.memory_allocated`` after the forward minus before, minus the
  output's storage (which is handed on, not stashed), plus the inputs autograd saved (they were
  allocated before the forward, so the delta cannot see them: a block's first norm saves its
  fp32 residual input, 67 MB per OPT-350M block at 8 x 2048 tokens, which the delta missed for
  every layer, 1.6 GB of an H200 run's peak, runtime README); the peak over forward + backward
  from ``max_memory_allocated`` gives the transient working set.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..zoo.layers import is_shared_constant


@dataclass(frozen=True)
class ActivationMemory:
    out_bytes: int
    """Bytes handed to the next layer (0 for the head, whose output is the loss)."""
    stash_bytes: int
    """Bytes kept for backward: allocator delta on CUDA, tensor accounting on CPU."""
    stash_bytes_hooks: int
    """Bytes kept for backward by tensor accounting (equal to ``stash_bytes`` on CPU)."""
    peak_bytes: int | None
    """Allocator peak above the pre-forward level over forward + backward (CUDA only)."""


class SavedTensorBytes:
    """Sum of unique storages saved for backward, parameters excluded (see module doc)."""

    def __init__(self, exclude: nn.Module) -> None:
        self._exclude = {p.untyped_storage().data_ptr() for p in exclude.parameters()}
        self._storages: dict[int, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in self._exclude and not is_shared_constant(tensor):
            self._storages[ptr] = max(self._storages.get(ptr, 0), storage.nbytes())
        return tensor

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def total(self) -> int:
        return sum(self._storages.values())

    def saved_bytes_of(self, tensors) -> int:
        """Bytes of the storages among ``tensors`` (a layer's inputs) that were saved."""
        ptrs = {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}
        return sum(self._storages.get(ptr, 0) for ptr in ptrs)


def _output_bytes(out: torch.Tensor, kind: str) -> int:
    return 0 if kind == "head" else out.numel() * out.element_size()


def _backward(out: torch.Tensor) -> None:
    out.backward(None if out.dim() == 0 else torch.ones_like(out))


def measure_activation_memory(layer: nn.Module, inputs: tuple, kind: str) -> ActivationMemory:
    """One extra forward + backward of ``layer`` on ``inputs``, measured (see module doc)."""
    counter = SavedTensorBytes(layer)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        out = layer(*inputs)
    out_bytes = _output_bytes(out, kind)
    _backward(out)
    del out
    cuda = inputs[0].is_cuda
    if not cuda:
        return ActivationMemory(out_bytes, counter.total, counter.total, None)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = layer(*inputs)
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - base
    out_storage = out.untyped_storage().nbytes()
    _backward(out)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    stash = max(0, kept - out_storage) + counter.saved_bytes_of(inputs)
    return ActivationMemory(out_bytes, stash, counter.total, peak)
