"""One line of the per-step metrics file (JSON lines, written by the metrics rank).

Throughput figures use the simulator's definitions (``sailor_sim.simulate.metrics``), so the
measured
MFU of a run and the simulator's predicted MFU are the same quantity: model FLOPs per token
6N + 12 L H Q T (PaLM, Appendix B) times tokens per second, over the plan's dense peak at the
precision the step computes in (bf16/fp16 under autocast, else the job's dtype).
"""

from __future__ import annotations

import resource

import torch

from sailor_sim import Job, Plan, model_flops_per_token, plan_peak_flops

_AUTOCAST_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated bytes on a CUDA device; the process's peak RSS on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class StepMeter:
    def __init__(self, job: Job, plan: Plan, autocast: torch.dtype | None, device) -> None:
        self.job, self.plan, self.device = job, plan, device
        self.tokens_per_step = job.global_batch_size * job.sequence_length
        self.flops_per_token = model_flops_per_token(job.model, job.sequence_length)
        dtype = _AUTOCAST_NAMES.get(autocast, job.dtype)
        self.peak_flops = plan_peak_flops(plan, dtype)
        self.gpus = plan.num_gpus

    def line(self, step, loss, grad_norm, lr, dt, consumed, eval_loss=None) -> dict:
        tokens_per_s = self.tokens_per_step / dt
        achieved = tokens_per_s * self.flops_per_token
        out = {
            "step": step,
            "loss": loss,
            "grad_norm": grad_norm,
            "lr": lr,
            "iteration_time_s": dt,
            "samples_per_s": self.job.global_batch_size / dt,
            "tokens_per_s": tokens_per_s,
            "model_tflops_per_gpu": achieved / self.gpus / 1e12,
            "mfu": achieved / self.peak_flops if self.peak_flops > 0 else None,
            "consumed_samples": consumed,
            "peak_memory_bytes": peak_memory_bytes(self.device),
            "world_size": self.gpus,
            "plan": self.plan.describe(),
        }
        if eval_loss is not None:
            out["eval_loss"] = eval_loss
        return out
