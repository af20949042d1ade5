"""A cluster's own GPUs and prices from a file: ``sailor-sim --catalog FILE ...``,
``sailor-planner --catalog FILE ...`` or ``sailor_sim.load_catalog(FILE)``.

The file (JSON, or TOML by its ``.toml`` suffix) holds::

    format = "sailor-catalog/1"
    [[gpus]]      # entries as in sailor_sim/data/gpus.json ("source" optional: the file)
    name = "H100-NVL" ...
    fp8_tflops = 1670  # optional: dense FP8 peak (data/fp8.json's figure); none: no FP8
    architecture = "hopper"  # optional: calibrated family (ampere, hopper, blackwell);
                             # none: the name's prefix decides (H100-*), else uncalibrated
    [[prices]]    # $/GPU-hour of a GPU type, optionally per region and for spot
    gpu_type = "H100-NVL"
    usd_per_gpu_hour = 2.1
    region = "*"  # every region without its own price (the default)
    spot = false

Entries are read by the same strict readers as the built-in catalogs (unknown keys refused
naming the file, the entry and the field); a GPU of the file replaces a built-in one of the
same name, and a live Simulator drops what it cached for it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .. import inputs
from ..errors import ValidationError
from .readers import check_keys

FORMAT = "sailor-catalog/1"


def _read(path: Path) -> dict[str, Any]:
    if path.suffix == ".toml":
        try:
            return tomllib.loads(inputs.read_text(path, "catalog"))
        except tomllib.TOMLDecodeError as exc:
            raise ValidationError(f"{path} is not valid TOML ({exc})", field="catalog") from None
    return inputs.load_json(path, "catalog")


def load_catalog(path: str | Path) -> dict[str, list[str]]:
    """Register the GPUs and prices of a catalog file; returns the names of what it added."""
    from ..profiles.analytic import register_gpu_family
    from ..simulate.features.fp8 import register_fp8_peak
    from .gpus import TFLOPS, _gpu_from_entry, register_gpu, register_gpu_alias
    from .prices import set_price

    file = Path(path).expanduser()
    doc = _read(file)
    check_keys(doc, {"format"}, {"gpus", "prices", "note"}, str(file))
    if doc["format"] != FORMAT:
        raise ValidationError(f"{file}: format must be {FORMAT!r}", field="format")
    added: dict[str, list[str]] = {"gpus": [], "prices": []}
    for i, entry in enumerate(_list(doc, "gpus", file)):
        where = f"{file} gpus[{i}]"
        fp8 = family = None
        if isinstance(entry, dict):
            entry = {"source": f"user catalog {file.name}", **entry}
            fp8 = entry.pop("fp8_tflops", None)  # data/fp8.json's figure, for this GPU
            family = entry.pop("architecture", None)  # its calibration's family
        gpu, aliases = _gpu_from_entry(entry, where)
        if fp8 is not None:
            tflops = inputs.positive_number(fp8, f"{where}.fp8_tflops")
            register_fp8_peak(gpu.name, tflops * TFLOPS, entry["source"])
        if family is not None:
            try:
                register_gpu_family(gpu.name, family)
            except ValidationError as exc:
                raise ValidationError(f"{where}: {exc}", field="architecture") from None
        register_gpu(gpu)
        for alias in aliases:
            register_gpu_alias(alias, gpu.name)
        added["gpus"].append(gpu.name)
    for i, entry in enumerate(_list(doc, "prices", file)):
        where = f"{file} prices[{i}]"
        check_keys(entry, {"gpu_type", "usd_per_gpu_hour"}, {"region", "spot", "source"}, where)
        price = inputs.positive_number(entry["usd_per_gpu_hour"], f"{where}.usd_per_gpu_hour")
        spot = entry.get("spot", False)
        if not isinstance(spot, bool):
            raise ValidationError(f"{where}: 'spot' must be true or false", field="spot")
        set_price(entry["gpu_type"], price, str(entry.get("region", "*")),
                  str(entry.get("source", f"user catalog {file.name}")), spot=spot)  # fmt: skip
        added["prices"].append(entry["gpu_type"])
    return added


def _list(doc: dict[str, Any], key: str, file: Path) -> list:
    value = doc.get(key, [])
    if not isinstance(value, list):
        raise ValidationError(f"{file}: {key!r} must be a list of entries", field=key)
    return value
