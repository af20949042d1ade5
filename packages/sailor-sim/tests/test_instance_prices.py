"""Provenance of the instance prices in ``data/instances.json``: every offer says where its
price was read and when, and the loader refuses a malformed ``verified`` flag."""

from __future__ import annotations

import copy
import re

import pytest

from sailor_sim import ValidationError
from sailor_sim.catalog.readers import read_data


def test_every_offer_names_its_source_url_and_date():
    from sailor_sim.catalog.instances import OFFERS

    for o in OFFERS:
        where = f"{o.provider} {o.instance}"
        assert o.url.startswith("https://"), where
        assert "recalled" not in o.note and "no network access" not in o.note, where
        # a dated source gives YYYY-MM[-DD]; an undated one must say so
        assert re.match(r"\d{4}-\d{2}", o.date) or "undated" in o.date, where
        if not o.verified:
            assert o.note.startswith("no published source found"), where


def test_quoted_spot_is_below_on_demand():
    from sailor_sim.catalog.instances import OFFERS

    for o in OFFERS:
        assert 0 < o.spot_usd_per_hour < o.on_demand_usd_per_hour, f"{o.provider} {o.instance}"


def test_sourced_list_prices_reach_the_price_catalog():
    from sailor_sim.catalog.prices import price_entry, price_per_gpu_hour

    # AWS p4d after the June 2025 reduction, GCP g2-standard-96 with its VM, Azure ND H100 v5
    assert price_per_gpu_hour("A100-40", "us-east-1a") == pytest.approx(21.957642 / 8)
    assert price_per_gpu_hour("L4", "us-central1-a") == pytest.approx(8.00333 / 8)
    price, source = price_entry("H100-80", "eastus-1")
    assert price == pytest.approx(98.32 / 8) and "2026-11-09" in source


def test_loader_rejects_a_verified_flag_that_is_not_a_boolean(monkeypatch):
    import sailor_sim.catalog.instances as instances

    doc = copy.deepcopy(read_data("instances.json", "sailor-instances/1"))
    doc["offers"][0]["verified"] = "no"
    monkeypatch.setattr(instances, "read_data", lambda name, fmt: doc)
    with pytest.raises(ValidationError, match="'verified' must be true or false") as e:
        instances._load()
    assert e.value.field == "verified"
