"""Training data types and their sizes."""

from __future__ import annotations

from .errors import ValidationError

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
DTYPES = tuple(DTYPE_BYTES)


def check_dtype(dtype: str, field: str = "dtype") -> str:
    """Return the canonical dtype name, or raise naming the field."""
    if not isinstance(dtype, str):
        raise ValidationError(f"must be a dtype name, got {dtype!r:.60}", field=field)
    if dtype in DTYPE_BYTES:  # already canonical: the simulator's hot path
        return dtype
    canonical = dtype.lower().replace("float32", "fp32").replace("bfloat16", "bf16")
    canonical = canonical.replace("float16", "fp16")
    if canonical not in DTYPE_BYTES:
        raise ValidationError(
            f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}", field=field
        )
    return canonical


def dtype_bytes(dtype: str) -> int:
    size = DTYPE_BYTES.get(dtype)
    return size if size is not None else DTYPE_BYTES[check_dtype(dtype)]
