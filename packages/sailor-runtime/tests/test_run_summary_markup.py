"""The re-plans table prints a rank's error text as text: gloo's messages start with
"[/__w/pytorch/...]", which rich would read as a closing markup tag (MarkupError crashed
`sailor run` after a finished run, seen in the `make demo` kill -9 run)."""

from __future__ import annotations

from sailor_runtime.run.summary import PHASES, replans_table


def test_replans_table_prints_gloo_errors_verbatim():
    reason = "rank 0 exited (RuntimeError: [/__w/pytorch/gloo/pair.cc:545] Read error)"
    table = replans_table(
        [{"generation": 2, "phases": dict.fromkeys(PHASES, 0.5), "total_s": 3.5,
          "resumed_from_step": 4, "reason": reason}]
    )  # fmt: skip
    assert "[/__w/pytorch/" in table and "resumed-after" in table
