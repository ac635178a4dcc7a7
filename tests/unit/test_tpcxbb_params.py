"""Query parameters: the spec §3 defaults, validation, and building them from CLI options."""

from __future__ import annotations

import dataclasses

import pytest

from elastream.tpcxbb.params import QUERIES, Q01Params, Q02Params, Q03Params, Q04Params, Q15Params, default_params, \
    params_dict, params_from_options

pytestmark = pytest.mark.timeout(30)


def test_defaults_are_the_kits_values_of_section_3():
    assert Q01Params() == Q01Params(categories=(1, 2, 3), stores=(10, 20, 33, 40, 50), viewed_together_count=50,
                                    limit=100, window_s=None)
    assert Q02Params() == Q02Params(item_sk=10001, session_timeout_s=3600, limit=30, max_items_per_basket=5_000_000)
    assert Q03Params() == Q03Params(days_in_sec_before_purchase=864_000, views_before_purchase=5,
                                    purchased_items=(10001,), categories=(2, 3), limit=100)
    assert Q04Params() == Q04Params(session_timeout_s=3600, cart_page_type="dynamic", checkout_page_type="order")
    assert Q15Params() == Q15Params(start_date="2001-09-02", end_date="2002-09-02", store_sk=10)


def test_every_query_has_a_frozen_parameter_class_with_kit_names():
    assert list(QUERIES) == ["q01", "q02", "q03", "q04", "q15"]
    for name, cls in QUERIES.items():
        params = default_params(name)
        assert isinstance(params, cls)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(params, dataclasses.fields(cls)[0].name, None)
        for f in dataclasses.fields(cls):
            assert f.metadata["help"], (name, f.name)
    kit = {f.name: f.metadata["kit"] for f in dataclasses.fields(Q03Params)}
    assert kit["purchased_items"] == "q03_purchased_item_IN" and kit["limit"] == "q03_limit"


@pytest.mark.parametrize("bad", [
    lambda: Q01Params(stores=()), lambda: Q01Params(limit=0), lambda: Q01Params(window_s=0),
    lambda: Q01Params(viewed_together_count=-1), lambda: Q02Params(session_timeout_s=-5),
    lambda: Q03Params(categories=[2, 3]), lambda: Q03Params(views_before_purchase=0),
    lambda: Q04Params(cart_page_type=""), lambda: Q15Params(start_date="2001-13-01"),
    lambda: Q15Params(start_date="2003-01-01"),
])
def test_invalid_values_are_refused_with_the_field_named(bad):
    with pytest.raises(ValueError, match=r"Q\d\dParams"):
        bad()


def test_params_from_options_overrides_only_given_fields():
    options = {"stores": [10], "window_s": 3600, "limit": None, "data": "/tmp/x", "engine": "spark-batch"}
    assert params_from_options("q01", options) == Q01Params(stores=(10,), window_s=3600)
    assert params_from_options("q15", {"store_sk": 3}).store_sk == 3
    assert params_dict(Q03Params())["purchased_items"] == [10001]
    with pytest.raises(KeyError, match="unknown query 'q05'"):
        params_from_options("q05", {})
